/* t_gpu_plan.c: the GPU path's decisions that need no GPU (gpu_plan.c):
 * the bootstrap GPU record round trip and its malformed forms, which nodes
 * may form a NCCL communicator (own GPU per rank, at least two ranks, the
 * id from local rank 0), when every rank runs GPU-direct rings, the
 * agreed pipeline chunk, local ranks in world order, and the hierarchical
 * allreduce's blocks and pipeline chunks. */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "ddl_int.h"
#include "../tap.h"

static uint8_t buf[16][DDL_GPU_REC_MAX];
static const uint8_t *recs[16];
static size_t lens[16];

static uint32_t extra_flags; /* added to the records rec() makes */

/* rec: rank i's record: GPU pci bus `bus` (0: none), with the id if `id`. */
static void rec(int i, int bus, int id)
{
    uint8_t nid[DDL_NCCL_ID_BYTES];
    memset(nid, 0x40 + i, sizeof nid);
    if (!bus) {
        recs[i] = NULL;
        lens[i] = 0;
        return;
    }
    ddl_gpu_rec_t r = {.pci_domain = 0, .pci_bus = bus, .pci_device = 0,
                       .flags = DDL_GPU_REC_NCCL | extra_flags,
                       .chunk_bytes = (uint32_t)(1u << 20) * (uint32_t)(i + 1)};
    lens[i] = ddl_gpu_rec_encode(&r, id ? nid : NULL, buf[i], sizeof buf[i]);
    recs[i] = buf[i];
}

int main(void)
{
    plan(NO_PLAN);
    ddl_gpu_rec_t r = {.pci_domain = 1, .pci_bus = 0x3b, .pci_device = 2, .flags = DDL_GPU_REC_NCCL,
                       .chunk_bytes = 65536},
                  back;
    uint8_t id[DDL_NCCL_ID_BYTES], out[DDL_GPU_REC_MAX];
    const uint8_t *idp;
    memset(id, 0xab, sizeof id);
    size_t n = ddl_gpu_rec_encode(&r, id, out, sizeof out);
    is(n, (size_t)DDL_GPU_REC_MAX, "a record with the NCCL id: 24 + 128 bytes");
    ok(ddl_gpu_rec_decode(out, n, &back, &idp) == 0 && back.pci_domain == 1 &&
           back.pci_bus == 0x3b && back.pci_device == 2 && (back.flags & DDL_GPU_REC_NCCL) &&
           idp == out + 24 && back.chunk_bytes == 65536 && memcmp(idp, id, sizeof id) == 0,
       "... decodes to the same GPU and id");
    n = ddl_gpu_rec_encode(&r, NULL, out, sizeof out);
    ok(n == 24 && ddl_gpu_rec_decode(out, n, &back, &idp) == 0 && idp == NULL &&
           !(back.flags & DDL_GPU_REC_ID),
       "a record without the id: 24 bytes, no id");
    ok(ddl_gpu_rec_encode(&r, id, out, 100) == 0, "encoding into too small a buffer fails");
    ok(ddl_gpu_rec_decode(out, 23, &back, &idp) < 0, "a truncated record is refused");
    ok(ddl_gpu_rec_decode(out, 25, &back, &idp) < 0, "a record with trailing bytes is refused");
    out[0] ^= 1;
    ok(ddl_gpu_rec_decode(out, 24, &back, &idp) < 0, "a record with a bad magic is refused");

    /* 2 nodes x 2 ranks, each with its own GPU: NCCL on both */
    int node_of[6] = {0, 0, 1, 1, 2, 2}, local_of[6] = {0, 1, 0, 1, 0, 1};
    ddl_gpu_plan_t p;
    rec(0, 1, 1), rec(1, 2, 0), rec(2, 1, 1), rec(3, 2, 0);
    ddl_gpu_plan(4, node_of, local_of, recs, lens, 1, &p);
    ok(p.nccl_node && p.nccl_any && p.nccl_all, "2 nodes, a GPU per rank: NCCL on every node");
    ok(p.world_ordered, "... local ranks in world order");
    is(p.chunk_bytes, 1u << 20, "... the smallest chunk any rank asked for (1 MiB of 1-4 MiB)");
    ok(p.nccl_id == recs[2] + 24 && p.nccl_id[0] == 0x42, "... node 1 uses its local rank 0's id");
    ddl_gpu_plan(4, node_of, local_of, recs, lens, 0, &p);
    ok(p.nccl_id && p.nccl_id[0] == 0x40, "... node 0 its own");

    rec(3, 1, 0); /* node 1's ranks share GPU bus 1 */
    ddl_gpu_plan(4, node_of, local_of, recs, lens, 1, &p);
    ok(!p.nccl_node && p.nccl_any && !p.nccl_all && !p.nccl_id,
       "two ranks sharing a GPU: no NCCL on that node, the other keeps it");
    ddl_gpu_plan(4, node_of, local_of, recs, lens, 0, &p);
    ok(p.nccl_node && !p.nccl_all, "... node 0 still forms one");

    rec(3, 0, 0); /* a rank of node 1 without a GPU */
    ddl_gpu_plan(4, node_of, local_of, recs, lens, 1, &p);
    ok(!p.nccl_node && !p.nccl_all, "a rank without a GPU: no NCCL on its node");

    rec(2, 1, 0), rec(3, 2, 0); /* node 1's local rank 0 sent no id */
    ddl_gpu_plan(4, node_of, local_of, recs, lens, 1, &p);
    ok(!p.nccl_node, "no id from local rank 0: no NCCL on its node");

    for (int i = 0; i < 4; i++)
        rec(i, 0, 0);
    ddl_gpu_plan(4, node_of, local_of, recs, lens, 0, &p);
    ok(!p.nccl_node && !p.nccl_any && !p.nccl_all, "no GPU anywhere: no NCCL, nothing to agree on");

    int local01[2] = {0, 1};
    rec(0, 1, 1), rec(1, 2, 0);
    int node1[2] = {0, 0};
    ddl_gpu_plan(2, node1, local01, recs, lens, 0, &p);
    ok(p.nccl_node && p.nccl_all, "one node, 2 ranks, 2 GPUs: NCCL");
    int single_local[2] = {0, 0}, two_nodes[2] = {0, 1};
    rec(1, 2, 1);
    ddl_gpu_plan(2, two_nodes, single_local, recs, lens, 0, &p);
    ok(!p.nccl_node && !p.nccl_any, "one rank per node: no communicator of one");

    int swapped[4] = {1, 0, 0, 1};
    ddl_gpu_plan(4, node_of, swapped, recs, lens, 0, &p);
    ok(!p.world_ordered, "local ranks not in world order: world_ordered is 0");

    /* GPU-direct: only when every rank's record says so */
    extra_flags = DDL_GPU_REC_DIRECT;
    rec(0, 1, 1), rec(1, 2, 0), rec(2, 1, 1), rec(3, 2, 0);
    ddl_gpu_plan(4, node_of, local_of, recs, lens, 0, &p);
    ok(p.direct_all && p.nccl_all, "every rank's UCX moves CUDA memory: GPU-direct everywhere");
    extra_flags = 0;
    rec(3, 2, 0);
    ddl_gpu_plan(4, node_of, local_of, recs, lens, 0, &p);
    ok(!p.direct_all && p.nccl_all, "one rank without it: no GPU-direct anywhere, NCCL kept");
    rec(3, 0, 0);
    extra_flags = DDL_GPU_REC_DIRECT;
    ddl_gpu_plan(4, node_of, local_of, recs, lens, 0, &p);
    ok(!p.direct_all, "one rank without a GPU: no GPU-direct");
    extra_flags = 0;

    /* blocks: NCCL's equal blocks, the remainder on the last */
    int good = 1;
    for (size_t count = 0; count < 40; count++)
        for (int L = 1; L <= 5; L++) {
            size_t next = 0, off, len;
            for (int q = 0; q < L; q++) {
                ddl_gpu_block(count, L, q, &off, &len);
                good &= off == next && (q == L - 1 || len == count / (size_t)L);
                next = off + len;
            }
            good &= next == count;
        }
    ok(good, "blocks of 0-39 elements over 1-5 local ranks: contiguous, equal but the last, "
             "covering the buffer");
    size_t off, len;
    ddl_gpu_block(10, 4, 3, &off, &len);
    ok(off == 6 && len == 4, "10 elements, 4 ranks: the last block is 2 + the 2 left over");
    ddl_gpu_block(3, 4, 1, &off, &len);
    ok(off == 0 && len == 0, "3 elements, 4 ranks: rank 1's block is empty");
    ddl_gpu_block(3, 4, 3, &off, &len);
    ok(off == 0 && len == 3, "... the last rank holds all 3");

    is(ddl_gpu_chunk_elems(1 << 20, 4, 1 << 20, 64), (size_t)(1 << 18),
       "1 Mi floats, 1 MiB chunks: 256 Ki elements per chunk");
    is(ddl_gpu_chunk_elems(1 << 30, 4, 1 << 20, 64), (size_t)(1 << 24),
       "1 Gi floats: at most 64 chunks");
    is(ddl_gpu_chunk_elems(0, 4, 1 << 20, 64), (size_t)(1 << 18), "an empty block: one chunk size");
    is(ddl_gpu_chunk_elems(5, 8, 4, 64), (size_t)1, "a chunk smaller than one element: 1");
    return done_testing();
}
