/* revive.c: under Slurm, the leader starts a lost node's part of the step
 * again, and that part, at the end, releases the step it was lost from.
 *
 * A node that crashed and restarted within the job (srun --no-kill, its
 * slurmd back before SlurmdTimeout) has no agent and no task of the step
 * left, and Slurm cannot add tasks to a running step.  So the leader starts
 * a new step of the job on that node,
 *
 *   srun --jobid=J --overlap -w NODE -N1 -n L --ntasks-per-node=L --mpi=none
 *        --input=0 --kill-on-bad-exit=0 ddl-launch --rejoin -- COMMAND...
 *
 * with the step's command (the plugin passes it to ddl-launch after "--";
 * the agent reads it from its parent's command line), the step's shape in
 * DDL_* variables and the step's secret on srun's standard input, which
 * reaches only the first task: never a command line or the environment.
 * Its agent asks the step's agents to take the node back (restarted(),
 * recovery.c); the leader takes it as a spare and the world grows back onto
 * it at the next checkpoint.  The first try comes 5 s after the loss (a
 * node that froze or was cut off comes back by itself sooner), then, after
 * each srun that ended with the node still lost, a wait that doubles from
 * 10 s to 60 s (policy.h: DDL_REVIVE_*, ddl_policy_revive_retry_ms), for
 * DDL_REVIVE_GIVE_UP_S at most (an srun started while the node is down
 * does not fail at once: Slurm 22.05's launch waits for the node's
 * slurmd, and the srun starts the node's part
 * once it is back; t0042 starts n3's slurmd 2 s after it); an srun whose
 * node has not come back within DDL_REVIVE_WAIT_S is stopped, and so is the
 * srun of a node lost again (its tasks are gone; srun would wait for them),
 * and, at the end of the step, every srun whose node is not back (the
 * leader exits only once they have ended).  A node that came back more
 * than DDL_NODE_RETAKES times is started all the same: it is
 * linked but never given ranks, and at the end it releases the old step
 * (below), which nothing else could.
 *
 * Slurm still counts the lost tasks of the first step on that node: the
 * step's srun waits for them forever (Slurm 22.05).  The restarted node's
 * agent, outside that step, cancels it once a stop or finish is decided and
 * the leader's agent is gone (its tasks have ended; scancel JOB.STEP then
 * keeps the tasks' exit statuses), REVIVE_RELEASE_MS later.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_int.h"
#include "log.h"

#define REVIVE_KILL_MS 10000     /* SIGKILL to an srun this long after its SIGTERM */
#define REVIVE_SCAN_MS 1000      /* the leader looks at its lost nodes this often */
#define REVIVE_RELEASE_MS 2000    /* the old step cancelled this long after the leader left */

struct revive {
    pid_t pid;       /* its srun, 0: none */
    int64_t since;   /* the loss, as first seen here; 0: not lost */
    int64_t next;    /* the next try */
    int64_t stop_at; /* SIGTERM to the srun then (not back); after it, SIGKILL then */
    int sig;         /* the signal sent to it, 0: none */
    int linked;      /* its node came back since it started: it runs the node's part */
    uint32_t back0;  /* the node's retake count when it started */
    uint32_t tries;
    int gave_up;
};

/* parent_command: the step's command from the parent's command line
 * (ddl-launch --slurm PID FD -- COMMAND... as the plugin starts it, or
 * ddl-launch --rejoin -- COMMAND... on a node started again: such a node
 * may become the leader), and the parent's executable (the ddl-launch to
 * run on the node).  0, or -1 (not a Slurm task). */
static int parent_command(agent_t *a)
{
    char path[64], buf[65536];
    snprintf(path, sizeof path, "/proc/%d/cmdline", a->opts->parent_pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0 || n == (ssize_t)sizeof buf - 1)
        return -1; /* none, or longer than we keep */
    buf[n] = '\0';
    char *args[8192];
    int argc = 0;
    for (char *p = buf; p < buf + n && argc < 8191; p += strlen(p) + 1)
        args[argc++] = p;
    int cmd; /* where COMMAND starts */
    if (argc >= 6 && strcmp(args[1], "--slurm") == 0 && strcmp(args[4], "--") == 0)
        cmd = 5;
    else if (argc >= 4 && strcmp(args[1], "--rejoin") == 0 && strcmp(args[2], "--") == 0)
        cmd = 3;
    else
        return -1;
    snprintf(path, sizeof path, "/proc/%d/exe", a->opts->parent_pid);
    ssize_t k = readlink(path, a->revive_launch, sizeof a->revive_launch - 1);
    if (k <= 0)
        return -1;
    a->revive_launch[k] = '\0';
    a->revive_argv = calloc((size_t)(argc - cmd + 1), sizeof *a->revive_argv);
    if (!a->revive_argv)
        return -1;
    for (int i = cmd; i < argc; i++)
        if (!(a->revive_argv[i - cmd] = strdup(args[i])))
            return -1;
    return 0;
}

void revive_init(agent_t *a)
{
    const ddl_agent_opts_t *o = a->opts;
    const char *job = getenv("SLURM_JOB_ID");
    if (!o->supervise || o->nnodes < 2 || !a->w.node_rank || !job ||
        !*job || o->parent_pid <= 0)
        return;
    if (!o->revive_give_up_s) {
        ddl_debug("node %u: DDL_REVIVE_GIVE_UP_S=0: a lost node that restarts is not started "
                  "again", o->node_id);
        return;
    }
    if (parent_command(a) < 0 || !(a->rv = calloc(o->nnodes, sizeof *a->rv))) {
        ddl_debug("node %u: the step's command is unknown: a lost node that restarts is not "
                  "started again", o->node_id);
        revive_free(a);
        return;
    }
    snprintf(a->revive_job, sizeof a->revive_job, "%s", job);
    ddl_debug("node %u: as the leader, it would start a lost node's part again with %s "
              "--rejoin -- %s ...", o->node_id, a->revive_launch, a->revive_argv[0]);
}

void revive_free(agent_t *a)
{
    for (char **p = a->revive_argv; p && *p; p++)
        free(*p);
    free(a->revive_argv);
    a->revive_argv = NULL;
    free(a->rv);
    a->rv = NULL;
}

/* env_keep: a variable of this agent that srun passes on to the new step:
 * not PMIx's (the new step has its own, or none) and not a task's place,
 * which the new tasks take from the variables set below. */
static int env_keep(const char *e)
{
    static const char *const drop[] = {"PMIX_", "PMI_", "DDL_AGENT_SOCK=", "DDL_RANK=",
                                       "DDL_LOCAL_RANK=", "DDL_REJOIN=", "DDL_NODE_ID=",
                                       "DDL_NNODES=", "DDL_SIZE=", "DDL_LOCAL_SIZE=",
                                       "DDL_STEP_ID=", "DDL_SPARES=", "DDL_MIN_NODES=",
                                       "DDL_NODE_RESTARTED=", NULL};
    for (int i = 0; drop[i]; i++)
        if (strncmp(e, drop[i], strlen(drop[i])) == 0)
            return 0;
    return 1;
}

extern char **environ;

/* spawn: node n's srun (see the top of this file).  0, or -1 (logged). */
static int spawn(agent_t *a, uint32_t n)
{
    const ddl_agent_opts_t *o = a->opts;
    struct revive *r = &a->rv[n];
    const char *host = a->peers[n].host;
    size_t nenv = 0, ncmd = 0, len = (size_t)o->nnodes * sizeof a->roster[0];
    while (environ[nenv])
        nenv++;
    while (a->revive_argv[ncmd])
        ncmd++;
    char **env = calloc(nenv + 12, sizeof *env), **argv = calloc(ncmd + 16, sizeof *argv);
    char *rejoin = malloc(len + 16), vars[9][96], opt[5][160];
    int p[2] = {-1, -1}, rc = -1;
    if (!env || !argv || !rejoin) {
        ddl_error("node %u: out of memory to start it again", n);
        goto out;
    }
    size_t k = 0, used = (size_t)sprintf(rejoin, "DDL_REJOIN=");
    for (size_t i = 0; i < nenv; i++)
        if (env_keep(environ[i]))
            env[k++] = environ[i];
    for (uint32_t j = 0; j < o->nnodes; j++) /* where every agent listens; none for n */
        used += (size_t)snprintf(rejoin + used, len + 16 - used, "%s%s", j ? "," : "",
                                 j == n ? "" : a->roster[j]);
    snprintf(vars[0], sizeof vars[0], "DDL_STEP_ID=%s", o->step);
    snprintf(vars[1], sizeof vars[1], "DDL_NODE_ID=%u", n);
    snprintf(vars[2], sizeof vars[2], "DDL_NNODES=%u", o->nnodes);
    snprintf(vars[3], sizeof vars[3], "DDL_SIZE=%u", o->size);
    snprintf(vars[4], sizeof vars[4], "DDL_LOCAL_SIZE=%u", a->w.tpn);
    snprintf(vars[5], sizeof vars[5], "DDL_SPARES=%u", o->spares);
    snprintf(vars[6], sizeof vars[6], "DDL_MIN_NODES=%u", o->min_nodes);
    snprintf(vars[7], sizeof vars[7], "DDL_NODE_RESTARTED=1");
    for (int i = 0; i < 8; i++)
        env[k++] = vars[i];
    env[k++] = rejoin;
    env[k] = NULL;
    snprintf(opt[0], sizeof opt[0], "--jobid=%s", a->revive_job);
    snprintf(opt[1], sizeof opt[1], "--nodelist=%s", host);
    snprintf(opt[2], sizeof opt[2], "--ntasks=%u", a->w.tpn);
    snprintf(opt[3], sizeof opt[3], "--ntasks-per-node=%u", a->w.tpn);
    k = 0;
    argv[k++] = "srun";
    argv[k++] = opt[0];
    argv[k++] = "--overlap";
    argv[k++] = opt[1];
    argv[k++] = "--nodes=1";
    argv[k++] = opt[2];
    argv[k++] = opt[3];
    argv[k++] = "--mpi=none";
    argv[k++] = "--input=0";
    argv[k++] = "--kill-on-bad-exit=0";
    argv[k++] = a->revive_launch;
    argv[k++] = "--rejoin";
    argv[k++] = "--";
    for (size_t i = 0; i < ncmd; i++)
        argv[k++] = a->revive_argv[i];
    argv[k] = NULL;
    if (pipe2(p, O_CLOEXEC) < 0) {
        ddl_error("node %u: pipe: %m", n);
        goto out;
    }
    pid_t pid = fork();
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(p[0], STDIN_FILENO); /* the secret, for the first task (--input=0) */
        execvpe("srun", argv, env);
        fprintf(stderr, "ddl-agent: cannot execute srun: %s\n", strerror(errno));
        _exit(127);
    }
    if (pid < 0) {
        ddl_error("node %u: fork: %m", n);
        goto out;
    }
    close(p[0]);
    p[0] = -1;
    /* 64 bytes and a newline fit in any pipe */
    if (ddl_write_full(p[1], (const char *)o->secret, o->secret_len) < 0 ||
        ddl_write_full(p[1], "\n", 1) < 0)
        ddl_warn("node %u: cannot pass the step's secret to srun: %m", n);
    r->pid = pid;
    r->back0 = a->retaken[n];
    r->tries++;
    r->stop_at = ddl_now_ms() + (int64_t)o->revive_wait_s * 1000;
    ddl_warn("generation %u: node %u (%s) is lost: starting its part of the step again there, "
             "in case it restarted (srun --jobid=%s --overlap -w %s, pid %d, try %u)", a->gen, n,
             host, a->revive_job, host, (int)pid, r->tries);
    rc = 0;
out:
    for (int i = 0; i < 2; i++)
        if (p[i] >= 0)
            close(p[i]);
    free(env);
    free(argv);
    free(rejoin);
    return rc;
}

int64_t revive_check(agent_t *a)
{
    const ddl_agent_opts_t *o = a->opts;
    int64_t now = ddl_now_ms(), next = 0;
    if (!a->rv)
        return 0;
    /* the leader's loop runs this every round: a look at every node once a
     * second at most, or when a deadline it set has come */
    if (now < a->revive_scan_at)
        return a->revive_wake;
#define WAKE(t) (next = !next || (t) < next ? (t) : next)
    for (uint32_t n = 0; n < o->nnodes; n++) {
        struct revive *r = &a->rv[n];
        int lost = a->leader && !a->final && n != o->node_id &&
                   a->peers[n].state == DDL_PEER_LOST;
        if (lost && !r->since) {
            r->since = now;
            r->next = now + DDL_REVIVE_FIRST_MS;
        } else if (!lost) {
            r->since = 0;
            r->tries = 0;
            r->gave_up = 0;
            if (a->peers[n].state != DDL_PEER_LOST) /* back, not the step's end */
                r->linked |= r->pid > 0; /* its srun now runs the node's part of the step */
        }
        /* taken back since its srun started, and maybe lost again before
         * this look (a look comes once a second): the retake count says so */
        r->linked |= r->pid > 0 && a->retaken[n] != r->back0;
        if (r->pid > 0) {
            int st;
            char how[128];
            if (waitpid(r->pid, &st, WNOHANG) == r->pid) {
                if (lost && !r->linked) {
                    int64_t wait = ddl_policy_revive_retry_ms(r->tries);
                    r->next = now + wait;
                    ddl_warn("node %u (%s): srun to start it again (try %u) %s before the node "
                             "came back; next try in %d s", n, a->peers[n].host, r->tries,
                             ddl_describe_wait_status(st, how, sizeof how), (int)(wait / 1000));
                }
                r->pid = 0;
                r->linked = 0;
                r->sig = 0;
            } else {
                if (!lost && !r->linked && !r->sig) {
                    /* the step ends (or another agent leads): nothing waits for the node */
                    ddl_warn("node %u (%s): %s: stopping the srun that would start it again "
                             "(pid %d; the node is not back)", n, a->peers[n].host,
                             a->final ? "the step ends" : "this agent no longer leads",
                             (int)r->pid);
                    kill(r->pid, SIGTERM);
                    r->sig = SIGTERM;
                    r->stop_at = now + REVIVE_KILL_MS;
                } else if (lost && !r->sig && (r->linked || now >= r->stop_at)) {
                    /* lost again, its tasks with it: Slurm's srun would wait for them */
                    if (r->linked)
                        ddl_warn("node %u (%s) is lost again: stopping the srun that started it "
                                 "last (pid %d)", n, a->peers[n].host, (int)r->pid);
                    else
                        ddl_warn("node %u (%s): not back %d s after its srun started: stopping "
                                 "that srun (pid %d)", n, a->peers[n].host,
                                 o->revive_wait_s, (int)r->pid);
                    if (r->linked) { /* a new loss: its own first try, its own clock */
                        r->since = now;
                        r->next = now + DDL_REVIVE_FIRST_MS;
                        r->tries = 0;
                    }
                    kill(r->pid, SIGTERM);
                    r->sig = SIGTERM;
                    r->stop_at = now + REVIVE_KILL_MS;
                } else if (r->sig == SIGTERM && now >= r->stop_at) {
                    kill(r->pid, SIGKILL);
                    r->sig = SIGKILL;
                }
                WAKE(now + 1000); /* reap it, stop it */
                continue;
            }
        }
        if (!lost || !a->peers[n].host[0])
            continue;
        if (now - r->since >= (int64_t)o->revive_give_up_s * 1000) {
            if (!r->gave_up)
                ddl_warn("node %u (%s): still lost %d s after its loss: no more tries to start "
                         "it again (DDL_REVIVE_GIVE_UP_S)", n, a->peers[n].host,
                         o->revive_give_up_s);
            r->gave_up = 1;
            continue;
        }
        if (now >= r->next && spawn(a, n) < 0)
            r->next = now + DDL_REVIVE_RETRY_MS;
        WAKE(r->pid > 0 ? now + 1000 : r->next);
    }
#undef WAKE
    a->revive_scan_at = next && next < now + REVIVE_SCAN_MS ? next : now + REVIVE_SCAN_MS;
    a->revive_wake = next;
    return next;
}

/* slurm_step: o->step is JOB.STEP of this job (SLURM_JOB_ID). */
static int slurm_step(const char *step)
{
    const char *job = getenv("SLURM_JOB_ID");
    size_t j = job ? strlen(job) : 0;
    return j && strncmp(step, job, j) == 0 && step[j] == '.' && step[j + 1] &&
           strspn(step + j + 1, "0123456789") == strlen(step + j + 1);
}

int revive_release(agent_t *a)
{
    const ddl_agent_opts_t *o = a->opts;
    int64_t now = ddl_now_ms();
    for (uint32_t n = 0; a->rv && n < o->nnodes; n++)
        if (a->rv[n].pid > 0 && !a->rv[n].linked)
            return 0; /* stopped by revive_check, not reaped yet */
    if (!o->rejoin || !a->final || a->released || !slurm_step(o->step))
        return 1;
    if (a->up && now < a->final_at + 10000)
        return 0; /* the leader's agent is still there: its tasks may be too */
    if (!a->release_at)
        a->release_at = now + REVIVE_RELEASE_MS;
    if (now < a->release_at)
        return 0;
    a->released = 1;
    ddl_warn("node %u: the step ended; cancelling Slurm step %s, whose srun still waits for "
             "this node's tasks from before its restart (scancel %s)", o->node_id, o->step,
             o->step);
    pid_t pid = fork();
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int fd = open("/dev/null", O_RDONLY);
        if (fd >= 0)
            dup2(fd, STDIN_FILENO);
        execlp("scancel", "scancel", "--quiet", o->step, (char *)NULL);
        fprintf(stderr, "ddl-agent: cannot execute scancel: %s\n", strerror(errno));
        _exit(127);
    }
    int st = 0, done = pid < 0;
    for (int i = 0; !done && i < 1000; i++) { /* at most 10 s */
        done = waitpid(pid, &st, WNOHANG) != 0;
        if (!done)
            usleep(10000);
    }
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    if (pid < 0 || !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        ddl_warn("node %u: scancel %s did not succeed: its srun may wait until the job ends",
                 o->node_id, o->step);
    return 1;
}
