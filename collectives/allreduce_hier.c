/* allreduce_hier.c: the two-level "multi-ring" allreduce of PowerAI DDL:
 *   1. inside each node, a ring reduce-scatter over the L local ranks
 *      (shared memory), after which local rank q holds block q of its node's
 *      partial sum;
 *   2. across nodes, local rank q allreduces block q with the local ranks q
 *      of the other nodes: L independent inter-node rings, one per local
 *      rank, each on its own NIC when the placement gave each rank one;
 *   3. inside each node, a ring allgather of the L finished blocks.
 * Every rank sends 2(L-1)/L of the buffer inside the node and 2(N-1)/N of
 * a block across nodes, and the inter-node latency term is 2(N-1) steps
 * instead of the flat ring's 2(NL-1).  Block q is reduced in a fixed order
 * (the node ring, then the cross ring) and then only copied, so the bits
 * are the same on every rank.  Needs the world communicator on nodes with
 * the same number of ranks (ddl_hier_possible).
 */
#include "config.h"

#include "ddl_int.h"

ddl_status_t ddl_allreduce_hier(ddl_comm_t *node, ddl_comm_t *cross, int world_size, void *buf,
                                size_t count, ddl_dtype_t dtype, ddl_op_t op)
{
    const size_t es = ddl_dtype_size(dtype);
    const size_t o = ddl_block_off(count, node->size, node->rank);
    const size_t len = ddl_block_off(count, node->size, node->rank + 1) - o;
    ddl_status_t st = ddl_ring_reduce_scatter_inplace(node, buf, count, dtype, op);
    /* the inter-node ring of this local rank; DDL_AVG divides by the
     * world's size once the block holds every rank's contribution */
    if (st == DDL_OK)
        st = ddl_ring_allreduce_part(cross, (char *)buf + o * es, len, dtype, op,
                                     world_size);
    if (st == DDL_OK)
        st = ddl_ring_allgather_inplace(node, buf, count, es);
    return st;
}
