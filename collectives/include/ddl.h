/* ddl.h: the public API of libddl, ddl's collectives library.
 *
 * A training program links libddl (pkg-config ddl), calls ddl_init() once,
 * then collectives on the world communicator, then ddl_finalize().  Started
 * by `ddlrun -n N`, the ranks find each other through the node's ddl-agent
 * (the DDL_* environment says where); started alone, the program is a world
 * of one rank and needs no agent.
 *
 * Failures: libddl does not detect a peer that dies in the middle of a job
 * by itself (UCX's peer-failure mode has no shared-memory transport); a
 * collective waiting for a dead peer waits until its communicator is
 * aborted.  The supervisor handles it: ddlrun stops every rank when one
 * fails.
 *
 * Threads: unless a function says otherwise, libddl is not thread-safe.
 * Call ddl_init(), every collective and ddl_finalize() from one thread.
 * ddl_test(), ddl_wait(), ddl_request_free() and ddl_comm_abort() may be
 * called from any thread.  The first non-blocking call (ddl_i*) starts one
 * progress thread, which from then on runs every collective in the order
 * they were posted, blocking ones included; programs that only use
 * blocking calls run them in the calling thread and get no extra thread.
 *
 * Errors: every function that can fail returns a ddl_status_t: DDL_OK (0) on
 * success, a negative code on failure.  ddl_status_str() names a code;
 * ddl_last_error() gives the human-readable detail of the last failure in the
 * calling thread (what failed, with the value, and what to do).
 */
#ifndef DDL_H
#define DDL_H

#include <stddef.h>
#include <stdint.h>

#include "ddl_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes.  Values are part of the ABI and are never renumbered. */
typedef enum {
    DDL_OK = 0,
    DDL_INPROGRESS = 1,           /* operation not complete yet */
    DDL_STOP = 2,                 /* ddl_should_stop(): checkpoint now and exit with
                                   * DDL_EXIT_STOPPED (not an error) */
    DDL_RESTART = 3,              /* after ddl_warm_enable(): the agents started a new
                                   * generation; call ddl_rejoin() (not an error) */
    DDL_ERR_INVALID = -1,         /* bad argument (NULL buffer, bad root...) */
    DDL_ERR_NOMEM = -2,           /* out of memory */
    DDL_ERR_NOT_INITIALIZED = -3, /* ddl_init() was not called, or failed */
    DDL_ERR_ALREADY = -4,         /* ddl_init() called twice */
    DDL_ERR_UNSUPPORTED = -5,     /* type/operation combination not offered */
    DDL_ERR_BOOTSTRAP = -6,       /* could not reach the agent or peers */
    DDL_ERR_TRANSPORT = -7,       /* UCX reported an error */
    DDL_ERR_PEER = -8,            /* a peer rank failed or disconnected */
    DDL_ERR_TIMEOUT = -9,         /* a bounded wait expired */
    DDL_ERR_ABORTED = -10,        /* the communicator was aborted */
    DDL_ERR_INTERNAL = -11,       /* a bug in ddl: please report it */
    DDL_ERR_IO = -12,             /* a file could not be read or written (checkpoints) */
    DDL_ERR_CUDA = -13,           /* a CUDA call failed (device buffers) */
} ddl_status_t;

/* Element types.  Values are part of the ABI. */
typedef enum {
    DDL_FLOAT32 = 0,
    DDL_FLOAT64 = 1,
    DDL_INT32 = 2,
    DDL_INT64 = 3,
    DDL_FLOAT16 = 4,  /* IEEE binary16; reduced in float, rounded to nearest even */
    DDL_BFLOAT16 = 5, /* bfloat16; reduced in float, rounded to nearest even */
    DDL_UINT8 = 6,    /* sums and products wrap modulo 256 */
} ddl_dtype_t;

/* Reductions.  DDL_AVG is the sum divided by the communicator size and is
 * offered for floating-point types only.  Integer sums and products wrap
 * (two's complement).  Values are part of the ABI. */
typedef enum {
    DDL_SUM = 0,
    DDL_PROD = 1,
    DDL_MIN = 2,
    DDL_MAX = 3,
    DDL_AVG = 4,
} ddl_op_t;

/* A communicator: an ordered group of ranks.  Opaque; the world
 * communicator is owned by libddl and valid from ddl_init() to
 * ddl_finalize(). */
typedef struct ddl_comm ddl_comm_t;

/* A posted non-blocking collective.  Opaque; owned by the caller, who
 * releases it with ddl_request_free(). */
typedef struct ddl_request ddl_request_t;

/* Pass as the send buffer of ddl_allreduce() to reduce in place. */
#define DDL_IN_PLACE ((const void *)1)

/* ddl_status_str: a short constant name for a status ("DDL_ERR_PEER: a
 * peer rank failed").  Never NULL; unknown codes get a generic string.
 * Thread-safe. */
const char *ddl_status_str(ddl_status_t status);

/* ddl_last_error: the detail of the last failure in the calling thread, or ""
 * if none.  The string is owned by libddl and valid until the next libddl
 * call in this thread.  Thread-safe (per-thread storage). */
const char *ddl_last_error(void);

/* ddl_dtype_size: bytes per element of a type, or 0 for an unknown type. */
size_t ddl_dtype_size(ddl_dtype_t dtype);

/* ddl_init: join the job.  Reads the DDL_* environment set by ddlrun or
 * ddl-launch; without it the process is a world of size 1.  Blocks until
 * every rank of the world has called ddl_init() (bounded by
 * DDL_BOOTSTRAP_TIMEOUT seconds, default 120).
 * Returns DDL_OK; DDL_ERR_ALREADY if already initialised; DDL_ERR_INVALID for
 * a malformed DDL_* variable; DDL_ERR_BOOTSTRAP if the agent cannot be reached
 * or the exchange times out; DDL_ERR_TRANSPORT if UCX cannot start.  On
 * failure nothing stays allocated and ddl_init() may be retried. */
ddl_status_t ddl_init(void);

/* ddl_finalize: leave the job.  Collective: blocks until every rank has
 * called it, then releases every resource.  Returns DDL_OK, or
 * DDL_ERR_NOT_INITIALIZED; a transport error during teardown is returned
 * but resources are released all the same. */
ddl_status_t ddl_finalize(void);

/* ddl_heartbeat: tell the rank's supervisor that the program is making
 * progress, at `step` (e.g. the training iteration; negative: none).  Under
 * ddlrun --hang-timeout (and srun --ddl --ddl-hang-timeout), a worker from
 * which nothing is heard for that long
 * is taken as hung: its state and last step are reported, it is killed and
 * (with --restarts) the job restarts.  libddl also beats on every
 * collective and while it waits for a peer, so a program that calls a
 * collective more often than the timeout needs no heartbeat of its own;
 * one with long phases without collectives (evaluation, I/O) should call
 * it.  Called once per training step, it also lets the agents name a rank
 * persistently slower than its peers (a straggler): each call notes the
 * clock and the time waited in collectives so far, and a rank's compute
 * per step is the step time less that wait (docs/user-guide.md
 * "Stragglers").  Cheap (at most one write every 100 ms), non-blocking,
 * thread-safe, usable before ddl_init(); a no-op without a supervisor.
 * Returns DDL_OK. */
ddl_status_t ddl_heartbeat(int64_t step);

/* Exit status of a program that stopped because ddl_should_stop() said so,
 * after committing its checkpoint (the same as the launchers' own, see
 * docs/user-guide.md "Exit status"): under Slurm the batch script requeues
 * the job on it (docs/slurm.md "Time limits and preemption"). */
#define DDL_EXIT_STOPPED 94

/* The exit status for a program that found no valid checkpoint to resume
 * from where one must exist (ddl_ckpt_restore() failed with DDL_ERR_IO):
 * the agents and ddlrun stop the step with it at once instead of
 * restarting, since every restart would fail the same way. */
#define DDL_EXIT_NO_CHECKPOINT 95

/* ddl_should_stop: whether to checkpoint and exit now, at this step
 * boundary.  When Slurm is about to end the job (its time limit's or a
 * preemption's SIGTERM, or the signal of sbatch --signal, SIGUSR1 or
 * SIGUSR2), or ddlrun gets SIGTERM, SIGUSR1 or SIGUSR2, the node agents
 * ask every rank to stop; the ranks agree on one boundary through the
 * agents, and at that boundary this returns DDL_STOP on every rank of the
 * world.  The program then commits a checkpoint of the state after `step`
 * (ddl_ckpt_begin ... ddl_ckpt_commit), calls ddl_finalize() and exits
 * with DDL_EXIT_STOPPED; the requeued job resumes from that checkpoint.
 *
 * Call it at every step boundary (or every k steps), the same number of
 * times on every rank of the world, with at least one collective on the
 * world between two calls (the gradient allreduce); `step` is the
 * program's step number, for messages only.  From ddl_init() on, libddl
 * catches SIGTERM, SIGUSR1 and SIGUSR2 in a process started by ddlrun or
 * srun --ddl when their disposition is the default (a program's own
 * handler is left alone), so that these signals ask for the stop instead
 * of killing the rank; a SIGTERM from the rank's own supervisor (a restart,
 * or the agents' decision to stop) still ends it at once; ddl_finalize()
 * restores the defaults.  A world of one without an agent connection
 * stops at its next call after such a signal.
 *
 * Blocking: cheap (one poll of the agent connection) unless a stop is under
 * way; then it waits for the agents' decision, which comes once every rank
 * has reached a call or a collective (milliseconds).  Call it from the
 * thread that runs the blocking collectives.  Not thread-safe.
 * Returns DDL_OK (go on), DDL_STOP (stop now); DDL_ERR_NOT_INITIALIZED;
 * DDL_ERR_ABORTED when the world was aborted (a failure elsewhere, or this
 * rank lost its node's agent) while it waited or before. */
ddl_status_t ddl_should_stop(int64_t step);

/* Warm restart in place.  By default, after a failure anywhere in the step
 * (a rank crashed or hung, a node lost), every worker process is killed and
 * started again (a cold restart: it reloads its checkpoint from disk).  A
 * program that can rebuild its state in place opts in with
 * ddl_warm_enable(): from then on its live workers are kept on a new
 * generation; only the processes that died are started again (a spare's
 * fresh worker, or the killed rank's), and they join the same generation.
 *
 * When the agents end a generation, every collective in flight or started
 * afterwards, and ddl_should_stop(), return DDL_RESTART on a rank that
 * opted in (DDL_ERR_ABORTED otherwise, as before).  The program then calls
 * ddl_rejoin(), which returns the new world communicator (the rank and
 * size may have changed: a smaller world, or a spare's node in a lost
 * one's place), reloads its last committed checkpoint (from memory if it
 * kept one, from disk otherwise) and goes on from that step.
 *
 * A failure elsewhere that ends the new generation before it formed (a
 * peer that withdrew, below) is followed: the rank joins the agents' next
 * generation instead, within the same call.  If anything else fails on the
 * warm path (the new generation's exchange times out, a peer of another
 * version) the rank withdraws:
 * ddl_rejoin() returns the error and the program must exit (non-zero); its
 * supervisor then restarts it cold, as without the opt-in.  A worker is
 * never kept on a new generation unless its libddl rejoins it.
 *
 * ddl_warm_enable: opt this process in.  Call after ddl_init(), before the
 * training loop, from the thread that runs the collectives.  Blocking: one
 * round trip to the node's agent (milliseconds).  Not thread-safe.  Returns
 * DDL_OK; DDL_ERR_NOT_INITIALIZED; DDL_ERR_UNSUPPORTED when restarts are
 * not supervised here (a world of one, no agent, a step without recovery,
 * or a program started through a wrapper that forks it: ddl-launch would
 * not recognise its worker); DDL_ERR_BOOTSTRAP when the agent cannot be
 * reached.  On any error restarts stay cold and the program may go on. */
ddl_status_t ddl_warm_enable(void);

/* ddl_restart_pending: 1 when the agents ended this rank's generation and
 * ddl_rejoin() is due (a collective returned DDL_RESTART, or will), else 0.
 * Thread-safe, never blocks. */
int ddl_restart_pending(void);

/* ddl_rejoin: leave the ended generation and join the new one.  Tears down
 * the old world (UCX endpoints, the node's NCCL communicator, every
 * communicator split from the world, memory registrations, requests in
 * flight: all invalid afterwards), waits for the agents' decision if it has
 * not come yet, then redoes ddl_init()'s exchange with the new membership
 * (again with a newer generation's, if the agents end that one before it
 * formed: each such generation is a restart they decided).  On DDL_OK, *world (if not NULL) is the new world communicator (also
 * ddl_comm_world()), and ddl_rank(), ddl_size(), ddl_node_id() and
 * ddl_num_nodes() give the new place; RANK, WORLD_SIZE, DDL_RANK and the
 * like in the environment are updated.  The program then reloads its last
 * committed checkpoint (ddl_ckpt_latest() says which step every rank
 * agrees on) and calls ddl_heartbeat() and the collectives as after
 * ddl_init().  An asynchronous checkpoint still in flight is abandoned.
 *
 * Blocking: until every rank of the new generation has joined, at most
 * DDL_BOOTSTRAP_TIMEOUT seconds (default 120).  Call from the thread that
 * runs the collectives, with no other libddl call in flight.  Not
 * thread-safe (it changes the environment).  Returns DDL_OK;
 * DDL_ERR_NOT_INITIALIZED; DDL_ERR_INVALID without ddl_warm_enable() or
 * when no new generation is due (the world is not aborted); DDL_ERR_TIMEOUT
 * when no decision came; DDL_ERR_BOOTSTRAP (or another error of ddl_init)
 * when the exchange failed.  On an error libddl is left uninitialised and
 * this rank has withdrawn from warm restarts: exit non-zero, to be
 * restarted cold. */
ddl_status_t ddl_rejoin(ddl_comm_t **world);

/* ddl_gpu_count: the CUDA devices libddl can use in this process: 0 when
 * it was built without CUDA, or there is no GPU or no driver (then every
 * buffer is host memory, and a CUDA stream gets DDL_ERR_CUDA).  Valid after
 * ddl_init(); thread-safe then.
 *
 * Device memory: any collective accepts CUDA device memory (found with
 * cudaPointerGetAttributes) in sendbuf and recvbuf; every rank passes the
 * same kind of memory to the same collective.  This rank's GPU is the
 * device current when ddl_init() is called (under ddlrun and srun --ddl
 * each rank usually sees only its own GPU through CUDA_VISIBLE_DEVICES).
 * The path, fastest first:
 *   - the world on one node, every rank with its own GPU: NCCL (one
 *     communicator per node, made at ddl_init(); its unique id travels
 *     through the agents' bootstrap exchange);
 *   - an allreduce on the world across nodes with the same number of ranks
 *     on each: hierarchical (NCCL reduce-scatter inside the node, each
 *     rank's block through pinned host memory to an inter-node ring over
 *     UCX, pipelined in DDL_GPU_CHUNK_BYTES chunks, NCCL allgather); when
 *     every rank's UCX moves CUDA memory (and libddl was built with nvcc),
 *     GPU-direct instead: the inter-node ring sends the device block
 *     itself and reduces on the device;
 *   - anything else (several ranks sharing a GPU, split communicators,
 *     mixed host and device buffers): staged, the input copied to pinned
 *     host memory, the host algorithm, the result copied back.
 * Results are bit-identical on every rank, but the NCCL paths may round
 * differently from the host path (DDL_FLOAT16 and DDL_BFLOAT16 in
 * particular), so a job keeps the same path from start to end.
 * Ordering: a blocking call or a ddl_i*() call follows the work queued on
 * the legacy default stream before it (as cudaMemcpy does) and has finished
 * with the buffers when it completes; work on other streams must be
 * synchronised by the caller or go through ddl_*_stream() below.  Every
 * wait polls, so ddl_comm_abort() and the agents' failure notices end a
 * GPU collective too (an abort of the world also aborts the node's NCCL
 * communicator with ncclCommAbort, so its kernels end).  A CUDA failure
 * gives DDL_ERR_CUDA, a NCCL failure DDL_ERR_TRANSPORT (DDL_ERR_PEER for a
 * remote one) and aborts the world (the node's ranks could no longer keep
 * the same paths).
 * Environment: DDL_NCCL=0 leaves NCCL out (staged instead); DDL_GPU_DIRECT=0
 * keeps device buffers off UCX (host staging between nodes);
 * DDL_GPU_CHUNK_BYTES (4096-1 GiB, default 4 MiB) is the pipeline chunk
 * (the smallest any rank asked for).
 * Managed memory is treated as host memory. */
int ddl_gpu_count(void);

/* Identity of this process, valid between ddl_init() and ddl_finalize()
 * (before: rank 0 of a world of 1).  Thread-safe once initialised. */
int ddl_rank(void);       /* 0 .. ddl_size()-1 */
int ddl_size(void);       /* ranks in the world */
int ddl_local_rank(void); /* rank among the ranks on this node */
int ddl_local_size(void); /* ranks on this node */
int ddl_node_id(void);    /* 0 .. ddl_num_nodes()-1 */
int ddl_num_nodes(void);  /* nodes in the world */

/* ddl_comm_world: the communicator of all ranks, or NULL before ddl_init().
 * Not owned by the caller. */
ddl_comm_t *ddl_comm_world(void);

/* ddl_comm_rank / ddl_comm_size: this process's rank in comm and the
 * number of ranks in it; -1 if comm is NULL. */
int ddl_comm_rank(const ddl_comm_t *comm);
int ddl_comm_size(const ddl_comm_t *comm);

/* ddl_comm_node / ddl_comm_cross: the ranks on this node (ordered by world
 * rank), and the ranks on every node that have this process's local rank
 * (one per node, ordered by world rank, which is node order when ranks are
 * numbered node by node, as ddlrun does).  Owned by libddl, valid from ddl_init()
 * to ddl_finalize(); NULL before.  Built from the bootstrap exchange: no
 * communication. */
ddl_comm_t *ddl_comm_node(void);
ddl_comm_t *ddl_comm_cross(void);

/* Color of a rank that wants no communicator from ddl_comm_split(). */
#define DDL_UNDEFINED (-1)

/* ddl_comm_split: collective over comm: ranks passing the same color form
 * one new communicator, ordered by key, ties by rank in comm (MPI's rule).
 * *newcomm is owned by the caller (ddl_comm_free()); NULL for color
 * DDL_UNDEFINED.  Blocking.  Returns DDL_OK; DDL_ERR_INVALID (NULL
 * arguments, color < -1); DDL_ERR_NOMEM; or a transport error. */
ddl_status_t ddl_comm_split(ddl_comm_t *comm, int color, int key, ddl_comm_t **newcomm);

/* ddl_comm_free: release a communicator from ddl_comm_split() once no
 * operation on it is pending.  Accepts NULL; the built-in communicators
 * are ignored.  Returns DDL_OK or DDL_ERR_INVALID (operations pending). */
ddl_status_t ddl_comm_free(ddl_comm_t *comm);

/* ddl_allreduce: recvbuf[i] = sendbuf[i] (op) over every rank, i < count.
 * Collective and blocking: every rank of comm calls it with the same count,
 * dtype and op.  sendbuf may equal recvbuf or be DDL_IN_PLACE; otherwise the
 * buffers must not overlap.  Buffers stay owned by the caller.  The result is
 * bit-identical on every rank (a fixed reduction order), so data-parallel
 * replicas do not drift.  count may be 0.
 * Returns DDL_OK; DDL_ERR_INVALID (NULL buffer with count > 0, unknown
 * dtype/op); DDL_ERR_UNSUPPORTED (DDL_AVG on an integer type);
 * DDL_ERR_NOMEM; DDL_ERR_ABORTED after ddl_comm_abort(); DDL_ERR_TRANSPORT
 * when UCX reports an error (e.g. a peer that is gone when first contacted).
 * On error recvbuf contents are undefined. */
ddl_status_t ddl_allreduce(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                           size_t count, ddl_dtype_t dtype, ddl_op_t op);

/* ddl_bcast: copy count elements of buf from rank root to every rank of
 * comm.  Collective and blocking; same count, dtype and root on every rank.
 * Returns DDL_OK; DDL_ERR_INVALID (bad root, NULL buffer with count > 0);
 * DDL_ERR_TRANSPORT or DDL_ERR_PEER. */
ddl_status_t ddl_bcast(ddl_comm_t *comm, void *buf, size_t count,
                       ddl_dtype_t dtype, int root);

/* ddl_reduce_scatter: reduce size*recvcount elements of sendbuf over
 * every rank, and leave block r (elements r*recvcount .. (r+1)*recvcount-1
 * of the result) in recvbuf of rank r.  sendbuf == DDL_IN_PLACE takes the
 * input from recvbuf, which must then hold size*recvcount elements (the
 * block lands at its start).  Collective, blocking; bit-identical rules and
 * errors as ddl_allreduce(). */
ddl_status_t ddl_reduce_scatter(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                size_t recvcount, ddl_dtype_t dtype, ddl_op_t op);

/* ddl_allgather: recvbuf (size*sendcount elements) receives every rank's
 * sendcount elements in rank order.  sendbuf == DDL_IN_PLACE takes this
 * rank's block from its place in recvbuf.  Collective, blocking.  Errors as
 * ddl_bcast(). */
ddl_status_t ddl_allgather(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                           size_t sendcount, ddl_dtype_t dtype);

/* ddl_reduce: like ddl_allreduce, but only root's recvbuf receives the
 * result (recvbuf is not written on other ranks and may be NULL there).
 * With sendbuf == DDL_IN_PLACE every rank's input is read from its recvbuf,
 * which then must not be NULL on any rank.  Same result bits as
 * ddl_allreduce with the ring algorithm. */
ddl_status_t ddl_reduce(ddl_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                        ddl_dtype_t dtype, ddl_op_t op, int root);

/* ddl_barrier: return only after every rank of comm has entered it.
 * Collective and blocking.  Returns DDL_OK, DDL_ERR_TRANSPORT or
 * DDL_ERR_PEER. */
ddl_status_t ddl_barrier(ddl_comm_t *comm);

/* ---- non-blocking collectives ----
 *
 * Each ddl_iX() validates its arguments like X() (the same errors, returned
 * at once, with *req set to NULL), queues the operation and returns DDL_OK
 * with a request in *req.  Buffers must stay valid and untouched until the
 * request completes.  Operations complete in the order they were posted;
 * every rank must post the same collectives in the same order. */
ddl_status_t ddl_iallreduce(ddl_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                            ddl_dtype_t dtype, ddl_op_t op, ddl_request_t **req);
ddl_status_t ddl_ibcast(ddl_comm_t *comm, void *buf, size_t count, ddl_dtype_t dtype, int root,
                        ddl_request_t **req);
ddl_status_t ddl_ibarrier(ddl_comm_t *comm, ddl_request_t **req);
ddl_status_t ddl_ireduce_scatter(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 size_t recvcount, ddl_dtype_t dtype, ddl_op_t op,
                                 ddl_request_t **req);
ddl_status_t ddl_iallgather(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                            size_t sendcount, ddl_dtype_t dtype, ddl_request_t **req);
ddl_status_t ddl_ireduce(ddl_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                         ddl_dtype_t dtype, ddl_op_t op, int root, ddl_request_t **req);

/* ---- CUDA streams ----
 *
 * ddl_i*_stream(): the non-blocking call, ordered on a CUDA stream (pass a
 * cudaStream_t as stream; NULL is the plain ddl_i*() call).  The operation
 * starts once the work queued on stream before the call is done, and the
 * work queued on stream after the call starts once the operation is
 * complete; completion is also seen through the request (ddl_test(),
 * ddl_wait()), which the caller frees as usual.  The stream is held by a
 * host function (cudaLaunchHostFunc) until the operation completes,
 * aborted or failed included, so a stream never waits forever on libddl
 * (CUDA may run host functions one at a time: the program's own, on other
 * streams, may wait behind it).
 * Buffers may be host or device memory.  Errors: those of ddl_i*(), and
 * DDL_ERR_CUDA when no GPU is usable (or libddl was built without CUDA) or
 * the stream cannot be used; then nothing was queued on the stream. */
ddl_status_t ddl_iallreduce_stream(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, ddl_dtype_t dtype, ddl_op_t op, void *stream,
                                   ddl_request_t **req);
ddl_status_t ddl_ibcast_stream(ddl_comm_t *comm, void *buf, size_t count, ddl_dtype_t dtype,
                               int root, void *stream, ddl_request_t **req);
ddl_status_t ddl_ireduce_scatter_stream(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                        size_t recvcount, ddl_dtype_t dtype, ddl_op_t op,
                                        void *stream, ddl_request_t **req);
ddl_status_t ddl_iallgather_stream(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t sendcount, ddl_dtype_t dtype, void *stream,
                                   ddl_request_t **req);

/* ddl_test: DDL_INPROGRESS while req runs, then its final status (DDL_OK
 * or the error the blocking call would have returned; ddl_last_error()
 * holds the detail).  Never blocks.  DDL_ERR_INVALID for a NULL request. */
ddl_status_t ddl_test(ddl_request_t *req);

/* ddl_wait: block until req completes or timeout_ms passes (negative: no
 * limit, 0: same as ddl_test).  Returns the final status, or
 * DDL_ERR_TIMEOUT if still running (the request stays valid). */
ddl_status_t ddl_wait(ddl_request_t *req, int timeout_ms);

/* ddl_request_free: release a request.  A request still running completes
 * in the background and is then released; its buffers must stay valid until
 * then.  Accepts NULL. */
void ddl_request_free(ddl_request_t *req);

/* A registered buffer (ddl_mem_register).  Opaque; owned by the caller. */
typedef struct ddl_mem ddl_mem_t;

/* ddl_mem_register: register buf[0, len) with the transport once, for a
 * buffer that is used by many large collectives (gradient buckets, weights).
 * Every later send or receive that lies inside it passes the registration
 * to UCX instead of looking it up (or registering) on each call; results
 * are the same either way.  On transports that need no registration
 * (shared memory, TCP) there is nothing to gain but nothing lost.  The
 * buffer must stay allocated until ddl_mem_deregister(); registrations may
 * overlap (the newest that contains a transfer is used).  Callable from any
 * thread after ddl_init().  Returns DDL_OK with *mem set;
 * DDL_ERR_NOT_INITIALIZED; DDL_ERR_INVALID for a NULL buf or mem or len 0;
 * DDL_ERR_NOMEM; DDL_ERR_TRANSPORT if UCX refuses the registration.
 * (ddl_mem_alloc() below also lets neighbours on a node read the buffer
 * directly.) */
ddl_status_t ddl_mem_register(void *buf, size_t len, ddl_mem_t **mem);

/* ddl_mem_deregister: undo ddl_mem_register().  No collective on the buffer
 * may be pending (wait for its requests first).  Memory from
 * ddl_mem_alloc() is released with ddl_mem_free() instead.  Accepts NULL (DDL_OK).
 * Callable from any thread; ddl_finalize() releases the registrations left,
 * after which their handles are invalid.  Returns DDL_OK, or DDL_ERR_INVALID
 * for a handle that is not registered (deregistered twice, or after
 * ddl_finalize()). */
ddl_status_t ddl_mem_deregister(ddl_mem_t *mem);

/* ddl_mem_alloc: collective over the world (every rank calls it with the
 * same len, in the same order relative to the other collectives): allocate
 * len bytes that the other ranks on this node can read directly (UCX maps
 * them into their address space: shared memory).  The ring algorithms
 * (allreduce, reduce-scatter, allgather, and the node level of hier) then
 * move data between neighbours on the same node without any transfer: a
 * rank is told a segment is ready and reduces or copies it straight from
 * its neighbour's buffer.  That applies to a collective whose recvbuf (or
 * in-place buffer) lies inside such an allocation on the sending rank; any
 * other buffer goes through UCX as usual, with the same results.  Results
 * are bit-identical to the transfer path.  When UCX cannot map the memory
 * between this node's ranks (UCX_TLS without a shared-memory transport), or
 * in a world of one, the memory is still allocated and usable, only without
 * the direct path.  Blocking; call it from the thread that makes blocking
 * collectives while no non-blocking one is pending on the world.  Returns
 * DDL_OK with *ptr (page-aligned, zero-filled) and *mem set;
 * DDL_ERR_NOT_INITIALIZED; DDL_ERR_INVALID for len 0 or NULL ptr/mem;
 * DDL_ERR_NOMEM; DDL_ERR_TRANSPORT if UCX cannot allocate; the collective's
 * errors (DDL_ERR_ABORTED ...).  Release with ddl_mem_free(). */
ddl_status_t ddl_mem_alloc(size_t len, void **ptr, ddl_mem_t **mem);

/* ddl_mem_free: collective over the world, in the same order on every
 * rank: release memory from ddl_mem_alloc() once no rank can still read it
 * (a barrier, then the unmap).  No collective on it may be pending.
 * Accepts NULL (DDL_OK, no collective).  Returns DDL_OK, DDL_ERR_INVALID
 * for a handle that ddl_mem_alloc() did not return (or freed twice), or the
 * barrier's error; the memory is released on this rank in any case.
 * ddl_finalize() releases what is left. */
ddl_status_t ddl_mem_free(ddl_mem_t *mem);

/* ddl_comm_abort: abort comm on this rank: the running operation on it
 * fails with DDL_ERR_ABORTED at its next progress check (measured: a few
 * milliseconds; tested: under 1 s), queued ones at once, future ones when
 * posted.  Aborting the world aborts every communicator.  Other ranks are
 * not told: each rank must abort its own.  Under a supervising agent
 * (srun --ddl, ddlrun --emulate) libddl does it by itself: when the agents
 * end the generation after a failure elsewhere, or this rank loses its
 * node's agent, the world is aborted with the agents' reason while an
 * operation waits for a peer.  reason (may be NULL) is copied into the
 * error text.
 * Idempotent; callable from any thread, including while another thread
 * waits.  An aborted communicator stays aborted; after aborting the world
 * the process should call ddl_finalize() and exit or restart.  Returns
 * DDL_OK, or DDL_ERR_INVALID for NULL. */
ddl_status_t ddl_comm_abort(ddl_comm_t *comm, const char *reason);

/* ---- gradient exchange (wait-free backpropagation, fusion, SFB) ----
 *
 * A data-parallel training step sums (or averages) every layer's gradient
 * over the ranks.  The exchange does it layer by layer while backward runs:
 *
 *     ddl_gradx_t *gx;
 *     ddl_gradx_create(comm, DDL_SUM, &gx);          once
 *     ddl_gradx_add_fc(gx, 784, 1024, 32, DDL_GRADX_AUTO, &w1);
 *     ddl_gradx_add_layer(gx, 1024, &b1);           in forward order
 *     ...
 *     ddl_gradx_commit(gx);                          collective, once
 *     each step, during backward (last layer first):
 *         ddl_gradx_push(gx, b2, grad_b2);           or, for an FC layer,
 *         ddl_gradx_push_factors(gx, w2, acts, deltas, rows_here, grad_w2);
 *     then in the optimizer (first layer first):
 *         ddl_gradx_wait(gx, w1); update layer 1 ...
 *
 * Layers are float32 buffers, numbered 0, 1, ... in the order they are
 * registered, which must be the order the forward pass needs them: that is
 * their priority (layer 0 first).  Every rank registers the same layers and
 * calls push and wait in the same order (ddl_gradx_commit checks the
 * registrations; a different order of pushes is not detected and may hang
 * or mix layers up).  A step is one push and one wait of every layer; the
 * next push after the step's last wait starts the next step.
 *
 * Fusion: a gradient smaller than DDL_FUSION_BYTES (default 1 MiB, 0: no
 * fusion) is copied into the open bucket, which is allreduced as one
 * operation once it holds that many bytes, or at the step's last push, or
 * when a wait needs one of its layers.  A larger gradient is allreduced in
 * place on its own.  Priority: a bucket's layers lie in registration order,
 * and when one push makes several operations ready (the step's last push
 * closes the open bucket too), the one holding the lowest-numbered layer is
 * posted first.  Once posted, operations run in posting order on the
 * progress thread (every rank must post the same sequence), so a posted
 * bucket is never overtaken.  A gradient's result is bit-identical to one
 * ddl_allreduce() of that layer when it travels alone (a large layer, or
 * DDL_FUSION_BYTES=0); in a fused bucket an element may be summed in
 * another order than in a call of its own, so its last bits may differ
 * from that call's (never between ranks).
 *
 * Sufficient factors (SFB): the gradient of a fully connected layer
 * registered with a shape rows x cols is A^T D, summed over the batch,
 * with A (b x rows) the layer's input activations and D (b x cols) the
 * deltas of its outputs for the b samples of this rank.  For such a layer
 * the program hands over A and D instead; ddl_gradx_commit() decides per
 * layer whether the factors travel (an allgather of max_batch (rows + cols)
 * values per rank, then every rank computes the summed gradient with one
 * GEMM over all ranks' factors in rank order: the same bits on every rank)
 * or the full matrix (the factors' product A^T D computed here, then the
 * allreduce): by a cost model of both (bytes and flops, from the link
 * parameters ddl_init() measures and a GEMM timed at commit; see
 * docs/libddl.md), unless the layer's mode or DDL_SFB=on|off fixes it.
 *
 * Threads: one ddl_gradx_t is used by one thread at a time (the training
 * thread); different ones may be used by different threads.  Buffers stay
 * owned by the caller.  Errors of an operation (DDL_ERR_ABORTED after
 * ddl_comm_abort() on any thread, transport errors) surface at the wait of
 * each layer it carried; after an error the step is lost and the exchange
 * only accepts ddl_gradx_free().
 */

/* An exchange.  Opaque; owned by the caller (ddl_gradx_free()). */
typedef struct ddl_gradx ddl_gradx_t;

/* How a fully connected layer's gradient travels. */
typedef enum {
    DDL_GRADX_AUTO = 0, /* DDL_SFB decides: auto (the cost model), on, off */
    DDL_GRADX_FULL = 1, /* the full matrix, allreduced */
    DDL_GRADX_SFB = 2,  /* the sufficient factors, allgathered */
} ddl_gradx_mode_t;

/* Counters of an exchange since ddl_gradx_create(). */
typedef struct {
    uint64_t steps;        /* steps completed (every layer waited for) */
    uint64_t operations;   /* allreduces and allgathers posted */
    uint64_t bytes_sent;   /* payload bytes this rank's transport sent in them */
    uint64_t model_bytes;  /* what the cost model predicts they send, per step */
    double comm_us;        /* time the progress thread spent running them */
    double exposed_us;     /* time the caller spent blocked in ddl_gradx_wait() */
    double rebuild_us;     /* of which: GEMMs rebuilding gradients from factors */
} ddl_gradx_stats_t;

/* ddl_gradx_create: a new exchange over comm, reducing with op (DDL_SUM or
 * DDL_AVG).  Local; reads DDL_FUSION_BYTES and DDL_SFB.  Returns DDL_OK with
 * *gx owned by the caller; DDL_ERR_NOT_INITIALIZED; DDL_ERR_INVALID (NULL
 * arguments, another op, a bad DDL_FUSION_BYTES or DDL_SFB); DDL_ERR_NOMEM. */
ddl_status_t ddl_gradx_create(ddl_comm_t *comm, ddl_op_t op, ddl_gradx_t **gx);

/* ddl_gradx_add_layer: register the next layer: a gradient of count
 * float32 values (count > 0).  Local, before ddl_gradx_commit().  *layer
 * (may be NULL) receives its number.  Returns DDL_OK; DDL_ERR_INVALID
 * (NULL gx, count 0, after the commit); DDL_ERR_NOMEM. */
ddl_status_t ddl_gradx_add_layer(ddl_gradx_t *gx, size_t count, int *layer);

/* ddl_gradx_add_fc: register the next layer as a fully connected one whose
 * gradient is a rows x cols row-major matrix (rows: inputs, cols: outputs),
 * at most max_batch samples per rank and step (the same on every rank:
 * padding of the factors), travelling as mode says.  Local.  Returns DDL_OK;
 * DDL_ERR_INVALID (a dimension < 1, rows * cols overflowing, an unknown
 * mode, after the commit); DDL_ERR_NOMEM. */
ddl_status_t ddl_gradx_add_fc(ddl_gradx_t *gx, int rows, int cols, int max_batch,
                              ddl_gradx_mode_t mode, int *layer);

/* ddl_gradx_commit: end the registration.  Collective and blocking over
 * the exchange's communicator: checks that every rank registered the same
 * layers (sizes, shapes, modes) with the same DDL_FUSION_BYTES and DDL_SFB,
 * times a GEMM, and decides full matrix or factors for each FC layer (the
 * same on every rank; logged at debug level).  Returns DDL_OK;
 * DDL_ERR_INVALID (no layer, committed twice, registrations that differ
 * between ranks: on every rank, with this rank's registration in the
 * text); DDL_ERR_NOMEM; or the collective's errors (DDL_ERR_ABORTED ...). */
ddl_status_t ddl_gradx_commit(ddl_gradx_t *gx);

/* ddl_gradx_layer_sfb: 1 if layer's factors travel, 0 if its full matrix
 * does, -1 for a bad layer or before the commit.  Programs that push
 * factors only where they travel save the local GEMM elsewhere. */
int ddl_gradx_layer_sfb(const ddl_gradx_t *gx, int layer);

/* ddl_gradx_push: hand over layer's gradient (count float32 values in grad)
 * once backward produced it; grad receives the result.  Non-blocking: the
 * gradient is copied into a bucket or posted in place; grad must stay
 * valid and untouched until ddl_gradx_wait() of that layer returns.
 * Returns DDL_OK; DDL_ERR_INVALID (NULL arguments, a bad layer number,
 * before the commit, the layer pushed twice in a step, a layer whose
 * factors travel); DDL_ERR_NOMEM; a posting error. */
ddl_status_t ddl_gradx_push(ddl_gradx_t *gx, int layer, float *grad);

/* ddl_gradx_push_factors: hand over an FC layer's factors for the batch
 * samples of this rank (0 <= batch <= max_batch): a (batch x rows) and d
 * (batch x cols), row-major; grad (rows x cols) receives the summed
 * gradient.  The factors are copied before it returns; grad must stay
 * valid until the layer's wait.  When the layer's full matrix travels
 * (ddl_gradx_layer_sfb() == 0), its gradient a^T d is computed into grad
 * here and pushed as by ddl_gradx_push().  Returns DDL_OK; DDL_ERR_INVALID
 * (NULL arguments, a layer registered without a shape, batch out of range,
 * pushed twice); DDL_ERR_NOMEM; a posting error. */
ddl_status_t ddl_gradx_push_factors(ddl_gradx_t *gx, int layer, const float *a, const float *d,
                                    int batch, float *grad);

/* ddl_gradx_wait: block until layer's summed (or averaged) gradient is in
 * the buffer its push gave (posting the open bucket first if it holds the
 * layer; rebuilding it from the factors if they travelled).  Returns
 * DDL_OK; DDL_ERR_INVALID (a layer not pushed in this step); the error of
 * its operation (DDL_ERR_ABORTED ...), after which the exchange is unusable. */
ddl_status_t ddl_gradx_wait(ddl_gradx_t *gx, int layer);

/* ddl_gradx_stats: copy the counters into *st.  Never blocks.  Returns
 * DDL_OK or DDL_ERR_INVALID for NULL. */
ddl_status_t ddl_gradx_stats(const ddl_gradx_t *gx, ddl_gradx_stats_t *st);

/* ddl_gradx_posts: the operations of the current step so far (or of the
 * last one, between steps), in posting order, as layer numbers: layers[i]
 * is the i-th layer carried and ops[i] the operation (0, 1, ...) that
 * carried it, for i < *n (at most cap entries written).  For tests and
 * tuning.  Returns DDL_OK or DDL_ERR_INVALID for NULL arguments. */
ddl_status_t ddl_gradx_posts(const ddl_gradx_t *gx, int *layers, int *ops, int cap, int *n);

/* ddl_gradx_free: release the exchange, first waiting for the operations it
 * posted (blocking; an aborted communicator ends them at once).  Accepts
 * NULL. */
void ddl_gradx_free(ddl_gradx_t *gx);

/* ---- checkpoints ----
 *
 * A checkpoint is one step's state, saved by every rank of a communicator
 * as named buffers in its own shard file:
 *
 *     DIR/step-NNNNNNNN/rank-R.shard   one per comm rank (R), fsync'd
 *     DIR/step-NNNNNNNN/MANIFEST       step, world size, each shard's size
 *                                      and CRC-32C; present only once every
 *                                      rank's shard is complete
 *     DIR/latest                       the step of the newest committed
 *                                      checkpoint
 *
 * MANIFEST and latest are written to a temporary name, fsync'd and renamed
 * (then the directory is fsync'd), so a process killed at any moment, or an
 * I/O error, leaves the previous checkpoint as latest and readable.  A step
 * directory without MANIFEST is partial and is removed by the next
 * ddl_ckpt_begin() or ddl_ckpt_cleanup().  DIR is a plain path chosen by the
 * program; it must be on a file system every rank sees (or node-local with
 * one node).
 *
 * Usage, on every rank of comm:
 *
 *     ddl_ckpt_t *ck;
 *     ddl_ckpt_begin(comm, dir, step, 0, 0, &ck);
 *     ddl_ckpt_write(ck, "weights", w, wbytes);
 *     ddl_ckpt_write(ck, "optimizer", o, obytes);
 *     st = ddl_ckpt_commit(ck);         collective; ck is released
 *
 * and on restart: ddl_ckpt_latest(dir, &step), then ddl_ckpt_read(dir, step,
 * ddl_comm_rank(comm), "weights", w, wbytes, NULL).
 *
 * Async mode (DDL_CKPT_ASYNC): ddl_ckpt_write() copies the buffer into
 * memory and ddl_ckpt_commit() starts a background thread that writes the
 * shard, then returns DDL_OK at once.  The checkpoint is committed (MANIFEST
 * and latest written) by the next ddl_ckpt_wait(), ddl_ckpt_begin() or
 * ddl_finalize() on the same communicator, which first wait for the thread;
 * an I/O error of the background write surfaces there.  One async
 * checkpoint per process is in flight at a time.  The copy buffers are kept
 * after the commit and reused by the next async checkpoint (fresh pages
 * cost more than the copy), so async mode holds about one checkpoint's size
 * of memory until ddl_finalize().
 *
 * Test hook: DDL_CKPT_FAULT=write|fsync|rename[:RANK] makes the named step
 * of every commit fail (write with ENOSPC, fsync and rename with EIO) on
 * every rank, or on comm rank RANK only; rename applies to rank 0's
 * MANIFEST.  For tests of error handling only.
 *
 * Threads: the functions are called from the thread that runs the
 * collectives; ddl_ckpt_read() and ddl_ckpt_latest() are thread-safe.
 */

/* A checkpoint being written.  Opaque; from ddl_ckpt_begin() until
 * ddl_ckpt_commit() or ddl_ckpt_abort(), which release it. */
typedef struct ddl_ckpt ddl_ckpt_t;

/* Flags of ddl_ckpt_begin(). */
#define DDL_CKPT_ASYNC 0x1u /* write the shard in a background thread */

/* Committed checkpoints kept when ddl_ckpt_begin() is passed keep == 0. */
#define DDL_CKPT_KEEP_DEFAULT 3

/* Longest shard name, in bytes (names are non-empty C strings). */
#define DDL_CKPT_NAME_MAX 255

/* ddl_ckpt_begin: start checkpoint `step` in directory dir (created if
 * missing).  Collective and blocking over comm: every rank passes the same
 * dir, step, keep and flags.  First completes a pending async checkpoint
 * (as ddl_ckpt_wait()); then rank 0 removes partial step directories and
 * keeps only the newest `keep` committed checkpoints (0: the default, 3;
 * negative: keep every one).  step must be greater than the latest
 * committed step.  Write one checkpoint of a directory at a time: the
 * cleanup removes any uncommitted step.  On success *ck is owned by the
 * caller until ddl_ckpt_commit() or ddl_ckpt_abort().
 * Returns DDL_OK; DDL_ERR_INVALID (NULL or empty arguments, step < 0 or not
 * after the latest, unknown flags); DDL_ERR_NOT_INITIALIZED; DDL_ERR_IO
 * (rank 0 cannot create or clean dir, with the path and errno: the other
 * ranks' directory errors surface at the commit;
 * or the pending async checkpoint failed: it is discarded, and calling
 * ddl_ckpt_begin() again starts the new one); DDL_ERR_NOMEM; or a
 * transport error.  On any error *ck is NULL, and every rank returns the
 * same status. */
ddl_status_t ddl_ckpt_begin(ddl_comm_t *comm, const char *dir, int64_t step, int keep,
                            unsigned flags, ddl_ckpt_t **ck);

/* ddl_ckpt_write: add a named buffer to this rank's shard.  Local (not
 * collective), may be called any number of times with distinct names
 * (1..DDL_CKPT_NAME_MAX bytes); ranks may write different names and sizes.
 * Synchronous mode writes buf to the file before returning; async mode
 * copies it.  Either way buf stays owned by the caller and may be reused at
 * once.  buf may be NULL when bytes is 0.
 * Returns DDL_OK; DDL_ERR_INVALID (NULL ck or name, bad or duplicate name);
 * DDL_ERR_NOMEM (async copy); DDL_ERR_IO (with the file and errno).  A
 * failure is remembered: still call ddl_ckpt_commit(), which then fails on
 * every rank, so that the ranks stay in step. */
ddl_status_t ddl_ckpt_write(ddl_ckpt_t *ck, const char *name, const void *buf, size_t bytes);

/* ddl_ckpt_commit: finish the checkpoint and release ck (whatever the
 * result).  Collective over the communicator of ddl_ckpt_begin().
 * Synchronous mode: every rank completes and fsyncs its shard; the ranks
 * exchange their results; only if all succeeded does rank 0 write MANIFEST
 * and move latest to this step, then remove checkpoints beyond `keep`;
 * every rank returns the same status.  Async mode: starts the background
 * write and returns DDL_OK (see ddl_ckpt_wait()).
 * Returns DDL_OK; DDL_ERR_INVALID for NULL (or an async commit while
 * another async checkpoint is pending); DDL_ERR_IO when some rank
 * failed (the text names the rank, the file and the errno; the step
 * directory is removed and latest is unchanged); or a transport error. */
ddl_status_t ddl_ckpt_commit(ddl_ckpt_t *ck);

/* ddl_ckpt_wait: complete the pending async checkpoint, if any: wait for
 * this rank's background write, then commit as ddl_ckpt_commit() does.
 * Collective over that checkpoint's communicator.  *step (may be NULL)
 * receives its step, or -1 if none was pending.
 * Returns DDL_OK (also when none was pending) or the commit's error; the
 * pending checkpoint is gone either way. */
ddl_status_t ddl_ckpt_wait(int64_t *step);

/* ddl_ckpt_abort: discard ck on this rank (its shard file is removed) and
 * release it.  Local; the other ranks of the communicator must abort too
 * (a commit on them would wait for this rank).  Accepts NULL. */
void ddl_ckpt_abort(ddl_ckpt_t *ck);

/* ddl_ckpt_latest: *step = the newest committed checkpoint in dir, or -1 if
 * dir holds none (or does not exist).  Local; needs no ddl_init().
 * Returns DDL_OK; DDL_ERR_INVALID for NULL arguments; DDL_ERR_IO if latest
 * cannot be read or names a step without a MANIFEST. */
ddl_status_t ddl_ckpt_latest(const char *dir, int64_t *step);

/* ddl_ckpt_read: copy the buffer `name` of rank's shard of checkpoint step
 * into buf.  Local; needs no ddl_init().  bytes is the size of buf; with
 * got == NULL it must equal the stored size, otherwise it must be at least
 * that and *got receives the stored size (buf NULL and bytes 0: only *got
 * is set).  The manifest, the shard's size and CRC-32C, and the buffer's
 * own CRC-32C are checked; a shard that ddl_ckpt_restore() just checked
 * and holds in memory is copied from there (see it).
 * Returns DDL_OK; DDL_ERR_INVALID (NULL arguments, no such committed step,
 * rank or name, or a size mismatch, with the sizes); DDL_ERR_IO (a file
 * cannot be read, is truncated or fails its checksum, with the path). */
ddl_status_t ddl_ckpt_read(const char *dir, int64_t step, int rank, const char *name, void *buf,
                           size_t bytes, size_t *got);

/* ---- the node-local level ----
 *
 * With DDL_CKPT_LOCAL_DIR set (ddlrun --checkpoint-local, srun
 * --ddl-checkpoint-local, ddl.conf checkpoint_local_dir; "%n" in it stands
 * for the node id, "%h" for the host name), the checkpoints above go first
 * to that directory on each node (the same layout: each node's first rank
 * writes its MANIFEST and latest), and the commit sends every rank's shard
 * over the transport to its partner: the rank at the same place among its
 * node's ranks on the next node, which stores it beside its own shards.  So
 * losing one node never loses both copies of a shard (with a single node
 * there is no partner copy).  Only every K-th checkpoint of the process
 * (DDL_CKPT_SHARED_EVERY, default 1; 0: never) is also copied to `dir`, the
 * shared directory, and committed there by rank 0 as without the level;
 * so is the checkpoint that follows a DDL_STOP from ddl_should_stop().  In
 * async mode the partner copy's transfer (from the copies in memory), the
 * local writes, the removal of node-local steps beyond keep and the shared
 * copy all run in the background thread: the caller is blocked for the
 * copy into memory and the small collectives of the next commit.  A
 * transfer that fails (a peer gone, the world aborted) fails that
 * checkpoint at its commit (ddl_ckpt_wait(), the next ddl_ckpt_begin(),
 * ddl_finalize()), like a write error; one still running when the world is
 * released for a warm restart is given up and never committed.
 * ddl_finalize() removes the node-local checkpoints when the program ends
 * without a stop request (a failed run never gets there, so they stay for
 * the restart).  Restarted programs call ddl_ckpt_restore() to find their
 * shards, then read them with ddl_ckpt_read(from, ...).
 */

/* Where ddl_ckpt_restore() found a rank's shard. */
#define DDL_CKPT_LEVEL_NONE 0    /* no checkpoint: start from the beginning */
#define DDL_CKPT_LEVEL_LOCAL 1   /* its own node's directory */
#define DDL_CKPT_LEVEL_PARTNER 2 /* a partner node's copy, received over the transport */
#define DDL_CKPT_LEVEL_SHARED 3  /* the shared directory */

/* ddl_ckpt_restore: find the newest checkpoint and, for each rank, a valid
 * copy of shard `rank` (comm rank r restores shard r: a world that shrank
 * takes the first shards).  Collective and blocking over comm; every rank
 * passes the same dir (the shared directory).  Without the node-local
 * level it is ddl_ckpt_latest(dir) on rank 0, shared with every rank.
 * With it: the newest step committed on any node's level, unless dir holds
 * a newer one; each rank's shard is taken from its own node if a valid copy
 * is there, else from a node holding a valid partner copy (sent over the
 * transport, and stored in this node's directory by a thread of libddl
 * after the restore returns), else from dir.  Every copy is checked in
 * full (sizes, structure, every CRC-32C) before it is used; a damaged or
 * missing copy falls through to the next level.  A world larger than the
 * newest node-local checkpoint's (it grew since, a node taken back)
 * restores from dir's newest checkpoint, every shard there; comm ranks
 * beyond that checkpoint's shards have none of their own
 * (ddl_ckpt_read() says DDL_ERR_INVALID for them): a program whose state is
 * the same on every rank takes another rank's, as examples/fmnist does.
 * On success *step is the step (-1: no checkpoint at any level), from
 * (fromlen bytes, PATH_MAX is enough; owned by the caller) the directory to
 * pass to ddl_ckpt_read() for this rank, and *level (may be NULL) one of
 * DDL_CKPT_LEVEL_*; rank 0 logs how many shards came from each level.
 * A shard restored from the node-local level (its own node's copy or a
 * partner's) stays in memory, already checked: the ddl_ckpt_read() calls
 * for it copy from there instead of reading and checking the file again,
 * and the memory is released once each of its buffers was read (or at the
 * next ddl_ckpt_begin(), ddl_ckpt_restore() or ddl_finalize()).
 * Returns DDL_OK; DDL_ERR_INVALID (NULL arguments, a bad
 * DDL_CKPT_LOCAL_DIR, or more ranks than the node-local checkpoint has
 * shards while dir holds none);
 * DDL_ERR_NOT_INITIALIZED; DDL_ERR_NOMEM; DDL_ERR_IO when some rank's shard
 * has no valid copy at any level (the text names the rank, the step and
 * each level's reason: exit with DDL_EXIT_NO_CHECKPOINT) or, without the
 * level, dir's latest cannot be read; or a transport error.  Every rank
 * returns the same status. */
ddl_status_t ddl_ckpt_restore(ddl_comm_t *comm, const char *dir, int64_t *step, char *from,
                              size_t fromlen, int *level);

/* ddl_ckpt_cleanup: remove the partial step directories in dir and all but
 * the newest keep committed ones (keep as in ddl_ckpt_begin()).  Local: run
 * it on one process while no checkpoint of dir is being written.
 * Returns DDL_OK; DDL_ERR_INVALID for NULL; DDL_ERR_IO if something cannot
 * be removed (with the path and errno). */
ddl_status_t ddl_ckpt_cleanup(const char *dir, int keep);

#ifdef __cplusplus
}
#endif

#endif /* DDL_H */
