/* ddl_int.h: libddl's private state shared by its files: the process-wide
 * context (identity, agent connection, the transport), the communicator
 * struct, the transport calls the algorithms are written against, and the
 * local reduction kernels.  No UCX header is reachable from here: only
 * ucx.c includes UCX (the build checks it, see local.mk). */
#ifndef DDL_INT_H
#define DDL_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include "ddl.h"
#include "transport.h"
#include "proto.h"       /* ddl_msg_t: the agent's notices */
#include "ddl_limits.h" /* DDL_RING_WINDOW_MAX, DDL_SEGMENT_BYTES_DEFAULT */

struct ddl_comm {
    int rank, size;
    uint16_t id;       /* distinguishes communicators in message tags */
    uint32_t seq;      /* collective sequence number, same on every rank */
    int *world_ranks;  /* comm rank -> world rank; NULL means identity */
    atomic_int aborted;      /* set by ddl_comm_abort(), from any thread */
    char abort_reason[512];  /* written once, before aborted is set */
    atomic_int pending;      /* queued or running requests on this comm */
    ddl_tl_t *tl;            /* the transport its messages travel by */
};

/* One collective, as posted: what the engine (or the inline path) runs. */
typedef enum {
    DDL_OPK_ALLREDUCE,
    DDL_OPK_BCAST,
    DDL_OPK_BARRIER,
    DDL_OPK_REDUCE_SCATTER, /* count = elements per rank's block */
    DDL_OPK_ALLGATHER,      /* count = elements per rank's block */
    DDL_OPK_REDUCE,
} ddl_opkind_t;

typedef struct {
    ddl_opkind_t kind;
    ddl_comm_t *comm;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    ddl_dtype_t dtype;
    ddl_op_t op;
    int root;
    void *stream;      /* a cudaStream_t the operation is ordered on, or NULL */
    void *stream_ev;   /* gpu.c: the stream's point this operation follows */
    void *stream_gate; /* gpu.c: holds the stream's later work until done */
} ddl_opdesc_t;

struct ddl_request {
    ddl_opdesc_t d;
    atomic_int done;        /* 1 once status is final */
    ddl_status_t status;
    int detached;           /* freed by the engine on completion (under eng.mu) */
    char err[512];          /* the detail text of a failure */
    double run_us;          /* how long the progress thread ran it */
    uint64_t bytes_sent;    /* what this rank's transport sent meanwhile */
    struct ddl_request *next;
};

/* The progress engine: a thread started by the first non-blocking call. */
typedef struct {
    int started;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work;  /* new request or shutdown */
    pthread_cond_t done;  /* some request completed */
    ddl_request_t *head, *tail;
    int shutdown;
} ddl_engine_t;

typedef struct {
    int initialized;
    int rank, size, local_rank, local_size, node_id, nnodes;
    uint32_t gen;
    int agent_fd;
    int boot_timeout_s; /* DDL_BOOTSTRAP_TIMEOUT as ddl_init() read it (with an agent) */

    ddl_tl_t *tl;         /* the transport (ucx.c), NULL in a world of one */
    int ucx_cuda;         /* UCX reports CUDA memory support (GPU-direct) */
    uint8_t *peer_addrs;  /* every rank's UCX worker address, back to back */
    size_t *peer_off;     /* offset of rank i's address in peer_addrs */

    ddl_comm_t world;
    ddl_comm_t node;   /* ranks on this node */
    ddl_comm_t cross;  /* ranks with this local rank, one per node */
    int hier_ok;       /* several nodes, each with node.size > 1 ranks */
    int hier_shape;    /* several nodes, the same number (>= 1) of ranks on each,
                        * numbered node by node (the GPU hierarchical path) */
    int *node_of;      /* world rank -> node id */
    uint32_t next_comm_id;
    ddl_engine_t eng;
} ddl_ctx_t;

/* Communicator ids (16 bits of every tag). */
#define DDL_COMM_ID_WORLD 0
#define DDL_COMM_ID_NODE 1
#define DDL_COMM_ID_CROSS 2
#define DDL_COMM_ID_FIRST_SPLIT 3

/* ddl_comms_build: the node and cross communicators from every world
 * rank's node id and local rank (comm.c); ddl_comms_release frees them. */
ddl_status_t ddl_comms_build(const int *node_of, const int *local_of);
void ddl_comms_release(void);

extern ddl_ctx_t ddl_ctx;

/* ddl_fail: record the detail text for ddl_last_error(), log it at debug
 * level, and return st (so failure paths are one line). */
ddl_status_t ddl_fail(ddl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void ddl_clear_error(void);

/* ---- the UCX transport (ucx.c) ----
 * ddl_ucx_init: context, worker (sized for ddl_ctx.size peers) and this
 * worker's address (*addr, released with ddl_ucx_release_address); the
 * endpoints connect on first use to the addresses in ddl_ctx.peer_addrs.
 * Returns the transport instance in *tl.  ddl_ucx_close: flush and close
 * every endpoint (force: without waiting for peers, after an abort);
 * ddl_ucx_progress: one round of progress; ddl_ucx_fini: destroy the worker
 * and context (after ddl_ucx_close, and after every peer closed its own).
 * ddl_ucx_set_memh_lookup: how the transport finds the registration of a
 * buffer (mem.c's ddl_mem_lookup), so that it never calls up itself. */
ddl_status_t ddl_ucx_init(void **addr, size_t *addr_len, ddl_tl_t **tl);
void ddl_ucx_release_address(void *addr);
void ddl_ucx_close(int force);
int ddl_ucx_progress(void);
void ddl_ucx_fini(void);
void ddl_ucx_set_memh_lookup(void *(*lookup)(const void *buf, size_t len));

/* Registered and mapped memory through UCX (mem.c): ddl_ucx_mem_register
 * maps buf[0, len) for transfers (*memh for ddl_ucx_mem_unmap);
 * ddl_ucx_mem_alloc allocates len bytes that other ranks of the node can map
 * (*memh: the same);
 * ddl_ucx_rkey_pack copies memh's packed key into buf (cap bytes) and returns
 * its length, 0 if it fails or does not fit; ddl_ucx_map_peer unpacks a
 * world peer's key and returns where its address raddr is mapped here, or
 * NULL if UCX cannot map it (*rkh to release with ddl_ucx_unmap_peer). */
ddl_status_t ddl_ucx_mem_register(void *buf, size_t len, void **memh);
ddl_status_t ddl_ucx_mem_alloc(size_t len, void **addr, void **memh);
void ddl_ucx_mem_unmap(void *memh);
size_t ddl_ucx_rkey_pack(void *memh, void *buf, size_t cap);
void *ddl_ucx_map_peer(int world_peer, const void *rkey, uint64_t raddr, void **rkh);
void ddl_ucx_unmap_peer(void *rkh);

/* ---- the transport as the algorithms see it (transport.c) ---- */
/* A tag names the communicator, the collective's sequence number and the
 * sending comm rank, so that concurrent collectives never match each other. */
static inline uint64_t ddl_tag(const ddl_comm_t *comm, uint32_t seq, int src)
{
    return ((uint64_t)comm->id << 48) | ((uint64_t)(seq & 0xffffff) << 24) |
           (uint64_t)(src & 0xffffff);
}

static inline int ddl_world_of(const ddl_comm_t *comm, int r)
{
    return comm->world_ranks ? comm->world_ranks[r] : r;
}

/* Post a send to / receive from a comm rank (the receive's source is the
 * sender named in the tag).  *req is NULL if the operation completed at
 * once.  Errors are recorded with ddl_fail(). */
static inline ddl_status_t ddl_tl_isend(ddl_comm_t *comm, int dst, const void *buf, size_t len,
                                        uint64_t tag, void **req)
{
    atomic_fetch_add_explicit(&comm->tl->bytes_sent, len, memory_order_relaxed);
    return comm->tl->ops->isend(comm->tl, ddl_world_of(comm, dst), buf, len, tag, req);
}

static inline ddl_status_t ddl_tl_irecv(ddl_comm_t *comm, void *buf, size_t len, uint64_t tag,
                                        void **req)
{
    return comm->tl->ops->irecv(comm->tl, ddl_world_of(comm, (int)(tag & 0xffffff)), buf, len,
                                tag, req);
}

/* Progress until every non-NULL request in reqs[0..n) completes; sets them
 * to NULL.  Returns DDL_ERR_ABORTED as soon as comm is aborted, and the
 * error of a request that the transport completes with one; then the
 * remaining requests are cancelled (receives) or abandoned to the
 * transport (sends) without waiting.  While nothing progresses it calls
 * the transport's idle hook and yields the CPU. */
ddl_status_t ddl_tl_waitall(ddl_comm_t *comm, void **reqs, int n);

/* ddl_tl_waitall_bg: the same for a thread of libddl's own beside the
 * caller's (the checkpoint thread): it never calls the idle hook (the
 * agent's connection belongs to the caller's thread), sleeps 50 us between
 * rounds without progress instead of yielding, and also gives up with
 * DDL_ERR_ABORTED once *cancel (if not NULL) is set. */
ddl_status_t ddl_tl_waitall_bg(ddl_comm_t *comm, void **reqs, int n, atomic_int *cancel);

/* ddl_tl_abandon: stop waiting for reqs[0..n) after a failure or abort:
 * cancel the receives, hand every request back to the transport (which
 * frees it when it completes) and set them to NULL.  Never blocks. */
void ddl_tl_abandon(ddl_comm_t *comm, void **reqs, int n);

/* Send sbuf to dst and receive rbuf from src, both with this collective's
 * seq, and wait for both. */
ddl_status_t ddl_tl_sendrecv(ddl_comm_t *comm, uint32_t seq, int dst, const void *sbuf,
                             size_t slen, int src, void *rbuf, size_t rlen);

/* ---- execution (coll.c, engine.c) ---- */
/* ddl_opkind_str: "allreduce" etc. */
const char *ddl_opkind_str(ddl_opkind_t k);
/* ddl_validate: check a descriptor before it is run or queued. */
ddl_status_t ddl_validate(const ddl_opdesc_t *d);
/* ddl_execute: run a validated collective to completion in this thread
 * (abort check, heartbeat, device buffers staged, then ddl_execute_host);
 * ddl_execute_host: the algorithms alone, on host buffers. */
ddl_status_t ddl_execute(const ddl_opdesc_t *d);
ddl_status_t ddl_execute_host(const ddl_opdesc_t *d);
/* ddl_engine_post: queue d for the progress thread (started on first use). */
ddl_status_t ddl_engine_post(const ddl_opdesc_t *d, ddl_request_t **req);
/* ddl_wait_uncounted: ddl_wait without counting the time as waited (for
 * callers that count it themselves). */
ddl_status_t ddl_wait_uncounted(ddl_request_t *req, int timeout_ms);
/* ddl_engine_in_progress_thread: the caller is the progress thread. */
int ddl_engine_in_progress_thread(void);
/* ddl_engine_stop: finish queued requests and join the thread. */
void ddl_engine_stop(void);
/* ddl_engine_abort_queued: complete every queued (not yet running) request
 * on comm (on every communicator if comm is the world) with
 * DDL_ERR_ABORTED. */
void ddl_engine_abort_queued(ddl_comm_t *comm);
/* ddl_is_aborted (context.c): comm, or the world it belongs to, was
 * aborted. */
int ddl_is_aborted(ddl_comm_t *comm);
/* ddl_comm_check_abort: DDL_ERR_ABORTED with the reason if comm or the
 * world is aborted. */
ddl_status_t ddl_comm_check_abort(ddl_comm_t *comm);

/* ---- reductions (reduce.c) ---- */
/* inout[i] = in[i] (op) inout[i] for i < count.  op must not be DDL_AVG. */
void ddl_reduce_local(void *inout, const void *in, size_t count, ddl_dtype_t dtype, ddl_op_t op);
/* The same with the operand order chosen: in_first ? in (op) inout :
 * inout (op) in.  Partners that both put the lower-ranked block first get
 * the same bits even where op is not bitwise commutative (min/max of -0/+0). */
void ddl_reduce_ordered(void *inout, const void *in, size_t count, ddl_dtype_t dtype,
                        ddl_op_t op, int in_first);
/* IEEE half and bfloat16 <-> float, rounding to nearest even. */
float ddl_half_to_float(uint16_t h);
uint16_t ddl_float_to_half(float f);
float ddl_bf16_to_float(uint16_t b);
uint16_t ddl_float_to_bf16(float f);
/* buf[i] /= divisor (floating-point types only). */
void ddl_scale_local(void *buf, size_t count, ddl_dtype_t dtype, double divisor);
/* DDL_OK if (dtype, op) is offered, else the error with its detail text. */
ddl_status_t ddl_check_dtype_op(ddl_dtype_t dtype, ddl_op_t op);

/* ---- algorithms ---- */
/* Tuning read from the environment at ddl_init() (select.c). */
typedef struct {
    size_t seg_bytes; /* DDL_SEGMENT_BYTES: pipeline segment of the ring */
    int window;       /* DDL_RING_WINDOW: receives posted ahead, <= MAX */
} ddl_tune_t;
extern ddl_tune_t ddl_tune;

/* ddl_block_off: first element of block b when count elements are split in
 * n balanced blocks (the first count % n blocks get one more). */
static inline size_t ddl_block_off(size_t count, int n, int b)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n;
    return (size_t)b * base + ((size_t)b < rem ? (size_t)b : rem);
}

/* Ring pieces for the composite algorithms (hierarchical): a balanced
 * reduce-scatter leaving block comm->rank final in buf (no DDL_AVG
 * scaling), an allgather of those blocks, and an allreduce whose DDL_AVG
 * divides by avg_divisor.  ddl_ring_scratch_bytes: the scratch the
 * reduce-scatter needs for elements of es bytes. */
ddl_status_t ddl_ring_reduce_scatter_inplace(ddl_comm_t *comm, void *buf, size_t count,
                                             ddl_dtype_t dtype, ddl_op_t op);
ddl_status_t ddl_ring_allgather_inplace(ddl_comm_t *comm, void *buf, size_t count, size_t es);
ddl_status_t ddl_ring_allreduce_part(ddl_comm_t *comm, void *buf, size_t count,
                                     ddl_dtype_t dtype, ddl_op_t op, int avg_divisor);
size_t ddl_ring_scratch_bytes(size_t es);

ddl_status_t ddl_allreduce_ring(ddl_comm_t *comm, void *buf, size_t count, ddl_dtype_t dtype,
                                ddl_op_t op);
ddl_status_t ddl_allreduce_rd(ddl_comm_t *comm, void *buf, size_t count, ddl_dtype_t dtype,
                              ddl_op_t op);
ddl_status_t ddl_reduce_scatter_ring(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     size_t recvcount, ddl_dtype_t dtype, ddl_op_t op);
ddl_status_t ddl_allgather_ring(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                size_t sendcount, ddl_dtype_t dtype);
ddl_status_t ddl_reduce_ring(ddl_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                             ddl_dtype_t dtype, ddl_op_t op, int root);

/* Folding a world that is not a power of two (allreduce_rd.c), shared by
 * recursive doubling and Rabenseifner: ddl_pow2_below(n) is the largest
 * power of two p' <= n; of the first 2(n - p') ranks each even one hands
 * its buffer to the odd one above (ddl_fold_in, which sets *v to the
 * rank's place among the p' participants, or -1 for a rank folded out) and
 * gets the result back at the end (ddl_fold_out); ddl_fold_peer maps a
 * participant back to its comm rank. */
int ddl_pow2_below(int n);
ddl_status_t ddl_fold_in(ddl_comm_t *comm, uint32_t seq, void *buf, void *tmp, size_t count,
                         ddl_dtype_t dtype, ddl_op_t op, int *v);
ddl_status_t ddl_fold_out(ddl_comm_t *comm, uint32_t seq, void *buf, size_t bytes);
int ddl_fold_peer(int v, int rem);
ddl_status_t ddl_allreduce_rabenseifner(ddl_comm_t *comm, void *buf, size_t count,
                                        ddl_dtype_t dtype, ddl_op_t op);
/* ddl_allreduce_hier: the two-level multi-ring on the world communicator:
 * ring reduce-scatter inside each node, one inter-node ring per local rank
 * on its block (over the cross communicator), ring allgather inside the
 * node; DDL_AVG divides by world_size.  Only when ddl_hier_possible(comm)
 * (coll.c passes the world's node and cross communicators). */
ddl_status_t ddl_allreduce_hier(ddl_comm_t *node, ddl_comm_t *cross, int world_size, void *buf,
                                size_t count, ddl_dtype_t dtype, ddl_op_t op);

/* Allreduce algorithms, selectable with DDL_ALLREDUCE_ALGO. */
typedef enum {
    DDL_ALGO_AUTO = 0,
    DDL_ALGO_RING = 1,
    DDL_ALGO_RD = 2,
    DDL_ALGO_RABENSEIFNER = 3,
    DDL_ALGO_HIER = 4,
} ddl_algo_t;
const char *ddl_algo_name(ddl_algo_t a);
/* ddl_allreduce_select: the algorithm for this call (override or model);
 * the same on every rank of comm for the same bytes. */
ddl_algo_t ddl_allreduce_select(const ddl_comm_t *comm, size_t bytes);
/* ddl_algo_from_env: parse DDL_ALLREDUCE_ALGO, DDL_BCAST_ALGO,
 * DDL_SEGMENT_BYTES and DDL_RING_WINDOW at init; DDL_ERR_INVALID with the accepted values for
 * anything else. */
ddl_status_t ddl_algo_from_env(void);
/* ddl_select_measure: collective over the world at the end of ddl_init()
 * (automatic choice only): measure or load (DDL_TUNE_FILE) the model's
 * link parameters per level and agree on them. */
ddl_status_t ddl_select_measure(void);
/* ddl_hier_possible: comm is the world and spans several nodes with the
 * same number of ranks (more than one) on each. */
int ddl_hier_possible(const ddl_comm_t *comm);
/* ddl_comm_multi_node: some two members of comm are on different nodes. */
int ddl_comm_multi_node(const ddl_comm_t *comm);
/* ddl_scratch (context.c): the calling thread's scratch buffer of at least
 * bytes, NULL without memory (grown, never shrunk; freed by
 * ddl_scratch_free in that thread, at finalize and by the progress thread,
 * or when the thread ends). */
void *ddl_scratch(size_t bytes);
void ddl_scratch_free(void);
ddl_status_t ddl_bcast_binomial(ddl_comm_t *comm, void *buf, size_t bytes, int root);
ddl_status_t ddl_bcast_chain(ddl_comm_t *comm, void *buf, size_t bytes, int root);
/* Broadcast algorithms, selectable with DDL_BCAST_ALGO. */
typedef enum {
    DDL_BCAST_AUTO = 0,
    DDL_BCAST_BINOMIAL = 1,
    DDL_BCAST_CHAIN = 2,
} ddl_bcast_algo_t;
/* ddl_bcast_select: the broadcast algorithm for this call (override or
 * model); the same on every rank of comm for the same bytes. */
ddl_bcast_algo_t ddl_bcast_select(const ddl_comm_t *comm, size_t bytes);
ddl_status_t ddl_barrier_dissemination(ddl_comm_t *comm);

/* ddl_dispatch (dispatch.c): run d on host buffers with the algorithms
 * that how's functions choose (called only where an algorithm runs: not
 * for a count of 0 nor in a world of one), node and cross for the
 * two-level allreduce, whose DDL_AVG divides by world_size. */
typedef struct {
    ddl_algo_t (*allreduce)(const ddl_comm_t *comm, size_t bytes);
    ddl_bcast_algo_t (*bcast)(const ddl_comm_t *comm, size_t bytes);
    ddl_comm_t *node, *cross;
    int world_size;
} ddl_dispatch_t;
ddl_status_t ddl_dispatch(const ddl_opdesc_t *d, const ddl_dispatch_t *how);

/* ---- registered buffers (mem.c) ---- */
/* ddl_mem_lookup: the UCX memory handle of a registration that contains
 * buf[0, len), or NULL.  Thread-safe.  ddl_mem_mapped_ops: the three
 * functions below, for the transport instance (ddl_tl_t.mapped). */
void *ddl_mem_lookup(const void *buf, size_t len);
/* Mapped allocations (ddl_mem_alloc): ddl_mem_mapped_count is how many
 * exist that every rank's node peers have mapped (the same number on every
 * rank, since allocation is collective).  ddl_mem_mapped_at: 1 if
 * buf[0, len) lies in one, with its serial number (the same on every rank)
 * and buf's offset in it.  ddl_mem_peer_view: where world rank peer's
 * allocation serial, from offset off, is mapped in this process, or NULL.
 * Thread-safe. */
int ddl_mem_mapped_count(void);
/* Below this many bytes per ring phase the handshake that finds mapped
 * neighbours is not worth its message (and auto selection ignores them). */
#define DDL_MAPPED_MIN_BYTES 32768
int ddl_mem_mapped_at(const void *buf, size_t len, uint32_t *serial, uint64_t *off);
const char *ddl_mem_peer_view(uint32_t serial, int peer, uint64_t off);
extern const ddl_mapped_ops_t ddl_mem_mapped_ops;
/* ddl_mem_release_all: unmap every registration left (ddl_finalize). */
void ddl_mem_release_all(void);

/* ---- heartbeats to the supervisor (heartbeat.c) ----
 * ddl_beat_init (ddl_init): use DDL_HEARTBEAT_FD if ddl-launch gave one.
 * ddl_beat: count a collective if `collective`, and send a record if the
 * last is BEAT_MIN_MS old (or `force`).  Thread-safe, never blocks. */
void ddl_beat_init(void);
void ddl_beat(int collective, int force);
/* ddl_beat_clock_ns: CLOCK_MONOTONIC in ns.  ddl_beat_waited: count the
 * time since since_ns (a ddl_beat_clock_ns()) as waited in a collective, for
 * the agents' straggler detection.  Both thread-safe, never fail. */
int64_t ddl_beat_clock_ns(void);
void ddl_beat_waited(int64_t since_ns);

/* ddl_agent_notice (init.c): called while an operation waits for a peer;
 * at most every 10 ms, reads what the node's agent sent since: when the
 * agents end this generation (a DDL_MSG_GENERATION: restart or stop after a
 * failure elsewhere) or the agent is gone, the world is aborted, so that
 * every operation in flight returns DDL_ERR_ABORTED at once instead of
 * waiting for a peer that failed.  Thread-safe (one reader at a time; the
 * others return), never blocks for long. */
void ddl_agent_notice(void);

/* ddl_agent_lock / ddl_agent_unlock (init.c): exclusive use of the agent
 * connection (ddl_agent_notice skips its turn while another thread holds
 * it; lock waits). */
void ddl_agent_lock(void);
void ddl_agent_unlock(void);

/* ---- warm restart (warm.c) ----
 * ddl_gen_notice: a GENERATION from the agent (not FINISH): kept for
 * ddl_rejoin() when this rank opted in, and the world aborted.  The caller
 * holds the agent connection.  ddl_world_release / ddl_world_init (init.c):
 * ddl_finalize's teardown without the closing barrier, and ddl_init's
 * setup from the environment (ddl_rejoin). */
void ddl_gen_notice(ddl_msg_t *m);
/* ddl_warm_rejoining: 1 while ddl_rejoin() joins a new generation (its
 * ddl_init): bootstrap then reads the decision that follows a cancelled
 * exchange, which ddl_rejoin joins instead. */
int ddl_warm_rejoining(void);
/* ddl_fail_set_remap (status.c): from then on ddl_fail() returns
 * remap(st); warm.c's, once opted in: DDL_RESTART where a rank sees a
 * peer's failure or the end of its generation. */
void ddl_fail_set_remap(ddl_status_t (*remap)(ddl_status_t));
void ddl_world_release(void);

/* ---- stopping at a step boundary (stop.c) ----
 * ddl_stop_init: at ddl_init(): the stop state of the generation, and the
 * stop signals' handlers (under an agent, where their disposition is the
 * default); ddl_stop_fini: the handlers taken back.  ddl_stop_notice: a
 * message from the agent: 1 if it was a STOP (taken into account, STOP_AT
 * sent; the caller holds the agent connection), 0 otherwise. */
void ddl_stop_init(void);
void ddl_stop_fini(void);
int ddl_stop_notice(const ddl_msg_t *m);

/* ---- GPU planning (gpu_plan.c: pure functions, built and tested always) ----
 * Each rank's bootstrap record may carry a GPU record: its GPU's PCI
 * address, whether it can join a NCCL communicator inside its node, and, from
 * local rank 0, the NCCL unique id of that node's communicator.  The id thus
 * travels through the agents' allgather, never through PMIx. */
#define DDL_NCCL_ID_BYTES 128   /* sizeof(ncclUniqueId) */
#define DDL_GPU_REC_MAX (24 + DDL_NCCL_ID_BYTES)
#define DDL_GPU_REC_NCCL 0x1u   /* this rank can join its node's NCCL communicator */
#define DDL_GPU_REC_ID 0x2u     /* set by the encoder: the NCCL id follows */
#define DDL_GPU_REC_DIRECT 0x4u /* this rank's UCX moves CUDA memory and it has
                                 * device reductions: GPU-direct rings */
typedef struct {
    int32_t pci_domain, pci_bus, pci_device; /* this rank's GPU */
    uint32_t flags;                          /* DDL_GPU_REC_* */
    uint32_t chunk_bytes;                    /* its DDL_GPU_CHUNK_BYTES */
} ddl_gpu_rec_t;
/* ddl_gpu_rec_encode: r (and nccl_id, DDL_NCCL_ID_BYTES, or NULL) into out;
 * returns the length, 0 if cap is too small.  ddl_gpu_rec_decode: the
 * reverse; *nccl_id points into in (NULL without an id); -1 if malformed. */
size_t ddl_gpu_rec_encode(const ddl_gpu_rec_t *r, const void *nccl_id, uint8_t *out, size_t cap);
int ddl_gpu_rec_decode(const uint8_t *in, size_t len, ddl_gpu_rec_t *r, const uint8_t **nccl_id);
/* ddl_gpu_plan: from every world rank's GPU record (recs[i] NULL or lens[i]
 * 0 for none): whether my_node can form a NCCL communicator (every rank of
 * it has its own GPU, at least two ranks, local rank 0 sent the id: nccl_id
 * points into recs), whether any node or every node can, whether every
 * rank can run GPU-direct rings (direct_all), whether every rank's local
 * rank is its place among its node's ranks in world order (world_ordered:
 * NCCL ranks are then world ranks on one node), and the smallest pipeline
 * chunk any rank asked for (chunk_bytes, 0 if no record), so that the
 * ranks of a ring cut the same chunks.  The same answer on every rank. */
typedef struct {
    int nccl_node, nccl_any, nccl_all, direct_all, world_ordered;
    uint32_t chunk_bytes;
    const uint8_t *nccl_id;
} ddl_gpu_plan_t;
void ddl_gpu_plan(int n, const int *node_of, const int *local_of, const uint8_t *const *recs,
                  const size_t *lens, int my_node, ddl_gpu_plan_t *p);
/* ddl_gpu_block: local rank q's block of count elements in the GPU
 * hierarchical allreduce: count / nlocal elements each (what NCCL's
 * reduce-scatter needs), the remainder added to the last block, which stays
 * contiguous with it. */
void ddl_gpu_block(size_t count, int nlocal, int q, size_t *off, size_t *len);
/* ddl_gpu_chunk_elems: the pipeline chunk, in elements, for a block of len
 * elements of es bytes: chunk_bytes, or more so that there are at most
 * max_chunks chunks; at least 1. */
size_t ddl_gpu_chunk_elems(size_t len, size_t es, size_t chunk_bytes, int max_chunks);

/* ---- CUDA device memory and NCCL (gpu.c, nccl.c; only with HAVE_CUDA) ----
 * ddl_gpu_init (ddl_init, before the bootstrap) counts the devices and
 * reads DDL_NCCL and DDL_GPU_CHUNK_BYTES (DDL_ERR_INVALID for bad values);
 * ddl_gpu_fini releases streams, events, pinned buffers and the NCCL
 * communicator.  ddl_gpu_boot_record: this rank's GPU record for the
 * bootstrap (0 bytes: none; local rank 0 creates the node's NCCL id here).
 * ddl_gpu_boot: after the exchange, join the node's NCCL communicator if the
 * plan says so (bounded by timeout_s); a failure only leaves NCCL out.
 * ddl_gpu_agree: collective over the world once it is up (only when the
 * plan's nccl_any, the same on every rank): NCCL is used only if every
 * node that should have a communicator got one.
 * ddl_gpu_execute: 0 if d involves no device memory and no stream (nothing
 * done); else 1, having run it (NCCL inside the node, the pipelined
 * hierarchical allreduce across nodes, or staged through pinned host
 * memory), its status in *st.
 * ddl_gpu_stream_prepare (posting thread): for an operation posted with a
 * CUDA stream: record the point of the stream it follows and hold the
 * stream's later work until the operation completes; ddl_gpu_stream_done
 * (whoever completes the request, exactly once) releases the stream. */
#ifdef HAVE_CUDA
/* ddl_gpu_stream_prepare also serves plain calls queued for the progress
 * thread (d->stream NULL): with device buffers it records the legacy
 * default stream's point at posting time in d->stream_ev. */
ddl_status_t ddl_gpu_init(void);
void ddl_gpu_fini(void);
int ddl_gpu_on_device(const void *p);
size_t ddl_gpu_boot_record(uint8_t *out, size_t cap);
ddl_status_t ddl_gpu_boot(int n, const int *node_of, const int *local_of,
                          const uint8_t *const *recs, const size_t *lens, int timeout_s);
ddl_status_t ddl_gpu_agree(void);
int ddl_gpu_execute(const ddl_opdesc_t *d, ddl_status_t *st);
ddl_status_t ddl_gpu_stream_prepare(ddl_opdesc_t *d);
void ddl_gpu_stream_done(ddl_opdesc_t *d);
#else
static inline ddl_status_t ddl_gpu_init(void) { return DDL_OK; }
static inline void ddl_gpu_fini(void) {}
static inline size_t ddl_gpu_boot_record(uint8_t *out, size_t cap)
{
    (void)out;
    (void)cap;
    return 0;
}
static inline ddl_status_t ddl_gpu_boot(int n, const int *node_of, const int *local_of,
                                        const uint8_t *const *recs, const size_t *lens,
                                        int timeout_s)
{
    (void)n, (void)node_of, (void)local_of, (void)recs, (void)lens, (void)timeout_s;
    return DDL_OK;
}
static inline ddl_status_t ddl_gpu_agree(void) { return DDL_OK; }
static inline int ddl_gpu_execute(const ddl_opdesc_t *d, ddl_status_t *st)
{
    (void)d;
    (void)st;
    return 0;
}
static inline void ddl_gpu_stream_done(ddl_opdesc_t *d) { (void)d; }
#endif

/* ---- the gradient exchange (gradx.c) ----
 * gradx.c is written against this backend, so that tests/unit/t_gradx
 * runs it over the loopback transport: post queues a collective (*h: its
 * handle), wait blocks until it completes and releases it (with its run
 * time and the bytes sent in it, either may be NULL), release frees a
 * handle not waited for (after an error); the two cost functions are the
 * model's times in microseconds (select.c's in libddl). */
typedef struct {
    ddl_status_t (*post)(const ddl_opdesc_t *d, void **h);
    ddl_status_t (*wait)(void *h, double *run_us, uint64_t *bytes);
    void (*release)(void *h);
    double (*allreduce_us)(const ddl_comm_t *comm, size_t bytes);
    double (*allgather_us)(const ddl_comm_t *comm, size_t bytes_per_rank);
} ddl_gradx_backend_t;
/* Tests only: when above 0, ddl_gradx_commit takes this as every rank's
 * time for its 128 x 128 x 64 GEMM instead of timing one, so that the cost
 * model's choices do not depend on the load of the machine. */
extern double ddl_gradx_test_gemm_us;

/* ddl_gradx_create_with: ddl_gradx_create() over the backend be. */
ddl_status_t ddl_gradx_create_with(ddl_comm_t *comm, ddl_op_t op, const ddl_gradx_backend_t *be,
                                   ddl_gradx_t **gx);
/* The cost model's time of the allreduce it would choose for bytes on
 * comm, and of a ring allgather of bytes_per_rank (select.c). */
double ddl_model_allreduce_us(const ddl_comm_t *comm, size_t bytes);
double ddl_model_allgather_us(const ddl_comm_t *comm, size_t bytes_per_rank);

/* ---- checkpoints (checkpoint.c) ---- */
/* ddl_ckpt_finish_pending: commit the pending async checkpoint, if any (as
 * ddl_ckpt_wait()) and free the async copy buffers kept for reuse; called
 * by ddl_finalize() before it stops the engine. */
ddl_status_t ddl_ckpt_finish_pending(void);
/* ddl_ckpt_drop_pending: the world is released (a warm restart, a failed
 * init): stop the pending async checkpoint's partner transfer, wait for its
 * thread and free it without committing (its step never becomes latest);
 * also the shard the last ddl_ckpt_restore() kept for ddl_ckpt_read().
 * Called before the transport closes; nothing if none is pending. */
void ddl_ckpt_drop_pending(void);

/* ddl_stop_returned: ddl_should_stop() returned DDL_STOP in this process
 * (stop.c), so that the stop's checkpoint also goes to the shared level and
 * ddl_finalize() keeps the node-local one. */
extern int ddl_stop_returned;

#endif
