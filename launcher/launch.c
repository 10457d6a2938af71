/* launch.c: ddl-launch, the per-rank supervisor.
 *
 *   ddl-launch [--] PROG [ARGS...]
 *   ddl-launch --slurm WORKER-PID ENV-FD      (exec'd by spank_ddl.so)
 *
 * Under Slurm the plugin has already forked the worker, which waits inside
 * the plugin for its environment: ddl-launch bootstraps (slurm_boot.c),
 * registers with the node's agent, then writes the worker's variables to
 * ENV-FD as NAME=VALUE lines ended by a "." line, and supervises the worker
 * as below.  The node's first task also waits, after its own worker, for
 * the node's agent to finish serving the other local ranks.
 *
 * It registers its rank with the node's ddl-agent (DDL_AGENT_SOCK,
 * DDL_RANK), starts PROG as its worker child, forwards signals to it, tells
 * the agent when the worker runs and how it ended, and finally ends the same
 * way as the worker: the same exit status, or killed by the same signal, so
 * that ddlrun (and later slurmstepd) sees the worker's fate.  On SIGTERM,
 * SIGINT or SIGHUP the worker gets the signal and DDL_GRACE_MS (default
 * 5000) to exit before SIGKILL.  If ddl-launch's parent dies it behaves as if
 * sent SIGTERM; if ddl-launch itself is killed, the worker gets SIGKILL.
 * ddl-launch is a child subreaper: whatever the worker leaves behind (a
 * background child, an orphan of a killed shell) becomes its child and is
 * killed once the worker has ended.
 *
 * Hangs: with DDL_HANG_TIMEOUT_MS (ddlrun --hang-timeout) the worker gets
 * the write end of a pipe in DDL_HEARTBEAT_FD, on which libddl beats (every
 * collective, while waiting for a peer, ddl_heartbeat()).  From the first
 * beat on, a worker silent for that long is hung: ddl-launch reports what it
 * was doing (its state and kernel wait channel from /proc, the collectives
 * and the step of its last beat), kills it with SIGKILL and exits with
 * DDL_EXIT_HANG (92), which ddlrun reports as a hang.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddl_version.h"
#include "log.h"
#include "proto.h"
#include "slurm_boot.h"
#include "topo.h"
#include "sock.h"
#include "util.h"

#define REGISTER_TIMEOUT_MS 10000
#define SLURM_REGISTER_TIMEOUT_MS 60000 /* the node's first task may still be booting */

static int agent_fd = -1;
static long rank = -1;

/* Watching the worker's heartbeats (ddl_beat_rec_t, from libddl). */
typedef struct {
    int fd;           /* read end, -1: not watching */
    long timeout_ms;  /* DDL_HANG_TIMEOUT_MS, 0: off */
    int64_t last_ms;  /* when the last record came, 0: none yet */
    ddl_beat_rec_t last;
} beats_t;

/* beats_read: take every record waiting; stop watching at end of file
 * (the worker closed its end or ended). */
static void beats_read(beats_t *b)
{
    ddl_beat_rec_t r[64];
    for (;;) {
        ssize_t n = read(b->fd, r, sizeof r);
        if (n > 0) {
            if ((size_t)n >= sizeof r[0]) {
                b->last = r[(size_t)n / sizeof r[0] - 1];
                b->last_ms = ddl_now_ms();
            }
            continue;
        }
        if (n == 0) {
            close(b->fd);
            b->fd = -1;
        }
        return;
    }
}

/* proc_line: the first line of /proc/PID/NAME, or "?". */
static void proc_line(pid_t pid, const char *name, char *buf, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(buf, (int)len, f))
        snprintf(buf, len, "?");
    if (f)
        fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
}

/* report_hang: one line saying what the hung worker was doing. */
static void report_hang(const beats_t *b, pid_t wpid)
{
    char stat[512], wchan[128], step[48] = "";
    proc_line(wpid, "stat", stat, sizeof stat);
    proc_line(wpid, "wchan", wchan, sizeof wchan);
    const char *st = strrchr(stat, ')'); /* "pid (comm) S ...": the state follows */
    char state = st && st[1] == ' ' ? st[2] : '?';
    const char *what = state == 'T' || state == 't' ? "stopped"
                     : state == 'D'                 ? "in uninterruptible I/O"
                     : state == 'R'                 ? "running (outside libddl)"
                     : state == 'S'                 ? "sleeping"
                     : state == 'Z'                 ? "a zombie"
                                                    : "state unknown";
    if (b->last.step >= 0)
        snprintf(step, sizeof step, ", step %lld", (long long)b->last.step);
    ddl_error("rank %ld: worker %d hung: nothing heard for %.1f s (DDL_HANG_TIMEOUT_MS=%ld); "
              "last beat after %llu collectives%s; now %s (state %c, wait channel %s); "
              "killing it",
              rank, (int)wpid, (double)(ddl_now_ms() - b->last_ms) / 1000.0, b->timeout_ms,
              (unsigned long long)b->last.collectives, step, what, state,
              wchan[0] && strcmp(wchan, "0") ? wchan : "none");
}

/* tell: best-effort report to the agent; the worker's fate never depends on it. */
static void tell(uint8_t state, pid_t wpid, int wstatus)
{
    if (agent_fd < 0)
        return;
    ddl_msg_t m = {.type = DDL_MSG_RANK_STATE};
    m.u.rank_state.rank = (uint32_t)rank;
    m.u.rank_state.state = state;
    m.u.rank_state.pid = (int32_t)wpid;
    m.u.rank_state.wstatus = wstatus;
    if (ddl_proto_send(agent_fd, &m) < 0)
        ddl_debug("rank %ld: cannot report to the agent: %m", rank);
}

static int register_rank(int timeout_ms)
{
    const char *sock = getenv("DDL_AGENT_SOCK");
    const char *r = getenv("DDL_RANK");
    ddl_error_t err;
    ddl_msg_t m;

    if (!sock || !*sock)
        return 0; /* no agent: plain supervision */
    if (ddl_parse_long(r, 0, 0xffffff, &rank) < 0) {
        ddl_error("DDL_RANK='%s' is not a rank number (0-16777215)", r ? r : "");
        return -1;
    }
    agent_fd = ddl_sock_connect(sock, timeout_ms, &err);
    if (agent_fd < 0) {
        ddl_error("rank %ld: %s", rank, err.text);
        return -1;
    }
    m = (ddl_msg_t){.type = DDL_MSG_REGISTER};
    m.u.reg.rank = (uint32_t)rank;
    m.u.reg.pid = (int32_t)getpid();
    /* the placement ddlrun or slurm_plan put in this process's environment */
    const char *cpus = getenv("DDL_BIND_CPUS"), *gpu = getenv("DDL_BIND_GPU"),
               *nic = getenv("DDL_BIND_NIC");
    snprintf(m.u.reg.cpus, sizeof m.u.reg.cpus, "%s", cpus ? cpus : "");
    snprintf(m.u.reg.gpu, sizeof m.u.reg.gpu, "%s", gpu ? gpu : "");
    snprintf(m.u.reg.nic, sizeof m.u.reg.nic, "%s", nic ? nic : "");
    long restarts = 0; /* ddlrun --restarts: this generation's count, for status */
    const char *rc = getenv("DDL_RESTART_COUNT");
    if (rc && ddl_parse_long(rc, 0, 1000000, &restarts) == 0)
        m.u.reg.restarts = (uint32_t)restarts;
    if (ddl_proto_send(agent_fd, &m) < 0 ||
        ddl_proto_recv(agent_fd, &m, timeout_ms, &err) < 0) {
        ddl_error("rank %ld: registration with the agent at %s failed: %s", rank, sock,
                  errno == EPROTO || errno == ETIMEDOUT ? err.text : strerror(errno));
        return -1;
    }
    int ok = m.type == DDL_MSG_ACK;
    if (!ok)
        ddl_error("rank %ld: the agent refused the registration: %s", rank,
                  m.type == DDL_MSG_ERROR ? m.u.error.text : ddl_msg_type_str(m.type));
    ddl_msg_clear(&m);
    return ok ? 0 : -1;
}

/* die_like: end this process the way the worker ended. */
static void die_like(int status)
{
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        struct rlimit no_core = {0, 0};
        sigset_t set;
        setrlimit(RLIMIT_CORE, &no_core); /* the worker's core is the one that matters */
        signal(sig, SIG_DFL);
        sigemptyset(&set);
        sigaddset(&set, sig);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        raise(sig);
        _exit(128 + sig); /* a signal whose default is not to terminate */
    }
    _exit(ddl_wait_status_code(status));
}

/* env_line: one NAME=VALUE line for the worker; MASTER_* only when the
 * user did not set them (their explicit values win, as under ddlrun). */
static int env_line(FILE *f, const char *name, const char *value, int only_if_unset)
{
    if (only_if_unset && getenv(name))
        return 0;
    return fprintf(f, "%s=%s\n", name, value) < 0 ? -1 : 0;
}

/* slurm_plan: DDL_BIND (auto, none or CPU lists, from --ddl-bind or
 * ddl.conf): this rank's placement into *place (cleared: nothing to apply),
 * with DDL_BIND_CPUS/GPU/NIC also set here for the registration.  -1 when a
 * CPU list does not fit this node. */
static int slurm_plan(const ddl_slurm_boot_t *b, ddl_topo_env_t *place)
{
    const char *bind = getenv("DDL_BIND");
    ddl_error_t err;
    int fatal;
    memset(place, 0, sizeof *place);
    if (!bind || !*bind || strcmp(bind, "none") == 0)
        return 0;
    ddl_topo_env_t *plan =
        ddl_topo_plan((int)b->local_size, strcmp(bind, "auto") == 0 ? NULL : bind, &fatal, &err);
    if (!plan) {
        if (fatal) {
            ddl_error("rank %ld: --ddl-bind=%s: %s", b->rank, bind, err.text);
            return -1;
        }
        if (b->local_rank == 0)
            ddl_warn("node %ld: %s; the ranks run unbound (--ddl-bind=none skips the topology)",
                     b->node_id, err.text);
        return 0;
    }
    *place = plan[b->local_rank];
    plan[b->local_rank].pus = NULL; /* now place's */
    for (long i = 0; i < b->local_size; i++)
        ddl_topo_env_clear(&plan[i]);
    free(plan);
    for (int i = 0; i < place->nvars; i++)
        if (strncmp(place->vars[i].name, "DDL_BIND_", 9) == 0)
            setenv(place->vars[i].name, place->vars[i].value, 1);
    if (place->pus)
        setenv("DDL_BIND_CPUS", place->pus, 1);
    return 0;
}

/* slurm_place: apply the placement to the waiting worker: its CPU mask and
 * the variables the user did not set. */
static void slurm_place(const ddl_slurm_boot_t *b, pid_t wpid, ddl_topo_env_t *place, FILE *f)
{
    ddl_error_t err;
    for (int i = 0; i < place->nvars; i++)
        if (!place->vars[i].kept)
            env_line(f, place->vars[i].name, place->vars[i].value, 0);
    if (place->pus) {
        if (ddl_topo_bind_pid(wpid, place->pus, &err) < 0)
            ddl_warn("rank %ld: %s; it runs unbound", b->rank, err.text);
        else
            env_line(f, "DDL_BIND_CPUS", place->pus, 0);
    }
}

/* slurm_start: bootstrap, register, release the waiting worker with its
 * environment.  Returns the worker's pid, or -1 (reported; worker killed). */
static pid_t slurm_start(const char *pid_arg, const char *fd_arg, pid_t *agent)
{
    long wpid, efd;
    ddl_slurm_boot_t b;
    ddl_error_t err;
    char v[32];
    if (ddl_parse_long(pid_arg, 1, 1L << 22, &wpid) < 0 ||
        ddl_parse_long(fd_arg, 3, 1 << 20, &efd) < 0) {
        ddl_error("--slurm: '%s' '%s' are not a worker pid and a descriptor (this mode is for "
                  "the ddl SPANK plugin)", pid_arg, fd_arg);
        return -1;
    }
    ddl_fd_set_cloexec((int)efd); /* the agent must not hold the worker's pipe open */
    if (ddl_slurm_boot(&b, &err) < 0) {
        ddl_error("task %s: %s", getenv("SLURM_PROCID") ? getenv("SLURM_PROCID") : "?", err.text);
        kill((pid_t)wpid, SIGKILL);
        return -1;
    }
    *agent = b.agent;
    setenv("DDL_AGENT_SOCK", b.sock, 1);
    snprintf(v, sizeof v, "%ld", b.rank);
    setenv("DDL_RANK", v, 1);
    ddl_topo_env_t place;
    if (slurm_plan(&b, &place) < 0 || register_rank(SLURM_REGISTER_TIMEOUT_MS) < 0) {
        ddl_topo_env_clear(&place);
        kill((pid_t)wpid, SIGKILL);
        return -1;
    }
    FILE *f = fdopen((int)efd, "w");
    int bad = !f;
#define LINE(name, fmt, val, keep)                                                          \
    do {                                                                                   \
        snprintf(v, sizeof v, fmt, val);                                                   \
        bad |= f && env_line(f, name, v, keep) < 0;                                         \
    } while (0)
    LINE("DDL_RANK", "%ld", b.rank, 0);
    LINE("DDL_SIZE", "%ld", b.size, 0);
    LINE("DDL_LOCAL_RANK", "%ld", b.local_rank, 0);
    LINE("DDL_LOCAL_SIZE", "%ld", b.local_size, 0);
    LINE("DDL_NODE_ID", "%ld", b.node_id, 0);
    LINE("DDL_NNODES", "%ld", b.nnodes, 0);
    LINE("DDL_GENERATION", "%d", 0, 0);
    LINE("RANK", "%ld", b.rank, 0);
    LINE("WORLD_SIZE", "%ld", b.size, 0);
    LINE("LOCAL_RANK", "%ld", b.local_rank, 0);
    LINE("LOCAL_WORLD_SIZE", "%ld", b.local_size, 0);
    LINE("NODE_RANK", "%ld", b.node_id, 0);
#undef LINE
    if (f)
        slurm_place(&b, (pid_t)wpid, &place, f);
    ddl_topo_env_clear(&place);
    bad |= f && (env_line(f, "DDL_STEP_ID", b.step, 0) < 0 ||
                 env_line(f, "MASTER_ADDR", b.master_addr, 1) < 0 ||
                 env_line(f, "MASTER_PORT", b.master_port, 1) < 0 ||
                 env_line(f, "DDL_AGENT_SOCK", b.sock, 0) < 0 || fputs(".\n", f) < 0);
    if ((f && fclose(f) != 0) || bad) {
        ddl_error("rank %ld: cannot hand the environment to the worker: %m", b.rank);
        kill((pid_t)wpid, SIGKILL);
        return -1;
    }
    return (pid_t)wpid;
}

/* wait_agent: the node's first task stays until the node's agent has
 * served every local rank, passing on signals meanwhile. */
static void wait_agent(pid_t agent, int sfd)
{
    for (;;) {
        pid_t w = waitpid(agent, NULL, WNOHANG);
        if (w == agent || (w < 0 && errno == ECHILD)) /* ended, or already reaped */
            return;
        struct pollfd p = {.fd = sfd, .events = POLLIN};
        if (poll(&p, 1, 1000) > 0) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == sizeof si && si.ssi_signo != SIGCHLD)
                kill(agent, (int)si.ssi_signo);
        }
    }
}

int main(int argc, char **argv)
{
    beats_t beats = {.fd = -1};
    sigset_t mask, none;
    int first = 1;
    long grace_ms = 5000;
    ddl_log_init("ddl-launch", DDL_LOG_WARN);

    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("ddl-launch %s\n", DDL_VERSION_STRING);
        return 0;
    }
    int slurm = argc == 4 && strcmp(argv[1], "--slurm") == 0;
    pid_t agent = 0;
    long efd_arg;
    if (slurm && ddl_parse_long(argv[3], 3, 1 << 20, &efd_arg) == 0) {
        /* slurmstepd's descriptors have no business here */
        if (efd_arg > 3)
            close_range(3, (unsigned)efd_arg - 1, 0);
        close_range((unsigned)efd_arg + 1, ~0U, 0);
    }
    if (argc > 1 && strcmp(argv[1], "--") == 0)
        first = 2;
    if (!slurm && (first >= argc || (first == 1 && argv[1][0] == '-'))) {
        fprintf(stderr, "usage: ddl-launch [--] PROG [ARGS...]\n"
                        "(the per-rank supervisor; started by ddlrun or the ddl SPANK plugin)\n");
        return 2;
    }
    const char *g = getenv("DDL_GRACE_MS");
    if (g && ddl_parse_long(g, 0, 600000, &grace_ms) < 0) {
        ddl_error("DDL_GRACE_MS='%s' is not a number of milliseconds (0-600000)", g);
        return 2;
    }
    const char *hv = getenv("DDL_HANG_TIMEOUT_MS");
    if (hv && *hv && ddl_parse_long(hv, 0, 86400000, &beats.timeout_ms) < 0) {
        ddl_error("DDL_HANG_TIMEOUT_MS='%s' is not a number of milliseconds (0-86400000)", hv);
        return 2;
    }

    /* Dispositions survive exec: slurmstepd's task may ignore SIGCHLD, and
     * then no child's end would ever be seen. */
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGQUIT);
    sigaddset(&mask, SIGUSR1);
    sigaddset(&mask, SIGUSR2);
    sigaddset(&mask, SIGCONT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
    if (sfd < 0) {
        ddl_error("signalfd: %m");
        return 1;
    }
    pid_t parent = getppid();
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        raise(SIGTERM); /* parent died before prctl: handled below like a real one */

    pid_t wpid;
    if (slurm) {
        if ((wpid = slurm_start(argv[2], argv[3], &agent)) < 0) {
            if (agent > 0) {
                kill(agent, SIGTERM);
                waitpid(agent, NULL, 0);
            }
            return 1;
        }
        goto supervise;
    }
    if (register_rank(REGISTER_TIMEOUT_MS) < 0)
        return 1;

    int beat_pipe[2] = {-1, -1};
    if (beats.timeout_ms > 0 && pipe2(beat_pipe, O_CLOEXEC) < 0) {
        ddl_warn("rank %ld: pipe for heartbeats: %m; hangs will not be detected", rank);
        beats.timeout_ms = 0;
    }
    wpid = fork();
    if (wpid < 0) {
        ddl_error("rank %ld: fork: %m", rank);
        return 1;
    }
    if (wpid == 0) {
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1)
            _exit(137);
        if (beat_pipe[1] >= 0) { /* the write end crosses exec; the read end not */
            char fdtext[16];
            fcntl(beat_pipe[1], F_SETFD, 0);
            snprintf(fdtext, sizeof fdtext, "%d", beat_pipe[1]);
            setenv("DDL_HEARTBEAT_FD", fdtext, 1);
        }
        execvp(argv[first], argv + first);
        int e = errno;
        fprintf(stderr, "ddl-launch: cannot execute '%s': %s\n", argv[first], strerror(e));
        _exit(e == ENOENT ? 127 : 126);
    }
    if (beat_pipe[1] >= 0) {
        close(beat_pipe[1]);
        beats.fd = beat_pipe[0];
        ddl_fd_set_nonblock(beats.fd, 1);
    }
supervise:
    tell(DDL_RANK_RUNNING, wpid, 0);

    int64_t kill_at = 0;
    int status = 0, hung = 0;
    for (;;) {
        int timeout = -1;
        if (kill_at) {
            int64_t left = kill_at - ddl_now_ms();
            timeout = left < 0 ? 0 : (int)left;
        }
        int64_t hang_at = beats.fd >= 0 && beats.last_ms && !hung
                              ? beats.last_ms + beats.timeout_ms : 0;
        if (hang_at) {
            int64_t left = hang_at - ddl_now_ms();
            int t = left < 0 ? 0 : (int)left;
            timeout = timeout < 0 || t < timeout ? t : timeout;
        }
        struct pollfd p[2] = {{.fd = sfd, .events = POLLIN}, {.fd = beats.fd, .events = POLLIN}};
        int rc = poll(p, beats.fd >= 0 ? 2 : 1, timeout);
        if (rc < 0 && errno != EINTR) {
            ddl_error("poll: %m");
            kill(wpid, SIGKILL);
        }
        if (rc > 0 && beats.fd >= 0 && p[1].revents) {
            beats_read(&beats);
            if (rc == 1 && !p[0].revents)
                continue;
        }
        if (hang_at && ddl_now_ms() >= hang_at && !hung) {
            beats_read(&beats); /* a record may have come at the last moment */
            if (beats.fd >= 0 && ddl_now_ms() >= beats.last_ms + beats.timeout_ms) {
                report_hang(&beats, wpid);
                kill(wpid, SIGKILL);
                hung = 1;
            }
            continue;
        }
        if (rc == 0 && kill_at) {
            ddl_warn("rank %ld: worker %d still running %ld ms after SIGTERM: sending SIGKILL",
                     rank, (int)wpid, grace_ms);
            kill(wpid, SIGKILL);
            kill_at = 0;
            continue;
        }
        struct signalfd_siginfo si;
        if (rc > 0 && p[0].revents && read(sfd, &si, sizeof si) == sizeof si) {
            int sig = (int)si.ssi_signo;
            if (sig != SIGCHLD) {
                kill(wpid, sig);
                if ((sig == SIGTERM || sig == SIGINT || sig == SIGHUP) && !kill_at)
                    kill_at = ddl_now_ms() + grace_ms;
            }
        }
        /* the worker, or an adopted orphan of it (reaped, so that none
         * piles up as a zombie), or the node's agent (wait_agent copes) */
        pid_t w;
        int st, done = 0;
        while ((w = waitpid(-1, &st, WNOHANG)) > 0)
            if (w == wpid) {
                status = st;
                done = 1;
            }
        if (done)
            break;
    }
    ddl_kill_adopted(agent); /* the worker's leftovers; the node's agent stays */
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && !hung;
    tell(ok ? DDL_RANK_EXITED : DDL_RANK_FAILED, wpid, status);
    if (beats.fd >= 0)
        close(beats.fd);
    if (agent_fd >= 0)
        close(agent_fd);
    if (agent > 0)
        wait_agent(agent, sfd);
    close(sfd);
    if (hung)
        return DDL_EXIT_HANG;
    die_like(status);
}
