/* gpu_int.h: what gpu.c (device memory, streams, staging) shares with
 * nccl.c (the NCCL communicator of the node and the hierarchical
 * allreduce).  Only built with HAVE_CUDA; included by those two files. */
#ifndef DDL_GPU_INT_H
#define DDL_GPU_INT_H

#include <cuda_runtime.h>

#include "ddl_int.h"

#define DDL_GPU_MAX_CHUNKS 64                     /* pipeline chunks per block */

typedef struct {
    int count;              /* devices seen at ddl_init() */
    int dev;                /* the device current at ddl_init(): this rank's GPU */
    char none_why[160];     /* why count is 0 */
    int nccl_wanted;        /* DDL_NCCL (default 1) */
    size_t chunk_bytes;     /* DDL_GPU_CHUNK_BYTES */
    int nccl_any;           /* the plan: some node should form a NCCL communicator */
    int nccl_node;          /* ... this node should */
    int nccl_all;           /* ... every node should (after ddl_gpu_agree: has) */
    int direct_wanted;      /* DDL_GPU_DIRECT (default 1) */
    int direct;             /* every rank runs GPU-direct rings (the plan) */
    int world_ordered;      /* local ranks in world order on every node (the plan) */
    int ready;              /* streams and events below exist */
    cudaStream_t s_main;    /* NCCL and device-to-device work, ordered */
    cudaStream_t s_d2h;     /* device to pinned host copies */
    cudaStream_t s_h2d;     /* pinned host to device copies */
    cudaEvent_t ev_in;      /* the caller's work this operation follows */
    cudaEvent_t ev_step;    /* the end of a phase on one stream, for another */
    cudaEvent_t ev_done;    /* the end of the operation */
    cudaEvent_t ev_chunk[DDL_GPU_MAX_CHUNKS];
} ddl_gpu_t;

extern ddl_gpu_t ddl_gpu;

/* ddl_gpu_cuda_fail: DDL_ERR_CUDA with what and CUDA's message (and the
 * sticky error cleared where it can be). */
ddl_status_t ddl_gpu_cuda_fail(cudaError_t e, const char *what);

/* ddl_gpu_setup: make this rank's device current in the calling thread
 * (the progress thread too) and create the streams and events once. */
ddl_status_t ddl_gpu_setup(void);

/* ddl_gpu_pinned: pinned host buffer `slot` (0..2) of at least len bytes.
 * Grown buffers are kept until ddl_gpu_fini(): freeing pinned memory may
 * synchronise the device, which must not wait on a stream that libddl
 * itself holds. */
void *ddl_gpu_pinned(int slot, size_t len, ddl_status_t *st);

/* ddl_gpu_release_stream: let the caller's stream of the operation running
 * in this thread go on now (before a call that may synchronise the device,
 * such as ncclCommAbort, on the way out of an aborted operation). */
void ddl_gpu_release_stream(void);

/* ddl_gpu_dev_scratch: device scratch of at least len bytes, grown on
 * demand (outgrown ones are freed at ddl_gpu_fini(), as pinned buffers). */
void *ddl_gpu_dev_scratch(size_t len, ddl_status_t *st);

#ifdef HAVE_GPU_KERNELS
/* gpu_reduce.cu: inout[i] = in[i] op inout[i] on device memory (reduce.c's
 * arithmetic), and DDL_AVG's division; queued on s.  cudaSuccess, the
 * launch's error, or cudaErrorInvalidValue for a type not covered.
 * ddl_gpu_kernels_check: cudaSuccess if the current device can run them
 * (the library holds an image or PTX for its architecture). */
cudaError_t ddl_gpu_reduce_launch(void *inout, const void *in, size_t n, int dtype, int op,
                                  cudaStream_t s);
cudaError_t ddl_gpu_scale_launch(void *buf, size_t n, int dtype, double divisor,
                                 cudaStream_t s);
cudaError_t ddl_gpu_kernels_check(void);
#endif

/* ddl_gpu_follow: make stream s wait for d's inputs: the point recorded on
 * the caller's stream (ddl_*_stream), or else the work queued on the legacy
 * default stream, as cudaMemcpy would. */
ddl_status_t ddl_gpu_follow(const ddl_opdesc_t *d, cudaStream_t s);

/* ddl_gpu_interrupted: one look between polls of a GPU wait: a NCCL
 * failure (which aborts the world), the agent's notices, comm's abort.
 * DDL_OK (a heartbeat sent) to go on, else the status, with the node's
 * NCCL communicator aborted if the world is. */
ddl_status_t ddl_gpu_interrupted(ddl_comm_t *comm);

/* ddl_gpu_wait: poll ev until it completes, without blocking in CUDA:
 * between polls read the agent's notices and check comm's abort flag; an
 * abort (or a NCCL error) aborts the node's NCCL communicator, so that its
 * kernels end, and returns DDL_ERR_ABORTED (or the error).  `what` names
 * the phase in errors. */
ddl_status_t ddl_gpu_wait(cudaEvent_t ev, ddl_comm_t *comm, const char *what);

/* ddl_gpu_wait_stream: record ev_done on s and wait for it. */
ddl_status_t ddl_gpu_wait_stream(cudaStream_t s, ddl_comm_t *comm, const char *what);

#ifdef HAVE_NCCL
/* nccl.c.  ddl_nccl_record: local rank 0's id for the bootstrap record
 * (DDL_NCCL_ID_BYTES into id); -1 if NCCL cannot make one (logged).
 * ddl_nccl_join: join the node's communicator (nonblocking init, polled up
 * to timeout_s); DDL_OK or the error (NCCL is then left out).
 * ddl_nccl_ready: 1 if this rank has a communicator.  ddl_nccl_set_agreed:
 * the world's verdict (ddl_gpu_agree(); not ok: the communicator goes).
 * ddl_nccl_check: DDL_OK, or the communicator's asynchronous error.
 * ddl_nccl_abort: abort the communicator (kernels end; idempotent).
 * ddl_nccl_fini: destroy it (abort if the world was aborted).
 * ddl_nccl_execute: 1 if d runs through NCCL here (world on one node, or
 * the hierarchical allreduce across nodes), with its status in *st;
 * send_dev and recv_dev say which of d's buffers are device memory. */
int ddl_nccl_record(void *id);
ddl_status_t ddl_nccl_join(int nlocal, int local_rank, const void *id, int timeout_s);
int ddl_nccl_ready(void);
void ddl_nccl_set_agreed(int ok);
ddl_status_t ddl_nccl_check(void);
void ddl_nccl_abort(void);
void ddl_nccl_fini(void);
int ddl_nccl_execute(const ddl_opdesc_t *d, int send_dev, int recv_dev, ddl_status_t *st);
#endif

#endif
