/* allreduce_rabenseifner.c: Rabenseifner's allreduce for medium messages:
 * a reduce-scatter by recursive halving, then an allgather by recursive
 * doubling, so log2(p) steps each way (like recursive doubling) while every
 * rank sends only 2(p-1)/p of the buffer (like the ring).
 *
 * Non-powers of two: the ranks above the largest power of two p' are folded
 * in as in allreduce_rd.c (of the first 2*rem ranks each even one hands its
 * buffer to the odd one above and gets the result back at the end).  Among
 * the p' participants (virtual ranks v), the buffer is cut in p' balanced
 * blocks; in the halving step with distance d, partners v and v^d split
 * their current range of blocks: the lower one keeps the lower half.  At
 * the end v owns block v, reduced in a tree fixed by p' alone, with the
 * lower-ranked operand first, so the bits are the same on every rank.  The
 * doubling steps then copy the blocks back out, in the opposite order.
 */
#include "config.h"

#include "ddl_int.h"

ddl_status_t ddl_allreduce_rabenseifner(ddl_comm_t *comm, void *buf, size_t count,
                                        ddl_dtype_t dtype, ddl_op_t op)
{
    const int n = comm->size, r = comm->rank;
    const size_t es = ddl_dtype_size(dtype);
    const uint32_t seq = comm->seq++;
    char *data = buf;
    ddl_status_t st = DDL_OK;
    const int p2 = ddl_pow2_below(n), rem = n - p2;
    /* the most this rank receives: a folded partner's whole buffer, or half
     * of the blocks, rounded up */
    const size_t tmp_bytes = ((r < 2 * rem ? count : count / 2) + (size_t)p2) * es;
    char *tmp = ddl_scratch(tmp_bytes);
    if (!tmp)
        return ddl_fail(DDL_ERR_NOMEM, "allreduce: cannot allocate %zu bytes", tmp_bytes);

    int v; /* virtual rank among the p2 participants, -1 if folded out */
    st = ddl_fold_in(comm, seq, data, tmp, count, dtype, op, &v);
    if (st == DDL_OK && v >= 0) {
        /* [lo, hi): the blocks this rank is responsible for */
        int lo = 0, hi = p2;
        for (int d = p2 / 2; d >= 1 && st == DDL_OK; d /= 2) {
            const int vp = v ^ d, peer = ddl_fold_peer(vp, rem), mid = lo + (hi - lo) / 2;
            const int keep_lo = (v & d) ? mid : lo, keep_hi = (v & d) ? hi : mid;
            const int give_lo = (v & d) ? lo : mid, give_hi = (v & d) ? mid : hi;
            size_t ko = ddl_block_off(count, p2, keep_lo), kn = ddl_block_off(count, p2, keep_hi) - ko;
            size_t go = ddl_block_off(count, p2, give_lo), gn = ddl_block_off(count, p2, give_hi) - go;
            st = ddl_tl_sendrecv(comm, seq, peer, data + go * es, gn * es, peer, tmp, kn * es);
            if (st == DDL_OK)
                ddl_reduce_ordered(data + ko * es, tmp, kn, dtype, op, vp < v);
            lo = keep_lo;
            hi = keep_hi;
        }
        if (st == DDL_OK && op == DDL_AVG) {
            size_t o = ddl_block_off(count, p2, v);
            ddl_scale_local(data + o * es, ddl_block_off(count, p2, v + 1) - o, dtype, n);
        }
        /* allgather: double the range back, distance 1 first */
        for (int d = 1; d < p2 && st == DDL_OK; d *= 2) {
            const int vp = v ^ d, peer = ddl_fold_peer(vp, rem);
            const int span = hi - lo, plo = (v & d) ? lo - span : hi, phi = plo + span;
            size_t mo = ddl_block_off(count, p2, lo), mn = ddl_block_off(count, p2, hi) - mo;
            size_t po = ddl_block_off(count, p2, plo), pn = ddl_block_off(count, p2, phi) - po;
            st = ddl_tl_sendrecv(comm, seq, peer, data + mo * es, mn * es, peer, data + po * es,
                                 pn * es);
            lo = lo < plo ? lo : plo;
            hi = hi > phi ? hi : phi;
        }
    }

    /* hand the result back to the folded ranks */
    return st == DDL_OK ? ddl_fold_out(comm, seq, data, count * es) : st;
}
