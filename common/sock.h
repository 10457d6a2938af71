/* sock.h: Unix-domain stream sockets for the agent and its clients.
 *
 * The agent listens on a socket file of mode 0600 inside a private (0700)
 * runtime directory, and additionally checks every connecting process's
 * credentials with SO_PEERCRED: only the socket owner's uid and root are
 * served.  Functions return a descriptor (>= 0) or -1 with errno and a
 * message in err.
 */
#ifndef DDL_SOCK_H
#define DDL_SOCK_H

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

#endif
