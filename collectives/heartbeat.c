/* heartbeat.c: progress heartbeats from the worker to its supervisor, so
 * that ddl-launch can tell a hung worker from a busy one.
 *
 * When a hang timeout is set, ddl-launch gives the worker the write end of
 * a pipe in DDL_HEARTBEAT_FD, or (the first worker of a Slurm task) the name
 * of a FIFO in DDL_HEARTBEAT_PATH.  libddl writes a 32-byte record (collectives
 * started so far, the last step given to ddl_heartbeat()) at most every
 * BEAT_MIN_MS, from every collective, from the wait loop of a transfer (a
 * rank that waits for a slow or stopped peer is alive, and must not be
 * taken for the culprit), and from ddl_heartbeat().  The pipe is
 * non-blocking: when it is full a record is dropped, never waited for.
 *
 * For the agents' straggler detection each record also carries, as of the
 * last ddl_heartbeat() call, the monotonic clock and the time the program's
 * threads had spent waiting inside blocking collectives, ddl_wait() and
 * ddl_gradx_wait() (ddl_beat_waited): a rank's compute per step is its step
 * time less that wait.  The cost is two clock reads and one relaxed atomic
 * add per call (docs/benchmarks.md).  The three values at a step are
 * published under a sequence counter, so that a record never mixes two steps.
 */
#include "config.h"

#include <time.h>
#include <unistd.h>

#include "beat.h"
#include "ddl_int.h"
#include "proto.h"
#include "util.h"

#define BEAT_MIN_MS 100

static int beat_fd = -1;
static int beat_path_fd = -1; /* opened here from DDL_HEARTBEAT_PATH (kept across ddl_init) */
static atomic_uint_fast64_t beat_colls;
static atomic_int_fast64_t beat_step = -1;
static atomic_int_fast64_t beat_last_ms;
static atomic_uint_fast64_t waited_ns; /* in collectives, since ddl_beat_init */
/* the step's snapshot (ddl_heartbeat): odd snap_seq while it is written */
static atomic_uint_fast64_t snap_seq;
static atomic_int_fast64_t snap_at_ns;
static atomic_uint_fast64_t snap_wait_ns;

int64_t ddl_beat_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void ddl_beat_waited(int64_t since_ns)
{
    int64_t d = ddl_beat_clock_ns() - since_ns;
    if (d > 0)
        atomic_fetch_add_explicit(&waited_ns, (uint64_t)d, memory_order_relaxed);
}

void ddl_beat_init(void)
{
    int owned;
    beat_fd = -1;
    atomic_store(&beat_colls, 0);
    atomic_store(&beat_step, -1);
    atomic_store(&beat_last_ms, 0);
    atomic_store(&waited_ns, 0);
    atomic_store(&snap_at_ns, 0);
    atomic_store(&snap_wait_ns, 0);
    int fd = ddl_beat_channel_open(&owned);
    if (fd < 0)
        return; /* no supervisor asked for heartbeats (or its channel is gone) */
    if (owned) { /* the FIFO: kept open across ddl_finalize and ddl_init */
        if (beat_path_fd >= 0)
            close(beat_path_fd);
        beat_path_fd = fd;
    }
    beat_fd = fd;
    ddl_beat(0, 1);
}

void ddl_beat(int collective, int force)
{
    if (collective)
        atomic_fetch_add_explicit(&beat_colls, 1, memory_order_relaxed);
    if (beat_fd < 0)
        return;
    int64_t now = ddl_now_ms(), last = atomic_load_explicit(&beat_last_ms, memory_order_relaxed);
    if (!force && now - last < BEAT_MIN_MS)
        return;
    if (!atomic_compare_exchange_strong(&beat_last_ms, &last, now))
        return; /* another thread is beating right now */
    ddl_beat_rec_t r = {atomic_load(&beat_colls), atomic_load(&beat_step), 0, 0};
    for (int tries = 0; tries < 4; tries++) { /* a consistent snapshot, else none */
        uint64_t s0 = atomic_load(&snap_seq);
        r.at_ns = atomic_load(&snap_at_ns);
        r.wait_ns = atomic_load(&snap_wait_ns);
        if (!(s0 & 1) && atomic_load(&snap_seq) == s0)
            break;
        r.at_ns = 0;
        r.wait_ns = 0;
    }
    ssize_t n = write(beat_fd, &r, sizeof r); /* full pipe or gone: dropped */
    (void)n;
}

ddl_status_t ddl_heartbeat(int64_t step)
{
    atomic_fetch_add(&snap_seq, 1);
    atomic_store(&beat_step, step < 0 ? -1 : step);
    atomic_store(&snap_at_ns, ddl_beat_clock_ns());
    atomic_store(&snap_wait_ns, atomic_load_explicit(&waited_ns, memory_order_relaxed));
    atomic_fetch_add(&snap_seq, 1);
    ddl_beat(0, 1);
    return DDL_OK;
}
