/* drain.c: stopping a supervised step on request, at one step boundary.
 *
 * Slurm ends a job with SIGCONT and SIGTERM to every process of each step
 * (time limit, preemption, scancel), then SIGKILL after KillWait; sbatch
 * --signal=SIG@TIME sends SIG (SIGUSR1, SIGUSR2) to them earlier; ddlrun
 * does the same to every process of its job when it gets SIGTERM, SIGUSR1
 * or SIGUSR2.  Any of these, seen by an agent, by a ddl-launch (STOP_REQ)
 * or by a worker's libddl (STOP_REQ), is a stop request; the agents of
 * other nodes pass it to the leader, which starts the stop once:
 *
 *   1. STOP (boundary -1) to every agent, and from each to its workers'
 *      libddl: "answer with the first boundary you can stop at";
 *   2. each rank's STOP_AT reaches the leader; with every rank of the world
 *      in, it sends STOP with the largest boundary: every rank's
 *      ddl_should_stop() returns DDL_STOP there; the programs commit a
 *      checkpoint and exit with DDL_EXIT_STOPPED (94);
 *   3. the ranks' ends (exit 94 or 0, killed by a stop signal, or anything
 *      else) are counted instead of being failures: no restart follows; once
 *      every rank has ended, a GENERATION stop with exit status 94 (finish
 *      when all exited 0; each task's own status when some rank ended
 *      otherwise: a crash during the stop is not hidden).
 *
 * Workers that do not use libddl never answer; they get the signal itself
 * from Slurm or ddlrun, and their ends are counted the same way.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_int.h"
#include "log.h"

void drain_free(agent_t *a)
{
    free(a->drain.reported);
    free(a->drain.ended);
    a->drain.reported = a->drain.ended = NULL;
}

/* send_local: m to this node's workers' libddl (those whose bootstrap
 * exchange is over: a waiting one gets it with its result, drain_joined). */
static void send_local(agent_t *a, const ddl_msg_t *m)
{
    for (size_t i = 0; i < a->nconns; i++) {
        conn_t *c = a->conns[i];
        int waiting = 0;
        if (c->kind != CONN_UNIX || !c->lib)
            continue;
        for (uint32_t r = 0; r < a->opts->size && a->ag_active && !waiting; r++)
            waiting = a->ag_waiter[r] == c;
        if (!waiting)
            conn_queue(c, m);
    }
}

static ddl_msg_t stop_msg(agent_t *a)
{
    ddl_msg_t m = {.type = DDL_MSG_STOP};
    m.u.stop.gen = a->drain.gen;
    m.u.stop.at = a->drain.at;
    m.u.stop.why = a->drain.why;
    return m;
}

void drain_joined(agent_t *a, conn_t *c)
{
    if (!a->drain.active || a->final)
        return;
    ddl_msg_t m = stop_msg(a);
    conn_queue(c, &m);
}

/* apply: a STOP from the leader (or this leader's own): remember it, pass
 * it to the workers. */
static void apply(agent_t *a, const ddl_msg_t *m)
{
    const typeof(m->u.stop) *s = &m->u.stop;
    if (a->final)
        return;
    if (s->gen != a->gen) {
        ddl_debug("ignoring a stop of generation %u (the step is in %u)", s->gen, a->gen);
        return;
    }
    if (!a->drain.active) {
        a->drain.active = 1;
        a->drain.gen = s->gen;
        a->drain.at = -1;
        snprintf(a->drain.why, sizeof a->drain.why, "%s", s->why ? s->why : "a stop signal");
        snprintf(a->last_failure, sizeof a->last_failure, "generation %u: stopping: %s",
                 s->gen, a->drain.why);
        if (!a->leader)
            ddl_info("node %u: stopping the step (%s): every rank checkpoints at one step "
                     "boundary", a->opts->node_id, a->drain.why);
    }
    if (s->at >= 0)
        a->drain.at = s->at;
    ddl_msg_t out = stop_msg(a);
    send_local(a, &out);
}

/* begin: the leader starts the stop of the current generation. */
static void begin(agent_t *a, int signo, const char *why)
{
    uint32_t n = a->opts->size;
    if (a->final || a->drain.active)
        return;
    a->drain.reported = calloc(n, 1);
    a->drain.ended = calloc(n, 1);
    if (!a->drain.reported || !a->drain.ended) {
        ddl_error("out of memory to stop the step (%s): the ranks go on", why);
        drain_free(a);
        return;
    }
    a->drain.nreported = a->drain.nended = a->drain.nstopped = a->drain.nother = 0;
    a->drain.nsignalled = 0;
    a->drain.max = -1;
    a->drain.max_step = -1;
    a->drain.signo = signo;
    for (uint32_t r = 0; r < n; r++) /* ranks that already exited 0 in this generation */
        if (a->exited[r]) {
            a->drain.ended[r] = 1;
            a->drain.nended++;
        }
    ddl_warn("stopping the step: %s; every rank commits a checkpoint at one step boundary "
             "and exits with %d", why, DDL_EXIT_STOPPED);
    ddl_msg_t m = {.type = DDL_MSG_STOP};
    m.u.stop.gen = a->gen;
    m.u.stop.at = -1;
    m.u.stop.why = (char *)why;
    to_peers(a, &m);
    apply(a, &m);
}

void drain_request(agent_t *a, int signo, const char *why)
{
    if (!a->opts->supervise || a->final || a->drain.active)
        return;
    if (a->leader) {
        begin(a, signo, why);
        return;
    }
    if (a->drain.asked || !a->up)
        return;
    a->drain.asked = 1; /* once: the leader stops the whole step */
    ddl_msg_t m = {.type = DDL_MSG_STOP_REQ};
    m.u.stop_req.signo = signo;
    m.u.stop_req.why = (char *)why;
    conn_queue(a->up, &m);
}

int drain_signal(agent_t *a, const struct signalfd_siginfo *si)
{
    int sig = (int)si->ssi_signo;
    char name[32], why[200];
    ddl_signal_name(sig, name, sizeof name);
    if (a->opts->parent_pid > 0 && getppid() != a->opts->parent_pid) {
        ddl_debug("got %s and the parent (pid %d) is gone: shutting down", name,
                  a->opts->parent_pid);
        return 1;
    }
    if (sig == SIGINT || sig == SIGHUP || (sig == SIGTERM && !a->opts->supervise)) {
        ddl_debug("got %s: shutting down", name);
        return 1;
    }
    if (!a->opts->supervise) {
        ddl_debug("got %s: ignored (only a supervised step can stop at a boundary)", name);
        return 0;
    }
    if (a->drain.active || a->drain.asked || a->final) {
        ddl_debug("got %s: the step is already stopping", name);
        return 0;
    }
    snprintf(why, sizeof why, "%s on node %u (%s)", name, a->opts->node_id, a->host);
    drain_request(a, sig, why);
    return 0;
}

void drain_stop_msg(agent_t *a, conn_t *c, const ddl_msg_t *m)
{
    (void)c;
    if (!a->leader)
        apply(a, m);
}

/* decided: the leader has every rank's boundary: the largest is the one. */
static void decided(agent_t *a)
{
    a->drain.at = a->drain.max;
    ddl_info("every rank has answered: they stop at their ddl_should_stop() call %lld "
             "(the furthest rank had called it last at step %lld) and commit a checkpoint there",
             (long long)a->drain.at + 1, (long long)a->drain.max_step);
    ddl_msg_t m = stop_msg(a);
    to_peers(a, &m);
    apply(a, &m);
}

void drain_stop_at(agent_t *a, conn_t *c, const ddl_msg_t *m)
{
    const typeof(m->u.stop_at) *s = &m->u.stop_at;
    if (s->rank >= a->w.world)
        return;
    uint32_t slot = slot_of(a, s->rank);
    if (c->kind == CONN_UNIX) {
        if (!c->lib || !a->is_local[slot]) {
            conn_error(c, EPERM, "STOP_AT for a rank that is not this node's worker");
            return;
        }
        heard_rank(a, slot);
        if (!a->leader) {
            if (a->up)
                conn_queue(a->up, m);
            return;
        }
    } else if (!owns(a, c->node_id, slot)) {
        ddl_error("node %u's agent answered the stop for rank %u, which is not its own: "
                  "ignored", c->node_id, s->rank);
        return;
    }
    if (!a->drain.active || !a->drain.reported || s->gen != a->drain.gen || a->drain.at >= 0 ||
        a->drain.reported[slot])
        return;
    a->drain.reported[slot] = 1;
    if (s->boundary > a->drain.max)
        a->drain.max = s->boundary;
    if (s->step > a->drain.max_step)
        a->drain.max_step = s->step;
    if (++a->drain.nreported == a->w.world)
        decided(a);
}

/* ended: a rank of the stopping generation ended (slot; wstatus as
 * waitpid's); with every rank ended, the step stops. */
static void ended(agent_t *a, uint32_t slot, int ok, int wstatus)
{
    if (slot >= a->opts->size || a->drain.ended[slot])
        return;
    a->drain.ended[slot] = 1;
    a->drain.nended++;
    /* stopped: exited 94, or killed by the stop signal itself before it could
     * take it (a worker still starting, or a program that does not catch
     * it): either way the latest committed checkpoint is where to resume */
    int sig = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;
    if (!ok && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == DDL_EXIT_STOPPED)
        a->drain.nstopped++;
    else if (!ok && (sig == SIGTERM || sig == SIGUSR1 || sig == SIGUSR2))
        a->drain.nsignalled++;
    else if (!ok)
        a->drain.nother++;
    if (a->drain.nended < a->w.world)
        return;
    char cause[600];
    ddl_msg_t m = {.type = DDL_MSG_GENERATION};
    m.u.generation.gen = a->gen;
    if (!a->drain.nstopped && !a->drain.nsignalled && !a->drain.nother) {
        m.u.generation.action = DDL_GEN_FINISH; /* the program ended before it could stop */
        ddl_info("every rank exited 0 while the step was stopping: finished");
    } else {
        m.u.generation.action = DDL_GEN_STOP;
        m.u.generation.code = a->drain.nother ? -1 : DDL_EXIT_STOPPED;
        if (a->drain.nother)
            snprintf(cause, sizeof cause, "generation %u: stopped (%s): %u of %u ranks did not "
                     "exit with %d; each task exits as its worker did", a->gen, a->drain.why,
                     a->drain.nother, a->w.world, DDL_EXIT_STOPPED);
        else if (!a->drain.nsignalled)
            snprintf(cause, sizeof cause, "generation %u: stopped (%s) at boundary %lld: every "
                     "rank committed its checkpoint and exited; exit status %d (requeue to "
                     "resume)", a->gen, a->drain.why, (long long)a->drain.at, DDL_EXIT_STOPPED);
        else
            snprintf(cause, sizeof cause, "generation %u: stopped (%s): %u of %u ranks were "
                     "ended by the signal itself (no checkpoint of theirs at the stop: the "
                     "latest committed one is where to resume); exit status %d (requeue to "
                     "resume)", a->gen, a->drain.why, a->drain.nsignalled, a->w.world,
                     DDL_EXIT_STOPPED);
        m.u.generation.cause = cause;
        ddl_warn("%s", cause);
    }
    to_peers(a, &m);
    apply_generation(a, &m);
}

int drain_failure(agent_t *a, const failure_t *f)
{
    if (!a->drain.active || !a->drain.ended || f->gen != a->gen || f->rank < 0)
        return 0;
    if (f->cls != DDL_FAIL_WORKER_EXIT && f->cls != DDL_FAIL_WORKER_SIGNAL &&
        f->cls != DDL_FAIL_WORKER_HANG && f->cls != DDL_FAIL_WORKER_START)
        return 0; /* a lost supervisor or node: the policy decides (without a restart) */
    ended(a, (uint32_t)f->rank, 0, f->wstatus);
    return 1;
}

int drain_exited(agent_t *a, uint32_t slot, uint32_t gen)
{
    if (!a->drain.active || !a->drain.ended || gen != a->gen)
        return 0;
    ended(a, slot, 1, 0);
    return 1;
}

void drain_no_restart(agent_t *a, ddl_decision_t *d)
{
    if (!a->drain.active || !d->restart)
        return;
    d->restart = 0;
    d->code = -1;
    snprintf(d->why_buf, sizeof d->why_buf, "the step is stopping (%.200s): no restart",
             a->drain.why);
    d->why = d->why_buf;
}
