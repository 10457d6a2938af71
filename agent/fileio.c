/* fileio.c: the agent's reads of DIR/latest and writes of failure
 * summaries on threads of their own (fileio.h), so that a slow shared
 * file system delays an answer, never the event loop.  One mutex and one
 * condition variable (CLOCK_MONOTONIC) guard the little state shared with
 * those threads.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fileio.h"
#include "proto.h"
#include "util.h"

int ddl_fio_read_delay_ms;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static pthread_once_t cv_once = PTHREAD_ONCE_INIT;

static void cv_init(void)
{
    pthread_condattr_t at;
    pthread_condattr_init(&at);
    pthread_condattr_setclock(&at, CLOCK_MONOTONIC);
    pthread_cond_init(&cv, &at);
    pthread_condattr_destroy(&at);
}

/* wait_until: wait on cv (mu held) until the monotonic time at_ms. */
static void wait_until(int64_t at_ms)
{
    struct timespec ts = {.tv_sec = at_ms / 1000, .tv_nsec = (at_ms % 1000) * 1000000};
    pthread_cond_timedwait(&cv, &mu, &ts);
}

/* spawn: fn(arg) on a detached thread; 0 or -1 with errno. */
static int spawn(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &at, fn, arg);
    pthread_attr_destroy(&at);
    if (rc) {
        errno = rc;
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ DIR/latest */

/* read_latest: libddl's DIR/latest holds the step number of the latest
 * committed checkpoint; its mtime is the commit's time (CLOCK_REALTIME ms). */
static int read_latest(const char *dir, int64_t *step, int64_t *mtime_ms)
{
    char path[4096], buf[32];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/latest", dir) >= (int)sizeof path)
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -1;
    ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, buf, sizeof buf - 1) : -1;
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || end == buf || v < 0 || (*end && *end != '\n'))
        return -1;
    *step = v;
    *mtime_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
    return 0;
}

static struct {
    char dir[4096];     /* the directory of the answer below */
    int running;        /* a read is under way */
    int64_t started_ms; /* since */
    uint64_t asked, answered;
    int have; /* an answer for dir has come */
    int rc;
    int64_t step, mtime_ms;
} lt;

static void *latest_thread(void *arg)
{
    char *dir = arg;
    int64_t step = -1, mtime = 0;
    if (ddl_fio_read_delay_ms > 0)
        usleep((useconds_t)ddl_fio_read_delay_ms * 1000);
    int rc = read_latest(dir, &step, &mtime);
    pthread_mutex_lock(&mu);
    if (strcmp(dir, lt.dir) == 0) {
        lt.have = 1;
        lt.rc = rc;
        lt.step = step;
        lt.mtime_ms = mtime;
    }
    lt.answered = lt.asked;
    lt.running = 0;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    free(dir);
    return NULL;
}

int ddl_fio_latest(const char *dir, int64_t *step, uint32_t *age_ms, int *stale)
{
    if (stale)
        *stale = 0;
    if (!dir || !*dir || strlen(dir) >= sizeof lt.dir)
        return -1;
    pthread_once(&cv_once, cv_init);
    pthread_mutex_lock(&mu);
    if (strcmp(dir, lt.dir) != 0) {
        snprintf(lt.dir, sizeof lt.dir, "%s", dir);
        lt.have = 0;
    }
    if (!lt.running) {
        char *copy = strdup(dir);
        if (copy && spawn(latest_thread, copy) == 0) {
            lt.running = 1;
            lt.started_ms = ddl_now_ms();
            lt.asked++;
        } else { /* no thread: read here */
            free(copy);
            int64_t s = -1, m = 0;
            lt.rc = read_latest(dir, &s, &m);
            lt.step = s;
            lt.mtime_ms = m;
            lt.have = 1;
        }
    }
    /* a read stuck for longer than the wait is not waited for again */
    while (lt.running && lt.answered < lt.asked && ddl_now_ms() < lt.started_ms + DDL_FILEIO_WAIT_MS)
        wait_until(lt.started_ms + DDL_FILEIO_WAIT_MS);
    if (stale && lt.running)
        *stale = 1;
    int rc = lt.have && lt.rc == 0 ? 0 : -1;
    if (rc == 0) {
        *step = lt.step;
        int64_t ms = ddl_realtime_ms() - lt.mtime_ms;
        *age_ms = ms < 0                             ? 0
                  : ms >= (int64_t)DDL_HEARD_NEVER ? DDL_HEARD_NEVER - 1
                                                   : (uint32_t)ms;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* ------------------------------------------------------ failure summaries */

#define MAX_ERRS 4

static struct {
    int running;
    char errs[MAX_ERRS][sizeof(ddl_error_t)];
    int nerrs;
} sm;

typedef struct {
    char *dir, *step, *host, *text, *decision;
    ddl_fail_summary_t s;
} sumjob_t;

static void sumjob_free(sumjob_t *j)
{
    free(j->dir);
    free(j->step);
    free(j->host);
    free(j->text);
    free(j->decision);
    free(j);
}

static void *summary_thread(void *arg)
{
    sumjob_t *j = arg;
    ddl_error_t err;
    int rc = ddl_fail_summary_write(j->dir, &j->s, &err);
    pthread_mutex_lock(&mu);
    if (rc < 0 && sm.nerrs < MAX_ERRS)
        snprintf(sm.errs[sm.nerrs++], sizeof sm.errs[0], "%s", err.text);
    sm.running--;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    sumjob_free(j);
    return NULL;
}

/* dup_or_null: a copy of s (NULL stays NULL); *bad set when out of memory */
static char *dup_or_null(const char *s, int *bad)
{
    char *d = s ? strdup(s) : NULL;
    if (s && !d)
        *bad = 1;
    return d;
}

int ddl_fio_summary(const char *dir, const ddl_fail_summary_t *s)
{
    pthread_once(&cv_once, cv_init);
    int bad = 0;
    sumjob_t *j = calloc(1, sizeof *j);
    if (j) {
        j->s = *s;
        j->s.step = j->step = dup_or_null(s->step, &bad);
        j->s.host = j->host = dup_or_null(s->host, &bad);
        j->s.text = j->text = dup_or_null(s->text, &bad);
        j->s.decision = j->decision = dup_or_null(s->decision, &bad);
        j->dir = dup_or_null(dir, &bad);
    }
    if (j && !bad) {
        pthread_mutex_lock(&mu);
        sm.running++;
        pthread_mutex_unlock(&mu);
        if (spawn(summary_thread, j) == 0)
            return 0;
        pthread_mutex_lock(&mu);
        sm.running--;
        pthread_mutex_unlock(&mu);
    }
    int e = j && !bad ? errno : ENOMEM;
    if (j)
        sumjob_free(j);
    ddl_error_t err;
    if (ddl_fail_summary_write(dir, s, &err) < 0) { /* blocking, as a last resort */
        pthread_mutex_lock(&mu);
        if (sm.nerrs < MAX_ERRS)
            snprintf(sm.errs[sm.nerrs++], sizeof sm.errs[0], "%s", err.text);
        pthread_mutex_unlock(&mu);
    }
    errno = e;
    return -1;
}

int ddl_fio_drain(int timeout_ms)
{
    pthread_once(&cv_once, cv_init);
    int64_t until = ddl_now_ms() + timeout_ms;
    pthread_mutex_lock(&mu);
    while (sm.running > 0 && ddl_now_ms() < until)
        wait_until(until);
    int left = sm.running;
    pthread_mutex_unlock(&mu);
    return left;
}

void ddl_fio_errors(void (*log)(const char *text))
{
    char errs[MAX_ERRS][sizeof(ddl_error_t)];
    pthread_mutex_lock(&mu);
    int n = sm.nerrs;
    memcpy(errs, sm.errs, sizeof errs);
    sm.nerrs = 0;
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < n; i++)
        log(errs[i]);
}
