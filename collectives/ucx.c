/* ucx.c: libddl's transport over UCX's tag API: one context and worker per
 * process, one endpoint per peer created on first use, non-blocking send and
 * receive, and a wait loop that progresses the worker.
 *
 * The user's UCX_* environment is honoured (ucp_config_read).  The wait loop
 * spins briefly and then yields the CPU, because training jobs often run
 * more ranks than cores while a rank waits for a slower peer.  UCX statuses
 * are mapped to ddl_status_t here and nowhere else.
 */
#include "config.h"

#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "ddl_int.h"
#include "proto.h"
#include "log.h"

/* Iterations without progress before the wait loop starts to yield. */
#define DDL_SPIN_BEFORE_YIELD 64
/* Transfers below this size never look up a registration. */
#define DDL_MEMH_MIN_BYTES 8192

static ddl_status_t from_ucs(ucs_status_t st)
{
    switch (st) {
    case UCS_OK: return DDL_OK;
    case UCS_INPROGRESS: return DDL_INPROGRESS;
    case UCS_ERR_NO_MEMORY: return DDL_ERR_NOMEM;
    case UCS_ERR_INVALID_PARAM: return DDL_ERR_INVALID;
    case UCS_ERR_UNSUPPORTED: return DDL_ERR_UNSUPPORTED;
    case UCS_ERR_TIMED_OUT: return DDL_ERR_TIMEOUT;
    case UCS_ERR_CANCELED: return DDL_ERR_ABORTED;
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE: return DDL_ERR_PEER;
    default: return DDL_ERR_TRANSPORT;
    }
}

ddl_status_t ddl_tl_init(void **addr, size_t *addr_len)
{
    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK)
        return ddl_fail(DDL_ERR_TRANSPORT, "cannot read the UCX configuration: %s (check UCX_* "
                        "variables)", ucs_status_string(st));
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
        /* RMA: memory keys, so that ranks of a node can map each other's
         * ddl_mem_alloc() buffers (ucp_rkey_ptr); no transfer uses it */
        .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA,
        .estimated_num_eps = (size_t)ddl_ctx.size,
    };
    st = ucp_init(&params, cfg, &ddl_ctx.ucp);
    ucp_config_release(cfg);
    if (st != UCS_OK)
        return ddl_fail(DDL_ERR_TRANSPORT, "ucp_init failed: %s", ucs_status_string(st));
    /* whether this UCX moves CUDA memory itself (its cuda transports are
     * loaded): the GPU-direct rings need it on every rank (gpu.c) */
    ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    if (ucp_context_query(ddl_ctx.ucp, &ca) == UCS_OK)
        ddl_ctx.ucx_cuda = (ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    ddl_debug("UCX: CUDA memory %s", ddl_ctx.ucx_cuda ? "supported (GPU-direct transports "
              "loaded)" : "not supported by this UCX build");

    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SINGLE,
    };
    st = ucp_worker_create(ddl_ctx.ucp, &wp, &ddl_ctx.worker);
    if (st != UCS_OK) {
        ucp_cleanup(ddl_ctx.ucp);
        ddl_ctx.ucp = NULL;
        return ddl_fail(DDL_ERR_TRANSPORT, "ucp_worker_create failed: %s", ucs_status_string(st));
    }
    ucp_address_t *a;
    st = ucp_worker_get_address(ddl_ctx.worker, &a, addr_len);
    if (st != UCS_OK) {
        ddl_tl_fini();
        return ddl_fail(DDL_ERR_TRANSPORT, "ucp_worker_get_address failed: %s",
                        ucs_status_string(st));
    }
    *addr = a;
    return DDL_OK;
}

void ddl_tl_release_address(void *addr)
{
    if (addr && ddl_ctx.worker)
        ucp_worker_release_address(ddl_ctx.worker, addr);
}

static ucp_ep_h get_ep(int world_peer, ddl_status_t *st)
{
    if (ddl_ctx.eps[world_peer])
        return ddl_ctx.eps[world_peer];
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .address = (const ucp_address_t *)(ddl_ctx.peer_addrs + ddl_ctx.peer_off[world_peer]),
        /* Not UCP_ERR_HANDLING_MODE_PEER: in UCX 1.13 no shared-memory
         * transport supports it, so it would push every transfer inside a
         * node onto TCP (measured: 4x slower).  So UCX does not report a
         * dead peer: the supervisor must abort the communicator (ddlrun
         * stops the whole job; under srun --ddl the agents abort it). */
        .err_mode = UCP_ERR_HANDLING_MODE_NONE,
    };
    ucs_status_t us = ucp_ep_create(ddl_ctx.worker, &ep, &ddl_ctx.eps[world_peer]);
    if (us != UCS_OK) {
        ddl_ctx.eps[world_peer] = NULL;
        *st = ddl_fail(from_ucs(us), "cannot connect to rank %d: %s", world_peer,
                       ucs_status_string(us));
        return NULL;
    }
    return ddl_ctx.eps[world_peer];
}

ddl_status_t ddl_tl_mem_alloc(size_t len, void **addr, void **memh)
{
    ucp_mem_map_params_t p = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        .address = NULL,
        .length = len,
        .flags = UCP_MEM_MAP_ALLOCATE,
    };
    ucp_mem_h mh;
    ucs_status_t us = ucp_mem_map(ddl_ctx.ucp, &p, &mh);
    if (us != UCS_OK)
        return ddl_fail(from_ucs(us), "UCX cannot allocate %zu bytes: %s", len,
                        ucs_status_string(us));
    ucp_mem_attr_t a = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    us = ucp_mem_query(mh, &a);
    if (us != UCS_OK) {
        ucp_mem_unmap(ddl_ctx.ucp, mh);
        return ddl_fail(from_ucs(us), "ucp_mem_query failed: %s", ucs_status_string(us));
    }
    *addr = a.address;
    *memh = mh;
    return DDL_OK;
}

size_t ddl_tl_rkey_pack(void *memh, void *buf, size_t cap)
{
    void *rk;
    size_t len;
    if (ucp_rkey_pack(ddl_ctx.ucp, memh, &rk, &len) != UCS_OK)
        return 0;
    if (len > cap)
        len = 0;
    else
        memcpy(buf, rk, len);
    ucp_rkey_buffer_release(rk);
    return len;
}

void *ddl_tl_map_peer(int world_peer, const void *rkey, uint64_t raddr, void **rkh)
{
    ddl_status_t st;
    ucp_ep_h ep = get_ep(world_peer, &st);
    ucp_rkey_h rk;
    void *ptr = NULL;
    *rkh = NULL;
    if (!ep || ucp_ep_rkey_unpack(ep, rkey, &rk) != UCS_OK)
        return NULL;
    if (ucp_rkey_ptr(rk, raddr, &ptr) != UCS_OK || !ptr) {
        ucp_rkey_destroy(rk);
        return NULL;
    }
    *rkh = rk;
    return ptr;
}

void ddl_tl_unmap_peer(void *rkh)
{
    if (rkh)
        ucp_rkey_destroy(rkh);
}

static int world_of(const ddl_comm_t *comm, int r)
{
    return comm->world_ranks ? comm->world_ranks[r] : r;
}

static ddl_status_t post_result(void *ptr, void **req, const char *what, int peer)
{
    if (ptr == NULL) {
        *req = NULL;
        return DDL_OK;
    }
    if (UCS_PTR_IS_ERR(ptr)) {
        ucs_status_t us = UCS_PTR_STATUS(ptr);
        *req = NULL;
        return ddl_fail(from_ucs(us), "%s rank %d failed: %s", what, peer, ucs_status_string(us));
    }
    *req = ptr;
    return DDL_OK;
}

/* set_memh: hand UCX the registration of buf if the program made one.
 * Small transfers are copied by UCX anyway. */
static void set_memh(ucp_request_param_t *p, const void *buf, size_t len)
{
    if (len < DDL_MEMH_MIN_BYTES)
        return;
    void *memh = ddl_mem_lookup(buf, len);
    if (memh) {
        p->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        p->memh = memh;
    }
}

ddl_status_t ddl_tl_isend(ddl_comm_t *comm, int dst, const void *buf, size_t len, uint64_t tag,
                          void **req)
{
    ddl_status_t st = DDL_OK;
    int peer = world_of(comm, dst);
    ucp_ep_h ep = get_ep(peer, &st);
    if (!ep)
        return st;
    ucp_request_param_t p = {0};
    set_memh(&p, buf, len);
    return post_result(ucp_tag_send_nbx(ep, buf, len, tag, &p), req, "send to", peer);
}

ddl_status_t ddl_tl_irecv(ddl_comm_t *comm, void *buf, size_t len, uint64_t tag, void **req)
{
    ucp_request_param_t p = {0};
    set_memh(&p, buf, len);
    int peer = world_of(comm, (int)(tag & 0xffffff));
    return post_result(ucp_tag_recv_nbx(ddl_ctx.worker, buf, len, tag, UINT64_MAX, &p), req,
                       "receive from", peer);
}

void ddl_tl_abandon(void **reqs, int n)
{
    for (int i = 0; i < n; i++) {
        if (!reqs[i])
            continue;
        ucp_request_cancel(ddl_ctx.worker, reqs[i]);
        ucp_request_free(reqs[i]);
        reqs[i] = NULL;
    }
}

ddl_status_t ddl_tl_waitall(ddl_comm_t *comm, void **reqs, int n)
{
    ddl_status_t result = DDL_OK;
    int idle = 0;
    for (;;) {
        int pending = 0;
        for (int i = 0; i < n; i++) {
            if (!reqs[i])
                continue;
            ucs_status_t us = ucp_request_check_status(reqs[i]);
            if (us == UCS_INPROGRESS) {
                pending++;
                continue;
            }
            if (us != UCS_OK && result == DDL_OK)
                result = ddl_fail(from_ucs(us), "transfer failed: %s", ucs_status_string(us));
            ucp_request_free(reqs[i]);
            reqs[i] = NULL;
        }
        if (!pending)
            return result;
        if (result == DDL_OK && ddl_is_aborted(comm))
            result = ddl_comm_check_abort(comm);
        if (result != DDL_OK) {
            ddl_tl_abandon(reqs, n);
            return result;
        }
        if (ucp_worker_progress(ddl_ctx.worker))
            idle = 0;
        else if (++idle > DDL_SPIN_BEFORE_YIELD) {
            ddl_beat(0, 0); /* waiting for a peer: alive, not hung */
            ddl_agent_notice(); /* ... unless the agents say this generation is over */
            sched_yield();
        }
    }
}

ddl_status_t ddl_tl_sendrecv(ddl_comm_t *comm, uint32_t seq, int dst, const void *sbuf,
                             size_t slen, int src, void *rbuf, size_t rlen)
{
    void *reqs[2] = {NULL, NULL};
    ddl_status_t st = ddl_tl_irecv(comm, rbuf, rlen, ddl_tag(comm, seq, src), &reqs[0]);
    if (st != DDL_OK)
        return st;
    st = ddl_tl_isend(comm, dst, sbuf, slen, ddl_tag(comm, seq, comm->rank), &reqs[1]);
    if (st != DDL_OK) {
        ddl_tl_abandon(reqs, 1);
        return st;
    }
    return ddl_tl_waitall(comm, reqs, 2);
}

/* close_eps: flush and close every endpoint at once (force-close after an
 * abort: a flush could wait for a peer that is gone), giving up on those
 * that have not closed after a bounded number of progress calls. */
static void close_eps(void)
{
    const int64_t limit = 200000; /* progress iterations, then cancel */
    int force = atomic_load(&ddl_ctx.world.aborted) != 0;
    void **reqs = calloc((size_t)ddl_ctx.size, sizeof *reqs);
    for (int i = 0; i < ddl_ctx.size; i++) {
        if (!ddl_ctx.eps[i])
            continue;
        ucp_request_param_t p = {0};
        if (force || !reqs) {
            p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            p.flags = UCP_EP_CLOSE_FLAG_FORCE;
        }
        void *req = ucp_ep_close_nbx(ddl_ctx.eps[i], &p);
        ddl_ctx.eps[i] = NULL;
        if (req && UCS_PTR_IS_PTR(req)) {
            if (reqs)
                reqs[i] = req;
            else
                ucp_request_free(req); /* forced: completes on its own */
        }
    }
    for (int64_t spins = 0; reqs; spins++) {
        int busy = 0;
        for (int i = 0; i < ddl_ctx.size; i++) {
            if (!reqs[i])
                continue;
            if (ucp_request_check_status(reqs[i]) != UCS_INPROGRESS) {
                ucp_request_free(reqs[i]);
                reqs[i] = NULL;
            } else if (spins == limit) {
                ucp_request_cancel(ddl_ctx.worker, reqs[i]);
                ddl_debug("endpoint to rank %d did not close cleanly", i);
                busy = 1;
            } else {
                busy = 1;
            }
        }
        if (!busy)
            break;
        ucp_worker_progress(ddl_ctx.worker);
        if (spins > limit)
            sched_yield();
    }
    free(reqs);
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
        ucp_worker_progress(ddl_ctx.worker);
        struct pollfd pf = {.fd = ddl_ctx.agent_fd, .events = POLLIN};
        if (poll(&pf, 1, 1) > 0) {
            if (ddl_proto_recv(ddl_ctx.agent_fd, &m, 5000, &err) == 0)
                ddl_msg_clear(&m);
            return;
        }
    }
    ddl_debug("rank %d: the closing fence did not complete within 30 s", ddl_ctx.rank);
}

void ddl_tl_fini(void)
{
    if (ddl_ctx.eps)
        close_eps();
    if (ddl_ctx.initialized && ddl_ctx.worker && ddl_ctx.agent_fd >= 0 && ddl_ctx.size > 1 &&
        !atomic_load(&ddl_ctx.world.aborted))
        agent_fence();
    if (ddl_ctx.worker)
        ucp_worker_destroy(ddl_ctx.worker);
    if (ddl_ctx.ucp)
        ucp_cleanup(ddl_ctx.ucp);
    ddl_ctx.worker = NULL;
    ddl_ctx.ucp = NULL;
}
