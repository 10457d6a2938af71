/* t_util.c: common helpers: strict number parsing, wait-status wording and
 * exit codes, the private runtime directory, the logger's level parsing, and
 * the Unix socket helpers (permissions, stale sockets, peer credentials),
 * and the TCP connects between agents: bounded by their timeout even where
 * the other side drops the packets (a listener whose queue is full), and
 * several at once, the lowest that answers first. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <netinet/in.h>

#include "beat.h"
#include "log.h"
#include "sock.h"
#include "util.h"
#include "../tap.h"

static void test_parse(void)
{
    long v = -1;
    ok(ddl_parse_long("42", 0, 100, &v) == 0 && v == 42, "parse 42");
    ok(ddl_parse_long("-5", -10, 10, &v) == 0 && v == -5, "parse -5");
    errno = 0;
    ok(ddl_parse_long("101", 0, 100, &v) == -1 && errno == ERANGE, "101 > max -> ERANGE");
    errno = 0;
    ok(ddl_parse_long("4x", 0, 100, &v) == -1 && errno == EINVAL, "trailing junk -> EINVAL");
    errno = 0;
    ok(ddl_parse_long("", 0, 100, &v) == -1 && errno == EINVAL, "empty -> EINVAL");
    errno = 0;
    ok(ddl_parse_long(NULL, 0, 100, &v) == -1 && errno == EINVAL, "NULL -> EINVAL");
    errno = 0;
    ok(ddl_parse_long(" 4", 0, 100, &v) == -1 && errno == EINVAL, "leading space -> EINVAL");
    errno = 0;
    ok(ddl_parse_long("99999999999999999999999", 0, 100, &v) == -1 && errno == ERANGE,
       "overflow -> ERANGE");
    ok(ddl_parse_seconds_ms("1.5", 0, 10000, &v) == 0 && v == 1500, "1.5 s -> 1500 ms");
    ok(ddl_parse_seconds_ms(".25", 0, 10000, &v) == 0 && v == 250, ".25 s -> 250 ms");
    errno = 0;
    ok(ddl_parse_seconds_ms("-1", 0, 10000, &v) == -1 && errno == EINVAL, "negative seconds -> EINVAL");
    errno = 0;
    ok(ddl_parse_seconds_ms("11", 0, 10000, &v) == -1 && errno == ERANGE, "over max -> ERANGE");
    errno = 0;
    ok(ddl_parse_seconds_ms("nan", 0, 10000, &v) == -1, "nan is refused");
}

static void test_wait_status(void)
{
    char buf[128];
    int st;
    pid_t p = fork();
    if (p == 0)
        _exit(3);
    waitpid(p, &st, 0);
    is_str(ddl_describe_wait_status(st, buf, sizeof buf), "exited with status 3", "exit wording");
    is(ddl_wait_status_code(st), 3, "exit code 3");
    p = fork();
    if (p == 0) {
        raise(SIGKILL);
        _exit(0);
    }
    waitpid(p, &st, 0);
    is_str(ddl_describe_wait_status(st, buf, sizeof buf), "was killed by signal 9 (SIGKILL)",
           "signal wording");
    is(ddl_wait_status_code(st), 137, "signal 9 -> 137");
    is_str(ddl_signal_name(SIGTERM, buf, sizeof buf), "SIGTERM", "signal name");
}

static void test_runtime_dir(void)
{
    char tmpl[] = "/tmp/t_util.XXXXXX", dir[512], bad[600];
    ddl_error_t err;
    struct stat st;
    if (!mkdtemp(tmpl))
        BAIL_OUT("mkdtemp: %s", strerror(errno));
    setenv("DDL_RUNTIME_DIR", tmpl, 1);
    ok(ddl_runtime_dir(getuid(), 1, dir, sizeof dir, &err) == 0, "runtime dir is created");
    ok(stat(dir, &st) == 0 && (st.st_mode & 0777) == 0700, "... with mode 0700");
    ok(ddl_runtime_dir(getuid(), 1, dir, sizeof dir, &err) == 0, "an existing private dir is fine");
    chmod(dir, 0755);
    errno = 0;
    ok(ddl_runtime_dir(getuid(), 0, dir, sizeof dir, &err) == -1 && errno == EPERM,
       "a dir readable by others is refused");
    ok(strstr(err.text, "not a private directory") != NULL, "... with a message: %s", err.text);
    rmdir(dir);
    /* a symlink planted where the directory should be */
    snprintf(bad, sizeof bad, "ln -s /tmp %s", dir);
    if (system(bad) == 0) {
        errno = 0;
        ok(ddl_runtime_dir(getuid(), 1, dir, sizeof dir, &err) == -1 && errno == EPERM,
           "a symlink in place of the directory is refused");
        unlink(dir);
    } else
        skip(1, "cannot create a symlink");
    unsetenv("DDL_RUNTIME_DIR");

    /* the system base (/run/ddl in a temporary place): made by root for the
     * user, then the first choice */
    char sys[600], xdg[600];
    snprintf(sys, sizeof sys, "%s/sys", tmpl);
    setenv("DDL_SYSTEM_RUNTIME_DIR", sys, 1);
    snprintf(xdg, sizeof xdg, "%s/xdg", tmpl);
    mkdir(xdg, 0700);
    setenv("XDG_RUNTIME_DIR", xdg, 1);
    ok(ddl_runtime_dir(getuid(), 1, dir, sizeof dir, &err) == 0 && strstr(dir, "/xdg/ddl"),
       "without a system directory, $XDG_RUNTIME_DIR/ddl: %s", dir);
    if (geteuid() == 0) {
        ok(ddl_runtime_dir_prepare(getuid(), getgid(), dir, sizeof dir, &err) == 0,
           "root prepares the system directory: %s", err.text);
        ok(stat(sys, &st) == 0 && st.st_uid == 0 && (st.st_mode & 0777) == 0755,
           "... base 0755, root's");
        ok(stat(dir, &st) == 0 && (st.st_mode & 0777) == 0700, "... the user's 0700");
        ok(ddl_runtime_dir(getuid(), 1, bad, sizeof bad, &err) == 0 && !strcmp(bad, dir),
           "then it is the first choice: %s", bad);
        chmod(sys, 0777);
        ok(ddl_runtime_dir_prepare(getuid(), getgid(), dir, sizeof dir, &err) < 0 &&
               strstr(err.text, "mode 0777"), "a base others can write is refused: %s", err.text);
        ok(ddl_runtime_dir(getuid(), 1, bad, sizeof bad, &err) == 0 && strstr(bad, "/xdg/ddl"),
           "... and not used");
        chmod(sys, 0755);
    } else
        skip(6, "preparing the system directory needs root");
    unsetenv("XDG_RUNTIME_DIR");
    unsetenv("DDL_SYSTEM_RUNTIME_DIR");
    snprintf(bad, sizeof bad, "rm -rf '%s'", tmpl);
    if (system(bad) != 0)
        diag("cannot remove %s", tmpl);
}

static void test_sockets(void)
{
    char tmpl[] = "/tmp/t_sock.XXXXXX", path[256];
    ddl_error_t err;
    struct stat st;
    if (!mkdtemp(tmpl))
        BAIL_OUT("mkdtemp: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/a.sock", tmpl);
    int l = ddl_sock_listen(path, &err);
    ok(l >= 0, "listen on a fresh path");
    ok(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "socket file has mode 0600");
    errno = 0;
    ok(ddl_sock_listen(path, &err) == -1 && errno == EADDRINUSE, "a live socket is not stolen");
    int c = ddl_sock_connect(path, 0, &err);
    ok(c >= 0, "connect");
    pid_t pid;
    uid_t uid;
    ok(ddl_sock_peer(c, &pid, &uid, NULL) == 0 && pid == getpid() && uid == getuid(),
       "SO_PEERCRED gives our own pid and uid");
    close(c);
    close(l);
    l = ddl_sock_listen(path, &err);
    ok(l >= 0, "a stale socket file is replaced");
    close(l);
    unlink(path);
    int64_t t0 = ddl_now_ms();
    errno = 0;
    ok(ddl_sock_connect(path, 200, &err) == -1 && errno == ENOENT, "connect to nothing fails");
    ok(ddl_now_ms() - t0 >= 150, "... after retrying for the timeout");
    ok(strstr(err.text, path) != NULL, "... and the message names the path");
    char longp[300];
    memset(longp, 'a', sizeof longp);
    longp[0] = '/';
    longp[299] = '\0';
    errno = 0;
    ok(ddl_sock_listen(longp, &err) == -1 && errno == ENAMETOOLONG, "over-long path -> ENAMETOOLONG");
    ok(ddl_sock_peer_allowed(1000, 1000) && ddl_sock_peer_allowed(0, 1000) &&
           !ddl_sock_peer_allowed(1001, 1000),
       "peer policy: owner and root only");
    rmdir(tmpl);
}

static void test_log_levels(void)
{
    is(ddl_log_parse_level("debug"), DDL_LOG_DEBUG, "level 'debug'");
    is(ddl_log_parse_level("WARN"), DDL_LOG_WARN, "level 'WARN'");
    is(ddl_log_parse_level("0"), DDL_LOG_ERROR, "level '0'");
    is(ddl_log_parse_level("loud"), -1, "level 'loud' is not a level");
    setenv("DDL_LOG_LEVEL", "trace", 1);
    ddl_log_init("t_util", DDL_LOG_ERROR);
    is(ddl_log_get_level(), DDL_LOG_TRACE, "DDL_LOG_LEVEL overrides the default");
    unsetenv("DDL_LOG_LEVEL");
    ddl_log_init("t_util", DDL_LOG_WARN);
    is(ddl_log_get_level(), DDL_LOG_WARN, "default level without the variable");
}

static void add_range(void *ctx, unsigned lo, unsigned hi)
{
    unsigned *sum = ctx;
    *sum += (hi - lo + 1) * 1000 + lo; /* count and start of each item */
}

static void test_cpulists(void)
{
    ddl_error_t err;
    unsigned sum = 0;
    ok(ddl_cpulist_parse("0-3,8,10-11", add_range, &sum, &err) == 0, "0-3,8,10-11 parses");
    is(sum, 4000 + 0 + 1000 + 8 + 2000 + 10, "... into 0-3, 8 and 10-11");
    ok(ddl_cpulist_parse("65535", NULL, NULL, &err) == 0, "65535 is the largest CPU number");
    static const char *const bad[] = {"", "x", "1,", ",1", "3-1", "1-", "65536", "1 2", "1--2",
                                      "0-3:4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        errno = 0;
        ok(ddl_cpulist_parse(bad[i], NULL, NULL, &err) == -1 && errno == EINVAL,
           "'%s' is not a CPU list", bad[i]);
    }
    ok(strstr(err.text, "bad part ':4'") != NULL, "the message names the bad part: %s", err.text);
    ok(ddl_bind_check("auto", &err) == 0 && ddl_bind_check("none", &err) == 0,
       "bind policies auto and none");
    ok(ddl_bind_check("0-3:4-7", &err) == 0, "bind lists 0-3:4-7");
    errno = 0;
    ok(ddl_bind_check("0-3::4", &err) == -1 && errno == EINVAL, "an empty list between ':' is refused");
    ok(ddl_bind_check("0:70000", &err) == -1 && strstr(err.text, "70000") != NULL,
       "a bad second list is refused, naming it");
    ok(ddl_bind_check("Auto", &err) == -1, "policies are case-sensitive");
}

/* ddl_json_str: quotes, backslashes, control characters, DEL and bytes
 * from 0x80 escaped, other bytes as they are, NULL as "". */
static void test_json_str(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        BAIL_OUT("open_memstream: %s", strerror(errno));
    ddl_json_str(f, "a\"b\\c\n\t\x01\x1f\x7f \xc3\xa9/");
    fputc(' ', f);
    ddl_json_str(f, NULL);
    fputc(' ', f);
    ddl_json_str(f, "");
    fclose(f);
    is_str(buf, "\"a\\\"b\\\\c\\u000a\\u0009\\u0001\\u001f\\u007f \\u00c3\\u00a9/\" \"\" \"\"",
           "ddl_json_str: escapes '\"', '\\\\', controls, DEL and non-ASCII bytes; NULL and \"\" are empty strings");
    free(buf);
}

/* ddl_beat_channel_open: the inherited pipe, else the FIFO, else nothing. */
static void test_beat_channel(void)
{
    int p[2], owned = -1, fd;
    char fdtext[16], dir[] = "/tmp/t_util_beat.XXXXXX", fifo[64];
    if (pipe(p) < 0 || !mkdtemp(dir))
        BAIL_OUT("pipe/mkdtemp: %s", strerror(errno));
    snprintf(fifo, sizeof fifo, "%s/beat", dir);
    if (mkfifo(fifo, 0600) < 0)
        BAIL_OUT("mkfifo: %s", strerror(errno));
    int reader = open(fifo, O_RDONLY | O_NONBLOCK); /* so that opening for writing succeeds */
    unsetenv("DDL_HEARTBEAT_PATH");
    snprintf(fdtext, sizeof fdtext, "%d", p[1]);
    setenv("DDL_HEARTBEAT_FD", fdtext, 1);
    fd = ddl_beat_channel_open(&owned);
    ok(fd == p[1] && owned == 0, "DDL_HEARTBEAT_FD: the inherited pipe, not owned");
    ok(fd >= 0 && (fcntl(fd, F_GETFL) & O_NONBLOCK), "... made non-blocking");
    setenv("DDL_HEARTBEAT_FD", "2", 1);
    errno = 0;
    ok(ddl_beat_channel_open(&owned) < 0 && errno == ENOENT, "descriptor 2 is not a channel");
    setenv("DDL_HEARTBEAT_FD", "1048577", 1);
    ok(ddl_beat_channel_open(&owned) < 0 && errno == ENOENT, "descriptor 2^20+1 is not a channel");
    close(p[0]);
    close(p[1]);
    setenv("DDL_HEARTBEAT_FD", fdtext, 1);
    ok(ddl_beat_channel_open(&owned) < 0 && errno == ENOENT, "a closed descriptor is not a channel");
    setenv("DDL_HEARTBEAT_PATH", fifo, 1);
    fd = ddl_beat_channel_open(&owned);
    ok(fd >= 0 && owned == 1, "else the FIFO in DDL_HEARTBEAT_PATH, owned");
    ok(fd >= 0 && (fcntl(fd, F_GETFL) & O_NONBLOCK) && (fcntl(fd, F_GETFD) & FD_CLOEXEC) &&
           (fcntl(fd, F_GETFL) & O_ACCMODE) == O_WRONLY,
       "... write-only, non-blocking, close-on-exec");
    if (fd >= 0)
        close(fd);
    if (reader >= 0)
        close(reader);
    unlink(fifo);
    errno = 0;
    ok(ddl_beat_channel_open(&owned) < 0 && errno == ENOENT, "a FIFO that is gone: ENOENT");
    unsetenv("DDL_HEARTBEAT_FD");
    unsetenv("DDL_HEARTBEAT_PATH");
    ok(ddl_beat_channel_open(&owned) < 0 && errno == ENOENT, "no variable: ENOENT");
    rmdir(dir);
}

/* listener: a TCP socket listening on 127.0.0.1 with this backlog; its
 * "127.0.0.1:port" into hp */
static int listener(int backlog, char *hp, size_t len)
{
    uint16_t port = 0;
    int fd = ddl_tcp_listen("127.0.0.1", &port, NULL);
    if (fd < 0 || listen(fd, backlog) < 0)
        BAIL_OUT("cannot listen on 127.0.0.1");
    snprintf(hp, len, "127.0.0.1:%u", port);
    return fd;
}

static void test_tcp_connect(void)
{
    char good[32], good2[32], closed[32], full[32];
    ddl_error_t err;
    int lg = listener(16, good, sizeof good), lg2 = listener(16, good2, sizeof good2);
    int lc = listener(16, closed, sizeof closed);
    /* A listener whose accept queue is full drops new SYNs: the connect
     * gets no answer, as from a host that vanished without a trace. */
    int lf = listener(0, full, sizeof full), filler[4];
    close(lc); /* nothing listens there any more: ECONNREFUSED (no later
                  listener of this test may take its port) */
    for (int i = 0; i < 4; i++)
        filler[i] = ddl_tcp_connect(full, 200, NULL);

    int fd = ddl_tcp_connect(good, 1000, &err);
    ok(fd >= 0, "ddl_tcp_connect to a listener");
    if (fd >= 0)
        close(fd);
    int64_t t0 = ddl_now_ms();
    errno = 0;
    fd = ddl_tcp_connect(closed, 300, &err);
    ok(fd < 0 && errno == ECONNREFUSED, "nothing listening: ECONNREFUSED, after retrying for the timeout");
    t0 = ddl_now_ms();
    errno = 0;
    fd = ddl_tcp_connect(full, 300, &err);
    int64_t took = ddl_now_ms() - t0;
    ok(fd < 0 && errno == ETIMEDOUT && strstr(err.text, "no answer within 0.3 s"),
       "packets dropped: ETIMEDOUT, '%s'", err.text);
    ok(took >= 250 && took < 5000, "... after the timeout (%lld ms for 300), not the kernel's SYN retries",
       (long long)took);
    errno = 0;
    ok(ddl_tcp_connect("localhost:1", 100, &err) < 0 && errno == EINVAL, "'localhost:1': EINVAL");

    const char *all[] = {closed, full, good, good2, "nonsense"};
    int fds[5], errs[5];
    t0 = ddl_now_ms();
    size_t n = ddl_tcp_connect_each(all, 5, 300, 0, fds, errs);
    took = ddl_now_ms() - t0;
    ok(n == 2 && fds[2] >= 0 && fds[3] >= 0 && fds[0] < 0 && fds[1] < 0 && fds[4] < 0,
       "connect_each: the two listeners connect (%zu)", n);
    ok(errs[0] == ECONNREFUSED && errs[1] == ETIMEDOUT && errs[4] == EINVAL,
       "... the others say why: refused, no answer, not an address (%d %d %d)", errs[0],
       errs[1], errs[4]);
    ok(took < 5000, "... all at once, within the one timeout (%lld ms)", (long long)took);
    for (int i = 0; i < 5; i++)
        if (fds[i] >= 0)
            close(fds[i]);

    n = ddl_tcp_connect_each(all, 5, 300, 1, fds, errs);
    ok(n == 1 && fds[2] >= 0 && fds[3] < 0 && errs[3] == ECANCELED,
       "lowest: the first that connects once those before it failed; the later one closed");
    ok(errs[0] == ECONNREFUSED && errs[1] == ETIMEDOUT, "... the earlier ones failed or timed out");
    if (fds[2] >= 0)
        close(fds[2]);
    const char *two[] = {good2, good};
    t0 = ddl_now_ms();
    n = ddl_tcp_connect_each(two, 2, 3000, 1, fds, errs);
    took = ddl_now_ms() - t0;
    ok(n == 1 && fds[0] >= 0 && fds[1] < 0 && took < 2000,
       "lowest, the first answers: returns at once with it (%lld ms)", (long long)took);
    if (fds[0] >= 0)
        close(fds[0]);
    ok(ddl_tcp_connect_each(all, 0, 100, 1, fds, errs) == 0, "no address: none connected");
    for (int i = 0; i < 4; i++)
        if (filler[i] >= 0)
            close(filler[i]);
    close(lf);
    close(lg);
    close(lg2);
}

int main(void)
{
    plan(NO_PLAN);
    test_cpulists();
    test_json_str();
    test_beat_channel();
    test_parse();
    test_wait_status();
    test_runtime_dir();
    test_sockets();
    test_tcp_connect();
    test_log_levels();
    return done_testing();
}
