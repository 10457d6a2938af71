/* util.c: implementation of the small shared helpers in util.h. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

int ddl_errprintf(ddl_error_t *err, const char *fmt, ...)
{
    int saved = errno;
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->text, sizeof err->text, fmt, ap);
        va_end(ap);
    }
    errno = saved;
    return -1;
}

int ddl_parse_long(const char *text, long min, long max, long *out)
{
    char *end;
    if (!text || !*text) {
        errno = EINVAL;
        return -1;
    }
    errno = 0;
    long v = strtol(text, &end, 10);
    if (*end != '\0' || end == text || (text[0] == ' ' || text[0] == '\t')) {
        errno = EINVAL;
        return -1;
    }
    if (errno == ERANGE || v < min || v > max) {
        errno = ERANGE;
        return -1;
    }
    *out = v;
    return 0;
}

int ddl_parse_seconds_ms(const char *text, long min_ms, long max_ms, long *out_ms)
{
    char *end;
    if (!text || !*text || !(text[0] == '.' || (text[0] >= '0' && text[0] <= '9'))) {
        errno = EINVAL;
        return -1;
    }
    errno = 0;
    double v = strtod(text, &end);
    if (*end != '\0' || end == text) {
        errno = EINVAL;
        return -1;
    }
    double ms = v * 1000.0;
    if (errno == ERANGE || ms < (double)min_ms || ms > (double)max_ms) {
        errno = ERANGE;
        return -1;
    }
    *out_ms = (long)(ms + 0.5);
    return 0;
}

int64_t ddl_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t ddl_now_ms(void)
{
    return ddl_now_us() / 1000;
}

int64_t ddl_realtime_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timespec ddl_deadline_in(int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    return until;
}

int ddl_write_full(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int ddl_read_full(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (n == 0) {
            errno = ECONNRESET;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int ddl_fd_set_cloexec(int fd)
{
    int fl = fcntl(fd, F_GETFD);
    if (fl < 0 || fcntl(fd, F_SETFD, fl | FD_CLOEXEC) < 0)
        return -1;
    return 0;
}

int ddl_fd_set_nonblock(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -1;
    fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
    return fcntl(fd, F_SETFL, fl) < 0 ? -1 : 0;
}

/* ---- the runtime directory (util.h; docs/security.md) ---- */

#ifndef DDL_SYSTEM_RUNTIME_BASE
#define DDL_SYSTEM_RUNTIME_BASE "/run/ddl"
#endif

const char *ddl_runtime_system_base(void)
{
    const char *b = getenv("DDL_SYSTEM_RUNTIME_DIR"); /* tests */
    return b && b[0] == '/' ? b : DDL_SYSTEM_RUNTIME_BASE;
}

/* private_dir: path is a directory itself (no link), owned by uid, mode
 * 0700 or less. */
static int private_dir(const char *path, uid_t uid)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == uid &&
           (st.st_mode & 0077) == 0;
}

/* root_base: the system base is a real directory of root's that nobody
 * else may write. */
static int root_base(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 &&
           (st.st_mode & 0022) == 0;
}

static int set_path(char *buf, size_t len, ddl_error_t *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int set_path(char *buf, size_t len, ddl_error_t *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len) {
        errno = ENAMETOOLONG;
        return ddl_errprintf(err, "runtime directory path '%s' is too long", buf);
    }
    return 0;
}

/* tmp_fallback: an existing /tmp/ddl-UID.XXXXXX of uid's, or (create) a new
 * one from mkdtemp. */
static int tmp_fallback(uid_t uid, int create, char *buf, size_t len, ddl_error_t *err)
{
    char prefix[32];
    int plen = snprintf(prefix, sizeof prefix, "ddl-%u.", (unsigned)uid);
    DIR *d = opendir("/tmp");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, prefix, (size_t)plen) != 0 || !e->d_name[plen])
            continue;
        if (set_path(buf, len, err, "/tmp/%s", e->d_name) == 0 && private_dir(buf, uid)) {
            closedir(d);
            return 0;
        }
    }
    if (d)
        closedir(d);
    if (!create) {
        errno = ENOENT;
        return ddl_errprintf(err, "no runtime directory of uid %u", (unsigned)uid);
    }
    if (set_path(buf, len, err, "/tmp/%sXXXXXX", prefix) < 0)
        return -1;
    if (!mkdtemp(buf))
        return ddl_errprintf(err, "cannot create a runtime directory %s: %s (set "
                             "DDL_RUNTIME_DIR to a directory of your own)", buf, strerror(errno));
    return 0;
}

int ddl_runtime_dir(uid_t uid, int create, char *buf, size_t len, ddl_error_t *err)
{
    const char *base = getenv("DDL_RUNTIME_DIR");
    const char *sys = ddl_runtime_system_base();
    const char *xdg = uid == getuid() ? getenv("XDG_RUNTIME_DIR") : NULL;
    struct stat st;
    if (base && *base) {
        if (set_path(buf, len, err, "%s/ddl-%u", base, (unsigned)uid) < 0)
            return -1;
        if (create && mkdir(buf, 0700) < 0 && errno != EEXIST)
            return ddl_errprintf(err, "cannot create %s: %s (set DDL_RUNTIME_DIR to a writable "
                                 "directory)", buf, strerror(errno));
        if (lstat(buf, &st) < 0)
            return ddl_errprintf(err, "%s: %s", buf, strerror(errno));
        if (!S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 0077) != 0) {
            errno = EPERM;
            return ddl_errprintf(err, "%s is not a private directory of uid %u (mode %04o, owner "
                                 "%u): remove it or set DDL_RUNTIME_DIR",
                                 buf, (unsigned)uid, (unsigned)(st.st_mode & 07777),
                                 (unsigned)st.st_uid);
        }
        return 0;
    }
    /* 1. made for the user by root (the Slurm plugin) */
    if (set_path(buf, len, err, "%s/%u", sys, (unsigned)uid) < 0)
        return -1;
    if (root_base(sys) && private_dir(buf, uid))
        return 0;
    /* 2. the user's session directory */
    if (xdg && xdg[0] == '/' && private_dir(xdg, uid)) {
        if (set_path(buf, len, err, "%s/ddl", xdg) < 0)
            return -1;
        if (create && mkdir(buf, 0700) < 0 && errno != EEXIST)
            return ddl_errprintf(err, "cannot create %s: %s", buf, strerror(errno));
        if (private_dir(buf, uid))
            return 0;
        if (create || errno != ENOENT) {
            errno = EPERM;
            return ddl_errprintf(err, "%s is not a private directory of uid %u: remove it",
                                 buf, (unsigned)uid);
        }
    }
    /* 3. /tmp/ddl-UID; if another user took that name, a private
     * /tmp/ddl-UID.XXXXXX that ddl-agent status finds by its owner */
    if (set_path(buf, len, err, "/tmp/ddl-%u", (unsigned)uid) < 0)
        return -1;
    if (create && mkdir(buf, 0700) < 0 && errno != EEXIST)
        return ddl_errprintf(err, "cannot create %s: %s (set DDL_RUNTIME_DIR to a writable "
                             "directory)", buf, strerror(errno));
    if (private_dir(buf, uid))
        return 0;
    return tmp_fallback(uid, create, buf, len, err);
}

/* uid_name: "1000" or "1000.suffix" (a fallback directory) -> uid. */
static int uid_name(const char *name, int suffix, uid_t *uid)
{
    char *end;
    if (name[0] < '0' || name[0] > '9')
        return -1;
    errno = 0;
    unsigned long v = strtoul(name, &end, 10);
    if (errno || v > 0x7fffffffUL || (*end && !(suffix && *end == '.' && end[1])))
        return -1;
    *uid = (uid_t)v;
    return 0;
}

/* each_in: fn for the entries PREFIX<uid>[REST] of dir (all users) that
 * are private directories of that uid. */
static void each_in(const char *dir, const char *prefix, int suffix, const char *rest,
                    uid_t want, void (*fn)(void *, const char *, uid_t), void *ctx)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t pl = strlen(prefix);
    char path[PATH_MAX];
    while (d && (e = readdir(d))) {
        uid_t uid;
        if (strncmp(e->d_name, prefix, pl) != 0 || uid_name(e->d_name + pl, suffix, &uid) < 0 ||
            (want != (uid_t)-1 && uid != want))
            continue;
        if (snprintf(path, sizeof path, "%s/%s%s", dir, e->d_name, rest) >= (int)sizeof path)
            continue;
        if (private_dir(path, uid))
            fn(ctx, path, uid);
    }
    if (d)
        closedir(d);
}

void ddl_runtime_dirs(uid_t uid, void (*fn)(void *ctx, const char *dir, uid_t owner), void *ctx)
{
    const char *base = getenv("DDL_RUNTIME_DIR");
    const char *sys = ddl_runtime_system_base();
    if (base && *base) {
        each_in(base, "ddl-", 0, "", uid, fn, ctx);
        return;
    }
    if (root_base(sys))
        each_in(sys, "", 0, "", uid, fn, ctx);
    if (uid == (uid_t)-1) {
        each_in("/run/user", "", 0, "/ddl", uid, fn, ctx);
    } else {
        const char *xdg = uid == getuid() ? getenv("XDG_RUNTIME_DIR") : NULL;
        char path[PATH_MAX];
        if (xdg && xdg[0] == '/' && private_dir(xdg, uid) &&
            snprintf(path, sizeof path, "%s/ddl", xdg) < (int)sizeof path &&
            private_dir(path, uid))
            fn(ctx, path, uid);
        else
            each_in("/run/user", "", 0, "/ddl", uid, fn, ctx);
    }
    each_in("/tmp", "ddl-", 1, "", uid, fn, ctx);
}

int ddl_user_dir_prepare(const char *sys, const char *what, uid_t uid, gid_t gid, char *buf,
                         size_t len, ddl_error_t *err)
{
    char name[32];
    if (set_path(buf, len, err, "%s/%u", sys, (unsigned)uid) < 0)
        return -1;
    snprintf(name, sizeof name, "%u", (unsigned)uid);
    int made = mkdir(sys, 0755) == 0;
    if (!made && errno != EEXIST)
        return ddl_errprintf(err, "cannot create %s: %s", sys, strerror(errno));
    int bfd = open(sys, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (bfd >= 0 && made)
        fchmod(bfd, 0755); /* whatever the umask: every user enters it */
    if (bfd < 0 || fstat(bfd, &st) < 0) {
        int e = errno;
        if (bfd >= 0)
            close(bfd);
        errno = e;
        return ddl_errprintf(err, "cannot open %s%s%s: %s (it must be a directory, not a link)",
                             what ? what : "", what ? " " : "", sys, strerror(e));
    }
    if (st.st_uid != 0 || (st.st_mode & 0022)) {
        close(bfd);
        errno = EPERM;
        return ddl_errprintf(err, "%s%s%s is owned by uid %u with mode %04o: it must be root's and "
                             "writable by nobody else: %s", what ? what : "", what ? " " : "",
                             sys, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
                             what ? "fix it (chown root, chmod go-w) or name another directory"
                                  : "remove it");
    }
    if (mkdirat(bfd, name, 0700) < 0 && errno != EEXIST) {
        int e = errno;
        close(bfd);
        errno = e;
        return ddl_errprintf(err, "cannot create %s: %s", buf, strerror(e));
    }
    int fd = openat(bfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    if (fd < 0 && fstatat(bfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
        close(bfd);
        errno = ELOOP;
        return ddl_errprintf(err, "cannot prepare %s for uid %u: it is a symbolic link, which "
                             "ddl does not follow: remove it", buf, (unsigned)uid);
    }
    close(bfd);
    if (fd < 0 || fchown(fd, uid, gid) < 0 || fchmod(fd, 0700) < 0) {
        if (fd >= 0) {
            e = errno;
            close(fd);
        }
        errno = e;
        return ddl_errprintf(err, "cannot prepare %s for uid %u: %s", buf, (unsigned)uid,
                             strerror(e));
    }
    close(fd);
    return 0;
}

int ddl_runtime_dir_prepare(uid_t uid, gid_t gid, char *buf, size_t len, ddl_error_t *err)
{
    return ddl_user_dir_prepare(ddl_runtime_system_base(), NULL, uid, gid, buf, len, err);
}

const char *ddl_signal_name(int sig, char *buf, size_t len)
{
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev)
        snprintf(buf, len, "SIG%s", abbrev);
    else
        snprintf(buf, len, "signal %d", sig);
    return buf;
}

const char *ddl_describe_wait_status(int status, char *buf, size_t len)
{
    char name[32];
    if (WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "was killed by signal %d (%s)%s", WTERMSIG(status),
                 ddl_signal_name(WTERMSIG(status), name, sizeof name),
                 WCOREDUMP(status) ? ", core dumped" : "");
    else
        snprintf(buf, len, "stopped with wait status 0x%x", (unsigned)status);
    return buf;
}

int ddl_wait_status_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return 1;
}

int ddl_find_helper(const char *name, const char *subdir, const char *installed_dir, char *buf,
                    size_t len, ddl_error_t *err)
{
    char exe[PATH_MAX], probe[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    int in_tree = 0;
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(probe, sizeof probe, "%s/../config.status", exe);
            in_tree = access(probe, F_OK) == 0;
        }
    }
    if (in_tree)
        n = snprintf(buf, len, "%s/../%s/%s", exe, subdir, name);
    else
        n = snprintf(buf, len, "%s/%s", installed_dir, name);
    if (n < 0 || (size_t)n >= len) {
        errno = ENAMETOOLONG;
        return ddl_errprintf(err, "path of %s is too long", name);
    }
    if (access(buf, X_OK) < 0) {
        int saved = errno;
        ddl_errprintf(err, "cannot find %s at %s: %s (is ddl installed completely?)", name, buf,
                      strerror(saved));
        errno = saved;
        return -1;
    }
    return 0;
}

void ddl_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20 || ch >= 0x7f)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

int ddl_cpulist_parse(const char *text, void (*add)(void *ctx, unsigned lo, unsigned hi),
                      void *ctx, ddl_error_t *err)
{
    const char *p = text;
    if (!text || !*text) {
        errno = EINVAL;
        return ddl_errprintf(err, "empty CPU list (expected numbers and ranges like 0-3,8)");
    }
    for (;;) {
        char *end;
        long lo, hi;
        if (*p < '0' || *p > '9')
            goto bad;
        errno = 0;
        lo = strtol(p, &end, 10);
        if (errno || lo > 65535)
            goto bad;
        p = end;
        hi = lo;
        if (*p == '-') {
            p++;
            if (*p < '0' || *p > '9')
                goto bad;
            errno = 0;
            hi = strtol(p, &end, 10);
            if (errno || hi > 65535 || hi < lo)
                goto bad;
            p = end;
        }
        if (add)
            add(ctx, (unsigned)lo, (unsigned)hi);
        if (*p == '\0')
            return 0;
        if (*p != ',')
            goto bad;
        p++;
    }
bad:
    errno = EINVAL;
    return ddl_errprintf(err,
                         "'%s' is not a CPU list: bad part '%s' (expected numbers below 65536 "
                         "and ranges like 0-3,8,10-11)",
                         text, *p ? p : "(end)");
}

int ddl_bind_check(const char *text, ddl_error_t *err)
{
    if (strcmp(text, "auto") == 0 || strcmp(text, "none") == 0)
        return 0;
    for (const char *p = text;;) {
        const char *c = strchr(p, ':');
        char *entry = strndup(p, c ? (size_t)(c - p) : strlen(p));
        if (!entry) {
            errno = ENOMEM;
            return ddl_errprintf(err, "out of memory");
        }
        int rc = ddl_cpulist_parse(entry, NULL, NULL, err);
        free(entry);
        if (rc < 0)
            return -1;
        if (!c)
            return 0;
        p = c + 1;
    }
}

int ddl_secret_hex(char *out, ddl_error_t *err)
{
    uint8_t raw[DDL_SECRET_BYTES];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return ddl_errprintf(err, "getrandom: %s", strerror(errno));
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    memset(raw, 0, sizeof raw);
    return 0;
}

pid_t ddl_spawn_ready(const char *path, char *const argv[], const int *keep, int nkeep,
                      int new_group, int timeout_ms, ddl_error_t *err)
{
    int pfd[2];
    char ready[16];
    size_t n = 0;
    while (argv[n])
        n++;
    char **av = calloc(n + 3, sizeof *av);
    if (!av || pipe2(pfd, O_CLOEXEC) < 0) {
        free(av);
        return ddl_errprintf(err, "cannot start %s: %s", path, strerror(errno));
    }
    snprintf(ready, sizeof ready, "%d", pfd[1]);
    memcpy(av, argv, n * sizeof *av);
    av[n] = "--ready-fd";
    av[n + 1] = ready;
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        free(av);
        close(pfd[0]);
        close(pfd[1]);
        errno = e;
        return ddl_errprintf(err, "fork for %s: %s", path, strerror(e));
    }
    if (pid == 0) {
        sigset_t none;
        if (new_group)
            setpgid(0, 0);
        sigemptyset(&none);
        for (int s = 1; s < NSIG; s++)
            signal(s, SIG_DFL);
        sigprocmask(SIG_SETMASK, &none, NULL);
        fcntl(pfd[1], F_SETFD, 0);
        for (int i = 0; i < nkeep; i++)
            fcntl(keep[i], F_SETFD, 0);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        execv(path, av);
        fprintf(stderr, "ddl: cannot execute %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    if (new_group)
        setpgid(pid, pid); /* also here: no race with an early kill(-pid) */
    free(av);
    close(pfd[1]);
    char buf[4] = "";
    struct pollfd p = {.fd = pfd[0], .events = POLLIN};
    int rc;
    while ((rc = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR)
        ;
    ssize_t got = rc > 0 ? read(pfd[0], buf, sizeof buf) : -1;
    close(pfd[0]);
    if (got <= 0 || buf[0] != '1') {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        errno = rc == 0 ? ETIMEDOUT : ECHILD;
        return ddl_errprintf(err, "%s (pid %d) did not start%s", argv[0], (int)pid,
                             rc == 0 ? " in time" : "; see its message above");
    }
    return pid;
}

void ddl_kill_adopted(pid_t keep)
{
    for (int round = 0; round < 50; round++) {
        int found = 0;
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char path[64], buf[512];
            long pid = strtol(e->d_name, NULL, 10);
            if (pid <= 0 || pid == keep)
                continue;
            snprintf(path, sizeof path, "/proc/%ld/stat", pid);
            FILE *f = fopen(path, "r");
            if (!f)
                continue;
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[n] = '\0';
            char *close_paren = strrchr(buf, ')'); /* the name may hold spaces */
            int ppid = 0;
            if (close_paren && sscanf(close_paren + 2, "%*c %d", &ppid) == 1 &&
                ppid == (int)getpid()) {
                kill((pid_t)pid, SIGKILL);
                found++;
            }
        }
        if (d)
            closedir(d);
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        if (!found)
            return;
        usleep(10000);
    }
}
