/* allreduce_ring.c: ring allreduce, the bandwidth-optimal algorithm: a
 * reduce-scatter of size-1 steps followed by an allgather of size-1 steps,
 * each rank sending to its right neighbour and receiving from its left.
 *
 * Chunk c is reduced along the ring starting at rank c and finished on rank
 * c-1, then copied unchanged to every rank, so the result is bit-identical
 * everywhere and depends only on the world size.  Every rank sends
 * 2*(N-1)/N of the buffer.
 */
#include "config.h"

#include "ddl_int.h"

/* chunk_off: first element of chunk c when count is split in n balanced
 * chunks (the first count % n chunks have one element more). */
static size_t chunk_off(size_t count, int n, int c)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n;
    return (size_t)c * base + ((size_t)c < rem ? (size_t)c : rem);
}

ddl_status_t ddl_allreduce_ring(ddl_comm_t *comm, void *buf, size_t count, ddl_dtype_t dtype,
                                ddl_op_t op)
{
    const int n = comm->size, r = comm->rank;
    const int right = (r + 1) % n, left = (r - 1 + n) % n;
    const size_t es = ddl_dtype_size(dtype);
    const uint32_t seq = comm->seq++;
    char *data = buf;
    ddl_status_t st = DDL_OK;

    size_t max_chunk = count / (size_t)n + 1;
    char *tmp = ddl_scratch(max_chunk * es);
    if (!tmp)
        return ddl_fail(DDL_ERR_NOMEM, "allreduce: cannot allocate %zu bytes", max_chunk * es);

    /* reduce-scatter: after step s, chunk (r-s-1) holds s+2 contributions */
    for (int s = 0; s < n - 1 && st == DDL_OK; s++) {
        int sc = (r - s + n) % n, rc = (r - s - 1 + n) % n;
        size_t soff = chunk_off(count, n, sc), slen = chunk_off(count, n, sc + 1) - soff;
        size_t roff = chunk_off(count, n, rc), rlen = chunk_off(count, n, rc + 1) - roff;
        st = ddl_tl_sendrecv(comm, seq, right, data + soff * es, slen * es, left, tmp, rlen * es);
        if (st == DDL_OK)
            ddl_reduce_local(data + roff * es, tmp, rlen, dtype, op);
    }

    /* this rank now owns the reduced chunk (r+1) % n */
    if (st == DDL_OK && op == DDL_AVG) {
        int own = (r + 1) % n;
        size_t off = chunk_off(count, n, own);
        ddl_scale_local(data + off * es, chunk_off(count, n, own + 1) - off, dtype, n);
    }

    /* allgather: pass the finished chunks around the ring */
    for (int s = 0; s < n - 1 && st == DDL_OK; s++) {
        int sc = (r + 1 - s + n) % n, rc = (r - s + n) % n;
        size_t soff = chunk_off(count, n, sc), slen = chunk_off(count, n, sc + 1) - soff;
        size_t roff = chunk_off(count, n, rc), rlen = chunk_off(count, n, rc + 1) - roff;
        st = ddl_tl_sendrecv(comm, seq, right, data + soff * es, slen * es, left,
                             data + roff * es, rlen * es);
    }
    return st;
}
