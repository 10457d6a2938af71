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

/* ddl_comm_abort: abort comm on this rank: the running operation on it
 * fails with DDL_ERR_ABORTED at its next progress check (measured: a few
 * milliseconds; tested: under 1 s), queued ones at once, future ones when
 * posted.  Aborting the world aborts every communicator.  Other ranks are
 * not told: each rank must abort its own (ddl's fault-tolerance agent will
 * do this for every rank of a failed step; until then it is up to the
 * program).  reason (may be NULL) is copied into the error text.
 * Idempotent; callable from any thread, including while another thread
 * waits.  An aborted communicator stays aborted; after aborting the world
 * the process should call ddl_finalize() and exit or restart.  Returns
 * DDL_OK, or DDL_ERR_INVALID for NULL. */
ddl_status_t ddl_comm_abort(ddl_comm_t *comm, const char *reason);

#ifdef __cplusplus
}
#endif

#endif /* DDL_H */
