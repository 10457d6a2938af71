/* context.c: libddl's process-wide state that every layer reads: the
 * context (ddl_ctx), the ring's tuning (ddl_tune), each thread's scratch
 * buffer, and whether a communicator was aborted.  Nothing here talks to a
 * peer or to the agent, so the algorithms link without the rest of the
 * library (tests/unit/t_algos). */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>

#include "ddl_int.h"

ddl_ctx_t ddl_ctx = {.size = 1, .local_size = 1, .nnodes = 1, .agent_fd = -1};

ddl_tune_t ddl_tune = {.seg_bytes = DDL_SEGMENT_BYTES_DEFAULT, .window = DDL_RING_WINDOW_DEFAULT};

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
 * progress thread, and each only ever uses its own.  A thread's buffer is
 * freed by ddl_scratch_free or, at the latest, when the thread ends. */
typedef struct {
    void *p;
    size_t len;
} scratch_t;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void scratch_release(void *v)
{
    scratch_t *s = v;
    free(s->p);
    free(s);
}

static void scratch_key_make(void)
{
    scratch_key_ok = pthread_key_create(&scratch_key, scratch_release) == 0;
}

void *ddl_scratch(size_t bytes)
{
    pthread_once(&scratch_once, scratch_key_make);
    if (!scratch_key_ok)
        return NULL;
    scratch_t *s = pthread_getspecific(scratch_key);
    if (s && s->p && bytes <= s->len)
        return s->p;
    if (!s) {
        if (!(s = calloc(1, sizeof *s)))
            return NULL;
        if (pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    void *p = realloc(s->p, bytes ? bytes : 1);
    if (!p)
        return NULL;
    s->p = p;
    s->len = bytes;
    return p;
}

void ddl_scratch_free(void)
{
    if (!scratch_key_ok)
        return;
    scratch_t *s = pthread_getspecific(scratch_key);
    if (!s)
        return;
    pthread_setspecific(scratch_key, NULL);
    scratch_release(s);
}
