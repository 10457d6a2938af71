/* t_evloop: the event loop of common/evloop.c: fd watchers on pipes and
 * socketpairs (readiness, events changed, callback order, removal and
 * addition inside callbacks), timers (order, one-shot and periodic,
 * re-arming, cancelling and freeing inside callbacks, the wait they bound),
 * the prepare hook, the stop flag and a signalfd. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "evloop.h"
#include "util.h"
#include "../tap.h"

/* a log of callbacks: "a", "b"... in the order they ran */
static char order[64];

/* put: one byte into fd */
static void put(int fd)
{
    if (write(fd, "x", 1) != 1)
        BAIL_OUT("write: %s", strerror(errno));
}

static void note(const char *what)
{
    size_t n = strlen(order);
    snprintf(order + n, sizeof order - n, "%s", what);
}

typedef struct {
    const char *name;
    int calls;
    short last;
    ddl_ev_fd_t *other;  /* removed by this callback, if set */
    int remove_self;
    int drain;           /* read what is there */
    int stop;
} fdw_t;

static void on_fd(ddl_evloop_t *loop, ddl_ev_fd_t *w, int fd, short re, void *arg)
{
    fdw_t *s = arg;
    s->calls++;
    s->last = re;
    note(s->name);
    if (s->drain) {
        char buf[64];
        while (read(fd, buf, sizeof buf) > 0)
            ;
    }
    if (s->other) {
        ddl_ev_fd_remove(s->other);
        s->other = NULL;
    }
    if (s->remove_self)
        ddl_ev_fd_remove(w);
    if (s->stop)
        ddl_evloop_stop(loop);
}

static void test_fds(void)
{
    ddl_evloop_t *loop = ddl_evloop_new();
    int p[2], q[2], sp[2];
    if (!loop || pipe2(p, O_NONBLOCK) < 0 || pipe2(q, O_NONBLOCK) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) < 0)
        BAIL_OUT("cannot set up: %s", strerror(errno));
    errno = 0;
    ok(!ddl_ev_fd_add(loop, -1, POLLIN, on_fd, NULL) && errno == EINVAL, "fd -1 is refused (EINVAL)");

    ddl_evloop_free(loop);
    loop = ddl_evloop_new();
    fdw_t a = {.name = "a", .drain = 1}, b = {.name = "b", .drain = 1};
    ddl_ev_fd_t *wa = ddl_ev_fd_add(loop, p[0], POLLIN, on_fd, &a);
    ddl_ev_fd_t *wb = ddl_ev_fd_add(loop, q[0], POLLIN, on_fd, &b);
    ok(wa && wb, "two pipe watchers added");
    ddl_evloop_run_once(loop, 0);
    ok(a.calls == 0 && b.calls == 0, "nothing to read: no callback");
    put(q[1]);
    put(p[1]);
    order[0] = '\0';
    ddl_evloop_run_once(loop, 1000);
    ok(a.calls == 1 && b.calls == 1 && (a.last & POLLIN), "both readable: each called once, POLLIN");
    is_str(order, "ab", "callbacks run in the order the watchers were added");

    /* removal of a ready watcher by an earlier callback of the round */
    put(q[1]);
    put(p[1]);
    a.other = wb;
    order[0] = '\0';
    ddl_evloop_run_once(loop, 1000);
    ok(a.calls == 2 && b.calls == 1, "a watcher removed by an earlier callback is not called");
    put(q[1]);
    ddl_evloop_run_once(loop, 0);
    is(b.calls, 1, "nor later");

    /* a watcher removes itself; one added in a callback waits a round */
    put(p[1]);
    a.remove_self = 1;
    ddl_evloop_run_once(loop, 1000);
    put(p[1]);
    ddl_evloop_run_once(loop, 0);
    is(a.calls, 3, "a watcher that removed itself is not called again");
    char c;
    while (read(q[0], &c, 1) == 1)
        ;

    /* a socketpair: POLLOUT when asked for, nothing with no events, POLLHUP */
    fdw_t s = {.name = "s"};
    ddl_ev_fd_t *ws = ddl_ev_fd_add(loop, sp[0], POLLIN, on_fd, &s);
    ddl_evloop_run_once(loop, 0);
    is(s.calls, 0, "socket: not readable, not watched for writing: no callback");
    ddl_ev_fd_set_events(ws, POLLIN | POLLOUT);
    ddl_evloop_run_once(loop, 1000);
    ok(s.calls == 1 && s.last == POLLOUT, "POLLOUT once asked for (got 0x%x)", s.last);
    ddl_ev_fd_set_events(ws, 0);
    put(sp[1]);
    ddl_evloop_run_once(loop, 0);
    ok(s.calls == 1 && ddl_ev_fd_events(ws) == 0, "no events: not polled, even when readable");
    ddl_ev_fd_set_events(ws, POLLIN);
    close(sp[1]);
    s.drain = 1;
    ddl_evloop_run_once(loop, 1000);
    ok(s.calls == 2 && (s.last & POLLIN), "readable again with POLLIN");
    ddl_evloop_run_once(loop, 1000);
    ok(s.calls == 3 && (s.last & (POLLHUP | POLLIN)), "the peer's close is reported (0x%x)",
       s.last);
    ddl_ev_fd_remove(ws);
    ddl_evloop_free(loop);
    close(p[0]);
    close(p[1]);
    close(q[0]);
    close(q[1]);
    close(sp[0]);
}

/* a watcher added inside a callback is polled from the next round on */
typedef struct {
    int fd;
    fdw_t late;
    ddl_ev_fd_t *added;
} adder_t;

static void on_add(ddl_evloop_t *loop, ddl_ev_fd_t *w, int fd, short re, void *arg)
{
    adder_t *ad = arg;
    (void)fd;
    (void)re;
    if (!ad->added)
        ad->added = ddl_ev_fd_add(loop, ad->fd, POLLIN, on_fd, &ad->late);
    ddl_ev_fd_remove(w);
}

static void test_add_in_callback(void)
{
    ddl_evloop_t *loop = ddl_evloop_new();
    int p[2];
    if (!loop || pipe2(p, O_NONBLOCK) < 0)
        BAIL_OUT("cannot set up: %s", strerror(errno));
    put(p[1]);
    adder_t ad = {.fd = p[0], .late = {.name = "l"}};
    ddl_ev_fd_add(loop, p[0], POLLIN, on_add, &ad);
    ddl_evloop_run_once(loop, 1000);
    ok(ad.added && ad.late.calls == 0, "a watcher added in a callback is not called that round");
    ddl_evloop_run_once(loop, 1000);
    is(ad.late.calls, 1, "it is called in the next round");
    ddl_evloop_free(loop);
    close(p[0]);
    close(p[1]);
}

/* ------------------------------------------------------------ timers */

typedef struct {
    const char *name;
    int calls;
    int rearm;               /* re-arm itself this many more times */
    ddl_ev_timer_t *cancel;  /* cancelled by this callback */
    ddl_ev_timer_t *freeit;  /* freed by this callback */
    int free_self, stop, cancel_self_after;
} tw_t;

static void on_timer(ddl_evloop_t *loop, ddl_ev_timer_t *t, void *arg)
{
    tw_t *s = arg;
    s->calls++;
    note(s->name);
    if (s->rearm > 0) {
        s->rearm--;
        ok(!ddl_ev_timer_armed(t), "a one-shot timer is disarmed when its callback runs");
        ddl_ev_timer_arm(t, 5, 0);
    }
    if (s->cancel) {
        ddl_ev_timer_cancel(s->cancel);
        s->cancel = NULL;
    }
    if (s->freeit) {
        ddl_ev_timer_free(s->freeit);
        s->freeit = NULL;
    }
    if (s->cancel_self_after && s->calls >= s->cancel_self_after)
        ddl_ev_timer_cancel(t);
    if (s->free_self)
        ddl_ev_timer_free(t);
    if (s->stop)
        ddl_evloop_stop(loop);
}

static void test_timer_order(void)
{
    ddl_evloop_t *loop = ddl_evloop_new();
    tw_t a = {.name = "a"}, b = {.name = "b"}, c = {.name = "c"}, d = {.name = "d"};
    ddl_ev_timer_t *ta = ddl_ev_timer_new(loop, on_timer, &a);
    ddl_ev_timer_t *tb = ddl_ev_timer_new(loop, on_timer, &b);
    ddl_ev_timer_t *tc = ddl_ev_timer_new(loop, on_timer, &c);
    ddl_ev_timer_t *td = ddl_ev_timer_new(loop, on_timer, &d);
    ok(ta && tb && tc && td && !ddl_ev_timer_armed(ta), "four timers, created disarmed");
    int64_t now = ddl_now_ms();
    ddl_ev_timer_arm_at(ta, now + 30, 0);
    ddl_ev_timer_arm_at(tb, now + 10, 0);
    ddl_ev_timer_arm_at(tc, now + 20, 0);
    ddl_ev_timer_arm_at(td, now + 20, 0); /* same deadline as c, armed after it */
    ok(ddl_ev_timer_armed(ta) && ddl_ev_timer_due(ta) == now + 30, "armed, due when asked");
    order[0] = '\0';
    usleep(40 * 1000); /* all due in one round */
    ddl_evloop_run_once(loop, 0);
    is_str(order, "bcda", "due timers run earliest first, equal deadlines in arming order");
    ok(!ddl_ev_timer_armed(ta) && a.calls == 1, "one-shot: once, then disarmed");

    /* in separate rounds: the loop waits for each */
    order[0] = '\0';
    now = ddl_now_ms();
    ddl_ev_timer_arm_at(ta, now + 30, 0);
    ddl_ev_timer_arm_at(tb, now + 10, 0);
    ddl_ev_timer_arm_at(tc, now + 20, 0);
    for (int i = 0; i < 3; i++)
        ddl_evloop_run_once(loop, -1);
    int64_t took = ddl_now_ms() - now;
    is_str(order, "bca", "three rounds, one timer each, in order");
    ok(took >= 29 && took < 1000, "the rounds waited for the timers (%lld ms)", (long long)took);

    /* re-arming moves a timer; a cancelled or freed due timer does not run */
    now = ddl_now_ms();
    ddl_ev_timer_arm_at(ta, now + 5, 0);
    ddl_ev_timer_arm_at(ta, now + 60, 0);
    ddl_evloop_run_once(loop, 30);
    is(a.calls, 2, "a timer re-armed later does not fire at its first time");
    ddl_ev_timer_cancel(ta);
    order[0] = '\0';
    b.cancel = tc;
    b.freeit = td;
    ddl_ev_timer_arm_at(tb, now, 0);
    ddl_ev_timer_arm_at(tc, now + 1, 0);
    ddl_ev_timer_arm_at(td, now + 2, 0);
    usleep(5000);
    ddl_evloop_run_once(loop, 0);
    is_str(order, "b", "timers cancelled or freed by an earlier callback of the round do not run");
    ok(!ddl_ev_timer_armed(tc), "the cancelled one stays disarmed");
    ddl_ev_timer_arm(tc, 0, 0);
    ddl_evloop_run_once(loop, 100);
    is(c.calls, 3, "and runs once armed again");
    ddl_evloop_free(loop);
}

static void test_timer_rearm(void)
{
    ddl_evloop_t *loop = ddl_evloop_new();
    tw_t a = {.name = "a", .rearm = 3}, p = {.name = "p", .cancel_self_after = 4},
         f = {.name = "f", .free_self = 1};
    ddl_ev_timer_t *ta = ddl_ev_timer_new(loop, on_timer, &a);
    ddl_ev_timer_t *tp = ddl_ev_timer_new(loop, on_timer, &p);
    ddl_ev_timer_t *tf = ddl_ev_timer_new(loop, on_timer, &f);
    ddl_ev_timer_arm(ta, 0, 0);
    ddl_ev_timer_arm(tp, 10, 10);
    ddl_ev_timer_arm(tf, 0, 5);
    int64_t t0 = ddl_now_ms();
    while (ddl_now_ms() - t0 < 120)
        ddl_evloop_run_once(loop, 200);
    is(a.calls, 4, "a one-shot timer re-armed by its callback three times ran four times");
    is(p.calls, 4, "a periodic timer ran until its callback cancelled it (4 times)");
    ok(!ddl_ev_timer_armed(tp), "cancelled from its own callback: disarmed");
    is(f.calls, 1, "a periodic timer that freed itself in its callback ran once");
    ddl_evloop_free(loop);
}

/* ------------------------------------------------------------ stop, prepare */

typedef struct {
    int calls;
    int stop_at; /* stop in this call, 0: never */
} prep_t;

static void on_prepare(ddl_evloop_t *loop, void *arg)
{
    prep_t *p = arg;
    if (++p->calls == p->stop_at)
        ddl_evloop_stop(loop);
}

static void test_stop(void)
{
    ddl_evloop_t *loop = ddl_evloop_new();
    prep_t pr = {.stop_at = 3};
    tw_t t = {.name = "t"};
    ddl_evloop_set_prepare(loop, on_prepare, &pr);
    ddl_ev_timer_arm(ddl_ev_timer_new(loop, on_timer, &t), 1, 1);
    int rc = ddl_evloop_run(loop);
    ok(rc == 0 && pr.calls == 3 && t.calls >= 1 && t.calls <= 2,
       "stop in the prepare hook: run returns before polling (rc %d, prepare %d, timer %d)", rc,
       pr.calls, t.calls);
    ok(!ddl_evloop_stopping(loop), "the stop flag is cleared once honoured");

    /* a stop from an fd callback: the round's timers and one more prepare run */
    ddl_evloop_free(loop);
    loop = ddl_evloop_new();
    int p[2];
    if (!loop || pipe2(p, O_NONBLOCK) < 0)
        BAIL_OUT("cannot set up: %s", strerror(errno));
    pr = (prep_t){0};
    ddl_evloop_set_prepare(loop, on_prepare, &pr);
    fdw_t s = {.name = "s", .stop = 1, .drain = 1};
    tw_t late = {.name = "t"};
    ddl_ev_fd_add(loop, p[0], POLLIN, on_fd, &s);
    ddl_ev_timer_t *tt = ddl_ev_timer_new(loop, on_timer, &late);
    put(p[1]);
    ddl_ev_timer_arm(tt, 0, 0);
    usleep(2000);
    order[0] = '\0';
    rc = ddl_evloop_run(loop);
    ok(rc == 0 && pr.calls == 2, "a stop from an fd callback ends the run (prepare ran %d times)",
       pr.calls);
    is_str(order, "st", "after the rest of its round (the due timer ran)");

    /* a stop requested before run is not carried into it */
    ddl_evloop_stop(loop);
    pr = (prep_t){.stop_at = 2};
    ddl_ev_timer_arm(tt, 0, 0);
    rc = ddl_evloop_run(loop);
    ok(rc == 0 && pr.calls == 2, "a stop requested before run is cleared (prepare %d)", pr.calls);
    ddl_evloop_free(loop);
    close(p[0]);
    close(p[1]);
}

/* ------------------------------------------------------------ signalfd */

static void on_signal(ddl_evloop_t *loop, ddl_ev_fd_t *w, int fd, short re, void *arg)
{
    struct signalfd_siginfo si;
    int *got = arg;
    (void)w;
    (void)re;
    while (read(fd, &si, sizeof si) == sizeof si)
        *got = (int)si.ssi_signo;
    ddl_evloop_stop(loop);
}

static void on_raise(ddl_evloop_t *loop, ddl_ev_timer_t *t, void *arg)
{
    (void)loop;
    (void)t;
    (void)arg;
    raise(SIGUSR1);
}

static void test_signalfd(void)
{
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGUSR1);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    ddl_evloop_t *loop = ddl_evloop_new();
    if (sfd < 0 || !loop)
        BAIL_OUT("signalfd: %s", strerror(errno));
    int got = 0;
    ddl_ev_fd_add(loop, sfd, POLLIN, on_signal, &got);
    ddl_ev_timer_arm(ddl_ev_timer_new(loop, on_raise, NULL), 10, 0);
    int64_t t0 = ddl_now_ms();
    int rc = ddl_evloop_run(loop);
    ok(rc == 0 && got == SIGUSR1, "a blocked SIGUSR1 arrives through a signalfd watcher");
    ok(ddl_now_ms() - t0 < 1000, "at once");
    ddl_evloop_free(loop);
    close(sfd);
}

int main(void)
{
    plan(NO_PLAN);
    test_fds();
    test_add_in_callback();
    test_timer_order();
    test_timer_rearm();
    test_stop();
    test_signalfd();
    return done_testing();
}
