/* launch.c: ddl-launch, the per-rank supervisor.
 *
 *   ddl-launch [--] PROG [ARGS...]
 *   ddl-launch --slurm WORKER-PID ENV-FD      (exec'd by spank_ddl.so)
 *   ddl-launch --node [--] PROG [ARGS...]     (ddlrun)
 *
 * Under Slurm the plugin has already forked the worker, which waits inside
 * the plugin for its environment: ddl-launch bootstraps (slurm_boot.c),
 * registers with the node's agent, then writes the worker's variables to
 * ENV-FD as NAME=VALUE lines ended by a "." line, and supervises the worker
 * as below.  The node's first task also waits, after its own worker, for
 * the node's agent to finish serving the other local ranks.
 *
 * With --node (a task of `ddlrun`, of an emulated node with --emulate) it
 * does the same as under Slurm, but its identity comes from ddlrun's variables
 * (ddl_node_boot), the node's agent is ddlrun's, and it starts the worker
 * itself (a spare's only when its node is given ranks).
 *
 * It registers its rank with the node's ddl-agent (DDL_AGENT_SOCK,
 * DDL_RANK), starts PROG as its worker child, forwards signals to it, tells
 * the agent when the worker runs and how it ended, and finally ends the same
 * way as the worker: the same exit status, or killed by the same signal, so
 * that ddlrun (and later slurmstepd) sees the worker's fate.  On SIGTERM,
 * SIGINT or SIGHUP the worker gets the signal and DDL_GRACE_MS (default
 * 5000) to exit before SIGKILL; under an agent that decides (--slurm,
 * --node), SIGTERM, SIGUSR1 and SIGUSR2 instead ask the agents to stop the
 * step at a step boundary (agent/drain.c: the worker, signalled by Slurm or
 * ddlrun itself, checkpoints and exits with 94).  If ddl-launch's parent
 * dies it behaves as if sent SIGTERM, without the stop; if ddl-launch
 * itself is killed, the worker gets SIGKILL.
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
 * DDL_EXIT_HANG (92); under an agent (--node, --slurm) it reports the hang
 * as the failure (class worker-hang) instead.  The same channel is made
 * without a hang timeout when the agents detect stragglers
 * (DDL_STRAGGLER_PCT > 0, the default): the beats' step timing goes on to
 * the agent in PROGRESS.
 *
 * The supervision runs on common/evloop.h (see "The supervision loop").
 * About 1100 lines, over the usual 1000: the three modes share one state
 * (the worker, the agent's link, the heartbeats, the world) kept in this
 * file's statics; moving the supervision loop to a file of its own means
 * passing that state explicitly first.
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "beat.h"
#include "ddl_limits.h"
#include "ddl_version.h"
#include "env.h"
#include "evloop.h"
#include "log.h"
#include "proto.h"
#include "rank_env.h"
#include "respawn.h"
#include "slurm_boot.h"
#include "topo.h"
#include "sock.h"
#include "util.h"

#define REGISTER_TIMEOUT_MS 10000
#define SLURM_REGISTER_TIMEOUT_MS 60000 /* the node's first task may still be booting */

static int agent_fd = -1;
static long rank = -1;
static uint32_t cur_gen;             /* the worker's generation */
static char beat_path[PATH_MAX];     /* Slurm: the first worker's heartbeat FIFO, "" none */
static char hang_text[400];          /* the last hang report, for the agent */
static int node_mode;                /* --node: ddlrun's task (and --rejoin) */
static int rejoin_mode;              /* --rejoin: a task on a node restarted after a loss */
static pid_t launch_parent;          /* slurmstepd or ddlrun; it changes when it dies */
static int stop_asked;               /* a stop signal was passed on to the agent */
static ddl_spawn_t node_spawn;       /* --node: how to start the worker */

/* stop_signal: SIGTERM (Slurm's time limit, preemption, scancel; ddlrun's
 * SIGTERM), SIGUSR1 and SIGUSR2 (sbatch --signal) ask a supervised step to
 * stop at a step boundary (agent/drain.c) instead of killing the worker. */
static int stop_signal(int sig)
{
    return sig == SIGTERM || sig == SIGUSR1 || sig == SIGUSR2;
}

/* parent_sig: the signal the kernel sends when our parent's thread that
 * forked us ends (PR_SET_PDEATHSIG).  Not SIGTERM: that thread may end
 * while its process lives on, and when slurmstepd is killed its threads end
 * one by one, so getppid() can still name it when the signal comes; as a
 * SIGTERM it looked like Slurm's own stop signal, and a crashed node's task
 * asked the agents to stop the whole step instead of being lost with its
 * node.  A real signal, not a stop request: handled in sup_round. */
static int parent_sig(void)
{
    return SIGRTMIN + 1;
}

/* Watching the worker's heartbeats (ddl_beat_rec_t, from libddl). */
typedef struct {
    int fd;           /* read end, -1: not watching */
    int on;           /* a channel is made: a hang timeout, or straggler detection */
    long timeout_ms;  /* DDL_HANG_TIMEOUT_MS, 0: off */
    int64_t last_ms;  /* when the last record came, 0: none yet */
    ddl_beat_rec_t last;
} beats_t;

static beats_t beats = {.fd = -1};

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

/* The last heartbeat record passed on to the agent (PROGRESS), for its
 * metrics, `status` and straggler detection: at most four a second. */
#define PROGRESS_EVERY_MS 250
static struct {
    int64_t sent_ms;
    ddl_beat_rec_t sent;
    int pending; /* a newer record waits for its turn */
} progress = {.sent = {.step = -1}};

/* progress_send: tell the agent the worker's last heartbeat when it is new
 * and the last PROGRESS is at least PROGRESS_EVERY_MS old, or now_or_never
 * (the worker has ended). */
static void progress_send(beats_t *b, int now_or_never)
{
    if (agent_fd < 0 || !b->last_ms ||
        (b->last.collectives == progress.sent.collectives && b->last.step == progress.sent.step)) {
        progress.pending = 0;
        return;
    }
    int64_t now = ddl_now_ms();
    if (progress.sent_ms && now - progress.sent_ms < PROGRESS_EVERY_MS && !now_or_never) {
        progress.pending = 1;
        return;
    }
    ddl_msg_t m = {.type = DDL_MSG_PROGRESS};
    m.u.progress.rank = (uint32_t)rank;
    m.u.progress.gen = cur_gen;
    m.u.progress.step = b->last.step;
    m.u.progress.collectives = b->last.collectives;
    m.u.progress.at_ns = b->last.at_ns;
    m.u.progress.wait_ns = b->last.wait_ns;
    if (ddl_proto_send(agent_fd, &m) < 0)
        ddl_debug("rank %ld: cannot report progress to the agent: %m", rank);
    progress.sent = b->last;
    progress.sent_ms = now;
    progress.pending = 0;
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
    snprintf(hang_text, sizeof hang_text, "worker %d hung: nothing heard for %.1f s (hang "
             "timeout %.1f s); last beat after %llu collectives%s; now %s (state %c, wait "
             "channel %s); killed",
             (int)wpid, (double)(ddl_now_ms() - b->last_ms) / 1000.0, b->timeout_ms / 1000.0,
             (unsigned long long)b->last.collectives, step, what, state,
             wchan[0] && strcmp(wchan, "0") ? wchan : "none");
    ddl_error("rank %ld: %s", rank, hang_text);
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
    m.u.rank_state.gen = cur_gen;
    if (ddl_proto_send(agent_fd, &m) < 0)
        ddl_debug("rank %ld: cannot report to the agent: %m", rank);
}

static int register_rank(int timeout_ms)
{
    const char *sock = ddl_env_str(DDLENV_DDL_AGENT_SOCK);
    ddl_error_t err;
    ddl_msg_t m;

    if (!sock)
        return 0; /* no agent: plain supervision */
    if (!ddl_env_str(DDLENV_DDL_RANK) || ddl_env_long(DDLENV_DDL_RANK, &rank, &err) < 0) {
        ddl_error("%s", ddl_env_str(DDLENV_DDL_RANK) ? err.text
                                                     : "DDL_RANK is not set, but DDL_AGENT_SOCK is");
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
    const char *cpus = ddl_env_str(DDLENV_DDL_BIND_CPUS), *gpu = ddl_env_str(DDLENV_DDL_BIND_GPU),
               *nic = ddl_env_str(DDLENV_DDL_BIND_NIC);
    snprintf(m.u.reg.cpus, sizeof m.u.reg.cpus, "%s", cpus ? cpus : "");
    snprintf(m.u.reg.gpu, sizeof m.u.reg.gpu, "%s", gpu ? gpu : "");
    snprintf(m.u.reg.nic, sizeof m.u.reg.nic, "%s", nic ? nic : "");
    long restarts = 0; /* ddlrun --restarts: this generation's count, for status */
    if (ddl_env_long(DDLENV_DDL_RESTART_COUNT, &restarts, &err) > 0)
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
    const char *bind = ddl_env_str(DDLENV_DDL_BIND);
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

/* The world of the current generation, as this task sees it (Slurm). */
static struct {
    ddl_slurm_boot_t b;   /* the step: slots, nodes, agent, master */
    long rank, size;      /* this task's world rank (-1: idle, a spare) and the world's size */
    long node_pos, nodes; /* its node's position in the world, nodes in the world */
    int efd;              /* the waiting first worker's environment pipe, -1: released */
    ddl_topo_env_t place; /* its placement, applied when it is released */
} world = {.efd = -1};

/* world_set: this task's place in a world given per node (node_rank, as in
 * DDL_MSG_GENERATION; NULL: the first generation, the last --ddl-spares
 * nodes idle, and a node started again after a loss). */
static void world_set(const uint32_t *node_rank)
{
    const ddl_slurm_boot_t *b = &world.b;
    long tpn = b->local_size, active = 0, pos = -1;
    for (long n = 0; n < b->nnodes; n++) {
        uint32_t r = node_rank ? node_rank[n] : n < b->nnodes - b->spares ? (uint32_t)n
                                                                          : DDL_NODE_IDLE;
        if (!node_rank && n == b->node_id && b->restarted)
            r = DDL_NODE_IDLE; /* back after a loss: a spare until the world grows onto it */
        active += r != DDL_NODE_IDLE;
        if (n == b->node_id)
            pos = r == DDL_NODE_IDLE ? -1 : (long)r;
    }
    if (!b->spares && !b->min_nodes) { /* no map: ranks are Slurm's */
        world.rank = b->rank;
        world.size = b->size;
        world.node_pos = b->node_id;
        world.nodes = b->nnodes;
        return;
    }
    world.node_pos = pos;
    world.nodes = active;
    world.size = active * tpn;
    world.rank = pos < 0 ? -1 : pos * tpn + b->local_rank;
}

/* world_env: the variables that say where a worker is in the world
 * (common/rank_env.c) into v; with full, also its step, agent, rendezvous
 * and heartbeat FIFO (for the first worker of a Slurm task, which has none
 * of ddl's variables yet).  0, or -1 (reported). */
static int world_env(uint32_t gen, int full, ddl_rank_env_vars_t *v)
{
    const ddl_slurm_boot_t *b = &world.b;
    ddl_rank_env_t e = DDL_RANK_ENV_INIT;
    ddl_error_t err;
    e.rank = world.rank;
    e.size = world.size;
    e.local_rank = b->local_rank;
    e.local_size = b->local_size;
    e.node_id = world.node_pos;
    e.nnodes = world.nodes;
    e.gen = gen;
    if (full) {
        e.step = b->step;
        e.agent_sock = b->sock;
        e.master_addr = b->master_addr[0] ? b->master_addr : NULL;
        e.master_port = b->master_port[0] ? b->master_port : NULL;
        e.heartbeat_path = beat_path[0] ? beat_path : NULL;
    }
    if (ddl_rank_env_build(&e, v, &err) < 0) {
        ddl_error("rank %ld: the worker's environment: %s", rank, err.text);
        return -1;
    }
    return 0;
}

/* release: hand the waiting first worker its environment (generation gen);
 * 0, or -1 (reported, worker killed). */
static int release(pid_t wpid, uint32_t gen)
{
    const ddl_slurm_boot_t *b = &world.b;
    ddl_rank_env_vars_t vars;
    FILE *f = world_env(gen, 1, &vars) < 0 ? NULL : fdopen(world.efd, "w");
    int bad = !f;
    if (!f)
        close(world.efd);
    world.efd = -1;
    bad |= f && ddl_rank_env_write(&vars, f) < 0;
    if (f)
        slurm_place(b, wpid, &world.place, f);
    ddl_topo_env_clear(&world.place);
    bad |= f && fputs(".\n", f) < 0;
    if ((f && fclose(f) != 0) || bad) {
        ddl_error("rank %ld: cannot hand the environment to the worker: %m", rank);
        kill(wpid, SIGKILL);
        return -1;
    }
    return 0;
}

/* slurm_start: bootstrap, register, release the waiting worker with its
 * environment (a spare's stays waiting: *idle set).  Returns the worker's
 * pid, or -1 (reported; worker killed). */
static pid_t slurm_start(const char *pid_arg, const char *fd_arg, pid_t *agent, int *idle)
{
    long wpid, efd;
    ddl_slurm_boot_t *b = &world.b;
    ddl_error_t err;
    char v[32];
    if (ddl_parse_long(pid_arg, 1, 1L << 22, &wpid) < 0 ||
        ddl_parse_long(fd_arg, 3, 1 << 20, &efd) < 0) {
        ddl_error("--slurm: '%s' '%s' are not a worker pid and a descriptor (this mode is for "
                  "the ddl SPANK plugin)", pid_arg, fd_arg);
        return -1;
    }
    ddl_fd_set_cloexec((int)efd); /* the agent must not hold the worker's pipe open */
    world.efd = (int)efd;
    if (ddl_slurm_boot(b, &err) < 0) {
        ddl_error("task %s: %s", getenv("SLURM_PROCID") ? getenv("SLURM_PROCID") : "?", err.text);
        kill((pid_t)wpid, SIGKILL);
        return -1;
    }
    *agent = b->agent;
    setenv("DDL_AGENT_SOCK", b->sock, 1);
    snprintf(v, sizeof v, "%ld", b->rank);
    setenv("DDL_RANK", v, 1); /* the task (slot) the agent knows this supervisor by */
    world_set(NULL);
    if (slurm_plan(b, &world.place) < 0 || register_rank(SLURM_REGISTER_TIMEOUT_MS) < 0) {
        ddl_topo_env_clear(&world.place);
        kill((pid_t)wpid, SIGKILL);
        return -1;
    }
    if (beats.on) {
        /* The worker is already forked: it gets a FIFO by name, not a pipe.
         * Opened read-write here, so that it never reads as ended. */
        size_t n = strlen(b->sock);
        if (n > 5 && snprintf(beat_path, sizeof beat_path, "%.*s.rank%ld.beat", (int)(n - 5),
                              b->sock, b->rank) < (int)sizeof beat_path &&
            (unlink(beat_path), mkfifo(beat_path, 0600)) == 0 &&
            (beats.fd = open(beat_path, O_RDWR | O_NONBLOCK | O_CLOEXEC)) >= 0) {
            ddl_debug("rank %ld: heartbeats on %s", b->rank, beat_path);
        } else {
            ddl_warn("rank %ld: cannot make the heartbeat FIFO %s: %m; hangs will not be "
                     "detected", b->rank, beat_path);
            if (beat_path[0])
                unlink(beat_path);
            beat_path[0] = '\0';
            beats.timeout_ms = 0;
        }
    }
    *idle = world.rank < 0;
    if (*idle)
        ddl_debug("task %ld: on spare node %ld, waiting", b->rank, b->node_id);
    else if (release((pid_t)wpid, 0) < 0)
        return -1;
    return (pid_t)wpid;
}

/* node_start: --node: the task's identity from ddlrun's variables, its
 * registration with its node's agent, and how to start the worker; *idle
 * when the task is on a spare node. */
static int node_start(char *const prog[], int *idle)
{
    ddl_error_t err;
    node_mode = 1;
    if (ddl_node_boot(&world.b, &err) < 0) {
        ddl_error("task %s: %s", getenv("DDL_RANK") ? getenv("DDL_RANK") : "?", err.text);
        return -1;
    }
    world_set(NULL);
    if (register_rank(REGISTER_TIMEOUT_MS) < 0)
        return -1;
    if (ddl_spawn_self(prog, &node_spawn, &err) < 0) {
        ddl_error("rank %ld: %s", rank, err.text);
        return -1;
    }
    *idle = world.rank < 0;
    return 0;
}

/* on_wake: a timer that only wakes the loop: its prepare hook does the work. */
static void on_wake(ddl_evloop_t *loop, ddl_ev_timer_t *t, void *arg)
{
    (void)loop;
    (void)t;
    (void)arg;
}

/* wait_agent: the node's first task stays until the node's agent has
 * served every local rank, passing on signals meanwhile (a loop of its
 * own: the signalfd, a look at the agent once a second). */
static void pass_signal(ddl_evloop_t *loop, ddl_ev_fd_t *w, int fd, short re, void *arg)
{
    struct signalfd_siginfo si;
    (void)loop;
    (void)w;
    (void)re;
    /* Slurm signals the agent itself (it is a process of the step): a stop
     * signal passed on too would be a second request */
    if (read(fd, &si, sizeof si) == sizeof si && si.ssi_signo != SIGCHLD &&
        !stop_signal((int)si.ssi_signo) && (int)si.ssi_signo != parent_sig())
        kill(*(pid_t *)arg, (int)si.ssi_signo);
}

static void agent_gone(ddl_evloop_t *loop, void *arg)
{
    pid_t agent = *(pid_t *)arg;
    pid_t w = waitpid(agent, NULL, WNOHANG);
    if (w == agent || (w < 0 && errno == ECHILD)) /* ended, or already reaped */
        ddl_evloop_stop(loop);
}

static void wait_agent(pid_t agent, int sfd)
{
    ddl_evloop_t *loop = ddl_evloop_new();
    ddl_ev_timer_t *tick = loop ? ddl_ev_timer_new(loop, on_wake, NULL) : NULL;
    if (!tick || !ddl_ev_fd_add(loop, sfd, POLLIN, pass_signal, &agent)) {
        ddl_evloop_free(loop);
        waitpid(agent, NULL, 0); /* out of memory: signals are not passed on */
        return;
    }
    ddl_ev_timer_arm(tick, 1000, 1000);
    ddl_evloop_set_prepare(loop, agent_gone, &agent);
    while (ddl_evloop_run(loop) < 0) /* poll failed: look again in a second */
        poll(NULL, 0, 1000);
    ddl_evloop_free(loop);
}

/* Under Slurm, the worker's end is not the task's: the supervisor reports it
 * and waits for the leader agent's decision (DDL_MSG_GENERATION). */
typedef struct {
    pid_t wpid;          /* the worker, 0 once it ended */
    pid_t last_pid;      /* the last worker started */
    int status;          /* how it ended */
    int hung;            /* it was killed as hung */
    int64_t kill_at;     /* SIGKILL it then (grace after SIGTERM), 0: no */
    int signalled;       /* Slurm (or a person) signalled the task: end with the worker */
    int decided;         /* a decision came: ddl_gen_action_t in action */
    uint8_t action;
    int32_t code;
    uint32_t next_gen;
    int64_t respawn_at;  /* RESTART: start the worker then, 0: not yet set */
    ddl_spawn_t spawn;   /* how the worker was started (captured while it runs) */
    int idle;            /* a spare's task: the worker waits for its environment */
    int warm;            /* the worker's libddl keeps it on a new generation (WARM) */
    uint32_t *node_rank; /* the decision's new world (RESTART), NULL: unchanged */
    char master[64];     /* its MASTER_ADDR (the node of rank 0), "": unchanged */
    int captured;        /* 1 captured, -1 cannot be */
    int capture_tries;
    char why[600];       /* why not */
    /* the loop (supervise) */
    int wait_decision;   /* the agent decides what follows the worker's end */
    long grace_ms;
    pid_t agent;         /* the node's agent, a child of this task (Slurm), 0: none */
    int rounds;
    int sig;             /* a signal read this round, 0: none */
    int agent_ready;     /* the agent's link is readable */
    ddl_ev_fd_t *agent_ev, *beats_ev;
    int beats_watched;   /* the fd beats_ev watches */
    ddl_ev_timer_t *kill_t, *hang_t, *wake_t;
} sup_t;

/* capture: once the first worker runs the user's program, record its start. */
static void capture(sup_t *s)
{
    ddl_error_t err;
    if (s->captured || !s->wpid)
        return;
    int done = ddl_spawn_exec_done(s->wpid, getppid());
    if (done == 0)
        return;
    if (done > 0 && ddl_spawn_capture(s->wpid, &s->spawn, &err) < 0 && kill(s->wpid, 0) == 0 &&
        ++s->capture_tries < 50)
        return; /* read in the middle of another exec (a wrapper script): try again */
    if (done < 0 || !s->spawn.argv) {
        s->captured = -1;
        snprintf(s->why, sizeof s->why, "%s", done < 0 ? "it ended before it could be recorded"
                                                       : err.text);
        ddl_debug("rank %ld: cannot record how the worker was started: %s", rank, s->why);
        return;
    }
    s->captured = 1;
    ddl_debug("rank %ld: worker %d runs %s", rank, (int)s->wpid, s->spawn.exe);
}

/* report_end: the worker ended by itself: tell the agent what it was. */
static void report_end(sup_t *s)
{
    char how[128], text[512];
    if (WIFEXITED(s->status) && WEXITSTATUS(s->status) == 0 && !s->hung) {
        tell(DDL_RANK_EXITED, 0, s->status);
        return;
    }
    ddl_msg_t m = {.type = DDL_MSG_FAILURE};
    m.u.failure.gen = cur_gen;
    m.u.failure.rank = (uint32_t)rank;
    int unborn = s->captured != 1 && cur_gen == 0; /* never seen running the program */
    m.u.failure.cls = s->hung                  ? DDL_FAIL_WORKER_HANG
                      : unborn                 ? DDL_FAIL_WORKER_START
                      : WIFSIGNALED(s->status) ? DDL_FAIL_WORKER_SIGNAL
                                               : DDL_FAIL_WORKER_EXIT;
    m.u.failure.wstatus = s->status;
    if (s->hung)
        snprintf(text, sizeof text, "%s", hang_text);
    else
        snprintf(text, sizeof text, "worker %d %s%s", (int)s->last_pid,
                 ddl_describe_wait_status(s->status, how, sizeof how),
                 unborn ? " before it was seen running the program" : "");
    m.u.failure.text = text;
    if (ddl_proto_send(agent_fd, &m) < 0)
        ddl_warn("rank %ld: cannot report the failure to the agent: %m", rank);
}

static void new_master(sup_t *s);

/* take_place: this task takes its place in the decided generation without
 * a new worker (world_set(s->node_rank) done): the map is used up, the
 * generation's MASTER_ADDR and number are this task's, the decision is
 * consumed. */
static void take_place(sup_t *s)
{
    free(s->node_rank);
    s->node_rank = NULL;
    new_master(s);
    cur_gen = s->next_gen;
    s->decided = 0;
}

/* keep_warm: a RESTART decision (s->next_gen, s->node_rank) for a worker
 * that opted in to warm restarts and still runs: it stays, and its libddl
 * joins the new generation itself (ddl_rejoin).  This task's place in the
 * world moves to the new generation as a restart would set it.  0 when the
 * worker is to be restarted cold instead (not opted in, ended, hung, being
 * killed, or without a place in the new world). */
static int keep_warm(sup_t *s)
{
    if (!s->warm || !s->wpid || s->idle || s->hung || s->kill_at || s->signalled)
        return 0;
    long old_rank = world.rank;
    if (s->node_rank)
        world_set(s->node_rank);
    if (world.rank < 0) { /* its node holds no rank any more: cold, as before */
        ddl_info("rank %ld: no place in generation %u: the worker is stopped", old_rank,
                 s->next_gen);
        return 0;
    }
    take_place(s);
    s->respawn_at = 0;
    ddl_warn("task %ld: worker %d kept for a warm restart as rank %ld of %ld (generation %u)",
             rank, (int)s->wpid, world.rank, world.size, cur_gen);
    tell(DDL_RANK_RUNNING, s->wpid, 0);
    return 1;
}

/* supersedes: GENERATION g replaces this task's decision not yet carried
 * out: a restart still waiting (its backoff, a spare's activation), and g
 * a later generation's or a stop.  A node taken back after a loss gets the
 * leader's current generation while its tasks wait to restart into an
 * older one: that restart would join a generation that is over. */
static int supersedes(const sup_t *s, const ddl_msg_t *m)
{
    const typeof(m->u.generation) *g = &m->u.generation;
    return s->decided && s->action == DDL_GEN_RESTART &&
           (g->gen > s->next_gen || g->action != DDL_GEN_RESTART);
}

/* agent_msg: read what the agent says; -1 when the link is gone. */
static int agent_msg(sup_t *s, int grace_ms)
{
    ddl_msg_t m;
    ddl_error_t err;
    if (ddl_proto_recv(agent_fd, &m, 1000, &err) < 0)
        return -1;
    if (m.type == DDL_MSG_GENERATION && (!s->decided || supersedes(s, &m))) {
        typeof(m.u.generation) *g = &m.u.generation;
        if (s->decided)
            ddl_info("rank %ld: generation %u's decision replaces the restart into generation %u "
                     "not yet carried out", rank, g->gen, s->next_gen);
        s->decided = 1;
        s->action = g->action;
        s->code = g->code;
        s->next_gen = g->gen;
        s->respawn_at = 0;
        free(s->node_rank);
        s->node_rank = NULL;
        if (g->action == DDL_GEN_RESTART) {
            s->respawn_at = ddl_now_ms() + g->delay_ms; /* counted from the decision */
            if (g->nnodes == (uint32_t)world.b.nnodes && g->node_rank) {
                s->node_rank = g->node_rank; /* taken */
                g->node_rank = NULL;
            }
            snprintf(s->master, sizeof s->master, "%s", g->master ? g->master : "");
        }
        ddl_debug("rank %ld: the agent says %s (generation %u)", rank,
                  g->action == DDL_GEN_RESTART ? "restart" : g->action == DDL_GEN_STOP ? "stop"
                                                                                      : "finish",
                  g->gen);
        if (g->action == DDL_GEN_RESTART && keep_warm(s))
            ; /* the worker rejoins the new generation itself */
        else if (s->wpid && s->idle && g->action != DDL_GEN_RESTART) {
            kill(s->wpid, SIGKILL); /* never released: nothing of the user's runs yet */
        } else if (s->wpid && !s->idle && g->action != DDL_GEN_FINISH) {
            kill(s->wpid, SIGTERM);
            s->kill_at = ddl_now_ms() + grace_ms;
        }
    } else if (m.type == DDL_MSG_WARM) {
        if (s->wpid && !s->idle && m.u.warm.on && !s->warm)
            ddl_debug("rank %ld: worker %d opted in to warm restarts (generation %u)", rank,
                      (int)s->wpid, m.u.warm.gen);
        else if (s->wpid && !s->idle && !m.u.warm.on && s->warm)
            ddl_warn("rank %ld: worker %d withdrew from warm restarts (generation %u): it is "
                     "restarted cold", rank, (int)s->wpid, m.u.warm.gen);
        s->warm = s->wpid && !s->idle && m.u.warm.on;
    } else if (m.type == DDL_MSG_ERROR) {
        ddl_warn("rank %ld: the agent says: %s", rank, m.u.error.text);
    }
    ddl_msg_clear(&m);
    return 0;
}

/* ask_stop: pass a stop signal on to the agent (once).  The worker is not
 * signalled from here: Slurm (or ddlrun) signals every process of the step,
 * the worker included, and its libddl (or the program) takes it from
 * there; the agents decide when it ends. */
static void ask_stop(int sig)
{
    char name[32], why[160];
    if (stop_asked || agent_fd < 0)
        return;
    stop_asked = 1;
    snprintf(why, sizeof why, "%s to task %ld", ddl_signal_name(sig, name, sizeof name), rank);
    ddl_debug("rank %ld: %s: asking the agents to stop the step", rank, why);
    ddl_msg_t m = {.type = DDL_MSG_STOP_REQ};
    m.u.stop_req.signo = sig;
    m.u.stop_req.why = why;
    if (ddl_proto_send(agent_fd, &m) < 0)
        ddl_warn("rank %ld: cannot pass %s on to the agent: %m", rank, name);
}

/* new_master: a decision moved rank 0 to another node: MASTER_ADDR names
 * it from now on (unless the user set MASTER_ADDR: theirs stays). */
static void new_master(sup_t *s)
{
    if (s->master[0] && !getenv("MASTER_ADDR") &&
        strcmp(s->master, world.b.master_addr) != 0) {
        ddl_debug("task %ld: MASTER_ADDR is now %s (rank 0's node)", rank, s->master);
        snprintf(world.b.master_addr, sizeof world.b.master_addr, "%s", s->master);
    }
    s->master[0] = '\0';
}

/* has_var: whether env holds the NAME=VALUE line var exactly. */
static int has_var(char *const *env, const char *var)
{
    for (; env && *env; env++)
        if (strcmp(*env, var) == 0)
            return 1;
    return 0;
}

/* restart: the worker again, in generation s->next_gen (--node: also its
 * first start, generation 0). */
static int restart(sup_t *s, beats_t *b)
{
    ddl_rank_env_vars_t vars;
    char *set[DDL_RANK_ENV_MAX + 5], fdtext[40], mtext[80], stext[80], atext[PATH_MAX + 20];
    ddl_error_t err;
    int p[2] = {-1, -1};
    if (s->captured != 1) {
        ddl_error("rank %ld: cannot restart the worker: how it was started is unknown (%s)",
                  rank, s->captured ? s->why : "it never ran the program");
        return -1;
    }
    if (b->fd >= 0) {
        close(b->fd);
        b->fd = -1;
    }
    if (beat_path[0]) {
        unlink(beat_path);
        beat_path[0] = '\0';
    }
    if (b->on && pipe2(p, O_CLOEXEC) < 0)
        ddl_warn("rank %ld: pipe for heartbeats: %m; hangs will not be detected", rank);
    if (s->node_rank)
        world_set(s->node_rank);
    new_master(s);
    if (world_env(s->next_gen, 0, &vars) < 0) {
        if (p[0] >= 0) {
            close(p[0]);
            close(p[1]);
        }
        return -1;
    }
    int k = 0;
    for (; vars.set[k]; k++)
        set[k] = vars.set[k];
    snprintf(fdtext, sizeof fdtext, "DDL_HEARTBEAT_FD=%d", p[1]);
    if (p[1] >= 0)
        set[k++] = fdtext;
    snprintf(mtext, sizeof mtext, "MASTER_ADDR=%s", world.b.master_addr);
    if ((!node_mode || rejoin_mode) && !getenv("MASTER_ADDR") && world.b.master_addr[0])
        set[k++] = mtext;
    /* under Slurm, the step and its agent whatever the recorded environment
     * holds (a restarted worker once lacked DDL_AGENT_SOCK: its predecessor
     * had been recorded inside execve, with an environment not yet set up,
     * which ddl_spawn_capture now refuses) */
    snprintf(stext, sizeof stext, "DDL_STEP_ID=%s", world.b.step);
    snprintf(atext, sizeof atext, "DDL_AGENT_SOCK=%s", world.b.sock);
    if (!node_mode && world.b.step[0])
        set[k++] = stext;
    if (!node_mode && world.b.sock[0]) {
        set[k++] = atext;
        if (!has_var(s->spawn.envp, atext))
            ddl_warn("rank %ld: the recorded environment of worker %d lacked %s: set again",
                     rank, (int)s->last_pid, atext);
    }
    set[k] = NULL;
    const char *unset[] = {"DDL_HEARTBEAT_PATH", "DDL_HEARTBEAT_FD", NULL};
    pid_t pid = ddl_spawn_start(&s->spawn, set, unset, p[1], &err);
    if (p[1] >= 0)
        close(p[1]);
    if (pid < 0) {
        if (p[0] >= 0)
            close(p[0]);
        ddl_error("rank %ld: cannot restart the worker: %s", rank, err.text);
        return -1;
    }
    if (p[0] >= 0) {
        b->fd = p[0];
        ddl_fd_set_nonblock(b->fd, 1);
    }
    b->last_ms = 0;
    cur_gen = s->next_gen;
    if (s->last_pid) /* not the first worker of a --node task */
        ddl_info("task %ld: worker restarted as rank %ld of %ld (pid %d, generation %u)", rank,
                 world.rank, world.size, (int)pid, cur_gen);
    s->wpid = s->last_pid = pid;
    s->status = s->hung = s->decided = s->warm = 0;
    s->kill_at = s->respawn_at = 0;
    tell(DDL_RANK_RUNNING, pid, 0);
    return 0;
}

/* to_spare: a restart whose world leaves this task's node without ranks
 * (a node taken back after a loss is a spare until the world grows onto
 * it): no worker is started; the task waits as a spare's does.  1: it
 * waits, 0: it has a rank (restart it). */
static int to_spare(sup_t *s)
{
    if (!s->node_rank)
        return 0;
    world_set(s->node_rank);
    if (world.rank >= 0)
        return 0;
    take_place(s);
    s->idle = 1;
    ddl_warn("task %ld: its node holds no rank in generation %u: the task waits as a spare",
             rank, cur_gen);
    return 1;
}

/* activate: a new generation for a spare's task: if its node now holds
 * ranks, release the waiting worker with its place in the world (--node:
 * start it). */
static int activate(sup_t *s)
{
    if (s->node_rank)
        world_set(s->node_rank);
    free(s->node_rank);
    s->node_rank = NULL;
    new_master(s);
    if (world.rank < 0 || !node_mode) {
        cur_gen = s->next_gen;
        s->decided = 0;
    }
    if (world.rank < 0)
        return 0; /* still a spare */
    /* a spare since it started waits in its first worker; a node taken back
     * after a loss has none: it starts one as a restart does */
    if (node_mode || !s->wpid ? restart(s, &beats) < 0 : release(s->wpid, cur_gen) < 0)
        return -1;
    s->idle = 0;
    ddl_warn("task %ld: the spare takes rank %ld of %ld (generation %u)", rank, world.rank,
             world.size, cur_gen);
    if (!node_mode) /* restart() told it */
        tell(DDL_RANK_RUNNING, s->wpid, 0);
    return 0;
}

/* The supervision loop (common/evloop.h).  Fd watchers: the signalfd, the
 * agent's link, the worker's heartbeat pipe; timers: SIGKILL after the
 * grace period, the hang timeout, and a wake-up for a restart's backoff or
 * the look for the worker's exec.  What a round read (a signal, a message
 * from the agent) is handled in the prepare hook after the timers, in the
 * order the task's state needs: signal, agent, the worker's end, restart. */

static void on_sup_signal(ddl_evloop_t *loop, ddl_ev_fd_t *w, int fd, short re, void *arg)
{
    sup_t *s = arg;
    struct signalfd_siginfo si;
    (void)loop;
    (void)w;
    (void)re;
    if (read(fd, &si, sizeof si) == sizeof si)
        s->sig = (int)si.ssi_signo;
}

static void on_agent_link(ddl_evloop_t *loop, ddl_ev_fd_t *w, int fd, short re, void *arg)
{
    (void)loop;
    (void)w;
    (void)fd;
    (void)re;
    ((sup_t *)arg)->agent_ready = 1;
}

static void on_beats(ddl_evloop_t *loop, ddl_ev_fd_t *w, int fd, short re, void *arg)
{
    (void)loop;
    (void)w;
    (void)fd;
    (void)re;
    (void)arg;
    if (beats.fd >= 0)
        beats_read(&beats);
}

/* on_hang_timer: nothing heard from the worker for the hang timeout. */
static void on_hang_timer(ddl_evloop_t *loop, ddl_ev_timer_t *t, void *arg)
{
    sup_t *s = arg;
    (void)loop;
    (void)t;
    if (!s->wpid || s->hung)
        return;
    beats_read(&beats); /* a record may have come at the last moment */
    if (beats.fd >= 0 && beats.timeout_ms > 0 && ddl_now_ms() >= beats.last_ms + beats.timeout_ms) {
        report_hang(&beats, s->wpid);
        kill(s->wpid, SIGKILL);
        s->hung = 1;
    }
}

static void on_kill_timer(ddl_evloop_t *loop, ddl_ev_timer_t *t, void *arg)
{
    sup_t *s = arg;
    (void)loop;
    (void)t;
    if (s->kill_at && ddl_now_ms() >= s->kill_at && s->wpid) {
        ddl_warn("rank %ld: worker %d still running %ld ms after SIGTERM: sending SIGKILL",
                 rank, (int)s->wpid, s->grace_ms);
        kill(s->wpid, SIGKILL);
        s->kill_at = 0;
    }
}

/* sup_round: what a round read, then the worker's end and what follows it;
 * 1 when the task ends. */
static int sup_round(sup_t *s)
{
    int64_t now = ddl_now_ms();
    progress_send(&beats, 0);
    if (beat_path[0] && beats.last_ms) { /* the worker has it open: no name needed */
        unlink(beat_path);
        beat_path[0] = '\0';
    }
    int sig = s->sig;
    s->sig = 0;
    if (sig == parent_sig()) {
        if (getppid() == launch_parent) {
            sig = 0; /* one of its threads ended; the parent lives on */
        } else {
            ddl_debug("rank %ld: the parent process %d is gone", rank, (int)launch_parent);
            sig = SIGTERM; /* not a stop request: the parent changed */
        }
    }
    if (sig && sig != SIGCHLD && s->wait_decision && stop_signal(sig) &&
        getppid() == launch_parent) {
        ask_stop(sig); /* the agents stop the step; the worker got it too */
    } else if (sig && sig != SIGCHLD) {
        if (s->wpid)
            kill(s->wpid, sig);
        if ((sig == SIGTERM || sig == SIGINT || sig == SIGHUP) && !s->kill_at) {
            s->signalled = 1;
            s->kill_at = now + s->grace_ms;
        }
    }
    if (s->agent_ready && s->wait_decision && agent_msg(s, (int)s->grace_ms) < 0) {
        ddl_ev_fd_remove(s->agent_ev);
        s->agent_ev = NULL;
        close(agent_fd);
        agent_fd = -1;
        s->wait_decision = 0;
        if (!s->decided && !s->signalled) {
            ddl_error("rank %ld: lost the node's ddl-agent; stopping the worker (exit "
                      "status %d)", rank, DDL_EXIT_NODE_LOST);
            s->decided = 1;
            s->action = DDL_GEN_STOP;
            s->code = DDL_EXIT_NODE_LOST;
            if (s->wpid) {
                kill(s->wpid, SIGTERM);
                s->kill_at = now + s->grace_ms;
            }
        }
    }
    s->agent_ready = 0;
    /* the worker, or an adopted orphan of it (reaped, so that none
     * piles up as a zombie), or the node's agent (wait_agent copes) */
    pid_t w;
    int st;
    while ((w = waitpid(-1, &st, WNOHANG)) > 0)
        if (w == s->wpid) {
            if (beats.fd >= 0)
                beats_read(&beats); /* its last records */
            progress_send(&beats, 1);
            s->status = st;
            s->wpid = 0;
            s->kill_at = 0;
            ddl_kill_adopted(s->agent); /* the worker's leftovers; the node's agent stays */
            if (s->wait_decision && !s->decided && !s->signalled)
                report_end(s);
        }
    if (!s->wait_decision && s->wpid == 0)
        return 1; /* ddlrun, no agent, or the agent is gone: the task ends with its worker */
    if (s->wpid == 0 && (s->signalled || (s->decided && s->action != DDL_GEN_RESTART)))
        return 1;
    if (s->idle && s->decided && s->action == DDL_GEN_RESTART && ddl_now_ms() >= s->respawn_at &&
        activate(s) < 0) {
        s->action = DDL_GEN_STOP;
        s->code = DDL_EXIT_NODE_LOST;
        return 1;
    }
    if (s->wpid == 0 && s->decided && s->action == DDL_GEN_RESTART &&
        ddl_now_ms() >= s->respawn_at && !to_spare(s) && restart(s, &beats) < 0) {
        s->action = DDL_GEN_STOP; /* the agent sees this supervisor go */
        s->code = DDL_EXIT_NODE_LOST;
        return 1;
    }
    if (s->wait_decision && !s->captured && !s->idle)
        capture(s);
    return 0;
}

/* sup_prepare: each round: handle what the last one brought, then set the
 * heartbeat pipe's watcher and the timers from the task's state. */
static void sup_prepare(ddl_evloop_t *loop, void *arg)
{
    sup_t *s = arg;
    if (s->rounds++ && sup_round(s)) {
        ddl_evloop_stop(loop);
        return;
    }
    if (beats.fd != s->beats_watched) { /* restarted with a new pipe, or closed */
        ddl_ev_fd_remove(s->beats_ev);
        s->beats_ev = NULL;
        s->beats_watched = -1;
        if (beats.fd >= 0 && (s->beats_ev = ddl_ev_fd_add(loop, beats.fd, POLLIN, on_beats, s)))
            s->beats_watched = beats.fd;
    }
    if (s->kill_at && s->wpid)
        ddl_ev_timer_arm_at(s->kill_t, s->kill_at, 0);
    else
        ddl_ev_timer_cancel(s->kill_t);
    if (s->wpid && beats.fd >= 0 && beats.last_ms && !s->hung && beats.timeout_ms > 0)
        ddl_ev_timer_arm_at(s->hang_t, beats.last_ms + beats.timeout_ms, 0);
    else
        ddl_ev_timer_cancel(s->hang_t);
    int64_t wake = 0;
    if (s->decided && s->action == DDL_GEN_RESTART && s->respawn_at && (!s->wpid || s->idle))
        wake = s->respawn_at; /* the backoff before a restart, a spare's activation */
    if (s->wait_decision && !s->captured && s->wpid && (!wake || ddl_now_ms() + 20 < wake))
        wake = ddl_now_ms() + 20; /* look for the worker's exec */
    if (progress.pending && (!wake || progress.sent_ms + PROGRESS_EVERY_MS < wake))
        wake = progress.sent_ms + PROGRESS_EVERY_MS; /* a newer heartbeat for the agent */
    if (wake)
        ddl_ev_timer_arm_at(s->wake_t, wake, 0);
    else
        ddl_ev_timer_cancel(s->wake_t);
}

/* supervise: watch the worker until the task ends; returns the task's exit
 * status (or does not return: ends like the worker).  With agent_decides
 * (--slurm, --node) the agent decides what follows the worker's end; under
 * --node the worker is started here (wpid 0). */
static int supervise(pid_t wpid, int idle, int agent_decides, pid_t agent, int sfd,
                     long grace_ms)
{
    sup_t s = {.wpid = wpid, .last_pid = wpid, .idle = idle, .grace_ms = grace_ms,
               .agent = agent, .beats_watched = -1};
    s.wait_decision = agent_decides && agent_fd >= 0;
    if (!agent_decides)
        s.captured = -1; /* no agent decides: the task ends with its worker */
    if (node_mode) {
        s.spawn = node_spawn; /* taken */
        memset(&node_spawn, 0, sizeof node_spawn);
        s.captured = 1;
        if (!idle && restart(&s, &beats) < 0) { /* generation 0 (next_gen) */
            ddl_spawn_free(&s.spawn);
            return 1; /* the agent sees this supervisor go */
        }
    }
    ddl_evloop_t *loop = ddl_evloop_new();
    if (!loop || !ddl_ev_fd_add(loop, sfd, POLLIN, on_sup_signal, &s) ||
        (s.wait_decision &&
         !(s.agent_ev = ddl_ev_fd_add(loop, agent_fd, POLLIN, on_agent_link, &s))) ||
        !(s.kill_t = ddl_ev_timer_new(loop, on_kill_timer, &s)) ||
        !(s.hang_t = ddl_ev_timer_new(loop, on_hang_timer, &s)) ||
        !(s.wake_t = ddl_ev_timer_new(loop, on_wake, &s))) {
        ddl_error("rank %ld: out of memory", rank);
        if (s.wpid)
            kill(s.wpid, SIGKILL);
        ddl_evloop_free(loop);
        ddl_spawn_free(&s.spawn);
        return 1;
    }
    ddl_evloop_set_prepare(loop, sup_prepare, &s);
    while (ddl_evloop_run(loop) < 0) {
        ddl_error("poll: %m");
        if (s.wpid)
            kill(s.wpid, SIGKILL);
    }
    ddl_evloop_free(loop);
    free(s.node_rank);
    if (!s.wait_decision || !s.decided)
        tell(WIFEXITED(s.status) && WEXITSTATUS(s.status) == 0 && !s.hung ? DDL_RANK_EXITED
                                                                          : DDL_RANK_FAILED,
             s.last_pid, s.status);
    ddl_spawn_free(&s.spawn);
    if (beats.fd >= 0)
        close(beats.fd);
    if (beat_path[0])
        unlink(beat_path);
    if (agent_fd >= 0)
        close(agent_fd);
    if (agent > 0)
        wait_agent(agent, sfd);
    close(sfd);
    if (s.decided && s.action == DDL_GEN_STOP && s.code >= 0 && !s.signalled)
        return s.code;
    if (s.idle) /* a spare never needed */
        return s.decided && s.action == DDL_GEN_STOP ? 1 : 0;
    if (s.hung)
        return DDL_EXIT_HANG;
    die_like(s.status);
    return 1;
}

/* open_step_log: with DDL_LOG_DIR (ddl.conf's log_dir under Slurm), this
 * supervisor's messages also go to the step's log on this node, the file
 * its agent writes too (log.h). */
static void open_step_log(int slurm)
{
    const char *dir = ddl_env_str(DDLENV_DDL_LOG_DIR);
    char step[64], host[256] = "?";
    ddl_error_t err;
    if (!dir)
        return;
    const char *job = getenv("SLURM_JOB_ID"), *st = getenv("SLURM_STEP_ID");
    if (!st)
        st = getenv("SLURM_STEPID");
    if (slurm)
        snprintf(step, sizeof step, "%s.%s", job ? job : "?", st ? st : "?");
    else
        snprintf(step, sizeof step, "%s", ddl_env_str(DDLENV_DDL_STEP_ID) ?: "?");
    gethostname(host, sizeof host - 1);
    if (ddl_log_open_step(dir, step, host, &err) < 0)
        ddl_warn("step %s: no log file: %s", step, err.text);
}

/* start_failed: the task could not start: the agent it started, if any,
 * ends with it (SIGINT: SIGTERM would ask a supervised agent to stop).
 * Returns the task's exit status, 1. */
static int start_failed(pid_t agent)
{
    if (agent > 0) {
        kill(agent, SIGINT);
        waitpid(agent, NULL, 0);
    }
    return 1;
}

int main(int argc, char **argv)
{
    sigset_t mask, none;
    int first = 1;
    long grace_ms = DDL_GRACE_DEFAULT_MS;
    ddl_log_init("ddl-launch", DDL_LOG_WARN);

    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("ddl-launch %s\n", DDL_VERSION_STRING);
        return 0;
    }
    /* --slurm PID FD [-- the step's command, for agent/revive.c] */
    int slurm = argc >= 4 && strcmp(argv[1], "--slurm") == 0 &&
                (argc == 4 || strcmp(argv[4], "--") == 0);
    int node = argc > 2 && strcmp(argv[1], "--node") == 0;
    int rejoin = argc > 2 && strcmp(argv[1], "--rejoin") == 0;
    pid_t agent = 0;
    int idle = 0; /* a spare's task: its worker waits */
    long efd_arg;
    if (slurm && ddl_parse_long(argv[3], 3, 1 << 20, &efd_arg) == 0) {
        /* slurmstepd's descriptors have no business here */
        if (efd_arg > 3)
            close_range(3, (unsigned)efd_arg - 1, 0);
        close_range((unsigned)efd_arg + 1, ~0U, 0);
    }
    if (slurm || node || rejoin)
        open_step_log(slurm);
    if (argc > 1 && strcmp(argv[1], "--") == 0)
        first = 2;
    if (node || rejoin)
        first = strcmp(argv[2], "--") == 0 ? 3 : 2;
    if (!slurm && (first >= argc || (first == 1 && argv[1][0] == '-'))) {
        fprintf(stderr, "usage: ddl-launch [--node | --rejoin] [--] PROG [ARGS...]\n"
                        "(the per-rank supervisor; started by ddlrun, the ddl SPANK plugin or a "
                        "leader agent)\n");
        return 2;
    }
    ddl_error_t eerr;
    int hang_ms_set;
    if (ddl_env_long(DDLENV_DDL_GRACE_MS, &grace_ms, &eerr) < 0 ||
        (hang_ms_set = ddl_env_long(DDLENV_DDL_HANG_TIMEOUT_MS, &beats.timeout_ms, &eerr)) < 0) {
        ddl_error("%s", eerr.text);
        return 2;
    }
    long hang_s; /* srun --ddl-hang-timeout, ddl.conf (checked by the plugin) */
    if ((slurm || rejoin) && !hang_ms_set &&
        ddl_env_long(DDLENV_DDL_HANG_TIMEOUT_S, &hang_s, &eerr) > 0)
        beats.timeout_ms = hang_s * 1000;
    long strag_pct; /* the agents' straggler detection needs the heartbeats' timing */
    if (ddl_env_long(DDLENV_DDL_STRAGGLER_PCT, &strag_pct, &eerr) < 0) {
        ddl_error("%s", eerr.text);
        return 2;
    }
    beats.on = beats.timeout_ms > 0 || strag_pct > 0;

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
    sigaddset(&mask, parent_sig());
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
    if (sfd < 0) {
        ddl_error("signalfd: %m");
        return 1;
    }
    pid_t parent = getppid();
    launch_parent = parent;
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    prctl(PR_SET_PDEATHSIG, parent_sig());
    if (getppid() != parent)
        raise(parent_sig()); /* parent died before prctl: handled below like a real one */

    pid_t wpid;
    if (slurm) {
        if ((wpid = slurm_start(argv[2], argv[3], &agent, &idle)) < 0)
            return start_failed(agent);
        goto supervise;
    }
    if (rejoin) { /* a node restarted after a loss: its agent, then as --node */
        ddl_slurm_boot_t b;
        if (ddl_rejoin_boot(&b, &eerr) < 0) {
            ddl_error("task %s: %s", getenv("SLURM_LOCALID") ? getenv("SLURM_LOCALID") : "?",
                      eerr.text);
            return 1;
        }
        agent = b.agent;
        rejoin_mode = node = 1;
    }
    if (node) {
        if (node_start(argv + first, &idle) < 0)
            return start_failed(agent);
        wpid = 0;
        goto supervise;
    }
    if (register_rank(REGISTER_TIMEOUT_MS) < 0)
        return 1;

    int beat_pipe[2] = {-1, -1};
    if (beats.on && pipe2(beat_pipe, O_CLOEXEC) < 0) {
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
    if (idle || !node) /* --node: the worker's start tells it */
        tell(idle ? DDL_RANK_SPARE : DDL_RANK_RUNNING, idle ? 0 : wpid, 0);
    return supervise(wpid, idle, slurm || node, agent, sfd, grace_ms);
}
