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

#include <string.h>

#include "ddl_int.h"

ddl_status_t ddl_allreduce_rd(ddl_comm_t *comm, void *buf, size_t count, ddl_dtype_t dtype,
                              ddl_op_t op)
{
    const int n = comm->size, r = comm->rank;
    const size_t bytes = count * ddl_dtype_size(dtype);
    const uint32_t seq = comm->seq++;
    ddl_status_t st = DDL_OK;
    void *req = NULL;
    int p2 = 1;
    while (p2 * 2 <= n)
        p2 *= 2;
    const int rem = n - p2;
    void *tmp = ddl_scratch(bytes);
    if (!tmp)
        return ddl_fail(DDL_ERR_NOMEM, "allreduce: cannot allocate %zu bytes", bytes);

    /* fold the extra ranks in: even r < 2*rem gives its data to r+1 */
    int vr; /* rank among the p2 participants, -1 if folded out */
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            st = ddl_tl_isend(comm, r + 1, buf, bytes, ddl_tag(comm, seq, r), &req);
            if (st == DDL_OK)
                st = ddl_tl_waitall(comm, &req, 1);
            vr = -1;
        } else {
            st = ddl_tl_irecv(comm, tmp, bytes, ddl_tag(comm, seq, r - 1), &req);
            if (st == DDL_OK)
                st = ddl_tl_waitall(comm, &req, 1);
            if (st == DDL_OK)
                ddl_reduce_ordered(buf, tmp, count, dtype, op, 1);
            vr = r / 2;
        }
    } else {
        vr = r - rem;
    }

    if (vr >= 0) {
        for (int mask = 1; mask < p2 && st == DDL_OK; mask <<= 1) {
            int vpeer = vr ^ mask;
            int peer = vpeer < rem ? vpeer * 2 + 1 : vpeer + rem;
            st = ddl_tl_sendrecv(comm, seq, peer, buf, bytes, peer, tmp, bytes);
            if (st == DDL_OK)
                ddl_reduce_ordered(buf, tmp, count, dtype, op, vpeer < vr);
        }
        if (st == DDL_OK && op == DDL_AVG)
            ddl_scale_local(buf, count, dtype, n);
    }

    /* hand the result back to the folded ranks */
    if (st == DDL_OK && r < 2 * rem) {
        if (r % 2 == 1)
            st = ddl_tl_isend(comm, r - 1, buf, bytes, ddl_tag(comm, seq, r), &req);
        else
            st = ddl_tl_irecv(comm, buf, bytes, ddl_tag(comm, seq, r + 1), &req);
        if (st == DDL_OK)
            st = ddl_tl_waitall(comm, &req, 1);
    }
    return st;
}
