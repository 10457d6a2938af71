/* select.c: choosing the allreduce algorithm per call.
 *
 * DDL_ALLREDUCE_ALGO=ring|rd|auto overrides.  Otherwise an alpha-beta-gamma
 * model for p ranks and n bytes (the shared design notes' cost models):
 *   recursive doubling: log2(p) * (alpha + n*beta + n*gamma)
 *   ring:               2(p-1) * alpha + 2(p-1)/p * n*beta + (p-1)/p * n*gamma
 * with fixed alpha, beta, gamma of the order that ddl-bench and ucx_perftest
 * measure for shared memory on the development machine (docs/benchmarks.md);
 * measuring them per communicator is future work.  The choice is logged at
 * debug level whenever it differs from the previous call's.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ddl_int.h"
#include "log.h"

static ddl_algo_t forced = DDL_ALGO_AUTO;
static ddl_algo_t last_choice = DDL_ALGO_AUTO;

/* Per-message latency (us), per-byte transfer and reduction cost (us/byte). */
static const double alpha_us = 2.0;
static const double beta_us = 1.0 / 5000.0; /* ~5 GB/s */
static const double gamma_us = 1.0 / 4000.0; /* ~4 GB/s reduction */

ddl_status_t ddl_algo_from_env(void)
{
    const char *v = getenv("DDL_ALLREDUCE_ALGO");
    forced = DDL_ALGO_AUTO;
    last_choice = DDL_ALGO_AUTO;
    if (!v || !*v || !strcmp(v, "auto"))
        return DDL_OK;
    if (!strcmp(v, "ring"))
        forced = DDL_ALGO_RING;
    else if (!strcmp(v, "rd"))
        forced = DDL_ALGO_RD;
    else
        return ddl_fail(DDL_ERR_INVALID, "DDL_ALLREDUCE_ALGO='%s' is not an algorithm (auto, "
                        "ring, rd)", v);
    return DDL_OK;
}

static const char *algo_name(ddl_algo_t a)
{
    return a == DDL_ALGO_RING ? "ring" : a == DDL_ALGO_RD ? "rd" : "auto";
}

ddl_algo_t ddl_allreduce_select(const ddl_comm_t *comm, size_t bytes)
{
    ddl_algo_t a = forced;
    if (a == DDL_ALGO_AUTO) {
        double p = comm->size, n = (double)bytes;
        double rounds = ceil(log2(p));
        double t_rd = rounds * (alpha_us + n * beta_us + n * gamma_us);
        double t_ring = 2 * (p - 1) * alpha_us + 2 * (p - 1) / p * n * beta_us +
                        (p - 1) / p * n * gamma_us;
        a = t_rd <= t_ring ? DDL_ALGO_RD : DDL_ALGO_RING;
    }
    if (a != last_choice) {
        ddl_debug("allreduce of %zu bytes on %d ranks: %s%s", bytes, comm->size, algo_name(a),
                  forced ? " (DDL_ALLREDUCE_ALGO)" : "");
        last_choice = a;
    }
    return a;
}

static void *scratch;
static size_t scratch_len;

void *ddl_scratch(size_t bytes)
{
    if (bytes <= scratch_len && scratch)
        return scratch;
    void *p = realloc(scratch, bytes ? bytes : 1);
    if (!p)
        return NULL;
    scratch = p;
    scratch_len = bytes;
    return scratch;
}

void ddl_scratch_free(void)
{
    free(scratch);
    scratch = NULL;
    scratch_len = 0;
}
