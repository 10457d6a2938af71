/* transport.c: what the algorithms need from any transport beyond posting
 * a message: waiting for requests (with the abort check and the idle hook),
 * abandoning them, and the paired send-receive.  It calls the transport
 * only through its ddl_tl_ops_t table.
 *
 * The wait loop spins briefly and then yields the CPU, because training
 * jobs often run more ranks than cores while a rank waits for a slower
 * peer; while it yields it calls the transport's idle hook (heartbeats and
 * the agents' notices, registered by init.c).  A background thread of
 * libddl's own (the checkpoint's) waits with ddl_tl_waitall_bg: no idle
 * hook, short sleeps, and a flag that makes it give up.
 */
#include "config.h"

#include <sched.h>
#include <time.h>

#include "ddl_int.h"

/* Iterations without progress before the wait loop starts to yield. */
#define DDL_SPIN_BEFORE_YIELD 64
/* Yielding iterations without progress before it sleeps until the
 * transport has an event (where the transport can: DDL_WAIT=block), at
 * most DDL_EVENT_WAIT_MS at a time so that aborts and the idle hook are
 * still seen. */
#define DDL_YIELD_BEFORE_SLEEP 1000
#define DDL_EVENT_WAIT_MS 1
/* A background thread's wait (ddl_tl_waitall_bg): rounds without progress
 * before it sleeps, and how long: the caller's own collectives progress the
 * same worker meanwhile. */
#define DDL_BG_SPIN 16
#define DDL_BG_SLEEP_NS 50000

void ddl_tl_abandon(ddl_comm_t *comm, void **reqs, int n)
{
    ddl_tl_t *tl = comm->tl;
    for (int i = 0; i < n; i++) {
        if (!reqs[i])
            continue;
        tl->ops->cancel(tl, reqs[i]);
        reqs[i] = NULL;
    }
}

/* wait_loop: ddl_tl_waitall (bg 0) and ddl_tl_waitall_bg (bg 1). */
static ddl_status_t wait_loop(ddl_comm_t *comm, void **reqs, int n, atomic_int *cancel, int bg)
{
    ddl_tl_t *tl = comm->tl;
    ddl_status_t result = DDL_OK;
    int idle = 0;
    for (;;) {
        int pending = 0;
        for (int i = 0; i < n; i++) {
            if (!reqs[i])
                continue;
            ddl_status_t st = tl->ops->test(tl, reqs[i], result == DDL_OK);
            if (st == DDL_INPROGRESS) {
                pending++;
                continue;
            }
            if (st != DDL_OK && result == DDL_OK)
                result = st;
            reqs[i] = NULL;
        }
        if (!pending)
            return result;
        if (result == DDL_OK && ddl_is_aborted(comm))
            result = ddl_comm_check_abort(comm);
        if (result == DDL_OK && cancel && atomic_load(cancel))
            result = ddl_fail(DDL_ERR_ABORTED, "the transfer was given up");
        if (result != DDL_OK) {
            ddl_tl_abandon(comm, reqs, n);
            return result;
        }
        if (tl->ops->progress(tl)) {
            idle = 0;
        } else if (bg && ++idle > DDL_BG_SPIN) {
            struct timespec ts = {0, DDL_BG_SLEEP_NS};
            nanosleep(&ts, NULL);
        } else if (!bg && ++idle > DDL_SPIN_BEFORE_YIELD) {
            if (tl->idle)
                tl->idle();
            if (idle <= DDL_SPIN_BEFORE_YIELD + DDL_YIELD_BEFORE_SLEEP || !tl->ops->wait_event ||
                !tl->ops->wait_event(tl, DDL_EVENT_WAIT_MS))
                sched_yield();
        }
    }
}

ddl_status_t ddl_tl_waitall(ddl_comm_t *comm, void **reqs, int n)
{
    return wait_loop(comm, reqs, n, NULL, 0);
}

ddl_status_t ddl_tl_waitall_bg(ddl_comm_t *comm, void **reqs, int n, atomic_int *cancel)
{
    return wait_loop(comm, reqs, n, cancel, 1);
}

ddl_status_t ddl_tl_sendrecv(ddl_comm_t *comm, uint32_t seq, int dst, const void *sbuf, size_t slen,
                             int src, void *rbuf, size_t rlen)
{
    void *reqs[2] = {NULL, NULL};
    ddl_status_t st = ddl_tl_irecv(comm, rbuf, rlen, ddl_tag(comm, seq, src), &reqs[0]);
    if (st != DDL_OK)
        return st;
    st = ddl_tl_isend(comm, dst, sbuf, slen, ddl_tag(comm, seq, comm->rank), &reqs[1]);
    if (st != DDL_OK) {
        ddl_tl_abandon(comm, reqs, 1);
        return st;
    }
    return ddl_tl_waitall(comm, reqs, 2);
}
