/* coll.c: the public collective entry points, blocking and non-blocking.
 * Each builds an operation descriptor, validates it once, and either runs it
 * in the calling thread (blocking calls while no progress thread exists) or
 * hands it to the engine.  ddl_execute() is the single way from a
 * descriptor to an algorithm (through dispatch.c, with select.c's
 * choice). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "ddl_int.h"

const char *ddl_opkind_str(ddl_opkind_t k)
{
    static const char *const names[] = {"allreduce", "bcast", "barrier", "reduce_scatter",
                                        "allgather", "reduce"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "unknown";
}

ddl_status_t ddl_validate(const ddl_opdesc_t *d)
{
    ddl_status_t st;
    if (!ddl_ctx.initialized)
        return ddl_fail(DDL_ERR_NOT_INITIALIZED, "call ddl_init() before any collective");
    if (!d->comm)
        return ddl_fail(DDL_ERR_INVALID, "communicator is NULL");
    if ((st = ddl_comm_check_abort(d->comm)) != DDL_OK)
        return st;
    if (d->kind == DDL_OPK_BARRIER)
        return DDL_OK;
    size_t es = ddl_dtype_size(d->dtype);
    if (es == 0)
        return ddl_fail(DDL_ERR_INVALID, "unknown data type %d", (int)d->dtype);
    if (d->count > SIZE_MAX / es)
        return ddl_fail(DDL_ERR_INVALID, "count %zu overflows", d->count);
    size_t total = d->count; /* elements in the largest buffer involved */
    if (d->kind == DDL_OPK_REDUCE_SCATTER || d->kind == DDL_OPK_ALLGATHER) {
        if (d->count > SIZE_MAX / es / (size_t)d->comm->size)
            return ddl_fail(DDL_ERR_INVALID, "count %zu x %d ranks overflows", d->count,
                            d->comm->size);
        total = d->count * (size_t)d->comm->size;
    }
    switch (d->kind) {
    case DDL_OPK_ALLREDUCE:
    case DDL_OPK_REDUCE_SCATTER:
    case DDL_OPK_REDUCE:
        if ((st = ddl_check_dtype_op(d->dtype, d->op)) != DDL_OK)
            return st;
        break;
    default:
        break;
    }
    if (d->kind == DDL_OPK_BCAST || d->kind == DDL_OPK_REDUCE) {
        if (d->root < 0 || d->root >= d->comm->size)
            return ddl_fail(DDL_ERR_INVALID, "root %d is not a rank of the communicator "
                            "(0-%d)", d->root, d->comm->size - 1);
    }
    /* buffers that this rank reads or writes must exist when there is data */
    int need_recv = d->kind != DDL_OPK_REDUCE || d->comm->rank == d->root;
    int need_send = d->kind != DDL_OPK_BCAST;
    if (total > 0 && ((need_recv && !d->recvbuf) || (need_send && !d->sendbuf)))
        return ddl_fail(DDL_ERR_INVALID, "%s of %zu elements with a NULL buffer",
                        ddl_opkind_str(d->kind), total);
    if (total > 0 && d->sendbuf == DDL_IN_PLACE && !d->recvbuf)
        return ddl_fail(DDL_ERR_INVALID, "%s in place needs the data in recvbuf",
                        ddl_opkind_str(d->kind));
    return DDL_OK;
}

ddl_status_t ddl_execute(const ddl_opdesc_t *d)
{
    ddl_status_t st = ddl_comm_check_abort(d->comm);
    if (st != DDL_OK)
        return st;
    ddl_beat(1, 0);
    if (ddl_gpu_execute(d, &st))
        return st; /* device buffers or a CUDA stream: NCCL, hierarchical or staged */
    return ddl_execute_host(d);
}

ddl_status_t ddl_execute_host(const ddl_opdesc_t *d)
{
    const ddl_dispatch_t how = {
        .allreduce = ddl_allreduce_select,
        .bcast = ddl_bcast_select,
        .node = &ddl_ctx.node,
        .cross = &ddl_ctx.cross,
        .world_size = ddl_ctx.world.size,
    };
    return ddl_dispatch(d, &how);
}

/* post: queue d for the progress thread; device buffers (and a CUDA
 * stream) get their ordering point recorded here, at posting time. */
static ddl_status_t post(const ddl_opdesc_t *d, ddl_request_t **req)
{
#ifdef HAVE_CUDA
    ddl_opdesc_t q = *d;
    ddl_status_t st = ddl_gpu_stream_prepare(&q);
    if (st != DDL_OK)
        return st;
    if ((st = ddl_engine_post(&q, req)) != DDL_OK)
        ddl_gpu_stream_done(&q); /* release the stream and the event */
    return st;
#else
    if (d->stream)
        return ddl_fail(DDL_ERR_CUDA, "a CUDA stream was given, but this libddl was built "
                        "without CUDA (configure --with-cuda)");
    return ddl_engine_post(d, req);
#endif
}

/* run_blocking: inline while no progress thread exists, else through it so
 * that the posting order is kept. */
static ddl_status_t run_blocking_(const ddl_opdesc_t *d)
{
    ddl_status_t st;
    ddl_request_t *req;
    ddl_clear_error();
    if ((st = ddl_validate(d)) != DDL_OK)
        return st;
    if (!ddl_ctx.eng.started)
        return ddl_execute(d);
    if ((st = post(d, &req)) != DDL_OK)
        return st;
    st = ddl_wait_uncounted(req, -1);
    ddl_request_free(req);
    return st;
}

/* run_blocking: ...and its whole time counted as waited (heartbeat.c) */
static ddl_status_t run_blocking(const ddl_opdesc_t *d)
{
    int64_t t0 = ddl_beat_clock_ns();
    ddl_status_t st = run_blocking_(d);
    ddl_beat_waited(t0);
    return st;
}

static ddl_status_t run_nonblocking(const ddl_opdesc_t *d, ddl_request_t **req)
{
    ddl_status_t st;
    ddl_clear_error();
    if (!req)
        return ddl_fail(DDL_ERR_INVALID, "request pointer is NULL");
    *req = NULL;
    if ((st = ddl_validate(d)) != DDL_OK)
        return st;
    return post(d, req);
}

/* run_stream: a non-blocking call ordered on a CUDA stream (NULL: none). */
static ddl_status_t run_stream(ddl_opdesc_t *d, void *stream, ddl_request_t **req)
{
    d->stream = stream;
    return run_nonblocking(d, req);
}

#define ALLREDUCE_DESC                                                       \
    {.kind = DDL_OPK_ALLREDUCE, .comm = comm, .sendbuf = sendbuf, .recvbuf = recvbuf,          \
     .count = count, .dtype = dtype, .op = op}
#define BCAST_DESC                                                           \
    {.kind = DDL_OPK_BCAST, .comm = comm, .recvbuf = buf, .count = count, .dtype = dtype,      \
     .root = root}

ddl_status_t ddl_allreduce(ddl_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                           ddl_dtype_t dtype, ddl_op_t op)
{
    return run_blocking(&(ddl_opdesc_t)ALLREDUCE_DESC);
}

ddl_status_t ddl_iallreduce(ddl_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                            ddl_dtype_t dtype, ddl_op_t op, ddl_request_t **req)
{
    return run_nonblocking(&(ddl_opdesc_t)ALLREDUCE_DESC, req);
}

ddl_status_t ddl_iallreduce_stream(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, ddl_dtype_t dtype, ddl_op_t op, void *stream,
                                   ddl_request_t **req)
{
    return run_stream(&(ddl_opdesc_t)ALLREDUCE_DESC, stream, req);
}

ddl_status_t ddl_bcast(ddl_comm_t *comm, void *buf, size_t count, ddl_dtype_t dtype, int root)
{
    return run_blocking(&(ddl_opdesc_t)BCAST_DESC);
}

ddl_status_t ddl_ibcast(ddl_comm_t *comm, void *buf, size_t count, ddl_dtype_t dtype, int root,
                        ddl_request_t **req)
{
    return run_nonblocking(&(ddl_opdesc_t)BCAST_DESC, req);
}

ddl_status_t ddl_ibcast_stream(ddl_comm_t *comm, void *buf, size_t count, ddl_dtype_t dtype,
                               int root, void *stream, ddl_request_t **req)
{
    return run_stream(&(ddl_opdesc_t)BCAST_DESC, stream, req);
}

#define RS_DESC                                                              \
    {.kind = DDL_OPK_REDUCE_SCATTER, .comm = comm, .sendbuf = sendbuf, .recvbuf = recvbuf,     \
     .count = recvcount, .dtype = dtype, .op = op}
#define AG_DESC                                                              \
    {.kind = DDL_OPK_ALLGATHER, .comm = comm, .sendbuf = sendbuf, .recvbuf = recvbuf,          \
     .count = sendcount, .dtype = dtype}
#define REDUCE_DESC                                                          \
    {.kind = DDL_OPK_REDUCE, .comm = comm, .sendbuf = sendbuf, .recvbuf = recvbuf,             \
     .count = count, .dtype = dtype, .op = op, .root = root}

ddl_status_t ddl_reduce_scatter(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                size_t recvcount, ddl_dtype_t dtype, ddl_op_t op)
{
    return run_blocking(&(ddl_opdesc_t)RS_DESC);
}

ddl_status_t ddl_ireduce_scatter(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 size_t recvcount, ddl_dtype_t dtype, ddl_op_t op,
                                 ddl_request_t **req)
{
    return run_nonblocking(&(ddl_opdesc_t)RS_DESC, req);
}

ddl_status_t ddl_ireduce_scatter_stream(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                        size_t recvcount, ddl_dtype_t dtype, ddl_op_t op,
                                        void *stream, ddl_request_t **req)
{
    return run_stream(&(ddl_opdesc_t)RS_DESC, stream, req);
}

ddl_status_t ddl_allgather(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                           size_t sendcount, ddl_dtype_t dtype)
{
    return run_blocking(&(ddl_opdesc_t)AG_DESC);
}

ddl_status_t ddl_iallgather(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                            size_t sendcount, ddl_dtype_t dtype, ddl_request_t **req)
{
    return run_nonblocking(&(ddl_opdesc_t)AG_DESC, req);
}

ddl_status_t ddl_iallgather_stream(ddl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t sendcount, ddl_dtype_t dtype, void *stream,
                                   ddl_request_t **req)
{
    return run_stream(&(ddl_opdesc_t)AG_DESC, stream, req);
}

ddl_status_t ddl_reduce(ddl_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                        ddl_dtype_t dtype, ddl_op_t op, int root)
{
    return run_blocking(&(ddl_opdesc_t)REDUCE_DESC);
}

ddl_status_t ddl_ireduce(ddl_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                         ddl_dtype_t dtype, ddl_op_t op, int root, ddl_request_t **req)
{
    return run_nonblocking(&(ddl_opdesc_t)REDUCE_DESC, req);
}

ddl_status_t ddl_barrier(ddl_comm_t *comm)
{
    return run_blocking(&(ddl_opdesc_t){.kind = DDL_OPK_BARRIER, .comm = comm});
}

ddl_status_t ddl_ibarrier(ddl_comm_t *comm, ddl_request_t **req)
{
    return run_nonblocking(&(ddl_opdesc_t){.kind = DDL_OPK_BARRIER, .comm = comm}, req);
}

ddl_status_t ddl_comm_abort(ddl_comm_t *comm, const char *reason)
{
    if (!comm)
        return ddl_fail(DDL_ERR_INVALID, "communicator is NULL");
    int expected = 0;
    /* The first abort writes the reason; 2 marks "being written". */
    if (atomic_compare_exchange_strong(&comm->aborted, &expected, 2)) {
        snprintf(comm->abort_reason, sizeof comm->abort_reason, "%s",
                 reason && *reason ? reason : "no reason given");
        atomic_store_explicit(&comm->aborted, 1, memory_order_release);
    }
    /* the running operation sees the flag in its wait loop; queued ones
     * must not wait for it to finish */
    ddl_engine_abort_queued(comm);
    return DDL_OK;
}
