/* ddlrun.c: the standalone launcher: `ddlrun -n N PROG ARGS` on one machine.
 *
 * It starts one supervising ddl-agent (with --emulate: one per emulated
 * node, linked over loopback TCP), then N tasks, each a ddl-launch --node
 * supervisor that runs PROG as its worker.  The agents own the supervision
 * policy, as under `srun --ddl`: the failure window and the likeliest root
 * cause, the restart budget (--restarts), the backoff, the crash-loop guard
 * (--crash-loop), the one-line failure report and DIR/failure-gen<G>.json
 * (--checkpoint-dir); their notice aborts the collectives in flight and
 * every task ends with the decided exit status.  ddlrun starts, labels
 * output (--label), binds (--bind), forwards SIGINT/SIGHUP to the tasks
 * (SIGKILL after the grace period), turns SIGTERM, SIGUSR1 and SIGUSR2 into
 * a stop at a step boundary (drain(): checkpoint, exit status 94; SIGKILL
 * after the grace period), and cleans up: it is a child
 * subreaper, sweeps every agent's process group at the end, and its
 * children die with it (PR_SET_PDEATHSIG), so no process outlives it.
 */
#include "config.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_args.h"
#include "ddl_version.h"
#include "ddlrun.h"
#include "evloop.h"
#include "log.h"
#include "proto.h"
#include "rank_env.h"
#include "sock.h"
#include "topo.h"

typedef struct {
    int fd;
    char *buf; /* the current partial line */
    size_t len, cap;
    int rank, outfd; /* whose, and where it goes (stdout, stderr) */
} outpipe_t;

typedef struct {
    pid_t pid; /* ddl-launch; its negation once reaped; 0: never started */
    int status;
    outpipe_t out[2]; /* with --label: stdout, stderr */
} rank_t;

/* An agent and what it serves, a process group led by the agent: the
 * agent, its ddl-launch tasks and their workers (with --emulate, one per
 * emulated node). */
typedef struct {
    pid_t agent;  /* 0 once reaped */
    pid_t group;  /* the agent's pid: the node's process group */
    int lost;     /* its agent was killed, or the node froze (SIGSTOP) */
    char sock[512];
    char addr[32];       /* --emulate: where its agent listens for the others (TCP) */
    int64_t reboot_at;   /* --reboot-after: when it starts again (ms), 0 not */
    int reboots;         /* how often it started again */
} node_t;

typedef struct {
    ddlrun_opts_t o;
    rank_t *ranks;
    int alive;
    char step[64], dir[400];
    char launch_path[4096], agent_path[4096];
    int sfd;
    int stopping;     /* ranks have been told to stop */
    int64_t kill_at;  /* when to SIGKILL the rest (ms), 0 none */
    int interrupted;  /* signal that interrupted ddlrun, 0 none */
    int64_t drain_ms; /* when a stop at a step boundary was asked for (drain), 0 never */
    int start_failed; /* a task could not be started (reported): exit status 1 */
    int ntasks, tpn;  /* tasks (ranks, and --spares' waiting ones), tasks per node */
    node_t *nodes;    /* the agents: one, or with --emulate o.nodes + o.spares */
    int nagents;
    int nnodes;       /* the nodes the ranks are told of (--nodes, --spares) */
    int64_t frozen_at; /* --emulate: when frozen nodes were last looked for */
    ddl_topo_env_t *bind; /* per rank: CPU mask and variables; NULL: leave them alone */
    ddl_ev_timer_t *kill_t; /* SIGKILL at kill_at (supervise) */
    ddl_ev_timer_t *reboot_t; /* --reboot-after: the next node's start (supervise) */
    ddl_evloop_t *loop;     /* supervise's, while it runs */
    int master_port;        /* MASTER_PORT of every rank */
    char secret[2 * DDL_SECRET_BYTES + 1]; /* --emulate: the step's, for a node's new agent */
} run_t;

/* agent_of: the agent that serves task i: the only one, or with --emulate
 * its node's. */
static int agent_of(const run_t *r, int i)
{
    return r->o.emulate ? i / r->tpn : 0;
}

/* group_of: the process group of a task's ddl-launch: its agent's. */
static pid_t group_of(const run_t *r, int i)
{
    return r->nodes[agent_of(r, i)].group;
}

/* stop_ranks: a catchable signal goes to each rank's ddl-launch only, which
 * forwards it to its worker (the worker sees it once); SIGKILL goes to the
 * whole process group. */
static void stop_ranks(run_t *r, int sig)
{
    for (int i = 0; i < r->ntasks; i++)
        if (r->ranks[i].pid > 0)
            kill(sig == SIGKILL ? -group_of(r, i) : r->ranks[i].pid, sig);
    if (!r->stopping && sig != SIGKILL)
        r->kill_at = ddl_now_ms() + r->o.grace_ms;
    r->drain_ms = ddl_now_ms();
    r->stopping = 1;
}

/* ---------------------------------------------------------------- output labels */

static void emit(int fd, int rank, const char *line, size_t len)
{
    char prefix[24];
    int n = snprintf(prefix, sizeof prefix, "[%d] ", rank);
    char *tmp = malloc((size_t)n + len + 1);
    if (!tmp)
        return;
    memcpy(tmp, prefix, (size_t)n);
    memcpy(tmp + n, line, len);
    tmp[(size_t)n + len] = '\n';
    ddl_write_full(fd, tmp, (size_t)n + len + 1); /* one write: lines stay whole */
    free(tmp);
}

/* pump: move what is readable from a rank's pipe to our stdout/stderr, one
 * labelled line at a time; at EOF, flush a last unterminated line. */
static void pump(outpipe_t *p, int rank, int outfd)
{
    char chunk[65536];
    for (;;) {
        ssize_t n = read(p->fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0 || errno != EAGAIN) {
                if (p->len)
                    emit(outfd, rank, p->buf, p->len);
                p->len = 0;
                close(p->fd);
                p->fd = -1;
            }
            return;
        }
        for (ssize_t i = 0; i < n; i++) {
            if (chunk[i] == '\n') {
                emit(outfd, rank, p->buf, p->len);
                p->len = 0;
                continue;
            }
            if (p->len == p->cap) {
                size_t cap = p->cap ? p->cap * 2 : 256;
                char *nb = realloc(p->buf, cap);
                if (!nb)
                    continue;
                p->buf = nb;
                p->cap = cap;
            }
            p->buf[p->len++] = chunk[i];
        }
    }
}

/* ---------------------------------------------------------------- start-up */

static int free_tcp_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = 29500;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static void child_reset_signals(void)
{
    sigset_t none;
    sigemptyset(&none);
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* set_rank_env: the rank's environment (common/rank_env.c), in the child;
 * with --emulate, ddl-launch --node reads the task's identity from it
 * (ddl_node_boot) and gives the worker its place in the world. */
static void set_rank_env(run_t *r, int rank, int master_port)
{
    const int per_node = r->tpn; /* --nodes: blocks of ranks */
    char port[16];
    ddl_error_t err;
    ddl_rank_env_vars_t vars;
    ddl_rank_env_t e = DDL_RANK_ENV_INIT;
    snprintf(port, sizeof port, "%d", master_port);
    e.rank = rank;
    e.size = r->ntasks;
    e.local_rank = rank % per_node;
    e.local_size = per_node;
    e.node_id = rank / per_node;
    e.nnodes = r->nnodes;
    e.spares = r->o.spares; /* 0 without --emulate */
    e.min_nodes = r->o.min_nodes;
    e.gen = 0; /* ddl-launch sets the generation and restart count for each one */
    e.ckpt_dir = r->o.ckpt_dir;
    e.hang_ms = r->o.hang_ms;
    e.grace_ms = r->o.grace_ms;
    e.agent_sock = r->nodes[agent_of(r, rank)].sock;
    e.step = r->step;
    e.master_addr = "127.0.0.1"; /* a user's explicit values win */
    e.master_port = port;
    if (ddl_rank_env_build(&e, &vars, &err) < 0 || ddl_rank_env_apply(&vars, &err) < 0) {
        fprintf(stderr, "ddlrun: rank %d: %s\n", rank, err.text);
        _exit(127);
    }
    if (r->o.emulate && r->nodes[agent_of(r, rank)].reboots)
        setenv("DDL_NODE_RESTARTED", "1", 1); /* its tasks wait as a spare's */
    if (r->o.ckpt_local) {
        /* each emulated machine (a spare included) its own directory: the
         * task keeps it when it takes another node's ranks */
        char dir[4200];
        if (r->nnodes > 1)
            snprintf(dir, sizeof dir, "%s/node-%d", r->o.ckpt_local, rank / per_node);
        else
            snprintf(dir, sizeof dir, "%s", r->o.ckpt_local);
        setenv("DDL_CKPT_LOCAL_DIR", dir, 1);
    }
    if (r->o.ckpt_shared_every >= 0) {
        char k[16];
        snprintf(k, sizeof k, "%d", r->o.ckpt_shared_every);
        setenv("DDL_CKPT_SHARED_EVERY", k, 1);
    }
}

static int start_rank(run_t *r, int rank, int master_port)
{
    int pipes[2][2] = {{-1, -1}, {-1, -1}};
    rank_t *rk = &r->ranks[rank];
    if (r->o.label) {
        for (int s = 0; s < 2; s++)
            if (pipe2(pipes[s], O_CLOEXEC) < 0) {
                ddl_error("pipe: %m");
                return -1;
            }
    }
    pid_t pid = fork();
    if (pid < 0) {
        ddl_error("fork for rank %d: %m", rank);
        return -1;
    }
    pid_t group = group_of(r, rank);
    if (pid == 0) {
        setpgid(0, group);
        child_reset_signals();
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        if (r->o.label) {
            dup2(pipes[0][1], STDOUT_FILENO);
            dup2(pipes[1][1], STDERR_FILENO);
        }
        set_rank_env(r, rank, master_port);
        if (r->bind) {
            ddl_error_t err;
            if (ddl_topo_env_apply(&r->bind[rank], &err) < 0)
                ddl_warn("rank %d: %s; it runs with the rest of its placement", rank, err.text);
        }
        char **argv = calloc((size_t)r->o.prog_argc + 4, sizeof *argv);
        if (!argv)
            _exit(1);
        int k = 0;
        argv[k++] = "ddl-launch";
        argv[k++] = "--node";
        argv[k++] = "--";
        for (int i = 0; i < r->o.prog_argc; i++)
            argv[k++] = r->o.prog_argv[i];
        execv(r->launch_path, argv);
        fprintf(stderr, "ddlrun: cannot execute %s: %s\n", r->launch_path, strerror(errno));
        _exit(127);
    }
    setpgid(pid, group); /* also here: no race with an early kill(-group) */
    rk->pid = pid;
    r->alive++;
    for (int s = 0; s < 2; s++) {
        rk->out[s].fd = pipes[s][0];
        if (pipes[s][1] >= 0) {
            close(pipes[s][1]);
            ddl_fd_set_nonblock(pipes[s][0], 1);
        }
    }
    ddl_debug("rank %d: ddl-launch pid %d", rank, (int)pid);
    return 0;
}

/* find_program: 0 if PROG can be executed (a path, or found in PATH). */
static int find_program(const char *prog)
{
    if (strchr(prog, '/'))
        return access(prog, X_OK);
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    char *copy = strdup(path), *save = NULL;
    int found = -1;
    for (char *d = strtok_r(copy, ":", &save); d && found < 0; d = strtok_r(NULL, ":", &save)) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", *d ? d : ".", prog);
        found = access(full, X_OK);
    }
    free(copy);
    if (found < 0)
        errno = ENOENT;
    return found;
}

/* ---------------------------------------------------------------- supervision */

static int rank_of_pid(run_t *r, pid_t pid)
{
    for (int i = 0; i < r->ntasks; i++)
        if (r->ranks[i].pid == pid)
            return i;
    return -1;
}

static int node_of_agent(const run_t *r, pid_t pid)
{
    for (int k = 0; k < r->nagents; k++)
        if (r->nodes[k].agent == pid)
            return k;
    return -1;
}

static void reap(run_t *r)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        char how[128];
        int k = node_of_agent(r, pid);
        if (k >= 0) { /* an agent: the tasks it served decide what follows */
            r->nodes[k].agent = 0;
            if (r->alive > 0 && !r->stopping && WIFSIGNALED(status)) {
                r->nodes[k].lost = 1;
                if (r->o.reboot_ms && r->nodes[k].reboots < DDLRUN_MAX_REBOOTS)
                    r->nodes[k].reboot_at = ddl_now_ms() + r->o.reboot_ms;
                if (r->o.emulate)
                    ddl_debug("node %d: its agent (pid %d) %s: the node is lost", k, (int)pid,
                              ddl_describe_wait_status(status, how, sizeof how));
                else
                    ddl_error("the ddl-agent (pid %d) %s: the ranks stop (exit status %d)",
                              (int)pid, ddl_describe_wait_status(status, how, sizeof how),
                              DDL_EXIT_NODE_LOST);
            }
            continue;
        }
        int i = rank_of_pid(r, pid);
        if (i < 0)
            continue; /* an orphan we adopted as subreaper */
        r->ranks[i].pid = -pid; /* reaped */
        r->ranks[i].status = status;
        r->alive--;
        ddl_debug("task %d (pid %d) %s", i, (int)pid,
                  ddl_describe_wait_status(status, how, sizeof how));
    }
}

/* drain: SIGTERM, SIGUSR1 or SIGUSR2 asks the job to stop at a step
 * boundary, as Slurm does at a time limit: the signal goes to every process
 * of the job (each node's process group: agent, ddl-launch, worker), the
 * agents agree with the workers' libddl on one boundary, the workers commit a
 * checkpoint and exit with DDL_EXIT_STOPPED (agent/drain.c).  SIGKILL after
 * the grace period, or at a second SIGTERM or SIGINT. */
static void drain(run_t *r, int sig)
{
    char name[32];
    ddl_warn("got %s: asking the %d rank%s to checkpoint at their next step boundary and stop "
             "(exit status %d); SIGKILL in %.1f s, or at once on a second SIGTERM",
             ddl_signal_name(sig, name, sizeof name), r->alive, r->alive == 1 ? "" : "s",
             DDL_EXIT_STOPPED, (double)r->o.grace_ms / 1000.0);
    for (int k = 0; k < r->nagents; k++)
        if (r->nodes[k].group > 0 && !r->nodes[k].lost)
            kill(-r->nodes[k].group, sig);
    r->kill_at = ddl_now_ms() + r->o.grace_ms;
    r->drain_ms = ddl_now_ms();
    r->stopping = 1;
}

static void on_signal(run_t *r, int sig)
{
    char name[32];
    if (sig == SIGCHLD) {
        reap(r);
        return;
    }
    if (!r->stopping && (sig == SIGTERM || sig == SIGUSR1 || sig == SIGUSR2)) {
        drain(r, sig);
    } else if (!r->stopping) {
        r->interrupted = sig;
        ddl_warn("got %s: forwarding it to %d rank%s", ddl_signal_name(sig, name, sizeof name),
                 r->alive, r->alive == 1 ? "" : "s");
        stop_ranks(r, sig);
    } else if (r->drain_ms && ddl_now_ms() - r->drain_ms < 1000 &&
               (sig == SIGTERM || sig == SIGUSR1 || sig == SIGUSR2)) {
        /* the same request twice (timeout(1) signals its child and then its
         * process group): not the second SIGTERM that kills at once */
        ddl_debug("got %s again within 1 s: taken as the same request",
                  ddl_signal_name(sig, name, sizeof name));
    } else if (sig == SIGINT || sig == SIGTERM) {
        if (!r->interrupted)
            r->interrupted = sig;
        ddl_warn("got %s again: killing the ranks now", ddl_signal_name(sig, name, sizeof name));
        stop_ranks(r, SIGKILL);
    }
}

/* proc_stopped: process pid is stopped (SIGSTOP, or traced). */
static int proc_stopped(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *st = strrchr(buf, ')');
    /* 'T' only: a tracing stop ('t') is a debugger, or LeakSanitizer
     * suspending an exiting process for its leak check, not a frozen node */
    return st && st[1] == ' ' && st[2] == 'T';
}

/* sweep_frozen: --emulate: a node frozen with SIGSTOP (a crash with its
 * link down, as far as the other nodes can tell) never ends by itself; once
 * every task still there is stopped, its nodes are killed and count as
 * lost.  Looked at twice a second. */
static void sweep_frozen(run_t *r)
{
    int64_t now = ddl_now_ms();
    if (now - r->frozen_at < 500)
        return;
    r->frozen_at = now;
    for (int i = 0; i < r->ntasks; i++)
        if (r->ranks[i].pid > 0 && !proc_stopped(r->ranks[i].pid))
            return;
    for (int i = 0; i < r->ntasks; i++) {
        node_t *n = &r->nodes[i / r->tpn];
        if (r->ranks[i].pid > 0 && !n->lost) {
            ddl_warn("node %d (node%d) is stopped and every other task has ended: killed, "
                     "as a lost node", i / r->tpn, i / r->tpn);
            n->lost = 1;
            kill(-n->group, SIGKILL);
        }
    }
}

/* The supervision loop (common/evloop.h): the signalfd and, with --label,
 * every rank's output pipes as fd watchers; the SIGKILL after the grace
 * period as a timer, and a tick once a second; the prepare hook reaps, sweeps
 * and ends the loop once every task is gone and every pipe is closed. */

static void on_signals(ddl_evloop_t *loop, ddl_ev_fd_t *w, int fd, short re, void *arg)
{
    struct signalfd_siginfo si;
    (void)loop;
    (void)w;
    (void)re;
    while (read(fd, &si, sizeof si) == sizeof si)
        on_signal(arg, (int)si.ssi_signo);
}

static void on_output(ddl_evloop_t *loop, ddl_ev_fd_t *w, int fd, short re, void *arg)
{
    outpipe_t *p = arg;
    (void)loop;
    (void)fd;
    (void)re;
    pump(p, p->rank, p->outfd);
    if (p->fd < 0) /* closed at its end */
        ddl_ev_fd_remove(w);
}

static void on_kill_timer(ddl_evloop_t *loop, ddl_ev_timer_t *t, void *arg)
{
    run_t *r = arg;
    (void)loop;
    (void)t;
    if (r->kill_at && ddl_now_ms() >= r->kill_at && r->alive > 0) {
        ddl_warn("%d rank%s still running %.1f s after SIGTERM: sending SIGKILL", r->alive,
                 r->alive == 1 ? "" : "s", (double)r->o.grace_ms / 1000.0);
        stop_ranks(r, SIGKILL);
        r->kill_at = 0;
    }
}

/* on_tick: once a second, so that the prepare hook reaps (a SIGCHLD merged
 * with another signal is not lost) and looks for frozen nodes. */
static void on_tick(ddl_evloop_t *loop, ddl_ev_timer_t *t, void *arg)
{
    (void)loop;
    (void)t;
    (void)arg;
}

static void reboot_nodes(run_t *r);

static void supervise_prepare(ddl_evloop_t *loop, void *arg)
{
    run_t *r = arg;
    reap(r);
    if (r->o.reboot_ms)
        reboot_nodes(r);
    int open_pipes = 0;
    for (int i = 0; i < r->ntasks; i++)
        open_pipes += (r->ranks[i].out[0].fd >= 0) + (r->ranks[i].out[1].fd >= 0);
    if (r->alive == 0 && open_pipes == 0) {
        ddl_evloop_stop(loop);
        return;
    }
    /* With every task gone, a pipe kept open by a leftover grandchild
     * must not keep ddlrun waiting: the agents' groups are swept now. */
    if (r->alive == 0)
        for (int k = 0; k < r->nagents; k++)
            if (r->nodes[k].group > 0)
                kill(-r->nodes[k].group, SIGKILL);
    if (r->o.emulate && r->alive > 0)
        sweep_frozen(r);
    if (r->kill_at && r->alive > 0)
        ddl_ev_timer_arm_at(r->kill_t, r->kill_at, 0);
    else
        ddl_ev_timer_cancel(r->kill_t);
}

static void supervise(run_t *r)
{
    ddl_evloop_t *loop = ddl_evloop_new();
    int ok = loop && ddl_ev_fd_add(loop, r->sfd, POLLIN, on_signals, r) &&
             (r->kill_t = ddl_ev_timer_new(loop, on_kill_timer, r));
    ddl_ev_timer_t *tick = ok ? ddl_ev_timer_new(loop, on_tick, r) : NULL;
    ok = ok && tick && (r->reboot_t = ddl_ev_timer_new(loop, on_tick, r));
    r->loop = loop;
    for (int i = 0; ok && i < r->ntasks; i++)
        for (int s = 0; ok && s < 2; s++) {
            outpipe_t *p = &r->ranks[i].out[s];
            p->rank = i;
            p->outfd = s ? STDERR_FILENO : STDOUT_FILENO;
            ok = p->fd < 0 || ddl_ev_fd_add(loop, p->fd, POLLIN, on_output, p);
        }
    if (ok) {
        ddl_ev_timer_arm(tick, 1000, 1000);
        ddl_evloop_set_prepare(loop, supervise_prepare, r);
        if (ddl_evloop_run(loop) == 0) {
            ddl_evloop_free(loop);
            r->loop = NULL;
            return;
        }
        ddl_error("poll: %m");
    } else {
        ddl_error("out of memory");
    }
    ddl_evloop_free(loop);
    r->loop = NULL;
    stop_ranks(r, SIGKILL); /* and wait for them without the loop */
    while (r->alive > 0 && poll(NULL, 0, 100) >= 0)
        reap(r);
}

/* ---------------------------------------------------------------- the agents */

/* start_agent: without --emulate, the one supervising agent, leading the
 * process group of every task: the same policy as the agents of
 * --emulate or srun --ddl, on one node.  0, or -1 (reported). */
static int start_agent(run_t *r, const char *dir)
{
    ddl_error_t err;
    ddl_agent_args_t a = DDL_AGENT_ARGS_INIT;
    ddl_agent_argv_t av;
    snprintf(r->nodes[0].sock, sizeof r->nodes[0].sock, "%s/%s.sock", dir, r->step);
    a.socket = r->nodes[0].sock;
    a.step = r->step;
    a.size = (uint32_t)r->ntasks;
    a.parent = (int)getpid();
    a.exit_when_done = 1;
    a.supervise = 1;
    a.restarts = (uint32_t)r->o.restarts;
    a.crash_loop = r->o.ckpt_dir ? (uint32_t)r->o.crash_loop : 0;
    a.ddlrun_names = 1;
    pid_t pid = ddl_agent_argv_build(&a, &av, &err) < 0
                    ? -1
                    : ddl_spawn_ready(r->agent_path, av.argv, NULL, 0, 1, 10000, &err);
    if (pid < 0) {
        ddl_error("%s", err.text);
        return -1;
    }
    r->nodes[0].agent = r->nodes[0].group = pid;
    ddl_debug("agent pid %d (the tasks' process group) listening on %s", (int)pid,
              r->nodes[0].sock);
    return 0;
}

/* node_agent: --emulate: node k's agent, leading the node's process group,
 * listening for the other agents on a loopback TCP socket that ddlrun opens
 * (so that it knows every node's address): node 0 leads at first, the
 * others link to it with the step's secret (through a pipe, as under
 * Slurm); with rejoin (the node started again after a loss) it asks the
 * step's agents instead to take it back.  0, or -1 (reported). */
static int node_agent(run_t *r, int k, int rejoin)
{
    ddl_error_t err;
    uint16_t port;
    node_t *n = &r->nodes[k];
    int lfd = ddl_tcp_listen("127.0.0.1", &port, &err), sp[2] = {-1, -1}, rc = -1;
    char host[32], local[64 * 12] = "", *list = NULL;
    if (lfd < 0) {
        ddl_error("node %d's agent's socket: %s", k, err.text);
        return -1;
    }
    snprintf(n->addr, sizeof n->addr, "127.0.0.1:%u", port);
    long to = r->o.node_timeout_ms ? r->o.node_timeout_ms : DDL_NODE_TIMEOUT_DEFAULT_MS;
    ddl_agent_args_t a = DDL_AGENT_ARGS_INIT;
    a.step = r->step;
    a.size = (uint32_t)r->ntasks;
    a.nnodes = (uint32_t)r->nnodes;
    a.parent = (int)getpid();
    a.exit_when_done = 1;
    a.supervise = 1;
    a.restarts = (uint32_t)r->o.restarts;
    a.crash_loop = r->o.ckpt_dir ? (uint32_t)r->o.crash_loop : 0;
    a.node_timeout_ms = (int)to;
    a.heartbeat_ms = (int)(to / 2 < DDL_HEARTBEAT_DEFAULT_MS ? to / 2 : DDL_HEARTBEAT_DEFAULT_MS);
    a.spares = (uint32_t)r->o.spares;
    a.min_nodes = (uint32_t)r->o.min_nodes;
    size_t used = 0;
    for (int i = 0; i < r->tpn && used < sizeof local - 12; i++)
        used += (size_t)snprintf(local + used, sizeof local - used, "%s%d", i ? "," : "",
                                 k * r->tpn + i);
    if (rejoin) { /* every other node's address, in node order */
        size_t len = (size_t)r->nnodes * sizeof n->addr;
        if (!(list = malloc(len))) {
            ddl_error("out of memory");
            goto out;
        }
        used = 0;
        for (int j = 0; j < r->nnodes; j++)
            used += (size_t)snprintf(list + used, len - used, "%s%s", j ? "," : "",
                                     j == k ? "" : r->nodes[j].addr);
    }
    snprintf(n->sock, sizeof n->sock, "%s/%s-node%d.sock", r->dir, r->step, k);
    if (pipe2(sp, O_CLOEXEC) < 0 || ddl_write_full(sp[1], r->secret, strlen(r->secret)) < 0) {
        ddl_error("cannot pass the secret to node %d's agent: %m", k);
        goto out;
    }
    close(sp[1]);
    sp[1] = -1;
    snprintf(host, sizeof host, "node%d", k);
    ddl_agent_argv_t av;
    a.socket = n->sock;
    a.node_id = (uint32_t)k;
    a.local_ranks = local;
    a.secret_fd = sp[0];
    a.tcp_fd = lfd;
    a.leader = k && !rejoin ? r->nodes[0].addr : NULL;
    a.rejoin = list;
    a.host = host;
    a.ddlrun_names = 1;
    if (ddl_agent_argv_build(&a, &av, &err) < 0) {
        ddl_error("node %d's agent: %s", k, err.text);
        goto out;
    }
    int keep[2] = {sp[0], lfd};
    pid_t pid = ddl_spawn_ready(r->agent_path, av.argv, keep, 2, 1, 40000, &err);
    if (pid < 0) {
        ddl_error("node %d: %s", k, err.text);
        goto out;
    }
    n->agent = n->group = pid;
    ddl_debug("node %d: agent pid %d (its process group) on %s, %s", k, (int)pid, n->sock,
              n->addr);
    rc = 0;
out:
    for (int i = 0; i < 2; i++)
        if (sp[i] >= 0)
            close(sp[i]);
    close(lfd);
    free(list);
    return rc;
}

/* start_nodes: --emulate: one agent per emulated node (node_agent) with a
 * fresh secret.  Without --emulate, start_agent.  0, or -1 (reported; the
 * agents started are stopped by stop_nodes). */
static int start_nodes(run_t *r, const char *dir)
{
    if (!r->o.emulate)
        return start_agent(r, dir);
    ddl_error_t err;
    if (ddl_secret_hex(r->secret, &err) < 0) {
        ddl_error("%s", err.text);
        return -1;
    }
    for (int k = 0; k < r->nnodes; k++)
        if (node_agent(r, k, 0) < 0)
            return -1;
    return 0;
}

/* reboot_nodes: --reboot-after: each lost node whose time has come and whose
 * tasks are gone starts again, as a machine that rebooted: a new agent that
 * asks the step's agents to take it back, and new tasks that wait as a
 * spare's (DDL_NODE_RESTARTED).  Arms the timer for the next one. */
static void reboot_nodes(run_t *r)
{
    int64_t now = ddl_now_ms(), next = 0;
    for (int k = 0; k < r->nnodes && !r->stopping; k++) {
        node_t *n = &r->nodes[k];
        int busy = n->agent > 0;
        for (int i = k * r->tpn; i < (k + 1) * r->tpn; i++)
            busy |= r->ranks[i].pid > 0 || r->ranks[i].out[0].fd >= 0 ||
                    r->ranks[i].out[1].fd >= 0;
        if (!n->reboot_at || busy || now < n->reboot_at) {
            if (n->reboot_at && (!next || n->reboot_at < next))
                next = n->reboot_at > now ? n->reboot_at : now + 100;
            continue;
        }
        n->reboot_at = 0;
        n->reboots++;
        ddl_warn("node %d (node%d) starts again (--reboot-after, %d time%s): its agent asks to "
                 "be taken back, its tasks wait as a spare's", k, k, n->reboots,
                 n->reboots == 1 ? "" : "s");
        if (node_agent(r, k, 1) < 0)
            continue; /* reported: the node stays lost */
        n->lost = 0;
        for (int i = k * r->tpn; i < (k + 1) * r->tpn; i++) {
            if (start_rank(r, i, r->master_port) < 0) {
                kill(-n->group, SIGKILL); /* what is left of the node ends: lost again */
                break;
            }
            for (int o = 0; o < 2; o++) {
                outpipe_t *p = &r->ranks[i].out[o];
                if (p->fd >= 0 && !ddl_ev_fd_add(r->loop, p->fd, POLLIN, on_output, p))
                    ddl_error("out of memory: rank %d's output is lost", i);
            }
        }
    }
    if (next)
        ddl_ev_timer_arm_at(r->reboot_t, next, 0);
}

/* stop_nodes: the agents have a moment to end by themselves (they do once
 * their tasks have; at once when ddlrun was interrupted), then SIGTERM,
 * then each agent's process group is swept with SIGKILL. */
static void stop_nodes(run_t *r)
{
    for (int t = 0; t < 300; t++) {
        int left = 0;
        for (int k = 0; k < r->nagents; k++) {
            if (r->nodes[k].agent > 0 && waitpid(r->nodes[k].agent, NULL, WNOHANG) ==
                                             r->nodes[k].agent)
                r->nodes[k].agent = 0;
            /* SIGINT: SIGTERM would ask a supervised agent to stop the step */
            if (r->nodes[k].agent > 0 && t == (r->interrupted ? 0 : 200))
                kill(r->nodes[k].agent, SIGINT);
            left += r->nodes[k].agent > 0;
        }
        if (!left)
            break;
        usleep(10000);
    }
    for (int k = 0; k < r->nagents; k++) {
        if (r->nodes[k].group > 0)
            kill(-r->nodes[k].group, SIGKILL);
        if (r->nodes[k].agent > 0)
            waitpid(r->nodes[k].agent, NULL, 0);
        r->nodes[k].agent = 0;
        if (r->nodes[k].sock[0])
            unlink(r->nodes[k].sock);
    }
}

/* exit_code: as srun's: the highest status of the tasks whose agent was
 * not lost (the agents decided it: the failed worker's own without a
 * restart left, DDL_EXIT_* otherwise), 128+N for a signal; 128+N when ddlrun
 * was interrupted by signal N; 1 when a task could not be started. */
static int exit_code(run_t *r)
{
    int code = 0, counted = 0;
    if (r->interrupted)
        return 128 + r->interrupted;
    if (r->start_failed)
        return 1;
    for (int i = 0; i < r->ntasks; i++) {
        if (r->nodes[agent_of(r, i)].lost || r->ranks[i].pid == 0)
            continue;
        int c = ddl_wait_status_code(r->ranks[i].status);
        code = c > code ? c : code;
        counted = 1;
    }
    return counted ? code : DDL_EXIT_NODE_LOST;
}

/* ---------------------------------------------------------------- placement */

/* report_kept: say once per variable that a value already in the
 * environment wins over ddl's choice. */
static void report_kept(run_t *r)
{
    char seen[DDL_TOPO_ENV_MAX * 2][32];
    int nseen = 0;
    for (int i = 0; i < r->ntasks; i++)
        for (int v = 0; v < r->bind[i].nvars; v++) {
            const ddl_topo_var_t *var = &r->bind[i].vars[v];
            int k;
            if (!var->kept)
                continue;
            for (k = 0; k < nseen && strcmp(seen[k], var->name) != 0; k++)
                ;
            if (k < nseen || nseen == (int)(sizeof seen / sizeof seen[0]))
                continue;
            snprintf(seen[nseen++], sizeof seen[0], "%s", var->name);
            ddl_info("%s=%s is set: kept for every rank (ddl would give rank %d %s=%s)",
                     var->name, getenv(var->name) ? getenv(var->name) : "", i, var->name,
                     var->value);
        }
}

/* plan_binding: the topology work, done once here for all ranks (see
 * ddl_topo_plan), kept as a CPU mask and variables that start_rank applies
 * in the rank's child before exec; sched_setaffinity() and the environment
 * carry over to ddl-launch and the worker.  Returns 0, also when the
 * topology cannot be read (the ranks then run unbound, with a warning), or
 * 2 when --bind LIST does not fit this machine. */
static int plan_binding(run_t *r)
{
    ddl_error_t err;
    int fatal;
    if (r->o.bind == DDLRUN_BIND_NONE)
        return 0;
    r->bind = ddl_topo_plan(r->ntasks, r->o.bind == DDLRUN_BIND_LIST ? r->o.bind_list : NULL,
                            &fatal, &err);
    if (!r->bind) {
        if (fatal) {
            ddl_error("--bind: %s", err.text);
            return 2;
        }
        ddl_warn("%s; the ranks run unbound (--bind none skips the topology)", err.text);
        return 0;
    }
    report_kept(r);
    return 0;
}

static void free_binding(run_t *r)
{
    if (!r->bind)
        return;
    for (int i = 0; i < r->ntasks; i++)
        ddl_topo_env_clear(&r->bind[i]);
    free(r->bind);
    r->bind = NULL;
}

/* run: start the agents and every task, supervise them until all are
 * gone (restarts happen inside, decided by the agents), sweep what is
 * left; returns ddlrun's exit code. */
static int run(run_t *r)
{
    int code = 1;
    if (start_nodes(r, r->dir) == 0) {
        r->master_port = free_tcp_port();
        for (int i = 0; i < r->ntasks && !r->stopping; i++) {
            if (start_rank(r, i, r->master_port) < 0) {
                r->start_failed = 1; /* reported; makes the exit status 1 */
                stop_ranks(r, SIGTERM);
            }
        }
        supervise(r);
        code = exit_code(r);
    }
    stop_nodes(r);
    ddl_kill_adopted(0);
    memset(r->secret, 0, sizeof r->secret);
    return code;
}

int main(int argc, char **argv)
{
    run_t r = {.sfd = -1};
    ddl_error_t err;
    sigset_t mask;
    int code = 1;

    ddl_log_init("ddlrun", DDL_LOG_INFO);
    switch (ddlrun_parse_args(argc, argv, &r.o, &err)) {
    case DDLRUN_ARGS_HELP:
        fputs(ddlrun_usage, stdout);
        return 0;
    case DDLRUN_ARGS_VERSION:
        printf("ddlrun %s\n", DDL_VERSION_STRING);
        return 0;
    case DDLRUN_ARGS_ERROR:
        fprintf(stderr, "ddlrun: %s\nTry 'ddlrun --help'.\n", err.text);
        return 2;
    case DDLRUN_ARGS_RUN:
        break;
    }
    if (r.o.verbose) {
        ddl_log_set_level(DDL_LOG_DEBUG);
        setenv("DDL_LOG_LEVEL", "debug", 1); /* for the agent, ddl-launch and libddl */
    }
    if (find_program(r.o.prog_argv[0]) < 0) {
        ddl_error("cannot execute '%s': %s", r.o.prog_argv[0], strerror(errno));
        return 127;
    }
    if (ddl_find_helper("ddl-launch", "launcher", DDL_LIBEXECDIR, r.launch_path,
                        sizeof r.launch_path, &err) < 0 ||
        ddl_find_helper("ddl-agent", "agent", DDL_BINDIR, r.agent_path, sizeof r.agent_path,
                        &err) < 0) {
        ddl_error("%s", err.text);
        return 1;
    }
    if (ddl_runtime_dir(getuid(), 1, r.dir, sizeof r.dir, &err) < 0) {
        ddl_error("%s", err.text);
        return 1;
    }
    r.tpn = r.o.np / r.o.nodes;
    r.ntasks = r.o.np + r.o.spares * r.tpn; /* --spares: tasks that wait */
    r.nnodes = r.o.nodes + r.o.spares;
    r.nagents = r.o.emulate ? r.nnodes : 1;
    r.nodes = calloc((size_t)r.nagents, sizeof *r.nodes);
    if (!r.nodes) {
        ddl_error("out of memory for %d nodes", r.nagents);
        return 1;
    }
    if (r.o.ckpt_dir) /* the agents read it: crash loops, failure summaries */
        setenv("DDL_CHECKPOINT_DIR", r.o.ckpt_dir, 1);
    if ((code = plan_binding(&r)) != 0)
        goto out;
    code = 1;
    snprintf(r.step, sizeof r.step, "local-%d", (int)getpid());

    r.ranks = calloc((size_t)r.ntasks, sizeof *r.ranks);
    if (!r.ranks) {
        ddl_error("out of memory for %d ranks", r.ntasks);
        goto out;
    }
    for (int i = 0; i < r.ntasks; i++)
        r.ranks[i].out[0].fd = r.ranks[i].out[1].fd = -1;

    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGQUIT);
    sigaddset(&mask, SIGUSR1);
    sigaddset(&mask, SIGUSR2);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    r.sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (r.sfd < 0) {
        ddl_error("signalfd: %m");
        goto out;
    }
    prctl(PR_SET_CHILD_SUBREAPER, 1);

    code = run(&r);
out: /* every way out once the node table exists */
    for (int i = 0; r.ranks && i < r.ntasks; i++)
        for (int s = 0; s < 2; s++)
            free(r.ranks[i].out[s].buf);
    free(r.ranks);
    free(r.nodes);
    free_binding(&r);
    if (r.sfd >= 0)
        close(r.sfd);
    return code;
}
