/* transport_loopback.h: an in-process transport for tests: the ranks of a
 * world are threads of one process, and messages go through queues in
 * memory (transport_loopback.c).  Not part of libddl: tests/unit/t_algos
 * runs the algorithms over it without UCX.
 *
 * ddl_loopback_new: a world of n ranks; messages of at most eager_max bytes
 * are copied when posted and their send completes at once, larger ones
 * stay in the sender's buffer until a receive takes them (the send
 * completes then).  NULL without memory.  ddl_loopback_tl: rank's
 * transport instance, for the communicators that rank's thread uses.
 * ddl_loopback_messages: how many messages were sent so far.
 * ddl_loopback_free: after every thread stopped using the world; frees the
 * messages nobody received.  The instances are thread-safe: each rank's
 * thread posts and tests its own requests, all under one lock. */
#ifndef DDL_TRANSPORT_LOOPBACK_H
#define DDL_TRANSPORT_LOOPBACK_H

#include <stddef.h>

#include "transport.h"

typedef struct ddl_loopback ddl_loopback_t;

ddl_loopback_t *ddl_loopback_new(int n, size_t eager_max);
ddl_tl_t *ddl_loopback_tl(ddl_loopback_t *lb, int rank);
unsigned long ddl_loopback_messages(ddl_loopback_t *lb);
void ddl_loopback_free(ddl_loopback_t *lb);

#endif
