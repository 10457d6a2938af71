/* gpu.c: CUDA device memory and CUDA streams in libddl's collectives (built
 * only when configure finds the CUDA runtime).
 *
 * ddl_init() counts the devices and takes the current one as this rank's
 * GPU; with none (no GPU, or no driver) every buffer is host memory and
 * nothing here runs.  A collective with a buffer in device memory
 * (cudaPointerGetAttributes) goes, fastest first: through the node's NCCL
 * communicator (world on one node) or the pipelined hierarchical allreduce
 * (nccl.c); else staged: its input is copied to pinned host memory, the
 * host algorithm runs there, and its output is copied back, which is
 * correct on any node and any number of processes per GPU.
 *
 * Every copy and kernel runs on libddl's own non-blocking streams, ordered
 * after the caller's work (the stream given to ddl_*_stream(), else the
 * legacy default stream), and every wait polls, so an abort or a failure
 * notice from the agent ends the operation instead of hanging it.  A
 * stream operation holds the caller's stream in a host function
 * (cudaLaunchHostFunc) until the operation completes.
 */
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "env.h"
#include "gpu_int.h"
#include "log.h"
#include "util.h"

ddl_gpu_t ddl_gpu;

static pthread_mutex_t setup_mu = PTHREAD_MUTEX_INITIALIZER;

/* Buffers grown on demand: pinned host memory for staging (three slots)
 * and device scratch.  An outgrown buffer is retired, not freed, until
 * ddl_gpu_fini(): freeing may synchronise the device, which must not wait
 * on a stream that libddl itself holds. */
typedef struct retired {
    void *p;
    struct retired *next;
} retired_t;
typedef struct {
    void *p;
    size_t len;
    int device;     /* device memory (stream-ordered), else pinned host */
    retired_t *old; /* outgrown, freed at finalize */
} buf_t;
static buf_t pinned[3], dev_scratch = {.device = 1};

static void *grow(buf_t *b, size_t len, ddl_status_t *st)
{
    if (b->p && len <= b->len)
        return b->p;
    size_t want = len < 2 * b->len ? 2 * b->len : len;
    void *p = NULL;
    retired_t *r = NULL;
    if (b->p && !(r = malloc(sizeof *r))) {
        *st = ddl_fail(DDL_ERR_NOMEM, "out of memory");
        return NULL;
    }
    /* device scratch is stream-ordered: a plain cudaMalloc may synchronise
     * the device */
    cudaError_t e = b->device ? cudaMallocAsync(&p, want ? want : 1, ddl_gpu.s_main)
                              : cudaMallocHost(&p, want ? want : 1);
    if (e != cudaSuccess) {
        free(r);
        *st = ddl_gpu_cuda_fail(e, b->device ? "cudaMallocAsync of device scratch"
                                             : "cudaMallocHost of a pinned staging buffer");
        return NULL;
    }
    if (r) {
        r->p = b->p;
        r->next = b->old;
        b->old = r;
    }
    b->p = p;
    b->len = want;
    return p;
}

static void buf_release(buf_t *b)
{
    while (b->old) {
        retired_t *r = b->old;
        b->old = r->next;
        b->device ? cudaFree(r->p) : cudaFreeHost(r->p);
        free(r);
    }
    if (b->p)
        b->device ? cudaFree(b->p) : cudaFreeHost(b->p);
    b->p = NULL;
    b->len = 0;
}

ddl_status_t ddl_gpu_cuda_fail(cudaError_t e, const char *what)
{
    (void)cudaGetLastError(); /* clear a non-sticky error */
    return ddl_fail(DDL_ERR_CUDA, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

ddl_status_t ddl_gpu_init(void)
{
    int n = 0;
    memset(&ddl_gpu, 0, sizeof ddl_gpu);
    ddl_error_t err;
    long direct, nccl, chunk;
    if (ddl_env_long(DDLENV_DDL_GPU_DIRECT, &direct, &err) < 0 ||
        ddl_env_long(DDLENV_DDL_NCCL, &nccl, &err) < 0 ||
        ddl_env_long(DDLENV_DDL_GPU_CHUNK_BYTES, &chunk, &err) < 0)
        return ddl_fail(DDL_ERR_INVALID, "%s (see docs/user-guide.md, Environment variables)",
                        err.text);
    ddl_gpu.direct_wanted = (int)direct;
    ddl_gpu.nccl_wanted = (int)nccl;
    ddl_gpu.chunk_bytes = (size_t)chunk;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(ddl_gpu.none_why, sizeof ddl_gpu.none_why, "cudaGetDeviceCount: %s",
                 cudaGetErrorString(e));
        n = 0;
    } else if (n == 0) {
        snprintf(ddl_gpu.none_why, sizeof ddl_gpu.none_why, "the CUDA runtime sees no device");
    } else if ((e = cudaGetDevice(&ddl_gpu.dev)) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(ddl_gpu.none_why, sizeof ddl_gpu.none_why, "cudaGetDevice: %s",
                 cudaGetErrorString(e));
        n = 0;
    }
    ddl_gpu.count = n;
    if (n > 0)
        ddl_debug("CUDA: %d device(s), this rank uses device %d", n, ddl_gpu.dev);
    else
        ddl_debug("CUDA: no usable GPU (%s): every buffer is host memory", ddl_gpu.none_why);
    return DDL_OK;
}

static void destroy_streams(void)
{
    if (!ddl_gpu.ready)
        return;
    cudaStreamDestroy(ddl_gpu.s_main);
    cudaStreamDestroy(ddl_gpu.s_d2h);
    cudaStreamDestroy(ddl_gpu.s_h2d);
    cudaEventDestroy(ddl_gpu.ev_in);
    cudaEventDestroy(ddl_gpu.ev_step);
    cudaEventDestroy(ddl_gpu.ev_done);
    for (int i = 0; i < DDL_GPU_MAX_CHUNKS; i++)
        cudaEventDestroy(ddl_gpu.ev_chunk[i]);
    ddl_gpu.ready = 0;
}

void ddl_gpu_fini(void)
{
#ifdef HAVE_NCCL
    ddl_nccl_fini();
#endif
    for (int i = 0; i < 3; i++)
        buf_release(&pinned[i]);
    buf_release(&dev_scratch);
    destroy_streams();
    ddl_gpu.count = 0;
}

int ddl_gpu_count(void)
{
    return ddl_gpu.count;
}

int ddl_gpu_on_device(const void *p)
{
    if (ddl_gpu.count <= 0 || p == NULL || p == DDL_IN_PLACE)
        return 0;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    /* managed memory is reachable from the host: no staging needed */
    return a.type == cudaMemoryTypeDevice;
}

ddl_status_t ddl_gpu_setup(void)
{
    cudaError_t e;
    if (ddl_gpu.ready)
        return DDL_OK;
    pthread_mutex_lock(&setup_mu);
    e = cudaSuccess;
    if (!ddl_gpu.ready) {
        const unsigned nb = cudaStreamNonBlocking, ef = cudaEventDisableTiming;
        if ((e = cudaStreamCreateWithFlags(&ddl_gpu.s_main, nb)) == cudaSuccess &&
            (e = cudaStreamCreateWithFlags(&ddl_gpu.s_d2h, nb)) == cudaSuccess &&
            (e = cudaStreamCreateWithFlags(&ddl_gpu.s_h2d, nb)) == cudaSuccess &&
            (e = cudaEventCreateWithFlags(&ddl_gpu.ev_in, ef)) == cudaSuccess &&
            (e = cudaEventCreateWithFlags(&ddl_gpu.ev_step, ef)) == cudaSuccess &&
            (e = cudaEventCreateWithFlags(&ddl_gpu.ev_done, ef)) == cudaSuccess) {
            for (int i = 0; i < DDL_GPU_MAX_CHUNKS && e == cudaSuccess; i++)
                e = cudaEventCreateWithFlags(&ddl_gpu.ev_chunk[i], ef);
        }
        /* on failure what was created leaks until exit: rare, and small */
        if (e == cudaSuccess)
            ddl_gpu.ready = 1;
    }
    pthread_mutex_unlock(&setup_mu);
    return e == cudaSuccess ? DDL_OK : ddl_gpu_cuda_fail(e, "creating libddl's CUDA streams");
}

void *ddl_gpu_pinned(int slot, size_t len, ddl_status_t *st)
{
    return grow(&pinned[slot], len, st);
}

void *ddl_gpu_dev_scratch(size_t len, ddl_status_t *st)
{
    return grow(&dev_scratch, len, st);
}

ddl_status_t ddl_gpu_follow(const ddl_opdesc_t *d, cudaStream_t s)
{
    cudaError_t e;
    if (d->stream_ev)
        e = cudaStreamWaitEvent(s, (cudaEvent_t)d->stream_ev, 0);
    else if ((e = cudaEventRecord(ddl_gpu.ev_in, cudaStreamLegacy)) == cudaSuccess)
        e = cudaStreamWaitEvent(s, ddl_gpu.ev_in, 0);
    return e == cudaSuccess ? DDL_OK : ddl_gpu_cuda_fail(e, "ordering after the caller's stream");
}

/* stop_nccl_if_world_over: once the world is aborted, the node's NCCL
 * kernels would wait for their peers forever.  Only then: a split
 * communicator's abort leaves the node's NCCL alone (every rank of the
 * node must keep the same paths). */
static void stop_nccl_if_world_over(void)
{
#ifdef HAVE_NCCL
    if (atomic_load(&ddl_ctx.world.aborted))
        ddl_nccl_abort();
#endif
}

ddl_status_t ddl_gpu_interrupted(ddl_comm_t *comm)
{
    ddl_status_t st = DDL_OK;
#ifdef HAVE_NCCL
    st = ddl_nccl_check(); /* a NCCL failure aborts the world */
#endif
    ddl_agent_notice();
    if (st == DDL_OK && ddl_is_aborted(comm))
        st = ddl_comm_check_abort(comm);
    if (st != DDL_OK)
        stop_nccl_if_world_over();
    else
        ddl_beat(0, 0);
    return st;
}

ddl_status_t ddl_gpu_wait(cudaEvent_t ev, ddl_comm_t *comm, const char *what)
{
    char where[200];
    for (unsigned spins = 0;; spins++) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess)
            return DDL_OK;
        if (e != cudaErrorNotReady) {
            snprintf(where, sizeof where, "%s on the device", what);
            return ddl_gpu_cuda_fail(e, where);
        }
        ddl_status_t st = ddl_gpu_interrupted(comm);
        if (st != DDL_OK)
            return st;
        if (spins > 2000) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        } else if (spins > 100) {
            sched_yield();
        }
    }
}

ddl_status_t ddl_gpu_wait_stream(cudaStream_t s, ddl_comm_t *comm, const char *what)
{
    cudaError_t e = cudaEventRecord(ddl_gpu.ev_done, s);
    if (e != cudaSuccess)
        return ddl_gpu_cuda_fail(e, what);
    return ddl_gpu_wait(ddl_gpu.ev_done, comm, what);
}

/* ---- CUDA streams of ddl_*_stream() ---- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
    int refs; /* the host function and the request */
} gate_t;

static void gate_unref(gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    int last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (last) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
    }
}

/* Runs in CUDA's host-function thread when the stream reaches the
 * operation's place: holds the stream until the operation completes.  No
 * CUDA call in here (CUDA forbids them). */
static void CUDART_CB gate_wait(void *arg)
{
    gate_t *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    gate_unref(g);
}

ddl_status_t ddl_gpu_stream_prepare(ddl_opdesc_t *d)
{
    cudaError_t e;
    cudaEvent_t ev;
    if (!d->stream) {
        /* a plain call queued for the progress thread: it follows the
         * legacy default stream as of now, not as of when it runs (by then
         * that stream may wait on a later _stream call's gate) */
        if (ddl_gpu.count <= 0 ||
            (!ddl_gpu_on_device(d->sendbuf) && !ddl_gpu_on_device(d->recvbuf)))
            return DDL_OK;
        if ((e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess ||
            (e = cudaEventRecord(ev, cudaStreamLegacy)) != cudaSuccess)
            return ddl_gpu_cuda_fail(e, "recording the default stream's point");
        d->stream_ev = ev;
        return DDL_OK;
    }
    if (ddl_gpu.count <= 0)
        return ddl_fail(DDL_ERR_CUDA, "a CUDA stream was given, but libddl sees no usable GPU "
                        "(%s)", ddl_gpu.none_why);
    /* the event belongs to the stream's device, the caller's current one */
    if ((e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess)
        return ddl_gpu_cuda_fail(e, "cudaEventCreate for a stream operation");
    if ((e = cudaEventRecord(ev, (cudaStream_t)d->stream)) != cudaSuccess) {
        cudaEventDestroy(ev);
        return ddl_gpu_cuda_fail(e, "cudaEventRecord on the given stream");
    }
    gate_t *g = calloc(1, sizeof *g);
    if (!g) {
        cudaEventDestroy(ev);
        return ddl_fail(DDL_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->refs = 2;
    if ((e = cudaLaunchHostFunc((cudaStream_t)d->stream, gate_wait, g)) != cudaSuccess) {
        g->refs = 1;
        gate_unref(g);
        cudaEventDestroy(ev);
        return ddl_gpu_cuda_fail(e, "cudaLaunchHostFunc on the given stream");
    }
    d->stream_ev = ev;
    d->stream_gate = g;
    return DDL_OK;
}

static void gate_open(gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* The gate of the operation running in this thread, if any. */
static __thread gate_t *running_gate;

void ddl_gpu_release_stream(void)
{
    if (running_gate)
        gate_open(running_gate); /* ddl_gpu_stream_done() still unrefs it */
}

void ddl_gpu_stream_done(ddl_opdesc_t *d)
{
    gate_t *g = d->stream_gate;
    if (d->stream_ev)
        cudaEventDestroy((cudaEvent_t)d->stream_ev); /* freed once its wait is over */
    d->stream_ev = d->stream_gate = NULL;
    if (!g)
        return;
    gate_open(g);
    gate_unref(g);
}

/* ---- staging through pinned host memory ---- */

/* extents: the bytes a collective reads from sendbuf and the bytes of
 * recvbuf it reads (in place, or a broadcast) and writes on this rank. */
static void extents(const ddl_opdesc_t *d, size_t *send, size_t *recv, int *recv_is_input)
{
    const size_t es = ddl_dtype_size(d->dtype), n = (size_t)d->comm->size;
    const int in_place = d->sendbuf == DDL_IN_PLACE;
    *send = 0;
    *recv = d->count * es;
    *recv_is_input = in_place;
    switch (d->kind) {
    case DDL_OPK_ALLREDUCE:
        *send = in_place ? 0 : d->count * es;
        break;
    case DDL_OPK_BCAST:
        *recv_is_input = 1;
        break;
    case DDL_OPK_REDUCE_SCATTER:
        *send = in_place ? 0 : d->count * n * es;
        *recv = in_place ? d->count * n * es : d->count * es;
        break;
    case DDL_OPK_ALLGATHER:
        *send = in_place ? 0 : d->count * es;
        *recv = d->count * n * es;
        break;
    case DDL_OPK_REDUCE:
        *send = in_place ? 0 : d->count * es;
        if (!in_place && d->comm->rank != d->root)
            *recv = 0; /* in place, every rank's input is in recvbuf */
        break;
    case DDL_OPK_BARRIER:
        *recv = 0;
        break;
    }
    if (!d->recvbuf)
        *recv = 0;
}

static ddl_status_t copy(void *dst, const void *src, size_t len, cudaStream_t s,
                         ddl_comm_t *comm, const char *what)
{
    if (len == 0)
        return DDL_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, s);
    if (e != cudaSuccess)
        return ddl_gpu_cuda_fail(e, what);
    return ddl_gpu_wait_stream(s, comm, what);
}

static ddl_status_t staged(const ddl_opdesc_t *d, int send_dev, int recv_dev)
{
    size_t sbytes, rbytes;
    int recv_in;
    ddl_status_t st = DDL_OK;
    ddl_opdesc_t h = *d;
    extents(d, &sbytes, &rbytes, &recv_in);
    ddl_debug("%s of %zu elements on device memory: staged through host memory",
              ddl_opkind_str(d->kind), d->count);
    if ((st = ddl_gpu_follow(d, ddl_gpu.s_d2h)) != DDL_OK)
        return st;
    if (send_dev && sbytes) {
        void *hs = ddl_gpu_pinned(0, sbytes, &st);
        if (!hs || (st = copy(hs, d->sendbuf, sbytes, ddl_gpu.s_d2h, d->comm,
                              "copying the input to the host")) != DDL_OK)
            return st;
        h.sendbuf = hs;
    }
    if (recv_dev && rbytes) {
        void *hr = ddl_gpu_pinned(1, rbytes, &st);
        if (!hr)
            return st;
        if (recv_in && (st = copy(hr, d->recvbuf, rbytes, ddl_gpu.s_d2h, d->comm,
                                  "copying the input to the host")) != DDL_OK)
            return st;
        h.recvbuf = hr;
    }
    if (!(send_dev && sbytes) && !(recv_dev && rbytes && recv_in)) {
        /* nothing copied yet: the host buffers must still follow the stream */
        if ((st = ddl_gpu_wait_stream(ddl_gpu.s_d2h, d->comm, "waiting for the caller's "
                                      "stream")) != DDL_OK)
            return st;
    }
    st = ddl_execute_host(&h);
    if (st == DDL_OK && recv_dev && rbytes)
        st = copy(d->recvbuf, h.recvbuf, rbytes, ddl_gpu.s_h2d, d->comm,
                  "copying the result to the device");
    return st;
}

/* alone: d in a communicator of one rank: the input is the result, so at
 * most one copy on the device (none in place), in the caller's stream
 * order; nothing goes through host memory. */
static ddl_status_t alone(const ddl_opdesc_t *d)
{
    size_t sbytes, rbytes;
    int recv_in;
    extents(d, &sbytes, &rbytes, &recv_in);
    ddl_status_t st = ddl_gpu_follow(d, ddl_gpu.s_main);
    if (st != DDL_OK)
        return st;
    if (sbytes && rbytes && d->sendbuf != d->recvbuf)
        return copy(d->recvbuf, d->sendbuf, sbytes < rbytes ? sbytes : rbytes, ddl_gpu.s_main,
                    d->comm, "copying the input to the output");
    return ddl_gpu_wait_stream(ddl_gpu.s_main, d->comm, "waiting for the caller's stream");
}

/* run_on_device: d, with this rank's GPU current. */
static ddl_status_t run_on_device(const ddl_opdesc_t *d, int send_dev, int recv_dev)
{
    ddl_status_t st = ddl_gpu_setup();
    if (st != DDL_OK)
        return st;
    if (!send_dev && !recv_dev) {
        /* host buffers on a stream: start once the stream reaches this point */
        if ((st = ddl_gpu_follow(d, ddl_gpu.s_main)) != DDL_OK ||
            (st = ddl_gpu_wait_stream(ddl_gpu.s_main, d->comm, "waiting for the caller's "
                                      "stream")) != DDL_OK)
            return st;
        return ddl_execute_host(d);
    }
    if (d->comm->size == 1)
        return alone(d);
#ifdef HAVE_NCCL
    if (ddl_nccl_execute(d, send_dev, recv_dev, &st))
        return st;
#endif
    return staged(d, send_dev, recv_dev);
}

int ddl_gpu_execute(const ddl_opdesc_t *d, ddl_status_t *st)
{
    if (ddl_gpu.count <= 0)
        return 0;
    const int send_dev = ddl_gpu_on_device(d->sendbuf), recv_dev = ddl_gpu_on_device(d->recvbuf);
    if (!send_dev && !recv_dev && !d->stream_ev)
        return 0;
    /* this rank's GPU in this thread (the progress thread, or a caller that
     * switched devices since ddl_init), the caller's device restored after */
    int cur = ddl_gpu.dev;
    cudaError_t e = cudaGetDevice(&cur);
    if (e == cudaSuccess && cur != ddl_gpu.dev)
        e = cudaSetDevice(ddl_gpu.dev);
    if (e != cudaSuccess) {
        *st = ddl_gpu_cuda_fail(e, "making this rank's GPU current");
        return 1;
    }
    running_gate = d->stream_gate;
    *st = run_on_device(d, send_dev, recv_dev);
    if (*st != DDL_OK && ddl_gpu.ready) {
        /* nothing of this operation may still write into the caller's
         * buffers once it is reported: stop NCCL if the world is over (its
         * kernels would never end), then let the copies finish */
        stop_nccl_if_world_over();
        cudaStreamSynchronize(ddl_gpu.s_main);
        cudaStreamSynchronize(ddl_gpu.s_d2h);
        cudaStreamSynchronize(ddl_gpu.s_h2d);
        (void)cudaGetLastError();
    }
    running_gate = NULL;
    /* the caller's device back, but not in the progress thread: there
     * cudaGetDevice said 0 without a context, and making device 0 current
     * would create one on a GPU that is not this rank's */
    if (cur != ddl_gpu.dev && !ddl_engine_in_progress_thread())
        cudaSetDevice(cur);
    return 1;
}

size_t ddl_gpu_boot_record(uint8_t *out, size_t cap)
{
    int bus = 0, domain = 0, device = 0;
#ifdef HAVE_NCCL
    uint8_t id[DDL_NCCL_ID_BYTES];
#endif
    const uint8_t *idp = NULL;
    if (ddl_gpu.count <= 0)
        return 0;
    if (cudaDeviceGetAttribute(&bus, cudaDevAttrPciBusId, ddl_gpu.dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&domain, cudaDevAttrPciDomainId, ddl_gpu.dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&device, cudaDevAttrPciDeviceId, ddl_gpu.dev) != cudaSuccess) {
        (void)cudaGetLastError();
        ddl_warn("rank %d: cannot read device %d's PCI address: NCCL and GPU-direct are left "
                 "out", ddl_ctx.rank, ddl_gpu.dev);
        return 0;
    }
    ddl_gpu_rec_t r = {.pci_domain = domain, .pci_bus = bus, .pci_device = device, .flags = 0,
                       .chunk_bytes = (uint32_t)ddl_gpu.chunk_bytes};
#ifdef HAVE_NCCL
    if (ddl_gpu.nccl_wanted && ddl_ctx.local_size > 1 &&
        (ddl_ctx.local_rank != 0 || ddl_nccl_record(id) == 0)) {
        r.flags |= DDL_GPU_REC_NCCL; /* without local rank 0's id the node goes without */
        idp = ddl_ctx.local_rank == 0 ? id : NULL;
    }
#endif
#if defined(HAVE_NCCL) && defined(HAVE_GPU_KERNELS)
    if (ddl_gpu.direct_wanted && ddl_ctx.ucx_cuda) {
        cudaError_t e = ddl_gpu_kernels_check();
        if (e == cudaSuccess)
            r.flags |= DDL_GPU_REC_DIRECT;
        else
            ddl_warn("rank %d: libddl's device reductions cannot run on device %d (%s): no "
                     "GPU-direct rings", ddl_ctx.rank, ddl_gpu.dev, cudaGetErrorString(e));
        (void)cudaGetLastError();
    }
#endif
    return ddl_gpu_rec_encode(&r, idp, out, cap);
}

ddl_status_t ddl_gpu_boot(int n, const int *node_of, const int *local_of,
                          const uint8_t *const *recs, const size_t *lens, int timeout_s)
{
#ifdef HAVE_NCCL
    ddl_gpu_plan_t p;
    ddl_gpu_plan(n, node_of, local_of, recs, lens, ddl_ctx.node_id, &p);
    ddl_gpu.nccl_any = p.nccl_any;
    ddl_gpu.nccl_all = p.nccl_all;
    ddl_gpu.nccl_node = p.nccl_node;
    ddl_gpu.direct = p.direct_all;
    ddl_gpu.world_ordered = p.world_ordered;
    if (p.chunk_bytes)
        ddl_gpu.chunk_bytes = p.chunk_bytes; /* every rank cuts the same chunks */
    if (p.direct_all)
        ddl_debug("rank %d: every rank's UCX moves CUDA memory: GPU-direct rings between nodes",
                  ddl_ctx.rank);
    if (!p.nccl_node)
        return DDL_OK;
    ddl_status_t st = ddl_gpu_setup();
    if (st == DDL_OK)
        st = ddl_nccl_join(ddl_ctx.local_size, ddl_ctx.local_rank, p.nccl_id, timeout_s);
    if (st != DDL_OK)
        ddl_warn("rank %d: NCCL left out: %s", ddl_ctx.rank, ddl_last_error());
#else
    (void)n, (void)node_of, (void)local_of, (void)recs, (void)lens, (void)timeout_s;
#endif
    return DDL_OK;
}

ddl_status_t ddl_gpu_agree(void)
{
#ifdef HAVE_NCCL
    if (!ddl_gpu.nccl_any)
        return DDL_OK; /* the same on every rank: nobody tried NCCL */
    /* every rank of a node that should have a communicator has one, or no
     * rank uses NCCL: a node cannot run half its collectives through it */
    int32_t ok = !ddl_gpu.nccl_node || ddl_nccl_ready();
    ddl_opdesc_t d = {.kind = DDL_OPK_ALLREDUCE, .comm = &ddl_ctx.world, .sendbuf = DDL_IN_PLACE,
                      .recvbuf = &ok, .count = 1, .dtype = DDL_INT32, .op = DDL_MIN};
    ddl_status_t st = ddl_execute_host(&d);
    if (st != DDL_OK)
        return st;
    ddl_nccl_set_agreed(ok);
    ddl_gpu.nccl_all = ddl_gpu.nccl_all && ok;
    if (ok)
        ddl_debug("rank %d: NCCL inside the node%s", ddl_ctx.rank,
                  ddl_gpu.nccl_all ? " (every node)" : "");
    else if (ddl_ctx.rank == 0)
        ddl_warn("NCCL could not be set up on every node (see the warnings above): device "
                 "buffers are staged through host memory");
#endif
    return DDL_OK;
}
