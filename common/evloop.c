/* evloop.c: the small poll(2) event loop of evloop.h (fd watchers, timer
 * watchers, a prepare hook, a stop flag), shared by ddl-agent, ddlrun and
 * ddl-launch.
 *
 * Watchers sit in two arrays in the order they were added.  While a round
 * runs, a removed watcher is only marked dead, so that the arrays the round
 * walks keep their indices; the dead are released at the end of the round.
 * Timers are few (tens; one per agent connection at most): the earliest is
 * found by a scan, and the ones due in a round are sorted by deadline.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "evloop.h"
#include "util.h"

struct ddl_ev_fd {
    ddl_evloop_t *loop;
    int fd;
    short events;
    ddl_ev_fd_cb cb;
    void *arg;
    int dead;
    long slot; /* its entry in this round's pollfd array, -1: none */
};

struct ddl_ev_timer {
    ddl_evloop_t *loop;
    ddl_ev_timer_cb cb;
    void *arg;
    int armed, dead;
    int64_t at, period;
    uint64_t seq; /* when it was last armed: orders equal deadlines */
};

typedef struct {
    ddl_ev_timer_t *t;
    uint64_t seq;
} due_t;

struct ddl_evloop {
    ddl_ev_fd_t **fds;
    size_t nfds, capfds;
    struct pollfd *pfds; /* capfds entries */
    ddl_ev_timer_t **timers;
    size_t ntimers, captimers;
    due_t *due; /* captimers entries */
    size_t ndead;
    int busy; /* inside a round: removals are deferred */
    int stop;
    uint64_t seq;
    ddl_ev_prepare_cb prepare;
    void *prepare_arg;
};

ddl_evloop_t *ddl_evloop_new(void)
{
    return calloc(1, sizeof(ddl_evloop_t));
}

/* compact: release the watchers marked dead, keeping the others' order. */
static void compact(ddl_evloop_t *loop)
{
    if (!loop->ndead)
        return;
    size_t k = 0;
    for (size_t i = 0; i < loop->nfds; i++) {
        if (loop->fds[i]->dead)
            free(loop->fds[i]);
        else
            loop->fds[k++] = loop->fds[i];
    }
    loop->nfds = k;
    k = 0;
    for (size_t i = 0; i < loop->ntimers; i++) {
        if (loop->timers[i]->dead)
            free(loop->timers[i]);
        else
            loop->timers[k++] = loop->timers[i];
    }
    loop->ntimers = k;
    loop->ndead = 0;
}

void ddl_evloop_free(ddl_evloop_t *loop)
{
    if (!loop)
        return;
    for (size_t i = 0; i < loop->nfds; i++)
        free(loop->fds[i]);
    for (size_t i = 0; i < loop->ntimers; i++)
        free(loop->timers[i]);
    free(loop->fds);
    free(loop->pfds);
    free(loop->timers);
    free(loop->due);
    free(loop);
}

void ddl_evloop_set_prepare(ddl_evloop_t *loop, ddl_ev_prepare_cb cb, void *arg)
{
    loop->prepare = cb;
    loop->prepare_arg = arg;
}

void ddl_evloop_stop(ddl_evloop_t *loop)
{
    loop->stop = 1;
}

int ddl_evloop_stopping(const ddl_evloop_t *loop)
{
    return loop->stop;
}

/* ------------------------------------------------------------ fd watchers */

ddl_ev_fd_t *ddl_ev_fd_add(ddl_evloop_t *loop, int fd, short events, ddl_ev_fd_cb cb, void *arg)
{
    if (fd < 0 || !cb) {
        errno = EINVAL;
        return NULL;
    }
    if (loop->nfds == loop->capfds) {
        /* the pollfd array grows with it: a round never allocates */
        size_t cap = loop->capfds ? loop->capfds * 2 : 16;
        ddl_ev_fd_t **nf = realloc(loop->fds, cap * sizeof *nf);
        if (!nf)
            return NULL;
        loop->fds = nf;
        struct pollfd *np = realloc(loop->pfds, cap * sizeof *np);
        if (!np)
            return NULL;
        loop->pfds = np;
        loop->capfds = cap;
    }
    ddl_ev_fd_t *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    *w = (ddl_ev_fd_t){.loop = loop, .fd = fd, .events = events, .cb = cb, .arg = arg, .slot = -1};
    loop->fds[loop->nfds++] = w;
    return w;
}

void ddl_ev_fd_set_events(ddl_ev_fd_t *w, short events)
{
    w->events = events;
}

short ddl_ev_fd_events(const ddl_ev_fd_t *w)
{
    return w->events;
}

void ddl_ev_fd_remove(ddl_ev_fd_t *w)
{
    if (!w || w->dead)
        return;
    ddl_evloop_t *loop = w->loop;
    w->dead = 1;
    w->events = 0;
    loop->ndead++;
    if (!loop->busy)
        compact(loop);
}

/* ------------------------------------------------------------ timers */

ddl_ev_timer_t *ddl_ev_timer_new(ddl_evloop_t *loop, ddl_ev_timer_cb cb, void *arg)
{
    if (!cb) {
        errno = EINVAL;
        return NULL;
    }
    if (loop->ntimers == loop->captimers) {
        size_t cap = loop->captimers ? loop->captimers * 2 : 8;
        ddl_ev_timer_t **nt = realloc(loop->timers, cap * sizeof *nt);
        if (!nt)
            return NULL;
        loop->timers = nt;
        due_t *nd = realloc(loop->due, cap * sizeof *nd);
        if (!nd)
            return NULL;
        loop->due = nd;
        loop->captimers = cap;
    }
    ddl_ev_timer_t *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    *t = (ddl_ev_timer_t){.loop = loop, .cb = cb, .arg = arg};
    loop->timers[loop->ntimers++] = t;
    return t;
}

void ddl_ev_timer_arm_at(ddl_ev_timer_t *t, int64_t at_ms, int64_t period_ms)
{
    if (t->dead)
        return;
    t->at = at_ms;
    t->period = period_ms > 0 ? period_ms : 0;
    t->armed = 1;
    t->seq = ++t->loop->seq;
}

void ddl_ev_timer_arm(ddl_ev_timer_t *t, int64_t delay_ms, int64_t period_ms)
{
    ddl_ev_timer_arm_at(t, ddl_now_ms() + (delay_ms > 0 ? delay_ms : 0), period_ms);
}

void ddl_ev_timer_cancel(ddl_ev_timer_t *t)
{
    t->armed = 0;
}

int ddl_ev_timer_armed(const ddl_ev_timer_t *t)
{
    return t->armed;
}

int64_t ddl_ev_timer_due(const ddl_ev_timer_t *t)
{
    return t->at;
}

void ddl_ev_timer_free(ddl_ev_timer_t *t)
{
    if (!t || t->dead)
        return;
    ddl_evloop_t *loop = t->loop;
    t->dead = 1;
    t->armed = 0;
    loop->ndead++;
    if (!loop->busy)
        compact(loop);
}

static int due_cmp(const void *x, const void *y)
{
    const due_t *a = x, *b = y;
    if (a->t->at != b->t->at)
        return a->t->at < b->t->at ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* run_timers: the timers due now, earliest first; one re-armed, cancelled
 * or freed by an earlier callback of the round waits for its new time. */
static void run_timers(ddl_evloop_t *loop)
{
    int64_t now = ddl_now_ms();
    size_t n = 0;
    for (size_t i = 0; i < loop->ntimers; i++) {
        ddl_ev_timer_t *t = loop->timers[i];
        if (t->armed && !t->dead && t->at <= now)
            loop->due[n++] = (due_t){t, t->seq};
    }
    if (n > 1)
        qsort(loop->due, n, sizeof *loop->due, due_cmp);
    for (size_t i = 0; i < n; i++) {
        ddl_ev_timer_t *t = loop->due[i].t;
        if (!t->armed || t->dead || t->seq != loop->due[i].seq)
            continue;
        if (t->period) {
            t->at = ddl_now_ms() + t->period;
            t->seq = ++loop->seq;
        } else {
            t->armed = 0;
        }
        t->cb(loop, t, t->arg);
    }
}

/* ------------------------------------------------------------ rounds */

/* round: one round (evloop.h); 1 if it ended at the stop flag before
 * polling (check_stop), 0, or -1 (errno) if poll failed. */
static int round_(ddl_evloop_t *loop, int max_wait_ms, int check_stop)
{
    loop->busy = 1;
    if (loop->prepare)
        loop->prepare(loop, loop->prepare_arg);
    if (check_stop && loop->stop) {
        loop->busy = 0;
        compact(loop);
        return 1;
    }
    nfds_t n = 0;
    size_t nwatch = loop->nfds;
    for (size_t i = 0; i < nwatch; i++) {
        ddl_ev_fd_t *w = loop->fds[i];
        w->slot = -1;
        if (w->dead || !w->events)
            continue;
        loop->pfds[n] = (struct pollfd){.fd = w->fd, .events = w->events};
        w->slot = (long)n++;
    }
    int64_t wait = max_wait_ms < 0 ? -1 : max_wait_ms, now = ddl_now_ms();
    for (size_t i = 0; i < loop->ntimers; i++) {
        const ddl_ev_timer_t *t = loop->timers[i];
        if (!t->armed || t->dead)
            continue;
        int64_t left = t->at - now;
        left = left < 0 ? 0 : left;
        wait = wait < 0 || left < wait ? left : wait;
    }
    int rc = poll(loop->pfds, n, wait > INT_MAX ? INT_MAX : (int)wait);
    if (rc < 0 && errno != EINTR) {
        int e = errno;
        loop->busy = 0;
        compact(loop);
        errno = e;
        return -1;
    }
    for (size_t i = 0; rc > 0 && i < nwatch; i++) {
        ddl_ev_fd_t *w = loop->fds[i];
        if (w->dead || w->slot < 0)
            continue;
        short re = loop->pfds[w->slot].revents & (w->events | POLLERR | POLLHUP | POLLNVAL);
        if (re && w->events)
            w->cb(loop, w, w->fd, re, w->arg);
    }
    run_timers(loop);
    loop->busy = 0;
    compact(loop);
    return 0;
}

int ddl_evloop_run_once(ddl_evloop_t *loop, int max_wait_ms)
{
    return round_(loop, max_wait_ms, 0) < 0 ? -1 : 0;
}

int ddl_evloop_run(ddl_evloop_t *loop)
{
    loop->stop = 0;
    for (;;) {
        int rc = round_(loop, -1, 1);
        if (rc < 0)
            return -1;
        if (rc > 0) {
            loop->stop = 0;
            return 0;
        }
    }
}
