/* detector.c: the per-link failure detector (detector.h): a ring of the
 * last beat intervals, and the silence allowed recomputed from it at each
 * beat, so that asking for a link's deadline costs nothing.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "detector.h"

void ddl_det_init(ddl_det_t *d, int adaptive, int beat_ms, int timeout_ms)
{
    memset(d, 0, sizeof *d);
    d->adaptive = adaptive;
    d->beat_ms = beat_ms > 0 ? beat_ms : 1;
    d->timeout_ms = timeout_ms;
    d->last_beat = -1;
    d->allowed_ms = timeout_ms;
}

void ddl_det_stats(const ddl_det_t *d, double *mean, double *sd, uint32_t *longest)
{
    double sum = 0, sq = 0;
    uint32_t top = 0;
    for (uint32_t i = 0; i < d->count; i++) {
        uint32_t v = d->ring[i];
        sum += v;
        sq += (double)v * v;
        top = v > top ? v : top;
    }
    double m = d->count ? sum / d->count : 0;
    double var = d->count ? sq / d->count - m * m : 0;
    if (mean)
        *mean = m;
    if (sd)
        *sd = var > 0 ? sqrt(var) : 0;
    if (longest)
        *longest = top;
}

void ddl_det_beat(ddl_det_t *d, int64_t now_ms)
{
    if (d->last_beat >= 0 && now_ms >= d->last_beat) {
        int64_t gap = now_ms - d->last_beat;
        d->ring[d->head] = gap > UINT32_MAX ? UINT32_MAX : (uint32_t)gap;
        d->head = (d->head + 1) % DDL_DET_WINDOW;
        if (d->count < DDL_DET_WINDOW)
            d->count++;
    }
    d->last_beat = now_ms;
    if (!d->adaptive || d->count < DDL_DET_MIN_SAMPLES) {
        d->allowed_ms = d->timeout_ms;
        return;
    }
    double mean, sd;
    uint32_t longest;
    ddl_det_stats(d, &mean, &sd, &longest);
    int floor_beats = d->count < DDL_DET_LEARN_SAMPLES ? DDL_DET_LEARN_BEATS : DDL_DET_FLOOR_BEATS;
    double a = (double)floor_beats * d->beat_ms;
    a = a > DDL_DET_FLOOR_MS ? a : DDL_DET_FLOOR_MS;
    double s = mean + DDL_DET_SIGMAS * sd, g = (double)DDL_DET_GAP_FACTOR * longest;
    a = s > a ? s : a;
    a = g > a ? g : a;
    d->allowed_ms = a >= d->timeout_ms ? d->timeout_ms : (int)ceil(a);
}

int64_t ddl_det_deadline(const ddl_det_t *d, int64_t heard_ms)
{
    return heard_ms + d->allowed_ms;
}
