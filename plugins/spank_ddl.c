/* spank_ddl.c: the Slurm SPANK plugin of ddl (spank_ddl.so).
 *
 * It registers the --ddl* options of srun/sbatch/salloc, checks each value
 * where it is given, reads the administrator's configuration (plugstack
 * argument config=PATH, default /etc/slurm/ddl.conf) and refuses a --ddl
 * step whose options break the site's limits or whose configuration file is
 * invalid.  In each task of a --ddl step (remote context; not the batch,
 * extern or interactive step) it exports the validated settings as DDL_*
 * variables and wraps the task: task_init forks; the child
 * waits for its environment from the supervisor, drops PMIX_* and returns
 * to Slurm, which runs the user's program in it; the parent, still the
 * task slurmstepd tracks, execs ddl-launch (same pid) with the job's
 * environment and, after "--", the step's command (for agent/revive.c).  The tasks also get ddl.conf's log level (DDL_LOG_LEVEL;
 * debug with --ddl-verbose; the user's own wins), ucx_tls (UCX_TLS unless
 * the user set it), log_dir (DDL_LOG_DIR=log_dir/UID) and metrics_dir
 * (DDL_METRICS_DIR).  task_init runs as the user; before it, as root,
 * task_init_privileged makes the user's runtime directory /run/ddl/UID
 * (util.h), which no other user can take first, and with log_dir the
 * user's log directory log_dir/UID.  At the step's end (as root) it
 * removes the node agent's socket if the agent could not.  Without --ddl it
 * does nothing.
 *
 * Only slurm_* logging here, no shell, no user input run as root.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "conf.h"
#include "ddl_limits.h"
#include "spank_opts.h"
#include "util.h"

SPANK_PLUGIN(ddl, 1);

/* The user's options. */
static ddl_spank_opts_t ddl_opt = DDL_SPANK_OPTS_INIT;

static char ddl_conf_file[PATH_MAX] = DDL_CONF_DEFAULT_PATH;
static char ddl_launch_path[PATH_MAX] = DDL_LIBEXECDIR "/ddl-launch";
static ddl_conf_t *ddl_conf;
static ddl_error_t ddl_conf_err;
static int ddl_skip_step; /* batch or extern step: nothing to do */

static int opt_cb(int val, const char *arg, int remote)
{
    char msg[DDL_SPANK_MSG_LEN];
    (void)remote;
    if (ddl_spank_opt_parse(&ddl_opt, val, arg, msg, sizeof msg) < 0) {
        if (msg[0])
            slurm_error("ddl: %s", msg);
        return -1;
    }
    return 0;
}

static struct spank_option ddl_options[] = {
    {"ddl", NULL, "a ddl step: each task supervised by ddl-launch, ranks bootstrapped through "
                  "PMIx and the node agents (needs --mpi=pmix unless it is the default)", 0,
     OPT_DDL, opt_cb},
    {"ddl-checkpoint-dir", "DIR", "ddl: directory of the step's checkpoints (absolute)", 1,
     OPT_CHECKPOINT_DIR, opt_cb},
    {"ddl-checkpoint-local", "DIR",
     "ddl: node-local checkpoint directory on each node (absolute; %n: node id, %h: host "
     "name), each shard copied to a partner node (site default: checkpoint_local_dir)", 1,
     OPT_CKPT_LOCAL, opt_cb},
    {"ddl-checkpoint-shared-every", "K",
     "ddl: with a node-local directory, every K-th checkpoint also goes to "
     "--ddl-checkpoint-dir (0-1000000, 0: never; site default: checkpoint_shared_every)", 1,
     OPT_CKPT_SHARED_EVERY, opt_cb},
    {"ddl-restarts", "N",
     "ddl: restarts allowed after a failure (0-" DDL_XSTR(DDL_MAX_RESTARTS)
     ", site limit applies)",
     1, OPT_RESTARTS, opt_cb},
    {"ddl-spares", "N",
     "ddl: the last N nodes wait idle to replace a lost node (0-" DDL_XSTR(DDL_MAX_NODES) ")", 1,
     OPT_SPARES, opt_cb},
    {"ddl-min-nodes", "N",
     "ddl: without a spare, go on after a node loss on no fewer than N nodes "
     "(0-" DDL_XSTR(DDL_MAX_NODES) ", 0: stop)",
     1, OPT_MIN_NODES, opt_cb},
    {"ddl-heartbeat", "SECONDS",
     "ddl: seconds between heartbeats "
     "(0.05-60, decimals allowed, site default applies)",
     1, OPT_HEARTBEAT, opt_cb},
    {"ddl-hang-timeout", "SECONDS",
     "ddl: seconds without progress before a rank counts as hung "
     "(1-" DDL_XSTR(DDL_HANG_TIMEOUT_MAX_S) ", site range applies)",
     1, OPT_HANG_TIMEOUT, opt_cb},
    {"ddl-bind", "auto|none|LIST", "ddl: placement of ranks (LIST: CPU lists separated by ':')", 1,
     OPT_BIND, opt_cb},
    {"ddl-verbose", NULL, "ddl: report what ddl does", 0, OPT_VERBOSE, opt_cb},
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();
    for (int i = 0; i < ac; i++) {
        if (strncmp(av[i], "config=", 7) == 0 && av[i][7] == '/' &&
            strlen(av[i] + 7) < sizeof ddl_conf_file) {
            snprintf(ddl_conf_file, sizeof ddl_conf_file, "%s", av[i] + 7);
            continue;
        }
        if (strncmp(av[i], "launch=", 7) == 0 && av[i][7] == '/' &&
            strlen(av[i] + 7) < sizeof ddl_launch_path) {
            snprintf(ddl_launch_path, sizeof ddl_launch_path, "%s", av[i] + 7);
            continue;
        }
        slurm_error("ddl: plugstack.conf: unknown argument '%s' (expected config=/ABSOLUTE/PATH "
                    "or launch=/ABSOLUTE/PATH/ddl-launch)",
                    av[i]);
        return -1;
    }
    if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE && ctx != S_CTX_ALLOCATOR)
        return 0;
    for (size_t i = 0; i < sizeof ddl_options / sizeof ddl_options[0]; i++) {
        if (spank_option_register(sp, &ddl_options[i]) != ESPANK_SUCCESS) {
            slurm_error("ddl: cannot register option --%s", ddl_options[i].name);
            return -1;
        }
    }
    /* An invalid file is remembered, not fatal: only --ddl steps need it. */
    ddl_conf = ddl_conf_load(ddl_conf_file, &ddl_conf_err);
    return 0;
}

/* job_partition: the step's partition, for the per-partition values. */
static const char *job_partition(spank_t sp, char *buf, int len)
{
    if (spank_context() == S_CTX_REMOTE)
        return spank_getenv(sp, "SLURM_JOB_PARTITION", buf, len) == ESPANK_SUCCESS ? buf : NULL;
    const char *p = getenv("SLURM_JOB_PARTITION");
    if (!p)
        return NULL;
    snprintf(buf, (size_t)len, "%s", p);
    return buf;
}

/* srun_no_kill: srun (this process) was asked to keep the step when a node
 * fails: SLURM_NO_KILL, or -k / --no-kill among its arguments (read from
 * /proc/self/cmdline; an argument of the user's program may pass for one). */
static int srun_no_kill(void)
{
    const char *e = getenv("SLURM_NO_KILL");
    if (e && *e && strcmp(e, "off") != 0 && strcmp(e, "0") != 0)
        return 1;
    char buf[16384];
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    for (char *a = buf; a < buf + n; a += strlen(a) + 1)
        if (strcmp(a, "-k") == 0 || strcmp(a, "--no-kill") == 0 ||
            (strncmp(a, "--no-kill=", 10) == 0 && strcmp(a + 10, "off") != 0))
            return 1;
    return 0;
}

/* log_level_of: the level of ddl's messages in the step's tasks: the
 * user's DDL_LOG_LEVEL, else debug with --ddl-verbose, else log_level. */
static const char *log_level_of(const ddl_conf_values_t *v, const char *user)
{
    return user && *user ? user : ddl_opt.verbose ? "debug" : v->log_level;
}

/* verbose_summary: --ddl-verbose in srun: what the step will run with. */
static void verbose_summary(const ddl_conf_values_t *v, const char *part)
{
    const char *ucx = getenv("UCX_TLS");
    slurm_info("ddl: settings of this step (%s%s%s): restarts %ld, spares %ld, min nodes %ld, "
               "heartbeat %g s, node timeout %ld s, hang timeout %ld s, bind %s, checkpoint "
               "dir %s, log level %s, log dir %s, metrics dir %s, UCX_TLS %s%s",
               ddl_conf_file, part ? ", partition " : "", part ? part : "",
               ddl_opt.restarts >= 0 ? ddl_opt.restarts : v->max_restarts,
               ddl_opt.spares > 0 ? ddl_opt.spares : 0, ddl_opt.min_nodes > 0 ? ddl_opt.min_nodes : 0,
               (ddl_opt.heartbeat_ms >= 0 ? ddl_opt.heartbeat_ms : v->heartbeat_interval_ms) /
                   1000.0,
               v->node_timeout, ddl_opt.hang_timeout_s >= 0 ? ddl_opt.hang_timeout_s
                                                            : v->hang_timeout_max,
               ddl_opt.bind[0] ? ddl_opt.bind : v->bind,
               ddl_opt.checkpoint_dir[0] ? ddl_opt.checkpoint_dir : "(none)",
               log_level_of(v, getenv("DDL_LOG_LEVEL")), v->log_dir ? v->log_dir : "(none)",
               v->metrics_dir ? v->metrics_dir : "(none)",
               ucx && *ucx ? ucx : v->ucx_tls ? v->ucx_tls : "(UCX's choice)",
               ucx && *ucx ? " (yours)" : "");
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!ddl_opt.enabled)
        return 0;
    if (!ddl_conf) {
        slurm_error("ddl: %s", ddl_conf_err.text);
        return -1;
    }
    char part[128];
    const char *part_name = job_partition(sp, part, sizeof part);
    const ddl_conf_values_t *v = ddl_conf_get(ddl_conf, part_name);
    if (ddl_opt.restarts > v->max_restarts) {
        slurm_error("ddl: --ddl-restarts: %ld is more than this site allows (max_restarts = %ld "
                    "in %s)",
                    ddl_opt.restarts, v->max_restarts, ddl_conf_file);
        return -1;
    }
    if (ddl_opt.hang_timeout_s >= 0 && (ddl_opt.hang_timeout_s < v->hang_timeout_min ||
                                        ddl_opt.hang_timeout_s > v->hang_timeout_max)) {
        slurm_error("ddl: --ddl-hang-timeout: %ld is outside this site's range (%ld-%ld in %s)",
                    ddl_opt.hang_timeout_s, v->hang_timeout_min, v->hang_timeout_max,
                    ddl_conf_file);
        return -1;
    }
    if (ddl_opt.heartbeat_ms >= v->node_timeout * 1000) {
        slurm_error("ddl: --ddl-heartbeat: %g must be less than node_timeout (%ld in %s)",
                    ddl_opt.heartbeat_ms / 1000.0, v->node_timeout, ddl_conf_file);
        return -1;
    }
    if (ddl_opt.checkpoint_dir[0] && !ddl_conf_checkpoint_allowed(v, ddl_opt.checkpoint_dir)) {
        slurm_error("ddl: --ddl-checkpoint-dir: '%s' is not under a checkpoint root allowed "
                    "by %s",
                    ddl_opt.checkpoint_dir, ddl_conf_file);
        return -1;
    }
    if (spank_context() == S_CTX_LOCAL && ddl_opt.verbose)
        verbose_summary(v, part_name);
    if (spank_context() == S_CTX_LOCAL && (ddl_opt.spares > 0 || ddl_opt.min_nodes > 0) &&
        !srun_no_kill())
        slurm_info("ddl: warning: --ddl-spares and --ddl-min-nodes recover from a lost node "
                   "only if Slurm keeps the job and the step: add --no-kill to this srun and to "
                   "the job's sbatch or salloc");
    if (spank_context() == S_CTX_REMOTE) {
        uint32_t step = 0;
        if (spank_get_item(sp, S_JOB_STEPID, &step) == ESPANK_SUCCESS &&
            (step == SLURM_BATCH_SCRIPT || step == SLURM_EXTERN_CONT
#ifdef SLURM_INTERACTIVE_STEP
             || step == SLURM_INTERACTIVE_STEP
#endif
             ))
            ddl_skip_step = 1;
    }
    return 0;
}

static int set_env(spank_t sp, const char *name, const char *value)
{
    spank_err_t rc = spank_setenv(sp, name, value, 1);
    if (rc != ESPANK_SUCCESS) {
        slurm_error("ddl: cannot set %s in the task's environment: %s", name, spank_strerror(rc));
        return -1;
    }
    return 0;
}

static int set_env_long(spank_t sp, const char *name, long value)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%ld", value);
    return set_env(sp, name, buf);
}

/* worker_env: in the child that becomes the worker, take the variables
 * ddl-launch sends (NAME=VALUE lines, then "."), and drop PMIX_*: the
 * worker must never be a PMIx client (a second PMIx client in the task
 * would take the task's rank). */
static int worker_env(spank_t sp, int fd)
{
    static char buf[65536];
    size_t got = 0;
    ssize_t n;
    while (got < sizeof buf - 1 && (n = read(fd, buf + got, sizeof buf - 1 - got)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = 0;
    if (got < 2 || strcmp(buf + got - 2, ".\n") != 0)
        _exit(1); /* ddl-launch failed and said why */
    for (char *line = buf, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
        *nl = 0;
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = 0;
        if (set_env(sp, line, eq + 1) < 0)
            return -1;
    }
    char **env = NULL, *names[256];
    int nnames = 0;
    if (spank_get_item(sp, S_JOB_ENV, &env) == ESPANK_SUCCESS && env)
        for (int i = 0; env[i] && nnames < 256; i++)
            if (strncmp(env[i], "PMIX_", 5) == 0) {
                char *eq = strchr(env[i], '=');
                names[nnames] = eq ? strndup(env[i], (size_t)(eq - env[i])) : NULL;
                if (names[nnames])
                    nnames++;
            }
    for (int i = 0; i < nnames; i++) {
        spank_unsetenv(sp, names[i]);
        free(names[i]);
    }
    return 0;
}

/* wrap_task: see the top of this file. */
static int wrap_task(spank_t sp)
{
    char **env = NULL;
    int pmix = 0, p[2];
    if (spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || !env) {
        slurm_error("ddl: cannot read the task's environment");
        return -1;
    }
    for (int i = 0; env[i]; i++)
        pmix |= strncmp(env[i], "PMIX_RANK=", 10) == 0;
    if (!pmix) {
        slurm_error("ddl: this step has no PMIx, which --ddl needs: run `srun --mpi=pmix --ddl`, "
                    "or set MpiDefault=pmix in slurm.conf");
        return -1;
    }
    if (access(ddl_launch_path, X_OK) < 0) {
        slurm_error("ddl: cannot execute %s: %m (plugstack.conf: launch=PATH)", ddl_launch_path);
        return -1;
    }
    if (pipe2(p, O_CLOEXEC) < 0) {
        slurm_error("ddl: pipe: %m");
        return -1;
    }
    pid_t task = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        slurm_error("ddl: fork: %m");
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        close(p[1]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != task)
            _exit(1);
        return worker_env(sp, p[0]);
    }
    close(p[0]);
    fcntl(p[1], F_SETFD, 0);
    char spid[16], sfd[16];
    snprintf(spid, sizeof spid, "%d", (int)pid);
    snprintf(sfd, sizeof sfd, "%d", p[1]);
    /* after "--", the step's command: the leader agent starts it again on a
     * node that restarted (ddl-launch --rejoin); passed as is, never to a
     * shell */
    int jargc = 0;
    char **jargv = NULL, *fixed[] = {"ddl-launch", "--slurm", spid, sfd, NULL};
    char **argv = fixed;
    if (spank_get_item(sp, S_JOB_ARGV, &jargc, &jargv) == ESPANK_SUCCESS && jargc > 0 && jargv &&
        (argv = calloc((size_t)jargc + 6, sizeof *argv))) {
        memcpy(argv, fixed, 4 * sizeof *argv);
        argv[4] = "--";
        memcpy(argv + 5, jargv, (size_t)jargc * sizeof *argv);
    } else {
        argv = fixed;
    }
    execve(ddl_launch_path, argv, env);
    slurm_error("ddl: cannot execute %s: %m", ddl_launch_path);
    kill(pid, SIGKILL);
    _exit(127);
}

/* As root, before task_init: the user's runtime directory (util.h) and,
 * with log_dir, the user's directory of per-step logs in it, log_dir/UID
 * (0700, the job owner's), in which the user's ddl-launch and ddl-agent
 * create their files themselves (O_NOFOLLOW). */
int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    uid_t uid;
    gid_t gid;
    char dir[PATH_MAX], base[8], part[128];
    ddl_error_t err;
    if (!ddl_opt.enabled || ddl_skip_step || !ddl_conf || spank_context() != S_CTX_REMOTE ||
        getuid() != 0)
        return 0;
    if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS) {
        slurm_error("ddl: cannot read the job's uid and gid");
        return -1;
    }
    /* DDL_RUNTIME_DIR (set or too long to read): the user's choice */
    if (spank_getenv(sp, "DDL_RUNTIME_DIR", base, sizeof base) == ESPANK_ENV_NOEXIST &&
        ddl_runtime_dir_prepare(uid, gid, dir, sizeof dir, &err) < 0) {
        slurm_error("ddl: %s", err.text);
        return -1;
    }
    const ddl_conf_values_t *v = ddl_conf_get(ddl_conf, job_partition(sp, part, sizeof part));
    if (v->log_dir &&
        ddl_user_dir_prepare(v->log_dir, "log_dir", uid, gid, dir, sizeof dir, &err) < 0) {
        slurm_error("ddl: %s (%s)", err.text, ddl_conf_file);
        return -1;
    }
    return 0;
}

/* apply_outputs: the task's log level (DDL_LOG_LEVEL: the user's, else
 * debug with --ddl-verbose, else log_level), its UCX transports (UCX_TLS
 * from ucx_tls unless the user set it: only the workers use UCX), the
 * per-step logs (DDL_LOG_DIR, the directory task_init_privileged made) and
 * the metrics directory (DDL_METRICS_DIR). */
static int apply_outputs(spank_t sp, const ddl_conf_values_t *v)
{
    char user[32], log_dir[PATH_MAX] = "";
    uid_t uid;
    if (v->log_dir && (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
                       snprintf(log_dir, sizeof log_dir, "%s/%u", v->log_dir, (unsigned)uid) >=
                           (int)sizeof log_dir)) {
        slurm_error("ddl: log_dir %s: cannot name the job owner's directory in it", v->log_dir);
        return -1;
    }
    spank_err_t rc = spank_getenv(sp, "DDL_LOG_LEVEL", user, sizeof user);
    if (rc != ESPANK_SUCCESS || !user[0]) /* too long to read: not a level either */
        user[0] = '\0';
    if (set_env(sp, "DDL_LOG_LEVEL", log_level_of(v, user)) < 0)
        return -1;
    if (v->ucx_tls && spank_setenv(sp, "UCX_TLS", v->ucx_tls, 0) != ESPANK_SUCCESS &&
        spank_getenv(sp, "UCX_TLS", user, sizeof user) == ESPANK_ENV_NOEXIST) {
        slurm_error("ddl: cannot set UCX_TLS in the task's environment");
        return -1;
    }
    if (log_dir[0] && set_env(sp, "DDL_LOG_DIR", log_dir) < 0)
        return -1;
    if (v->metrics_dir && set_env(sp, "DDL_METRICS_DIR", v->metrics_dir) < 0)
        return -1;
    if (ddl_opt.verbose) {
        uint32_t job = 0, step = 0, task = 0;
        spank_get_item(sp, S_JOB_ID, &job);
        spank_get_item(sp, S_JOB_STEPID, &step);
        spank_get_item(sp, S_TASK_GLOBAL_ID, &task);
        slurm_info("ddl: step %u.%u task %u: ddl-launch %s, log level %s, log dir %s, metrics "
                   "dir %s", job, step, task, ddl_launch_path, log_level_of(v, user),
                   log_dir[0] ? log_dir : "(none)",
                   v->metrics_dir ? v->metrics_dir : "(none)");
    }
    return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!ddl_opt.enabled || ddl_skip_step || !ddl_conf || spank_context() != S_CTX_REMOTE)
        return 0;
    char part[128];
    const ddl_conf_values_t *v = ddl_conf_get(ddl_conf, job_partition(sp, part, sizeof part));
    long restarts = ddl_opt.restarts >= 0 ? ddl_opt.restarts : v->max_restarts;
    long spares = ddl_opt.spares >= 0 ? ddl_opt.spares : 0;
    long heartbeat = ddl_opt.heartbeat_ms >= 0 ? ddl_opt.heartbeat_ms : v->heartbeat_interval_ms;
    long hang = ddl_opt.hang_timeout_s >= 0 ? ddl_opt.hang_timeout_s : v->hang_timeout_max;
    const char *bind = ddl_opt.bind[0] ? ddl_opt.bind : v->bind;
    const char *local = ddl_opt.checkpoint_local[0] ? ddl_opt.checkpoint_local
                                                    : v->checkpoint_local_dir;
    long every = ddl_opt.shared_every >= 0 ? ddl_opt.shared_every : v->checkpoint_shared_every;
    if ((local && (set_env(sp, "DDL_CKPT_LOCAL_DIR", local) < 0 ||
                   set_env_long(sp, "DDL_CKPT_SHARED_EVERY", every) < 0)))
        return -1;
    if (set_env(sp, "DDL_ENABLED", "1") < 0 ||
        (ddl_opt.checkpoint_dir[0] &&
         set_env(sp, "DDL_CHECKPOINT_DIR", ddl_opt.checkpoint_dir) < 0) ||
        set_env_long(sp, "DDL_RESTARTS", restarts) < 0 ||
        set_env_long(sp, "DDL_SPARES", spares) < 0 ||
        set_env_long(sp, "DDL_MIN_NODES", ddl_opt.min_nodes > 0 ? ddl_opt.min_nodes : 0) < 0 ||
        set_env_long(sp, "DDL_HEARTBEAT_MS", heartbeat) < 0 ||
        set_env_long(sp, "DDL_NODE_TIMEOUT_S", v->node_timeout) < 0 ||
        set_env_long(sp, "DDL_HANG_TIMEOUT_S", hang) < 0 || set_env(sp, "DDL_BIND", bind) < 0 ||
        set_env(sp, "DDL_VERBOSE", ddl_opt.verbose ? "1" : "0") < 0 ||
        set_env(sp, "DDL_CONFIG", ddl_conf_file) < 0 || apply_outputs(sp, v) < 0)
        return -1;
    return wrap_task(sp);
}

/* sweep: at the step's end, as root, remove the node agent's socket when
 * the agent was killed before it could.  The directory must be the job
 * owner's real directory (no link), so nothing else can be removed. */
static void sweep(spank_t sp)
{
    uid_t uid;
    uint32_t job, step;
    char dir[PATH_MAX], name[64], base[PATH_MAX - 64];
    struct stat st;
    if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS)
        return;
    if (spank_getenv(sp, "DDL_RUNTIME_DIR", base, sizeof base) == ESPANK_SUCCESS && base[0] == '/')
        snprintf(dir, sizeof dir, "%s/ddl-%u", base, (unsigned)uid);
    else
        snprintf(dir, sizeof dir, "%s/%u", ddl_runtime_system_base(), (unsigned)uid);
    snprintf(name, sizeof name, "step-%u.%u.sock", job, step);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return;
    if (fstat(dfd, &st) == 0 && st.st_uid == uid &&
        fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode) &&
        unlinkat(dfd, name, 0) == 0)
        slurm_info("ddl: removed %s/%s left by the step's agent", dir, name);
    close(dfd);
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (ddl_opt.enabled && !ddl_skip_step && spank_context() == S_CTX_REMOTE && getuid() == 0)
        sweep(sp);
    ddl_conf_free(ddl_conf);
    ddl_conf = NULL;
    return 0;
}
