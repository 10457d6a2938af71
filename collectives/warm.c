/* warm.c: warm restart in place (ddl_warm_enable, ddl_rejoin).
 *
 * A program that opts in tells its node's agent (WARM), which passes it on
 * to the worker's supervisor (ddl-launch, found by the worker's pid): on a
 * RESTART decision the supervisor then keeps the worker running.  libddl
 * keeps the decision (the GENERATION its agent forwards: the new generation
 * and, for a changed world, each node's position in it), aborts the world
 * so that every collective returns DDL_RESTART, and ddl_rejoin() tears the
 * old world down, sets this rank's new place in the environment and redoes
 * ddl_init()'s exchange in the new generation.  On any failure there the
 * rank withdraws (WARM off), so that its supervisor restarts it cold.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddl_int.h"
#include "env.h"
#include "log.h"
#include "proto.h"
#include "rank_env.h"
#include "sock.h"
#include "util.h"

#define WARM_ANSWER_MS 5000

static struct {
    int enabled;             /* ddl_warm_enable() succeeded */
    int rejoining;           /* in ddl_rejoin: errors are its own */
    atomic_int due;          /* DDL_RESTART was returned */
    atomic_int stopped;      /* the agents stop the step: no new generation */
    uint32_t node_slot;      /* the agent's node: its index in node_rank */
    atomic_int pending;      /* a RESTART decision is kept below */
    uint32_t gen;            /* the generation to join */
    uint32_t nnodes;         /* node_rank's entries, 0: the world is unchanged */
    uint32_t *node_rank;
    char master[64];         /* the decision's MASTER_ADDR (rank 0's node), or "" */
} warm;

int ddl_restart_pending(void)
{
    /* due: a collective returned DDL_RESTART for a peer's failure seen
     * before the agents' decision (ddl_rejoin waits for it) */
    return atomic_load(&warm.pending) || atomic_load(&warm.due);
}

int ddl_warm_rejoining(void)
{
    return warm.rejoining;
}

static ddl_status_t warm_status(ddl_status_t st)
{
    if ((st != DDL_ERR_ABORTED && st != DDL_ERR_PEER && st != DDL_ERR_TRANSPORT &&
         st != DDL_ERR_TIMEOUT) || atomic_load(&warm.stopped))
        return st;
    if (atomic_load(&warm.pending)) {
        atomic_store(&warm.due, 1);
        return DDL_RESTART; /* the generation ended */
    }
    /* a peer failed (its agent's decision may not have come yet): the
     * rank rejoins, and ddl_rejoin waits for the decision */
    if (warm.enabled && !warm.rejoining && ddl_ctx.initialized && st != DDL_ERR_TIMEOUT) {
        atomic_store(&warm.due, 1);
        return DDL_RESTART;
    }
    return st;
}

void ddl_gen_notice(ddl_msg_t *m)
{
    char why[400];
    const typeof(m->u.generation) *g = &m->u.generation;
    snprintf(why, sizeof why, "the agents ended generation %u: %s", ddl_ctx.gen,
             g->cause ? g->cause : "a failure elsewhere");
    ddl_debug("rank %d: %s", ddl_ctx.rank, why);
    /* a newer decision replaces one not yet joined: a rank that was still
     * rejoining when another rank's failure ended that generation too
     * follows the agents to the newest one */
    if (warm.enabled && g->action == DDL_GEN_RESTART &&
        (!atomic_load(&warm.pending) || g->gen > warm.gen)) {
        /* without a map the world is the previous decision's: a pending
         * one's map (not applied yet) still holds */
        if (g->node_rank || !atomic_load(&warm.pending)) {
            free(warm.node_rank);
            warm.nnodes = g->node_rank ? g->nnodes : 0;
            warm.node_rank = g->node_rank; /* taken */
            m->u.generation.node_rank = NULL;
        }
        if (g->master && g->master[0])
            snprintf(warm.master, sizeof warm.master, "%s", g->master);
        warm.gen = g->gen;
        atomic_store(&warm.pending, 1);
    } else if (g->action != DDL_GEN_RESTART) {
        atomic_store(&warm.stopped, 1); /* ddl-launch ends this worker */
    }
    ddl_comm_abort(&ddl_ctx.world, why);
}

/* tell_agent: WARM (on or off) on fd; the agent's answer is waited for,
 * other notices taken as ddl_agent_notice would.  DDL_OK and the node's
 * id, or an error. */
static ddl_status_t tell_agent(int fd, int on, uint32_t *node)
{
    ddl_msg_t m = {.type = DDL_MSG_WARM};
    ddl_error_t err;
    m.u.warm.gen = ddl_ctx.gen;
    m.u.warm.rank = (uint32_t)ddl_ctx.rank;
    m.u.warm.on = (uint8_t)on;
    if (ddl_proto_send(fd, &m) < 0)
        return ddl_fail(DDL_ERR_BOOTSTRAP, "rank %d: cannot reach the node's ddl-agent: %s",
                        ddl_ctx.rank, strerror(errno));
    int64_t deadline = ddl_now_ms() + WARM_ANSWER_MS;
    for (;;) {
        int left = (int)(deadline - ddl_now_ms());
        if (left <= 0 || ddl_proto_recv(fd, &m, left, &err) < 0)
            return ddl_fail(DDL_ERR_BOOTSTRAP, "rank %d: no answer from the node's ddl-agent "
                            "to the warm-restart request: %s", ddl_ctx.rank,
                            left <= 0 ? "timed out" : err.text);
        ddl_status_t st = DDL_INPROGRESS;
        if (m.type == DDL_MSG_WARM) {
            *node = m.u.warm.node_id;
            st = DDL_OK;
        } else if (m.type == DDL_MSG_ERROR) {
            st = ddl_fail(m.u.error.code == ENOTSUP || m.u.error.code == ESRCH
                              ? DDL_ERR_UNSUPPORTED : DDL_ERR_BOOTSTRAP,
                          "rank %d: %s", ddl_ctx.rank, m.u.error.text);
        } else if (!ddl_stop_notice(&m) && m.type == DDL_MSG_GENERATION &&
                   m.u.generation.action != DDL_GEN_FINISH) {
            ddl_gen_notice(&m);
        }
        ddl_msg_clear(&m);
        if (st != DDL_INPROGRESS)
            return st;
    }
}

ddl_status_t ddl_warm_enable(void)
{
    ddl_clear_error();
    if (!ddl_ctx.initialized)
        return ddl_fail(DDL_ERR_NOT_INITIALIZED, "ddl_warm_enable() before ddl_init()");
    if (warm.enabled)
        return DDL_OK;
    if (ddl_ctx.agent_fd < 0)
        return ddl_fail(DDL_ERR_UNSUPPORTED, "ddl_warm_enable: a world of one without a "
                        "ddl-agent has no restarts: start the program with ddlrun or srun --ddl");
    uint32_t node = 0;
    ddl_agent_lock();
    ddl_status_t st = tell_agent(ddl_ctx.agent_fd, 1, &node);
    ddl_agent_unlock();
    if (st != DDL_OK)
        return st;
    warm.enabled = 1;
    warm.node_slot = node;
    ddl_fail_set_remap(warm_status);
    ddl_debug("rank %d: warm restarts on (node %u)", ddl_ctx.rank, node);
    return DDL_OK;
}

/* wait_decision: the world is aborted but the agents' decision has not
 * come yet (a peer's failure seen first): read the agent until it does. */
static ddl_status_t wait_decision(int timeout_s)
{
    int64_t deadline = ddl_now_ms() + (int64_t)timeout_s * 1000;
    while (!atomic_load(&warm.pending)) {
        if (atomic_load(&warm.stopped))
            return ddl_fail(DDL_ERR_ABORTED, "ddl_rejoin: rank %d: the agents stop the step "
                            "instead of restarting it", ddl_ctx.rank);
        if (ddl_ctx.agent_fd < 0 || ddl_now_ms() >= deadline)
            return ddl_fail(DDL_ERR_TIMEOUT, "ddl_rejoin: rank %d: no new generation from the "
                            "agents within %d s (DDL_BOOTSTRAP_TIMEOUT)", ddl_ctx.rank,
                            timeout_s);
        struct pollfd pf = {.fd = ddl_ctx.agent_fd, .events = POLLIN};
        ddl_beat(0, 0);
        if (poll(&pf, 1, 20) <= 0)
            continue;
        ddl_msg_t m;
        ddl_error_t err;
        if (ddl_proto_recv(ddl_ctx.agent_fd, &m, 1000, &err) < 0)
            return ddl_fail(DDL_ERR_BOOTSTRAP, "ddl_rejoin: rank %d lost its link to the "
                            "node's ddl-agent: %s", ddl_ctx.rank, err.text);
        if (!ddl_stop_notice(&m) && m.type == DDL_MSG_GENERATION) {
            ddl_gen_notice(&m); /* a stop: the next round says so */
        }
        ddl_msg_clear(&m);
    }
    return DDL_OK;
}

/* withdraw: the warm path failed: tell the supervisor (through a fresh
 * connection to the agent: the old one is closed) that this worker is to
 * be restarted cold. */
static void withdraw(const char *sock)
{
    ddl_error_t err;
    uint32_t node;
    int fd = sock && *sock ? ddl_sock_connect(sock, 2000, &err) : -1;
    if (fd < 0 || tell_agent(fd, 0, &node) != DDL_OK)
        ddl_warn("rank %d: could not withdraw from warm restarts; the supervisor restarts "
                 "the worker once it exits", ddl_ctx.rank);
    if (fd >= 0)
        close(fd);
}

/* new_place: this rank's place in generation warm.gen, into the
 * environment that ddl_init() reads. */
static ddl_status_t new_place(void)
{
    ddl_rank_env_t e;
    ddl_rank_env_vars_t v;
    ddl_error_t err;
    if (ddl_rank_env_parse(NULL, NULL, 0, &e, &err) < 0)
        return ddl_fail(DDL_ERR_INVALID, "ddl_rejoin: %s", err.text);
    if (warm.nnodes) {
        long active = 0, pos = -1;
        for (uint32_t n = 0; n < warm.nnodes; n++) {
            active += warm.node_rank[n] != DDL_NODE_IDLE;
            if (n == warm.node_slot)
                pos = warm.node_rank[n] == DDL_NODE_IDLE ? -1 : (long)warm.node_rank[n];
        }
        if (pos < 0)
            return ddl_fail(DDL_ERR_INVALID, "ddl_rejoin: node %u holds no rank in generation "
                            "%u", warm.node_slot, warm.gen);
        e.node_id = pos;
        e.nnodes = active;
        e.size = active * e.local_size;
        e.rank = pos * e.local_size + e.local_rank;
    }
    e.gen = warm.gen;
    if (ddl_rank_env_build(&e, &v, &err) < 0 || ddl_rank_env_apply(&v, &err) < 0)
        return ddl_fail(DDL_ERR_INVALID, "ddl_rejoin: rank %d in generation %u: %s",
                        ddl_ctx.rank, warm.gen, err.text);
    /* MASTER_ADDR: rank 0's node in the new world, as the agents reach it,
     * even where the user had set it: after a loss that moved rank 0, the
     * old address names a lost node (torch's process group meets there) */
    if (warm.master[0] && setenv("MASTER_ADDR", warm.master, 1) < 0)
        return ddl_fail(DDL_ERR_NOMEM, "ddl_rejoin: setenv MASTER_ADDR: %s", strerror(errno));
    warm.master[0] = '\0';
    return DDL_OK;
}

ddl_status_t ddl_rejoin(ddl_comm_t **world)
{
    ddl_clear_error();
    if (world)
        *world = NULL;
    if (!ddl_ctx.initialized)
        return ddl_fail(DDL_ERR_NOT_INITIALIZED, "ddl_rejoin() before ddl_init()");
    if (!warm.enabled)
        return ddl_fail(DDL_ERR_INVALID, "ddl_rejoin() without ddl_warm_enable(): this rank "
                        "is restarted cold");
    if (!atomic_load(&ddl_ctx.world.aborted) && !atomic_load(&warm.pending) &&
        !atomic_load(&warm.due))
        return ddl_fail(DDL_ERR_INVALID, "ddl_rejoin(): no new generation is due (the world "
                        "was not aborted, no peer failed)");
    warm.rejoining = 1;
    /* a peer failed: nothing more goes out on this world */
    ddl_comm_abort(&ddl_ctx.world, "this rank leaves the generation (ddl_rejoin)");
    const int timeout_s = ddl_ctx.boot_timeout_s > 0 ? ddl_ctx.boot_timeout_s
                                                     : DDL_BOOTSTRAP_TIMEOUT_DEFAULT_S;
    char sock[4096];
    const char *s = ddl_env_str(DDLENV_DDL_AGENT_SOCK);
    snprintf(sock, sizeof sock, "%s", s ? s : "");
    int64_t t0 = ddl_now_ms();
    int old_rank = ddl_ctx.rank;
    uint32_t old_gen = ddl_ctx.gen;
    ddl_agent_lock();
    ddl_status_t st = wait_decision(timeout_s);
    ddl_agent_unlock();
    ddl_engine_stop();
    ddl_world_release(); /* the world is aborted: no flush, no fence */
    /* a failure elsewhere can end the new generation before it formed: its
     * exchange is cancelled and the agents' next decision follows (in
     * bootstrap); the rank joins that one instead of withdrawing, which would
     * end that generation too and spend one more restart */
    while (st == DDL_OK) {
        uint32_t tried = warm.gen;
        st = new_place();
        if (st == DDL_OK)
            st = ddl_init();
        if (st == DDL_OK || !atomic_load(&warm.pending) || warm.gen <= tried)
            break; /* each newer generation is a restart the agents allowed */
        ddl_warn("rank %d: generation %u ended before it formed (%s): joining generation %u",
                 old_rank, tried, ddl_last_error(), warm.gen);
        st = DDL_OK;
    }
    atomic_store(&warm.pending, 0);
    free(warm.node_rank);
    warm.node_rank = NULL;
    warm.rejoining = 0;
    atomic_store(&warm.due, 0);
    if (st != DDL_OK) {
        char text[512];
        snprintf(text, sizeof text, "%s", ddl_last_error());
        ddl_ctx.rank = old_rank;
        withdraw(sock);
        warm.enabled = 0;
        return ddl_fail(st, "ddl_rejoin: rank %d (generation %u) cannot join the new "
                        "generation: %s; exit, to be restarted cold", old_rank, old_gen, text);
    }
    ddl_info("rank %d of generation %u is rank %d of %d in generation %u (warm restart, "
             "%lld ms)", old_rank, old_gen, ddl_ctx.rank, ddl_ctx.size, ddl_ctx.gen,
             (long long)(ddl_now_ms() - t0));
    if (world)
        *world = &ddl_ctx.world;
    return DDL_OK;
}
