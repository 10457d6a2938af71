/* bcast_chain.c: pipelined chain broadcast for large messages: the ranks
 * form a chain starting at the root (root, root+1, ...), the buffer
 * travels as segments of DDL_SEGMENT_BYTES, and every rank forwards a
 * segment to the next as soon as it has it.  All links carry data at once,
 * so a broadcast of n bytes to p ranks takes about (p - 2 + n/seg) segment
 * times instead of the binomial tree's ceil(log2 p) whole-buffer times.
 * Receives are posted straight into the buffer, all at once, in order;
 * the sends of one rank go out in order, so one tag suffices. */
#include "config.h"

#include <stdlib.h>

#include "ddl_int.h"

ddl_status_t ddl_bcast_chain(ddl_comm_t *comm, void *buf, size_t bytes, int root)
{
    const int n = comm->size, v = (comm->rank - root + n) % n;
    const int prev = (comm->rank - 1 + n) % n, next = (comm->rank + 1) % n;
    const size_t seg = ddl_tune.seg_bytes;
    const int nseg = (int)((bytes + seg - 1) / seg);
    const uint32_t seq = comm->seq++;
    const int recv = v > 0, send = v < n - 1;
    char *data = buf;
    void **reqs = calloc(2 * (size_t)nseg, sizeof *reqs), **rreq = reqs, **sreq = reqs + nseg;
    ddl_status_t st = DDL_OK;
    if (!reqs)
        return ddl_fail(DDL_ERR_NOMEM, "bcast: out of memory for %d requests", nseg);
    for (int j = 0; j < nseg && recv && st == DDL_OK; j++) {
        size_t o = (size_t)j * seg, len = bytes - o < seg ? bytes - o : seg;
        st = ddl_tl_irecv(comm, data + o, len, ddl_tag(comm, seq, prev), &rreq[j]);
    }
    for (int j = 0; j < nseg && st == DDL_OK; j++) {
        size_t o = (size_t)j * seg, len = bytes - o < seg ? bytes - o : seg;
        if (recv)
            st = ddl_tl_waitall(comm, &rreq[j], 1);
        if (st == DDL_OK && send)
            st = ddl_tl_isend(comm, next, data + o, len, ddl_tag(comm, seq, comm->rank),
                              &sreq[j]);
    }
    if (st == DDL_OK)
        st = ddl_tl_waitall(comm, sreq, nseg);
    else
        ddl_tl_abandon(comm, reqs, 2 * nseg);
    free(reqs);
    return st;
}
