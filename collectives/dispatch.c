/* dispatch.c: from an operation descriptor to an algorithm, on host
 * buffers: what a count of 0 and a world of one need (nothing, or a copy),
 * the algorithm that the caller's choice functions name, and its
 * arguments.  coll.c passes the cost model's choice (select.c); the unit
 * test tests/unit/t_algos names each algorithm in turn. */
#include "config.h"

#include <string.h>

#include "ddl_int.h"

/* copy_input: the result of a world of one: the input, where it belongs. */
static ddl_status_t copy_input(const ddl_opdesc_t *d)
{
    if (d->sendbuf != DDL_IN_PLACE && d->sendbuf != d->recvbuf)
        memcpy(d->recvbuf, d->sendbuf, d->count * ddl_dtype_size(d->dtype));
    return DDL_OK;
}

ddl_status_t ddl_dispatch(const ddl_opdesc_t *d, const ddl_dispatch_t *how)
{
    ddl_comm_t *comm = d->comm;
    switch (d->kind) {
    case DDL_OPK_ALLREDUCE:
        if (d->count == 0)
            return DDL_OK;
        if (d->sendbuf != DDL_IN_PLACE && d->sendbuf != d->recvbuf)
            memcpy(d->recvbuf, d->sendbuf, d->count * ddl_dtype_size(d->dtype));
        if (comm->size == 1)
            return DDL_OK; /* sum, min, max, prod and avg of one value are the value */
        switch (how->allreduce(comm, d->count * ddl_dtype_size(d->dtype))) {
        case DDL_ALGO_RD:
            return ddl_allreduce_rd(comm, d->recvbuf, d->count, d->dtype, d->op);
        case DDL_ALGO_RABENSEIFNER:
            return ddl_allreduce_rabenseifner(comm, d->recvbuf, d->count, d->dtype, d->op);
        case DDL_ALGO_HIER:
            return ddl_allreduce_hier(how->node, how->cross, how->world_size, d->recvbuf, d->count,
                                      d->dtype, d->op);
        default:
            return ddl_allreduce_ring(comm, d->recvbuf, d->count, d->dtype, d->op);
        }
    case DDL_OPK_BCAST:
        if (comm->size == 1 || d->count == 0)
            return DDL_OK;
        if (how->bcast(comm, d->count * ddl_dtype_size(d->dtype)) == DDL_BCAST_CHAIN)
            return ddl_bcast_chain(comm, d->recvbuf, d->count * ddl_dtype_size(d->dtype), d->root);
        return ddl_bcast_binomial(comm, d->recvbuf, d->count * ddl_dtype_size(d->dtype), d->root);
    case DDL_OPK_BARRIER:
        if (comm->size == 1)
            return DDL_OK;
        return ddl_barrier_dissemination(comm);
    case DDL_OPK_REDUCE_SCATTER:
        if (d->count == 0)
            return DDL_OK;
        if (comm->size == 1)
            return copy_input(d);
        return ddl_reduce_scatter_ring(comm, d->sendbuf, d->recvbuf, d->count, d->dtype, d->op);
    case DDL_OPK_ALLGATHER:
        if (d->count == 0)
            return DDL_OK;
        if (comm->size == 1)
            return copy_input(d);
        return ddl_allgather_ring(comm, d->sendbuf, d->recvbuf, d->count, d->dtype);
    case DDL_OPK_REDUCE:
        if (d->count == 0)
            return DDL_OK;
        if (comm->size == 1)
            return copy_input(d);
        return ddl_reduce_ring(comm, d->sendbuf, d->recvbuf, d->count, d->dtype, d->op, d->root);
    }
    return ddl_fail(DDL_ERR_INTERNAL, "unknown operation kind %d", (int)d->kind);
}
