/* gpu_plan.c: the decisions of libddl's GPU path that need no GPU, kept
 * apart so that unit tests check them everywhere: the GPU record each rank
 * adds to the bootstrap exchange, which nodes can form a NCCL communicator
 * (every rank of the node has its own GPU and local rank 0 sent the NCCL
 * unique id), whether every rank can run GPU-direct rings, and how the
 * hierarchical allreduce cuts a buffer into the local ranks' blocks and
 * the blocks into pipeline chunks.  Every rank computes the same answers
 * from the same exchange, so no further message is needed to agree on
 * them.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "ddl_int.h"

#define REC_MAGIC 0x44475055u /* "DGPU" */

size_t ddl_gpu_rec_encode(const ddl_gpu_rec_t *r, const void *nccl_id, uint8_t *out, size_t cap)
{
    uint32_t w[6] = {REC_MAGIC,        (uint32_t)r->pci_domain,     (uint32_t)r->pci_bus,
                     (uint32_t)r->pci_device, r->flags & ~DDL_GPU_REC_ID, r->chunk_bytes};
    size_t need = sizeof w + (nccl_id ? DDL_NCCL_ID_BYTES : 0);
    if (need > cap)
        return 0;
    if (nccl_id)
        w[4] |= DDL_GPU_REC_ID;
    memcpy(out, w, sizeof w);
    if (nccl_id)
        memcpy(out + sizeof w, nccl_id, DDL_NCCL_ID_BYTES);
    return need;
}

int ddl_gpu_rec_decode(const uint8_t *in, size_t len, ddl_gpu_rec_t *r, const uint8_t **nccl_id)
{
    uint32_t w[6];
    *nccl_id = NULL;
    if (len < sizeof w)
        return -1;
    memcpy(w, in, sizeof w);
    if (w[0] != REC_MAGIC)
        return -1;
    r->pci_domain = (int32_t)w[1];
    r->pci_bus = (int32_t)w[2];
    r->pci_device = (int32_t)w[3];
    r->flags = w[4];
    r->chunk_bytes = w[5];
    if (w[4] & DDL_GPU_REC_ID) {
        if (len != sizeof w + DDL_NCCL_ID_BYTES)
            return -1;
        *nccl_id = in + sizeof w;
    } else if (len != sizeof w) {
        return -1;
    }
    return 0;
}

/* node_ok: every rank of node has a GPU record that can join NCCL, no two
 * of them name the same GPU, there are at least two, and local rank 0 sent
 * the id (returned in *id). */
static int node_ok(int n, const int *node_of, const int *local_of, const uint8_t *const *recs,
                   const size_t *lens, int node, const uint8_t **id)
{
    int members = 0;
    *id = NULL;
    for (int i = 0; i < n; i++) {
        if (node_of[i] != node)
            continue;
        ddl_gpu_rec_t a;
        const uint8_t *aid;
        if (!recs[i] || ddl_gpu_rec_decode(recs[i], lens[i], &a, &aid) < 0 ||
            !(a.flags & DDL_GPU_REC_NCCL))
            return 0;
        if (local_of[i] == 0)
            *id = aid;
        for (int j = 0; j < i; j++) {
            ddl_gpu_rec_t b;
            const uint8_t *bid;
            if (node_of[j] == node && ddl_gpu_rec_decode(recs[j], lens[j], &b, &bid) == 0 &&
                a.pci_domain == b.pci_domain && a.pci_bus == b.pci_bus &&
                a.pci_device == b.pci_device)
                return 0; /* two ranks share a GPU: NCCL needs one per rank */
        }
        members++;
    }
    return members > 1 && *id != NULL;
}

void ddl_gpu_plan(int n, const int *node_of, const int *local_of, const uint8_t *const *recs,
                  const size_t *lens, int my_node, ddl_gpu_plan_t *p)
{
    memset(p, 0, sizeof *p);
    p->nccl_all = 1;
    p->direct_all = n > 0;
    /* seen[node]: the node's ranks met so far, in world order (node ids are
     * below n); without the memory, say not ordered: NCCL is then left out
     * on one node, which is safe */
    int *seen = calloc(n > 0 ? (size_t)n : 1, sizeof *seen);
    p->world_ordered = seen != NULL;
    for (int i = 0; i < n; i++) {
        ddl_gpu_rec_t r;
        const uint8_t *id;
        int valid = recs[i] && ddl_gpu_rec_decode(recs[i], lens[i], &r, &id) == 0;
        if (!valid || !(r.flags & DDL_GPU_REC_DIRECT))
            p->direct_all = 0;
        if (valid && r.chunk_bytes && (!p->chunk_bytes || r.chunk_bytes < p->chunk_bytes))
            p->chunk_bytes = r.chunk_bytes;
        if (seen && (node_of[i] < 0 || node_of[i] >= n || local_of[i] != seen[node_of[i]]++))
            p->world_ordered = 0;
    }
    free(seen);
    for (int i = 0; i < n; i++) {
        if (local_of[i] != 0)
            continue; /* one look per node, from its local rank 0 */
        const uint8_t *id;
        int ok = node_ok(n, node_of, local_of, recs, lens, node_of[i], &id);
        p->nccl_any |= ok;
        p->nccl_all &= ok;
        if (node_of[i] == my_node) {
            p->nccl_node = ok;
            p->nccl_id = ok ? id : NULL;
        }
    }
}

void ddl_gpu_block(size_t count, int nlocal, int q, size_t *off, size_t *len)
{
    size_t base = count / (size_t)nlocal;
    *off = (size_t)q * base;
    *len = base + (q == nlocal - 1 ? count % (size_t)nlocal : 0);
}

size_t ddl_gpu_chunk_elems(size_t len, size_t es, size_t chunk_bytes, int max_chunks)
{
    size_t c = chunk_bytes / es;
    size_t floor_c = (len + (size_t)max_chunks - 1) / (size_t)max_chunks;
    if (c < floor_c)
        c = floor_c;
    if (c == 0)
        c = 1;
    return c;
}
