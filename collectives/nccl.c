/* nccl.c: NCCL inside the node and the hierarchical allreduce of device
 * buffers across nodes (built only when configure finds NCCL).
 *
 * The communicator: one per node, over the node's ranks when each has its
 * own GPU.  Local rank 0 makes the unique id before the bootstrap, the id
 * travels in its bootstrap record through the agents' allgather (never
 * PMIx), and every rank of the node joins with a non-blocking
 * ncclCommInitRankConfig, polled with a time limit.  Non-blocking mode
 * keeps every NCCL call pollable: while a NCCL kernel waits for a peer,
 * libddl still reads the agent's notices, and a failure elsewhere (or
 * ddl_comm_abort) ends in ncclCommAbort, so a restart never waits on a GPU
 * collective.
 *
 * The hierarchical allreduce (PowerAI DDL's multi-ring, on GPUs):
 *   1. NCCL reduce-scatter inside the node: local rank q holds block q of
 *      the node's sum (count / L elements each, the remainder on the last);
 *   2. block q goes to pinned host memory in chunks, each chunk is
 *      allreduced over UCX on the ring of the local ranks q of every node
 *      (one ring per local rank, on its own NIC where the placement gave it
 *      one) and copied back: the copies to the host, the network and the
 *      host reductions of different chunks overlap.  GPU-direct instead,
 *      when every rank's UCX moves CUDA memory and libddl has its device
 *      kernels (gpu_reduce.cu): the same ring on the device block, UCX
 *      sending device memory, received blocks reduced on the device;
 *   3. NCCL allgather of the blocks inside the node.
 * Block q is reduced once by NCCL, then in the ring's fixed order, then
 * only copied, so every rank ends with the same bits.
 */
#include "config.h"

/* nccl.h declares ncclGroupStart() and others without (void) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "gpu_int.h"
#include "log.h"
#include "util.h"

/* this node's communicator, NULL if none (or aborted); from the end of
 * ddl_init() on, every rank that should have one has one (ddl_gpu_agree) */
static ncclComm_t nc;

static ddl_status_t nccl_fail(ncclResult_t r, const char *what)
{
    const char *last = nc ? ncclGetLastError(nc) : NULL;
    return ddl_fail(r == ncclRemoteError ? DDL_ERR_PEER : DDL_ERR_TRANSPORT, "NCCL %s: %s%s%s",
                    what, ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

int ddl_nccl_record(void *id)
{
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) {
        ddl_warn("rank %d: ncclGetUniqueId: %s: NCCL is left out on this node", ddl_ctx.rank,
                 ncclGetErrorString(r));
        return -1;
    }
    memcpy(id, &u, DDL_NCCL_ID_BYTES);
    return 0;
}

ddl_status_t ddl_nccl_join(int nlocal, int local_rank, const void *id, int timeout_s)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclUniqueId u;
    ncclResult_t r, state = ncclInProgress;
    memcpy(&u, id, sizeof u);
    cfg.blocking = 0;
    r = ncclCommInitRankConfig(&nc, nlocal, u, local_rank, &cfg);
    const int64_t deadline = ddl_now_ms() + (int64_t)timeout_s * 1000;
    if (r == ncclSuccess || r == ncclInProgress) {
        while ((r = ncclCommGetAsyncError(nc, &state)) == ncclSuccess && state == ncclInProgress &&
               ddl_now_ms() < deadline)
            sched_yield();
    }
    if (r == ncclSuccess && state == ncclSuccess) {
        ddl_debug("rank %d: joined the node's NCCL communicator (%d ranks)", ddl_ctx.rank, nlocal);
        return DDL_OK;
    }
    ddl_status_t st = state == ncclInProgress && r == ncclSuccess
                          ? ddl_fail(DDL_ERR_TIMEOUT, "NCCL communicator of the node not ready "
                                     "within %d s (DDL_BOOTSTRAP_TIMEOUT)", timeout_s)
                          : nccl_fail(r != ncclSuccess ? r : state, "ncclCommInitRankConfig");
    if (nc)
        ncclCommAbort(nc);
    nc = NULL;
    return st;
}

int ddl_nccl_ready(void)
{
    return nc != NULL;
}

void ddl_nccl_set_agreed(int ok)
{
    if (!ok)
        ddl_nccl_abort(); /* local: the other nodes do the same */
}

/* nccl_failed: a NCCL failure: the node's ranks can no longer run the same
 * paths, so the world ends (under an agent, the job restarts). */
static ddl_status_t nccl_failed(ncclResult_t r, const char *what)
{
    ddl_status_t st = nccl_fail(r, what);
    ddl_comm_abort(&ddl_ctx.world, ddl_last_error());
    ddl_nccl_abort();
    return ddl_fail(st, "%s", ddl_ctx.world.abort_reason);
}

ddl_status_t ddl_nccl_check(void)
{
    ncclResult_t state;
    if (!nc)
        return DDL_OK;
    if (ncclCommGetAsyncError(nc, &state) != ncclSuccess)
        return ddl_fail(DDL_ERR_TRANSPORT, "NCCL: cannot read the communicator's state");
    if (state == ncclSuccess || state == ncclInProgress)
        return DDL_OK;
    return nccl_failed(state, "collective inside the node");
}

void ddl_nccl_abort(void)
{
    if (!nc)
        return;
    ddl_debug("rank %d: aborting the node's NCCL communicator", ddl_ctx.rank);
    /* ncclCommAbort frees device memory, which may synchronise the device:
     * the caller's stream must not be waiting for this operation then */
    ddl_gpu_release_stream();
    ncclCommAbort(nc);
    nc = NULL;
}

void ddl_nccl_fini(void)
{
    if (!nc)
        return;
    ncclResult_t state = ncclInProgress;
    int clean = !atomic_load(&ddl_ctx.world.aborted) &&
                ncclCommFinalize(nc) != ncclInternalError;
    const int64_t deadline = ddl_now_ms() + 10000;
    while (clean && ncclCommGetAsyncError(nc, &state) == ncclSuccess && state == ncclInProgress &&
           ddl_now_ms() < deadline)
        sched_yield();
    if (clean && state == ncclSuccess)
        ncclCommDestroy(nc);
    else
        ncclCommAbort(nc);
    nc = NULL;
}

/* settle: finish a non-blocking NCCL call (r as it returned), polling the
 * agent's notices and the abort flag meanwhile. */
static ddl_status_t settle(ncclResult_t r, ddl_comm_t *comm, const char *what)
{
    while (r == ncclInProgress) {
        if (ncclCommGetAsyncError(nc, &r) != ncclSuccess)
            return ddl_fail(DDL_ERR_TRANSPORT, "NCCL %s: cannot read the state", what);
        if (r != ncclInProgress)
            break;
        ddl_status_t st = ddl_gpu_interrupted(comm); /* comm is the world */
        if (st != DDL_OK)
            return st;
        sched_yield();
    }
    return r == ncclSuccess ? DDL_OK : nccl_failed(r, what);
}

static int nccl_type(ddl_dtype_t t, ncclDataType_t *o)
{
    switch (t) {
    case DDL_FLOAT32: *o = ncclFloat32; return 1;
    case DDL_FLOAT64: *o = ncclFloat64; return 1;
    case DDL_INT32: *o = ncclInt32; return 1;
    case DDL_INT64: *o = ncclInt64; return 1;
    case DDL_FLOAT16: *o = ncclFloat16; return 1;
    case DDL_BFLOAT16: *o = ncclBfloat16; return 1;
    case DDL_UINT8: *o = ncclUint8; return 1;
    }
    return 0;
}

static ncclRedOp_t nccl_op(ddl_op_t op)
{
    switch (op) {
    case DDL_PROD: return ncclProd;
    case DDL_MIN: return ncclMin;
    case DDL_MAX: return ncclMax;
    case DDL_AVG: return ncclAvg;
    default: return ncclSum;
    }
}

/* all_device: every buffer this rank reads or writes in d is device memory
 * (mixed host and device buffers are staged instead). */
static int all_device(const ddl_opdesc_t *d, int send_dev, int recv_dev)
{
    const int in_place = d->sendbuf == DDL_IN_PLACE;
    const int send = in_place || send_dev;
    switch (d->kind) {
    case DDL_OPK_BCAST:
        return recv_dev;
    case DDL_OPK_REDUCE:
        if (!in_place && d->comm->rank != d->root)
            return send; /* recvbuf is not used here (ddl.h) */
        return send && recv_dev;
    case DDL_OPK_BARRIER:
        return 0;
    default:
        return send && recv_dev;
    }
}

/* node_collective: the world is this node: one NCCL call on s_main. */
static ddl_status_t node_collective(const ddl_opdesc_t *d, ncclDataType_t t)
{
    const size_t es = ddl_dtype_size(d->dtype), n = d->count;
    char *rb = d->recvbuf;
    const int in_place = d->sendbuf == DDL_IN_PLACE, rank = d->comm->rank;
    const void *sb = in_place ? rb : d->sendbuf;
    cudaStream_t s = ddl_gpu.s_main;
    ncclResult_t r = ncclSuccess;
    ddl_status_t st = ddl_gpu_follow(d, s);
    if (st != DDL_OK)
        return st;
    switch (d->kind) {
    case DDL_OPK_ALLREDUCE:
        r = ncclAllReduce(sb, rb, n, t, nccl_op(d->op), nc, s);
        break;
    case DDL_OPK_BCAST:
        r = ncclBroadcast(rb, rb, n, t, d->root, nc, s);
        break;
    case DDL_OPK_REDUCE_SCATTER:
        /* in place, ddl's block lands at the start of recvbuf, NCCL's at
         * rank * count: move it (the two do not overlap for rank > 0) */
        r = ncclReduceScatter(sb, in_place ? rb + (size_t)rank * n * es : rb, n, t,
                              nccl_op(d->op), nc, s);
        if ((st = settle(r, d->comm, "reduce-scatter")) != DDL_OK)
            return st;
        if (in_place && rank > 0) {
            cudaError_t e = cudaMemcpyAsync(rb, rb + (size_t)rank * n * es, n * es,
                                            cudaMemcpyDeviceToDevice, s);
            if (e != cudaSuccess)
                return ddl_gpu_cuda_fail(e, "reduce-scatter: moving the block");
        }
        return ddl_gpu_wait_stream(s, d->comm, "NCCL reduce-scatter");
    case DDL_OPK_ALLGATHER:
        r = ncclAllGather(in_place ? rb + (size_t)rank * n * es : sb, rb, n, t, nc, s);
        break;
    case DDL_OPK_REDUCE:
        r = ncclReduce(sb, rank == d->root ? rb : NULL, n, t, nccl_op(d->op), d->root, nc, s);
        break;
    case DDL_OPK_BARRIER:
        return ddl_fail(DDL_ERR_INTERNAL, "barrier on the NCCL path");
    }
    if ((st = settle(r, d->comm, ddl_opkind_str(d->kind))) != DDL_OK)
        return st;
    return ddl_gpu_wait_stream(s, d->comm, "NCCL collective inside the node");
}

#ifdef HAVE_GPU_KERNELS
/* direct_ring: allreduce of buf (count elements of device memory) over the
 * cross communicator c, UCX moving the device memory itself (GPU-direct):
 * a ring reduce-scatter whose received blocks are reduced on the device,
 * DDL_AVG's division of the finished block, then a ring allgather in
 * place.  Blocks as ddl_block_off; each block is reduced in the ring's
 * fixed order, then only copied, so every rank gets the same bits. */
static ddl_status_t direct_ring(ddl_comm_t *c, char *buf, size_t count, ddl_dtype_t dt,
                                ddl_op_t op, int divisor)
{
    const int n = c->size, r = c->rank, right = (r + 1) % n, left = (r + n - 1) % n;
    const size_t es = ddl_dtype_size(dt);
    const uint32_t seq = c->seq++;
    ddl_status_t st = DDL_OK;
    if (n == 1 || count == 0)
        return DDL_OK;
    char *tmp = ddl_gpu_dev_scratch(ddl_block_off(count, n, 1) * es, &st);
    if (!tmp)
        return st;
#define BLK(b, o, l)                                                        \
    do {                                                                    \
        o = ddl_block_off(count, n, (b));                                   \
        l = ddl_block_off(count, n, (b) + 1) - o;                           \
    } while (0)
    size_t so, sl, ro, rl;
    for (int step = 0; step < n - 1; step++) {
        BLK((r - step + n) % n, so, sl);
        BLK((r - step - 1 + n) % n, ro, rl);
        if ((st = ddl_tl_sendrecv(c, seq, right, buf + so * es, sl * es, left, tmp, rl * es)) !=
            DDL_OK)
            return st;
        cudaError_t e = ddl_gpu_reduce_launch(buf + ro * es, tmp, rl, (int)dt, (int)op,
                                              ddl_gpu.s_main);
        if (e != cudaSuccess)
            return ddl_gpu_cuda_fail(e, "GPU-direct ring: reduction kernel");
        /* the next step sends this block: wait for the kernel */
        if ((st = ddl_gpu_wait_stream(ddl_gpu.s_main, c, "GPU-direct ring: reduction")) != DDL_OK)
            return st;
    }
    BLK((r + 1) % n, ro, rl); /* this rank's finished block */
    if (op == DDL_AVG) {
        cudaError_t e = ddl_gpu_scale_launch(buf + ro * es, rl, (int)dt, divisor, ddl_gpu.s_main);
        if (e != cudaSuccess)
            return ddl_gpu_cuda_fail(e, "GPU-direct ring: average kernel");
        if ((st = ddl_gpu_wait_stream(ddl_gpu.s_main, c, "GPU-direct ring: average")) != DDL_OK)
            return st;
    }
    for (int step = 0; step < n - 1; step++) {
        BLK((r + 1 - step + n) % n, so, sl);
        BLK((r - step + n) % n, ro, rl);
        if ((st = ddl_tl_sendrecv(c, seq, right, buf + so * es, sl * es, left, buf + ro * es,
                                  rl * es)) != DDL_OK)
            return st;
    }
#undef BLK
    return DDL_OK;
}
#endif

/* staged_block: phase 2 through pinned host memory: the block (len
 * elements at blk, on the device, once s_main's work is done) goes to the
 * host in chunks, each chunk is allreduced on the cross ring and copied
 * back while the next travels; s_main then waits for the last copy. */
static ddl_status_t staged_block(const ddl_opdesc_t *d, char *blk, size_t len)
{
    const size_t es = ddl_dtype_size(d->dtype);
    ddl_status_t st = DDL_OK;
    cudaError_t e = cudaEventRecord(ddl_gpu.ev_step, ddl_gpu.s_main);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(ddl_gpu.s_d2h, ddl_gpu.ev_step, 0);
    if (e != cudaSuccess)
        return ddl_gpu_cuda_fail(e, "allreduce: ordering the copies after the reduce-scatter");
    char *host = ddl_gpu_pinned(2, len * es, &st);
    if (!host)
        return st;
    const size_t ce = ddl_gpu_chunk_elems(len, es, ddl_gpu.chunk_bytes, DDL_GPU_MAX_CHUNKS);
    const int nchunks = len ? (int)((len + ce - 1) / ce) : 0;
    ddl_debug("allreduce of %zu bytes on device memory: hierarchical, %d local rank(s), "
              "block %zu bytes in %d chunk(s) over %d nodes", d->count * es, ddl_ctx.node.size,
              len * es, nchunks, ddl_ctx.cross.size);
    for (int k = 0; k < nchunks && e == cudaSuccess; k++) {
        const size_t c0 = (size_t)k * ce, cl = c0 + ce <= len ? ce : len - c0;
        e = cudaMemcpyAsync(host + c0 * es, blk + c0 * es, cl * es, cudaMemcpyDeviceToHost,
                            ddl_gpu.s_d2h);
        if (e == cudaSuccess)
            e = cudaEventRecord(ddl_gpu.ev_chunk[k], ddl_gpu.s_d2h);
    }
    if (e != cudaSuccess)
        return ddl_gpu_cuda_fail(e, "allreduce: copying the block to the host");
    /* local rank q's block has the same length on every node, so the ranks
     * of one cross ring make the same sequence of ring calls */
    for (int k = 0; k < nchunks; k++) {
        const size_t c0 = (size_t)k * ce, cl = c0 + ce <= len ? ce : len - c0;
        if ((st = ddl_gpu_wait(ddl_gpu.ev_chunk[k], d->comm, "allreduce: copy to the host")) !=
                DDL_OK ||
            (st = ddl_ring_allreduce_part(&ddl_ctx.cross, host + c0 * es, cl, d->dtype, d->op,
                                          ddl_ctx.world.size)) != DDL_OK)
            return st;
        e = cudaMemcpyAsync(blk + c0 * es, host + c0 * es, cl * es, cudaMemcpyHostToDevice,
                            ddl_gpu.s_h2d);
        if (e != cudaSuccess)
            return ddl_gpu_cuda_fail(e, "allreduce: copying the block back to the device");
    }
    e = cudaEventRecord(ddl_gpu.ev_step, ddl_gpu.s_h2d);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(ddl_gpu.s_main, ddl_gpu.ev_step, 0);
    return e == cudaSuccess ? DDL_OK
                            : ddl_gpu_cuda_fail(e, "allreduce: ordering the allgather after the "
                                                   "copies");
}

/* hier_allreduce: the three phases of the header comment. */
static ddl_status_t hier_allreduce(const ddl_opdesc_t *d, ncclDataType_t t)
{
    ddl_comm_t *comm = d->comm;
    const int L = ddl_ctx.node.size, q = ddl_ctx.node.rank;
    const size_t es = ddl_dtype_size(d->dtype), count = d->count, base = count / (size_t)L;
    const size_t tail = count % (size_t)L;
    char *rb = d->recvbuf;
    const char *sb = d->sendbuf == DDL_IN_PLACE ? rb : d->sendbuf;
    /* the node sums; the cross rings apply the operation and DDL_AVG's
     * division by the world's size */
    const ncclRedOp_t nop = d->op == DDL_AVG ? ncclSum : nccl_op(d->op);
    size_t off, len;
    cudaError_t e = cudaSuccess;
    ncclResult_t r = ncclSuccess;
    ddl_status_t st = ddl_gpu_follow(d, ddl_gpu.s_main);
    if (st != DDL_OK)
        return st;

    /* 1. reduce-scatter inside the node */
    if (L > 1) {
        ncclGroupStart();
        if (base)
            r = ncclReduceScatter(sb, rb + (size_t)q * base * es, base, t, nop, nc,
                                  ddl_gpu.s_main);
        if (tail && r == ncclSuccess)
            r = ncclReduce(sb + (size_t)L * base * es, rb + (size_t)L * base * es, tail, t, nop,
                           L - 1, nc, ddl_gpu.s_main);
        ncclResult_t g = ncclGroupEnd();
        if ((st = settle(r != ncclSuccess ? r : g, comm, "reduce-scatter inside the node")) !=
            DDL_OK)
            return st;
    } else if (sb != rb) {
        e = cudaMemcpyAsync(rb, sb, count * es, cudaMemcpyDeviceToDevice, ddl_gpu.s_main);
    }
    if (e != cudaSuccess)
        return ddl_gpu_cuda_fail(e, "allreduce: copying the input");

    /* 2. this rank's block across nodes */
    ddl_gpu_block(count, L, q, &off, &len);
#ifdef HAVE_GPU_KERNELS
    if (ddl_gpu.direct) {
        ddl_debug("allreduce of %zu bytes on device memory: hierarchical, %d local rank(s), "
                  "block %zu bytes GPU-direct over %d nodes", count * es, L, len * es,
                  ddl_ctx.cross.size);
        st = ddl_gpu_wait_stream(ddl_gpu.s_main, comm, "allreduce: reduce-scatter inside the "
                                 "node");
        if (st == DDL_OK)
            st = direct_ring(&ddl_ctx.cross, rb + off * es, len, d->dtype, d->op,
                             ddl_ctx.world.size);
    } else
#endif
        st = staged_block(d, rb + off * es, len);
    if (st != DDL_OK)
        return st;

    /* 3. allgather inside the node */
    if (L > 1) {
        r = ncclSuccess;
        ncclGroupStart();
        if (base)
            r = ncclAllGather(rb + (size_t)q * base * es, rb, base, t, nc, ddl_gpu.s_main);
        if (tail && r == ncclSuccess)
            r = ncclBroadcast(rb + (size_t)L * base * es, rb + (size_t)L * base * es, tail, t,
                              L - 1, nc, ddl_gpu.s_main);
        ncclResult_t g = ncclGroupEnd();
        if ((st = settle(r != ncclSuccess ? r : g, comm, "allgather inside the node")) != DDL_OK)
            return st;
    }
    return ddl_gpu_wait_stream(ddl_gpu.s_main, comm, "allreduce: allgather inside the node");
}

int ddl_nccl_execute(const ddl_opdesc_t *d, int send_dev, int recv_dev, ddl_status_t *st)
{
    ncclDataType_t t;
    if (d->comm != &ddl_ctx.world || d->kind == DDL_OPK_BARRIER || !nccl_type(d->dtype, &t) ||
        !all_device(d, send_dev, recv_dev))
        return 0;
    const int one_node = ddl_ctx.node.size == ddl_ctx.world.size;
    if (one_node && nc && ddl_gpu.world_ordered) { /* NCCL rank = world rank */
        ddl_debug("%s of %zu elements on device memory: NCCL inside the node",
                  ddl_opkind_str(d->kind), d->count);
        *st = d->count ? node_collective(d, t) : DDL_OK;
        return 1;
    }
    /* across nodes: the same shape on every node, and NCCL on every node
     * (or one rank per node, where the node phases are copies) */
    if (d->kind == DDL_OPK_ALLREDUCE && !one_node && ddl_ctx.hier_shape &&
        (ddl_ctx.node.size == 1 || (nc && ddl_gpu.nccl_all))) {
        *st = d->count ? hier_allreduce(d, t) : DDL_OK;
        return 1;
    }
    return 0;
}
