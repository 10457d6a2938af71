/* straggler.c: the leader agent's straggler detector (straggler.h): per
 * rank, a ring of the last samples' deltas (steps, compute ns), summed back
 * from the newest until they cover the window; each new value compared
 * with the median of the other ranks' latest values.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "straggler.h"

#define RING 32 /* deltas kept per rank (about 0.8 KiB): a window of up to 32 samples */

typedef struct {
    int have_last;   /* last_* hold a sample of generation gen */
    uint32_t gen, node;
    int64_t last_step, last_at;
    uint64_t last_wait;
    int64_t dsteps[RING];
    double dcomp[RING]; /* compute ns over those steps */
    double dtime[RING]; /* wall ns over those steps */
    uint32_t head, count;
    int known;      /* value holds a compute per step over >= window steps */
    double value;   /* ns per step */
    uint32_t steps; /* the steps it covers */
    uint32_t over, under;
    int named;
    double ratio, peers; /* at the last evaluation */
} rank_t;

/* Up to EXACT ranks the peers' median is sorted anew at each sample; with
 * more, the median of all known ranks is kept and sorted again once every
 * n/4 samples, so that the leader's cost stays O(log n) a sample on
 * average (one rank barely moves the median of many). */
#define EXACT 64

struct ddl_strag {
    ddl_strag_cfg_t cfg;
    uint32_t n;
    uint32_t named_total;
    double cached;       /* n > EXACT: the median of every known rank, 0: none */
    uint32_t cached_age; /* samples since it was sorted */
    uint32_t cached_gen;
    double *scratch; /* n values for the median */
    rank_t r[];
};

int ddl_strag_cfg_env(ddl_strag_cfg_t *cfg, ddl_error_t *err)
{
    if (ddl_env_long(DDLENV_DDL_STRAGGLER_PCT, &cfg->pct, err) < 0 ||
        ddl_env_long(DDLENV_DDL_STRAGGLER_WINDOW, &cfg->window, err) < 0 ||
        ddl_env_long(DDLENV_DDL_STRAGGLER_PERSIST, &cfg->persist, err) < 0)
        return -1;
    cfg->min_ms = DDL_STRAGGLER_MIN_MS;
    return 0;
}

ddl_strag_t *ddl_strag_new(uint32_t nranks, const ddl_strag_cfg_t *cfg)
{
    if (!nranks || nranks > DDL_MAX_RANKS || cfg->pct < 0 || cfg->pct > DDL_STRAGGLER_MAX_PCT ||
        cfg->window < DDL_STRAGGLER_MIN_WINDOW || cfg->window > DDL_STRAGGLER_MAX_WINDOW ||
        cfg->persist < 1 || cfg->persist > DDL_STRAGGLER_MAX_PERSIST || cfg->min_ms < 0) {
        errno = EINVAL;
        return NULL;
    }
    ddl_strag_t *s = calloc(1, sizeof *s + nranks * sizeof s->r[0]);
    if (!s)
        return NULL;
    s->scratch = calloc(nranks, sizeof *s->scratch);
    if (!s->scratch) {
        free(s);
        errno = ENOMEM;
        return NULL;
    }
    s->cfg = *cfg;
    s->n = nranks;
    return s;
}

void ddl_strag_free(ddl_strag_t *s)
{
    if (!s)
        return;
    free(s->scratch);
    free(s);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* peers_median: the median of the known values of the ranks other than
 * `me` in generation gen; 0 when none is known. */
static double peers_median(ddl_strag_t *s, uint32_t me, uint32_t gen)
{
    int all = s->n > EXACT; /* the median of every rank, cached */
    if (all && s->cached > 0 && s->cached_gen == gen && ++s->cached_age < s->n / 4)
        return s->cached;
    uint32_t k = 0;
    for (uint32_t i = 0; i < s->n; i++)
        if ((all || i != me) && s->r[i].known && s->r[i].gen == gen)
            s->scratch[k++] = s->r[i].value;
    if (!k)
        return 0;
    qsort(s->scratch, k, sizeof *s->scratch, cmp_double);
    double med = k % 2 ? s->scratch[k / 2] : (s->scratch[k / 2 - 1] + s->scratch[k / 2]) / 2;
    if (all && k >= s->n / 2) { /* most ranks measured: worth keeping */
        s->cached = med;
        s->cached_age = 0;
        s->cached_gen = gen;
    }
    return med;
}

static void describe(const ddl_strag_t *s, uint32_t i, ddl_straggler_info_t *ev)
{
    const rank_t *r = &s->r[i];
    double pm = (r->ratio - 1.0) * 1000.0;
    ev->rank = i;
    ev->node_id = r->node;
    ev->slower_pm = pm <= 0 ? 0 : pm >= 4e9 ? 4000000000u : (uint32_t)(pm + 0.5);
    ev->steps = r->steps;
    ev->compute_us = (uint32_t)(r->value / 1000.0 + 0.5);
    ev->peers_us = (uint32_t)(r->peers / 1000.0 + 0.5);
    ev->named = s->named_total;
}

static void forget(rank_t *r)
{
    r->count = r->head = 0;
    r->known = 0;
    r->over = r->under = 0;
    r->named = 0;
}

ddl_strag_event_t ddl_strag_sample(ddl_strag_t *s, uint32_t rank, uint32_t node, uint32_t gen,
                                   int64_t step, int64_t at_ns, uint64_t wait_ns,
                                   ddl_straggler_info_t *ev)
{
    if (!s || rank >= s->n || at_ns <= 0 || step < 0 || s->cfg.pct == 0)
        return DDL_STRAG_NONE;
    rank_t *r = &s->r[rank];
    ddl_strag_event_t out = DDL_STRAG_NONE;
    if (r->have_last && (gen != r->gen || step < r->last_step || at_ns < r->last_at)) {
        if (r->named) { /* a restarted worker: its report ends */
            describe(s, rank, ev ? ev : &(ddl_straggler_info_t){0});
            out = DDL_STRAG_RESET;
        }
        forget(r);
        r->have_last = 0;
    }
    if (!r->have_last || step == r->last_step) {
        /* the first sample, or no new step: (re)start the reference */
        if (!r->have_last || at_ns != r->last_at) {
            r->have_last = 1;
            r->gen = gen;
            r->node = node;
            r->last_step = step;
            r->last_at = at_ns;
            r->last_wait = wait_ns;
        }
        return out;
    }
    double comp = (double)(at_ns - r->last_at) - (double)(wait_ns - r->last_wait);
    if (wait_ns < r->last_wait || comp < 0)
        comp = 0; /* cannot happen with one clock; never a negative compute */
    r->dsteps[r->head] = step - r->last_step;
    r->dcomp[r->head] = comp;
    r->dtime[r->head] = (double)(at_ns - r->last_at);
    r->head = (r->head + 1) % RING;
    if (r->count < RING)
        r->count++;
    r->node = node;
    r->last_step = step;
    r->last_at = at_ns;
    r->last_wait = wait_ns;

    /* the window: the newest deltas back to >= window steps */
    int64_t steps = 0;
    double sum = 0, span = 0, min_ns = (double)s->cfg.min_ms * 1e6;
    for (uint32_t k = 0; k < r->count && (steps < s->cfg.window || span < min_ns); k++) {
        uint32_t j = (r->head + RING - 1 - k) % RING;
        steps += r->dsteps[j];
        sum += r->dcomp[j];
        span += r->dtime[j];
    }
    if ((steps < s->cfg.window || span < min_ns) && r->count < RING)
        return out; /* not enough yet; a full ring is a window however short */
    r->known = 1;
    r->value = sum / (double)steps;
    r->steps = steps > UINT32_MAX ? UINT32_MAX : (uint32_t)steps;

    double med = peers_median(s, rank, gen);
    if (med <= 0)
        return out;
    r->peers = med;
    r->ratio = r->value / med;
    if (r->ratio >= 1.0 + (double)s->cfg.pct / 100.0) {
        r->over++;
        r->under = 0;
    } else if (r->ratio < 1.0 + (double)s->cfg.pct / 200.0) {
        r->under++;
        r->over = 0;
    } else {
        r->over = r->under = 0;
    }
    if (!r->named && r->over >= (uint32_t)s->cfg.persist) {
        r->named = 1;
        r->under = 0;
        s->named_total++;
        out = DDL_STRAG_NAMED;
    } else if (r->named && r->under >= (uint32_t)s->cfg.persist) {
        r->named = 0;
        r->over = 0;
        out = DDL_STRAG_RECOVERED;
    }
    if (out != DDL_STRAG_NONE && ev)
        describe(s, rank, ev);
    return out;
}

void ddl_strag_info(const ddl_strag_t *s, ddl_straggler_info_t *out)
{
    memset(out, 0, sizeof *out);
    out->rank = DDL_STRAGGLER_NONE;
    if (!s)
        return;
    out->named = s->named_total;
    int64_t best = -1;
    for (uint32_t i = 0; i < s->n; i++)
        if (s->r[i].named && (best < 0 || s->r[i].ratio > s->r[best].ratio))
            best = i;
    if (best >= 0)
        describe(s, (uint32_t)best, out);
}
