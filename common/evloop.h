/* evloop.h: a small poll(2)-based event loop: fd watchers, timer watchers
 * and one prepare hook, run until a stop flag is set.  ddl-agent, ddlrun
 * and ddl-launch each run their main loop on it.
 *
 * Model.  One round of the loop:
 *   1. the prepare hook runs (if set): the place for work that depends on
 *      the state of everything (flushing queued output, re-arming timers
 *      from deadlines kept elsewhere, exit conditions);
 *   2. if ddl_evloop_stop() was called (in this round or an earlier one of
 *      this run), ddl_evloop_run() returns;
 *   3. poll(2) waits on every fd watcher with events, until the earliest
 *      armed timer is due (no timer armed: no limit);
 *   4. fd callbacks run, in the order their watchers were added, for each
 *      watcher that poll reported (revents limited to its events and
 *      POLLERR, POLLHUP, POLLNVAL);
 *   5. the timers due at that moment run, earliest deadline first (equal
 *      deadlines in the order they were armed).
 * A stop requested in step 4 or 5 therefore still lets the rest of the
 * round and the next prepare hook run: what was read before a signal is
 * handled before the loop ends.
 *
 * Watchers.  The loop allocates and owns every watcher; a watcher lives
 * until it is removed (ddl_ev_fd_remove, ddl_ev_timer_free) or the loop is
 * freed.  Removing a watcher from any callback (its own included) is
 * safe: it gets no further callback, and its memory is released once the
 * loop is no longer dispatching.  A watcher added during a round is first
 * polled (fd) or considered (timer) in the next round.  The loop never
 * opens, reads, writes or closes a descriptor itself: the owner of an fd
 * removes its watcher before closing it.
 *
 * Time: milliseconds of ddl_now_ms() (CLOCK_MONOTONIC).  A periodic timer
 * is re-armed, when it fires, to the moment it fired plus its period (no
 * burst of catch-up calls after a long callback).
 *
 * Signals: block them and watch a signalfd, e.g.
 *     sigprocmask(SIG_BLOCK, &mask, NULL);
 *     int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
 *     ddl_ev_fd_add(loop, sfd, POLLIN, on_signal, state);
 * and read struct signalfd_siginfo records in on_signal until EAGAIN.  The
 * loop itself installs no handler and changes no signal mask.
 *
 * Blocking: only ddl_evloop_run() and ddl_evloop_run_once() block (in
 * poll); callbacks should not.  Thread-safety: none; a loop and its
 * watchers belong to the one thread that runs it, and no function here may
 * be called from a signal handler.  Errors: functions that can fail return
 * NULL or -1 with errno set (ENOMEM, EINVAL); they log nothing.
 */
#ifndef DDL_EVLOOP_H
#define DDL_EVLOOP_H

#include <poll.h>
#include <stdint.h>

typedef struct ddl_evloop ddl_evloop_t;
typedef struct ddl_ev_fd ddl_ev_fd_t;
typedef struct ddl_ev_timer ddl_ev_timer_t;

/* An fd watcher's callback: revents as poll(2) reported them (limited to
 * the watcher's events and POLLERR, POLLHUP, POLLNVAL). */
typedef void (*ddl_ev_fd_cb)(ddl_evloop_t *loop, ddl_ev_fd_t *w, int fd, short revents,
                             void *arg);
/* A timer's callback; the timer is already disarmed (one-shot) or re-armed
 * (periodic) when it runs, so the callback may re-arm, cancel or free it. */
typedef void (*ddl_ev_timer_cb)(ddl_evloop_t *loop, ddl_ev_timer_t *t, void *arg);
/* The prepare hook (see the model above). */
typedef void (*ddl_ev_prepare_cb)(ddl_evloop_t *loop, void *arg);

/* ddl_evloop_new: an empty loop; NULL (ENOMEM).  Free with ddl_evloop_free. */
ddl_evloop_t *ddl_evloop_new(void);

/* ddl_evloop_free: frees the loop and every watcher still in it, without
 * calling any callback and without closing any fd.  NULL is ignored.  Not
 * from inside a callback of that loop. */
void ddl_evloop_free(ddl_evloop_t *loop);

/* ddl_evloop_set_prepare: the hook run at the start of every round (NULL:
 * none); arg is passed to it and stays the caller's. */
void ddl_evloop_set_prepare(ddl_evloop_t *loop, ddl_ev_prepare_cb cb, void *arg);

/* ddl_evloop_run: rounds until ddl_evloop_stop() is called; clears a stop
 * requested before it was entered.  Returns 0 once stopped, -1 if poll
 * failed (errno; EINTR is not a failure: it makes a round without fd
 * events).  Blocks.  Not re-entrant: not from one of its callbacks. */
int ddl_evloop_run(ddl_evloop_t *loop);

/* ddl_evloop_run_once: one round, waiting at most max_wait_ms for fds
 * (-1: until a timer is due, or forever without one).  0, or -1 as
 * ddl_evloop_run.  It does not look at (or clear) the stop flag. */
int ddl_evloop_run_once(ddl_evloop_t *loop, int max_wait_ms);

/* ddl_evloop_stop: ddl_evloop_run returns after the current round's
 * remaining callbacks and the next prepare hook (see above). */
void ddl_evloop_stop(ddl_evloop_t *loop);

/* ddl_evloop_stopping: whether a stop was requested and not yet honoured. */
int ddl_evloop_stopping(const ddl_evloop_t *loop);

/* ddl_ev_fd_add: watch fd (>= 0) for events (POLLIN, POLLOUT...; 0: the
 * watcher is kept but fd is not polled, not even for errors); cb(arg) runs
 * when poll reports it.  Several watchers of one fd are allowed.  NULL with
 * errno EINVAL (fd < 0, no cb) or ENOMEM. */
ddl_ev_fd_t *ddl_ev_fd_add(ddl_evloop_t *loop, int fd, short events, ddl_ev_fd_cb cb, void *arg);

/* ddl_ev_fd_set_events: what to poll for from the next round on (0: not
 * polled).  A report already received this round is still delivered if it
 * matches the new events. */
void ddl_ev_fd_set_events(ddl_ev_fd_t *w, short events);

/* ddl_ev_fd_events: the events being watched. */
short ddl_ev_fd_events(const ddl_ev_fd_t *w);

/* ddl_ev_fd_remove: stop watching (see "Watchers" above); the fd stays
 * open.  NULL is ignored.  Safe inside any callback of the loop. */
void ddl_ev_fd_remove(ddl_ev_fd_t *w);

/* ddl_ev_timer_new: a disarmed timer whose callback is cb(arg); NULL
 * (EINVAL: no cb; ENOMEM). */
ddl_ev_timer_t *ddl_ev_timer_new(ddl_evloop_t *loop, ddl_ev_timer_cb cb, void *arg);

/* ddl_ev_timer_arm: due delay_ms from now (< 0 counts as 0), then every
 * period_ms if period_ms > 0 (0: once).  Re-arming an armed timer moves
 * it. */
void ddl_ev_timer_arm(ddl_ev_timer_t *t, int64_t delay_ms, int64_t period_ms);

/* ddl_ev_timer_arm_at: due at ddl_now_ms() time at_ms (in the past: in
 * the next round), then every period_ms if > 0. */
void ddl_ev_timer_arm_at(ddl_ev_timer_t *t, int64_t at_ms, int64_t period_ms);

/* ddl_ev_timer_cancel: disarm (it keeps its callback; arm it again
 * later).  Safe inside any callback, also for a timer due in this round:
 * it does not run. */
void ddl_ev_timer_cancel(ddl_ev_timer_t *t);

/* ddl_ev_timer_armed: 1 if armed, 0 if not. */
int ddl_ev_timer_armed(const ddl_ev_timer_t *t);

/* ddl_ev_timer_due: the ddl_now_ms() time it is due at (armed timers). */
int64_t ddl_ev_timer_due(const ddl_ev_timer_t *t);

/* ddl_ev_timer_free: cancel and release the timer (see "Watchers").  NULL
 * is ignored.  Safe inside any callback, its own included. */
void ddl_ev_timer_free(ddl_ev_timer_t *t);

#endif
