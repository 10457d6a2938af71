/* sock.c: Unix-domain socket helpers (listen with safe permissions, connect
 * with retry, peer credentials) used by ddl-agent, ddl-launch and libddl. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "sock.h"

static int fill_addr(struct sockaddr_un *sa, const char *path, ddl_error_t *err)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa->sun_path) {
        errno = ENAMETOOLONG;
        return ddl_errprintf(err, "socket path '%s' is longer than %zu bytes: set DDL_RUNTIME_DIR "
                             "to a shorter directory", path, sizeof sa->sun_path - 1);
    }
    strcpy(sa->sun_path, path);
    return 0;
}

int ddl_sock_listen(const char *path, ddl_error_t *err)
{
    struct sockaddr_un sa;
    if (fill_addr(&sa, path, err) < 0)
        return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return ddl_errprintf(err, "socket: %s", strerror(errno));
    /* Create the file 0600 from the start: no window where others can connect. */
    mode_t old = umask(0177);
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    if (rc < 0 && errno == EADDRINUSE) {
        int probe = ddl_sock_connect(path, 0, NULL);
        if (probe >= 0) {
            close(probe);
            umask(old);
            close(fd);
            errno = EADDRINUSE;
            return ddl_errprintf(err, "%s: another agent is already listening there", path);
        }
        unlink(path); /* stale */
        rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    }
    int saved = errno;
    umask(old);
    if (rc < 0) {
        close(fd);
        errno = saved;
        return ddl_errprintf(err, "bind %s: %s", path, strerror(saved));
    }
    if (chmod(path, 0600) < 0 || listen(fd, 128) < 0) {
        saved = errno;
        unlink(path);
        close(fd);
        errno = saved;
        return ddl_errprintf(err, "listen %s: %s", path, strerror(saved));
    }
    return fd;
}

int ddl_sock_connect(const char *path, int timeout_ms, ddl_error_t *err)
{
    struct sockaddr_un sa;
    int64_t deadline = ddl_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    if (fill_addr(&sa, path, err) < 0)
        return -1;
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return ddl_errprintf(err, "socket: %s", strerror(errno));
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
            return fd;
        int saved = errno;
        close(fd);
        if ((saved != ENOENT && saved != ECONNREFUSED && saved != EAGAIN) ||
            ddl_now_ms() >= deadline) {
            errno = saved;
            return ddl_errprintf(err, "cannot connect to agent socket %s: %s", path,
                                 strerror(saved));
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int ddl_sock_peer(int fd, pid_t *pid, uid_t *uid, gid_t *gid)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -1;
    if (pid)
        *pid = cred.pid;
    if (uid)
        *uid = cred.uid;
    if (gid)
        *gid = cred.gid;
    return 0;
}

int ddl_sock_peer_allowed(uid_t uid, uid_t owner)
{
    return uid == owner || uid == 0;
}
