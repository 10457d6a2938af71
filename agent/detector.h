/* detector.h: when a silent link between two agents counts as lost.
 *
 * Each agent sends PEER_BEAT on every link every beat_ms (ddl.conf's
 * heartbeat_interval, 0.1 s by default).  The receiving side keeps the
 * intervals between the last DDL_DET_WINDOW beats of each link and allows
 * a silence of
 *
 *     allowed = max(DDL_DET_FLOOR_BEATS * beat_ms, DDL_DET_FLOOR_MS,
 *                   mean + DDL_DET_SIGMAS * sd, DDL_DET_GAP_FACTOR * longest)
 *
 * over those intervals (mean, standard deviation, longest), never more
 * than timeout_ms (the node timeout stays the upper bound).  Until
 * DDL_DET_MIN_SAMPLES intervals are known the allowance is timeout_ms, as
 * is every allowance of a fixed detector (DDL_DETECTOR=fixed, and under
 * DDL_DETECTOR=auto, the default, wherever a lost node would end the step:
 * links.c's learned()); while
 * fewer than DDL_DET_LEARN_SAMPLES are known, the floor is
 * DDL_DET_LEARN_BEATS intervals instead (a young link: 0.6 s at 0.1 s
 * beats from 0.4 s after it came up).  The silence is counted from the
 * last message of any kind on the link (ddl_det_deadline).
 *
 * Why these terms, as measured on the namespace cluster (docs/
 * benchmarks.md, "Sub-second detection"): beats that leave every 100 ms
 * arrive 100 ms apart within a few ms on an idle machine; with every CPU
 * saturated and tc netem delay/jitter on the links the intervals spread
 * out and single gaps reach 2-3 beats.  The floor keeps a few late beats
 * from ever being a loss, the sigma term follows jitter, and the longest
 * gap of the window keeps a link that has just come through a long gap
 * from failing on the next one.
 *
 * No I/O, no clock of its own: the caller passes the time.  Not
 * thread-safe: one detector per link, used by one thread.
 */
#ifndef DDL_DETECTOR_H
#define DDL_DETECTOR_H

#include <stdint.h>

#define DDL_DET_WINDOW 64       /* intervals kept per link */
#define DDL_DET_MIN_SAMPLES 4    /* intervals before the allowance adapts */
#define DDL_DET_LEARN_SAMPLES 16 /* until then, the floor is ... */
#define DDL_DET_LEARN_BEATS 6    /* ... this many beat intervals */
#define DDL_DET_FLOOR_BEATS 3    /* then never less than this many */
#define DDL_DET_FLOOR_MS 250    /* nor less than this */
#define DDL_DET_SIGMAS 8        /* mean + this many standard deviations */
#define DDL_DET_GAP_FACTOR 2    /* this many times the longest interval kept */

typedef struct {
    int adaptive;      /* 0: the allowance is always timeout_ms */
    int beat_ms;       /* the sender's beat interval */
    int timeout_ms;    /* the node timeout: the largest allowance */
    int64_t last_beat; /* ms of the last beat, -1: none yet */
    uint32_t ring[DDL_DET_WINDOW];
    uint32_t head, count;
    int allowed_ms; /* the silence allowed now */
} ddl_det_t;

/* ddl_det_init: a detector for a new link (no beat seen yet). */
void ddl_det_init(ddl_det_t *d, int adaptive, int beat_ms, int timeout_ms);

/* ddl_det_beat: a beat arrived at now_ms; updates the allowance. */
void ddl_det_beat(ddl_det_t *d, int64_t now_ms);

/* ddl_det_deadline: the time (ms) at which a link last heard at heard_ms
 * is lost, if nothing arrives before. */
int64_t ddl_det_deadline(const ddl_det_t *d, int64_t heard_ms);

/* ddl_det_stats: mean, standard deviation and longest of the kept
 * intervals (ms; 0 when none); any pointer may be NULL. */
void ddl_det_stats(const ddl_det_t *d, double *mean, double *sd, uint32_t *longest);

#endif
