/* respawn.c: record a running worker's start (from /proc) and start it
 * again (see respawn.h).  ddl-launch uses it for restarts under Slurm and
 * under ddlrun --emulate. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "respawn.h"

/* read_all: the whole of /proc/PID/NAME (NUL-terminated, length in *len). */
static char *read_all(pid_t pid, const char *name, size_t *len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 4096, got = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf)
            break;
        if (cap - got < 2) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + got, cap - got - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            free(buf);
            buf = NULL;
            errno = e;
            break;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (buf) {
        buf[got] = '\0';
        *len = got;
    }
    return buf;
}

/* split0: "a\0b\0" into a NULL-terminated array of copies. */
static char **split0(const char *buf, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += buf[i] == '\0';
    if (len && buf[len - 1] != '\0')
        n++;
    char **v = calloc(n + 1, sizeof *v);
    if (!v)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len && k < n; i += strlen(buf + i) + 1)
        if (!(v[k++] = strdup(buf + i)))
            goto fail;
    return v;
fail:
    for (size_t i = 0; i < k; i++)
        free(v[i]);
    free(v);
    return NULL;
}

static void free_vec(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static int exe_of(pid_t pid, char *buf, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(path, buf, len - 1);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

int ddl_spawn_exec_done(pid_t pid, pid_t like)
{
    char a[4096], b[4096];
    if (exe_of(pid, a, sizeof a) < 0)
        return errno == ENOENT || errno == ESRCH ? -1 : 0;
    if (exe_of(like, b, sizeof b) < 0)
        return 0;
    return strcmp(a, b) != 0;
}

int ddl_spawn_capture(pid_t pid, ddl_spawn_t *sp, ddl_error_t *err)
{
    char path[64];
    size_t len;
    memset(sp, 0, sizeof *sp);
    if (exe_of(pid, sp->exe, sizeof sp->exe) < 0)
        return ddl_errprintf(err, "cannot read /proc/%d/exe: %s", (int)pid, strerror(errno));
    snprintf(path, sizeof path, "/proc/%d/cwd", (int)pid);
    ssize_t n = readlink(path, sp->cwd, sizeof sp->cwd - 1);
    if (n < 0)
        return ddl_errprintf(err, "cannot read %s: %s", path, strerror(errno));
    sp->cwd[n] = '\0';
    errno = 0;
    char *buf = read_all(pid, "cmdline", &len);
    if (buf && len == 0) {
        /* caught inside execve: the new program's memory is in place, its
         * arguments not yet (the kernel records where they are after it has
         * switched /proc/PID/exe; since Linux 5.18 a program always has at
         * least an empty argv[0]): read it again later */
        free(buf);
        errno = EAGAIN;
        return ddl_errprintf(err, "process %d is still being loaded (no arguments yet)",
                             (int)pid);
    }
    if (!buf) {
        errno = errno ? errno : ESRCH;
        return ddl_errprintf(err, "cannot read /proc/%d/cmdline: %s", (int)pid, strerror(errno));
    }
    sp->argv = split0(buf, len);
    free(buf);
    buf = read_all(pid, "environ", &len);
    if (buf && len == 0) {
        /* caught inside execve: the new program (its /proc/PID/exe) and its
         * arguments are in place, its environment not yet (the kernel sets
         * the environment's end last); a worker's environment is never
         * empty (ddl's variables), so this is not it: read it again later */
        free(buf);
        ddl_spawn_free(sp);
        errno = EAGAIN;
        return ddl_errprintf(err, "process %d is still being loaded (empty environment)",
                             (int)pid);
    }
    sp->envp = buf ? split0(buf, len) : NULL;
    free(buf);
    if (!sp->argv || !sp->envp) {
        ddl_spawn_free(sp);
        return ddl_errprintf(err, "cannot read the arguments and environment of process %d: %s",
                             (int)pid, strerror(errno ? errno : ENOMEM));
    }
    for (int r = 0; r < RLIM_NLIMITS; r++)
        if (prlimit(pid, r, NULL, &sp->lim[r]) < 0)
            getrlimit(r, &sp->lim[r]);
    if (sched_getaffinity(pid, sizeof sp->cpus, &sp->cpus) < 0)
        sched_getaffinity(0, sizeof sp->cpus, &sp->cpus);
    mode_t mask = umask(022);
    umask(mask);
    sp->umask = mask;
    buf = read_all(pid, "status", &len);
    const char *u = buf ? strstr(buf, "\nUmask:") : NULL;
    if (u)
        sp->umask = (mode_t)strtoul(u + 7, NULL, 8);
    free(buf);
    return 0;
}

/* dup_vec: a copy of the NULL-terminated v, or NULL. */
static char **dup_vec(char *const v[])
{
    size_t n = 0;
    while (v[n])
        n++;
    char **c = calloc(n + 1, sizeof *c);
    for (size_t i = 0; c && i < n; i++)
        if (!(c[i] = strdup(v[i]))) {
            free_vec(c);
            return NULL;
        }
    return c;
}

/* find_exe: prog as execvp would find it, in buf. */
static int find_exe(const char *prog, char *buf, size_t len)
{
    if (strchr(prog, '/')) {
        snprintf(buf, len, "%s", prog);
        return access(buf, X_OK);
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *d = path; *d;) {
        size_t n = strcspn(d, ":");
        snprintf(buf, len, "%.*s/%s", (int)n, n ? d : ".", prog);
        if (access(buf, X_OK) == 0)
            return 0;
        d += n + (d[n] == ':');
    }
    errno = ENOENT;
    return -1;
}

int ddl_spawn_self(char *const argv[], ddl_spawn_t *sp, ddl_error_t *err)
{
    extern char **environ;
    memset(sp, 0, sizeof *sp);
    if (find_exe(argv[0], sp->exe, sizeof sp->exe) < 0)
        return ddl_errprintf(err, "cannot execute '%s': %s", argv[0], strerror(errno));
    if (!getcwd(sp->cwd, sizeof sp->cwd))
        return ddl_errprintf(err, "getcwd: %s", strerror(errno));
    sp->argv = dup_vec(argv);
    sp->envp = dup_vec(environ);
    if (!sp->argv || !sp->envp) {
        ddl_spawn_free(sp);
        errno = ENOMEM;
        return ddl_errprintf(err, "out of memory");
    }
    for (int r = 0; r < RLIM_NLIMITS; r++)
        getrlimit(r, &sp->lim[r]);
    sched_getaffinity(0, sizeof sp->cpus, &sp->cpus);
    sp->umask = umask(022);
    umask(sp->umask);
    return 0;
}

/* named: env entry e is NAME=... for NAME the part of s before '=' (or all of s). */
static int named(const char *e, const char *s)
{
    size_t n = strcspn(s, "=");
    return strncmp(e, s, n) == 0 && e[n] == '=';
}

pid_t ddl_spawn_start(const ddl_spawn_t *sp, char *const set[], const char *const unset[],
                      int keep_fd, ddl_error_t *err)
{
    size_t n = 0, ns = 0;
    while (sp->envp[n])
        n++;
    while (set && set[ns])
        ns++;
    char **env = calloc(n + ns + 1, sizeof *env);
    if (!env)
        return ddl_errprintf(err, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int drop = 0;
        for (size_t j = 0; j < ns && !drop; j++)
            drop = named(sp->envp[i], set[j]);
        for (size_t j = 0; unset && unset[j] && !drop; j++)
            drop = named(sp->envp[i], unset[j]);
        if (!drop)
            env[k++] = sp->envp[i];
    }
    for (size_t j = 0; j < ns; j++)
        env[k++] = set[j];
    env[k] = NULL;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        free(env);
        errno = e;
        return ddl_errprintf(err, "fork: %s", strerror(e));
    }
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(137);
        if (keep_fd >= 0)
            fcntl(keep_fd, F_SETFD, 0);
        for (int r = 0; r < RLIM_NLIMITS; r++)
            setrlimit(r, &sp->lim[r]); /* a raised hard limit fails: the current one stays */
        sched_setaffinity(0, sizeof sp->cpus, &sp->cpus);
        umask(sp->umask);
        if (chdir(sp->cwd) < 0) {
            fprintf(stderr, "ddl-launch: cannot restart the worker in %s: %s\n", sp->cwd,
                    strerror(errno));
            _exit(126);
        }
        execve(sp->exe, sp->argv, env);
        fprintf(stderr, "ddl-launch: cannot restart the worker (%s): %s\n", sp->exe,
                strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    free(env);
    return pid;
}

void ddl_spawn_free(ddl_spawn_t *sp)
{
    free_vec(sp->argv);
    free_vec(sp->envp);
    sp->argv = sp->envp = NULL;
}
