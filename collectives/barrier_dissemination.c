/* barrier_dissemination.c: the dissemination barrier: in round k each rank
 * signals rank + 2^k and waits for rank - 2^k; after ceil(log2 N) rounds
 * every rank has transitively heard from every other. */
#include "config.h"

#include "ddl_int.h"

ddl_status_t ddl_barrier_dissemination(ddl_comm_t *comm)
{
    const int n = comm->size, r = comm->rank;
    const uint32_t seq = comm->seq++;
    char token = 0, sink;
    for (int k = 1; k < n; k <<= 1) {
        ddl_status_t st = ddl_tl_sendrecv(comm, seq, (r + k) % n, &token, 1, (r - k + n) % n,
                                          &sink, 1);
        if (st != DDL_OK)
            return st;
    }
    return DDL_OK;
}
