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

int ddl_runtime_dir(uid_t uid, int create, char *buf, size_t len, ddl_error_t *err)
{
    const char *base = getenv("DDL_RUNTIME_DIR");
    struct stat st;
    if (!base || !*base)
        base = "/tmp";
    int n = snprintf(buf, len, "%s/ddl-%u", base, (unsigned)uid);
    if (n < 0 || (size_t)n >= len) {
        errno = ENAMETOOLONG;
        return ddl_errprintf(err, "runtime directory under '%s' is too long", base);
    }
    if (create && mkdir(buf, 0700) < 0 && errno != EEXIST)
        return ddl_errprintf(err, "cannot create %s: %s (set DDL_RUNTIME_DIR to a writable directory)",
                             buf, strerror(errno));
    if (lstat(buf, &st) < 0)
        return ddl_errprintf(err, "%s: %s", buf, strerror(errno));
    if (!S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 0077) != 0) {
        errno = EPERM;
        return ddl_errprintf(err, "%s is not a private directory of uid %u (mode %04o, owner %u): "
                             "remove it or set DDL_RUNTIME_DIR",
                             buf, (unsigned)uid, (unsigned)(st.st_mode & 07777),
                             (unsigned)st.st_uid);
    }
    return 0;
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
        else if (ch < 0x20)
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
