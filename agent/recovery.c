/* recovery.c: from failures to decisions and their application.  The
 * leader collects failures for DDL_POLICY_WINDOW_MS, takes the likeliest
 * root cause, asks the policy (policy.h) what follows, forms the next world
 * (world.h) when a node is lost, writes the failure summary and tells every
 * agent (GENERATION); each agent fences its exchanges to the new
 * generation and tells its supervisors and workers.
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

#include "agent_args.h"
#include "agent_int.h"
#include "fileio.h"
#include "log.h"
#include "sock.h"

#define GROW_LOOK_MS 500 /* a shrunk world looks for a new checkpoint to grow at this often */

/* ckpt_latest: the latest committed checkpoint of dir (libddl's DIR/latest,
 * which holds the step number; its mtime is the commit's time), read off
 * the loop (fileio.h): 0 and *step, *age_ms; -1 if there is none or it
 * cannot be read.  A read that takes longer than DDL_FILEIO_WAIT_MS gives
 * the last answer, with a warning. */
int ckpt_latest(const char *dir, int64_t *step, uint32_t *age_ms)
{
    int stale = 0;
    int rc = ddl_fio_latest(dir, step, age_ms, &stale);
    if (stale && limited())
        ddl_warn("%s/latest did not answer within %d ms (a slow or hung file system): "
                 "using its last answer; the agent goes on", dir, DDL_FILEIO_WAIT_MS);
    return rc;
}

static void log_fio_error(const char *text)
{
    ddl_warn("%s", text);
}

/* fio_report: log what the background writes met. */
void fio_report(void)
{
    ddl_fio_errors(log_fio_error);
}

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

void to_peers(agent_t *a, const ddl_msg_t *m)
{
    for (size_t i = 0; i < a->nconns; i++)
        if (a->conns[i]->kind == CONN_PEER)
            conn_queue(a->conns[i], m);
}

/* apply_generation: act on a decision (made here or received from the
 * leader): fence the exchanges to the new generation, pass it on. */
void apply_generation(agent_t *a, const ddl_msg_t *m)
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
        /* cut off, this node's generation was its own (cut_off): a leader
         * that takes it back sends the step's, whatever their numbers */
        int renumber = a->gen_local && !a->leader && g->gen <= a->gen;
        if (renumber)
            ddl_info("node %u: leaves its own generation %u for the step's generation %u",
                     a->opts->node_id, a->gen, g->gen);
        a->gen_local = 0;
        if (g->gen <= a->gen && !renumber) {
            if (g->gen < a->gen)
                ddl_warn("ignoring a restart into generation %u (this step is in %u)", g->gen,
                         a->gen);
            return; /* the same: a node taken back that missed no generation */
        }
        a->gen = g->gen;
        ag_fail(a, ECANCELED, "the step is restarting: this exchange's generation is over");
        if (a->w.node_rank && g->nnodes == a->opts->nnodes && g->node_rank) {
            memcpy(a->w.node_rank, g->node_rank, g->nnodes * sizeof *a->w.node_rank);
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
        a->final_at = ddl_now_ms();
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

/* master_of: MASTER_ADDR for a world map: the address of the agent of the
 * node that holds rank 0 ("" if the roster does not know it), in buf. */
static char *master_of(const agent_t *a, const uint32_t *map, char *buf, size_t len)
{
    buf[0] = '\0';
    for (uint32_t n = 0; n < a->opts->nnodes && a->roster; n++)
        if (map[n] == 0)
            snprintf(buf, len, "%.*s", (int)strcspn(a->roster[n], ":"), a->roster[n]);
    return buf;
}

/* restart_msg: GENERATION restart into generation gen with world map
 * (nnodes entries, still owned by the caller) and its MASTER_ADDR in
 * master (len bytes); the caller sets the cause. */
static ddl_msg_t restart_msg(const agent_t *a, uint32_t gen, uint32_t *map, char *master,
                             size_t len)
{
    ddl_msg_t m = {.type = DDL_MSG_GENERATION};
    m.u.generation.gen = gen;
    m.u.generation.action = DDL_GEN_RESTART;
    m.u.generation.nnodes = a->opts->nnodes;
    m.u.generation.node_rank = map;
    m.u.generation.master = master_of(a, map, master, len);
    return m;
}

/* new_world: the world without the lost nodes (node `lost` and any other
 * marked lost): ddl_world_replace with the spares whose agents are linked
 * (or this one); says what changed in `what` (" (spare node S, HOST, in
 * place of node L)", " (shrunk to ...)").  NULL if no world can be formed. */
static uint32_t *new_world(agent_t *a, uint32_t lost, char *what, size_t len)
{
    const ddl_agent_opts_t *o = a->opts;
    uint32_t nn = o->nnodes, shrunk;
    uint8_t *usable = calloc(nn, 1);
    uint32_t *spare_of = calloc(nn, sizeof *spare_of);
    uint32_t *map = NULL;
    a->lost[lost] = 1;
    what[0] = '\0';
    if (usable && spare_of) {
        for (uint32_t n = 0; n < nn; n++)
            usable[n] = n == o->node_id || (a->peers[n].state == DDL_PEER_UP && !retired(a, n));
        map = ddl_world_replace(&a->w, a->lost, usable, o->min_nodes, spare_of, &shrunk);
    }
    if (map && shrunk) {
        snprintf(what, len, " (shrunk to %u node%s, %u rank%s: no spare node left)", shrunk,
                 shrunk == 1 ? "" : "s", shrunk * a->w.tpn, shrunk * a->w.tpn == 1 ? "" : "s");
    } else if (map) {
        size_t used = 0;
        for (uint32_t l = 0; l < nn && used < len; l++) {
            uint32_t s = spare_of[l];
            if (s == NO_RANK)
                continue;
            used += (size_t)snprintf(what + used, len - used,
                                     "%sspare node %u, %s, in place of node %u",
                                     used ? "; " : " (", s,
                                     s == o->node_id          ? a->host
                                     : a->peers[s].host[0] ? a->peers[s].host
                                                              : "?",
                                     l);
        }
        if (used && used < len)
            snprintf(what + used, len - used, ")");
    }
    free(usable);
    free(spare_of);
    return map;
}

/* present: node n answers this leader now (this node, or linked and not lost). */
static int present(const agent_t *a, uint32_t n)
{
    return !a->lost[n] && (n == a->opts->node_id || a->peers[n].state == DDL_PEER_UP);
}

/* majority: whether the nodes present may go on as the step after a loss
 * (ddl_world_majority: a majority of the members, or half with the
 * lowest-numbered), so that a network partition never leaves two worlds
 * training apart and writing the same checkpoints.  1: yes; 0: no, with
 * the reason for people in why. */
int majority(const agent_t *a, char *why, size_t len)
{
    uint32_t nn = a->opts->nnodes, base = 0, left = 0;
    uint8_t *here = calloc(nn ? nn : 1, 1);
    if (!here) { /* no memory: decide as before, without the rule */
        ddl_warn("no memory to count the nodes present: the majority rule is not applied");
        return 1;
    }
    for (uint32_t n = 0; n < nn; n++)
        here[n] = present(a, n);
    int ok = ddl_world_majority(a->member, here, nn, &left, &base);
    char have[120] = "";
    size_t used = 0;
    for (uint32_t n = 0; n < nn && used < sizeof have; n++)
        if (a->member[n] && here[n])
            used += (size_t)snprintf(have + used, sizeof have - used, "%s%u", used ? ", " : "", n);
    free(here);
    if (!ok)
        snprintf(why, len, "only %u of the step's %u nodes answer (node%s %s)%s: this side may be "
                 "cut off from the others by a network partition, and does not go on alone",
                 left, base, left == 1 ? "" : "s", have,
                 2 * left == base ? ", half of them but not the lowest-numbered" : "");
    return ok;
}

/* members_now: the nodes present are the step's members (a decision that
 * had its majority, or a node taken back); the next ROSTER tells the
 * other agents. */
void members_now(agent_t *a)
{
    for (uint32_t n = 0; n < a->opts->nnodes; n++)
        a->member[n] = present(a, n);
}

/* wait_to_rejoin: this node holds no rank in a generation of its own
 * (never sent to anyone: a leader taking it back renumbers it), its tasks
 * wait as a spare's, and it asks the other nodes to take it back (ask_back,
 * links.c) for DDL_CUT_OFF_WAIT_S seconds, the first round after
 * first_ask_ms.  A leader first steps down.  0, or -1 (out of memory). */
static int wait_to_rejoin(agent_t *a, const char *cause, int first_ask_ms)
{
    const ddl_agent_opts_t *o = a->opts;
    uint32_t *map = malloc(o->nnodes * sizeof *map);
    if (!map)
        return -1;
    memcpy(map, a->w.node_rank, o->nnodes * sizeof *map);
    map[o->node_id] = NO_RANK;
    char master[64] = "";
    ddl_msg_t m = restart_msg(a, a->gen + 1, map, master, sizeof master);
    m.u.generation.cause = (char *)cause;
    if (a->leader)
        step_down(a);
    apply_generation(a, &m);
    a->gen_local = 1; /* told nobody: a leader taking this node back renumbers it */
    free(map);
    a->cut_until = ddl_now_ms() + (int64_t)o->cut_off_wait_s * 1000;
    a->rejoin_at = ddl_now_ms() + first_ask_ms; /* the first round of asks */
    return 0;
}

/* cut_off: this leader has no majority: its side is likely cut off from
 * the rest by a partition that may heal.  Its ranks stop and its tasks wait
 * as a spare's (a generation of its own in which this node holds no rank,
 * never sent to anyone), it leads no more, and it asks the other nodes to
 * take it back (ask_back, links.c) for DDL_CUT_OFF_WAIT_S seconds.  Its followers
 * on this side, their links closed, choose a leader among themselves
 * (takeover) that finds no majority either and does the same, until each
 * node of the minority waits on its own: a node taken back is taken back
 * alone, as a spare, so none needs the others of its side. */
static void cut_off(agent_t *a, const char *line, const char *minority)
{
    const ddl_agent_opts_t *o = a->opts;
    char cause[1200];
    snprintf(cause, sizeof cause, "generation %u: %s; %s: node %u waits to be taken back (up to "
             "%d s), its tasks as a spare's", a->gen, line, minority, o->node_id,
             o->cut_off_wait_s);
    ddl_error("%s", cause);
    if (wait_to_rejoin(a, cause, 1000) < 0)
        stop_here(a, minority);
}

/* restarted: this agent started on a node restarted after a loss (its
 * processes died: the machine rebooted, or its part of the step was killed):
 * the step goes on without it, so it asks the step's agents at the addresses
 * it was given (--rejoin) to take it back, as a node cut off by a partition
 * does: the leader takes it as a spare (DDL_NODE_RETAKES times at most) and
 * a world that shrank grows back onto it at the next checkpoint.  0, or -1
 * (reported). */
int restarted(agent_t *a)
{
    const ddl_agent_opts_t *o = a->opts;
    char cause[300];
    for (uint32_t n = 0; n < o->nnodes; n++)
        if (n != o->node_id &&
            ddl_agent_rejoin_addr(o->rejoin, n, a->roster[n], sizeof a->roster[n]) < 0) {
            ddl_error("--rejoin: no address for node %u", n);
            return -1;
        }
    snprintf(cause, sizeof cause, "node %u restarted after a loss: it asks the step's agents to "
             "take it back (up to %d s), its tasks wait as a spare's", o->node_id,
             o->cut_off_wait_s);
    ddl_warn("%s", cause);
    if (wait_to_rejoin(a, cause, 0) < 0) {
        ddl_error("out of memory");
        return -1;
    }
    return 0;
}

/* decide: the leader, once the failure window has passed: the policy's
 * decision on the cause, the next world if a node is lost, the summary
 * file, and GENERATION to every agent. */
void decide(agent_t *a)
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
    char world[200] = "", master[64] = "", minority[300] = "";
    uint32_t *map = NULL;
    if (ddl_policy_wants_world(&a->pcfg, &a->pol, f->cls)) {
        if (f->node < o->nnodes)
            a->lost[f->node] = 1;
        if (majority(a, minority, sizeof minority))
            map = new_world(a, f->node, world, sizeof world);
    }
    ddl_decision_t d;
    ddl_policy_decide(&a->pcfg, &a->pol, f->cls, f->wstatus, ck, map != NULL, &d);
    if (minority[0] && !d.restart) {
        if (a->roster && o->supervise) {
            cut_off(a, line, minority);
            return;
        }
        d.why = minority;
    }
    drain_no_restart(a, &d); /* a step that stops on request is not restarted */
    g->gen = d.restart ? a->gen + 1 : a->gen;
    g->action = d.restart ? DDL_GEN_RESTART : DDL_GEN_STOP;
    g->code = d.restart ? 0 : d.code;
    g->delay_ms = d.delay_ms;
    if (d.restart && map) {
        g->nnodes = o->nnodes;
        g->node_rank = map;
        g->master = master_of(a, map, master, sizeof master);
    }
    if (g->action == DDL_GEN_RESTART) {
        snprintf(cause, sizeof cause, "generation %u: %s; restart %u of %u: generation %u%s %s",
                 f->gen, line, a->pol.restarts_used, o->restarts, g->gen, world,
                 ck >= 0 ? "resumes from the checkpoint" : "starts over");
        if (ck >= 0)
            snprintf(cause + strlen(cause), sizeof cause - strlen(cause), " of step %lld",
                     (long long)ck);
    } else if (g->code >= 0) {
        snprintf(cause, sizeof cause, "generation %u: %s; stopping the step (exit status %d): %s",
                 f->gen, line, g->code, d.why);
    } else {
        snprintf(cause, sizeof cause, "generation %u: %s; stopping the step: %s", f->gen, line,
                 d.why);
    }
    g->cause = cause;
    ddl_error("%s", cause);
    if (a->ckpt_dir && *a->ckpt_dir && !minority[0]) { /* the other side's to write */
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
            .restarts_left = (int)(o->restarts - a->pol.restarts_used),
            .detected_ms = ddl_realtime_ms(),
        };
        if (ddl_fio_summary(a->ckpt_dir, &s) < 0) /* written here instead */
            fio_report();
    }
    if (map) { /* the new world's nodes are the members: everyone learns them first */
        members_now(a);
        send_roster(a);
    }
    to_peers(a, &m);
    apply_generation(a, &m);
    free(map);
    grow_arm(a);
}

/* shrunk: nodes the world lacks to have its first size (nnodes less the
 * spares), 0: none. */
static uint32_t shrunk(const agent_t *a)
{
    uint32_t active = 0, full = a->opts->nnodes - a->opts->spares;
    if (!a->w.node_rank)
        return 0;
    for (uint32_t n = 0; n < a->opts->nnodes; n++)
        active += a->w.node_rank[n] != NO_RANK;
    return active < full ? full - active : 0;
}

/* can_grow_onto: node n is idle, linked (or this one) and not retired:
 * the world can grow onto it. */
static int can_grow_onto(const agent_t *a, uint32_t n)
{
    return a->w.node_rank[n] == NO_RANK && !a->lost[n] && !retired(a, n) &&
           (n == a->opts->node_id || a->peers[n].state == DDL_PEER_UP);
}

/* idle_back: the lowest node the world can grow onto, or UINT32_MAX. */
static uint32_t idle_back(const agent_t *a)
{
    for (uint32_t n = 0; n < a->opts->nnodes; n++)
        if (can_grow_onto(a, n))
            return n;
    return UINT32_MAX;
}

/* grow_arm: the leader: a world that shrank and has an idle node to grow
 * onto grows at the next committed checkpoint: remember the latest one now,
 * look again every GROW_LOOK_MS (grow_check). */
void grow_arm(agent_t *a)
{
    int64_t ck = -1;
    uint32_t age;
    if (!a->leader || a->final || !shrunk(a) || idle_back(a) == UINT32_MAX) {
        a->grow_ck = -2;
        a->grow_at = 0;
        return;
    }
    if (a->grow_ck != -2)
        return; /* armed already */
    if (!a->ckpt_dir || !*a->ckpt_dir) {
        ddl_warn("generation %u: the world could grow back by %u node%s, but the step has no "
                 "checkpoint directory to resume from: it stays as it is", a->gen, shrunk(a),
                 shrunk(a) == 1 ? "" : "s");
        a->grow_ck = -3; /* said once */
        return;
    }
    if (ckpt_latest(a->ckpt_dir, &ck, &age) < 0)
        ck = -1;
    a->grow_ck = ck;
    a->grow_at = ddl_now_ms() + GROW_LOOK_MS;
    ddl_info("generation %u: the world grows back by %u node%s at the first checkpoint after "
             "step %lld", a->gen, shrunk(a), shrunk(a) == 1 ? "" : "s", (long long)ck);
}

/* grow_check: the leader, every GROW_LOOK_MS while growth is pending: once
 * a checkpoint newer than grow_ck is committed (and no failure is being
 * decided, no stop under way), the next generation puts the idle nodes
 * back in the world, up to its first size, and resumes from that
 * checkpoint.  Not a failure: no restart of the budget is spent. */
void grow_check(agent_t *a)
{
    const ddl_agent_opts_t *o = a->opts;
    int64_t ck = -1;
    uint32_t age;
    a->grow_at = 0;
    if (a->grow_ck < -1 || !a->leader || a->final)
        return;
    a->grow_at = ddl_now_ms() + GROW_LOOK_MS;
    if (a->decide_at || a->takeover_until || a->drain.active || a->ag_active ||
        ckpt_latest(a->ckpt_dir, &ck, &age) < 0 || ck <= a->grow_ck)
        return;
    uint8_t *usable = calloc(o->nnodes, 1);
    uint32_t added = 0, active = 0, n;
    for (n = 0; usable && n < o->nnodes; n++)
        usable[n] = can_grow_onto(a, n);
    uint32_t *map = usable ? ddl_world_grow(&a->w, usable, o->nnodes - o->spares, &added) : NULL;
    free(usable);
    if (!map)
        return; /* out of memory: the next look */
    if (!added) { /* the idle node went away meanwhile */
        free(map);
        a->grow_ck = -2;
        grow_arm(a);
        return;
    }
    char what[200] = "";
    size_t used = 0;
    for (n = 0; n < o->nnodes; n++) {
        active += map[n] != NO_RANK;
        if (map[n] != NO_RANK && a->w.node_rank[n] == NO_RANK && used < sizeof what)
            used += (size_t)snprintf(what + used, sizeof what - used, "%snode %u (%s)",
                                     used ? ", " : "", n,
                                     n == o->node_id ? a->host : a->peers[n].host);
    }
    char cause[700], master[64] = "";
    ddl_msg_t m = restart_msg(a, a->gen + 1, map, master, sizeof master);
    typeof(m.u.generation) *g = &m.u.generation;
    snprintf(cause, sizeof cause, "generation %u: the world grows back to %u node%s, %u ranks "
             "(%s taken back): generation %u resumes from the checkpoint of step %lld", a->gen,
             active, active == 1 ? "" : "s", active * a->w.tpn, what, g->gen, (long long)ck);
    g->cause = cause;
    ddl_warn("%s", cause);
    a->grow_ck = -2;
    a->grow_at = 0;
    to_peers(a, &m);
    apply_generation(a, &m);
    free(map);
}

/* retake: the leader: lost node c->node_id's agent came back (it froze or
 * stalled, then resumed) and has linked again: it is a spare now, told so
 * by the current GENERATION (its workers belong to a generation that is
 * over); a world that shrank grows back onto it at the next checkpoint.  A
 * node back more than DDL_NODE_RETAKES times stays linked, never given
 * ranks: its tasks end with the step. */
void retake(agent_t *a, conn_t *c)
{
    const ddl_agent_opts_t *o = a->opts;
    uint32_t node = c->node_id;
    a->lost[node] = 0;
    a->member[node] = 1;
    a->retaken[node]++;
    if (retired(a, node))
        ddl_warn("generation %u: node %u (%s) came back after a loss, %u time%s: more than "
                 "DDL_NODE_RETAKES=%u, so it is linked but never given ranks again", a->gen,
                 node, a->peers[node].host, a->retaken[node], a->retaken[node] == 1 ? "" : "s",
                 o->node_retakes);
    else
        ddl_warn("generation %u: node %u (%s) came back after a loss: taken back as a spare "
                 "(%u of DDL_NODE_RETAKES=%u)", a->gen, node, a->peers[node].host,
                 a->retaken[node], o->node_retakes);
    /* the world as it is: its workers stop, its tasks wait as a spare's */
    char cause[300], master[64] = "";
    ddl_msg_t m = restart_msg(a, a->gen, a->w.node_rank, master, sizeof master);
    snprintf(cause, sizeof cause, "generation %u: node %u (%s) is taken back as a spare after "
             "a loss", a->gen, node, a->peers[node].host);
    m.u.generation.cause = cause;
    conn_queue(c, &m);
    grow_arm(a);
}

/* leader_failure: the leader takes a failure into the current window. */
void leader_failure(agent_t *a, const failure_t *f)
{
    if (f->cls == DDL_FAIL_NODE)
        failure_count(a, f->cls); /* this leader's own finding; the others counted theirs */
    if (a->final)
        return;
    if (f->gen != a->gen) {
        ddl_debug("ignoring a failure of generation %u (the step is in %u)", f->gen, a->gen);
        return;
    }
    if (drain_failure(a, f)) /* stopping on request: a rank's end, not a failure */
        return;
    if (!a->decide_at) {
        a->cause = *f;
        a->decide_at = ddl_now_ms() + DDL_POLICY_WINDOW_MS;
    } else if (ddl_policy_prefer(f->cls, f->wstatus, a->cause.cls, a->cause.wstatus)) {
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
void report_failure(agent_t *a, const failure_t *f)
{
    failure_count(a, f->cls);
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
void rank_exited(agent_t *a, uint32_t rank, uint32_t gen)
{
    if (a->final || gen != a->gen || rank >= a->opts->size || a->exited[rank])
        return;
    if (drain_exited(a, rank, gen)) /* stopping on request: counted there */
        return;
    a->exited[rank] = 1;
    if (++a->nexited < a->w.world)
        return;
    ddl_msg_t m = {.type = DDL_MSG_GENERATION};
    m.u.generation.gen = a->gen;
    m.u.generation.action = DDL_GEN_FINISH;
    ddl_debug("every rank exited 0 in generation %u: the step is finished", a->gen);
    to_peers(a, &m);
    apply_generation(a, &m);
}

/* stop_here: this node's ranks stop with DDL_EXIT_NODE_LOST (no leader). */
void stop_here(agent_t *a, const char *why)
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

/* handle_failure: FAILURE from one of this node's supervisors, or (on the
 * leader) from another node's agent. */
void handle_failure(agent_t *a, conn_t *c, const ddl_msg_t *m)
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

/* generation_ok: a GENERATION from the leader describes a world this agent
 * can run: a map of every node, positions distinct and dense, a valid
 * MASTER_ADDR.  0, or -1 with the reason in why. */
int generation_ok(const agent_t *a, const ddl_msg_t *m, char *why, size_t len)
{
    const typeof(m->u.generation) *g = &m->u.generation;
    struct in_addr in;
    if (g->master && *g->master && inet_pton(AF_INET, g->master, &in) != 1) {
        snprintf(why, len, "its MASTER_ADDR is not an IPv4 address");
        return -1;
    }
    if (g->delay_ms > 600000) {
        snprintf(why, len, "a restart delay of %u ms", g->delay_ms);
        return -1;
    }
    if (g->nnodes && g->action != DDL_GEN_RESTART) {
        snprintf(why, len, "a world map with a decision to stop");
        return -1;
    }
    return g->nnodes ? ddl_world_check(&a->w, g->node_rank, g->nnodes, why, len) : 0;
}
