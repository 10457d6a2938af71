/* comm.c: communicators: the world, the node-local and cross-node ones
 * derived at ddl_init() from the bootstrap exchange (every rank's node and
 * local rank), and ddl_comm_split() (MPI_Comm_split's rule).  A communicator
 * maps its ranks to world ranks; its id, agreed on at creation, keeps its
 * messages apart from every other communicator's in the tags. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "ddl_int.h"

/* comm_init: fill c from the world ranks of its members (copied). */
static ddl_status_t comm_init(ddl_comm_t *c, const int *world, int n, uint16_t id)
{
    memset(c, 0, sizeof *c);
    c->world_ranks = malloc((size_t)n * sizeof *c->world_ranks);
    if (!c->world_ranks)
        return ddl_fail(DDL_ERR_NOMEM, "out of memory for a communicator of %d ranks", n);
    memcpy(c->world_ranks, world, (size_t)n * sizeof *world);
    c->size = n;
    c->rank = -1;
    for (int i = 0; i < n; i++)
        if (world[i] == ddl_ctx.rank)
            c->rank = i;
    c->id = id;
    c->tl = ddl_ctx.tl;
    atomic_init(&c->aborted, 0);
    atomic_init(&c->pending, 0);
    return DDL_OK;
}

/* hier_shape_ok: the ranks sit on several nodes, the same number L >= 1 on
 * each, and every rank's local rank is its index among its node's ranks in
 * world order (so that the cross communicator of local rank q joins the
 * ranks that own block q after the reduce-scatter inside each node). */
static int hier_shape_ok(const int *node_of, const int *local_of, int n)
{
    int nodes = 0, per = -1;
    for (int i = 0; i < n; i++) {
        int idx = 0, count = 0;
        for (int j = 0; j < n; j++) {
            if (node_of[j] != node_of[i])
                continue;
            idx += j < i;
            count++;
        }
        if (local_of[i] != idx || (per >= 0 && count != per))
            return 0;
        per = count;
        nodes += idx == 0;
    }
    return nodes > 1;
}

int ddl_comm_multi_node(const ddl_comm_t *comm)
{
    for (int i = 1; i < comm->size; i++) {
        int a = comm->world_ranks ? comm->world_ranks[0] : 0;
        int b = comm->world_ranks ? comm->world_ranks[i] : i;
        if (ddl_ctx.node_of && ddl_ctx.node_of[a] != ddl_ctx.node_of[b])
            return 1;
    }
    return 0;
}

ddl_status_t ddl_comms_build(const int *node_of, const int *local_of)
{
    int n = ddl_ctx.size, nn = 0, nc = 0;
    int *members = calloc((size_t)n, sizeof *members);
    ddl_status_t st;
    if (!members)
        return ddl_fail(DDL_ERR_NOMEM, "out of memory for %d ranks", n);
    for (int i = 0; i < n; i++)
        if (node_of[i] == ddl_ctx.node_id)
            members[nn++] = i;
    st = comm_init(&ddl_ctx.node, members, nn, DDL_COMM_ID_NODE);
    for (int i = 0; i < n && st == DDL_OK; i++) /* world order = node order */
        if (local_of[i] == ddl_ctx.local_rank)
            members[nc++] = i;
    if (st == DDL_OK)
        st = comm_init(&ddl_ctx.cross, members, nc, DDL_COMM_ID_CROSS);
    free(members);
    ddl_ctx.node_of = malloc((size_t)n * sizeof *ddl_ctx.node_of);
    if (st == DDL_OK && !ddl_ctx.node_of)
        st = ddl_fail(DDL_ERR_NOMEM, "out of memory for %d ranks", n);
    if (st == DDL_OK) {
        memcpy(ddl_ctx.node_of, node_of, (size_t)n * sizeof *node_of);
        ddl_ctx.hier_shape = hier_shape_ok(node_of, local_of, n);
        ddl_ctx.hier_ok = ddl_ctx.hier_shape && ddl_ctx.node.size > 1;
    }
    ddl_ctx.next_comm_id = DDL_COMM_ID_FIRST_SPLIT;
    return st;
}

void ddl_comms_release(void)
{
    free(ddl_ctx.node.world_ranks);
    free(ddl_ctx.cross.world_ranks);
    free(ddl_ctx.node_of);
    ddl_ctx.node_of = NULL;
    ddl_ctx.node.world_ranks = ddl_ctx.cross.world_ranks = NULL;
}

ddl_comm_t *ddl_comm_node(void)
{
    return ddl_ctx.initialized ? &ddl_ctx.node : NULL;
}

ddl_comm_t *ddl_comm_cross(void)
{
    return ddl_ctx.initialized ? &ddl_ctx.cross : NULL;
}

static int is_builtin(const ddl_comm_t *c)
{
    return c == &ddl_ctx.world || c == &ddl_ctx.node || c == &ddl_ctx.cross;
}

/* One rank's part of the split exchange. */
typedef struct {
    int32_t color, key, next_id;
} split_info_t;

static int cmp_member(const void *a, const void *b)
{
    const int *x = a, *y = b; /* {key, comm rank} */
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

ddl_status_t ddl_comm_split(ddl_comm_t *comm, int color, int key, ddl_comm_t **newcomm)
{
    ddl_status_t st;
    ddl_clear_error();
    if (!newcomm)
        return ddl_fail(DDL_ERR_INVALID, "newcomm is NULL");
    *newcomm = NULL;
    if (color < DDL_UNDEFINED)
        return ddl_fail(DDL_ERR_INVALID, "color %d is negative (use DDL_UNDEFINED to opt out)",
                        color);
    int n = ddl_comm_size(comm);
    split_info_t mine = {color, key, (int32_t)ddl_ctx.next_comm_id};
    split_info_t *all = calloc((size_t)(n > 0 ? n : 1), sizeof *all);
    int *sorted = calloc((size_t)(n > 0 ? n : 1) * 2, sizeof *sorted);
    int *world = calloc((size_t)(n > 0 ? n : 1), sizeof *world);
    if (!all || !sorted || !world) {
        st = ddl_fail(DDL_ERR_NOMEM, "out of memory splitting %d ranks", n);
        goto out;
    }
    st = ddl_allgather(comm, &mine, all, 3, DDL_INT32);
    if (st != DDL_OK)
        goto out;
    /* the new id: above every id any rank of comm has used, so it is free
     * on every member whatever communicators they made before */
    int32_t id = 0;
    for (int i = 0; i < n; i++)
        if (all[i].next_id > id)
            id = all[i].next_id;
    if (id > 0xffff) {
        st = ddl_fail(DDL_ERR_NOMEM, "communicator ids exhausted: %d were created (ids are "
                      "not reused)", id);
        goto out;
    }
    ddl_ctx.next_comm_id = (uint32_t)id + 1;
    if (color == DDL_UNDEFINED)
        goto out;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (all[i].color == color) {
            sorted[2 * m] = all[i].key;
            sorted[2 * m + 1] = i;
            m++;
        }
    qsort(sorted, (size_t)m, 2 * sizeof *sorted, cmp_member);
    for (int i = 0; i < m; i++) {
        int cr = sorted[2 * i + 1];
        world[i] = comm->world_ranks ? comm->world_ranks[cr] : cr;
    }
    ddl_comm_t *c = malloc(sizeof *c);
    if (!c) {
        st = ddl_fail(DDL_ERR_NOMEM, "out of memory for a communicator");
        goto out;
    }
    if ((st = comm_init(c, world, m, (uint16_t)id)) != DDL_OK) {
        free(c);
        goto out;
    }
    *newcomm = c;
out:
    free(all);
    free(sorted);
    free(world);
    return st;
}

ddl_status_t ddl_comm_free(ddl_comm_t *comm)
{
    if (!comm || is_builtin(comm))
        return DDL_OK;
    int n = atomic_load(&comm->pending);
    if (n > 0)
        return ddl_fail(DDL_ERR_INVALID, "communicator has %d operation%s pending: wait for "
                        "them (or abort it) before freeing it", n, n == 1 ? "" : "s");
    free(comm->world_ranks);
    free(comm);
    return DDL_OK;
}
