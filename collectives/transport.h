/* transport.h: the narrow interface between libddl's algorithms and the
 * transport that moves their messages.  No transport's own headers appear
 * here: the algorithms, the progress engine and everything else above the
 * transport compile without UCX.
 *
 * A transport is a table of functions (ddl_tl_ops_t) and an instance
 * (ddl_tl_t) that every communicator points to.  Two exist: UCX's tag API
 * (ucx.c, the library's) and an in-process loopback where threads play the
 * ranks (transport_loopback.c, only for tests/unit/t_algos).
 *
 * Messages are tagged: the tag names the communicator, the collective's
 * sequence number and the sending comm rank (ddl_tag), and a receive
 * matches the oldest message from its sender with exactly its tag, so
 * messages of one sender and tag arrive in the order they were posted.
 *
 * Thread safety: a transport instance serves one thread at a time (the
 * caller of a blocking collective, or the progress thread), except where a
 * function says otherwise.
 */
#ifndef DDL_TRANSPORT_H
#define DDL_TRANSPORT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ddl.h"

typedef struct ddl_tl ddl_tl_t;

typedef struct {
    const char *name;
    /* Post a send of buf[0, len) to world rank peer, or a receive into
     * buf[0, len) of the message with tag from world rank peer.  *req is NULL
     * if the operation completed at once, else a request to pass to test or
     * cancel; buf must stay untouched (send) or unread (receive) until then.
     * Errors: the status, with the detail text recorded by ddl_fail(). */
    ddl_status_t (*isend)(ddl_tl_t *tl, int peer, const void *buf, size_t len, uint64_t tag,
                          void **req);
    ddl_status_t (*irecv)(ddl_tl_t *tl, int peer, void *buf, size_t len, uint64_t tag, void **req);
    /* test: DDL_INPROGRESS while req runs; else its final status, and req is
     * released.  A failure's detail text is recorded (ddl_fail) only if
     * report is non-zero. */
    ddl_status_t (*test)(ddl_tl_t *tl, void *req, int report);
    /* cancel: stop waiting for req: a receive is cancelled, a send is left to
     * finish on its own; req is released either way.  Never blocks. */
    void (*cancel)(ddl_tl_t *tl, void *req);
    /* progress: move pending transfers on; non-zero if anything happened. */
    int (*progress)(ddl_tl_t *tl);
    /* wait_event (optional, NULL: none): sleep until the transport has
     * something to progress or timeout_ms passes, and return 1; return 0
     * at once when it cannot wait for events (not asked for, or not
     * supported), and the caller yields the CPU instead. */
    int (*wait_event)(ddl_tl_t *tl, int timeout_ms);
} ddl_tl_ops_t;

/* Mapped memory (optional): buffers that the node's ranks read from each
 * other in place (ddl_mem_alloc, mem.c).  count: how many mapped
 * allocations exist (the same on every rank); at: 1 if buf[0, len) lies in
 * one, with its serial number and buf's offset in it; peer_view: where world
 * rank peer's allocation serial, from offset off, is readable here, or NULL.
 * Thread-safe. */
typedef struct {
    int (*count)(void);
    int (*at)(const void *buf, size_t len, uint32_t *serial, uint64_t *off);
    const char *(*peer_view)(uint32_t serial, int peer, uint64_t off);
} ddl_mapped_ops_t;

struct ddl_tl {
    const ddl_tl_ops_t *ops;
    const ddl_mapped_ops_t *mapped; /* NULL: no mapped memory */
    /* idle: called by ddl_tl_waitall while it waits for peers and nothing
     * progresses (at most once per spin-and-yield round), so that the layer
     * above can report liveness and notice that the world must abort; NULL
     * for none.  The transport never calls up into libddl otherwise. */
    void (*idle)(void);
    /* bytes_sent: the payload bytes of every send posted through
     * ddl_tl_isend (ddl_int.h), counted for the gradient exchange's
     * statistics (gradx.c); any thread may read it. */
    atomic_ullong bytes_sent;
};

#endif
