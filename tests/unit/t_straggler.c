/* t_straggler: the leader agent's straggler detector (agent/straggler.c)
 * on simulated synchronous data-parallel steps: each rank computes, then
 * waits in the allreduce for the slowest; samples reach the detector every
 * 2 steps per rank, as PROGRESS does at 250 ms with 125 ms steps.  A rank
 * 20 % slower is named within 20 steps and recovers; ranks within noise or
 * under the threshold are never named; a restart ends a report; settings
 * are checked.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "straggler.h"
#include "../tap.h"

#define N 4

typedef struct {
    int64_t at[N];    /* each rank's clock (ns) */
    uint64_t wait[N]; /* its time waited */
    int64_t step;
    uint32_t seed;
} sim_t;

/* noise: a deterministic +-amp fraction */
static double noise(sim_t *s, double amp)
{
    s->seed = s->seed * 1103515245u + 12345u;
    return amp * (((double)(s->seed >> 8 & 0xffff) / 65535.0) * 2.0 - 1.0);
}

/* run: `steps` synchronous steps with compute ms[r] (+- amp noise); every
 * 2 steps a sample of each rank.  Returns the step of the first event `want`
 * (-1: none) and counts every event in counts[]. */
static int64_t run(ddl_strag_t *d, sim_t *s, const double ms[N], double amp, int steps,
                   uint32_t gen, ddl_strag_event_t want, int counts[4],
                   ddl_straggler_info_t *ev)
{
    int64_t first = -1;
    for (int k = 0; k < steps; k++) {
        double c[N], slowest = 0;
        for (int r = 0; r < N; r++) {
            c[r] = ms[r] * (1.0 + noise(s, amp)) * 1e6;
            if (c[r] > slowest)
                slowest = c[r];
        }
        double step_ns = slowest + 1e6; /* + 1 ms of transfer */
        s->step++;
        for (int r = 0; r < N; r++) {
            s->at[r] += (int64_t)step_ns;
            s->wait[r] += (uint64_t)(step_ns - c[r]);
        }
        if (s->step % 2)
            continue;
        for (int r = 0; r < N; r++) {
            ddl_straggler_info_t e;
            ddl_strag_event_t got =
                ddl_strag_sample(d, (uint32_t)r, (uint32_t)r / 2, gen, s->step, s->at[r],
                                 s->wait[r], &e);
            counts[got]++;
            if (got == want && first < 0) {
                first = s->step;
                if (ev)
                    *ev = e;
            }
        }
    }
    return first;
}

int main(void)
{
    plan(NO_PLAN);
    ddl_strag_cfg_t cfg = {.pct = 15, .window = 8, .persist = 3, .min_ms = DDL_STRAGGLER_MIN_MS};
    ddl_straggler_info_t ev, info;
    int counts[4] = {0};

    /* 1. a clean run: 4 equal ranks, +-5 % noise per step, 2000 steps */
    ddl_strag_t *d = ddl_strag_new(N, &cfg);
    ok(d != NULL, "a detector for 4 ranks");
    sim_t s = {.seed = 7};
    for (int r = 0; r < N; r++)
        s.at[r] = 1000000000LL * (r + 1); /* each rank's own clock */
    const double even[N] = {125, 125, 125, 125};
    run(d, &s, even, 0.05, 2000, 0, DDL_STRAG_NAMED, counts, NULL);
    is(counts[DDL_STRAG_NAMED], 0, "a clean run of 2000 steps with 5 %% noise: no straggler");
    ddl_strag_info(d, &info);
    ok(info.rank == DDL_STRAGGLER_NONE && info.named == 0, "... none in the info");

    /* 2. rank 2 computes 20 % more from now on: named within 20 steps */
    const double slow[N] = {125, 125, 150, 125};
    int64_t from = s.step;
    int64_t at = run(d, &s, slow, 0.05, 200, 0, DDL_STRAG_NAMED, counts, &ev);
    ok(at > 0 && at - from <= 20, "rank 2 slowed 20 %%: named after %lld steps (<= 20)",
       (long long)(at - from));
    ok(ev.rank == 2 && ev.node_id == 1 && ev.slower_pm >= 150 && ev.slower_pm <= 260,
       "... rank 2 on node 1, %.1f %% slower (20 %% injected, +-5 %% noise)",
       ev.slower_pm / 10.0);
    ok(ev.steps >= 8 && ev.compute_us > ev.peers_us && ev.peers_us > 110000 &&
           ev.peers_us < 140000,
       "... over %u steps (window 8, >= 0.5 s), %u us against its peers' %u us", ev.steps,
       ev.compute_us, ev.peers_us);
    is(counts[DDL_STRAG_NAMED], 1, "... named once, not again while it stays slow");
    ddl_strag_info(d, &info);
    ok(info.rank == 2 && info.named == 1, "... the info names it, 1 named so far");

    /* 3. it recovers */
    from = s.step;
    at = run(d, &s, even, 0.05, 200, 0, DDL_STRAG_RECOVERED, counts, &ev);
    ok(at > 0 && at - from <= 40, "back to normal: recovered after %lld steps",
       (long long)(at - from));
    ddl_strag_info(d, &info);
    ok(info.rank == DDL_STRAGGLER_NONE && info.named == 1, "... none now, still 1 named");

    /* 4. 10 % slower, threshold 15 %: never named */
    const double mild[N] = {125, 137.5, 125, 125};
    memset(counts, 0, sizeof counts);
    run(d, &s, mild, 0.02, 400, 0, DDL_STRAG_NAMED, counts, NULL);
    is(counts[DDL_STRAG_NAMED], 0, "a rank 10 %% slower, threshold 15 %%: not named");

    /* 5. named, then restarted (generation 1): its report ends */
    at = run(d, &s, slow, 0.02, 100, 0, DDL_STRAG_NAMED, counts, &ev);
    ok(at > 0 && ev.rank == 2, "rank 2 slow again: named");
    memset(counts, 0, sizeof counts);
    for (int r = 0; r < N; r++)
        s.at[r] += 5000000000LL;
    s.step = 0;
    run(d, &s, even, 0.02, 4, 1, DDL_STRAG_NONE, counts, NULL);
    is(counts[DDL_STRAG_RESET], 1, "a new generation that goes back to step 0: its report ends");
    ddl_strag_info(d, &info);
    ok(info.rank == DDL_STRAGGLER_NONE && info.named == 2, "... none now, 2 named in all");

    /* 6. samples without timing (an older libddl) are ignored */
    ok(ddl_strag_sample(d, 0, 0, 1, 100, 0, 0, NULL) == DDL_STRAG_NONE &&
           ddl_strag_sample(d, N, 0, 1, 100, 5, 0, NULL) == DDL_STRAG_NONE,
       "a sample without timing, or of a rank out of range: ignored");
    ddl_strag_free(d);

    /* 7. detection off (pct 0): nothing, however slow */
    ddl_strag_cfg_t off = cfg;
    off.pct = 0;
    d = ddl_strag_new(N, &off);
    memset(counts, 0, sizeof counts);
    memset(&s, 0, sizeof s);
    s.at[0] = s.at[1] = s.at[2] = s.at[3] = 1;
    const double awful[N] = {100, 300, 100, 100};
    run(d, &s, awful, 0, 200, 0, DDL_STRAG_NAMED, counts, NULL);
    is(counts[DDL_STRAG_NAMED], 0, "DDL_STRAGGLER_PCT=0: a rank 3 times slower is not named");
    ddl_strag_free(d);

    /* 8. many ranks (the cached median): 256 ranks, rank 77 20 % slower
     * from step 40; samples every 2 steps */
    {
        enum { M = 256 };
        static int64_t clk[M];
        static uint64_t wait[M];
        d = ddl_strag_new(M, &cfg);
        uint32_t seed = 3;
        int64_t named_at = -1;
        int wrong = 0;
        for (int64_t step = 1; step <= 100; step++) {
            double c[M], slowest = 0;
            for (int r = 0; r < M; r++) {
                seed = seed * 1103515245u + 12345u;
                double nz = 0.05 * (((double)(seed >> 8 & 0xffff) / 65535.0) * 2.0 - 1.0);
                c[r] = (r == 77 && step > 40 ? 150.0 : 125.0) * (1.0 + nz) * 1e6;
                if (c[r] > slowest)
                    slowest = c[r];
            }
            for (int r = 0; r < M; r++) {
                clk[r] += (int64_t)(slowest + 1e6);
                wait[r] += (uint64_t)(slowest + 1e6 - c[r]);
                if (step % 2)
                    continue;
                ddl_straggler_info_t e;
                if (ddl_strag_sample(d, (uint32_t)r, (uint32_t)r / 8, 0, step, clk[r] + 1,
                                     wait[r], &e) == DDL_STRAG_NAMED) {
                    if (r == 77 && named_at < 0)
                        named_at = step;
                    else
                        wrong++;
                }
            }
        }
        ok(named_at > 40 && named_at <= 60 && wrong == 0,
           "256 ranks: rank 77 slowed at step 40 named at step %lld, no other rank named (%d)",
           (long long)named_at, wrong);
        ddl_strag_free(d);
    }

    /* 9. settings */
    ddl_strag_cfg_t bad = cfg;
    bad.window = 1;
    errno = 0;
    ok(!ddl_strag_new(N, &bad) && errno == EINVAL, "a window of 1 step: EINVAL");
    bad = cfg;
    bad.persist = 0;
    ok(!ddl_strag_new(N, &bad) && errno == EINVAL, "persistence 0: EINVAL");
    ok(!ddl_strag_new(0, &cfg) && errno == EINVAL, "no rank: EINVAL");
    ddl_strag_free(NULL);

    ddl_error_t err;
    ddl_strag_cfg_t c;
    unsetenv("DDL_STRAGGLER_PCT");
    unsetenv("DDL_STRAGGLER_WINDOW");
    unsetenv("DDL_STRAGGLER_PERSIST");
    int rc = ddl_strag_cfg_env(&c, &err);
    ok(rc == 0 && c.pct == DDL_STRAGGLER_DEFAULT_PCT &&
           c.window == DDL_STRAGGLER_DEFAULT_WINDOW &&
           c.persist == DDL_STRAGGLER_DEFAULT_PERSIST && c.min_ms == DDL_STRAGGLER_MIN_MS,
       "unset: the defaults (%ld %%, %ld steps, %ld in a row)", c.pct, c.window, c.persist);
    setenv("DDL_STRAGGLER_PCT", "12", 1);
    setenv("DDL_STRAGGLER_WINDOW", "20", 1);
    setenv("DDL_STRAGGLER_PERSIST", "2", 1);
    ok(ddl_strag_cfg_env(&c, &err) == 0 && c.pct == 12 && c.window == 20 && c.persist == 2,
       "DDL_STRAGGLER_PCT=12 DDL_STRAGGLER_WINDOW=20 DDL_STRAGGLER_PERSIST=2 are read");
    setenv("DDL_STRAGGLER_PCT", "fast", 1);
    ok(ddl_strag_cfg_env(&c, &err) < 0 && strstr(err.text, "DDL_STRAGGLER_PCT") &&
           strstr(err.text, "fast"),
       "DDL_STRAGGLER_PCT=fast refused: %s", err.text);
    setenv("DDL_STRAGGLER_PCT", "15", 1);
    setenv("DDL_STRAGGLER_WINDOW", "1", 1);
    ok(ddl_strag_cfg_env(&c, &err) < 0 && strstr(err.text, "DDL_STRAGGLER_WINDOW"),
       "DDL_STRAGGLER_WINDOW=1 refused (2 or more): %s", err.text);
    return done_testing();
}
