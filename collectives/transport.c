/* transport.c: what the algorithms need from any transport beyond posting
 * a message: waiting for requests (with the abort check and the idle hook),
 * abandoning them, and the paired send-receive.  It calls the transport
 * only through its ddl_tl_ops_t table.
 *
 * The wait loop spins briefly and then yields the CPU, because training
 * jobs often run more ranks than cores while a rank waits for a slower
 * peer; while it yields it calls the transport's idle hook (heartbeats and
 * the agents' notices, registered by init.c).
 */
#include "config.h"

#include <sched.h>

#include "ddl_int.h"

/* Iterations without progress before the wait loop starts to yield. */
#define DDL_SPIN_BEFORE_YIELD 64
/* Yielding iterations without progress before it sleeps until the
 * transport has an event (where the transport can: DDL_WAIT=block), at
 * most DDL_EVENT_WAIT_MS at a time so that aborts and the idle hook are
 * still seen. */
#define DDL_YIELD_BEFORE_SLEEP 1000
#define DDL_EVENT_WAIT_MS 1

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

ddl_status_t ddl_tl_waitall(ddl_comm_t *comm, void **reqs, int n)
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
        if (result != DDL_OK) {
            ddl_tl_abandon(comm, reqs, n);
            return result;
        }
        if (tl->ops->progress(tl))
            idle = 0;
        else if (++idle > DDL_SPIN_BEFORE_YIELD) {
            if (tl->idle)
                tl->idle();
            if (idle <= DDL_SPIN_BEFORE_YIELD + DDL_YIELD_BEFORE_SLEEP || !tl->ops->wait_event ||
                !tl->ops->wait_event(tl, DDL_EVENT_WAIT_MS))
                sched_yield();
        }
    }
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
