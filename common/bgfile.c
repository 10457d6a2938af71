/* bgfile.c: a file replaced whole by a thread of its own (bgfile.h).  One
 * mutex guards the slot holding the newest content not yet written; the
 * thread takes it, writes it outside the lock, and counts itself and the
 * owner as the two references, so whichever of them finishes last frees
 * the struct (a close may give up on a write stuck in the file system). */
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

#include "bgfile.h"
#include "safefile.h"
#include "util.h"

void (*ddl_bgfile_test_hook)(void);

struct ddl_bgfile {
    pthread_mutex_t mu;
    pthread_cond_t more; /* content put, or closing */
    pthread_cond_t done; /* a write ended */
    int dfd;
    char name[201];
    mode_t mode;
    char *text;  /* the newest content not yet taken by the thread */
    size_t len;
    int writing; /* the thread holds a content */
    int closing;
    int last_errno;
    int refs; /* the owner and the thread */
};

/* replace: text into a new temporary file, renamed over b->name.  0, or
 * an errno value. */
static int replace(const struct ddl_bgfile *b, const char *text, size_t len)
{
    char tmp[256], prefix[210];
    snprintf(prefix, sizeof prefix, ".%s", b->name);
    int fd = ddl_tmp_openat(b->dfd, prefix, tmp, sizeof tmp);
    if (fd < 0)
        return errno;
    int e = ddl_write_full(fd, text, len) < 0 || fchmod(fd, b->mode) < 0 ? errno : 0;
    if (close(fd) < 0 && !e)
        e = errno;
    if (!e && renameat(b->dfd, tmp, b->dfd, b->name) < 0)
        e = errno;
    if (e)
        unlinkat(b->dfd, tmp, 0);
    return e;
}

static void unref(struct ddl_bgfile *b)
{
    int last = --b->refs == 0;
    pthread_mutex_unlock(&b->mu);
    if (!last)
        return;
    free(b->text);
    close(b->dfd);
    pthread_cond_destroy(&b->more);
    pthread_cond_destroy(&b->done);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

static void *writer(void *arg)
{
    struct ddl_bgfile *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->text && !b->closing)
            pthread_cond_wait(&b->more, &b->mu);
        if (!b->text)
            break; /* closing, nothing left */
        char *text = b->text;
        size_t len = b->len;
        b->text = NULL;
        b->writing = 1;
        pthread_mutex_unlock(&b->mu);
        if (ddl_bgfile_test_hook)
            ddl_bgfile_test_hook();
        int e = replace(b, text, len);
        free(text);
        pthread_mutex_lock(&b->mu);
        b->writing = 0;
        b->last_errno = e;
        pthread_cond_broadcast(&b->done);
    }
    unref(b);
    return NULL;
}

ddl_bgfile_t *ddl_bgfile_new(int dfd, const char *name, mode_t mode)
{
    if (strlen(name) >= sizeof ((struct ddl_bgfile *)0)->name) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    struct ddl_bgfile *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->dfd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
    if (b->dfd < 0) {
        free(b);
        return NULL;
    }
    snprintf(b->name, sizeof b->name, "%s", name);
    b->mode = mode;
    b->refs = 2;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->more, NULL);
    pthread_cond_init(&b->done, NULL);
    pthread_t th;
    pthread_attr_t at;
    int rc = pthread_attr_init(&at);
    if (rc == 0) {
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&th, &at, writer, b);
        pthread_attr_destroy(&at);
    }
    if (rc != 0) {
        pthread_mutex_lock(&b->mu);
        b->refs = 1;
        unref(b);
        errno = rc;
        return NULL;
    }
    return b;
}

int ddl_bgfile_put(ddl_bgfile_t *b, char *text, size_t len)
{
    if (!b || !text) {
        free(text);
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&b->mu);
    free(b->text); /* never written: this one is newer */
    b->text = text;
    b->len = len;
    pthread_cond_signal(&b->more);
    pthread_mutex_unlock(&b->mu);
    return 0;
}

int ddl_bgfile_error(ddl_bgfile_t *b)
{
    if (!b)
        return 0;
    pthread_mutex_lock(&b->mu);
    int e = b->last_errno;
    pthread_mutex_unlock(&b->mu);
    return e;
}

int ddl_bgfile_close(ddl_bgfile_t *b, int timeout_ms)
{
    if (!b)
        return 0;
    struct timespec until = ddl_deadline_in(timeout_ms);
    pthread_mutex_lock(&b->mu);
    b->closing = 1;
    pthread_cond_signal(&b->more);
    int rc = 0;
    while ((b->text || b->writing) && rc == 0)
        rc = pthread_cond_timedwait(&b->done, &b->mu, &until);
    int e = b->text || b->writing ? ETIMEDOUT : b->last_errno;
    unref(b);
    if (e) {
        errno = e;
        return -1;
    }
    return 0;
}
