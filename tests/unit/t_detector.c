/* t_detector: the agents' per-link failure detector (agent/detector.c) on
 * simulated beat arrivals: the node timeout until enough beats are known,
 * then an allowance of a few beat intervals that widens with jitter and
 * after a long gap, never beyond the node timeout; DDL_DETECTOR=fixed
 * never adapts.
 */
#include "config.h"

#include <stdlib.h>

#include "detector.h"
#include "../tap.h"

/* beats: n beats every `every` ms (+- jitter ms, deterministic) from *t. */
static void beats(ddl_det_t *d, int64_t *t, int n, int every, int jitter, uint32_t *seed)
{
    for (int i = 0; i < n; i++) {
        int j = 0;
        if (jitter) {
            *seed = *seed * 1103515245u + 12345u;
            j = (int)((*seed >> 8) % (uint32_t)(2 * jitter + 1)) - jitter;
        }
        *t += every + j;
        ddl_det_beat(d, *t);
    }
}

/* steady: a fresh detector (adaptive or not, beats every `every` ms, node
 * timeout 2 s) after its first beat at 0 and n more, regular; *t: the last. */
static void steady(ddl_det_t *d, int adaptive, int every, int n, int64_t *t, uint32_t *seed)
{
    ddl_det_init(d, adaptive, every, 2000);
    *t = 0;
    ddl_det_beat(d, *t);
    beats(d, t, n, every, 0, seed);
}

int main(void)
{
    plan(NO_PLAN);
    ddl_det_t d;
    int64_t t = 1000;
    uint32_t seed = 7;

    ddl_det_init(&d, 1, 100, 2000);
    is(ddl_det_deadline(&d, t), t + 2000, "a new link: the node timeout");
    ddl_det_beat(&d, t);
    beats(&d, &t, DDL_DET_MIN_SAMPLES - 1, 100, 0, &seed);
    is(d.allowed_ms, 2000, "%d intervals: still the node timeout", DDL_DET_MIN_SAMPLES - 1);
    beats(&d, &t, 1, 100, 0, &seed);
    is(d.allowed_ms, 600, "%d regular 100 ms intervals: a young link, 6 beats (600 ms)",
       DDL_DET_MIN_SAMPLES);
    beats(&d, &t, DDL_DET_LEARN_SAMPLES - DDL_DET_MIN_SAMPLES - 1, 100, 0, &seed);
    is(d.allowed_ms, 600, "%d intervals: still 600 ms", DDL_DET_LEARN_SAMPLES - 1);
    beats(&d, &t, 1, 100, 0, &seed);
    is(d.allowed_ms, 300, "%d intervals: 3 beats (300 ms)", DDL_DET_LEARN_SAMPLES);
    is(ddl_det_deadline(&d, t), t + 300, "... counted from the last message");

    beats(&d, &t, 200, 100, 30, &seed);
    double mean, sd;
    uint32_t longest;
    ddl_det_stats(&d, &mean, &sd, &longest);
    ok(mean > 95 && mean < 105 && sd > 10 && sd < 25 && longest <= 130,
       "jitter +-30 ms: mean %.1f, sd %.1f, longest %u", mean, sd, longest);
    ok(d.allowed_ms >= 2 * (int)longest && d.allowed_ms >= 300 && d.allowed_ms < 400,
       "... allowed %d ms: at least twice the longest interval", d.allowed_ms);

    steady(&d, 1, 100, 40, &t, &seed);
    beats(&d, &t, 1, 450, 0, &seed); /* one long gap that did not lose the link */
    is(d.allowed_ms, 900, "after a 450 ms gap: twice that (900 ms)");
    beats(&d, &t, DDL_DET_WINDOW - 1, 100, 0, &seed);
    is(d.allowed_ms, 900, "... while the gap is among the last %d intervals", DDL_DET_WINDOW);
    beats(&d, &t, 1, 100, 0, &seed);
    is(d.allowed_ms, 300, "... and back to 300 ms once it has left the window");

    beats(&d, &t, 1, 1500, 0, &seed);
    is(d.allowed_ms, 2000, "a 1.5 s gap: capped at the node timeout");

    steady(&d, 1, 20, 32, &t, &seed);
    is(d.allowed_ms, DDL_DET_FLOOR_MS, "beats every 20 ms: the floor, %d ms", DDL_DET_FLOOR_MS);

    steady(&d, 1, 1000, 32, &t, &seed);
    is(d.allowed_ms, 2000, "beats every 1 s, node timeout 2 s: the node timeout");

    steady(&d, 0, 100, 100, &t, &seed);
    is(d.allowed_ms, 2000, "fixed: always the node timeout");

    ddl_det_init(&d, 1, 100, 2000);
    t = 500;
    ddl_det_beat(&d, t);
    ddl_det_beat(&d, 400); /* the clock cannot go back: no interval */
    is(d.count, 0u, "an arrival before the last one adds no interval");
    return done_testing();
}
