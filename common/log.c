/* log.c: the leveled, prefixed stderr logger shared by ddl's programs and
 * libddl (see log.h).  One write(2) per line keeps lines whole when several
 * ranks share a terminal. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "safefile.h"
#include "util.h"

static char log_component[64] = "ddl";
static volatile ddl_log_level_t log_level = DDL_LOG_INFO;
static int log_time; /* DDL_LOG_TIME: lines start with [epoch seconds.ms] */
static volatile int log_file = -1; /* ddl_log_open_step's file, -1: none */

/* ddl_log_step_async: the step log's lines go to a buffer that a thread of
 * its own writes (double buffering: the loggers append whole lines to one
 * buffer while the thread writes the other, so that every write(2) holds
 * whole lines only).  A line that does not fit is counted, not waited for. */
#define ASYNC_CAP (256 * 1024)
int ddl_log_write_delay_ms;
static struct {
    pthread_mutex_t mu;
    pthread_cond_t more, empty;
    char *fill, *spare; /* the buffer lines go to; the one the thread writes */
    size_t len;         /* bytes in fill */
    int writing;        /* the thread holds spare with bytes in it */
    unsigned long dropped;
    int on;
} aw = {.mu = PTHREAD_MUTEX_INITIALIZER, .more = PTHREAD_COND_INITIALIZER,
        .empty = PTHREAD_COND_INITIALIZER};

int ddl_log_parse_level(const char *text)
{
    static const char *const names[] = {"error", "warn", "info", "debug", "trace"};
    if (!text || !*text)
        return -1;
    if (text[0] >= '0' && text[0] <= '4' && text[1] == '\0')
        return text[0] - '0';
    for (int i = 0; i < 5; i++)
        if (strcasecmp(text, names[i]) == 0)
            return i;
    if (strcasecmp(text, "warning") == 0)
        return DDL_LOG_WARN;
    return -1;
}

void ddl_log_init(const char *component, ddl_log_level_t level)
{
    if (component)
        snprintf(log_component, sizeof log_component, "%s", component);
    int env = ddl_log_parse_level(getenv("DDL_LOG_LEVEL"));
    log_level = env >= 0 ? (ddl_log_level_t)env : level;
    const char *t = getenv("DDL_LOG_TIME");
    log_time = t && *t && strcmp(t, "0") != 0;
}

void ddl_log_set_level(ddl_log_level_t level)
{
    log_level = level;
}

ddl_log_level_t ddl_log_get_level(void)
{
    return log_level;
}

void ddl_vlog(ddl_log_level_t level, const char *fmt, va_list ap)
{
    static const char *const tags[] = {"", "warning: ", "", "debug: ", "trace: "};
    char line[2048];
    int saved = errno;
    if (level > log_level)
        return;
    char when[32] = "";
    if (log_time) {
        int64_t ms = ddl_realtime_ms();
        snprintf(when, sizeof when, "[%lld.%03d] ", (long long)(ms / 1000), (int)(ms % 1000));
    }
    int n = snprintf(line, sizeof line, "%s%s: %s", when, log_component,
                     tags[level <= DDL_LOG_TRACE ? level : DDL_LOG_TRACE]);
    if (n < 0)
        n = 0;
    if ((size_t)n < sizeof line) {
        errno = saved; /* keep %m meaningful */
        int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
        if (m > 0)
            n += m;
    }
    if ((size_t)n >= sizeof line - 1)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t rc = write(STDERR_FILENO, line, (size_t)n);
    (void)rc;
    int lf = log_file;
    if (lf >= 0) { /* the step's log: always the time and the pid */
        char head[64];
        int64_t ms = ddl_realtime_ms();
        int hn = snprintf(head, sizeof head, "[%lld.%03d] [%d] ", (long long)(ms / 1000),
                          (int)(ms % 1000), (int)getpid());
        size_t skip = strlen(when); /* not twice */
        struct iovec v[2] = {{head, (size_t)hn}, {line + skip, (size_t)n - skip}};
        if (aw.on) {
            size_t need = (size_t)hn + (size_t)n - skip;
            pthread_mutex_lock(&aw.mu);
            if (aw.len + need <= ASYNC_CAP) {
                memcpy(aw.fill + aw.len, head, (size_t)hn);
                memcpy(aw.fill + aw.len + hn, line + skip, (size_t)n - skip);
                aw.len += need;
                pthread_cond_signal(&aw.more);
            } else {
                aw.dropped++;
            }
            pthread_mutex_unlock(&aw.mu);
        } else {
            rc = writev(lf, v, 2); /* O_APPEND: one whole line among the other processes' */
            (void)rc;
        }
    }
    errno = saved;
}

/* async_writer: the step log's writes, off the loggers' threads. */
static void *async_writer(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&aw.mu);
    for (;;) {
        while (!aw.len && !aw.dropped)
            pthread_cond_wait(&aw.more, &aw.mu);
        char *buf = aw.fill;
        size_t len = aw.len;
        unsigned long dropped = aw.dropped;
        aw.fill = aw.spare;
        aw.spare = buf;
        aw.len = 0;
        aw.dropped = 0;
        aw.writing = 1;
        pthread_mutex_unlock(&aw.mu);
        if (ddl_log_write_delay_ms > 0)
            usleep((useconds_t)ddl_log_write_delay_ms * 1000);
        /* O_APPEND: whole lines among the other processes' */
        for (size_t off = 0; off < len;) {
            ssize_t w = write(log_file, buf + off, len - off);
            if (w <= 0 && errno != EINTR)
                break;
            off += w > 0 ? (size_t)w : 0;
        }
        if (dropped) {
            char note[200];
            int64_t ms = ddl_realtime_ms();
            int k = snprintf(note, sizeof note, "[%lld.%03d] [%d] %s: warning: %lu log lines "
                             "not written here: this file did not keep up\n",
                             (long long)(ms / 1000), (int)(ms % 1000), (int)getpid(),
                             log_component, dropped);
            ssize_t rc = write(log_file, note, (size_t)k);
            (void)rc;
        }
        pthread_mutex_lock(&aw.mu);
        aw.writing = 0;
        if (!aw.len && !aw.dropped)
            pthread_cond_broadcast(&aw.empty);
    }
    return NULL;
}

int ddl_log_step_async(void)
{
    if (log_file < 0 || aw.on)
        return 0;
    pthread_t th;
    pthread_attr_t at;
    if (!(aw.fill = malloc(ASYNC_CAP)) || !(aw.spare = malloc(ASYNC_CAP)) ||
        pthread_attr_init(&at) != 0) {
        free(aw.fill), free(aw.spare);
        aw.fill = aw.spare = NULL;
        return -1;
    }
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &at, async_writer, NULL);
    pthread_attr_destroy(&at);
    if (rc != 0) {
        free(aw.fill), free(aw.spare);
        aw.fill = aw.spare = NULL;
        errno = rc;
        return -1;
    }
    aw.on = 1;
    return 0;
}

int ddl_log_flush(int timeout_ms)
{
    if (!aw.on)
        return 0;
    struct timespec until = ddl_deadline_in(timeout_ms);
    pthread_mutex_lock(&aw.mu);
    int rc = 0;
    while ((aw.len || aw.dropped || aw.writing) && rc == 0)
        rc = pthread_cond_timedwait(&aw.empty, &aw.mu, &until);
    int left = aw.len || aw.dropped || aw.writing;
    pthread_mutex_unlock(&aw.mu);
    return left ? -1 : 0;
}

void ddl_log(ddl_log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ddl_vlog(level, fmt, ap);
    va_end(ap);
}

int ddl_log_open_step(const char *dir, const char *step, const char *host, ddl_error_t *err)
{
    char name[256];
    struct stat st;
    if (snprintf(name, sizeof name, "step-%s.%s.log", step, host) >= (int)sizeof name) {
        errno = ENAMETOOLONG;
        return ddl_errprintf(err, "log file name step-%s.%s.log is too long", step, host);
    }
    for (char *c = name; *c; c++)
        if (*c == '/' || (unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '_';
    int dfd = ddl_dir_open(dir, 1, "log directory", err);
    if (dfd < 0)
        return -1;
    int fd = openat(dfd, name, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                    0600);
    int e = errno;
    close(dfd);
    if (fd < 0) {
        errno = e;
        return ddl_errprintf(err, "cannot open the log file %s/%s: %s%s", dir, name, strerror(e),
                             e == ELOOP ? " (a symbolic link, which ddl does not follow)" : "");
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        st.st_nlink != 1) {
        close(fd);
        errno = EPERM;
        return ddl_errprintf(err, "the log file %s/%s is not a plain file of uid %u with one "
                             "link: remove it", dir, name, (unsigned)geteuid());
    }
    int old = log_file;
    log_file = fd;
    if (old >= 0)
        close(old);
    return 0;
}
