/* agent.c: the ddl-agent daemon of one step on one node: start-up, the
 * event loop (common/evloop.h), and the dispatch of every message to its
 * handler by message type and kind of connection (agent_int.h maps the
 * other files).
 *
 * It accepts connections from the step's supervisors (ddl-launch: REGISTER,
 * RANK_STATE), its workers (libddl: ALLGATHER for the bootstrap exchange of
 * UCX addresses) and status clients (STATUS_REQ).  Every connection's peer
 * is checked with SO_PEERCRED: only the agent's own uid and root are served.
 * Sockets are non-blocking with per-connection input/output buffers, so one
 * slow client never stalls the others.
 *
 * A step on several nodes has one agent per node.  The leader (the agent of
 * rank 0's node) also listens on TCP; every other agent connects to it, and
 * both prove that they hold the step's secret (links.c, auth.h) before
 * anything else is accepted.  An exchange then goes: workers -> their agent;
 * a complete node sends NODE_GATHER to the leader; the leader, once it has
 * every rank, sends the ALLGATHER_RESULT to every agent, which hands it to
 * its workers (exchange.c).  Linked agents send each other PEER_BEAT every
 * heartbeat interval; with the time each rank was last heard from, that is
 * what `status` reports as the health of ranks and peers.
 *
 * Recovery (opts->supervise, see agent.h and recovery.c): supervisors send
 * FAILURE; the others' agents forward it to the leader, which decides
 * (policy.c), writes the failure summary and sends GENERATION to every
 * agent.  A linked agent silent for node_timeout_ms is lost: on the leader
 * a node-lost failure (a spare takes the node's place, or the world
 * shrinks: world.c); on the others the loss of the leader, after which the
 * lowest live node takes over (links.c), or their ranks stop.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_int.h"
#include "fileio.h"
#include "env.h"
#include "log.h"
#include "sock.h"

/* remap: the world, and this node's part of it, after node_rank changed. */
void remap(agent_t *a)
{
    ddl_world_remap(&a->w);
    a->nlocal_active = !a->w.node_rank                           ? a->nlocal
                       : a->w.node_rank[a->opts->node_id] != NO_RANK ? a->w.tpn
                                                                     : 0;
}

void heard_rank(agent_t *a, uint32_t rank)
{
    if (rank < a->opts->size)
        a->heard_at[rank] = ddl_now_ms();
}

static void handle_status(agent_t *a, conn_t *c)
{
    ddl_msg_t m;
    if (status_fill(a, &m) < 0) {
        conn_error(c, ENOMEM, "agent out of memory");
        c->close_after_flush = 1;
        return;
    }
    conn_queue(c, &m);
    status_release(&m);
    c->close_after_flush = 1;
}

/* ------------------------------------------------------------------ recovery */

void conn_drop(agent_t *a, size_t idx);

/* ------------------------------------------------------------ dispatch */

/* A handler returns NULL, or what the sender (a linked agent) may not say,
 * for the log and an ERROR EPERM; the message is then ignored. */
typedef const char *(*handler_t)(agent_t *a, conn_t *c, ddl_msg_t *m);

static const char *on_auth(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    handle_auth(a, c, m);
    return NULL;
}

static const char *on_beat(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    handle_beat(a, c, m);
    return NULL;
}

static const char *on_node_gather(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    handle_node_gather(a, c, m);
    return NULL;
}

static const char *on_result(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    handle_result(a, m);
    return NULL;
}

static const char *on_peer_failure(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    uint32_t r = m->u.failure.rank;
    if (r >= a->opts->size || !owns(a, c->node_id, r))
        return "a failure of a rank it does not run";
    handle_failure(a, c, m);
    return NULL;
}

static const char *on_peer_rank_state(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    uint32_t r = m->u.rank_state.rank;
    if (r >= a->opts->size || !owns(a, c->node_id, r))
        return "the state of a rank it does not run";
    if (m->u.rank_state.state == DDL_RANK_EXITED)
        rank_exited(a, r, m->u.rank_state.gen);
    return NULL;
}

static const char *on_generation(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    char why[200];
    if (generation_ok(a, m, why, sizeof why) < 0)
        ddl_error("ignoring the leader's generation %u: %s", m->u.generation.gen, why);
    else
        apply_generation(a, m);
    return NULL;
}

static const char *on_roster(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    for (uint32_t n = 0; n < m->u.roster.nnodes; n++)
        if (!hostport_ok(m->u.roster.addr[n]))
            return "a roster with an address that is not IPv4:port";
    handle_roster(a, m);
    return NULL;
}

static const char *on_leader_error(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    ddl_error("the leader agent refused this node's exchange: %s", m->u.error.text);
    ag_fail(a, m->u.error.code, m->u.error.text);
    return NULL;
}

static const char *on_register(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    char why[160];
    uint32_t rank = m->u.reg.rank;
    if (rank >= a->opts->size) {
        snprintf(why, sizeof why, "rank %u is outside the step's world of %u", rank,
                 a->opts->size);
        conn_error(c, EINVAL, why);
        return NULL;
    }
    if (!a->is_local[rank]) {
        snprintf(why, sizeof why, "rank %u does not run on node %u", rank, a->opts->node_id);
        conn_error(c, EINVAL, why);
        return NULL;
    }
    for (size_t i = 0; i < a->nconns; i++)
        if (a->conns[i]->rank == (int)rank || (a->conns[i] == c && c->rank >= 0)) {
            snprintf(why, sizeof why, "rank %u already has its supervisor (pid %d)", rank,
                     (int)a->conns[i]->pid);
            ddl_warn("refused a second supervisor for rank %u (pid %d): %s", rank, (int)c->pid,
                     why);
            conn_error(c, EEXIST, why);
            return NULL;
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
    return NULL;
}

static const char *on_rank_state(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    char why[160];
    uint32_t rank = m->u.rank_state.rank;
    if (c->rank < 0 || (uint32_t)c->rank != rank) {
        snprintf(why, sizeof why, "RANK_STATE for rank %u from a connection that did not "
                 "register it", rank);
        conn_error(c, EPERM, why);
        return NULL;
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
    return NULL;
}

static const char *on_progress(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    uint32_t rank = m->u.progress.rank;
    if (c->rank < 0 || (uint32_t)c->rank != rank) {
        conn_error(c, EPERM, "PROGRESS for a rank this connection did not register");
        return NULL;
    }
    heard_rank(a, rank);
    progress_note(a, rank, m);
    if (a->leader)
        straggler_note(a, rank, a->opts->node_id, m);
    else if (a->up && m->u.progress.at_ns > 0)
        conn_queue(a->up, m); /* the leader compares every rank */
    return NULL;
}

static const char *on_peer_progress(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    uint32_t r = m->u.progress.rank;
    if (r >= a->opts->size || !owns(a, c->node_id, r)) {
        /* telemetry only: dropped, never an ERROR (that would fail the
         * node's exchange in progress) */
        ddl_debug("node %u's agent sent the progress of rank %u, which it does not run: "
                  "ignored", c->node_id, r);
        return NULL;
    }
    if (a->leader)
        straggler_note(a, r, c->node_id, m);
    return NULL;
}

static const char *on_failure(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    handle_failure(a, c, m);
    return NULL;
}

static const char *on_allgather(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    handle_allgather(a, c, m);
    return NULL;
}

static const char *on_status(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    handle_status(a, c);
    return NULL;
}

static const char *on_stop_req(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    char why[400];
    if (c->kind == CONN_PEER)
        snprintf(why, sizeof why, "%s", m->u.stop_req.why ? m->u.stop_req.why : "a stop signal");
    else
        snprintf(why, sizeof why, "%s on node %u (%s)",
                 m->u.stop_req.why ? m->u.stop_req.why : "a stop signal", a->opts->node_id,
                 a->host);
    drain_request(a, m->u.stop_req.signo, why);
    return NULL;
}

static const char *on_stop(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    drain_stop_msg(a, c, m);
    return NULL;
}

static const char *on_stop_at(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    drain_stop_at(a, c, m);
    return NULL;
}

/* on_warm: a worker's libddl opts in to (or withdraws from) warm restarts:
 * passed on to its supervisor, found by the worker's pid (the connection's
 * SO_PEERCRED), which then keeps it running on a new generation.  The
 * worker is answered WARM with this node's id, or ERROR. */
static const char *on_warm(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    char why[200];
    int slot = -1;
    if (!a->opts->supervise) {
        conn_error(c, ENOTSUP, "warm restart: this step has no recovery (no agent decides "
                   "restarts): run it with ddlrun or srun --ddl");
        return NULL;
    }
    for (uint32_t r = 0; r < a->opts->size && slot < 0; r++)
        if (a->is_local[r] && a->ranks[r].wpid > 0 && a->ranks[r].wpid == c->pid)
            slot = (int)r;
    conn_t *sup = NULL;
    for (size_t i = 0; slot >= 0 && i < a->nconns && !sup; i++)
        if (a->conns[i]->rank == slot && !a->conns[i]->dead)
            sup = a->conns[i];
    if (!sup) {
        snprintf(why, sizeof why, "warm restart: pid %d is not a worker that ddl-launch started "
                 "on node %u (a wrapper that forks the program?): restarts stay cold",
                 (int)c->pid, a->opts->node_id);
        conn_error(c, ESRCH, why);
        return NULL;
    }
    if (conn_queue(sup, m) < 0) {
        conn_error(c, ENOMEM, "warm restart: cannot tell the worker's supervisor");
        return NULL;
    }
    ddl_debug("rank %u (task %d, pid %d): warm restarts %s", m->u.warm.rank, slot, (int)c->pid,
              m->u.warm.on ? "on" : "off");
    ddl_msg_t ans = {.type = DDL_MSG_WARM};
    ans.u.warm = m->u.warm;
    ans.u.warm.node_id = a->opts->node_id;
    conn_queue(c, &ans);
    return NULL;
}

#define K(kind) (1u << (kind))
#define LINKED (K(CONN_PEER) | K(CONN_LEADER))

/* What each kind of connection may send: a local client (Unix), a TCP
 * connection before it authenticated, another node's link to this leader
 * (PEER), this node's link to the leader (LEADER).  Anything else: a local
 * client is told and dropped, a stranger dropped without an answer, a
 * linked agent's link closed. */
static const struct {
    uint16_t type;
    unsigned kinds;
    int supervised; /* only in supervised steps */
    handler_t fn;
} dispatch[] = {
    {DDL_MSG_REGISTER, K(CONN_UNIX), 0, on_register},
    {DDL_MSG_RANK_STATE, K(CONN_UNIX), 0, on_rank_state},
    {DDL_MSG_PROGRESS, K(CONN_UNIX), 0, on_progress},
    {DDL_MSG_FAILURE, K(CONN_UNIX), 1, on_failure},
    {DDL_MSG_ALLGATHER, K(CONN_UNIX), 0, on_allgather},
    {DDL_MSG_STATUS_REQ, K(CONN_UNIX), 0, on_status},
    {DDL_MSG_PEER_AUTH, K(CONN_TCP_NEW), 0, on_auth},
    {DDL_MSG_PEER_BEAT, LINKED, 0, on_beat},
    {DDL_MSG_NODE_GATHER, K(CONN_PEER), 0, on_node_gather},
    {DDL_MSG_FAILURE, K(CONN_PEER), 1, on_peer_failure},
    {DDL_MSG_RANK_STATE, K(CONN_PEER), 1, on_peer_rank_state},
    {DDL_MSG_PROGRESS, K(CONN_PEER), 0, on_peer_progress},
    {DDL_MSG_ALLGATHER_RESULT, K(CONN_LEADER), 0, on_result},
    {DDL_MSG_GENERATION, K(CONN_LEADER), 0, on_generation},
    {DDL_MSG_ROSTER, K(CONN_LEADER), 0, on_roster},
    {DDL_MSG_ERROR, K(CONN_LEADER), 0, on_leader_error},
    {DDL_MSG_STOP_REQ, K(CONN_UNIX) | K(CONN_PEER), 1, on_stop_req},
    {DDL_MSG_STOP, K(CONN_LEADER), 1, on_stop},
    {DDL_MSG_STOP_AT, K(CONN_UNIX) | K(CONN_PEER), 1, on_stop_at},
    {DDL_MSG_WARM, K(CONN_UNIX), 0, on_warm},
};

void handle_msg(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    handler_t fn = NULL;
    for (size_t i = 0; i < sizeof dispatch / sizeof dispatch[0] && !fn; i++)
        if (dispatch[i].type == m->type && (dispatch[i].kinds & K(c->kind)) &&
            (!dispatch[i].supervised || a->opts->supervise))
            fn = dispatch[i].fn;
    int linked = (K(c->kind) & LINKED) != 0;
    if (!fn && c->kind == CONN_UNIX) {
        char why[160];
        snprintf(why, sizeof why, "unexpected %s message", ddl_msg_type_str(m->type));
        conn_error(c, EPROTO, why);
        c->close_after_flush = 1;
    } else if (!fn && !linked) {
        if (limited())
            ddl_warn("dropping a TCP connection from %s that sent %s before authenticating",
                     c->ip, ddl_msg_type_str(m->type));
        c->dead = 1;
    } else if (!fn) {
        ddl_warn("dropping node %u's agent link: it sent an unexpected %s", c->node_id,
                 ddl_msg_type_str(m->type));
        conn_error(c, EPROTO, "unexpected message between agents");
        c->close_after_flush = 1;
    } else {
        const char *bad = fn(a, c, m);
        if (bad) {
            ddl_error("node %u's agent sent %s: ignored", c->node_id, bad);
            conn_error(c, EPERM, bad);
        }
        if (linked) { /* any message on a link is news of its node */
            if (c->node_id < a->opts->nnodes)
                a->peers[c->node_id].heard_at = ddl_now_ms();
            c->heard_ms = ddl_now_ms();
        }
    }
}

/* ------------------------------------------------------------ main loop */

/* fd_limit: the descriptors a step of nnodes nodes and nlocal ranks here
 * may need: the leader holds a link to every node, and a takeover or a node
 * cut off connects to every node at once, besides two or three Unix
 * connections per local rank.  The soft limit is raised toward the hard
 * one when short (this process only: the workers are ddl-launch's
 * children); a warning says when even the hard limit is short, since
 * links refused for want of descriptors look like lost nodes. */
static void fd_limit(uint32_t nnodes, uint32_t nlocal)
{
    struct rlimit rl;
    rlim_t need = 2 * (rlim_t)nnodes + 4 * (rlim_t)nlocal + 32;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= need)
        return;
    rlim_t old = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need * 4 ? need * 4 : rl.rlim_max;
    if (rl.rlim_cur > old && setrlimit(RLIMIT_NOFILE, &rl) == 0)
        ddl_debug("open-file limit raised from %llu to %llu (hard limit %llu) for %u nodes",
                  (unsigned long long)old, (unsigned long long)rl.rlim_cur,
                  (unsigned long long)rl.rlim_max, nnodes);
    else
        rl.rlim_cur = old;
    if (rl.rlim_cur < need)
        ddl_warn("the open-file limit (%llu, hard limit %llu) is below the %llu descriptors "
                 "that an agent of a step of %u nodes may need: raise the hard limit (ulimit "
                 "-Hn; under Slurm, the limit slurmd runs with)",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
                 (unsigned long long)need, nnodes);
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
    a->retaken = calloc(a->opts->nnodes ? a->opts->nnodes : 1, sizeof *a->retaken);
    a->member = malloc(a->opts->nnodes ? a->opts->nnodes : 1);
    if (a->member)
        memset(a->member, 1, a->opts->nnodes);
    a->grow_ck = -2;
    a->owner = malloc(n * sizeof *a->owner);
    a->nonces = calloc(NONCE_MEMORY, sizeof *a->nonces);
    if (!a->ranks || !a->ag_blob || !a->ag_len || !a->ag_waiter || !a->is_local || !a->heard_at ||
        !a->peers || !a->exited || !a->lost || !a->retaken || !a->member || !a->owner || !a->nonces) {
        ddl_error("out of memory for a step of %u ranks", n);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        a->ranks[i].rank = i;
    memset(a->owner, 0xff, n * sizeof *a->owner); /* NO_RANK: no node spoke for it yet */
    const ddl_agent_opts_t *o = a->opts;
    for (uint32_t i = 0; i < (o->local ? o->nlocal : n); i++) {
        uint32_t r = o->local ? o->local[i] : i;
        if (r >= n || a->is_local[r]) {
            ddl_error("local rank list: rank %u is %s", r, r >= n ? "outside the world" : "twice");
            return -1;
        }
        a->is_local[r] = 1;
        a->owner[r] = o->node_id;
        a->nlocal++;
    }
    char why[200];
    if (ddl_world_init(&a->w, n, o->nnodes, o->spares || o->min_nodes, o->spares, o->min_nodes,
                       why, sizeof why) < 0) {
        ddl_error("%s", why);
        return -1;
    }
    for (uint32_t r = 0; r < n && a->w.node_rank; r++)
        if (a->is_local[r] && r / a->w.tpn != o->node_id) {
            ddl_error("--ddl-spares, --ddl-min-nodes: task %u runs on node %u, not in block "
                      "order (srun --distribution=block)", r, o->node_id);
            return -1;
        }
    remap(a);
    a->leader = o->nnodes <= 1 || (!o->leader && !o->rejoin);
    a->started_ms = ddl_now_ms();
    a->beat_ms = o->heartbeat_ms > 0 ? o->heartbeat_ms : DDL_HEARTBEAT_DEFAULT_MS;
    a->ckpt_dir = ddl_env_str(DDLENV_DDL_CHECKPOINT_DIR);
    a->node_timeout_ms = o->node_timeout_ms > 0 ? o->node_timeout_ms : DDL_NODE_TIMEOUT_DEFAULT_MS;
    uint32_t age;
    int64_t ck = -1;
    if (ckpt_latest(a->ckpt_dir, &ck, &age) < 0)
        ck = -1;
    a->pcfg = (ddl_policy_cfg_t){.restarts = o->restarts, .crash_loop = o->crash_loop,
                                 .have_ckpt_dir = a->ckpt_dir != NULL,
                                 .have_map = a->w.node_rank != NULL,
                                 .ddlrun_names = o->ddlrun_names};
    ddl_policy_init(&a->pol, 0, ck);
    if (o->host)
        snprintf(a->host, sizeof a->host, "%s", o->host);
    else if (gethostname(a->host, sizeof a->host - 1) < 0)
        snprintf(a->host, sizeof a->host, "?");
    if (o->nnodes > 1 && a->leader && o->tcp_fd < 0) {
        ddl_error("the leader of a %u-node step needs a TCP socket", o->nnodes);
        return -1;
    }
    fd_limit(o->nnodes, a->nlocal);
    a->tfd = a->leader ? o->tcp_fd : -1;
    if (a->tfd >= 0)
        ddl_fd_set_nonblock(a->tfd, 1);

    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGUSR1); /* sbatch --signal: a stop request (drain.c) */
    sigaddset(&mask, SIGUSR2);
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
        /* where this agent listens: as the leader, or (given one) where it
         * would lead after a takeover; else it opens one at its first link */
        if (!a->leader && o->tcp_fd >= 0)
            a->listen_fd = o->tcp_fd;
        int fd = a->leader ? a->tfd : a->listen_fd;
        if (fd >= 0 && getsockname(fd, (struct sockaddr *)&sa, &sl) == 0 &&
            inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip))
            snprintf(a->roster[o->node_id], sizeof a->roster[0], "%s:%u", ip,
                     ntohs(sa.sin_port));
    }
    a->leader_node = a->leader ? o->node_id : 0; /* a non-leader learns it from the first beat */
    if (a->leader && a->roster)
        snprintf(a->leader_addr, sizeof a->leader_addr, "%s", a->roster[o->node_id]);
    revive_init(a);
    if (!a->leader && o->rejoin)
        return restarted(a);
    if (!a->leader && connect_to(a, o->leader, 30000, 1) < 0)
        return -1;
    return 0;
}

/* on_signal: SIGTERM, SIGINT, SIGHUP: the loop ends after this round, so
 * that what clients sent before the signal is handled. */
static void on_signal(ddl_evloop_t *loop, ddl_ev_fd_t *w, int fd, short re, void *arg)
{
    agent_t *a = arg;
    struct signalfd_siginfo si;
    (void)w;
    (void)re;
    if (read(fd, &si, sizeof si) == sizeof si && drain_signal(a, &si)) {
        a->status = 0; /* SIGINT, SIGHUP, an unsupervised SIGTERM: shut down */
        ddl_evloop_stop(loop);
    }
}

static void on_listen(ddl_evloop_t *loop, ddl_ev_fd_t *w, int fd, short re, void *arg)
{
    agent_t *a = arg;
    (void)loop;
    (void)w;
    if (!(re & POLLIN))
        return;
    if (fd == a->lfd)
        do_accept(a);
    else
        do_accept_tcp(a);
}

static void on_beat_timer(ddl_evloop_t *loop, ddl_ev_timer_t *t, void *arg)
{
    (void)loop;
    (void)t;
    send_beats(arg);
}

static void on_silence_timer(ddl_evloop_t *loop, ddl_ev_timer_t *t, void *arg)
{
    agent_t *a = arg;
    (void)loop;
    (void)t;
    if (a->opts->supervise && !a->final)
        check_silence(a);
}

/* a new leader decides once it knows which nodes are left */
static void on_decide_timer(ddl_evloop_t *loop, ddl_ev_timer_t *t, void *arg)
{
    agent_t *a = arg;
    (void)loop;
    (void)t;
    if (a->opts->supervise && !a->final && a->decide_at && ddl_now_ms() >= a->decide_at &&
        !a->takeover_until)
        decide(a);
}

/* on_grow_timer: the leader looks for the checkpoint a shrunk world grows
 * at; a follower asks its old leader again. */
static void on_grow_timer(ddl_evloop_t *loop, ddl_ev_timer_t *t, void *arg)
{
    agent_t *a = arg;
    int64_t now = ddl_now_ms();
    (void)loop;
    (void)t;
    if (!a->opts->supervise || a->final)
        return;
    if (a->grow_at && now >= a->grow_at)
        grow_check(a);
    if (a->rejoin_at && now >= a->rejoin_at)
        rejoin(a); /* may block up to 2 s (connect_to) */
}

static void on_takeover_timer(ddl_evloop_t *loop, ddl_ev_timer_t *t, void *arg)
{
    agent_t *a = arg;
    (void)loop;
    (void)t;
    if (a->opts->supervise && !a->final && a->takeover_until)
        finish_takeover(a);
}

/* on_wake: the end of an accept pause, exit_when_done's look once a
 * second: agent_prepare does the work. */
static void on_wake(ddl_evloop_t *loop, ddl_ev_timer_t *t, void *arg)
{
    (void)loop;
    (void)t;
    (void)arg;
    fio_report();
}

static void on_metrics_timer(ddl_evloop_t *loop, ddl_ev_timer_t *t, void *arg)
{
    (void)loop;
    (void)t;
    metrics_tick(arg);
}

static void arm_at(ddl_ev_timer_t *t, int on, int64_t at)
{
    if (on)
        ddl_ev_timer_arm_at(t, at, 0);
    else
        ddl_ev_timer_cancel(t);
}

/* agent_prepare: each round, before the loop waits: a takeover decided by
 * a lost link (outside the callbacks that walk the connections), queued
 * output written, what to poll and the timers set from the deadlines the
 * other files keep, and the exit once every rank is done. */
static void agent_prepare(ddl_evloop_t *loop, void *arg)
{
    agent_t *a = arg;
    const ddl_agent_opts_t *o = a->opts;
    int stopping = ddl_evloop_stopping(loop);
    if (o->supervise && !a->final && !stopping) {
        if (a->need_takeover) {
            a->need_takeover = 0;
            takeover(a);
        }
        if (a->takeover_until) /* done as soon as every live agent has linked */
            finish_takeover(a);
    }
    conns_prepare(a);
    if (stopping)
        return;
    if (a->tfd >= 0 && !a->tfd_ev) { /* a new leader listens from now on */
        a->tfd_ev = ddl_ev_fd_add(loop, a->tfd, POLLIN, on_listen, a);
        if (!a->tfd_ev) {
            ddl_error("out of memory");
            ddl_evloop_stop(loop);
            return;
        }
    }
    int paused = a->accept_paused_until > ddl_now_ms();
    ddl_ev_fd_set_events(a->lfd_ev, paused ? 0 : POLLIN);
    if (a->tfd_ev)
        ddl_ev_fd_set_events(a->tfd_ev, paused ? 0 : POLLIN);
    arm_at(a->pause_t, paused, a->accept_paused_until);
    int sup = o->supervise && !a->final;
    int due = sup ? silence_due(a) : -1;
    arm_at(a->silence_t, due >= 0, ddl_now_ms() + due);
    arm_at(a->decide_t, sup && a->decide_at && !a->takeover_until, a->decide_at);
    arm_at(a->takeover_t, sup && a->takeover_until, a->takeover_until);
    int64_t g = a->grow_at && (!a->rejoin_at || a->grow_at < a->rejoin_at) ? a->grow_at
                                                                           : a->rejoin_at;
    arm_at(a->grow_t, sup && g, g);
    int64_t rv = revive_check(a);
    arm_at(a->revive_t, rv > 0, rv);
    int mx = metrics_wait(a, -1); /* -1: no metrics directory */
    arm_at(a->metrics_t, mx >= 0, ddl_now_ms() + mx);
    a->round_ms = ddl_now_ms(); /* the loop waits from here */
    if (o->exit_when_done && all_done(a) && revive_release(a)) {
        int busy = 0; /* flush what is queued first */
        for (size_t i = 0; i < a->nconns; i++)
            busy |= a->conns[i]->out_off < a->conns[i]->out_len;
        if (!busy) {
            ddl_debug("every rank on this node has ended: exiting");
            a->status = 0;
            ddl_evloop_stop(loop);
        }
    }
}

/* watch: the signalfd, the listening sockets and the timers in the loop. */
static int watch(agent_t *a)
{
    ddl_evloop_t *l = a->loop;
    if (!(a->sfd_ev = ddl_ev_fd_add(l, a->sfd, POLLIN, on_signal, a)) ||
        !(a->lfd_ev = ddl_ev_fd_add(l, a->lfd, POLLIN, on_listen, a)) ||
        (a->tfd >= 0 && !(a->tfd_ev = ddl_ev_fd_add(l, a->tfd, POLLIN, on_listen, a))) ||
        !(a->beat_t = ddl_ev_timer_new(l, on_beat_timer, a)) ||
        !(a->silence_t = ddl_ev_timer_new(l, on_silence_timer, a)) ||
        !(a->decide_t = ddl_ev_timer_new(l, on_decide_timer, a)) ||
        !(a->takeover_t = ddl_ev_timer_new(l, on_takeover_timer, a)) ||
        !(a->grow_t = ddl_ev_timer_new(l, on_grow_timer, a)) ||
        !(a->pause_t = ddl_ev_timer_new(l, on_wake, a)) ||
        !(a->tick_t = ddl_ev_timer_new(l, on_wake, a)) ||
        !(a->metrics_t = ddl_ev_timer_new(l, on_metrics_timer, a)) ||
        !(a->revive_t = ddl_ev_timer_new(l, on_wake, a))) {
        ddl_error("out of memory");
        return -1;
    }
    if (a->opts->nnodes > 1) /* the first beat at once */
        ddl_ev_timer_arm(a->beat_t, 0, a->beat_ms);
    if (a->opts->exit_when_done)
        ddl_ev_timer_arm(a->tick_t, 1000, 1000);
    ddl_evloop_set_prepare(a->loop, agent_prepare, a);
    return 0;
}

int ddl_agent_serve(const ddl_agent_opts_t *opts)
{
    agent_t a = {.opts = opts, .lfd = -1, .sfd = -1, .tfd = -1, .listen_fd = -1, .status = 1};

    if (!(a.loop = ddl_evloop_new())) {
        ddl_error("out of memory");
        return 1;
    }
    if (setup(&a) < 0 || watch(&a) < 0)
        goto out;
    ddl_info("serving step %s (%u ranks, %u here, node %u of %u%s) on %s", opts->step, opts->size,
             a.nlocal, opts->node_id, opts->nnodes ? opts->nnodes : 1, a.leader ? ", leader" : "",
             opts->socket_path);
    if (opts->ready_fd >= 0) {
        ddl_write_full(opts->ready_fd, "1\n", 2);
        close(opts->ready_fd);
    }
    if (ddl_evloop_run(a.loop) < 0) {
        ddl_error("poll: %m");
        a.status = 1;
    }
out:
    metrics_end(&a);
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
    free(a.ranks);
    free(a.ag_blob);
    free(a.ag_len);
    free(a.ag_waiter);
    free(a.is_local);
    free(a.heard_at);
    free(a.peers);
    free(a.exited);
    free(a.lost);
    free(a.retaken);
    free(a.member);
    free(a.owner);
    free(a.nonces);
    free(a.roster);
    revive_free(&a);
    drain_free(&a);
    if (a.listen_fd >= 0)
        close(a.listen_fd);
    ddl_world_free(&a.w);
    if (a.tfd >= 0)
        close(a.tfd);
    if (a.sfd >= 0)
        close(a.sfd);
    ddl_evloop_free(a.loop);
    /* the failure summary a user reads once the step has ended */
    int left = ddl_fio_drain(10000);
    if (left)
        ddl_warn("%d failure summar%s still being written after 10 s (a slow or hung file "
                 "system): not waited for", left, left == 1 ? "y" : "ies");
    fio_report();
    return a.status;
}
