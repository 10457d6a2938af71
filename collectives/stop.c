/* stop.c: ddl_should_stop(): every rank of the world stops at the same step
 * boundary when the job is asked to end (Slurm's time limit or preemption
 * SIGTERM, sbatch --signal's SIGUSR1/SIGUSR2, ddlrun's SIGTERM), so that the
 * checkpoint the program then commits is one consistent step.
 *
 * The node agents coordinate (agent/drain.c, docs/protocol.md "Stopping"):
 * the leader agent sends STOP (boundary -1) to every rank's libddl; each
 * rank answers STOP_AT with the first boundary it can still stop at (the
 * index of its next ddl_should_stop() call) and does not pass a boundary
 * until the leader, having every rank's answer, sends STOP with the largest
 * of them.  A rank that waits in a collective when the notice comes answers
 * from the wait loop (ddl_agent_notice), so a rank that waits at a boundary
 * never blocks a peer's answer: the ranks differ by at most one boundary.
 *
 * The signals themselves reach every process of a Slurm step (slurmstepd
 * signals them all), and of a ddlrun job (ddlrun does the same); libddl
 * catches them in the worker so that they do not kill it, and passes one on
 * to its agent as a stop request in case the agents did not get it.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ddl_int.h"
#include "env.h"
#include "log.h"
#include "proto.h"
#include "util.h"

static const int stop_sigs[] = {SIGTERM, SIGUSR1, SIGUSR2};
#define NSTOP_SIGS (sizeof stop_sigs / sizeof stop_sigs[0])

static struct sigaction old_act[NSTOP_SIGS];
static int installed[NSTOP_SIGS];
int ddl_stop_returned;
static volatile sig_atomic_t sig_pending; /* a stop signal arrived: its number */

/* The stop of the current generation, as this rank sees it. */
static struct {
    atomic_int_fast64_t calls; /* ddl_should_stop() calls made: the next call's index */
    atomic_int seen;           /* the agents asked for a stop (STOP, boundary -1) */
    atomic_int reported;       /* STOP_AT sent */
    atomic_int_fast64_t at;    /* the agreed boundary, -1 not yet */
    int64_t last_step;         /* the step of the last call, -1 none */
    int req_sent;              /* a signal was passed on to the agent */
} st = {.at = -1, .last_step = -1};

static void on_stop_signal(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    /* ddl-launch ends its worker with SIGTERM (a restart, a stop the agents
     * decided): that one still kills, as without libddl */
    if (sig == SIGTERM && si && si->si_code == SI_USER && si->si_pid == getppid()) {
        signal(SIGTERM, SIG_DFL);
        raise(SIGTERM);
        return;
    }
    sig_pending = sig;
}

void ddl_stop_init(void)
{
    atomic_store(&st.calls, 0);
    atomic_store(&st.seen, 0);
    atomic_store(&st.reported, 0);
    atomic_store(&st.at, -1);
    st.last_step = -1;
    st.req_sent = 0;
    const char *sock = ddl_env_str(DDLENV_DDL_AGENT_SOCK);
    if (!sock || !*sock)
        return; /* not started by ddlrun or srun --ddl: the program's signals stay its own */
    for (size_t i = 0; i < NSTOP_SIGS; i++) {
        struct sigaction cur, act;
        installed[i] = 0;
        if (sigaction(stop_sigs[i], NULL, &cur) < 0 || (cur.sa_flags & SA_SIGINFO) ||
            cur.sa_handler != SIG_DFL)
            continue; /* the program handles (or ignores) it */
        memset(&act, 0, sizeof act);
        act.sa_sigaction = on_stop_signal;
        act.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&act.sa_mask);
        if (sigaction(stop_sigs[i], &act, &old_act[i]) == 0)
            installed[i] = 1;
    }
}

void ddl_stop_fini(void)
{
    for (size_t i = 0; i < NSTOP_SIGS; i++) {
        struct sigaction cur;
        if (installed[i] && sigaction(stop_sigs[i], NULL, &cur) == 0 &&
            (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_stop_signal)
            sigaction(stop_sigs[i], &old_act[i], NULL);
        installed[i] = 0;
    }
}

/* report: STOP_AT with the first boundary this rank can stop at.  The
 * caller holds the agent connection (ddl_agent_lock). */
static void report(int64_t boundary)
{
    if (atomic_exchange(&st.reported, 1))
        return;
    ddl_msg_t m = {.type = DDL_MSG_STOP_AT};
    m.u.stop_at.gen = ddl_ctx.gen;
    m.u.stop_at.rank = (uint32_t)ddl_ctx.rank;
    m.u.stop_at.boundary = boundary;
    m.u.stop_at.step = st.last_step;
    if (ddl_proto_send(ddl_ctx.agent_fd, &m) < 0)
        ddl_debug("rank %d: cannot answer the agent's stop: %m", ddl_ctx.rank);
    else
        ddl_debug("rank %d: can stop at boundary %lld", ddl_ctx.rank, (long long)boundary);
}

int ddl_stop_notice(const ddl_msg_t *m)
{
    if (m->type != DDL_MSG_STOP)
        return 0;
    if (m->u.stop.gen != ddl_ctx.gen)
        return 1; /* another generation's */
    if (m->u.stop.at >= 0) {
        atomic_store(&st.at, m->u.stop.at);
        ddl_debug("rank %d: the agents stop the step at boundary %lld", ddl_ctx.rank,
                  (long long)m->u.stop.at);
    } else if (!atomic_exchange(&st.seen, 1)) {
        ddl_debug("rank %d: the agents ask for a stop: %s", ddl_ctx.rank,
                  m->u.stop.why ? m->u.stop.why : "");
        /* outside ddl_should_stop (in a collective's wait, or between calls):
         * the next call is the first boundary this rank can stop at */
        report(atomic_load(&st.calls));
    }
    return 1;
}

/* pass_signal: a stop signal that reached this rank goes to the agent too
 * (a signal sent to this process alone still stops the whole world). */
static void pass_signal(void)
{
    int sig = sig_pending;
    if (!sig || st.req_sent)
        return;
    st.req_sent = 1;
    char name[32], why[160];
    snprintf(why, sizeof why, "%s to rank %d (pid %d)", ddl_signal_name(sig, name, sizeof name),
             ddl_ctx.rank, (int)getpid());
    ddl_msg_t m = {.type = DDL_MSG_STOP_REQ};
    m.u.stop_req.signo = sig;
    m.u.stop_req.why = why;
    if (ddl_proto_send(ddl_ctx.agent_fd, &m) < 0)
        ddl_debug("rank %d: cannot pass %s on to the agent: %m", ddl_ctx.rank, name);
}

/* read_agent: take what the agent sent, waiting up to timeout_ms for the
 * first message.  -1 when the connection is gone (the world is aborted). */
static int read_agent(int timeout_ms)
{
    struct pollfd pf = {.fd = ddl_ctx.agent_fd, .events = POLLIN};
    while (poll(&pf, 1, timeout_ms) > 0) {
        ddl_msg_t m;
        ddl_error_t err;
        if (ddl_proto_recv(ddl_ctx.agent_fd, &m, 1000, &err) < 0) {
            ddl_comm_abort(&ddl_ctx.world, "this rank lost its link to the node's ddl-agent");
            return -1;
        }
        if (!ddl_stop_notice(&m) && m.type == DDL_MSG_GENERATION &&
            m.u.generation.action != DDL_GEN_FINISH)
            ddl_gen_notice(&m);
        ddl_msg_clear(&m);
        timeout_ms = 0;
    }
    return 0;
}

static ddl_status_t aborted(void)
{
    if (ddl_restart_pending())
        return ddl_fail(DDL_RESTART, "ddl_should_stop: %s: call ddl_rejoin()",
                        ddl_ctx.world.abort_reason[0] ? ddl_ctx.world.abort_reason
                                                      : "a new generation");
    return ddl_fail(DDL_ERR_ABORTED, "ddl_should_stop: the world communicator was aborted: %s",
                    ddl_ctx.world.abort_reason[0] ? ddl_ctx.world.abort_reason : "no reason");
}

ddl_status_t ddl_should_stop(int64_t step)
{
    ddl_clear_error();
    if (!ddl_ctx.initialized)
        return ddl_fail(DDL_ERR_NOT_INITIALIZED, "ddl_should_stop() before ddl_init()");
    int64_t c = atomic_fetch_add(&st.calls, 1); /* this call's index */
    st.last_step = step;
    if (atomic_load(&ddl_ctx.world.aborted))
        return aborted();
    if (ddl_ctx.agent_fd < 0) { /* a world of one: nobody to agree with */
        if (!sig_pending)
            return DDL_OK;
        ddl_debug("rank %d: stop signal %d: stopping after step %lld", ddl_ctx.rank,
                  (int)sig_pending, (long long)step);
        ddl_stop_returned = 1;
        return DDL_STOP;
    }
    ddl_agent_lock();
    pass_signal();
    int bad = read_agent(0);
    if (!bad && atomic_load(&st.at) < 0 && atomic_load(&st.seen)) {
        report(c);
        /* no boundary is passed before the agents' decision */
        while (!bad && atomic_load(&st.at) < 0 && !atomic_load(&ddl_ctx.world.aborted)) {
            ddl_beat(0, 0);
            if (ddl_ctx.tl)
                ddl_ucx_progress();
            bad = read_agent(5);
        }
    }
    ddl_agent_unlock();
    if (bad || atomic_load(&ddl_ctx.world.aborted))
        return aborted();
    int64_t at = atomic_load(&st.at);
    if (at < 0 || c < at)
        return DDL_OK;
    if (c > at) /* cannot happen when every rank calls it the same number of times */
        ddl_warn("rank %d: ddl_should_stop call %lld is past the agreed boundary %lld: are "
                 "the ranks calling it at the same points?", ddl_ctx.rank, (long long)c,
                 (long long)at);
    ddl_debug("rank %d: stopping after step %lld (boundary %lld)", ddl_ctx.rank,
              (long long)step, (long long)c);
    ddl_stop_returned = 1;
    return DDL_STOP;
}
