/* straggler.h: the leader agent's straggler detector.  It takes each
 * rank's PROGRESS samples (a step, the worker's clock at that step and the
 * time it had waited in collectives by then) and names a rank whose compute
 * per step (step time less wait) over a sliding window of steps is
 * persistently above its peers' median.  In a synchronous data-parallel
 * step the slow rank waits least while the others wait for it, so compute
 * per step tells it apart where step time cannot.
 *
 * Rule: after each sample of rank r with at least `window` steps and
 * `min_ms` of time measured (or its last 32 samples, if they cover less),
 * ratio = compute(r) / median(compute of r's peers) (above 64 ranks, the
 * median of all ranks, sorted again every n/4 samples).  `persist` ratios in a
 * row >= 1 + pct/100 name r; once named, `persist` ratios in a row below
 * 1 + pct/200 end the report (the band between does neither).  A new
 * generation or a step going back (a restart) forgets the rank's samples.
 *
 * No I/O, no logging: the caller logs the events.  Not thread-safe: one
 * detector per thread.
 */
#ifndef DDL_STRAGGLER_H
#define DDL_STRAGGLER_H

#include <stdint.h>

#include "ddl_limits.h"
#include "proto.h"
#include "util.h"

typedef struct {
    long pct;     /* threshold in percent, 0: detection off */
    long window;  /* steps per window */
    long persist; /* evaluations in a row */
    long min_ms;  /* a window also covers at least this long (DDL_STRAGGLER_MIN_MS) */
} ddl_strag_cfg_t;

/* The shortest window in time (ms): with steps of a few ms, one scheduling
 * hiccup must not make a window. */
#define DDL_STRAGGLER_MIN_MS 500

/* ddl_strag_cfg_env: the configuration from DDL_STRAGGLER_PCT,
 * DDL_STRAGGLER_WINDOW and DDL_STRAGGLER_PERSIST (defaults where unset),
 * min_ms DDL_STRAGGLER_MIN_MS.
 * 0, or -1 with err naming the bad variable, its value and its range. */
int ddl_strag_cfg_env(ddl_strag_cfg_t *cfg, ddl_error_t *err);

typedef struct ddl_strag ddl_strag_t;

/* ddl_strag_new: a detector for ranks 0..nranks-1 (caller frees it with
 * ddl_strag_free, which accepts NULL).  NULL with errno EINVAL (nranks 0,
 * a value out of range) or ENOMEM. */
ddl_strag_t *ddl_strag_new(uint32_t nranks, const ddl_strag_cfg_t *cfg);
void ddl_strag_free(ddl_strag_t *s);

/* What a sample changed. */
typedef enum {
    DDL_STRAG_NONE = 0,
    DDL_STRAG_NAMED = 1,     /* the rank is now a straggler */
    DDL_STRAG_RECOVERED = 2, /* it no longer is */
    DDL_STRAG_RESET = 3,     /* a named rank restarted: its report ends unmeasured */
} ddl_strag_event_t;

/* ddl_strag_sample: one sample of `rank` (on node `node`): its generation,
 * step, worker clock (ns) and cumulated wait (ns) at that step.  Samples
 * with at_ns 0 (no timing: an older libddl) or a rank out of range are
 * ignored.  Returns the event; for NAMED, RECOVERED and RESET *ev (if not
 * NULL) describes the rank (its ratio, window and compute per step). */
ddl_strag_event_t ddl_strag_sample(ddl_strag_t *s, uint32_t rank, uint32_t node, uint32_t gen,
                                   int64_t step, int64_t at_ns, uint64_t wait_ns,
                                   ddl_straggler_info_t *ev);

/* ddl_strag_info: the straggler now (the slowest named rank; rank
 * DDL_STRAGGLER_NONE if none) and how many were named so far. */
void ddl_strag_info(const ddl_strag_t *s, ddl_straggler_info_t *out);

#endif
