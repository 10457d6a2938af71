/* allreduce_ring.c: the ring algorithms, bandwidth-optimal: reduce-scatter
 * and allgather in n-1 steps each, every rank sending to its right
 * neighbour and receiving from its left; allreduce is one then the other,
 * reduce is the reduce-scatter and a gather of the blocks to the root.
 *
 * The buffer is cut in n blocks (balanced for allreduce and reduce, equal
 * for reduce-scatter and allgather); after the reduce-scatter rank r owns
 * the finished block r.  Block c is reduced along the ring in the fixed
 * order x[c+1] (op) x[c+2] (op) ... (op) x[c], then only copied, so the
 * result is bit-identical on every rank and depends only on the world
 * size.  Every rank sends 2(n-1)/n of the buffer for an allreduce.
 */
#include "config.h"

#include <string.h>

#include "ddl_int.h"

/* A block layout: block b covers elements [off(b), off(b+1)). */
typedef struct {
    size_t count; /* total elements */
    size_t block; /* 0: balanced split of count; else: every block this size */
    int n;
} layout_t;

static size_t off(const layout_t *l, int b)
{
    if (l->block)
        return (size_t)b * l->block;
    size_t base = l->count / (size_t)l->n, rem = l->count % (size_t)l->n;
    return (size_t)b * base + ((size_t)b < rem ? (size_t)b : rem);
}

static size_t max_block(const layout_t *l)
{
    return l->block ? l->block : l->count / (size_t)l->n + 1;
}

/* ring_reduce_scatter: data holds every block; afterwards block r (of this
 * rank r) holds the reduction over all ranks.  tmp holds one block. */
static ddl_status_t ring_reduce_scatter(ddl_comm_t *comm, uint32_t seq, char *data,
                                        const layout_t *l, ddl_dtype_t dtype, ddl_op_t op,
                                        char *tmp)
{
    const int n = comm->size, r = comm->rank;
    const size_t es = ddl_dtype_size(dtype);
    ddl_status_t st = DDL_OK;
    for (int s = 0; s < n - 1 && st == DDL_OK; s++) {
        int sb = ((r - s - 1) % n + n) % n, rb = ((r - s - 2) % n + n) % n;
        size_t soff = off(l, sb), slen = off(l, sb + 1) - soff;
        size_t roff = off(l, rb), rlen = off(l, rb + 1) - roff;
        st = ddl_tl_sendrecv(comm, seq, (r + 1) % n, data + soff * es, slen * es, (r - 1 + n) % n,
                             tmp, rlen * es);
        if (st == DDL_OK)
            ddl_reduce_local(data + roff * es, tmp, rlen, dtype, op);
    }
    return st;
}

/* ring_allgather: block r of data is final on rank r; afterwards every
 * block is, on every rank. */
static ddl_status_t ring_allgather(ddl_comm_t *comm, uint32_t seq, char *data, const layout_t *l,
                                   size_t es)
{
    const int n = comm->size, r = comm->rank;
    ddl_status_t st = DDL_OK;
    for (int s = 0; s < n - 1 && st == DDL_OK; s++) {
        int sb = ((r - s) % n + n) % n, rb = ((r - s - 1) % n + n) % n;
        size_t soff = off(l, sb), slen = off(l, sb + 1) - soff;
        size_t roff = off(l, rb), rlen = off(l, rb + 1) - roff;
        st = ddl_tl_sendrecv(comm, seq, (r + 1) % n, data + soff * es, slen * es, (r - 1 + n) % n,
                             data + roff * es, rlen * es);
    }
    return st;
}

static void scale_own(ddl_comm_t *comm, char *data, const layout_t *l, ddl_dtype_t dtype,
                      ddl_op_t op)
{
    if (op != DDL_AVG)
        return;
    size_t o = off(l, comm->rank), es = ddl_dtype_size(dtype);
    ddl_scale_local(data + o * es, off(l, comm->rank + 1) - o, dtype, comm->size);
}

ddl_status_t ddl_allreduce_ring(ddl_comm_t *comm, void *buf, size_t count, ddl_dtype_t dtype,
                                ddl_op_t op)
{
    layout_t l = {count, 0, comm->size};
    const size_t es = ddl_dtype_size(dtype);
    const uint32_t seq = comm->seq++;
    char *tmp = ddl_scratch(max_block(&l) * es);
    if (!tmp)
        return ddl_fail(DDL_ERR_NOMEM, "allreduce: cannot allocate %zu bytes", max_block(&l) * es);
    ddl_status_t st = ring_reduce_scatter(comm, seq, buf, &l, dtype, op, tmp);
    if (st != DDL_OK)
        return st;
    scale_own(comm, buf, &l, dtype, op);
    return ring_allgather(comm, seq, buf, &l, es);
}

ddl_status_t ddl_reduce_scatter_ring(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     size_t recvcount, ddl_dtype_t dtype, ddl_op_t op)
{
    const int n = comm->size, r = comm->rank;
    layout_t l = {recvcount * (size_t)n, recvcount, n};
    const size_t es = ddl_dtype_size(dtype), bytes = recvcount * es;
    const uint32_t seq = comm->seq++;
    int in_place = sendbuf == DDL_IN_PLACE;
    /* work on a copy unless in place: sendbuf is the caller's and const */
    char *scratch = ddl_scratch(bytes * (size_t)(in_place ? 1 : n + 1));
    if (!scratch)
        return ddl_fail(DDL_ERR_NOMEM, "reduce_scatter: cannot allocate %zu bytes",
                        bytes * (size_t)(n + 1));
    char *data = in_place ? recvbuf : scratch + bytes, *tmp = scratch;
    if (!in_place)
        memcpy(data, sendbuf, bytes * (size_t)n);
    ddl_status_t st = ring_reduce_scatter(comm, seq, data, &l, dtype, op, tmp);
    if (st != DDL_OK)
        return st;
    scale_own(comm, data, &l, dtype, op);
    memmove(recvbuf, data + (size_t)r * bytes, bytes);
    return DDL_OK;
}

ddl_status_t ddl_allgather_ring(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                size_t sendcount, ddl_dtype_t dtype)
{
    layout_t l = {sendcount * (size_t)comm->size, sendcount, comm->size};
    const size_t es = ddl_dtype_size(dtype);
    if (sendbuf != DDL_IN_PLACE)
        memcpy((char *)recvbuf + (size_t)comm->rank * sendcount * es, sendbuf, sendcount * es);
    return ring_allgather(comm, comm->seq++, recvbuf, &l, es);
}

ddl_status_t ddl_reduce_ring(ddl_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                             ddl_dtype_t dtype, ddl_op_t op, int root)
{
    const int n = comm->size, r = comm->rank;
    layout_t l = {count, 0, n};
    const size_t es = ddl_dtype_size(dtype), blk = max_block(&l) * es;
    const uint32_t seq = comm->seq++;
    const void *src = sendbuf == DDL_IN_PLACE ? recvbuf : sendbuf;
    /* the root works in recvbuf; the others in scratch */
    char *scratch = ddl_scratch(blk + (r == root ? 0 : count * es));
    if (!scratch)
        return ddl_fail(DDL_ERR_NOMEM, "reduce: cannot allocate %zu bytes", blk + count * es);
    char *data = r == root ? recvbuf : scratch + blk;
    if (data != src)
        memcpy(data, src, count * es);
    ddl_status_t st = ring_reduce_scatter(comm, seq, data, &l, dtype, op, scratch);
    if (st != DDL_OK)
        return st;
    scale_own(comm, data, &l, dtype, op);
    /* gather the finished blocks at the root */
    if (r != root) {
        void *req = NULL;
        size_t o = off(&l, r);
        st = ddl_tl_isend(comm, root, data + o * es, (off(&l, r + 1) - o) * es,
                          ddl_tag(comm, seq + 0x800000u, r), &req);
        return st == DDL_OK ? ddl_tl_waitall(comm, &req, 1) : st;
    }
    for (int b = 0; b < n && st == DDL_OK; b++) {
        if (b == root)
            continue;
        void *req = NULL;
        size_t o = off(&l, b);
        st = ddl_tl_irecv(comm, data + o * es, (off(&l, b + 1) - o) * es,
                          ddl_tag(comm, seq + 0x800000u, b), &req);
        if (st == DDL_OK)
            st = ddl_tl_waitall(comm, &req, 1);
    }
    return st;
}
