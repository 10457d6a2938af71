/* init.c: libddl's life cycle and public entry points.
 *
 * ddl_init() reads the DDL_* environment (set by ddlrun or ddl-launch),
 * starts UCX and exchanges worker addresses with every rank through the
 * node's ddl-agent (an allgather the agent serves); with no environment the
 * process is a world of one.  The collective entry points are in coll.c.
 * It registers what the transport calls while it waits (heartbeats and the
 * agents' notices), and fences the closing of UCX through the agent.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
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

#define BOOT_HDR (3 * sizeof(int32_t)) /* node id, local rank, GPU record length */

/* env_int: a DDL_* variable (common/ddl_env.def) in [min, max], narrower
 * than the table's where it depends on another; def when unset. */
static ddl_status_t env_int(ddl_env_id_t id, long min, long max, long def, int *out)
{
    ddl_error_t err;
    long x;
    if (ddl_env_long_in(id, min, max, def, &x, &err) < 0)
        return ddl_fail(DDL_ERR_INVALID, "%s: start the program with ddlrun, or unset it",
                        err.text);
    *out = (int)x;
    return DDL_OK;
}

/* read_env: the rank's place in the world, as ddlrun or ddl-launch wrote
 * it (common/rank_env.c); unset: a world of one. */
static ddl_status_t read_env(void)
{
    ddl_rank_env_t e;
    ddl_error_t err;
    if (ddl_rank_env_parse(NULL, NULL, 0, &e, &err) < 0)
        return ddl_fail(DDL_ERR_INVALID, "%s: start the program with ddlrun, or unset it",
                        err.text);
    ddl_ctx.size = (int)e.size;
    ddl_ctx.rank = (int)e.rank;
    ddl_ctx.local_size = (int)e.local_size;
    ddl_ctx.local_rank = (int)e.local_rank;
    ddl_ctx.nnodes = (int)e.nnodes;
    ddl_ctx.node_id = (int)e.node_id;
    ddl_ctx.gen = (uint32_t)e.gen;
    return DDL_OK;
}

/* next_decision: a rejoining rank's exchange was cancelled or refused
 * because its generation is over: the agents' decision follows on the same
 * connection (exchange.c); it is kept for ddl_rejoin, which joins it. */
static void next_decision(void)
{
    int64_t deadline = ddl_now_ms() + 2000;
    ddl_msg_t m;
    ddl_error_t err;
    for (int left; (left = (int)(deadline - ddl_now_ms())) > 0;) {
        if (ddl_proto_recv(ddl_ctx.agent_fd, &m, left, &err) < 0)
            return;
        int gen = !ddl_stop_notice(&m) && m.type == DDL_MSG_GENERATION;
        if (gen && m.u.generation.action != DDL_GEN_FINISH)
            ddl_gen_notice(&m);
        ddl_msg_clear(&m);
        if (gen)
            return;
    }
}

/* bootstrap: send our UCX address to the agent and receive everyone's. */
static ddl_status_t bootstrap(const void *addr, size_t addr_len)
{
    const char *sock = ddl_env_str(DDLENV_DDL_AGENT_SOCK);
    ddl_error_t err;
    int timeout_s = DDL_BOOTSTRAP_TIMEOUT_DEFAULT_S;
    ddl_status_t st;
    ddl_msg_t res;

    if (!sock || !*sock)
        return ddl_fail(DDL_ERR_BOOTSTRAP, "DDL_SIZE=%d but DDL_AGENT_SOCK is not set: start the "
                        "program with ddlrun -n N", ddl_ctx.size);
    if ((st = env_int(DDLENV_DDL_BOOTSTRAP_TIMEOUT, 1, DDL_BOOTSTRAP_TIMEOUT_MAX_S,
                      DDL_BOOTSTRAP_TIMEOUT_DEFAULT_S, &timeout_s)) != DDL_OK)
        return st;
    ddl_ctx.boot_timeout_s = timeout_s; /* ddl_rejoin waits as long for a decision */
    ddl_ctx.agent_fd = ddl_sock_connect(sock, 5000, &err);
    if (ddl_ctx.agent_fd < 0)
        return ddl_fail(DDL_ERR_BOOTSTRAP, "rank %d: %s", ddl_ctx.rank, err.text);

    /* each rank's contribution: node id, local rank and the length of its
     * GPU record, the GPU record (none without a GPU), then its address */
    uint8_t *blob = malloc(BOOT_HDR + DDL_GPU_REC_MAX + addr_len);
    if (!blob)
        return ddl_fail(DDL_ERR_NOMEM, "out of memory for the bootstrap");
    size_t gpu_len = ddl_gpu_boot_record(blob + BOOT_HDR, DDL_GPU_REC_MAX);
    int32_t hdr[3] = {ddl_ctx.node_id, ddl_ctx.local_rank, (int32_t)gpu_len};
    memcpy(blob, hdr, BOOT_HDR);
    memcpy(blob + BOOT_HDR + gpu_len, addr, addr_len);
    ddl_msg_t req = {.type = DDL_MSG_ALLGATHER};
    req.u.allgather.gen = ddl_ctx.gen;
    req.u.allgather.seq = 0;
    req.u.allgather.rank = (uint32_t)ddl_ctx.rank;
    req.u.allgather.size = (uint32_t)ddl_ctx.size;
    req.u.allgather.len = (uint32_t)(BOOT_HDR + gpu_len + addr_len);
    req.u.allgather.data = blob;
    int sent = ddl_proto_send(ddl_ctx.agent_fd, &req);
    free(blob);
    if (sent < 0)
        return ddl_fail(DDL_ERR_BOOTSTRAP, "rank %d: cannot send to the agent at %s: %s",
                        ddl_ctx.rank, sock, strerror(errno));
    if (ddl_proto_recv(ddl_ctx.agent_fd, &res, timeout_s * 1000, &err) < 0)
        return ddl_fail(DDL_ERR_BOOTSTRAP, "rank %d: no address exchange from the agent at %s "
                        "within %d s (DDL_BOOTSTRAP_TIMEOUT): %s", ddl_ctx.rank, sock, timeout_s,
                        err.text);
    if (res.type == DDL_MSG_ERROR) {
        st = ddl_fail(DDL_ERR_BOOTSTRAP, "rank %d: the agent refused the exchange: %s",
                      ddl_ctx.rank, res.u.error.text);
        int over = res.u.error.code == ECANCELED || res.u.error.code == ESTALE;
        ddl_msg_clear(&res);
        if (over && ddl_warm_rejoining())
            next_decision();
        return st;
    }
    if (res.type != DDL_MSG_ALLGATHER_RESULT ||
        res.u.allgather_result.count != (uint32_t)ddl_ctx.size) {
        st = ddl_fail(DDL_ERR_BOOTSTRAP, "rank %d: unexpected %s answer from the agent",
                      ddl_ctx.rank, ddl_msg_type_str(res.type));
        ddl_msg_clear(&res);
        return st;
    }
    size_t n = (size_t)ddl_ctx.size;
    ddl_ctx.peer_off = calloc(n, sizeof *ddl_ctx.peer_off);
    int *node_of = calloc(n, sizeof *node_of), *local_of = calloc(n, sizeof *local_of);
    const uint8_t **gpu_recs = calloc(n, sizeof *gpu_recs);
    size_t *gpu_lens = calloc(n, sizeof *gpu_lens);
    st = DDL_OK;
    if (!ddl_ctx.peer_off || !node_of || !local_of || !gpu_recs || !gpu_lens)
        st = ddl_fail(DDL_ERR_NOMEM, "out of memory for %d peers", ddl_ctx.size);
    size_t off = 0;
    for (size_t i = 0; i < n && st == DDL_OK; i++) {
        int32_t rec[3];
        const uint32_t len = res.u.allgather_result.lens[i];
        if (len >= BOOT_HDR)
            memcpy(rec, res.u.allgather_result.data + off, BOOT_HDR);
        if (len < BOOT_HDR || rec[2] < 0 || rec[2] > DDL_GPU_REC_MAX ||
            len < BOOT_HDR + (uint32_t)rec[2]) {
            st = ddl_fail(DDL_ERR_BOOTSTRAP, "rank %zu sent a malformed %u-byte bootstrap "
                          "record (a libddl of another version?)", i, len);
            break;
        }
        node_of[i] = rec[0];
        local_of[i] = rec[1];
        gpu_recs[i] = rec[2] ? res.u.allgather_result.data + off + BOOT_HDR : NULL;
        gpu_lens[i] = (size_t)rec[2];
        ddl_ctx.peer_off[i] = off + BOOT_HDR + (size_t)rec[2];
        off += len;
    }
    if (st == DDL_OK)
        st = ddl_comms_build(node_of, local_of);
    if (st == DDL_OK)
        st = ddl_gpu_boot((int)n, node_of, local_of, gpu_recs, gpu_lens, timeout_s);
    free(node_of);
    free(local_of);
    free(gpu_recs);
    free(gpu_lens);
    ddl_ctx.peer_addrs = res.u.allgather_result.data; /* take ownership */
    res.u.allgather_result.data = NULL;
    ddl_msg_clear(&res);
    return st;
}

static atomic_int agent_busy; /* one user of the agent connection at a time */

void ddl_agent_lock(void)
{
    int expected = 0;
    while (!atomic_compare_exchange_weak(&agent_busy, &expected, 1)) {
        expected = 0;
        sched_yield();
    }
}

void ddl_agent_unlock(void)
{
    atomic_store(&agent_busy, 0);
}

void ddl_agent_notice(void)
{
    static _Atomic int64_t last;
    int expected = 0;
    int64_t now = ddl_now_ms();
    if (ddl_ctx.agent_fd < 0 || now - atomic_load(&last) < 10 ||
        !atomic_compare_exchange_strong(&agent_busy, &expected, 1))
        return;
    atomic_store(&last, now);
    struct pollfd pf = {.fd = ddl_ctx.agent_fd, .events = POLLIN};
    ddl_msg_t m;
    ddl_error_t err;
    if (poll(&pf, 1, 0) > 0) {
        if (ddl_proto_recv(ddl_ctx.agent_fd, &m, 1000, &err) < 0) {
            /* the world is aborted: no operation waits here again */
            ddl_comm_abort(&ddl_ctx.world, "this rank lost its link to the node's ddl-agent");
        } else {
            if (ddl_stop_notice(&m)) {
                /* a stop: taken into account (stop.c) */
            } else if (m.type == DDL_MSG_GENERATION && m.u.generation.action != DDL_GEN_FINISH) {
                ddl_gen_notice(&m);
            }
            ddl_msg_clear(&m);
        }
    }
    atomic_store(&agent_busy, 0);
}

/* wait_idle: the transport's idle hook, while an operation waits for a
 * peer: alive, not hung, unless the agents say this generation is over. */
static void wait_idle(void)
{
    ddl_beat(0, 0);
    ddl_agent_notice();
}

/* agent_fence: every rank has closed its endpoints before any destroys its
 * worker, since a peer's flush needs this side to answer.  Done through the
 * node agent (exchange 1 of the generation), progressing UCX meanwhile. */
static void agent_fence(void)
{
    ddl_msg_t m = {.type = DDL_MSG_ALLGATHER};
    ddl_error_t err;
    uint8_t none = 0;
    m.u.allgather.gen = ddl_ctx.gen;
    m.u.allgather.seq = 1;
    m.u.allgather.rank = (uint32_t)ddl_ctx.rank;
    m.u.allgather.size = (uint32_t)ddl_ctx.size;
    m.u.allgather.data = &none;
    if (ddl_proto_send(ddl_ctx.agent_fd, &m) < 0)
        return;
    int64_t deadline = ddl_now_ms() + 30000;
    while (ddl_now_ms() < deadline) {
        ddl_ucx_progress();
        struct pollfd pf = {.fd = ddl_ctx.agent_fd, .events = POLLIN};
        if (poll(&pf, 1, 1) > 0) {
            if (ddl_proto_recv(ddl_ctx.agent_fd, &m, 5000, &err) < 0)
                return;
            /* a notice (a stop) may come before the fence's answer */
            int answer = m.type == DDL_MSG_ALLGATHER_RESULT || m.type == DDL_MSG_ERROR;
            ddl_msg_clear(&m);
            if (answer)
                return;
        }
    }
    ddl_debug("rank %d: the closing fence did not complete within 30 s", ddl_ctx.rank);
}

static void release(void)
{
    ddl_world_release();
}

void ddl_world_release(void)
{
    ddl_ckpt_drop_pending(); /* its transfer uses the transport closed below */
    ddl_stop_fini();
    ddl_mem_release_all();
    if (ddl_ctx.tl) {
        int aborted = atomic_load(&ddl_ctx.world.aborted) != 0;
        ddl_ucx_close(aborted);
        if (ddl_ctx.initialized && ddl_ctx.agent_fd >= 0 && ddl_ctx.size > 1 && !aborted)
            agent_fence();
    }
    ddl_ucx_fini();
    if (ddl_ctx.agent_fd >= 0)
        close(ddl_ctx.agent_fd);
    free(ddl_ctx.peer_addrs);
    free(ddl_ctx.peer_off);
    ddl_comms_release();
    ddl_scratch_free();
    ddl_gpu_fini();
    ddl_ctx = (ddl_ctx_t){.size = 1, .local_size = 1, .nnodes = 1, .agent_fd = -1};
}

#ifndef HAVE_CUDA
int ddl_gpu_count(void)
{
    return 0; /* built without CUDA */
}
#endif

ddl_status_t ddl_init(void)
{
    ddl_status_t st;
    void *addr = NULL;
    size_t addr_len = 0;

    ddl_clear_error();
    if (ddl_ctx.initialized)
        return ddl_fail(DDL_ERR_ALREADY, "ddl_init() was already called");
    ddl_log_init("ddl", DDL_LOG_WARN);
    ddl_beat_init();
    if ((st = read_env()) != DDL_OK || (st = ddl_algo_from_env()) != DDL_OK ||
        (st = ddl_gpu_init()) != DDL_OK) {
        release();
        return st;
    }
    ddl_stop_init(); /* before the exchange: a stop may be asked for during it */
    if (ddl_ctx.size > 1) {
        st = ddl_ucx_init(&addr, &addr_len, &ddl_ctx.tl);
        if (st == DDL_OK) {
            ddl_ctx.tl->idle = wait_idle;
            ddl_ctx.tl->mapped = &ddl_mem_mapped_ops;
            ddl_ucx_set_memh_lookup(ddl_mem_lookup);
            st = bootstrap(addr, addr_len);
        }
        ddl_ucx_release_address(addr);
        if (st != DDL_OK) {
            release();
            return st;
        }
    }
    ddl_ctx.world = (ddl_comm_t){.rank = ddl_ctx.rank, .size = ddl_ctx.size,
                                 .id = DDL_COMM_ID_WORLD, .tl = ddl_ctx.tl};
    atomic_init(&ddl_ctx.world.aborted, 0);
    atomic_init(&ddl_ctx.world.pending, 0);
    if (ddl_ctx.size == 1) { /* no exchange: the node and cross comms are the world */
        int zero = 0;
        if ((st = ddl_comms_build(&zero, &zero)) != DDL_OK) {
            release();
            return st;
        }
    }
    ddl_ctx.initialized = 1;
    if ((st = ddl_gpu_agree()) != DDL_OK || (st = ddl_select_measure()) != DDL_OK) {
        ddl_ctx.initialized = 0;
        release();
        return st;
    }
    ddl_debug("rank %d of %d initialised (local %d of %d, node %d of %d)", ddl_ctx.rank,
              ddl_ctx.size, ddl_ctx.local_rank, ddl_ctx.local_size, ddl_ctx.node_id,
              ddl_ctx.nnodes);
    return DDL_OK;
}

ddl_status_t ddl_finalize(void)
{
    ddl_status_t st = DDL_OK;
    ddl_clear_error();
    if (!ddl_ctx.initialized)
        return ddl_fail(DDL_ERR_NOT_INITIALIZED, "ddl_finalize() without a successful ddl_init()");
    ddl_status_t ckst = ddl_ckpt_finish_pending(); /* collective, so before the engine stops */
    ddl_engine_stop();
    /* No rank tears down its endpoints while a peer may still send to it. */
    if (ddl_ctx.size > 1 && !atomic_load(&ddl_ctx.world.aborted))
        st = ddl_barrier_dissemination(&ddl_ctx.world);
    release();
    return ckst != DDL_OK ? ckst : st;
}

int ddl_rank(void) { return ddl_ctx.rank; }
int ddl_size(void) { return ddl_ctx.size; }
int ddl_local_rank(void) { return ddl_ctx.local_rank; }
int ddl_local_size(void) { return ddl_ctx.local_size; }
int ddl_node_id(void) { return ddl_ctx.node_id; }
int ddl_num_nodes(void) { return ddl_ctx.nnodes; }

ddl_comm_t *ddl_comm_world(void)
{
    return ddl_ctx.initialized ? &ddl_ctx.world : NULL;
}

int ddl_comm_rank(const ddl_comm_t *comm)
{
    return comm ? comm->rank : -1;
}

int ddl_comm_size(const ddl_comm_t *comm)
{
    return comm ? comm->size : -1;
}
