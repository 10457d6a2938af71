/* slurm_boot.c: the bootstrap of ddl-launch under Slurm (see slurm_boot.h).
 *
 * Ranks, nodes and the step come from the SLURM_* variables of the task
 * (PMIx's per-rank node id is wrong in Slurm 22.05).  PMIx is
 * used exactly once, by every task: rank 0 puts the leader agent's TCP
 * address, the PyTorch rendezvous address and a fresh random secret; one
 * fence collects the data; everyone gets rank 0's values and the list of
 * the ranks on its node; then PMIx_Finalize.  The fence is waited for here,
 * at most DDL_BOOTSTRAP_TIMEOUT (fence_wait).  The node's first task
 * (SLURM_LOCALID 0) starts the node's ddl-agent as its own child, so that
 * Slurm tracks and kills it with the step; the secret reaches the agent
 * through a pipe, never a command line.  ddl_rejoin_boot is the bootstrap of
 * a task that a leader agent starts on a node restarted after a loss: no
 * PMIx, the identity from the leader's variables, the secret on standard
 * input.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_PMIX
#include <pmix.h>
#endif

#include "agent_args.h"
#include "ddl_limits.h"
#include "env.h"
#include "rank_env.h"
#include "log.h"
#include "slurm_boot.h"
#include "sock.h"

#define SLURM_HINT "ddl-launch --slurm runs only as a task of a Slurm step started with --ddl"
#define NODE_HINT "ddl-launch --node runs only as a task of ddlrun --emulate"
#define REJOIN_HINT "ddl-launch --rejoin runs only as a task of the step that a leader agent starts on a node restarted after a loss"

static int env_long(const char *name, const char *alt, long min, long max, long *out,
                    const char *hint, ddl_error_t *err)
{
    const char *v = getenv(name);
    if ((!v || !*v) && alt)
        v = getenv(alt);
    if (!v || ddl_parse_long(v, min, max, out) < 0) {
        errno = EINVAL;
        return ddl_errprintf(err, "%s='%s' is not a number in %ld-%ld: %s", name, v ? v : "",
                             min, max, hint);
    }
    return 0;
}

/* check_recovery: DDL_SPARES and DDL_MIN_NODES (validated by the plugin or
 * ddlrun) against the step's nodes. */
static int check_recovery(ddl_slurm_boot_t *b, ddl_error_t *err)
{
    if (b->spares >= b->nnodes && b->spares > 0) {
        errno = EINVAL;
        return ddl_errprintf(err, "--ddl-spares=%ld leaves no node to train on: the step has %ld "
                             "node%s", b->spares, b->nnodes, b->nnodes == 1 ? "" : "s");
    }
    if (b->min_nodes > b->nnodes - b->spares) {
        errno = EINVAL;
        return ddl_errprintf(err, "--ddl-min-nodes=%ld is more than the %ld node%s that train "
                             "(%ld nodes, --ddl-spares=%ld)", b->min_nodes, b->nnodes - b->spares,
                             b->nnodes - b->spares == 1 ? "" : "s", b->nnodes, b->spares);
    }
    return 0;
}

/* block_order: spares and shrinking move whole nodes of equal size. */
static int block_order(const ddl_slurm_boot_t *b, ddl_error_t *err)
{
    if ((b->spares || b->min_nodes) && (b->size != b->nnodes * b->local_size ||
                                        b->rank != b->node_id * b->local_size + b->local_rank)) {
        errno = EINVAL;
        return ddl_errprintf(err, "--ddl-spares and --ddl-min-nodes move or drop whole nodes: "
                             "they need the same number of tasks on every node in block order "
                             "(srun -N%ld --ntasks-per-node=K --distribution=block), but task "
                             "%ld is task %ld of %ld on node %ld", b->nnodes, b->rank,
                             b->local_rank, b->local_size, b->node_id);
    }
    return 0;
}

int ddl_node_boot(ddl_slurm_boot_t *b, ddl_error_t *err)
{
    ddl_rank_env_t e;
    memset(b, 0, sizeof *b);
    ddl_error_t why;
    if (ddl_rank_env_parse(NULL, NULL, 1, &e, &why) < 0)
        return ddl_errprintf(err, "%s: %s", why.text, NODE_HINT);
    if (strlen(e.step) >= sizeof b->step || strlen(e.agent_sock) >= sizeof b->sock) {
        errno = EINVAL;
        return ddl_errprintf(err, "DDL_STEP_ID or DDL_AGENT_SOCK is too long: %s", NODE_HINT);
    }
    b->size = e.size;
    b->rank = e.rank;
    b->nnodes = e.nnodes;
    b->node_id = e.node_id;
    b->local_size = e.local_size;
    b->local_rank = e.local_rank;
    b->spares = e.spares;
    b->min_nodes = e.min_nodes;
    snprintf(b->step, sizeof b->step, "%s", e.step);
    snprintf(b->sock, sizeof b->sock, "%s", e.agent_sock);
    snprintf(b->master_addr, sizeof b->master_addr, "%s",
             e.master_addr ? e.master_addr : "127.0.0.1");
    snprintf(b->master_port, sizeof b->master_port, "%s", e.master_port ? e.master_port : "");
    if (ddl_env_long(DDLENV_DDL_NODE_RESTARTED, &b->restarted, err) < 0)
        return -1;
    return check_recovery(b, err) < 0 || block_order(b, err) < 0 ? -1 : 0;
}

static int read_identity(ddl_slurm_boot_t *b, ddl_error_t *err)
{
    long job, step;
    const char *h = SLURM_HINT;
    if (env_long("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", 1, DDL_MAX_RANKS, &b->size, h, err) < 0 ||
        env_long("SLURM_PROCID", NULL, 0, b->size - 1, &b->rank, h, err) < 0 ||
        env_long("SLURM_STEP_NUM_NODES", "SLURM_NNODES", 1, b->size, &b->nnodes, h, err) < 0 ||
        env_long("SLURM_NODEID", NULL, 0, b->nnodes - 1, &b->node_id, h, err) < 0 ||
        env_long("SLURM_LOCALID", NULL, 0, b->size - 1, &b->local_rank, h, err) < 0 ||
        env_long("SLURM_JOB_ID", "SLURM_JOBID", 0, 0x7fffffffL, &job, h, err) < 0 ||
        env_long("SLURM_STEP_ID", "SLURM_STEPID", 0, 0xffffffffL, &step, h, err) < 0)
        return -1;
    snprintf(b->step, sizeof b->step, "%ld.%ld", job, step);
    if (ddl_env_long(DDLENV_DDL_SPARES, &b->spares, err) < 0 ||
        ddl_env_long(DDLENV_DDL_MIN_NODES, &b->min_nodes, err) < 0 || check_recovery(b, err) < 0)
        return -1;
    char dir[PATH_MAX - 128];
    if (ddl_runtime_dir(getuid(), 1, dir, sizeof dir, err) < 0)
        return -1;
    snprintf(b->sock, sizeof b->sock, "%s/step-%s.sock", dir, b->step);
    return 0;
}

/* spawn_agent: the node's agent for b's step with a's topology (local
 * ranks; leader socket, leader address or the addresses to ask for a
 * rejoin) and the recovery settings the plugin exported (--ddl-restarts,
 * ddl.conf), its name the Slurm node's; the secret through a pipe, never a
 * command line.  Waits until it listens (b->agent).  0, or -1 with err. */
static int spawn_agent(ddl_slurm_boot_t *b, ddl_agent_args_t *a, const char *secret,
                       ddl_error_t *err)
{
    char path[PATH_MAX];
    int sp[2];
    if (ddl_find_helper("ddl-agent", "agent", DDL_BINDIR, path, sizeof path, err) < 0)
        return -1;
    a->socket = b->sock;
    a->step = b->step;
    a->size = (uint32_t)b->size;
    a->node_id = (uint32_t)b->node_id;
    a->nnodes = (uint32_t)b->nnodes;
    a->parent = (int)getpid();
    a->exit_when_done = 1;
    a->supervise = 1;
    const char *name = getenv("SLURMD_NODENAME"); /* what srun -w takes */
    if (name && ddl_agent_host_ok(name))
        a->host = name;
    long restarts, loop, timeout_s;
    if (ddl_env_long(DDLENV_DDL_RESTARTS, &restarts, err) < 0 ||
        ddl_env_long(DDLENV_DDL_CRASH_LOOP, &loop, err) < 0 ||
        ddl_env_long(DDLENV_DDL_NODE_TIMEOUT_S, &timeout_s, err) < 0) /* whole seconds */
        return -1;
    a->restarts = (uint32_t)restarts;
    a->crash_loop = (uint32_t)loop;
    a->node_timeout_ms = (int)timeout_s * 1000;
    a->spares = (uint32_t)b->spares;
    a->min_nodes = (uint32_t)b->min_nodes;
    if (pipe2(sp, O_CLOEXEC) < 0)
        return ddl_errprintf(err, "pipe: %s", strerror(errno));
    a->secret_fd = sp[0];
    ddl_agent_argv_t av;
    /* 64 bytes fit in any pipe: write before the agent reads */
    if (ddl_agent_argv_build(a, &av, err) < 0 ||
        (ddl_write_full(sp[1], secret, strlen(secret)) < 0 &&
         ddl_errprintf(err, "cannot pass the secret to the agent: %s", strerror(errno)))) {
        close(sp[0]);
        close(sp[1]);
        return -1;
    }
    close(sp[1]);
    int keep[2] = {sp[0], a->tcp_fd};
    b->agent = ddl_spawn_ready(path, av.argv, keep, a->tcp_fd >= 0 ? 2 : 1, 0, 40000, err);
    close(sp[0]);
    return b->agent < 0 ? -1 : 0;
}

/* read_stdin_secret: the step's secret, the first line of standard input
 * (the leader's srun passes it to the first task only). */
static int read_stdin_secret(char *buf, size_t len, ddl_error_t *err)
{
    size_t got = 0;
    ssize_t n;
    while (got < len - 1 && (n = read(STDIN_FILENO, buf + got, len - 1 - got)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ddl_errprintf(err, "cannot read the step's secret on standard input: %s",
                                 strerror(errno));
        got += (size_t)n;
        if (memchr(buf, '\n', got))
            break;
    }
    buf[got] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    if (strlen(buf) < 16) {
        errno = EINVAL;
        return ddl_errprintf(err, "no step secret on standard input (ddl-launch --rejoin is "
                             "started by the step's leader agent)");
    }
    return 0;
}

int ddl_rejoin_boot(ddl_slurm_boot_t *b, ddl_error_t *err)
{
    const char *h = REJOIN_HINT, *step = getenv("DDL_STEP_ID"), *list = getenv("DDL_REJOIN");
    long ntasks;
    memset(b, 0, sizeof *b);
    if (!step || !*step || strlen(step) >= sizeof b->step || !list || !*list) {
        errno = EINVAL;
        return ddl_errprintf(err, "DDL_STEP_ID or DDL_REJOIN is missing or too long: %s", h);
    }
    snprintf(b->step, sizeof b->step, "%s", step);
    if (env_long("DDL_NNODES", NULL, 2, DDL_MAX_NODES, &b->nnodes, h, err) < 0 ||
        env_long("DDL_NODE_ID", NULL, 0, b->nnodes - 1, &b->node_id, h, err) < 0 ||
        env_long("DDL_LOCAL_SIZE", NULL, 1, DDL_MAX_RANKS, &b->local_size, h, err) < 0 ||
        env_long("DDL_SIZE", NULL, b->nnodes * b->local_size, b->nnodes * b->local_size,
                 &b->size, h, err) < 0 ||
        env_long("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", b->local_size, b->local_size, &ntasks,
                 h, err) < 0 ||
        env_long("SLURM_LOCALID", NULL, 0, b->local_size - 1, &b->local_rank, h, err) < 0 ||
        ddl_env_long(DDLENV_DDL_SPARES, &b->spares, err) < 0 ||
        ddl_env_long(DDLENV_DDL_MIN_NODES, &b->min_nodes, err) < 0 || check_recovery(b, err) < 0)
        return -1;
    b->rank = b->node_id * b->local_size + b->local_rank;
    b->restarted = 1;
    char dir[PATH_MAX - 128], v[32];
    if (ddl_runtime_dir(getuid(), 1, dir, sizeof dir, err) < 0)
        return -1;
    snprintf(b->sock, sizeof b->sock, "%s/step-%s.sock", dir, b->step);
    /* ddl-launch --node reads the task's identity back from these */
    snprintf(v, sizeof v, "%ld", b->rank);
    setenv("DDL_RANK", v, 1);
    snprintf(v, sizeof v, "%ld", b->local_rank);
    setenv("DDL_LOCAL_RANK", v, 1);
    setenv("DDL_AGENT_SOCK", b->sock, 1);
    setenv("DDL_NODE_RESTARTED", "1", 1);
    if (b->local_rank)
        return 0;
    char secret[160], local[4096];
    size_t used = 0;
    for (long i = 0; i < b->local_size && used < sizeof local - 24; i++)
        used += (size_t)snprintf(local + used, sizeof local - used, "%s%ld", i ? "," : "",
                                 b->node_id * b->local_size + i);
    ddl_agent_args_t a = DDL_AGENT_ARGS_INIT;
    a.local_ranks = local;
    a.rejoin = list;
    int rc = read_stdin_secret(secret, sizeof secret, err) < 0 ? -1 : spawn_agent(b, &a, secret, err);
    memset(secret, 0, sizeof secret);
    return rc;
}

#ifdef HAVE_PMIX

/* The values rank 0 publishes, and where the others find them. */
#define KEY_LEADER "ddl.leader" /* the leader agent's IPv4:port */
#define KEY_MASTER "ddl.master" /* MASTER_ADDR */
#define KEY_MPORT "ddl.mport"   /* MASTER_PORT */
#define KEY_SECRET "ddl.secret" /* 64 hex digits */

typedef struct {
    pmix_proc_t me;
    int leader_fd; /* rank 0: the leader agent's listening socket */
    char leader[80], secret[72], peers[4096];
} boot_pmix_t;

static int pmix_fail(ddl_error_t *err, const char *what, pmix_status_t rc)
{
    errno = EPROTO;
    return ddl_errprintf(err, "%s failed: %s", what, PMIx_Error_string(rc));
}

static int put_str(const char *key, const char *value, ddl_error_t *err)
{
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_STRING;
    v.data.string = (char *)value;
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key, &v);
    return rc == PMIX_SUCCESS ? 0 : pmix_fail(err, "PMIx_Put", rc);
}

static int get_str(const pmix_proc_t *who, const char *key, char *buf, size_t len,
                   ddl_error_t *err)
{
    pmix_value_t *v = NULL;
    pmix_status_t rc = PMIx_Get(who, key, NULL, 0, &v);
    if (rc != PMIX_SUCCESS)
        return ddl_errprintf(err, "PMIx_Get(%s) failed: %s", key, PMIx_Error_string(rc));
    int ok = v->type == PMIX_STRING && v->data.string && strlen(v->data.string) < len;
    if (ok)
        snprintf(buf, len, "%s", v->data.string);
    PMIX_VALUE_RELEASE(v);
    if (!ok) {
        errno = EPROTO;
        return ddl_errprintf(err, "PMIx value %s is not a string of less than %zu bytes", key,
                             len);
    }
    return 0;
}

/* publish: rank 0's share of the exchange. */
static int publish(ddl_slurm_boot_t *b, boot_pmix_t *p, ddl_error_t *err)
{
    char ip[64];
    uint16_t port, mport;
    if (ddl_local_ipv4(getenv("SLURM_LAUNCH_NODE_IPADDR"), ip, sizeof ip, err) < 0)
        return -1;
    p->leader_fd = ddl_tcp_listen(ip, &port, err);
    if (p->leader_fd < 0)
        return -1;
    int mfd = ddl_tcp_listen(ip, &mport, err); /* a free port for PyTorch's store */
    if (mfd < 0)
        return -1;
    close(mfd);
    if (ddl_secret_hex(p->secret, err) < 0)
        return -1;
    snprintf(p->leader, sizeof p->leader, "%s:%u", ip, port);
    snprintf(b->master_port, sizeof b->master_port, "%u", mport);
    return put_str(KEY_LEADER, p->leader, err) < 0 || put_str(KEY_MASTER, ip, err) < 0 ||
                   put_str(KEY_MPORT, b->master_port, err) < 0 ||
                   put_str(KEY_SECRET, p->secret, err) < 0
               ? -1
               : 0;
}

/* The step's one fence.  PMIX_TIMEOUT is honoured by a node's PMIx server
 * only while the tasks of its own node gather; Slurm's PMIx plugin then
 * passes the node's contribution around its ring or tree of nodes, which
 * has no timeout: when a task of another node never reaches the fence (it
 * failed or hung before it), the tasks whose nodes completed would wait
 * until the job's time limit.  So the fence is started non-blocking and
 * waited for here, with the same limit.  Static: a fence given up on may
 * still complete (or touch its info) after exchange has returned. */
#define FENCE_GRACE_S 5 /* past the servers' own limit (fence_wait) */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    pmix_status_t status;
    pmix_info_t info[2];
} fence = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void fence_done(pmix_status_t status, void *cbdata)
{
    (void)cbdata;
    pthread_mutex_lock(&fence.mu);
    fence.status = status;
    fence.done = 1;
    pthread_cond_signal(&fence.cv);
    pthread_mutex_unlock(&fence.mu);
}

/* fence_wait: the fence over every task of the step, collecting the data
 * put before it; PMIX_ERR_TIMEOUT with *stuck set when it did not complete
 * within timeout_s (the fence is then still pending: no PMIx_Finalize). */
static pmix_status_t fence_wait(long timeout_s, int *stuck)
{
    bool collect = true;
    int to = (int)timeout_s;
    pthread_condattr_t ca;
    *stuck = 0;
    if (pthread_condattr_init(&ca) != 0 || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&fence.cv, &ca) != 0)
        return PMIX_ERR_OUT_OF_RESOURCE;
    pthread_condattr_destroy(&ca);
    PMIX_INFO_LOAD(&fence.info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&fence.info[1], PMIX_TIMEOUT, &to, PMIX_INT);
    pmix_status_t rc = PMIx_Fence_nb(NULL, 0, fence.info, 2, fence_done, NULL);
    if (rc == PMIX_OPERATION_SUCCEEDED)
        return PMIX_SUCCESS; /* completed at once: no callback */
    if (rc != PMIX_SUCCESS)
        return rc;
    /* a few seconds past the servers' own limit, so that theirs (which
     * names the missing side better) reports first where it applies */
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += timeout_s + FENCE_GRACE_S;
    pthread_mutex_lock(&fence.mu);
    while (!fence.done && pthread_cond_timedwait(&fence.cv, &fence.mu, &dl) != ETIMEDOUT)
        ;
    rc = fence.done ? fence.status : PMIX_ERR_TIMEOUT;
    *stuck = !fence.done;
    pthread_mutex_unlock(&fence.mu);
    return rc;
}

static int exchange(ddl_slurm_boot_t *b, boot_pmix_t *p, ddl_error_t *err)
{
    long timeout_s;
    if (ddl_env_long(DDLENV_DDL_BOOTSTRAP_TIMEOUT, &timeout_s, err) < 0)
        return -1;
    if (!getenv("PMIX_RANK") && !getenv("PMIX_SERVER_URI41") && !getenv("PMIX_SERVER_URI4") &&
        !getenv("PMIX_SERVER_URI3") && !getenv("PMIX_SERVER_URI2"))
        return ddl_errprintf(err, "this step has no PMIx server: run `srun --mpi=pmix --ddl`, or "
                             "set MpiDefault=pmix in slurm.conf");
    pmix_status_t rc = PMIx_Init(&p->me, NULL, 0);
    if (rc != PMIX_SUCCESS)
        return pmix_fail(err, "PMIx_Init", rc);
    int ret = -1;
    if ((long)p->me.rank != b->rank) {
        ddl_errprintf(err, "PMIx rank %u differs from SLURM_PROCID %ld", p->me.rank, b->rank);
        goto out;
    }
    if (b->rank == 0 && publish(b, p, err) < 0)
        goto out;
    if ((rc = PMIx_Commit()) != PMIX_SUCCESS) {
        pmix_fail(err, "PMIx_Commit", rc);
        goto out;
    }
    int stuck;
    rc = fence_wait(timeout_s, &stuck);
    if (stuck) {
        /* the fence may still complete: leave PMIx as it is, exit */
        return ddl_errprintf(err, "PMIx_Fence over the step's %ld tasks did not complete in %ld s "
                             "(DDL_BOOTSTRAP_TIMEOUT): a task of the step never reached it (it "
                             "failed or hung before; see the other tasks' errors)",
                             b->size, timeout_s + FENCE_GRACE_S);
    }
    if (rc != PMIX_SUCCESS) {
        ddl_errprintf(err, "PMIx_Fence over the step's %ld tasks failed (timeout %ld s, "
                      "DDL_BOOTSTRAP_TIMEOUT): %s", b->size, timeout_s, PMIx_Error_string(rc));
        goto out;
    }
    pmix_proc_t p0, wild;
    PMIX_LOAD_PROCID(&p0, p->me.nspace, 0);
    PMIX_LOAD_PROCID(&wild, p->me.nspace, PMIX_RANK_WILDCARD);
    char mport[16];
    if (get_str(&p0, KEY_LEADER, p->leader, sizeof p->leader, err) < 0 ||
        get_str(&p0, KEY_MASTER, b->master_addr, sizeof b->master_addr, err) < 0 ||
        get_str(&p0, KEY_MPORT, mport, sizeof mport, err) < 0 ||
        get_str(&p0, KEY_SECRET, p->secret, sizeof p->secret, err) < 0 ||
        get_str(&wild, PMIX_LOCAL_PEERS, p->peers, sizeof p->peers, err) < 0)
        goto out;
    snprintf(b->master_port, sizeof b->master_port, "%s", mport);
    b->local_size = 1;
    for (const char *c = p->peers; *c; c++)
        b->local_size += *c == ',';
    ret = 0;
out:
    rc = PMIx_Finalize(NULL, 0);
    if (rc != PMIX_SUCCESS && ret == 0) {
        pmix_fail(err, "PMIx_Finalize", rc);
        ret = -1;
    }
    return ret;
}

/* start_agent: the node's first task starts the node's agent. */
static int start_agent(ddl_slurm_boot_t *b, boot_pmix_t *p, ddl_error_t *err)
{
    ddl_agent_args_t a = DDL_AGENT_ARGS_INIT;
    int leader = p->leader_fd >= 0;
    a.local_ranks = p->peers;
    a.tcp_fd = leader ? p->leader_fd : -1;
    a.leader = leader ? NULL : p->leader;
    /* others connect to the leader and retry for up to 30 s */
    return spawn_agent(b, &a, p->secret, err);
}

int ddl_slurm_boot(ddl_slurm_boot_t *b, ddl_error_t *err)
{
    boot_pmix_t p = {.leader_fd = -1};
    memset(b, 0, sizeof *b);
    int rc = -1;
    if (read_identity(b, err) < 0 || exchange(b, &p, err) < 0)
        goto out;
    if (block_order(b, err) < 0)
        goto out;
    if (b->local_rank == 0 && start_agent(b, &p, err) < 0)
        goto out;
    ddl_debug("rank %ld of %ld: node %ld of %ld, local %ld of %ld, agent %s, leader %s", b->rank,
              b->size, b->node_id, b->nnodes, b->local_rank, b->local_size, b->sock, p.leader);
    rc = 0;
out:
    if (p.leader_fd >= 0)
        close(p.leader_fd);
    memset(p.secret, 0, sizeof p.secret);
    return rc;
}

#else /* !HAVE_PMIX */

int ddl_slurm_boot(ddl_slurm_boot_t *b, ddl_error_t *err)
{
    memset(b, 0, sizeof *b);
    if (read_identity(b, err) < 0)
        return -1;
    errno = ENOTSUP;
    return ddl_errprintf(err, "this ddl-launch was built without OpenPMIx, which --ddl steps "
                         "need: install libpmix-dev and rebuild ddl");
}

#endif
