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
 *
 * Segmented pipeline: each block travels as segments of DDL_SEGMENT_BYTES.
 * A "unit" is one segment of one step.  In the reduce-scatter a rank keeps
 * DDL_RING_WINDOW receives posted ahead into scratch slots; as soon as one
 * segment has arrived and been reduced it is sent on (it is the segment
 * that the next step sends), while the following segments are already on
 * the wire: the reduction of segment j overlaps the transfer of j+1.  The
 * allgather posts its receives straight into their final place and
 * forwards each segment when it lands.  Sends and receives between two
 * neighbours are posted in unit order, and UCX matches messages of one
 * endpoint and tag in order, so one tag per collective suffices.
 */
#include "config.h"

#include <stdlib.h>
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
    return ddl_block_off(l->count, l->n, b);
}

static size_t max_block(const layout_t *l)
{
    return l->block ? l->block : l->count / (size_t)l->n + 1;
}

/* The segments of a layout: seg elements each, nseg per (largest) block. */
typedef struct {
    const layout_t *l;
    size_t seg;
    int nseg;
} segs_t;

static segs_t segs_of(const layout_t *l, size_t es)
{
    segs_t s = {l, ddl_tune.seg_bytes / es, 1};
    if (s.seg == 0)
        s.seg = 1;
    size_t mb = max_block(l);
    if (mb > s.seg)
        s.nseg = (int)((mb + s.seg - 1) / s.seg);
    return s;
}

/* seg_at: element offset and length of segment j of block b (the length
 * is 0 past the end of a smaller block). */
static size_t seg_at(const segs_t *s, int b, int j, size_t *len)
{
    size_t bo = off(s->l, b), bl = off(s->l, b + 1) - bo, so = (size_t)j * s->seg;
    *len = so >= bl ? 0 : (bl - so < s->seg ? bl - so : s->seg);
    return bo + (so < bl ? so : bl);
}

static int mod(int a, int n)
{
    return (a % n + n) % n;
}

/* send_seg: post the send of segment j of block b to the right neighbour. */
static ddl_status_t send_seg(ddl_comm_t *comm, uint32_t seq, const segs_t *s, char *data,
                             size_t es, int b, int j, void **req)
{
    size_t len, o = seg_at(s, b, j, &len);
    return ddl_tl_isend(comm, (comm->rank + 1) % comm->size, data + o * es, len * es,
                        ddl_tag(comm, seq, comm->rank), req);
}

/* ring_reduce_scatter: data holds every block; afterwards block r (of this
 * rank r) holds the reduction over all ranks.  tmp holds
 * ddl_ring_scratch_bytes() bytes. */
static ddl_status_t ring_reduce_scatter(ddl_comm_t *comm, uint32_t seq, char *data,
                                        const layout_t *l, ddl_dtype_t dtype, ddl_op_t op,
                                        char *tmp)
{
    const int n = comm->size, r = comm->rank, left = mod(r - 1, n);
    const size_t es = ddl_dtype_size(dtype);
    const segs_t s = segs_of(l, es);
    const int total = (n - 1) * s.nseg, w = ddl_tune.window;
    const size_t slot_bytes = s.seg * es;
    void *rreq[DDL_RING_WINDOW_MAX] = {NULL};
    void **sreq = calloc((size_t)total, sizeof *sreq);
    ddl_status_t st = DDL_OK;
    if (!sreq)
        return ddl_fail(DDL_ERR_NOMEM, "reduce-scatter: out of memory for %d requests", total);

    /* unit u = step u / nseg, segment u % nseg; step k receives block
     * r-k-2, reduces it and sends it on at step k+1 */
    for (int u = 0; u < total && u < w && st == DDL_OK; u++) {
        size_t len;
        seg_at(&s, mod(r - u / s.nseg - 2, n), u % s.nseg, &len);
        st = ddl_tl_irecv(comm, tmp + (size_t)u * slot_bytes, len * es,
                          ddl_tag(comm, seq, left), &rreq[u]);
    }
    for (int j = 0; j < s.nseg && st == DDL_OK; j++)
        st = send_seg(comm, seq, &s, data, es, mod(r - 1, n), j, &sreq[j]);
    for (int u = 0; u < total && st == DDL_OK; u++) {
        const int k = u / s.nseg, j = u % s.nseg, slot = u % w, b = mod(r - k - 2, n);
        size_t len, o = seg_at(&s, b, j, &len);
        st = ddl_tl_waitall(comm, &rreq[slot], 1);
        if (st != DDL_OK)
            break;
        ddl_reduce_local(data + o * es, tmp + (size_t)slot * slot_bytes, len, dtype, op);
        if (k < n - 2)
            st = send_seg(comm, seq, &s, data, es, b, j, &sreq[u + s.nseg]);
        if (st == DDL_OK && u + w < total) {
            size_t nlen;
            seg_at(&s, mod(r - (u + w) / s.nseg - 2, n), (u + w) % s.nseg, &nlen);
            st = ddl_tl_irecv(comm, tmp + (size_t)slot * slot_bytes, nlen * es,
                              ddl_tag(comm, seq, left), &rreq[slot]);
        }
    }
    if (st == DDL_OK)
        st = ddl_tl_waitall(comm, sreq, total);
    else {
        ddl_tl_abandon(rreq, w);
        ddl_tl_abandon(sreq, total);
    }
    free(sreq);
    return st;
}

/* ring_allgather: block r of data is final on rank r; afterwards every
 * block is, on every rank.  Step k receives block r-k-1 in place and
 * forwards it at step k+1. */
static ddl_status_t ring_allgather(ddl_comm_t *comm, uint32_t seq, char *data, const layout_t *l,
                                   size_t es)
{
    const int n = comm->size, r = comm->rank, left = mod(r - 1, n);
    const segs_t s = segs_of(l, es);
    const int total = (n - 1) * s.nseg;
    void **reqs = calloc(2 * (size_t)total, sizeof *reqs), **rreq = reqs, **sreq = reqs + total;
    ddl_status_t st = DDL_OK;
    if (!reqs)
        return ddl_fail(DDL_ERR_NOMEM, "allgather: out of memory for %d requests", total);
    for (int u = 0; u < total && st == DDL_OK; u++) {
        size_t len, o = seg_at(&s, mod(r - u / s.nseg - 1, n), u % s.nseg, &len);
        st = ddl_tl_irecv(comm, data + o * es, len * es, ddl_tag(comm, seq, left), &rreq[u]);
    }
    for (int j = 0; j < s.nseg && st == DDL_OK; j++)
        st = send_seg(comm, seq, &s, data, es, r, j, &sreq[j]);
    for (int u = 0; u < total && st == DDL_OK; u++) {
        st = ddl_tl_waitall(comm, &rreq[u], 1);
        if (st == DDL_OK && u / s.nseg < n - 2)
            st = send_seg(comm, seq, &s, data, es, mod(r - u / s.nseg - 1, n), u % s.nseg,
                          &sreq[u + s.nseg]);
    }
    if (st == DDL_OK)
        st = ddl_tl_waitall(comm, sreq, total);
    else
        ddl_tl_abandon(reqs, 2 * total);
    free(reqs);
    return st;
}

size_t ddl_ring_scratch_bytes(size_t es)
{
    size_t seg = ddl_tune.seg_bytes / es ? ddl_tune.seg_bytes / es : 1;
    return seg * es * (size_t)ddl_tune.window;
}

static void scale_own(ddl_comm_t *comm, char *data, const layout_t *l, ddl_dtype_t dtype,
                      ddl_op_t op, int divisor)
{
    if (op != DDL_AVG)
        return;
    size_t o = off(l, comm->rank), es = ddl_dtype_size(dtype);
    ddl_scale_local(data + o * es, off(l, comm->rank + 1) - o, dtype, divisor);
}

ddl_status_t ddl_ring_allreduce_part(ddl_comm_t *comm, void *buf, size_t count,
                                     ddl_dtype_t dtype, ddl_op_t op, int avg_divisor)
{
    layout_t l = {count, 0, comm->size};
    const size_t es = ddl_dtype_size(dtype);
    const uint32_t seq = comm->seq++;
    char *tmp = ddl_scratch(ddl_ring_scratch_bytes(es));
    if (!tmp)
        return ddl_fail(DDL_ERR_NOMEM, "allreduce: cannot allocate %zu bytes",
                        ddl_ring_scratch_bytes(es));
    ddl_status_t st = ring_reduce_scatter(comm, seq, buf, &l, dtype, op, tmp);
    if (st != DDL_OK)
        return st;
    scale_own(comm, buf, &l, dtype, op, avg_divisor);
    return ring_allgather(comm, seq, buf, &l, es);
}

ddl_status_t ddl_allreduce_ring(ddl_comm_t *comm, void *buf, size_t count, ddl_dtype_t dtype,
                                ddl_op_t op)
{
    return ddl_ring_allreduce_part(comm, buf, count, dtype, op, comm->size);
}

ddl_status_t ddl_ring_reduce_scatter_inplace(ddl_comm_t *comm, void *buf, size_t count,
                                             ddl_dtype_t dtype, ddl_op_t op)
{
    layout_t l = {count, 0, comm->size};
    char *tmp = ddl_scratch(ddl_ring_scratch_bytes(ddl_dtype_size(dtype)));
    if (!tmp)
        return ddl_fail(DDL_ERR_NOMEM, "reduce-scatter: cannot allocate %zu bytes",
                        ddl_ring_scratch_bytes(ddl_dtype_size(dtype)));
    return ring_reduce_scatter(comm, comm->seq++, buf, &l, dtype, op, tmp);
}

ddl_status_t ddl_ring_allgather_inplace(ddl_comm_t *comm, void *buf, size_t count, size_t es)
{
    layout_t l = {count, 0, comm->size};
    return ring_allgather(comm, comm->seq++, buf, &l, es);
}

ddl_status_t ddl_reduce_scatter_ring(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     size_t recvcount, ddl_dtype_t dtype, ddl_op_t op)
{
    const int n = comm->size, r = comm->rank;
    layout_t l = {recvcount * (size_t)n, recvcount, n};
    const size_t es = ddl_dtype_size(dtype), bytes = recvcount * es;
    const size_t tmpb = ddl_ring_scratch_bytes(es);
    const uint32_t seq = comm->seq++;
    int in_place = sendbuf == DDL_IN_PLACE;
    /* work on a copy unless in place: sendbuf is the caller's and const */
    char *scratch = ddl_scratch(tmpb + (in_place ? 0 : bytes * (size_t)n));
    if (!scratch)
        return ddl_fail(DDL_ERR_NOMEM, "reduce_scatter: cannot allocate %zu bytes",
                        tmpb + bytes * (size_t)n);
    char *data = in_place ? recvbuf : scratch + tmpb, *tmp = scratch;
    if (!in_place)
        memcpy(data, sendbuf, bytes * (size_t)n);
    ddl_status_t st = ring_reduce_scatter(comm, seq, data, &l, dtype, op, tmp);
    if (st != DDL_OK)
        return st;
    scale_own(comm, data, &l, dtype, op, n);
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
    const size_t es = ddl_dtype_size(dtype), tmpb = ddl_ring_scratch_bytes(es);
    const uint32_t seq = comm->seq++;
    const void *src = sendbuf == DDL_IN_PLACE ? recvbuf : sendbuf;
    /* the root works in recvbuf; the others in scratch */
    char *scratch = ddl_scratch(tmpb + (r == root ? 0 : count * es));
    if (!scratch)
        return ddl_fail(DDL_ERR_NOMEM, "reduce: cannot allocate %zu bytes", tmpb + count * es);
    char *data = r == root ? recvbuf : scratch + tmpb;
    if (data != src)
        memcpy(data, src, count * es);
    ddl_status_t st = ring_reduce_scatter(comm, seq, data, &l, dtype, op, scratch);
    if (st != DDL_OK)
        return st;
    scale_own(comm, data, &l, dtype, op, n);
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
