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
 *
 * Mapped neighbours: when the ranks of a node have allocated their buffers
 * with ddl_mem_alloc() (the transport's mapped memory), a rank whose right
 * neighbour is on its node and whose buffer lies in such an allocation
 * tells it so once per phase (a
 * 16-byte handshake), then sends only an 8-byte notice per segment; the
 * neighbour reduces (or, in the allgather, copies) the segment straight
 * from the mapped buffer, in the same order as from a received copy, so
 * the bits do not change.  At the end of the phase the reader tells the
 * owner it has finished reading, so that the owner never returns (and its
 * caller never rewrites the buffer) while a neighbour still reads it.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "ddl_int.h"
#include "log.h"

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

/* Tags besides the segments' own: the handshake of a phase and the reader's
 * "finished" (24-bit sequence space; the reduce's gather uses +0x800000). */
#define TAG_HELLO 0x400000u
#define TAG_DONE 0xc00000u

/* How segments cross this rank's two ring links in one phase. */
typedef struct {
    const char *left_view; /* non-NULL: read the left neighbour's data here */
    int notify_right;      /* the right neighbour reads ours: send notices */
    void *done_req;        /* notify_right: its "finished reading" */
    uint64_t done_buf, hello[2];
} links_t;

static const uint64_t notice_word = 0; /* what a notice carries: nothing */

static int same_node(const ddl_comm_t *comm, int a)
{
    int wa = comm->world_ranks ? comm->world_ranks[a] : a;
    return ddl_ctx.node_of[wa] == ddl_ctx.node_of[ddl_ctx.rank];
}

/* links_open: agree with both neighbours how this phase's segments cross
 * (only when mapped allocations exist, the same on every rank).  data is
 * this rank's buffer of bytes bytes, at the same offsets as everyone's. */
static ddl_status_t links_open(ddl_comm_t *comm, uint32_t seq, char *data, size_t bytes,
                               links_t *lk)
{
    const int n = comm->size, r = comm->rank, left = mod(r - 1, n), right = (r + 1) % n;
    const ddl_mapped_ops_t *mapped = comm->tl->mapped;
    memset(lk, 0, sizeof *lk);
    if (!mapped || mapped->count() == 0 || bytes < DDL_MAPPED_MIN_BYTES)
        return DDL_OK;
    void *reqs[2] = {NULL, NULL};
    ddl_status_t st = DDL_OK;
    uint64_t in[2] = {0, 0};
    if (same_node(comm, left))
        st = ddl_tl_irecv(comm, in, sizeof in, ddl_tag(comm, seq + TAG_HELLO, left), &reqs[0]);
    if (st == DDL_OK && same_node(comm, right)) {
        uint32_t serial = 0;
        uint64_t off = 0;
        if (mapped->at(data, bytes, &serial, &off)) {
            lk->notify_right = 1;
            st = ddl_tl_irecv(comm, &lk->done_buf, sizeof lk->done_buf,
                              ddl_tag(comm, seq + TAG_DONE, right), &lk->done_req);
        }
        lk->hello[0] = serial;
        lk->hello[1] = off;
        if (st == DDL_OK)
            st = ddl_tl_isend(comm, right, lk->hello, sizeof lk->hello,
                              ddl_tag(comm, seq + TAG_HELLO, r), &reqs[1]);
    }
    if (st == DDL_OK)
        st = ddl_tl_waitall(comm, reqs, 2);
    else
        ddl_tl_abandon(comm, reqs, 2);
    if (st == DDL_OK && in[0]) {
        int wl = comm->world_ranks ? comm->world_ranks[left] : left;
        lk->left_view = mapped->peer_view((uint32_t)in[0], wl, in[1]);
        if (!lk->left_view)
            st = ddl_fail(DDL_ERR_TRANSPORT, "rank %d's buffer (allocation #%u) is not "
                          "mapped here", wl, (unsigned)in[0]);
        else
            ddl_debug("ring: %zu bytes: reading rank %d's buffer in place (allocation #%u)",
                      bytes, wl, (unsigned)in[0]);
    }
    if (st != DDL_OK)
        ddl_tl_abandon(comm, &lk->done_req, 1);
    return st;
}

/* links_close: at the end of a phase that went well, tell the left
 * neighbour we have finished reading its buffer and wait until the right
 * one has finished reading ours; after a failure, just stop waiting. */
static ddl_status_t links_close(ddl_comm_t *comm, uint32_t seq, links_t *lk, ddl_status_t st)
{
    void *reqs[2] = {lk->done_req, NULL};
    lk->done_req = NULL;
    if (st == DDL_OK && lk->left_view)
        st = ddl_tl_isend(comm, mod(comm->rank - 1, comm->size), &notice_word,
                          sizeof notice_word, ddl_tag(comm, seq + TAG_DONE, comm->rank),
                          &reqs[1]);
    if (st == DDL_OK)
        return ddl_tl_waitall(comm, reqs, 2);
    ddl_tl_abandon(comm, reqs, 2);
    return st;
}

/* forward: hand segment j of block b to the right neighbour: the data, or
 * a notice that it is ready to be read from our buffer. */
static ddl_status_t forward(ddl_comm_t *comm, uint32_t seq, const links_t *lk, const segs_t *s,
                            char *data, size_t es, int b, int j, void **req)
{
    if (!lk->notify_right)
        return send_seg(comm, seq, s, data, es, b, j, req);
    return ddl_tl_isend(comm, (comm->rank + 1) % comm->size, &notice_word, sizeof notice_word,
                        ddl_tag(comm, seq, comm->rank), req);
}

/* post_unit: post the reduce-scatter's receive of unit u into its slot of
 * the window: the segment into tmp, or its notice into notes. */
static ddl_status_t post_unit(ddl_comm_t *comm, uint32_t seq, const links_t *lk,
                              const segs_t *s, char *tmp, uint64_t *notes, void **req, int u,
                              size_t es)
{
    const int n = comm->size, left = mod(comm->rank - 1, n), slot = u % ddl_tune.window;
    const uint64_t tag = ddl_tag(comm, seq, left);
    if (lk->left_view)
        return ddl_tl_irecv(comm, &notes[slot], sizeof notes[0], tag, req);
    size_t len;
    seg_at(s, mod(comm->rank - u / s->nseg - 2, n), u % s->nseg, &len);
    return ddl_tl_irecv(comm, tmp + (size_t)slot * s->seg * es, len * es, tag, req);
}

/* ring_reduce_scatter: data holds every block; afterwards block r (of this
 * rank r) holds the reduction over all ranks.  tmp holds
 * ddl_ring_scratch_bytes() bytes. */
static ddl_status_t ring_reduce_scatter(ddl_comm_t *comm, uint32_t seq, char *data,
                                        const layout_t *l, ddl_dtype_t dtype, ddl_op_t op,
                                        char *tmp)
{
    const int n = comm->size, r = comm->rank;
    const size_t es = ddl_dtype_size(dtype);
    const segs_t s = segs_of(l, es);
    const int total = (n - 1) * s.nseg, w = ddl_tune.window;
    const size_t slot_bytes = s.seg * es;
    void *rreq[DDL_RING_WINDOW_MAX] = {NULL};
    uint64_t notes[DDL_RING_WINDOW_MAX];
    links_t lk;
    ddl_status_t st = links_open(comm, seq, data, off(l, n) * es, &lk);
    if (st != DDL_OK)
        return st;
    void **sreq = calloc((size_t)total, sizeof *sreq);
    if (!sreq)
        return links_close(comm, seq, &lk,
                           ddl_fail(DDL_ERR_NOMEM, "reduce-scatter: out of memory for %d "
                                    "requests", total));

    /* unit u = step u / nseg, segment u % nseg; step k receives block
     * r-k-2, reduces it and sends it on at step k+1 */
    for (int u = 0; u < total && u < w && st == DDL_OK; u++)
        st = post_unit(comm, seq, &lk, &s, tmp, notes, &rreq[u % w], u, es);
    for (int j = 0; j < s.nseg && st == DDL_OK; j++)
        st = forward(comm, seq, &lk, &s, data, es, mod(r - 1, n), j, &sreq[j]);
    for (int u = 0; u < total && st == DDL_OK; u++) {
        const int k = u / s.nseg, j = u % s.nseg, slot = u % w, b = mod(r - k - 2, n);
        size_t len, o = seg_at(&s, b, j, &len);
        st = ddl_tl_waitall(comm, &rreq[slot], 1);
        if (st != DDL_OK)
            break;
        const char *in = lk.left_view ? lk.left_view + o * es : tmp + (size_t)slot * slot_bytes;
        ddl_reduce_local(data + o * es, in, len, dtype, op);
        if (k < n - 2)
            st = forward(comm, seq, &lk, &s, data, es, b, j, &sreq[u + s.nseg]);
        if (st == DDL_OK && u + w < total)
            st = post_unit(comm, seq, &lk, &s, tmp, notes, &rreq[slot], u + w, es);
    }
    if (st == DDL_OK)
        st = ddl_tl_waitall(comm, sreq, total);
    else {
        ddl_tl_abandon(comm, rreq, w);
        ddl_tl_abandon(comm, sreq, total);
    }
    free(sreq);
    return links_close(comm, seq, &lk, st);
}

/* ring_allgather: block r of data is final on rank r; afterwards every
 * block is, on every rank.  Step k receives block r-k-1 in place and
 * forwards it at step k+1. */
static ddl_status_t ring_allgather(ddl_comm_t *comm, uint32_t seq, char *data, const layout_t *l,
                                   size_t es)
{
    const int n = comm->size, r = comm->rank, left = mod(r - 1, n);
    const segs_t s = segs_of(l, es);
    const int total = (n - 1) * s.nseg, w = ddl_tune.window;
    uint64_t notes[DDL_RING_WINDOW_MAX];
    links_t lk;
    ddl_status_t st = links_open(comm, seq, data, off(l, n) * es, &lk);
    if (st != DDL_OK)
        return st;
    void **reqs = calloc(2 * (size_t)total, sizeof *reqs), **rreq = reqs, **sreq = reqs + total;
    if (!reqs)
        return links_close(comm, seq, &lk,
                           ddl_fail(DDL_ERR_NOMEM, "allgather: out of memory for %d requests",
                                    total));
    /* segments are received in place, all posted at once; notices (when
     * reading the left neighbour's buffer) into a window of slots */
    for (int u = 0; u < total && st == DDL_OK && (!lk.left_view || u < w); u++) {
        size_t len, o = seg_at(&s, mod(r - u / s.nseg - 1, n), u % s.nseg, &len);
        st = lk.left_view ? ddl_tl_irecv(comm, &notes[u % w], sizeof notes[0],
                                         ddl_tag(comm, seq, left), &rreq[u])
                          : ddl_tl_irecv(comm, data + o * es, len * es,
                                         ddl_tag(comm, seq, left), &rreq[u]);
    }
    for (int j = 0; j < s.nseg && st == DDL_OK; j++)
        st = forward(comm, seq, &lk, &s, data, es, r, j, &sreq[j]);
    for (int u = 0; u < total && st == DDL_OK; u++) {
        const int b = mod(r - u / s.nseg - 1, n);
        st = ddl_tl_waitall(comm, &rreq[u], 1);
        if (st == DDL_OK && lk.left_view) {
            size_t len, o = seg_at(&s, b, u % s.nseg, &len);
            memcpy(data + o * es, lk.left_view + o * es, len * es);
            if (u + w < total)
                st = ddl_tl_irecv(comm, &notes[u % w], sizeof notes[0],
                                  ddl_tag(comm, seq, left), &rreq[u + w]);
        }
        if (st == DDL_OK && u / s.nseg < n - 2)
            st = forward(comm, seq, &lk, &s, data, es, b, u % s.nseg, &sreq[u + s.nseg]);
    }
    if (st == DDL_OK)
        st = ddl_tl_waitall(comm, sreq, total);
    else
        ddl_tl_abandon(comm, reqs, 2 * total);
    free(reqs);
    return links_close(comm, seq, &lk, st);
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
