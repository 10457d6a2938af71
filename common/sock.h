/* sock.h: Unix-domain stream sockets for the agent and its clients, and
 * the TCP sockets between the agents of a step's nodes.
 *
 * The agent listens on a socket file of mode 0600 inside a private (0700)
 * runtime directory, and additionally checks every connecting process's
 * credentials with SO_PEERCRED: only the socket owner's uid and root are
 * served.  Functions return a descriptor (>= 0) or -1 with errno and a
 * message in err.
 */
#ifndef DDL_SOCK_H
#define DDL_SOCK_H

#include <stdint.h>
#include <sys/types.h>

#include "util.h"

/* ddl_sock_listen: bind and listen on path, mode 0600, close-on-exec.  A
 * stale socket file (nobody accepting) is replaced; a live one is EADDRINUSE. */
int ddl_sock_listen(const char *path, ddl_error_t *err);

/* ddl_sock_connect: connect to path, close-on-exec, blocking.  Retries
 * ENOENT/ECONNREFUSED until timeout_ms has passed (0: one try). */
int ddl_sock_connect(const char *path, int timeout_ms, ddl_error_t *err);

/* ddl_sock_peer: the connected peer's pid, uid and gid (SO_PEERCRED). */
int ddl_sock_peer(int fd, pid_t *pid, uid_t *uid, gid_t *gid);

/* ddl_sock_peer_allowed: 1 if uid may use an agent run by owner (same uid,
 * or root), else 0. */
int ddl_sock_peer_allowed(uid_t uid, uid_t owner);

/* ddl_tcp_listen: listen on IPv4 address ip (dotted quad; NULL: any) and
 * an ephemeral port, close-on-exec; the port chosen goes to *port. */
int ddl_tcp_listen(const char *ip, uint16_t *port, ddl_error_t *err);

/* ddl_hostport_parse: "a.b.c.d:port" (port 1-65535) into sa.  0, or -1
 * if hp is not of that form. */
struct sockaddr_in;
int ddl_hostport_parse(const char *hp, struct sockaddr_in *sa);

/* ddl_tcp_connect: connect to "IPv4:port", close-on-exec, blocking,
 * TCP_NODELAY, waiting at most timeout_ms in all (a host that drops the
 * connection's packets costs timeout_ms, not the kernel's two minutes of
 * SYN retries).  Retries ECONNREFUSED/EHOSTUNREACH until then.  EINVAL for
 * an address that is not IPv4:port; ETIMEDOUT when no connect completed. */
int ddl_tcp_connect(const char *hostport, int timeout_ms, ddl_error_t *err);

/* ddl_tcp_connect_each: connects to the n addresses at once, all within
 * timeout_ms from now, without retries.  fds[i] is the socket connected to
 * hostports[i] (blocking, close-on-exec, TCP_NODELAY; the caller owns it),
 * or -1 with errs[i] saying why: the connect's error (ECONNREFUSED: nothing
 * listens there), ETIMEDOUT (no answer in time), EINVAL (not IPv4:port).
 * lowest 1: wants only the first address that connects in order: returns
 * once one has connected and every address before it has failed, with only
 * that socket open (the others: ECANCELED).  Returns how many connected.
 * Blocks at most timeout_ms; thread-safe. */
size_t ddl_tcp_connect_each(const char *const *hostports, size_t n, int timeout_ms, int lowest,
                            int *fds, int *errs);

/* ddl_local_ipv4: the address (dotted quad, into buf) of this host's
 * interface that routes toward dst (an IPv4 address; NULL or invalid: the
 * first interface that is up and not loopback).  Sends nothing. */
int ddl_local_ipv4(const char *dst, char *buf, size_t len, ddl_error_t *err);

#endif
