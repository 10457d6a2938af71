/* ddl_int.h: libddl's private state shared by its files: the process-wide
 * context (identity, agent connection, UCX worker and endpoints), the
 * communicator struct, the transport calls the algorithms are written
 * against, and the local reduction kernels. */
#ifndef DDL_INT_H
#define DDL_INT_H

#include <stdint.h>
#include <ucp/api/ucp.h>

#include "ddl.h"

struct ddl_comm {
    int rank, size;
    uint16_t id;       /* distinguishes communicators in message tags */
    uint32_t seq;      /* collective sequence number, same on every rank */
    int *world_ranks;  /* comm rank -> world rank; NULL means identity */
};

typedef struct {
    int initialized;
    int rank, size, local_rank, local_size, node_id, nnodes;
    uint32_t gen;
    int agent_fd;

    ucp_context_h ucp;
    ucp_worker_h worker;
    uint8_t *peer_addrs;  /* every rank's UCX worker address, back to back */
    size_t *peer_off;     /* offset of rank i's address in peer_addrs */
    ucp_ep_h *eps;        /* created on first use */
    volatile int failed_peer; /* world rank whose endpoint failed, -1 if none */
    ucs_status_t failed_status;

    ddl_comm_t world;
} ddl_ctx_t;

extern ddl_ctx_t ddl_ctx;

/* ddl_fail: record the detail text for ddl_last_error(), log it at debug
 * level, and return st (so failure paths are one line). */
ddl_status_t ddl_fail(ddl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void ddl_clear_error(void);

/* ---- transport (ucx.c) ---- */
ddl_status_t ddl_tl_init(void **addr, size_t *addr_len);
void ddl_tl_release_address(void *addr);
void ddl_tl_fini(void);

/* A tag names the communicator, the collective's sequence number and the
 * sending comm rank, so that concurrent collectives never match each other. */
static inline uint64_t ddl_tag(const ddl_comm_t *comm, uint32_t seq, int src)
{
    return ((uint64_t)comm->id << 48) | ((uint64_t)(seq & 0xffffff) << 24) |
           (uint64_t)(src & 0xffffff);
}

/* Post a send to / receive from a comm rank.  *req is NULL if the operation
 * completed at once.  Errors are recorded with ddl_fail(). */
ddl_status_t ddl_tl_isend(ddl_comm_t *comm, int dst, const void *buf, size_t len, uint64_t tag,
                          void **req);
ddl_status_t ddl_tl_irecv(ddl_comm_t *comm, void *buf, size_t len, uint64_t tag, void **req);

/* Progress until every non-NULL request in reqs[0..n) completes; sets them
 * to NULL.  On failure the remaining requests are cancelled and released. */
ddl_status_t ddl_tl_waitall(void **reqs, int n);

/* Send sbuf to dst and receive rbuf from src, both with this collective's
 * seq, and wait for both. */
ddl_status_t ddl_tl_sendrecv(ddl_comm_t *comm, uint32_t seq, int dst, const void *sbuf,
                             size_t slen, int src, void *rbuf, size_t rlen);

/* ---- reductions (reduce.c) ---- */
/* inout[i] = in[i] (op) inout[i] for i < count.  op must not be DDL_AVG. */
void ddl_reduce_local(void *inout, const void *in, size_t count, ddl_dtype_t dtype, ddl_op_t op);
/* buf[i] /= divisor (floating-point types only). */
void ddl_scale_local(void *buf, size_t count, ddl_dtype_t dtype, double divisor);
/* DDL_OK if (dtype, op) is offered, else the error with its detail text. */
ddl_status_t ddl_check_dtype_op(ddl_dtype_t dtype, ddl_op_t op);

/* ---- algorithms ---- */
ddl_status_t ddl_allreduce_ring(ddl_comm_t *comm, void *buf, size_t count, ddl_dtype_t dtype,
                                ddl_op_t op);
ddl_status_t ddl_bcast_binomial(ddl_comm_t *comm, void *buf, size_t bytes, int root);
ddl_status_t ddl_barrier_dissemination(ddl_comm_t *comm);

#endif
