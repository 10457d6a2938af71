/* allreduce_rd.c: recursive-doubling allreduce, the latency-optimal
 * algorithm for small messages: log2(N) rounds in which partners r and
 * r^2^k exchange their whole buffers and reduce.
 *
 * Non-powers of two (MPICH's scheme): of the first 2*rem ranks (rem = N -
 * 2^floor(log2 N)), each even rank hands its data to the odd rank above and
 * waits; the 2^k remaining ranks double; the odd ranks hand the result back.
 * Partners always reduce the lower-ranked block first, so every rank ends
 * with the same bits.  Every rank sends log2(N) full buffers: use it for
 * small messages only.
 */
#include "config.h"

#include "ddl_int.h"

/* xfer: the whole buffer to (send) or from a folded partner, waited for. */
static ddl_status_t xfer(ddl_comm_t *comm, int send, int peer, void *buf, size_t bytes,
                         uint32_t seq)
{
    void *req = NULL;
    ddl_status_t st = send ? ddl_tl_isend(comm, peer, buf, bytes, ddl_tag(comm, seq, comm->rank),
                                          &req)
                           : ddl_tl_irecv(comm, buf, bytes, ddl_tag(comm, seq, peer), &req);
    return st == DDL_OK ? ddl_tl_waitall(comm, &req, 1) : st;
}

int ddl_pow2_below(int n)
{
    int p2 = 1;
    while (p2 * 2 <= n)
        p2 *= 2;
    return p2;
}

ddl_status_t ddl_fold_in(ddl_comm_t *comm, uint32_t seq, void *buf, void *tmp, size_t count,
                         ddl_dtype_t dtype, ddl_op_t op, int *v)
{
    const int r = comm->rank, rem = comm->size - ddl_pow2_below(comm->size);
    const size_t bytes = count * ddl_dtype_size(dtype);
    ddl_status_t st = DDL_OK;
    *v = r - rem;
    if (r < 2 * rem) {
        *v = r % 2 ? r / 2 : -1;
        st = xfer(comm, r % 2 == 0, r % 2 ? r - 1 : r + 1, r % 2 ? tmp : buf, bytes, seq);
        if (st == DDL_OK && r % 2)
            ddl_reduce_ordered(buf, tmp, count, dtype, op, 1);
    }
    return st;
}

ddl_status_t ddl_fold_out(ddl_comm_t *comm, uint32_t seq, void *buf, size_t bytes)
{
    const int r = comm->rank, rem = comm->size - ddl_pow2_below(comm->size);
    if (r >= 2 * rem)
        return DDL_OK;
    return xfer(comm, r % 2, r % 2 ? r - 1 : r + 1, buf, bytes, seq);
}

int ddl_fold_peer(int v, int rem)
{
    return v < rem ? v * 2 + 1 : v + rem;
}

ddl_status_t ddl_allreduce_rd(ddl_comm_t *comm, void *buf, size_t count, ddl_dtype_t dtype,
                              ddl_op_t op)
{
    const int n = comm->size, p2 = ddl_pow2_below(n), rem = n - p2;
    const size_t bytes = count * ddl_dtype_size(dtype);
    const uint32_t seq = comm->seq++;
    void *tmp = ddl_scratch(bytes);
    if (!tmp)
        return ddl_fail(DDL_ERR_NOMEM, "allreduce: cannot allocate %zu bytes", bytes);

    int vr; /* rank among the p2 participants, -1 if folded out */
    ddl_status_t st = ddl_fold_in(comm, seq, buf, tmp, count, dtype, op, &vr);
    if (st == DDL_OK && vr >= 0) {
        for (int mask = 1; mask < p2 && st == DDL_OK; mask <<= 1) {
            int vpeer = vr ^ mask, peer = ddl_fold_peer(vpeer, rem);
            st = ddl_tl_sendrecv(comm, seq, peer, buf, bytes, peer, tmp, bytes);
            if (st == DDL_OK)
                ddl_reduce_ordered(buf, tmp, count, dtype, op, vpeer < vr);
        }
        if (st == DDL_OK && op == DDL_AVG)
            ddl_scale_local(buf, count, dtype, n);
    }
    return st == DDL_OK ? ddl_fold_out(comm, seq, buf, bytes) : st;
}
