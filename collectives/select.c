/* select.c: choosing the allreduce algorithm per call, and the tuning read
 * from the environment at ddl_init().
 *
 * DDL_ALLREDUCE_ALGO=ring|rd|rabenseifner|hier|auto overrides the choice
 * (and DDL_BCAST_ALGO=binomial|chain|auto the broadcast's, at the end).
 * Otherwise a cost model for p ranks and n bytes (a: latency per message,
 * b: seconds per byte sent, g: seconds per byte reduced) picks the cheapest:
 *   rd:            log2 p' (a + n b + n g)                      [+ fold]
 *   ring:          2(p-1) a + 2(p-1)/p n b + (p-1)/p n g  (+ a per segment)
 *   rabenseifner:  2 log2 p' a + 2(p'-1)/p' n b + (p'-1)/p' n g  [+ fold]
 *   hier:          intra reduce-scatter and allgather with (a_i, b_i) over
 *                  L local ranks, and an inter-node ring on n/L bytes with
 *                  (a_e, b_e) over N nodes, whose L rings share a node link
 * where p' is the largest power of two <= p and [+ fold], for the ranks
 * above it, is 2(a + n b) + n g (their data in, the result back out).  a, b are measured per level when ddl_init() sees more
 * than one rank: a ring step of 8 bytes and of 256 KiB on the node
 * communicator (intra) and on the cross communicator (inter); g by timing
 * a local f32 sum.  Every rank then takes the maximum over all ranks, so
 * that every rank makes the same choice.  DDL_TUNE_FILE names a cache: rank
 * 0 loads it when its shape (nodes, ranks per node) matches and broadcasts
 * what it found; otherwise every rank measures and rank 0 writes it.  The choice is logged at debug level whenever it differs
 * from the previous call's.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <unistd.h>

#include "ddl_int.h"
#include "env.h"
#include "log.h"
#include "util.h"

static ddl_algo_t forced = DDL_ALGO_AUTO;
static ddl_bcast_algo_t bcast_forced = DDL_BCAST_AUTO;
static ddl_bcast_algo_t bcast_last = DDL_BCAST_AUTO;
static ddl_algo_t last_choice = DDL_ALGO_AUTO;

/* The model's parameters: microseconds per message and per byte. */
typedef struct {
    double a_intra, b_intra, a_inter, b_inter, gamma;
} model_t;
#define MODEL_FIELDS 5

/* Defaults of the order measured for shared memory on the development
 * machine (docs/benchmarks.md), used until ddl_select_measure() runs. */
static model_t model = {2.0, 1.0 / 5000, 20.0, 1.0 / 1000, 1.0 / 4000};

static const char *const algo_names[] = {"auto", "ring", "rd", "rabenseifner", "hier"};

const char *ddl_algo_name(ddl_algo_t a)
{
    return (unsigned)a < sizeof algo_names / sizeof algo_names[0] ? algo_names[a] : "?";
}

/* env_num: a numeric DDL_* variable, checked against common/ddl_env.def. */
static ddl_status_t env_num(ddl_env_id_t id, long *out)
{
    ddl_error_t err;
    if (ddl_env_long(id, out, &err) < 0)
        return ddl_fail(DDL_ERR_INVALID, "%s: fix or unset it", err.text);
    return DDL_OK;
}

ddl_status_t ddl_algo_from_env(void)
{
    long seg, win;
    int a, b;
    ddl_status_t st;
    ddl_error_t err;
    forced = DDL_ALGO_AUTO;
    last_choice = DDL_ALGO_AUTO;
    bcast_forced = DDL_BCAST_AUTO;
    bcast_last = DDL_BCAST_AUTO;
    if ((st = env_num(DDLENV_DDL_SEGMENT_BYTES, &seg)) != DDL_OK ||
        (st = env_num(DDLENV_DDL_RING_WINDOW, &win)) != DDL_OK)
        return st;
    ddl_tune.seg_bytes = (size_t)seg;
    ddl_tune.window = (int)win;
    /* the table lists the values in the order of the enums */
    if (ddl_env_enum(DDLENV_DDL_BCAST_ALGO, &b, &err) < 0 ||
        ddl_env_enum(DDLENV_DDL_ALLREDUCE_ALGO, &a, &err) < 0)
        return ddl_fail(DDL_ERR_INVALID, "%s", err.text);
    bcast_forced = (ddl_bcast_algo_t)b;
    forced = (ddl_algo_t)a;
    return DDL_OK;
}

/* ---- measuring the model ---- */

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* ring_step_us: the fastest of iters ring steps (send len bytes right,
 * receive from the left) on c; 0 on a communicator of one. */
static ddl_status_t ring_step_us(ddl_comm_t *c, char *buf, size_t len, int iters, double *out)
{
    *out = 0;
    if (c->size < 2)
        return DDL_OK;
    double best = INFINITY;
    for (int i = 0; i < iters; i++) {
        double t0 = now_us();
        ddl_status_t st = ddl_tl_sendrecv(c, c->seq++, (c->rank + 1) % c->size, buf, len,
                                          (c->rank + c->size - 1) % c->size, buf + len, len);
        if (st != DDL_OK)
            return st;
        double t = now_us() - t0;
        best = t < best ? t : best;
    }
    *out = best;
    return DDL_OK;
}

#define PROBE_BIG (256 * 1024)

/* level: alpha and beta of c from a small and a big ring step. */
static ddl_status_t measure_level(ddl_comm_t *c, char *buf, double *a, double *b)
{
    double t_small, t_big;
    ddl_status_t st = ring_step_us(c, buf, 8, 20, &t_small);
    if (st == DDL_OK)
        st = ring_step_us(c, buf, PROBE_BIG, 4, &t_big);
    if (st != DDL_OK || c->size < 2)
        return st;
    *a = t_small;
    *b = t_big > t_small ? (t_big - t_small) / PROBE_BIG : 1e-6;
    return DDL_OK;
}

static double measure_gamma(char *buf)
{
    const size_t count = PROBE_BIG / sizeof(float);
    float *x = (float *)buf, *y = (float *)(buf + PROBE_BIG);
    for (size_t i = 0; i < count; i++)
        x[i] = y[i] = (float)i;
    double best = INFINITY;
    for (int i = 0; i < 3; i++) {
        double t0 = now_us();
        ddl_reduce_local(x, y, count, DDL_FLOAT32, DDL_SUM);
        double t = now_us() - t0;
        best = t < best ? t : best;
    }
    return best / PROBE_BIG;
}

/* The cache file: "key value" lines. */
static int load_cache(const char *path, model_t *m)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256], key[64];
    double v;
    int found = 0, nodes = -1, ppn = -1;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || sscanf(line, "%63s %lf", key, &v) != 2)
            continue;
        double *slot = !strcmp(key, "alpha_intra_us")  ? &m->a_intra
                       : !strcmp(key, "beta_intra_us")  ? &m->b_intra
                       : !strcmp(key, "alpha_inter_us") ? &m->a_inter
                       : !strcmp(key, "beta_inter_us")  ? &m->b_inter
                       : !strcmp(key, "gamma_us")       ? &m->gamma
                                                        : NULL;
        if (slot && isfinite(v) && v >= 0) {
            *slot = v;
            found++;
        } else if (!strcmp(key, "nodes")) {
            nodes = (int)v;
        } else if (!strcmp(key, "ranks_per_node")) {
            ppn = (int)v;
        }
    }
    fclose(f);
    return found == MODEL_FIELDS && nodes == ddl_ctx.nnodes && ppn == ddl_ctx.node.size ? 0 : -1;
}

static void save_cache(const char *path, const model_t *m)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        ddl_debug("cannot write the tuning cache %s: %s", tmp, strerror(errno));
        return;
    }
    fprintf(f, "# ddl allreduce model, measured at ddl_init()\nnodes %d\nranks_per_node %d\n"
               "alpha_intra_us %.6g\nbeta_intra_us %.6g\nalpha_inter_us %.6g\n"
               "beta_inter_us %.6g\ngamma_us %.6g\n",
            ddl_ctx.nnodes, ddl_ctx.node.size, m->a_intra, m->b_intra, m->a_inter, m->b_inter,
            m->gamma);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        ddl_debug("cannot write the tuning cache %s: %s", path, strerror(errno));
        unlink(tmp);
    }
}

ddl_status_t ddl_select_measure(void)
{
    if (forced != DDL_ALGO_AUTO || ddl_ctx.size < 2)
        return DDL_OK;
    const char *cache = ddl_env_str(DDLENV_DDL_TUNE_FILE);
    /* [0] = 1 if rank 0 loaded the cache, then the model */
    double v[1 + MODEL_FIELDS] = {0};
    model_t m = model;
    ddl_status_t st;
    if (cache && *cache && ddl_ctx.rank == 0 && load_cache(cache, &m) == 0)
        v[0] = 1;
    memcpy(&v[1], &m, sizeof m);
    /* always, so that rank 0's decision holds even where the ranks' DDL_TUNE_FILE differ */
    if ((st = ddl_bcast_binomial(&ddl_ctx.world, v, sizeof v, 0)) != DDL_OK)
        return st;
    if (v[0] == 0) {
        char *buf = malloc(2 * PROBE_BIG);
        if (!buf)
            return ddl_fail(DDL_ERR_NOMEM, "out of memory for the link measurement");
        memset(buf, 0, 2 * PROBE_BIG);
        m = model;
        st = measure_level(&ddl_ctx.node, buf, &m.a_intra, &m.b_intra);
        if (st == DDL_OK)
            st = measure_level(&ddl_ctx.cross, buf, &m.a_inter, &m.b_inter);
        m.gamma = measure_gamma(buf);
        free(buf);
        if (st != DDL_OK)
            return st;
        /* everyone takes the worst value, so that every rank agrees */
        memcpy(&v[1], &m, sizeof m);
        if ((st = ddl_allreduce_rd(&ddl_ctx.world, &v[1], MODEL_FIELDS, DDL_FLOAT64, DDL_MAX)) !=
            DDL_OK)
            return st;
        memcpy(&m, &v[1], sizeof m);
        if (cache && *cache && ddl_ctx.rank == 0)
            save_cache(cache, &m);
    } else {
        memcpy(&m, &v[1], sizeof m);
    }
    model = m;
    ddl_debug("allreduce model%s: intra a=%.2f us b=%.3g us/B (%.2f GB/s); inter a=%.2f us "
              "b=%.3g us/B (%.2f GB/s); reduction %.2f GB/s", v[0] ? " (cache)" : "",
              m.a_intra, m.b_intra, 1e-3 / m.b_intra, m.a_inter, m.b_inter, 1e-3 / m.b_inter,
              1e-3 / m.gamma);
    return DDL_OK;
}

/* ---- the choice ---- */

int ddl_hier_possible(const ddl_comm_t *comm)
{
    return comm == &ddl_ctx.world && ddl_ctx.hier_ok;
}

/* comm_spans_nodes: some two members live on different nodes. */
static int comm_spans_nodes(const ddl_comm_t *comm)
{
    if (ddl_ctx.nnodes < 2)
        return 0;
    if (comm == &ddl_ctx.node)
        return 0;
    if (comm == &ddl_ctx.world || comm == &ddl_ctx.cross)
        return comm->size > 1;
    return ddl_comm_multi_node(comm);
}

typedef struct {
    double t[5];
} costs_t;

static costs_t model_costs(const ddl_comm_t *comm, size_t bytes)
{
    const int inter = comm_spans_nodes(comm);
    const double a = inter ? model.a_inter : model.a_intra;
    const double b = inter ? fmax(model.b_inter, model.b_intra) : model.b_intra;
    const double g = model.gamma, p = comm->size, n = (double)bytes;
    double p2 = 1;
    while (p2 * 2 <= p)
        p2 *= 2;
    const double fold = p2 < p ? 2 * (a + n * b) + n * g : 0;
    const double segs = ceil(n / p / (double)ddl_tune.seg_bytes);
    costs_t c = {{INFINITY, INFINITY, INFINITY, INFINITY, INFINITY}};
    c.t[DDL_ALGO_RD] = log2(p2) * (a + n * b + n * g) + fold;
    c.t[DDL_ALGO_RING] = 2 * (p - 1) * a * fmax(segs, 1) + 2 * (p - 1) / p * n * b +
                         (p - 1) / p * n * g;
    c.t[DDL_ALGO_RABENSEIFNER] = 2 * log2(p2) * a + 2 * (p2 - 1) / p2 * n * b +
                                 (p2 - 1) / p2 * n * g + fold;
    if (ddl_hier_possible(comm)) {
        const double L = ddl_ctx.node.size, N = ddl_ctx.cross.size;
        const double intra = 2 * (L - 1) * model.a_intra + 2 * (L - 1) / L * n * model.b_intra +
                             (L - 1) / L * n * g;
        const double across = 2 * (N - 1) * model.a_inter +
                              2 * (N - 1) / N * n * model.b_inter + (N - 1) / N * (n / L) * g;
        c.t[DDL_ALGO_HIER] = intra + across;
    }
    return c;
}

double ddl_model_allreduce_us(const ddl_comm_t *comm, size_t bytes)
{
    if (comm->size < 2)
        return 0;
    costs_t c = model_costs(comm, bytes);
    double best = c.t[DDL_ALGO_RING];
    for (int i = DDL_ALGO_RING; i <= DDL_ALGO_HIER; i++)
        best = fmin(best, c.t[i]);
    return best;
}

/* The ring allgather: p-1 steps of one block each. */
double ddl_model_allgather_us(const ddl_comm_t *comm, size_t bytes_per_rank)
{
    const int inter = comm_spans_nodes(comm);
    const double a = inter ? model.a_inter : model.a_intra;
    const double b = inter ? fmax(model.b_inter, model.b_intra) : model.b_intra;
    const double segs = fmax(1, ceil((double)bytes_per_rank / (double)ddl_tune.seg_bytes));
    return (comm->size - 1) * (a * segs + (double)bytes_per_rank * b);
}

ddl_algo_t ddl_allreduce_select(const ddl_comm_t *comm, size_t bytes)
{
    ddl_algo_t a = forced;
    const char *why = " (DDL_ALLREDUCE_ALGO)";
    if (a == DDL_ALGO_HIER && !ddl_hier_possible(comm)) {
        a = DDL_ALGO_RING;
        why = " (DDL_ALLREDUCE_ALGO=hier needs the world communicator on several nodes with "
              "the same number of ranks each)";
    }
    if (a == DDL_ALGO_AUTO && bytes >= DDL_MAPPED_MIN_BYTES && ddl_mem_mapped_count() > 0 &&
        !comm_spans_nodes(comm)) {
        /* the model prices transfers; with mapped buffers the ring moves
         * none inside a node (same on every rank: allocation is collective) */
        a = DDL_ALGO_RING;
        why = " (mapped buffers exist: the ring reads them in place)";
    }
    if (a == DDL_ALGO_AUTO) {
        costs_t c = model_costs(comm, bytes);
        a = DDL_ALGO_RING;
        for (int i = DDL_ALGO_RING; i <= DDL_ALGO_HIER; i++)
            if (c.t[i] < c.t[a])
                a = (ddl_algo_t)i;
        why = "";
    }
    if (a != last_choice) {
        ddl_debug("allreduce of %zu bytes on %d ranks: %s%s", bytes, comm->size,
                  ddl_algo_name(a), why);
        last_choice = a;
    }
    return a;
}

/* Broadcast: binomial tree, ceil(log2 p) (a + n b), against the pipelined
 * chain, (p - 2 + segments) (a + seg b). */
ddl_bcast_algo_t ddl_bcast_select(const ddl_comm_t *comm, size_t bytes)
{
    ddl_bcast_algo_t a = bcast_forced;
    if (a == DDL_BCAST_AUTO) {
        const int inter = comm_spans_nodes(comm);
        const double al = inter ? model.a_inter : model.a_intra;
        const double be = inter ? fmax(model.b_inter, model.b_intra) : model.b_intra;
        const double p = comm->size, n = (double)bytes, seg = (double)ddl_tune.seg_bytes;
        const double segs = ceil(n / seg), s = n < seg ? n : seg;
        const double t_tree = ceil(log2(p)) * (al + n * be);
        const double t_chain = (p - 2 + segs) * (al + s * be);
        a = t_chain < t_tree ? DDL_BCAST_CHAIN : DDL_BCAST_BINOMIAL;
    }
    if (a != bcast_last) {
        ddl_debug("bcast of %zu bytes on %d ranks: %s%s", bytes, comm->size,
                  a == DDL_BCAST_CHAIN ? "chain" : "binomial",
                  bcast_forced ? " (DDL_BCAST_ALGO)" : "");
        bcast_last = a;
    }
    return a;
}
