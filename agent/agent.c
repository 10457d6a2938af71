/* agent.c: the ddl-agent daemon of one step on one node.
 *
 * It accepts connections from the step's supervisors (ddl-launch: REGISTER,
 * RANK_STATE), its workers (libddl: ALLGATHER for the bootstrap exchange of
 * UCX addresses) and status clients (STATUS_REQ).  Every connection's peer
 * is checked with SO_PEERCRED: only the agent's own uid and root are served.
 * Sockets are non-blocking with per-connection input/output buffers, so one
 * slow client never stalls the others.
 *
 * A step on several nodes has one agent per node.  The leader (the agent of
 * rank 0's node) also listens on TCP; every other agent connects to it and
 * says PEER_HELLO with the step's secret before anything else is accepted.
 * An exchange then goes: workers -> their agent; a complete node sends
 * NODE_GATHER to the leader; the leader, once it has every rank, sends the
 * ALLGATHER_RESULT to every agent, which hands it to its workers.
 *
 * Linked agents send each other PEER_BEAT every heartbeat interval; with
 * the time each rank was last heard from, that is what `status` reports as
 * the health of ranks and peers.
 *
 * Recovery (opts->supervise, see agent.h): supervisors send FAILURE; the
 * others' agents forward it to the leader, which collects failures for
 * FAILURE_WINDOW_MS, decides, writes the failure summary and sends
 * GENERATION to every agent; each agent fences its exchanges to the new
 * generation and passes the decision to its supervisors.  A linked agent
 * silent for node_timeout_ms is lost: on the leader that is a node-lost
 * failure (a spare takes the node's place, or the world shrinks: the
 * world of a generation maps whole nodes to positions, node_rank); on the
 * others the loss of the leader: with spares or shrinking the lowest live
 * node takes over (every agent listens from the start, the leader's ROSTER
 * says where), otherwise their ranks stop.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "log.h"
#include "proto.h"
#include "sock.h"

enum { CONN_UNIX, CONN_TCP_NEW, CONN_PEER, CONN_LEADER };

#define HELLO_TIMEOUT_MS 10000 /* a TCP connection that has not said PEER_HELLO is dropped */
#define FAILURE_WINDOW_MS 30   /* failures this close to the first are compared for the cause */
#define BACKOFF_MS 500         /* before the first restart; doubles up to 16 times that */

typedef struct {
    int fd;
    int kind;         /* CONN_*: local client, TCP before/after PEER_HELLO, link to the leader */
    uint32_t node_id; /* CONN_PEER, CONN_LEADER: the node it speaks for (UINT32_MAX: unknown) */
    uid_t uid;
    pid_t pid;
    int rank; /* rank whose supervisor this is, -1 otherwise */
    int lib;  /* a worker's libddl (it asked for an exchange): told when its generation ends */
    int64_t opened_ms; /* CONN_TCP_NEW: must say hello within HELLO_TIMEOUT_MS */
    int64_t heard_ms;  /* CONN_PEER, CONN_LEADER: last message on the link */
    uint8_t *in;
    size_t in_len, in_cap;
    uint8_t *out;
    size_t out_len, out_off;
    int close_after_flush;
} conn_t;

/* What this agent knows of another node's agent. */
typedef struct {
    uint8_t state;     /* ddl_peer_state_t */
    int64_t heard_at;  /* ddl_now_ms() of the last message, 0: never */
    char host[DDL_PLACE_LEN];
    char addr[64];
} peer_t;

/* A failure as the leader compares them. */
typedef struct {
    uint32_t gen;
    int64_t rank; /* the failed task (slot), -1: the whole node */
    uint32_t node;
    uint8_t cls;
    int32_t wstatus;
    char host[DDL_PLACE_LEN];
    char text[512];
} failure_t;

typedef struct {
    const ddl_agent_opts_t *opts;
    char host[DDL_PLACE_LEN]; /* this node's hostname */
    const char *ckpt_dir;     /* DDL_CHECKPOINT_DIR, or NULL */
    int64_t *heard_at;        /* per world rank: last message from it, 0: never */
    peer_t *peers;            /* per node (nnodes entries) */
    int64_t beat_ms, last_beat;
    int lfd, sfd, tfd;
    uint8_t *is_local;  /* per world rank: served by this agent */
    uint32_t nlocal;    /* how many */
    int leader;         /* this agent serves the world-wide exchanges */
    conn_t *up;         /* others: the link to the leader (NULL once lost) */
    int64_t started_ms;
    conn_t **conns;
    size_t nconns, cap;
    ddl_rank_info_t *ranks;
    /* the bootstrap allgather in progress */
    int ag_active;
    uint32_t ag_gen, ag_seq, ag_got; /* leader: ranks in; others: local ranks in */
    uint8_t **ag_blob;
    uint32_t *ag_len;
    conn_t **ag_waiter;
    int shutting_down;
    /* recovery (opts->supervise) */
    uint32_t gen;          /* the step's generation */
    int final;             /* stop or finish decided: no generation follows */
    int node_timeout_ms;
    uint8_t *exited;       /* leader: per rank, exited 0 in this generation */
    uint32_t nexited;
    uint32_t restarts_used; /* leader */
    int64_t decide_at;     /* leader: end of the failure window, 0: none open */
    failure_t cause;       /* leader: the likeliest root cause in the window */
    int64_t ckpt_best;     /* leader: newest checkpoint step at a failure so far */
    uint32_t stalled;      /* leader: failures in a row without checkpoint progress */
    char last_failure[1100]; /* the last failure and its decision, for status; "" none */
    /* the world of this generation: with spares or shrinking allowed, whole
     * nodes of tpn tasks in block order (slot = Slurm task = n * tpn + j)
     * hold world ranks node_rank[n] * tpn + j; otherwise rank = slot */
    uint32_t world;         /* ranks in the world */
    uint32_t nlocal_active; /* of them on this node */
    uint32_t tpn;           /* tasks per node (with a map) */
    uint32_t *node_rank;    /* per node: its position in the world, NO_RANK: idle; NULL: no map */
    uint32_t *slot_of_rank; /* per world rank: its slot (with a map) */
    uint8_t *lost;          /* per node: lost */
    /* leader takeover (supervised, several nodes): every agent listens, the
     * leader tells all where (ROSTER); when the leader is lost, the lowest
     * live node leads */
    char (*roster)[64];     /* per node: where its agent listens, "" unknown */
    int listen_fd;          /* not leading: the socket it would lead on, -1: none */
    uint32_t leader_node;   /* the node of the leader agent */
    char leader_addr[64];   /* where the leader listens */
    int64_t takeover_until; /* new leader: wait for the others' hellos until then, 0: not */
    int need_takeover;      /* the leader was lost: choose another (main loop) */
    char takeover_why[300]; /* "lost the leader agent (node N, ADDR): HOW" */
    char takeover_how[160];
    uint32_t old_leader;    /* the leader that was lost */
} agent_t;

#define NO_RANK UINT32_MAX

/* slot_of: the slot (Slurm task) that holds world rank r. */
static uint32_t slot_of(const agent_t *a, uint32_t r)
{
    return a->node_rank ? a->slot_of_rank[r] : r;
}

/* rank_of: the world rank slot s holds now (-1: none, it is idle). */
static int64_t rank_of(const agent_t *a, int64_t s)
{
    if (!a->node_rank || s < 0)
        return s;
    uint32_t pos = a->node_rank[(uint32_t)s / a->tpn];
    return pos == NO_RANK ? -1 : (int64_t)pos * a->tpn + (uint32_t)s % a->tpn;
}

static void send_roster(agent_t *a);
static void handle_roster(agent_t *a, const ddl_msg_t *m);

/* remap: world, slot_of_rank and nlocal_active from node_rank. */
static void remap(agent_t *a)
{
    if (!a->node_rank) {
        a->world = a->opts->size;
        a->nlocal_active = a->nlocal;
        return;
    }
    a->world = a->nlocal_active = 0;
    for (uint32_t n = 0; n < a->opts->nnodes; n++) {
        if (a->node_rank[n] == NO_RANK)
            continue;
        for (uint32_t j = 0; j < a->tpn; j++)
            a->slot_of_rank[a->node_rank[n] * a->tpn + j] = n * a->tpn + j;
        a->world += a->tpn;
        if (n == a->opts->node_id)
            a->nlocal_active = a->tpn;
    }
}

static void conn_free(conn_t *c)
{
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    free(c->in);
    free(c->out);
    free(c);
}

static int conn_queue(conn_t *c, const ddl_msg_t *msg)
{
    uint8_t *frame;
    size_t len;
    if (ddl_proto_encode(msg, &frame, &len) < 0) {
        ddl_error("cannot encode a %s reply: %m", ddl_msg_type_str(msg->type));
        return -1;
    }
    if (c->out_off == c->out_len) {
        free(c->out);
        c->out = frame;
        c->out_len = len;
        c->out_off = 0;
        return 0;
    }
    uint8_t *nb = realloc(c->out, c->out_len + len);
    if (!nb) {
        free(frame);
        return -1;
    }
    memcpy(nb + c->out_len, frame, len);
    c->out = nb;
    c->out_len += len;
    free(frame);
    return 0;
}

static void conn_error(conn_t *c, int code, const char *text)
{
    ddl_msg_t m = {.type = DDL_MSG_ERROR};
    m.u.error.code = code;
    m.u.error.text = (char *)text;
    conn_queue(c, &m);
}

static void heard_rank(agent_t *a, uint32_t rank)
{
    if (rank < a->opts->size)
        a->heard_at[rank] = ddl_now_ms();
}

static uint32_t age_ms(int64_t at)
{
    if (!at)
        return DDL_HEARD_NEVER;
    int64_t d = ddl_now_ms() - at;
    return d < 0 ? 0 : d >= (int64_t)DDL_HEARD_NEVER ? DDL_HEARD_NEVER - 1 : (uint32_t)d;
}

/* ckpt_latest: the latest committed checkpoint of dir (libddl's DIR/latest,
 * which holds the step number; its mtime is the commit's time).  0 and
 * *step, *age_ms; -1 if there is none or it cannot be read. */
static int ckpt_latest(const char *dir, int64_t *step, uint32_t *age_ms)
{
    char path[4096], buf[32];
    struct stat st;
    if (!dir || !*dir || snprintf(path, sizeof path, "%s/latest", dir) >= (int)sizeof path)
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -1;
    ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, buf, sizeof buf - 1) : -1;
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || end == buf || v < 0 || (*end && *end != '\n'))
        return -1;
    *step = v;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t ms = ((int64_t)now.tv_sec - st.st_mtim.tv_sec) * 1000 +
                 (now.tv_nsec - st.st_mtim.tv_nsec) / 1000000;
    *age_ms = ms < 0 ? 0 : ms >= (int64_t)DDL_HEARD_NEVER ? DDL_HEARD_NEVER - 1 : (uint32_t)ms;
    return 0;
}

/* beat: this agent's PEER_BEAT (points into a). */
static ddl_msg_t beat(agent_t *a)
{
    ddl_msg_t m = {.type = DDL_MSG_PEER_BEAT};
    m.u.peer_beat.node_id = a->opts->node_id;
    m.u.peer_beat.gen = a->ag_gen;
    m.u.peer_beat.host = a->host;
    return m;
}

/* send_beats: PEER_BEAT on every link between agents. */
static void send_beats(agent_t *a)
{
    ddl_msg_t m = beat(a);
    for (size_t i = 0; i < a->nconns; i++)
        if (a->conns[i]->kind == CONN_PEER || a->conns[i]->kind == CONN_LEADER)
            conn_queue(a->conns[i], &m);
    a->last_beat = ddl_now_ms();
}

/* handle_beat: another agent is alive; the leader's first beat also says
 * which node it is. */
static void handle_beat(agent_t *a, conn_t *c, const ddl_msg_t *m)
{
    uint32_t node = m->u.peer_beat.node_id;
    if (node >= a->opts->nnodes || node == a->opts->node_id ||
        (c->node_id != UINT32_MAX && node != c->node_id)) {
        ddl_warn("ignoring a heartbeat that claims node %u on the link of node %u", node,
                 c->node_id);
        return;
    }
    if (c->kind == CONN_LEADER && c->node_id == UINT32_MAX) {
        c->node_id = node;
        a->peers[node].state = DDL_PEER_UP;
        snprintf(a->peers[node].addr, sizeof a->peers[node].addr, "%s", a->leader_addr);
        a->leader_node = node;
    }
    if (m->u.peer_beat.host)
        snprintf(a->peers[node].host, sizeof a->peers[node].host, "%s", m->u.peer_beat.host);
}

static void ag_reset(agent_t *a)
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
        if (a->ag_waiter[i])
            conn_queue(a->ag_waiter[i], m);
}

static void ag_complete(agent_t *a)
{
    size_t total = 0;
    uint32_t n = a->world;
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
            (!a->node_rank || (a->conns[i]->node_id < a->opts->nnodes &&
                               a->node_rank[a->conns[i]->node_id] != NO_RANK)))
            conn_queue(a->conns[i], &m);
    ddl_debug("allgather %u of generation %u complete (%zu bytes)", a->ag_seq, a->ag_gen, total);
    free(data);
    ag_reset(a);
}

/* ag_fail: answer every local waiter of the exchange in progress with an
 * error and forget it. */
static void ag_fail(agent_t *a, int code, const char *why)
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
    for (uint32_t r = 0; r < a->world; r++)
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
    for (uint32_t r = 0; r < a->world; r++) {
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
    m.u.node_gather.size = a->world;
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
    if (a->leader && a->ag_got == a->world)
        ag_complete(a);
    else if (!a->leader && a->ag_got == a->nlocal_active)
        ag_send_up(a);
}

static void handle_allgather(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    char why[160];
    typeof(m->u.allgather) *g = &m->u.allgather;
    c->lib = 1;
    if (g->size != a->world) {
        snprintf(why, sizeof why, "world size %u does not match the step's %u", g->size,
                 a->world);
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
    if (a->opts->supervise && (g->gen != a->gen || a->final)) {
        snprintf(why, sizeof why, "generation %u is over (the step is %s generation %u)", g->gen,
                 a->final ? "stopping in" : "in", a->gen);
        conn_error(c, ESTALE, why);
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
              a->leader ? a->world : a->nlocal_active);
    ag_check(a);
}

/* handle_node_gather: the leader takes another node's contributions. */
static void handle_node_gather(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    typeof(m->u.node_gather) *g = &m->u.node_gather;
    char why[160];
    if (a->opts->supervise && g->gen < a->gen) {
        ddl_debug("node %u: ignoring its exchange of generation %u (the step is in %u)",
                  c->node_id, g->gen, a->gen);
        return;
    }
    if (g->size != a->world || (a->opts->supervise && g->gen != a->gen) ||
        (a->ag_active && (g->seq != a->ag_seq || g->gen != a->ag_gen))) {
        snprintf(why, sizeof why, "node %u: exchange %u/%u of %u ranks does not match %u/%u of "
                 "%u", c->node_id, g->gen, g->seq, g->size, a->ag_gen, a->ag_seq, a->world);
        ddl_error("%s", why);
        conn_error(c, EINVAL, why);
        return;
    }
    for (uint32_t i = 0; i < g->count; i++)
        if (a->is_local[slot_of(a, g->ranks[i])] || a->ag_blob[g->ranks[i]]) {
            snprintf(why, sizeof why, "node %u sent rank %u, which is already in", c->node_id,
                     g->ranks[i]);
            ddl_error("%s", why);
            conn_error(c, EEXIST, why);
            return;
        }
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
              a->ag_got, a->world);
    ag_check(a);
}

/* handle_result: a non-leader receives the leader's result. */
static void handle_result(agent_t *a, ddl_msg_t *m)
{
    typeof(m->u.allgather_result) *r = &m->u.allgather_result;
    if (!a->ag_active || r->gen != a->ag_gen || r->seq != a->ag_seq ||
        r->count != a->world) {
        ddl_warn("ignoring a result %u/%u from the leader (waiting for %u/%u)", r->gen, r->seq,
                 a->ag_gen, a->ag_seq);
        return;
    }
    deliver_result(a, m);
    ddl_debug("allgather %u of generation %u complete", r->seq, r->gen);
    ag_reset(a);
}

/* handle_hello: a TCP connection proves it is an agent of this step. */
static void handle_hello(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    typeof(m->u.peer_hello) *h = &m->u.peer_hello;
    const ddl_agent_opts_t *o = a->opts;
    uint8_t diff = h->secret_len != o->secret_len;
    for (uint32_t i = 0; i < h->secret_len && i < o->secret_len; i++)
        diff |= h->secret[i] ^ o->secret[i]; /* no early exit: constant time */
    if (diff || strcmp(h->step, o->step) != 0 || h->node_id >= o->nnodes ||
        h->node_id == o->node_id) {
        ddl_warn("refused an agent connection claiming step %s node %u: wrong step, node or "
                 "secret", h->step, h->node_id);
        conn_error(c, EACCES, "not an agent of this step");
        c->close_after_flush = 1;
        return;
    }
    if (a->peers[h->node_id].state == DDL_PEER_UP) {
        ddl_warn("refused a second agent for node %u (its first link is up)", h->node_id);
        conn_error(c, EEXIST, "this node already has an agent linked to the leader");
        c->close_after_flush = 1;
        return;
    }
    c->kind = CONN_PEER;
    c->node_id = h->node_id;
    c->heard_ms = ddl_now_ms();
    peer_t *p = &a->peers[h->node_id];
    p->state = DDL_PEER_UP;
    p->heard_at = ddl_now_ms();
    snprintf(p->host, sizeof p->host, "%s", h->host ? h->host : "");
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    char ip[INET_ADDRSTRLEN];
    if (getpeername(c->fd, (struct sockaddr *)&sa, &sl) == 0 && sa.sin_family == AF_INET &&
        inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip))
        snprintf(p->addr, sizeof p->addr, "%s", ip);
    ddl_debug("node %u's agent (%s) connected", h->node_id, p->host);
    conn_queue(c, &(ddl_msg_t){.type = DDL_MSG_ACK});
    /* a beat at once: the new peer learns which node the leader is */
    ddl_msg_t b = beat(a);
    conn_queue(c, &b);
    if (a->roster) { /* where the new peer would lead, to everyone */
        snprintf(a->roster[h->node_id], sizeof a->roster[0], "%s", h->listen ? h->listen : "");
        send_roster(a);
    }
}

static void handle_status(agent_t *a, conn_t *c)
{
    ddl_msg_t m = {.type = DDL_MSG_STATUS};
    ddl_rank_info_t *mine = calloc(a->nlocal ? a->nlocal : 1, sizeof *mine);
    if (!mine) {
        conn_error(c, ENOMEM, "agent out of memory");
        c->close_after_flush = 1;
        return;
    }
    uint32_t k = 0, np = 0;
    for (uint32_t r = 0; r < a->opts->size; r++)
        if (a->is_local[r]) {
            mine[k] = a->ranks[r];
            mine[k++].heard_ms = age_ms(a->heard_at[r]);
        }
    /* the leader reports every other node, the others their leader */
    ddl_peer_info_t *peers = calloc(a->opts->nnodes ? a->opts->nnodes : 1, sizeof *peers);
    if (!peers) {
        free(mine);
        conn_error(c, ENOMEM, "agent out of memory");
        c->close_after_flush = 1;
        return;
    }
    for (uint32_t n = 0; n < a->opts->nnodes; n++) {
        const peer_t *p = &a->peers[n];
        if (n == a->opts->node_id || (!a->leader && p->state == DDL_PEER_NONE))
            continue;
        ddl_peer_info_t *pi = &peers[np++];
        pi->node_id = n;
        pi->state = p->state;
        pi->heard_ms = age_ms(p->heard_at);
        snprintf(pi->host, sizeof pi->host, "%s", p->host);
        snprintf(pi->addr, sizeof pi->addr, "%s", p->addr);
    }
    m.u.status.step = (char *)a->opts->step;
    m.u.status.size = a->world; /* with spares, fewer than the tasks */
    m.u.status.gen = a->gen > a->ag_gen ? a->gen : a->ag_gen;
    m.u.status.agent_pid = (int32_t)getpid();
    m.u.status.nranks = k;
    m.u.status.ranks = mine;
    m.u.status.node_id = a->opts->node_id;
    m.u.status.nnodes = a->opts->nnodes;
    m.u.status.host = a->host;
    m.u.status.leader = (uint8_t)a->leader;
    m.u.status.npeers = np;
    m.u.status.peers = peers;
    m.u.status.ckpt_dir = (char *)a->ckpt_dir;
    m.u.status.ckpt_step = -1;
    m.u.status.ckpt_age_ms = DDL_HEARD_NEVER;
    ckpt_latest(a->ckpt_dir, &m.u.status.ckpt_step, &m.u.status.ckpt_age_ms);
    m.u.status.last_failure = a->last_failure[0] ? a->last_failure : NULL;
    conn_queue(c, &m);
    free(mine);
    free(peers);
    c->close_after_flush = 1;
}

/* ------------------------------------------------------------------ recovery */

static void conn_drop(agent_t *a, size_t idx);

/* to_supervisors / to_peers: queue m for this node's rank supervisors, or
 * for every agent linked to this one (the leader: all the others). */
static void to_supervisors(agent_t *a, const ddl_msg_t *m)
{
    for (size_t i = 0; i < a->nconns; i++)
        if (a->conns[i]->kind == CONN_UNIX && a->conns[i]->rank >= 0)
            conn_queue(a->conns[i], m);
}

/* to_workers: the workers' libddl hear that their generation is over, so
 * that the collectives they wait in abort at once (DDL_ERR_ABORTED) instead
 * of waiting for a peer that failed. */
static void to_workers(agent_t *a, const ddl_msg_t *m)
{
    for (size_t i = 0; i < a->nconns; i++)
        if (a->conns[i]->kind == CONN_UNIX && a->conns[i]->lib)
            conn_queue(a->conns[i], m);
}

static void to_peers(agent_t *a, const ddl_msg_t *m)
{
    for (size_t i = 0; i < a->nconns; i++)
        if (a->conns[i]->kind == CONN_PEER)
            conn_queue(a->conns[i], m);
}

/* apply_generation: act on a decision (made here or received from the
 * leader): fence the exchanges to the new generation, pass it on. */
static void apply_generation(agent_t *a, const ddl_msg_t *m)
{
    const typeof(m->u.generation) *g = &m->u.generation;
    if (a->final)
        return;
    if (g->cause && *g->cause)
        snprintf(a->last_failure, sizeof a->last_failure, "%s", g->cause);
    if (!a->leader && g->action != DDL_GEN_FINISH) /* the leader said it already */
        ddl_info("node %u: %s", a->opts->node_id,
                 g->cause ? g->cause : "stop");
    if (g->action == DDL_GEN_RESTART) {
        if (g->gen <= a->gen) {
            ddl_warn("ignoring a restart into generation %u (this step is in %u)", g->gen, a->gen);
            return;
        }
        a->gen = g->gen;
        ag_fail(a, ECANCELED, "the step is restarting: this exchange's generation is over");
        if (a->node_rank && g->nnodes == a->opts->nnodes && g->node_rank) {
            memcpy(a->node_rank, g->node_rank, g->nnodes * sizeof *a->node_rank);
            remap(a);
        }
        for (uint32_t r = 0; r < a->opts->size; r++)
            if (a->is_local[r])
                a->ranks[r].restarts = g->gen;
        if (a->exited)
            memset(a->exited, 0, a->opts->size);
        a->nexited = 0;
    } else {
        a->final = 1;
        ag_fail(a, ECANCELED, "the step is stopping");
    }
    if (g->action != DDL_GEN_FINISH)
        to_workers(a, m);
    to_supervisors(a, m);
}

/* fail_line: "rank 3 on node 1 (n2): worker 123 was killed by signal 9" */
static void fail_line(const agent_t *a, const failure_t *f, char *buf, size_t len)
{
    char who[64];
    if (f->rank >= 0 && rank_of(a, f->rank) != f->rank)
        snprintf(who, sizeof who, "rank %lld (task %lld) on node %u",
                 (long long)rank_of(a, f->rank), (long long)f->rank, f->node);
    else if (f->rank >= 0)
        snprintf(who, sizeof who, "rank %lld on node %u", (long long)f->rank, f->node);
    else
        snprintf(who, sizeof who, "node %u", f->node);
    snprintf(buf, len, "%s (%s): %s [%s]", who, f->host[0] ? f->host : "?", f->text,
             ddl_fail_class_str(f->cls));
}

/* new_world: the world without the lost nodes (node `lost` and any other
 * marked lost): a live spare in the place of each, else, if
 * --ddl-min-nodes allows, the others renumbered in order.  Returns the new
 * node_rank (malloc'd) and says what changed in `what` (" (spare node S,
 * HOST, in place of node L)"), or NULL if no world can be formed. */
static uint32_t *new_world(agent_t *a, uint32_t lost, char *what, size_t len)
{
    const ddl_agent_opts_t *o = a->opts;
    uint32_t *map = malloc(o->nnodes * sizeof *map);
    if (!map)
        return NULL;
    memcpy(map, a->node_rank, o->nnodes * sizeof *map);
    a->lost[lost] = 1;
    int dropped = 0;
    size_t used = 0;
    what[0] = '\0';
    for (uint32_t l = 0; l < o->nnodes; l++) {
        if (!a->lost[l] || map[l] == NO_RANK)
            continue;
        uint32_t spare = NO_RANK;
        for (uint32_t n = 0; n < o->nnodes && spare == NO_RANK; n++)
            if (map[n] == NO_RANK && !a->lost[n] &&
                (n == o->node_id || a->peers[n].state == DDL_PEER_UP))
                spare = n;
        if (spare != NO_RANK) {
            map[spare] = map[l];
            if (used < len)
                used += (size_t)snprintf(what + used, len - used,
                                         "%sspare node %u, %s, in place of node %u",
                                         used ? "; " : " (", spare,
                                         spare == o->node_id ? a->host
                                         : a->peers[spare].host[0] ? a->peers[spare].host : "?",
                                         l);
        } else {
            dropped = 1;
        }
        map[l] = NO_RANK;
    }
    if (used && used < len)
        snprintf(what + used, len - used, ")");
    if (!dropped)
        return map;
    uint32_t active = 0;
    for (uint32_t n = 0; n < o->nnodes; n++)
        active += map[n] != NO_RANK;
    if (!o->min_nodes || active < o->min_nodes || active == 0) {
        free(map);
        return NULL;
    }
    /* keep the order of the survivors: ranks move down past the gaps */
    uint32_t next = 0, *old = a->node_rank;
    for (uint32_t pos = 0; pos < o->nnodes; pos++)
        for (uint32_t n = 0; n < o->nnodes; n++)
            if (map[n] != NO_RANK && old[n] == pos)
                map[n] = next++;
    for (uint32_t n = 0; n < o->nnodes; n++) /* spares placed above: after the survivors */
        if (map[n] != NO_RANK && old[n] == NO_RANK)
            map[n] = next++;
    snprintf(what, len, " (shrunk to %u node%s, %u rank%s: no spare node left)", active,
             active == 1 ? "" : "s", active * a->tpn, active * a->tpn == 1 ? "" : "s");
    return map;
}

/* decide: the leader, once the failure window has passed. */
static void decide(agent_t *a)
{
    const ddl_agent_opts_t *o = a->opts;
    failure_t *f = &a->cause;
    char line[800], cause[1100];
    int64_t ck = -1;
    uint32_t age;
    a->decide_at = 0;
    if (a->final)
        return;
    if (ckpt_latest(a->ckpt_dir, &ck, &age) < 0)
        ck = -1;
    fail_line(a, f, line, sizeof line);
    ddl_msg_t m = {.type = DDL_MSG_GENERATION};
    typeof(m.u.generation) *g = &m.u.generation;
    g->gen = a->gen;
    g->action = DDL_GEN_STOP;
    const char *why = "";
    char world[200] = "", master[64] = "";
    uint32_t *map = NULL;
    if (f->cls == DDL_FAIL_NODE && a->node_rank && a->restarts_used < o->restarts &&
        (map = new_world(a, f->node, world, sizeof world))) {
        a->restarts_used++;
        g->action = DDL_GEN_RESTART;
        g->gen = a->gen + 1;
        g->nnodes = o->nnodes;
        g->node_rank = map;
        /* MASTER_ADDR: the node that now holds rank 0 (its agent's address) */
        for (uint32_t n = 0; n < o->nnodes && a->roster; n++)
            if (map[n] == 0)
                snprintf(master, sizeof master, "%.*s", (int)strcspn(a->roster[n], ":"),
                         a->roster[n]);
        g->master = master;
        uint32_t shift = a->restarts_used - 1 < 4 ? a->restarts_used - 1 : 4;
        g->delay_ms = BACKOFF_MS << shift;
    } else if (f->cls == DDL_FAIL_NODE || f->cls == DDL_FAIL_SUPERVISOR) {
        g->code = DDL_EXIT_NODE_LOST;
        why = a->node_rank && f->cls == DDL_FAIL_NODE
                  ? (a->restarts_used >= o->restarts
                         ? "the restarts allowed (--ddl-restarts) are spent"
                         : "no spare node is left and --ddl-min-nodes does not allow fewer nodes")
                  : "the world cannot be formed again without it (no spare node: --ddl-spares, "
                    "--ddl-min-nodes)";
    } else if (f->cls == DDL_FAIL_WORKER_START || a->restarts_used >= o->restarts) {
        /* without restarts, the step ends as the failed worker did */
        g->code = o->restarts && f->cls != DDL_FAIL_WORKER_START ? DDL_EXIT_RESTARTS_SPENT
                  : f->cls == DDL_FAIL_WORKER_HANG   ? DDL_EXIT_HANG
                  : WIFSIGNALED(f->wstatus)          ? 128 + WTERMSIG(f->wstatus)
                  : WIFEXITED(f->wstatus)            ? WEXITSTATUS(f->wstatus)
                                                     : 1;
        why = f->cls == DDL_FAIL_WORKER_START ? "a worker that never ran cannot be restarted"
              : o->restarts ? "the restarts allowed (--ddl-restarts) are spent"
                            : "no restart allowed (--ddl-restarts=0)";
    } else {
        a->stalled = ck > a->ckpt_best ? 0 : a->stalled + 1;
        a->ckpt_best = ck > a->ckpt_best ? ck : a->ckpt_best;
        if (a->ckpt_dir && o->crash_loop && a->stalled > o->crash_loop) {
            g->code = DDL_EXIT_CRASH_LOOP;
            why = "failures in a row without a new checkpoint: a crash loop (do not requeue)";
        } else {
            a->restarts_used++;
            g->action = DDL_GEN_RESTART;
            g->gen = a->gen + 1;
            uint32_t shift = a->restarts_used - 1 < 4 ? a->restarts_used - 1 : 4;
            g->delay_ms = BACKOFF_MS << shift;
        }
    }
    if (g->action == DDL_GEN_RESTART) {
        snprintf(cause, sizeof cause, "generation %u: %s; restart %u of %u: generation %u%s %s",
                 f->gen, line, a->restarts_used, o->restarts, g->gen, world,
                 ck >= 0 ? "resumes from the checkpoint" : "starts over");
        if (ck >= 0)
            snprintf(cause + strlen(cause), sizeof cause - strlen(cause), " of step %lld",
                     (long long)ck);
    } else if (g->code >= 0) {
        snprintf(cause, sizeof cause, "generation %u: %s; stopping the step (exit status %d): %s",
                 f->gen, line, g->code, why);
    } else {
        snprintf(cause, sizeof cause, "generation %u: %s; stopping the step: %s", f->gen, line,
                 why);
    }
    g->cause = cause;
    ddl_error("%s", cause);
    if (a->ckpt_dir && *a->ckpt_dir) {
        ddl_error_t err;
        ddl_fail_summary_t s = {
            .step = o->step,
            .gen = f->gen,
            .rank = rank_of(a, f->rank),
            .node = f->node,
            .host = f->host,
            .cls = f->cls,
            .wstatus = f->wstatus,
            .text = f->text,
            .decision = g->action == DDL_GEN_RESTART ? "restart" : "stop",
            .exit_code = g->action == DDL_GEN_RESTART ? -1 : g->code,
            .ckpt_step = ck,
            .restarts_left = (int)(o->restarts - a->restarts_used),
            .detected_ms = ddl_realtime_ms(),
        };
        if (ddl_fail_summary_write(a->ckpt_dir, &s, &err) < 0)
            ddl_warn("%s", err.text);
    }
    to_peers(a, &m);
    apply_generation(a, &m);
    free(map);
}

/* leader_failure: the leader takes a failure into the current window. */
static void leader_failure(agent_t *a, const failure_t *f)
{
    if (a->final)
        return;
    if (f->gen != a->gen) {
        ddl_debug("ignoring a failure of generation %u (the step is in %u)", f->gen, a->gen);
        return;
    }
    if (!a->decide_at) {
        a->cause = *f;
        a->decide_at = ddl_now_ms() + FAILURE_WINDOW_MS;
    } else if (ddl_fail_score(f->cls, f->wstatus) >
               ddl_fail_score(a->cause.cls, a->cause.wstatus)) {
        char line[800];
        fail_line(a, &a->cause, line, sizeof line);
        ddl_info("taken as a consequence: %s", line);
        a->cause = *f;
    } else {
        char line[800];
        fail_line(a, f, line, sizeof line);
        ddl_info("taken as a consequence: %s", line);
    }
}

/* report_failure: a failure seen here goes to the leader (or is the leader's). */
static void report_failure(agent_t *a, const failure_t *f)
{
    if (a->leader) {
        leader_failure(a, f);
        return;
    }
    if (!a->up || a->final)
        return;
    ddl_msg_t m = {.type = DDL_MSG_FAILURE};
    m.u.failure.gen = f->gen;
    m.u.failure.rank = f->rank < 0 ? UINT32_MAX : (uint32_t)f->rank;
    m.u.failure.node_id = f->node;
    m.u.failure.cls = f->cls;
    m.u.failure.wstatus = f->wstatus;
    m.u.failure.host = (char *)f->host;
    m.u.failure.text = (char *)f->text;
    conn_queue(a->up, &m);
}

/* failure_from: a FAILURE message (a supervisor's, or another agent's on
 * the leader) as a failure_t of node `node`. */
static void failure_from(agent_t *a, const ddl_msg_t *m, uint32_t node, const char *host,
                         failure_t *f)
{
    const typeof(m->u.failure) *x = &m->u.failure;
    memset(f, 0, sizeof *f);
    f->gen = x->gen;
    f->rank = x->rank < a->opts->size ? (int64_t)x->rank : -1;
    f->node = node;
    f->cls = x->cls;
    f->wstatus = x->wstatus;
    snprintf(f->host, sizeof f->host, "%s", host ? host : "");
    snprintf(f->text, sizeof f->text, "%s", x->text && *x->text ? x->text : "failed");
}

/* rank_exited: the leader counts ranks that exited 0 in this generation;
 * all of them: the step is finished. */
static void rank_exited(agent_t *a, uint32_t rank, uint32_t gen)
{
    if (a->final || gen != a->gen || rank >= a->opts->size || a->exited[rank])
        return;
    a->exited[rank] = 1;
    if (++a->nexited < a->world)
        return;
    ddl_msg_t m = {.type = DDL_MSG_GENERATION};
    m.u.generation.gen = a->gen;
    m.u.generation.action = DDL_GEN_FINISH;
    ddl_debug("every rank exited 0 in generation %u: the step is finished", a->gen);
    to_peers(a, &m);
    apply_generation(a, &m);
}

/* stop_here: this node's ranks stop with DDL_EXIT_NODE_LOST (no leader). */
static void stop_here(agent_t *a, const char *why)
{
    char cause[600];
    snprintf(cause, sizeof cause, "generation %u: %s; stopping this node's ranks (exit status %d)",
             a->gen, why, DDL_EXIT_NODE_LOST);
    ddl_error("%s", cause);
    ddl_msg_t m = {.type = DDL_MSG_GENERATION};
    m.u.generation.gen = a->gen;
    m.u.generation.action = DDL_GEN_STOP;
    m.u.generation.code = DDL_EXIT_NODE_LOST;
    m.u.generation.cause = cause;
    apply_generation(a, &m);
}

/* link_lost: a link between agents closed or went silent while the step runs. */
static void link_lost(agent_t *a, conn_t *c, const char *how)
{
    if (!a->opts->supervise || a->final || a->shutting_down)
        return;
    if (c->kind == CONN_LEADER) {
        /* the main loop chooses another leader (takeover), outside the
         * walk over the connections */
        snprintf(a->takeover_why, sizeof a->takeover_why, "lost the leader agent (node %u, %s): %s",
                 a->leader_node, a->leader_addr, how);
        snprintf(a->takeover_how, sizeof a->takeover_how, "%s", how);
        a->need_takeover = 1;
        return;
    }
    if (c->kind != CONN_PEER || c->node_id >= a->opts->nnodes || a->lost[c->node_id])
        return;
    a->lost[c->node_id] = 1;
    if (a->node_rank && a->node_rank[c->node_id] == NO_RANK) {
        uint32_t left = 0;
        for (uint32_t n = 0; n < a->opts->nnodes; n++)
            left += a->node_rank[n] == NO_RANK && !a->lost[n];
        ddl_error("generation %u: spare node %u (%s) %s [node-lost]; %u spare node%s left", a->gen,
                  c->node_id, a->peers[c->node_id].host, how, left, left == 1 ? "" : "s");
        snprintf(a->last_failure, sizeof a->last_failure, "generation %u: spare node %u (%s) %s "
                 "[node-lost]", a->gen, c->node_id, a->peers[c->node_id].host, how);
        return;
    }
    failure_t f = {.gen = a->gen, .rank = -1, .node = c->node_id, .cls = DDL_FAIL_NODE};
    snprintf(f.host, sizeof f.host, "%s", a->peers[c->node_id].host);
    snprintf(f.text, sizeof f.text, "its agent %s", how);
    leader_failure(a, &f);
}

/* check_silence: links quiet for longer than the node timeout are lost. */
static void check_silence(agent_t *a)
{
    int64_t now = ddl_now_ms();
    for (size_t i = a->nconns; i-- > 0;) {
        conn_t *c = a->conns[i];
        if ((c->kind != CONN_PEER && c->kind != CONN_LEADER) || now - c->heard_ms <= a->node_timeout_ms)
            continue;
        char how[96];
        snprintf(how, sizeof how, "was silent for %.1f s (node timeout %.1f s)",
                 (double)(now - c->heard_ms) / 1000.0, a->node_timeout_ms / 1000.0);
        link_lost(a, c, how);
        c->heard_ms = INT64_MAX / 2; /* reported: drop it without a second report */
        conn_drop(a, i);
    }
}

/* silence_due: ms until the next link could time out, -1: none linked. */
static int silence_due(agent_t *a)
{
    int64_t due = -1, now = ddl_now_ms();
    for (size_t i = 0; i < a->nconns; i++) {
        conn_t *c = a->conns[i];
        if (c->kind != CONN_PEER && c->kind != CONN_LEADER)
            continue;
        int64_t left = c->heard_ms + a->node_timeout_ms + 1 - now;
        left = left < 0 ? 0 : left;
        due = due < 0 || left < due ? left : due;
    }
    return (int)due;
}

/* handle_failure: FAILURE from one of this node's supervisors, or (on the
 * leader) from another node's agent. */
static void handle_failure(agent_t *a, conn_t *c, const ddl_msg_t *m)
{
    failure_t f;
    if (c->kind == CONN_PEER) {
        failure_from(a, m, c->node_id, m->u.failure.host, &f);
        leader_failure(a, &f);
        return;
    }
    uint32_t rank = m->u.failure.rank;
    if (c->rank < 0 || (uint32_t)c->rank != rank) {
        conn_error(c, EPERM, "FAILURE for a rank this connection did not register");
        return;
    }
    a->ranks[rank].state = DDL_RANK_FAILED;
    a->ranks[rank].wstatus = m->u.failure.wstatus;
    heard_rank(a, rank);
    failure_from(a, m, a->opts->node_id, a->host, &f);
    report_failure(a, &f);
}

static void handle_msg(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    char why[160];
    uint32_t rank;
    if (c->kind != CONN_UNIX) {
        /* TCP: a hello first, then only the exchanges between agents */
        int linked = c->kind == CONN_PEER || c->kind == CONN_LEADER;
        if (linked && m->type == DDL_MSG_PEER_BEAT)
            handle_beat(a, c, m);
        else if (c->kind == CONN_TCP_NEW && m->type == DDL_MSG_PEER_HELLO)
            handle_hello(a, c, m);
        else if (c->kind == CONN_PEER && m->type == DDL_MSG_NODE_GATHER)
            handle_node_gather(a, c, m);
        else if (c->kind == CONN_LEADER && m->type == DDL_MSG_ALLGATHER_RESULT)
            handle_result(a, m);
        else if (c->kind == CONN_PEER && m->type == DDL_MSG_FAILURE && a->opts->supervise)
            handle_failure(a, c, m);
        else if (c->kind == CONN_PEER && m->type == DDL_MSG_RANK_STATE && a->opts->supervise &&
                 m->u.rank_state.state == DDL_RANK_EXITED)
            rank_exited(a, m->u.rank_state.rank, m->u.rank_state.gen);
        else if (c->kind == CONN_LEADER && m->type == DDL_MSG_GENERATION)
            apply_generation(a, m);
        else if (c->kind == CONN_LEADER && m->type == DDL_MSG_ROSTER)
            handle_roster(a, m);
        else if (c->kind == CONN_LEADER && m->type == DDL_MSG_ERROR) {
            ddl_error("the leader agent refused this node's exchange: %s", m->u.error.text);
            ag_fail(a, m->u.error.code, m->u.error.text);
        } else {
            ddl_warn("dropping an agent connection (node %u) that sent %s", c->node_id,
                     ddl_msg_type_str(m->type));
            conn_error(c, EPROTO, "unexpected message between agents");
            c->close_after_flush = 1;
        }
        if (linked && c->node_id < a->opts->nnodes)
            a->peers[c->node_id].heard_at = ddl_now_ms();
        if (linked)
            c->heard_ms = ddl_now_ms();
        return;
    }
    switch (m->type) {
    case DDL_MSG_REGISTER:
        rank = m->u.reg.rank;
        if (rank >= a->opts->size) {
            snprintf(why, sizeof why, "rank %u is outside the step's world of %u", rank,
                     a->opts->size);
            conn_error(c, EINVAL, why);
            return;
        }
        if (!a->is_local[rank]) {
            snprintf(why, sizeof why, "rank %u does not run on node %u", rank, a->opts->node_id);
            conn_error(c, EINVAL, why);
            return;
        }
        c->rank = (int)rank;
        ddl_rank_info_t *ri = &a->ranks[rank];
        ri->state = DDL_RANK_STARTING;
        ri->pid = m->u.reg.pid;
        memcpy(ri->cpus, m->u.reg.cpus, sizeof ri->cpus);
        memcpy(ri->gpu, m->u.reg.gpu, sizeof ri->gpu);
        memcpy(ri->nic, m->u.reg.nic, sizeof ri->nic);
        ri->restarts = m->u.reg.restarts;
        heard_rank(a, rank);
        ddl_debug("rank %u registered (supervisor pid %d)", rank, m->u.reg.pid);
        conn_queue(c, &(ddl_msg_t){.type = DDL_MSG_ACK});
        return;
    case DDL_MSG_RANK_STATE:
        rank = m->u.rank_state.rank;
        if (c->rank < 0 || (uint32_t)c->rank != rank) {
            snprintf(why, sizeof why, "RANK_STATE for rank %u from a connection that did not "
                     "register it", rank);
            conn_error(c, EPERM, why);
            return;
        }
        a->ranks[rank].state = m->u.rank_state.state;
        a->ranks[rank].wpid = m->u.rank_state.pid;
        a->ranks[rank].wstatus = m->u.rank_state.wstatus;
        heard_rank(a, rank);
        ddl_debug("rank %u is %s", rank, ddl_rank_state_str(m->u.rank_state.state));
        if (a->opts->supervise && m->u.rank_state.state == DDL_RANK_EXITED) {
            if (a->leader)
                rank_exited(a, rank, m->u.rank_state.gen);
            else if (a->up)
                conn_queue(a->up, m);
        }
        return;
    case DDL_MSG_FAILURE:
        if (!a->opts->supervise)
            break;
        handle_failure(a, c, m);
        return;
    case DDL_MSG_ALLGATHER:
        handle_allgather(a, c, m);
        return;
    case DDL_MSG_STATUS_REQ:
        handle_status(a, c);
        return;
    default:
        snprintf(why, sizeof why, "unexpected %s message", ddl_msg_type_str(m->type));
        conn_error(c, EPROTO, why);
        c->close_after_flush = 1;
        return;
    }
}

static void conn_drop(agent_t *a, size_t idx)
{
    conn_t *c = a->conns[idx];
    if (c->rank >= 0) {
        ddl_rank_info_t *r = &a->ranks[c->rank];
        int live = r->state == DDL_RANK_STARTING || r->state == DDL_RANK_RUNNING;
        if (a->opts->supervise && !a->final && !a->shutting_down) {
            /* its supervisor waits for the decision until the step ends */
            failure_t f = {.gen = a->gen, .rank = c->rank, .node = a->opts->node_id,
                           .cls = DDL_FAIL_SUPERVISOR};
            snprintf(f.host, sizeof f.host, "%s", a->host);
            if (r->state == DDL_RANK_FAILED || r->state == DDL_RANK_EXITED) {
                /* it said how it ended before the decision: it was signalled */
                char how[128] = "never started (a spare)";
                if (r->wpid > 0)
                    ddl_describe_wait_status(r->wstatus, how, sizeof how);
                snprintf(f.text, sizeof f.text, "its supervisor ddl-launch (pid %d) was told to "
                         "stop and ended with its worker, which %s", (int)c->pid, how);
                ddl_debug("supervisor of rank %d (pid %d) ended", c->rank, (int)c->pid);
            } else {
                snprintf(f.text, sizeof f.text, "its supervisor ddl-launch (pid %d) is gone",
                         (int)c->pid);
                ddl_warn("supervisor of rank %d (pid %d) disconnected", c->rank, (int)c->pid);
            }
            r->state = DDL_RANK_FAILED;
            report_failure(a, &f);
        } else if (!a->shutting_down && !a->final && live) {
            ddl_warn("supervisor of rank %d (pid %d) disconnected while the rank was %s",
                     c->rank, (int)c->pid, ddl_rank_state_str(r->state));
            r->state = DDL_RANK_FAILED;
        }
        c->rank = -1;
    }
    if (c->kind == CONN_LEADER) {
        a->up = NULL;
        if (!a->shutting_down) {
            if (a->ag_active)
                ddl_error("lost the link to the leader agent (%s) during an exchange",
                          a->leader_addr);
            else
                ddl_info("the leader agent (%s) closed its link", a->leader_addr);
            ag_fail(a, ECONNRESET, "this node's agent lost its link to the leader agent");
        }
    } else if (c->kind == CONN_PEER && !a->shutting_down && !a->final) {
        ddl_info("node %u's agent closed its link", c->node_id);
    }
    if (c->heard_ms < INT64_MAX / 2 && (c->kind == CONN_PEER || c->kind == CONN_LEADER))
        link_lost(a, c, "closed its link");
    if ((c->kind == CONN_PEER || c->kind == CONN_LEADER) && c->node_id < a->opts->nnodes)
        a->peers[c->node_id].state = DDL_PEER_LOST;
    for (uint32_t i = 0; i < a->opts->size; i++)
        if (a->ag_waiter[i] == c)
            a->ag_waiter[i] = NULL;
    conn_free(c);
    a->conns[idx] = a->conns[--a->nconns];
}

/* conn_read: read what is available and handle every whole frame; returns
 * -1 when the connection must be dropped (after handling what came before
 * the peer closed). */
static int conn_read(agent_t *a, conn_t *c)
{
    int eof = 0;
    for (;;) {
        if (c->in_cap - c->in_len < 4096) {
            size_t cap = c->in_cap ? c->in_cap * 2 : 8192;
            if (cap > DDL_PROTO_MAX_BODY + 2 * DDL_PROTO_HDR_LEN + 8192)
                cap = DDL_PROTO_MAX_BODY + 2 * DDL_PROTO_HDR_LEN + 8192;
            if (cap <= c->in_cap)
                return -1;
            uint8_t *nb = realloc(c->in, cap);
            if (!nb)
                return -1;
            c->in = nb;
            c->in_cap = cap;
        }
        ssize_t n = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                break;
            return -1;
        }
        if (n == 0) {
            eof = 1;
            break;
        }
        c->in_len += (size_t)n;
    }
    size_t off = 0;
    for (;;) {
        ddl_msg_t m;
        ddl_error_t err;
        ssize_t used = ddl_proto_decode(c->in + off, c->in_len - off, &m, &err);
        if (used < 0) {
            ddl_warn("dropping client pid %d: %s", (int)c->pid, err.text);
            conn_error(c, EPROTO, err.text);
            ddl_fd_set_nonblock(c->fd, 0);
            if (c->out_len > c->out_off)
                ddl_write_full(c->fd, c->out + c->out_off, c->out_len - c->out_off);
            return -1;
        }
        if (used == 0)
            break;
        handle_msg(a, c, &m);
        ddl_msg_clear(&m);
        off += (size_t)used;
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
    return eof ? -1 : 0;
}

static int conn_flush(conn_t *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return 0;
            return -1;
        }
        c->out_off += (size_t)n;
    }
    return c->close_after_flush ? -1 : 0;
}

static int conn_add(agent_t *a, conn_t *c)
{
    if (a->nconns == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        conn_t **nc = realloc(a->conns, cap * sizeof *nc);
        if (!nc)
            return -1;
        a->conns = nc;
        a->cap = cap;
    }
    a->conns[a->nconns++] = c;
    return 0;
}

/* do_accept_tcp: another node's agent; it must say hello before anything. */
static void do_accept_tcp(agent_t *a)
{
    for (;;) {
        int fd = accept4(a->tfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR)
                ddl_warn("accept (TCP): %m");
            return;
        }
        conn_t *c = calloc(1, sizeof *c);
        if (!c || conn_add(a, c) < 0) {
            free(c);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->kind = CONN_TCP_NEW;
        c->opened_ms = ddl_now_ms();
        c->rank = -1;
        c->uid = (uid_t)-1;
    }
}

static void do_accept(agent_t *a)
{
    for (;;) {
        int fd = accept4(a->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR)
                ddl_warn("accept: %m");
            return;
        }
        conn_t *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->rank = -1;
        if (ddl_sock_peer(fd, &c->pid, &c->uid, NULL) < 0 ||
            !ddl_sock_peer_allowed(c->uid, getuid())) {
            char why[128];
            snprintf(why, sizeof why, "permission denied: uid %u may not use the agent of "
                     "uid %u", (unsigned)c->uid, (unsigned)getuid());
            ddl_warn("refused connection from pid %d: %s", (int)c->pid, why);
            conn_error(c, EACCES, why);
            ddl_fd_set_nonblock(fd, 0);
            ddl_write_full(fd, c->out, c->out_len);
            conn_free(c);
            continue;
        }
        if (conn_add(a, c) < 0)
            conn_free(c);
    }
}

/* connect_to: a non-leader's link to the leader agent at addr, hello
 * answered (blocks up to timeout_ms to connect, as long again for the ACK). */
static int connect_to(agent_t *a, const char *addr, int timeout_ms)
{
    const ddl_agent_opts_t *o = a->opts;
    ddl_error_t err;
    ddl_msg_t m = {.type = DDL_MSG_PEER_HELLO};
    int fd = ddl_tcp_connect(addr, timeout_ms, &err);
    if (fd < 0) {
        ddl_error("node %u: cannot reach the leader agent: %s", o->node_id, err.text);
        return -1;
    }
    if (o->supervise && a->listen_fd < 0) {
        /* where this agent would lead: the address that reaches the leader */
        struct sockaddr_in sa;
        socklen_t sl = sizeof sa;
        char ip[INET_ADDRSTRLEN];
        uint16_t port = 0;
        if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0 &&
            inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip) &&
            (a->listen_fd = ddl_tcp_listen(ip, &port, &err)) >= 0)
            snprintf(a->roster[o->node_id], sizeof a->roster[0], "%s:%u", ip, port);
        else
            ddl_warn("node %u: cannot listen for agents (%s): it will not take over as the "
                     "leader", o->node_id, err.text);
    }
    m.u.peer_hello.step = (char *)o->step;
    m.u.peer_hello.node_id = o->node_id;
    m.u.peer_hello.secret = (uint8_t *)o->secret;
    m.u.peer_hello.secret_len = o->secret_len;
    m.u.peer_hello.host = a->host;
    m.u.peer_hello.listen = a->roster ? a->roster[o->node_id] : NULL;
    if (ddl_proto_send(fd, &m) < 0 || ddl_proto_recv(fd, &m, timeout_ms, &err) < 0) {
        ddl_error("node %u: no answer from the leader agent at %s: %s", o->node_id, addr,
                  errno == EPROTO || errno == ETIMEDOUT ? err.text : strerror(errno));
        close(fd);
        return -1;
    }
    if (m.type != DDL_MSG_ACK) {
        ddl_error("node %u: the leader agent at %s refused this node: %s", o->node_id, addr,
                  m.type == DDL_MSG_ERROR ? m.u.error.text : ddl_msg_type_str(m.type));
        ddl_msg_clear(&m);
        close(fd);
        return -1;
    }
    conn_t *c = calloc(1, sizeof *c);
    if (!c || conn_add(a, c) < 0) {
        free(c);
        close(fd);
        ddl_error("out of memory");
        return -1;
    }
    ddl_fd_set_nonblock(fd, 1);
    c->fd = fd;
    c->kind = CONN_LEADER;
    c->node_id = UINT32_MAX; /* until its first beat */
    c->heard_ms = ddl_now_ms();
    c->rank = -1;
    a->up = c;
    snprintf(a->leader_addr, sizeof a->leader_addr, "%s", addr);
    ddl_debug("node %u: linked to the leader agent at %s", o->node_id, addr);
    return 0;
}

/* ------------------------------------------------------------ leader takeover */

/* send_roster: the leader tells every linked agent where each agent listens. */
static void send_roster(agent_t *a)
{
    if (!a->roster)
        return;
    char **addr = calloc(a->opts->nnodes, sizeof *addr);
    if (!addr)
        return;
    for (uint32_t n = 0; n < a->opts->nnodes; n++)
        addr[n] = a->lost[n] ? "" : a->roster[n];
    ddl_msg_t m = {.type = DDL_MSG_ROSTER};
    m.u.roster.nnodes = a->opts->nnodes;
    m.u.roster.addr = addr;
    to_peers(a, &m);
    free(addr);
}

/* handle_roster: a non-leader learns where the others would lead. */
static void handle_roster(agent_t *a, const ddl_msg_t *m)
{
    if (!a->roster || m->u.roster.nnodes != a->opts->nnodes)
        return;
    for (uint32_t n = 0; n < a->opts->nnodes; n++)
        if (n != a->opts->node_id)
            snprintf(a->roster[n], sizeof a->roster[n], "%s", m->u.roster.addr[n]);
}

/* become_leader: this agent leads from now on; the others connect to the
 * socket it has listened on since it started. */
static void become_leader(agent_t *a)
{
    uint32_t age;
    a->leader = 1;
    a->leader_node = a->opts->node_id;
    snprintf(a->leader_addr, sizeof a->leader_addr, "%s", a->roster[a->opts->node_id]);
    a->tfd = a->listen_fd;
    a->listen_fd = -1;
    ddl_fd_set_nonblock(a->tfd, 1);
    a->restarts_used = a->gen; /* one generation per restart so far */
    a->decide_at = 0;
    a->stalled = 0;
    if (ckpt_latest(a->ckpt_dir, &a->ckpt_best, &age) < 0)
        a->ckpt_best = -1;
    for (uint32_t n = 0; n < a->opts->nnodes; n++)
        a->peers[n].state = a->lost[n] ? DDL_PEER_LOST : DDL_PEER_NONE;
    a->takeover_until = ddl_now_ms() + a->node_timeout_ms + 1000;
    ddl_warn("generation %u: node %u (%s) takes over as the leader; waiting up to %.1f s for "
             "the other nodes' agents", a->gen, a->opts->node_id, a->host,
             (a->node_timeout_ms + 1000) / 1000.0);
}

/* takeover: the leader is lost: the lowest live node leads; the others
 * connect to it.  Without a node to lead, this node's ranks stop. */
static void takeover(agent_t *a)
{
    const ddl_agent_opts_t *o = a->opts;
    uint32_t old = a->leader_node;
    if (old < o->nnodes)
        a->lost[old] = 1;
    a->old_leader = old;
    ag_fail(a, ECANCELED, "the leader agent was lost");
    if (!a->roster || !a->node_rank) { /* no spare, no shrinking: nothing to take over */
        stop_here(a, a->takeover_why);
        return;
    }
    ddl_error("generation %u: %s; choosing another leader", a->gen, a->takeover_why);
    for (;;) {
        uint32_t cand = 0;
        while (cand < o->nnodes && a->lost[cand])
            cand++;
        if (cand >= o->nnodes || (cand == o->node_id && a->listen_fd < 0)) {
            stop_here(a, a->takeover_why);
            return;
        }
        if (cand == o->node_id) {
            become_leader(a);
            return;
        }
        if (a->roster[cand][0] && connect_to(a, a->roster[cand], a->node_timeout_ms + 1000) == 0) {
            a->leader_node = cand;
            ddl_warn("generation %u: node %u follows node %u (%s), the new leader", a->gen,
                     o->node_id, cand, a->roster[cand]);
            return;
        }
        a->lost[cand] = 1; /* unreachable: the next one */
    }
}

/* finish_takeover: the new leader has heard from every live agent, or
 * waited long enough: the silent ones are lost too; the old leader's loss
 * is decided like any node's. */
static void finish_takeover(agent_t *a)
{
    const ddl_agent_opts_t *o = a->opts;
    int64_t now = ddl_now_ms();
    int all = 1;
    for (uint32_t n = 0; n < o->nnodes; n++)
        if (n != o->node_id && !a->lost[n] && a->peers[n].state != DDL_PEER_UP)
            all = 0;
    if (!all && now < a->takeover_until)
        return;
    a->takeover_until = 0;
    for (uint32_t n = 0; n < o->nnodes; n++)
        if (n != o->node_id && !a->lost[n] && a->peers[n].state != DDL_PEER_UP) {
            ddl_error("generation %u: node %u did not join the new leader: lost", a->gen, n);
            a->lost[n] = 1;
        }
    send_roster(a);
    failure_t f = {.gen = a->gen, .rank = -1, .node = a->old_leader, .cls = DDL_FAIL_NODE};
    snprintf(f.host, sizeof f.host, "%s",
             a->old_leader < o->nnodes ? a->peers[a->old_leader].host : "?");
    snprintf(f.text, sizeof f.text, "the leader's agent %s", a->takeover_how);
    leader_failure(a, &f);
}

/* all_done: every local rank has ended (one that never registered counts
 * as ended once supervisors have had time to register). */
static int all_done(agent_t *a)
{
    if (a->opts->supervise) { /* the decision is made and every supervisor has gone */
        for (size_t i = 0; a->final && i < a->nconns; i++)
            if (a->conns[i]->kind == CONN_UNIX && a->conns[i]->rank >= 0)
                return 0;
        return a->final;
    }
    int late = ddl_now_ms() - a->started_ms > 30000;
    for (uint32_t r = 0; r < a->opts->size; r++) {
        if (!a->is_local[r])
            continue;
        uint8_t st = a->ranks[r].state;
        if (st == DDL_RANK_STARTING || st == DDL_RANK_RUNNING || (st == DDL_RANK_PENDING && !late))
            return 0;
    }
    return 1;
}

static int setup(agent_t *a)
{
    sigset_t mask;
    ddl_error_t err;
    uint32_t n = a->opts->size;

    a->ranks = calloc(n, sizeof *a->ranks);
    a->ag_blob = calloc(n, sizeof *a->ag_blob);
    a->ag_len = calloc(n, sizeof *a->ag_len);
    a->ag_waiter = calloc(n, sizeof *a->ag_waiter);
    a->is_local = calloc(n, 1);
    a->heard_at = calloc(n, sizeof *a->heard_at);
    a->peers = calloc(a->opts->nnodes ? a->opts->nnodes : 1, sizeof *a->peers);
    a->exited = calloc(n, 1);
    a->lost = calloc(a->opts->nnodes ? a->opts->nnodes : 1, 1);
    if (!a->ranks || !a->ag_blob || !a->ag_len || !a->ag_waiter || !a->is_local || !a->heard_at ||
        !a->peers || !a->exited || !a->lost) {
        ddl_error("out of memory for a step of %u ranks", n);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        a->ranks[i].rank = i;
    const ddl_agent_opts_t *o = a->opts;
    for (uint32_t i = 0; i < (o->local ? o->nlocal : n); i++) {
        uint32_t r = o->local ? o->local[i] : i;
        if (r >= n || a->is_local[r]) {
            ddl_error("local rank list: rank %u is %s", r, r >= n ? "outside the world" : "twice");
            return -1;
        }
        a->is_local[r] = 1;
        a->nlocal++;
    }
    if (o->spares || o->min_nodes) {
        uint32_t nn = o->nnodes ? o->nnodes : 1;
        a->tpn = n / nn;
        if (n % nn || o->spares >= nn || o->min_nodes > nn - o->spares) {
            ddl_error("--ddl-spares=%u --ddl-min-nodes=%u: a step of %u tasks on %u nodes %s", o->spares,
                      o->min_nodes, n, nn, n % nn ? "needs the same number of tasks on every node"
                      : o->spares >= nn ? "leaves no node to train on" : "has too few nodes");
            return -1;
        }
        for (uint32_t r = 0; r < n; r++)
            if (a->is_local[r] && r / a->tpn != o->node_id) {
                ddl_error("--ddl-spares, --ddl-min-nodes: task %u runs on node %u, not in block "
                          "order (srun --distribution=block)", r, o->node_id);
                return -1;
            }
        a->node_rank = calloc(nn, sizeof *a->node_rank);
        a->slot_of_rank = calloc(n, sizeof *a->slot_of_rank);
        if (!a->node_rank || !a->slot_of_rank) {
            ddl_error("out of memory");
            return -1;
        }
        for (uint32_t i = 0; i < nn; i++)
            a->node_rank[i] = i < nn - o->spares ? i : NO_RANK;
    }
    remap(a);
    a->leader = o->nnodes <= 1 || !o->leader;
    a->started_ms = ddl_now_ms();
    a->beat_ms = o->heartbeat_ms > 0 ? o->heartbeat_ms : DDL_HEARTBEAT_DEFAULT_MS;
    a->ckpt_dir = getenv("DDL_CHECKPOINT_DIR");
    a->node_timeout_ms = o->node_timeout_ms > 0 ? o->node_timeout_ms : DDL_NODE_TIMEOUT_DEFAULT_MS;
    uint32_t age;
    if (ckpt_latest(a->ckpt_dir, &a->ckpt_best, &age) < 0)
        a->ckpt_best = -1;
    if (o->host)
        snprintf(a->host, sizeof a->host, "%s", o->host);
    else if (gethostname(a->host, sizeof a->host - 1) < 0)
        snprintf(a->host, sizeof a->host, "?");
    if (o->nnodes > 1 && a->leader && o->tcp_fd < 0) {
        ddl_error("the leader of a %u-node step needs a TCP socket", o->nnodes);
        return -1;
    }
    a->tfd = a->leader ? o->tcp_fd : -1;
    if (a->tfd >= 0)
        ddl_fd_set_nonblock(a->tfd, 1);

    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    a->sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (a->sfd < 0) {
        ddl_error("signalfd: %m");
        return -1;
    }
    if (a->opts->parent_pid > 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != a->opts->parent_pid) {
            ddl_error("parent process %d is already gone", a->opts->parent_pid);
            return -1;
        }
    }
    a->lfd = ddl_sock_listen(a->opts->socket_path, &err);
    if (a->lfd < 0) {
        ddl_error("%s", err.text);
        return -1;
    }
    ddl_fd_set_nonblock(a->lfd, 1);
    if (o->supervise && o->nnodes > 1) {
        a->roster = calloc(o->nnodes, sizeof *a->roster);
        if (!a->roster) {
            ddl_error("out of memory");
            return -1;
        }
        struct sockaddr_in sa;
        socklen_t sl = sizeof sa;
        char ip[INET_ADDRSTRLEN];
        if (a->leader && getsockname(a->tfd, (struct sockaddr *)&sa, &sl) == 0 &&
            inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip))
            snprintf(a->roster[o->node_id], sizeof a->roster[0], "%s:%u", ip,
                     ntohs(sa.sin_port));
    }
    a->leader_node = a->leader ? o->node_id : 0; /* a non-leader learns it from the first beat */
    if (a->leader && a->roster)
        snprintf(a->leader_addr, sizeof a->leader_addr, "%s", a->roster[o->node_id]);
    if (!a->leader && connect_to(a, o->leader, 30000) < 0)
        return -1;
    return 0;
}

int ddl_agent_serve(const ddl_agent_opts_t *opts)
{
    agent_t a = {.opts = opts, .lfd = -1, .sfd = -1, .tfd = -1, .listen_fd = -1};
    int status = 1;
    struct pollfd *pfds = NULL;

    if (setup(&a) < 0)
        goto out;
    ddl_info("serving step %s (%u ranks, %u here, node %u of %u%s) on %s", opts->step, opts->size,
             a.nlocal, opts->node_id, opts->nnodes ? opts->nnodes : 1, a.leader ? ", leader" : "",
             opts->socket_path);
    if (opts->ready_fd >= 0) {
        ddl_write_full(opts->ready_fd, "1\n", 2);
        close(opts->ready_fd);
    }
    for (;;) {
        size_t n = a.nconns + 3;
        struct pollfd *np = realloc(pfds, n * sizeof *pfds);
        if (!np) {
            ddl_error("out of memory");
            goto out;
        }
        pfds = np;
        pfds[0] = (struct pollfd){.fd = a.sfd, .events = POLLIN};
        pfds[1] = (struct pollfd){.fd = a.lfd, .events = POLLIN};
        pfds[2] = (struct pollfd){.fd = a.tfd, .events = POLLIN}; /* -1: ignored */
        for (size_t i = 0; i < a.nconns; i++) {
            conn_t *c = a.conns[i];
            pfds[i + 3] = (struct pollfd){.fd = c->fd, .events = POLLIN};
            if (c->out_off < c->out_len)
                pfds[i + 3].events |= POLLOUT;
        }
        int wait = opts->exit_when_done ? 1000 : -1;
        if (opts->nnodes > 1) {
            int64_t left = a.last_beat + a.beat_ms - ddl_now_ms();
            left = left < 0 ? 0 : left;
            wait = wait < 0 || left < wait ? (int)left : wait;
        }
        if (opts->supervise && !a.final) {
            int due = silence_due(&a);
            if (due >= 0 && (wait < 0 || due < wait))
                wait = due;
            if (a.decide_at || a.takeover_until) {
                int64_t at = a.decide_at ? a.decide_at : a.takeover_until;
                if (a.takeover_until && a.takeover_until < at)
                    at = a.takeover_until;
                int64_t left = at - ddl_now_ms();
                left = left < 0 ? 0 : left;
                wait = wait < 0 || left < wait ? (int)left : wait;
            }
        }
        if (poll(pfds, n, wait) < 0) {
            if (errno == EINTR)
                continue;
            ddl_error("poll: %m");
            goto out;
        }
        /* Walk connections from the end, since dropping swaps in the last. */
        for (size_t i = a.nconns; i-- > 0;) {
            conn_t *c = a.conns[i];
            short re = pfds[i + 3].revents;
            int drop = 0;
            if (re & (POLLIN | POLLHUP | POLLERR))
                drop = conn_read(&a, c) < 0;
            if (!drop && c->out_off < c->out_len)
                drop = conn_flush(c) < 0;
            else if (!drop && c->close_after_flush)
                drop = 1;
            if (drop)
                conn_drop(&a, i);
        }
        if (opts->nnodes > 1 && ddl_now_ms() - a.last_beat >= a.beat_ms) {
            send_beats(&a);
            for (size_t i = a.nconns; i-- > 0;)
                if (a.conns[i]->kind == CONN_TCP_NEW &&
                    ddl_now_ms() - a.conns[i]->opened_ms > HELLO_TIMEOUT_MS) {
                    ddl_warn("dropping a TCP connection that did not say hello within %d s",
                             HELLO_TIMEOUT_MS / 1000);
                    conn_drop(&a, i);
                }
        }
        if (opts->supervise && !a.final) {
            check_silence(&a);
            if (a.need_takeover) {
                a.need_takeover = 0;
                takeover(&a);
            }
            if (a.takeover_until)
                finish_takeover(&a);
            /* a new leader decides once it knows which nodes are left */
            if (a.decide_at && ddl_now_ms() >= a.decide_at && !a.takeover_until)
                decide(&a);
        }
        /* Replies queued for connections other than the one that was read. */
        for (size_t i = a.nconns; i-- > 0;)
            if (a.conns[i]->out_off < a.conns[i]->out_len && conn_flush(a.conns[i]) < 0)
                conn_drop(&a, i);
        if (pfds[1].revents & POLLIN)
            do_accept(&a);
        if (pfds[2].revents & POLLIN)
            do_accept_tcp(&a);
        if (opts->exit_when_done && all_done(&a)) {
            int busy = 0; /* flush what is queued first */
            for (size_t i = 0; i < a.nconns; i++)
                busy |= a.conns[i]->out_off < a.conns[i]->out_len;
            if (!busy) {
                ddl_debug("every rank on this node has ended: exiting");
                status = 0;
                goto out;
            }
        }
        /* Signals last: what clients sent before them has been handled. */
        if (pfds[0].revents) {
            struct signalfd_siginfo si;
            if (read(a.sfd, &si, sizeof si) == sizeof si) {
                ddl_debug("got signal %u: shutting down", si.ssi_signo);
                status = 0;
                goto out;
            }
        }
    }
out:
    a.shutting_down = 1;
    if (a.lfd >= 0) {
        unlink(opts->socket_path);
        close(a.lfd);
    }
    while (a.nconns)
        conn_drop(&a, a.nconns - 1);
    if (a.ag_blob)
        ag_reset(&a);
    free(a.conns);
    free(pfds);
    free(a.ranks);
    free(a.ag_blob);
    free(a.ag_len);
    free(a.ag_waiter);
    free(a.is_local);
    free(a.heard_at);
    free(a.peers);
    free(a.exited);
    free(a.lost);
    free(a.roster);
    if (a.listen_fd >= 0)
        close(a.listen_fd);
    free(a.node_rank);
    free(a.slot_of_rank);
    if (a.tfd >= 0)
        close(a.tfd);
    if (a.sfd >= 0)
        close(a.sfd);
    return status;
}
