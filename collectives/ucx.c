/* ucx.c: libddl's transport over UCX's tag API (ddl_tl_ops_t, see
 * transport.h): one context and worker per process, one endpoint per peer
 * created on first use, non-blocking send and receive, request tests and
 * progress; memory mapping for registered and mapped buffers (mem.c).
 *
 * The only file of libddl that includes UCX.  The user's UCX_* environment
 * is honoured (ucp_config_read).  UCX statuses are mapped to ddl_status_t
 * here and nowhere else.  It calls nothing above itself: the wait loop
 * (transport.c) calls the idle hook that init.c registers, and the
 * registration lookup is a function mem.c hands over
 * (ddl_ucx_set_memh_lookup).
 *
 * Threads: the worker is created UCS_THREAD_MODE_SERIALIZED and every entry
 * point below takes one mutex, so that the caller of a collective (or the
 * progress engine) and the checkpoint thread's partner copies (checkpoint.c)
 * can share it.  Uncontended, the lock costs tens of nanoseconds per call.
 */
#include "config.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

#include "ddl_int.h"
#include "env.h"
#include "log.h"

/* Transfers below this size never look up a registration. */
#define DDL_MEMH_MIN_BYTES 8192

static struct {
    ucp_context_h ucp;
    ucp_worker_h worker;
    ucp_ep_h *eps; /* world rank -> endpoint, created on first use */
    int neps;
    void *(*memh_lookup)(const void *buf, size_t len);
    /* requests given up on (an aborted operation) that UCX could not
     * cancel: sends, and receives already under way.  Until they complete
     * they hold UCX's resources, registered memory among them; after an
     * abort that may be never. */
    void **orphans;
    int norphans, orphans_cap;
    int efd; /* the worker's event descriptor (DDL_WAIT=block), else -1 */
} ucx = {.efd = -1};

/* A context that could not be cleaned up (see ddl_ucx_fini), kept
 * reachable until the process exits.  volatile: the compiler dropped the
 * store to a variable nothing reads, and valgrind reported the context
 * "definitely lost" on every rank that had aborted a transfer. */
static ucp_context_h volatile abandoned_ucp;

/* Serialises every use of the worker and the context (see the top). */
static pthread_mutex_t ucx_mu = PTHREAD_MUTEX_INITIALIZER;
#define LOCK() pthread_mutex_lock(&ucx_mu)
#define UNLOCK() pthread_mutex_unlock(&ucx_mu)

void ddl_ucx_set_memh_lookup(void *(*lookup)(const void *buf, size_t len))
{
    ucx.memh_lookup = lookup;
}

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

static ddl_tl_t ucx_tl;

ddl_status_t ddl_ucx_init(void **addr, size_t *addr_len, ddl_tl_t **tl)
{
    /* DDL_WAIT=block: a wait that sees no progress for a while sleeps on
     * UCX's events instead of yielding the CPU in a loop */
    int wait_mode = 0;
    ddl_error_t err;
    if (ddl_env_enum(DDLENV_DDL_WAIT, &wait_mode, &err) < 0)
        return ddl_fail(DDL_ERR_INVALID, "%s", err.text);
    const int block = wait_mode == 1;
    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK)
        return ddl_fail(DDL_ERR_TRANSPORT, "cannot read the UCX configuration: %s (check UCX_* "
                        "variables)", ucs_status_string(st));
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
        /* RMA: memory keys, so that ranks of a node can map each other's
         * ddl_mem_alloc() buffers (ucp_rkey_ptr); no transfer uses it */
        .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | (block ? UCP_FEATURE_WAKEUP : 0),
        .estimated_num_eps = (size_t)ddl_ctx.size,
    };
    st = ucp_init(&params, cfg, &ucx.ucp);
    ucp_config_release(cfg);
    if (st != UCS_OK)
        return ddl_fail(DDL_ERR_TRANSPORT, "ucp_init failed: %s", ucs_status_string(st));
    /* whether this UCX moves CUDA memory itself (its cuda transports are
     * loaded): the GPU-direct rings need it on every rank (gpu.c) */
    ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    if (ucp_context_query(ucx.ucp, &ca) == UCS_OK)
        ddl_ctx.ucx_cuda = (ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    ddl_debug("UCX: CUDA memory %s", ddl_ctx.ucx_cuda ? "supported (GPU-direct transports "
              "loaded)" : "not supported by this UCX build");

    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SERIALIZED,
    };
    st = ucp_worker_create(ucx.ucp, &wp, &ucx.worker);
    if (st != UCS_OK) {
        ucp_cleanup(ucx.ucp);
        ucx.ucp = NULL;
        return ddl_fail(DDL_ERR_TRANSPORT, "ucp_worker_create failed: %s", ucs_status_string(st));
    }
    if (block && (st = ucp_worker_get_efd(ucx.worker, &ucx.efd)) != UCS_OK) {
        ddl_warn("DDL_WAIT=block: UCX gives no event descriptor (%s): waits spin",
                 ucs_status_string(st));
        ucx.efd = -1;
    }
    ucx.neps = ddl_ctx.size;
    ucx.eps = calloc((size_t)ucx.neps, sizeof *ucx.eps);
    if (!ucx.eps) {
        ddl_ucx_fini();
        return ddl_fail(DDL_ERR_NOMEM, "out of memory for %d endpoints", ddl_ctx.size);
    }
    ucp_address_t *a;
    st = ucp_worker_get_address(ucx.worker, &a, addr_len);
    if (st != UCS_OK) {
        ddl_ucx_fini();
        return ddl_fail(DDL_ERR_TRANSPORT, "ucp_worker_get_address failed: %s",
                        ucs_status_string(st));
    }
    *addr = a;
    *tl = &ucx_tl;
    return DDL_OK;
}

void ddl_ucx_release_address(void *addr)
{
    if (addr && ucx.worker)
        ucp_worker_release_address(ucx.worker, addr);
}

static ucp_ep_h get_ep(int world_peer, ddl_status_t *st)
{
    if (ucx.eps[world_peer])
        return ucx.eps[world_peer];
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
    ucs_status_t us = ucp_ep_create(ucx.worker, &ep, &ucx.eps[world_peer]);
    if (us != UCS_OK) {
        ucx.eps[world_peer] = NULL;
        *st = ddl_fail(from_ucs(us), "cannot connect to rank %d: %s", world_peer,
                       ucs_status_string(us));
        return NULL;
    }
    return ucx.eps[world_peer];
}

ddl_status_t ddl_ucx_mem_register(void *buf, size_t len, void **memh)
{
    ucp_mem_map_params_t p = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = buf,
        .length = len,
    };
    ucp_mem_h mh;
    LOCK();
    ucs_status_t us = ucp_mem_map(ucx.ucp, &p, &mh);
    UNLOCK();
    if (us != UCS_OK)
        return ddl_fail(DDL_ERR_TRANSPORT, "cannot register %zu bytes at %p: %s", len, buf,
                        ucs_status_string(us));
    *memh = mh;
    return DDL_OK;
}

void ddl_ucx_mem_unmap(void *memh)
{
    LOCK();
    if (memh && ucx.ucp)
        ucp_mem_unmap(ucx.ucp, memh);
    UNLOCK();
}

ddl_status_t ddl_ucx_mem_alloc(size_t len, void **addr, void **memh)
{
    ucp_mem_map_params_t p = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        .address = NULL,
        .length = len,
        .flags = UCP_MEM_MAP_ALLOCATE,
    };
    ucp_mem_h mh;
    LOCK();
    ucs_status_t us = ucp_mem_map(ucx.ucp, &p, &mh);
    UNLOCK();
    if (us != UCS_OK)
        return ddl_fail(from_ucs(us), "UCX cannot allocate %zu bytes: %s", len,
                        ucs_status_string(us));
    ucp_mem_attr_t a = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    us = ucp_mem_query(mh, &a);
    if (us != UCS_OK) {
        LOCK();
        ucp_mem_unmap(ucx.ucp, mh);
        UNLOCK();
        return ddl_fail(from_ucs(us), "ucp_mem_query failed: %s", ucs_status_string(us));
    }
    *addr = a.address;
    *memh = mh;
    return DDL_OK;
}

size_t ddl_ucx_rkey_pack(void *memh, void *buf, size_t cap)
{
    void *rk;
    size_t len;
    LOCK();
    if (ucp_rkey_pack(ucx.ucp, memh, &rk, &len) != UCS_OK) {
        UNLOCK();
        return 0;
    }
    if (len > cap)
        len = 0;
    else
        memcpy(buf, rk, len);
    ucp_rkey_buffer_release(rk);
    UNLOCK();
    return len;
}

void *ddl_ucx_map_peer(int world_peer, const void *rkey, uint64_t raddr, void **rkh)
{
    ddl_status_t st;
    ucp_rkey_h rk;
    void *ptr = NULL;
    *rkh = NULL;
    LOCK();
    ucp_ep_h ep = get_ep(world_peer, &st);
    if (!ep || ucp_ep_rkey_unpack(ep, rkey, &rk) != UCS_OK) {
        UNLOCK();
        return NULL;
    }
    if (ucp_rkey_ptr(rk, raddr, &ptr) != UCS_OK || !ptr) {
        ucp_rkey_destroy(rk);
        UNLOCK();
        return NULL;
    }
    UNLOCK();
    *rkh = rk;
    return ptr;
}

void ddl_ucx_unmap_peer(void *rkh)
{
    if (rkh) {
        LOCK();
        ucp_rkey_destroy(rkh);
        UNLOCK();
    }
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
    void *memh = ucx.memh_lookup ? ucx.memh_lookup(buf, len) : NULL;
    if (memh) {
        p->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        p->memh = memh;
    }
}

static ddl_status_t ucx_isend(ddl_tl_t *tl, int peer, const void *buf, size_t len, uint64_t tag,
                              void **req)
{
    ddl_status_t st = DDL_OK;
    (void)tl;
    ucp_request_param_t p = {0};
    set_memh(&p, buf, len);
    LOCK();
    ucp_ep_h ep = get_ep(peer, &st);
    void *r = ep ? ucp_tag_send_nbx(ep, buf, len, tag, &p) : NULL;
    UNLOCK();
    return ep ? post_result(r, req, "send to", peer) : st;
}

static ddl_status_t ucx_irecv(ddl_tl_t *tl, int peer, void *buf, size_t len, uint64_t tag,
                              void **req)
{
    (void)tl;
    ucp_request_param_t p = {0};
    set_memh(&p, buf, len);
    LOCK();
    void *r = ucp_tag_recv_nbx(ucx.worker, buf, len, tag, UINT64_MAX, &p);
    UNLOCK();
    return post_result(r, req, "receive from", peer);
}

static ddl_status_t ucx_test(ddl_tl_t *tl, void *req, int report)
{
    (void)tl;
    LOCK();
    ucs_status_t us = ucp_request_check_status(req);
    if (us != UCS_INPROGRESS)
        ucp_request_free(req);
    UNLOCK();
    if (us == UCS_INPROGRESS)
        return DDL_INPROGRESS;
    if (us == UCS_OK)
        return DDL_OK;
    if (report)
        return ddl_fail(from_ucs(us), "transfer failed: %s", ucs_status_string(us));
    return from_ucs(us);
}

static int keep_orphan(void *req)
{
    if (ucx.norphans == ucx.orphans_cap) {
        int cap = ucx.orphans_cap ? 2 * ucx.orphans_cap : 16;
        void **o = realloc(ucx.orphans, (size_t)cap * sizeof *o);
        if (!o)
            return 0;
        ucx.orphans = o;
        ucx.orphans_cap = cap;
    }
    ucx.orphans[ucx.norphans++] = req;
    return 1;
}

/* reap_orphans: free the orphans that have completed; returns how many
 * are left. */
static int reap_orphans(void)
{
    int left = 0;
    for (int i = 0; i < ucx.norphans; i++) {
        if (ucp_request_check_status(ucx.orphans[i]) != UCS_INPROGRESS)
            ucp_request_free(ucx.orphans[i]);
        else
            ucx.orphans[left++] = ucx.orphans[i];
    }
    ucx.norphans = left;
    return left;
}

static void ucx_cancel(ddl_tl_t *tl, void *req)
{
    (void)tl;
    /* cancels a receive not yet matched (it completes at once); UCX has
     * no way to cancel a send */
    LOCK();
    ucp_request_cancel(ucx.worker, req);
    if (ucp_request_check_status(req) != UCS_INPROGRESS || !keep_orphan(req))
        ucp_request_free(req);
    UNLOCK();
}

static int ucx_progress(ddl_tl_t *tl)
{
    (void)tl;
    LOCK();
    int n = (int)ucp_worker_progress(ucx.worker);
    UNLOCK();
    return n;
}

static int ucx_wait_event(ddl_tl_t *tl, int timeout_ms)
{
    (void)tl;
    if (ucx.efd < 0)
        return 0;
    LOCK();
    ucs_status_t armed = ucp_worker_arm(ucx.worker);
    UNLOCK();
    if (armed == UCS_OK) {
        struct pollfd p = {.fd = ucx.efd, .events = POLLIN};
        (void)poll(&p, 1, timeout_ms);
    } /* else UCS_ERR_BUSY: events are waiting, progress them */
    return 1;
}

int ddl_ucx_progress(void)
{
    return ucx.worker ? ucx_progress(NULL) : 0;
}

static const ddl_tl_ops_t ucx_ops = {
    .name = "ucx",
    .isend = ucx_isend,
    .irecv = ucx_irecv,
    .test = ucx_test,
    .cancel = ucx_cancel,
    .progress = ucx_progress,
    .wait_event = ucx_wait_event,
};

static ddl_tl_t ucx_tl = {.ops = &ucx_ops};

/* ddl_ucx_close: flush and close every endpoint at once (force-close after an
 * abort: a flush could wait for a peer that is gone), giving up on those
 * that have not closed after a bounded number of progress calls. */
void ddl_ucx_close(int force)
{
    const int64_t limit = 200000; /* progress iterations, then cancel */
    if (!ucx.eps)
        return;
    void **reqs = calloc((size_t)ucx.neps, sizeof *reqs);
    for (int i = 0; i < ucx.neps; i++) {
        if (!ucx.eps[i])
            continue;
        ucp_request_param_t p = {0};
        if (force || !reqs) {
            p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            p.flags = UCP_EP_CLOSE_FLAG_FORCE;
        }
        void *req = ucp_ep_close_nbx(ucx.eps[i], &p);
        ucx.eps[i] = NULL;
        if (req && UCS_PTR_IS_PTR(req)) {
            if (reqs)
                reqs[i] = req;
            else
                ucp_request_free(req); /* forced: completes on its own */
        }
    }
    for (int64_t spins = 0; reqs; spins++) {
        int busy = 0;
        for (int i = 0; i < ucx.neps; i++) {
            if (!reqs[i])
                continue;
            if (ucp_request_check_status(reqs[i]) != UCS_INPROGRESS) {
                ucp_request_free(reqs[i]);
                reqs[i] = NULL;
            } else if (spins == limit) {
                ucp_request_cancel(ucx.worker, reqs[i]);
                ddl_debug("endpoint to rank %d did not close cleanly", i);
                busy = 1;
            } else {
                busy = 1;
            }
        }
        if (!busy)
            break;
        ucp_worker_progress(ucx.worker);
        if (spins > limit)
            sched_yield();
    }
    free(reqs);
}

void ddl_ucx_fini(void)
{
    /* requests cancelled or freed in flight (an aborted world) go back to
     * UCX's pool as they complete: let them, briefly */
    for (int i = 0; ucx.worker && i < 1000 && ucp_worker_progress(ucx.worker); i++)
        ;
    const int stuck = reap_orphans(); /* orphans exist only with a worker */
    for (int i = 0; i < ucx.norphans; i++)
        ucp_request_free(ucx.orphans[i]); /* released if they ever complete */
    free(ucx.orphans);
    ucx.orphans = NULL;
    ucx.norphans = ucx.orphans_cap = 0;
    if (ucx.worker)
        ucp_worker_destroy(ucx.worker);
    if (ucx.ucp && stuck) {
        /* their registrations are still referenced: ucp_cleanup would
         * fail an assertion in UCX's registration cache (seen with UCX's
         * CUDA transports) and abort the process */
        ddl_debug("%d transfer(s) given up on in an abort never completed: UCX's context is "
                  "left for the process's exit", stuck);
        abandoned_ucp = ucx.ucp;
    } else if (ucx.ucp) {
        ucp_cleanup(ucx.ucp);
    }
    free(ucx.eps);
    ucx.eps = NULL;
    ucx.neps = 0;
    ucx.worker = NULL;
    ucx.efd = -1;
    ucx.ucp = NULL;
}
