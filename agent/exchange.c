/* exchange.c: the bootstrap allgather through the agents: workers hand
 * their contribution to their node's agent; a complete node sends
 * NODE_GATHER to the leader, which checks that a node sends only its own
 * ranks, each once; once every rank is in, ALLGATHER_RESULT goes to every
 * agent, which hands it to its waiting workers.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "agent_int.h"
#include "log.h"
#include "sock.h"

void ag_reset(agent_t *a)
{
    for (uint32_t i = 0; i < a->opts->size; i++) {
        free(a->ag_blob[i]);
        a->ag_blob[i] = NULL;
        a->ag_len[i] = 0;
        a->ag_waiter[i] = NULL;
    }
    a->ag_active = 0;
    a->ag_got = 0;
}

/* deliver_result: hand an exchange's result to this node's waiting workers. */
static void deliver_result(agent_t *a, const ddl_msg_t *m)
{
    for (uint32_t i = 0; i < a->opts->size; i++)
        if (a->ag_waiter[i]) {
            conn_queue(a->ag_waiter[i], m);
            if (m->u.allgather_result.seq == 0) /* a stop under way: its notice follows */
                drain_joined(a, a->ag_waiter[i]);
        }
}

static void ag_complete(agent_t *a)
{
    size_t total = 0;
    uint32_t n = a->w.world;
    for (uint32_t i = 0; i < n; i++)
        total += a->ag_len[i];
    uint8_t *data = malloc(total ? total : 1);
    if (!data) {
        ddl_error("out of memory assembling a %zu-byte allgather", total);
        for (uint32_t i = 0; i < n; i++)
            if (a->ag_waiter[i])
                conn_error(a->ag_waiter[i], ENOMEM, "agent out of memory");
        ag_reset(a);
        return;
    }
    size_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (a->ag_len[i])
            memcpy(data + off, a->ag_blob[i], a->ag_len[i]);
        off += a->ag_len[i];
    }
    ddl_msg_t m = {.type = DDL_MSG_ALLGATHER_RESULT};
    m.u.allgather_result.gen = a->ag_gen;
    m.u.allgather_result.seq = a->ag_seq;
    m.u.allgather_result.count = n;
    m.u.allgather_result.lens = a->ag_len;
    m.u.allgather_result.data = data;
    deliver_result(a, &m);
    for (size_t i = 0; i < a->nconns; i++) /* the nodes in the world (not the spares) */
        if (a->conns[i]->kind == CONN_PEER &&
            (!a->w.node_rank || (a->conns[i]->node_id < a->opts->nnodes &&
                               a->w.node_rank[a->conns[i]->node_id] != NO_RANK)))
            conn_queue(a->conns[i], &m);
    ddl_debug("allgather %u of generation %u complete (%zu bytes)", a->ag_seq, a->ag_gen, total);
    free(data);
    ag_reset(a);
}

/* ag_fail: answer every local waiter of the exchange in progress with an
 * error and forget it. */
void ag_fail(agent_t *a, int code, const char *why)
{
    if (!a->ag_active)
        return;
    for (uint32_t i = 0; i < a->opts->size; i++)
        if (a->ag_waiter[i])
            conn_error(a->ag_waiter[i], code, why);
    ag_reset(a);
}

/* ag_send_up: a non-leader whose local ranks are all in sends them to the
 * leader as one NODE_GATHER. */
static void ag_send_up(agent_t *a)
{
    uint32_t *ranks = calloc(a->nlocal ? a->nlocal : 1, sizeof *ranks);
    uint32_t *lens = calloc(a->nlocal ? a->nlocal : 1, sizeof *lens);
    size_t total = 0, off = 0, k = 0;
    for (uint32_t r = 0; r < a->w.world; r++)
        if (a->is_local[slot_of(a, r)])
            total += a->ag_len[r];
    uint8_t *data = malloc(total ? total : 1);
    if (!ranks || !lens || !data) {
        free(ranks);
        free(lens);
        free(data);
        ag_fail(a, ENOMEM, "agent out of memory");
        return;
    }
    for (uint32_t r = 0; r < a->w.world; r++) {
        if (!a->is_local[slot_of(a, r)])
            continue;
        ranks[k] = r;
        lens[k] = a->ag_len[r];
        if (lens[k])
            memcpy(data + off, a->ag_blob[r], lens[k]);
        off += lens[k];
        k++;
    }
    ddl_msg_t m = {.type = DDL_MSG_NODE_GATHER};
    m.u.node_gather.gen = a->ag_gen;
    m.u.node_gather.seq = a->ag_seq;
    m.u.node_gather.size = a->w.world;
    m.u.node_gather.count = (uint32_t)k;
    m.u.node_gather.ranks = ranks;
    m.u.node_gather.lens = lens;
    m.u.node_gather.data = data;
    if (conn_queue(a->up, &m) < 0)
        ag_fail(a, EIO, "cannot send to the leader agent");
    else
        ddl_debug("allgather %u: node %u's %zu ranks sent to the leader", a->ag_seq,
                  a->opts->node_id, k);
    free(ranks);
    free(lens);
    free(data);
}

/* ag_check: act on an exchange whose contributions may be complete. */
static void ag_check(agent_t *a)
{
    if (a->leader && a->ag_got == a->w.world)
        ag_complete(a);
    else if (!a->leader && a->ag_got == a->nlocal_active)
        ag_send_up(a);
}

/* owns: whether node runs slot s: by the world map's block order, else by
 * the first node that spoke for it (its exchange, state or failure). */
int owns(agent_t *a, uint32_t node, uint32_t s)
{
    if (s >= a->opts->size)
        return 0;
    if (a->w.node_rank)
        return s / a->w.tpn == node;
    if (a->owner[s] == NO_RANK)
        a->owner[s] = node;
    return a->owner[s] == node;
}

/* tell_generation: a worker that asked to join a generation already over
 * (a warm restart that was still rejoining it) hears the current one, as
 * the workers linked at its decision did: its libddl joins that instead. */
static void tell_generation(agent_t *a, conn_t *c)
{
    char cause[96];
    snprintf(cause, sizeof cause, "the step is in generation %u", a->gen);
    ddl_msg_t m = {.type = DDL_MSG_GENERATION};
    m.u.generation.gen = a->gen;
    m.u.generation.action = DDL_GEN_RESTART;
    m.u.generation.code = -1;
    m.u.generation.cause = cause;
    if (a->w.node_rank) {
        m.u.generation.nnodes = a->opts->nnodes;
        m.u.generation.node_rank = a->w.node_rank;
    }
    conn_queue(c, &m);
}

void handle_allgather(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    char why[160];
    typeof(m->u.allgather) *g = &m->u.allgather;
    c->lib = 1;
    if (a->opts->supervise && (g->gen != a->gen || a->final)) {
        snprintf(why, sizeof why, "generation %u is over (the step is %s generation %u)", g->gen,
                 a->final ? "stopping in" : "in", a->gen);
        conn_error(c, ESTALE, why);
        if (g->gen < a->gen && !a->final)
            tell_generation(a, c);
        return;
    }
    if (g->size != a->w.world) {
        snprintf(why, sizeof why, "world size %u does not match the step's %u", g->size,
                 a->w.world);
        conn_error(c, EINVAL, why);
        return;
    }
    if (!a->is_local[slot_of(a, g->rank)]) {
        snprintf(why, sizeof why, "rank %u does not run on node %u", g->rank, a->opts->node_id);
        conn_error(c, EINVAL, why);
        return;
    }
    if (!a->leader && !a->up) {
        conn_error(c, ECONNRESET, "this node's agent lost its link to the leader agent");
        return;
    }
    if (a->ag_active && (g->seq != a->ag_seq || g->gen != a->ag_gen)) {
        snprintf(why, sizeof why, "allgather %u/%u while %u/%u is in progress", g->gen, g->seq,
                 a->ag_gen, a->ag_seq);
        conn_error(c, EBUSY, why);
        return;
    }
    if (a->ag_active && a->ag_blob[g->rank]) {
        snprintf(why, sizeof why, "rank %u contributed twice to allgather %u", g->rank, g->seq);
        conn_error(c, EEXIST, why);
        return;
    }
    a->ag_active = 1;
    a->ag_gen = g->gen;
    a->ag_seq = g->seq;
    a->ag_blob[g->rank] = g->data; /* take ownership */
    a->ag_len[g->rank] = g->len;
    a->ag_waiter[g->rank] = c;
    g->data = NULL;
    heard_rank(a, g->rank);
    a->ag_got++;
    if (a->ranks[slot_of(a, g->rank)].wpid == 0)
        a->ranks[slot_of(a, g->rank)].wpid = c->pid;
    ddl_debug("allgather %u: rank %u in (%u of %u)", g->seq, g->rank, a->ag_got,
              a->leader ? a->w.world : a->nlocal_active);
    ag_check(a);
}

/* handle_node_gather: the leader takes another node's contributions. */
void handle_node_gather(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    typeof(m->u.node_gather) *g = &m->u.node_gather;
    char why[160];
    if (a->opts->supervise && g->gen < a->gen) {
        ddl_debug("node %u: ignoring its exchange of generation %u (the step is in %u)",
                  c->node_id, g->gen, a->gen);
        return;
    }
    if (g->size != a->w.world || (a->opts->supervise && g->gen != a->gen) ||
        (a->ag_active && (g->seq != a->ag_seq || g->gen != a->ag_gen))) {
        snprintf(why, sizeof why, "node %u: exchange %u/%u of %u ranks does not match %u/%u of "
                 "%u", c->node_id, g->gen, g->seq, g->size, a->ag_gen, a->ag_seq, a->w.world);
        ddl_error("%s", why);
        conn_error(c, EINVAL, why);
        return;
    }
    /* every rank once, none already in, each one of the sender's own */
    uint8_t *seen = calloc(a->w.world ? a->w.world : 1, 1);
    if (!seen) {
        ag_fail(a, ENOMEM, "leader agent out of memory");
        return;
    }
    for (uint32_t i = 0; i < g->count; i++) {
        uint32_t r = g->ranks[i]; /* < g->size == a->w.world (decoder, above) */
        const char *bad = seen[r] || a->ag_blob[r] || a->is_local[slot_of(a, r)]
                              ? "which is already in"
                          : !owns(a, c->node_id, slot_of(a, r)) ? "which another node runs"
                                                                : NULL;
        seen[r] = 1;
        if (bad) {
            snprintf(why, sizeof why, "node %u sent rank %u, %s", c->node_id, r, bad);
            ddl_error("%s", why);
            conn_error(c, EEXIST, why);
            free(seen);
            return;
        }
    }
    free(seen);
    a->ag_active = 1;
    a->ag_gen = g->gen;
    a->ag_seq = g->seq;
    size_t off = 0;
    for (uint32_t i = 0; i < g->count; i++) {
        uint32_t r = g->ranks[i];
        a->ag_blob[r] = malloc(g->lens[i] ? g->lens[i] : 1);
        if (!a->ag_blob[r]) {
            ag_fail(a, ENOMEM, "leader agent out of memory");
            return;
        }
        memcpy(a->ag_blob[r], g->data + off, g->lens[i]);
        a->ag_len[r] = g->lens[i];
        off += g->lens[i];
        a->ag_got++;
    }
    ddl_debug("allgather %u: node %u's %u ranks in (%u of %u)", g->seq, c->node_id, g->count,
              a->ag_got, a->w.world);
    ag_check(a);
}

/* handle_result: a non-leader receives the leader's result. */
void handle_result(agent_t *a, ddl_msg_t *m)
{
    typeof(m->u.allgather_result) *r = &m->u.allgather_result;
    if (!a->ag_active || r->gen != a->ag_gen || r->seq != a->ag_seq ||
        r->count != a->w.world) {
        ddl_warn("ignoring a result %u/%u from the leader (waiting for %u/%u)", r->gen, r->seq,
                 a->ag_gen, a->ag_seq);
        return;
    }
    deliver_result(a, m);
    ddl_debug("allgather %u of generation %u complete", r->seq, r->gen);
    ag_reset(a);
}
