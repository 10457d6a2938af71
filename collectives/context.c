/* context.c: libddl's process-wide state that every layer reads: the
 * context (ddl_ctx), the ring's tuning (ddl_tune), each thread's scratch
 * buffer, and whether a communicator was aborted.  Nothing here talks to a
 * peer or to the agent, so the algorithms link without the rest of the
 * library (tests/unit/t_algos). */
#include "config.h"

#include <stdlib.h>

#include "ddl_int.h"

ddl_ctx_t ddl_ctx = {.size = 1, .local_size = 1, .nnodes = 1, .agent_fd = -1};

ddl_tune_t ddl_tune = {.seg_bytes = DDL_SEGMENT_BYTES_DEFAULT, .window = 4};

int ddl_is_aborted(ddl_comm_t *comm)
{
    return atomic_load_explicit(&comm->aborted, memory_order_acquire) ||
           atomic_load_explicit(&ddl_ctx.world.aborted, memory_order_acquire);
}

ddl_status_t ddl_comm_check_abort(ddl_comm_t *comm)
{
    if (!ddl_is_aborted(comm))
        return DDL_OK;
    /* the world's abort covers every communicator */
    ddl_comm_t *c =
        atomic_load_explicit(&comm->aborted, memory_order_acquire) ? comm : &ddl_ctx.world;
    while (atomic_load_explicit(&c->aborted, memory_order_acquire) == 2)
        ; /* the aborting thread is still writing the reason */
    return ddl_fail(DDL_ERR_ABORTED, "communicator aborted: %s", c->abort_reason);
}

/* One per thread: a collective runs in the caller's thread or in the
 * progress thread, and each only ever uses its own. */
static _Thread_local void *scratch;
static _Thread_local size_t scratch_len;

void *ddl_scratch(size_t bytes)
{
    if (bytes <= scratch_len && scratch)
        return scratch;
    void *p = realloc(scratch, bytes ? bytes : 1);
    if (!p)
        return NULL;
    scratch = p;
    scratch_len = bytes;
    return scratch;
}

void ddl_scratch_free(void)
{
    free(scratch);
    scratch = NULL;
    scratch_len = 0;
}
