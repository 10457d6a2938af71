/* sock.c: Unix-domain socket helpers (listen with safe permissions, connect
 * with retry, peer credentials) used by ddl-agent, ddl-launch and libddl,
 * and the IPv4 TCP helpers of the agents' links between nodes. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
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

int ddl_tcp_listen(const char *ip, uint16_t *port, ddl_error_t *err)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof sa;
    if (ip && inet_pton(AF_INET, ip, &sa.sin_addr) != 1) {
        errno = EINVAL;
        return ddl_errprintf(err, "'%s' is not an IPv4 address", ip);
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return ddl_errprintf(err, "socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 1024) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return ddl_errprintf(err, "cannot listen on TCP %s: %s", ip ? ip : "0.0.0.0",
                             strerror(e));
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

int ddl_hostport_parse(const char *hp, struct sockaddr_in *sa)
{
    char host[INET_ADDRSTRLEN];
    const char *colon = strrchr(hp, ':');
    long port;
    if (!colon || (size_t)(colon - hp) >= sizeof host ||
        ddl_parse_long(colon + 1, 1, 65535, &port) < 0)
        return -1;
    memcpy(host, hp, (size_t)(colon - hp));
    host[colon - hp] = 0;
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

/* connect_begin: a non-blocking, close-on-exec socket whose connect to sa
 * has begun, or is done already (*done 1); -1 with errno when it failed at
 * once (ECONNREFUSED on this host, ENETUNREACH, a route to nowhere). */
static int connect_begin(const struct sockaddr_in *sa, int *done)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    *done = connect(fd, (const struct sockaddr *)sa, sizeof *sa) == 0;
    if (*done || errno == EINPROGRESS)
        return fd;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

/* connect_end: fd's connect has ended: the socket, made blocking, with
 * TCP_NODELAY; or -1 with errno (why the connect failed), fd closed. */
static int connect_end(int fd)
{
    int e = 0, one = 1;
    socklen_t el = sizeof e;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
        e = errno;
    int fl = e ? 0 : fcntl(fd, F_GETFL);
    if (!e && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0))
        e = errno;
    if (e) {
        close(fd);
        errno = e;
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* settled: nothing more to wait for: no connect pending, or (lowest) one
 * connected with none pending below it. */
static int settled(const struct pollfd *pf, const int *fds, size_t n, int lowest)
{
    for (size_t i = 0; i < n; i++) {
        if (pf[i].fd >= 0)
            return 0;
        if (lowest && fds[i] >= 0)
            return 1;
    }
    return 1;
}

size_t ddl_tcp_connect_each(const char *const *hostports, size_t n, int timeout_ms, int lowest,
                            int *fds, int *errs)
{
    struct pollfd *pf = calloc(n ? n : 1, sizeof *pf);
    int64_t deadline = ddl_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    size_t nok = 0;
    for (size_t i = 0; i < n; i++) {
        struct sockaddr_in sa;
        int done = 0, fd;
        fds[i] = -1;
        errs[i] = 0;
        if (!pf) {
            errs[i] = ENOMEM;
            continue;
        }
        pf[i].fd = -1;
        pf[i].events = POLLOUT;
        if (!hostports[i] || ddl_hostport_parse(hostports[i], &sa) < 0)
            errs[i] = EINVAL;
        else if ((fd = connect_begin(&sa, &done)) < 0)
            errs[i] = errno;
        else if (!done)
            pf[i].fd = fd;
        else if ((fds[i] = connect_end(fd)) < 0)
            errs[i] = errno;
    }
    if (!pf)
        return 0;
    while (!settled(pf, fds, n, lowest)) {
        int64_t left = deadline - ddl_now_ms();
        if (left <= 0)
            break;
        int r = poll(pf, (nfds_t)n, (int)left);
        if (r < 0 && errno != EINTR)
            break;
        for (size_t i = 0; r > 0 && i < n; i++)
            if (pf[i].fd >= 0 && pf[i].revents) {
                if ((fds[i] = connect_end(pf[i].fd)) < 0)
                    errs[i] = errno;
                pf[i].fd = -1;
            }
    }
    int kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (pf[i].fd >= 0) { /* no answer in time, or no longer needed */
            close(pf[i].fd);
            errs[i] = lowest && kept ? ECANCELED : ETIMEDOUT;
        } else if (fds[i] >= 0 && lowest && kept) {
            close(fds[i]);
            fds[i] = -1;
            errs[i] = ECANCELED;
        } else if (fds[i] >= 0) {
            kept = 1;
            nok++;
        }
    }
    free(pf);
    return nok;
}

int ddl_tcp_connect(const char *hostport, int timeout_ms, ddl_error_t *err)
{
    struct sockaddr_in sa;
    if (ddl_hostport_parse(hostport, &sa) < 0) {
        errno = EINVAL;
        return ddl_errprintf(err, "'%s' is not an IPv4 address and port (like 10.0.0.1:4000)",
                             hostport);
    }
    int64_t deadline = ddl_now_ms() + timeout_ms;
    int last = 0; /* the last try's own error, before the time ran out */
    for (;;) {
        int fd, e;
        int64_t left = deadline - ddl_now_ms();
        ddl_tcp_connect_each(&hostport, 1, left > 0 ? (int)left : 0, 0, &fd, &e);
        if (fd >= 0)
            return fd;
        if (e != ETIMEDOUT)
            last = e;
        if ((e != ECONNREFUSED && e != EHOSTUNREACH && e != EINTR) ||
            ddl_now_ms() >= deadline) {
            if (e == ETIMEDOUT && last)
                e = last; /* refused until the end: say so, not "no answer" */
            errno = e;
            if (e == ETIMEDOUT)
                return ddl_errprintf(err, "cannot connect to %s: no answer within %.1f s",
                                     hostport, timeout_ms / 1000.0);
            return ddl_errprintf(err, "cannot connect to %s: %s", hostport, strerror(e));
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int ddl_local_ipv4(const char *dst, char *buf, size_t len, ddl_error_t *err)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(9)};
    socklen_t sl = sizeof sa;
    if (dst && inet_pton(AF_INET, dst, &sa.sin_addr) == 1) {
        /* connect() on a UDP socket only picks the route: nothing is sent */
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        int ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
                 getsockname(fd, (struct sockaddr *)&sa, &sl) == 0 &&
                 sa.sin_addr.s_addr != htonl(INADDR_ANY);
        if (fd >= 0)
            close(fd);
        if (ok && inet_ntop(AF_INET, &sa.sin_addr, buf, (socklen_t)len))
            return 0;
    }
    struct ifaddrs *ifs, *i;
    if (getifaddrs(&ifs) < 0)
        return ddl_errprintf(err, "getifaddrs: %s", strerror(errno));
    int found = -1;
    for (i = ifs; i && found < 0; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK) &&
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, buf,
                      (socklen_t)len))
            found = 0;
    freeifaddrs(ifs);
    if (found < 0) {
        errno = EADDRNOTAVAIL;
        return ddl_errprintf(err, "no IPv4 interface is up (other than loopback)");
    }
    return 0;
}
