/* bcast_binomial.c: binomial-tree broadcast: in round k, every rank that
 * already has the data sends it to the rank 2^k further away (relative to
 * the root), so N ranks are reached in ceil(log2 N) rounds. */
#include "config.h"

#include "ddl_int.h"

ddl_status_t ddl_bcast_binomial(ddl_comm_t *comm, void *buf, size_t bytes, int root)
{
    const int n = comm->size;
    const int vr = (comm->rank - root + n) % n; /* rank relative to the root */
    const uint32_t seq = comm->seq++;
    ddl_status_t st;
    int mask = 1;

    /* receive from the parent: the rank that differs in our lowest set bit */
    while (mask < n) {
        if (vr & mask) {
            int src = (vr - mask + root) % n;
            void *req = NULL;
            st = ddl_tl_irecv(comm, buf, bytes, ddl_tag(comm, seq, src), &req);
            if (st == DDL_OK)
                st = ddl_tl_waitall(comm, &req, 1);
            if (st != DDL_OK)
                return st;
            break;
        }
        mask <<= 1;
    }
    /* send to the children below that bit */
    void *reqs[32];
    int nreq = 0;
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (vr + mask < n) {
            int dst = (vr + mask + root) % n;
            st = ddl_tl_isend(comm, dst, buf, bytes, ddl_tag(comm, seq, comm->rank), &reqs[nreq]);
            if (st != DDL_OK) {
                ddl_tl_waitall(comm, reqs, nreq);
                return st;
            }
            nreq++;
        }
    }
    return ddl_tl_waitall(comm, reqs, nreq);
}
