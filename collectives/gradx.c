/* gradx.c: the gradient exchange of ddl.h (ddl_gradx_*): wait-free
 * backpropagation over the non-blocking collectives, with small gradients
 * fused into buckets, posted in priority order, and fully connected
 * layers' gradients sent as sufficient factors where the cost model says
 * that is cheaper (Poseidon's hybrid rule).
 *
 * Written against a backend (ddl_int.h: post, wait, release, two cost
 * functions) so that it runs in libddl over the progress engine and the
 * cost model of select.c (engine.c: ddl_gradx_create), and in
 * tests/unit/t_gradx over the loopback transport.
 *
 * One step: every layer pushed once, then waited for once.  Buckets are
 * formed from the order of the pushes alone (never from timing), so every
 * rank that pushes in the same order posts the same operations in the same
 * order.  The factors' product uses cblas_sgemm when libddl is built with
 * OpenBLAS (HAVE_CBLAS), else the loop in gemm_atd, in the same order on
 * every rank either way.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef HAVE_CBLAS
#include <cblas.h>
#endif

#include "ddl_int.h"
#include "env.h"
#include "log.h"

typedef struct {
    size_t count;
    int rows, cols, max_batch; /* rows 0: registered without a shape */
    int mode;                  /* as registered */
    int sfb;                   /* the commit's decision */
    int pushed, waited;        /* in this step */
    float *grad;               /* the caller's buffer for the result */
    int bucket;                /* the bucket that carries it this step */
    size_t off;                /* its place in that bucket's pack */
} layer_t;

typedef struct {
    int sfb;          /* an allgather of one layer's factors */
    int *layers, n;   /* the layers carried, in priority order once closed */
    size_t count;     /* elements posted (per rank's block for sfb) */
    float *pack;      /* fused: the bucket; sfb: this rank's factors */
    size_t pack_cap;
    float *gath;      /* sfb: every rank's factors, then rearranged */
    size_t gath_cap;
    float *re;        /* sfb: A of all ranks, then D of all ranks */
    size_t re_cap;
    int inplace;      /* one layer, allreduced in the caller's buffer */
    int closed, posted, done;
    void *h;
} bucket_t;

struct ddl_gradx {
    ddl_comm_t *comm;
    ddl_op_t op;
    ddl_gradx_backend_t be;
    size_t fusion_bytes;
    int sfb_env; /* DDL_SFB: 0 auto, 1 on, 2 off */
    int committed;
    ddl_status_t broken; /* DDL_OK, or the error that ended the exchange */
    layer_t *layers;
    int nlayers, cap;
    bucket_t *buckets; /* nlayers slots, reused every step */
    int nbuckets;      /* used in this step */
    int open;          /* the open fused bucket, -1: none */
    size_t open_bytes;
    int npushed, nwaited, nposted;
    int *log_layers, *log_ops, nlog; /* this step's posts */
    double gemm_mflops;              /* the slowest rank's GEMM: 1e6 flops per us */
    ddl_gradx_stats_t stats;
};

static const char *const sfb_env_names[] = {"auto", "on", "off"};

double ddl_gradx_test_gemm_us;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* grow: *buf holds at least n floats (contents dropped). */
static int grow(float **buf, size_t *cap, size_t n)
{
    if (*cap >= n)
        return 0;
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (!p)
        return -1;
    free(*buf);
    *buf = p;
    *cap = n;
    return 0;
}

/* gemm_atd: g (rows x cols) = a^T d over k samples, a (k x rows) and d
 * (k x cols) row-major. */
static void gemm_atd(int rows, int cols, int k, const float *a, const float *d, float *g)
{
#ifdef HAVE_CBLAS
    if (k > 0) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, cols, k, 1.0f, a, rows, d,
                    cols, 0.0f, g, cols);
        return;
    }
#endif
    memset(g, 0, (size_t)rows * (size_t)cols * sizeof *g);
    for (int s = 0; s < k; s++)
        for (int i = 0; i < rows; i++) {
            const float ai = a[(size_t)s * (size_t)rows + (size_t)i];
            float *gi = g + (size_t)i * (size_t)cols;
            const float *ds = d + (size_t)s * (size_t)cols;
            for (int j = 0; j < cols; j++)
                gi[j] += ai * ds[j];
        }
}

ddl_status_t ddl_gradx_create_with(ddl_comm_t *comm, ddl_op_t op, const ddl_gradx_backend_t *be,
                                   ddl_gradx_t **gx)
{
    long fusion;
    int sfb;
    ddl_error_t err;
    if (!gx)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_create: gx is NULL");
    *gx = NULL;
    if (!comm || !be)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_create: comm is NULL");
    if (op != DDL_SUM && op != DDL_AVG)
        return ddl_fail(DDL_ERR_INVALID,
                        "ddl_gradx_create: op %d: gradients are summed (DDL_SUM) or averaged "
                        "(DDL_AVG)",
                        (int)op);
    if (ddl_env_long(DDLENV_DDL_FUSION_BYTES, &fusion, &err) < 0 ||
        ddl_env_enum(DDLENV_DDL_SFB, &sfb, &err) < 0)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_create: %s: fix or unset it", err.text);
    ddl_gradx_t *g = calloc(1, sizeof *g);
    if (!g)
        return ddl_fail(DDL_ERR_NOMEM, "ddl_gradx_create: out of memory");
    g->comm = comm;
    g->op = op;
    g->be = *be;
    g->fusion_bytes = (size_t)fusion;
    g->sfb_env = sfb;
    g->open = -1;
    *gx = g;
    return DDL_OK;
}

static ddl_status_t add(ddl_gradx_t *gx, size_t count, int rows, int cols, int max_batch,
                        int mode, int *layer)
{
    if (gx->committed)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_add: layer %d registered after "
                        "ddl_gradx_commit(): register every layer first", gx->nlayers);
    if (gx->nlayers == gx->cap) {
        int cap = gx->cap ? 2 * gx->cap : 16;
        layer_t *l = realloc(gx->layers, (size_t)cap * sizeof *l);
        if (!l)
            return ddl_fail(DDL_ERR_NOMEM, "ddl_gradx_add: out of memory for %d layers", cap);
        gx->layers = l;
        gx->cap = cap;
    }
    gx->layers[gx->nlayers] = (layer_t){.count = count, .rows = rows, .cols = cols,
                                        .max_batch = max_batch, .mode = mode};
    if (layer)
        *layer = gx->nlayers;
    gx->nlayers++;
    return DDL_OK;
}

ddl_status_t ddl_gradx_add_layer(ddl_gradx_t *gx, size_t count, int *layer)
{
    if (!gx)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_add_layer: gx is NULL");
    if (count == 0)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_add_layer: layer %d: size 0: a layer has "
                        "at least one value", gx->nlayers);
    if (count > SIZE_MAX / 8 / sizeof(float))
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_add_layer: layer %d: size %zu is too large",
                        gx->nlayers, count);
    return add(gx, count, 0, 0, 0, DDL_GRADX_FULL, layer);
}

ddl_status_t ddl_gradx_add_fc(ddl_gradx_t *gx, int rows, int cols, int max_batch,
                              ddl_gradx_mode_t mode, int *layer)
{
    if (!gx)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_add_fc: gx is NULL");
    if (rows < 1 || cols < 1 || max_batch < 1)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_add_fc: layer %d: shape %d x %d, batch %d: "
                        "each must be at least 1", gx->nlayers, rows, cols, max_batch);
    if ((size_t)rows * (size_t)cols > SIZE_MAX / 8 / sizeof(float) / (size_t)max_batch)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_add_fc: layer %d: %d x %d x batch %d is "
                        "too large", gx->nlayers, rows, cols, max_batch);
    if (mode != DDL_GRADX_AUTO && mode != DDL_GRADX_FULL && mode != DDL_GRADX_SFB)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_add_fc: layer %d: mode %d is not one of "
                        "the modes DDL_GRADX_AUTO, _FULL, _SFB", gx->nlayers, (int)mode);
    return add(gx, (size_t)rows * (size_t)cols, rows, cols, max_batch, (int)mode, layer);
}

/* run: one blocking collective through the backend (the commit's). */
static ddl_status_t run(ddl_gradx_t *gx, ddl_opdesc_t *d)
{
    void *h;
    ddl_status_t st = gx->be.post(d, &h);
    return st == DDL_OK ? gx->be.wait(h, NULL, NULL) : st;
}

static uint64_t fnv(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

ddl_status_t ddl_gradx_commit(ddl_gradx_t *gx)
{
    if (!gx)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_commit: gx is NULL");
    if (gx->committed)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_commit: already committed");
    if (gx->nlayers == 0)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_commit: no layer registered: call "
                        "ddl_gradx_add_layer() or ddl_gradx_add_fc() first");
    /* the registrations' signature: every rank must have the same */
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, (uint64_t)gx->nlayers);
    h = fnv(h, (uint64_t)gx->fusion_bytes);
    h = fnv(h, (uint64_t)gx->sfb_env);
    h = fnv(h, (uint64_t)gx->op);
    int nfc = 0;
    for (int i = 0; i < gx->nlayers; i++) {
        const layer_t *l = &gx->layers[i];
        h = fnv(h, (uint64_t)l->count);
        h = fnv(h, ((uint64_t)(uint32_t)l->rows << 32) | (uint32_t)l->cols);
        h = fnv(h, ((uint64_t)(uint32_t)l->max_batch << 32) | (uint32_t)l->mode);
        nfc += l->rows > 0;
    }
    /* the GEMM rate, timed on a 128 x 128 x 64 product */
    double gemm_us = 0;
    if (nfc > 0) {
        enum { R = 128, C = 128, K = 64 };
        float *a = calloc((size_t)K * R + (size_t)K * C + (size_t)R * C, sizeof *a);
        if (!a)
            return ddl_fail(DDL_ERR_NOMEM, "ddl_gradx_commit: out of memory");
        for (size_t i = 0; i < (size_t)K * (R + C); i++)
            a[i] = (float)(i % 7) * 0.25f;
        gemm_us = INFINITY;
        for (int t = 0; t < 3; t++) {
            double t0 = now_us();
            gemm_atd(R, C, K, a, a + (size_t)K * R, a + (size_t)K * (R + C));
            gemm_us = fmin(gemm_us, now_us() - t0);
        }
        free(a);
        gemm_us = fmax(gemm_us, 1e-3);
        if (ddl_gradx_test_gemm_us > 0)
            gemm_us = ddl_gradx_test_gemm_us;
    }
    /* [h, ~h] in 32-bit halves (exact in doubles), and the GEMM time: the
     * maximum of each over the ranks */
    const uint64_t nh = ~h;
    double v[5] = {(double)(h >> 32), (double)(h & 0xffffffffu), (double)(nh >> 32),
                   (double)(nh & 0xffffffffu), gemm_us};
    ddl_opdesc_t d = {.kind = DDL_OPK_ALLREDUCE, .comm = gx->comm, .sendbuf = DDL_IN_PLACE,
                      .recvbuf = v, .count = 5, .dtype = DDL_FLOAT64, .op = DDL_MAX};
    ddl_status_t st = run(gx, &d);
    if (st != DDL_OK)
        return st;
    const uint64_t hmax = ((uint64_t)v[0] << 32) | (uint64_t)v[1];
    const uint64_t nhmax = ((uint64_t)v[2] << 32) | (uint64_t)v[3];
    if (hmax != h || nhmax != nh)
        return ddl_fail(DDL_ERR_INVALID,
                        "ddl_gradx_commit: the ranks registered different layers: this rank "
                        "has %d layers (signature %016llx), DDL_FUSION_BYTES=%zu, DDL_SFB=%s; "
                        "every rank must register the same layers (sizes, shapes, batches, "
                        "modes) in the same order, with the same op, DDL_FUSION_BYTES and "
                        "DDL_SFB",
                        gx->nlayers, (unsigned long long)h, gx->fusion_bytes,
                        sfb_env_names[gx->sfb_env]);
    gx->gemm_mflops = nfc > 0 ? 2.0 * 128 * 128 * 64 / v[4] / 1e6 : 0; /* MFLOP per us */

    gx->buckets = calloc((size_t)gx->nlayers, sizeof *gx->buckets);
    gx->log_layers = calloc((size_t)gx->nlayers, sizeof *gx->log_layers);
    gx->log_ops = calloc((size_t)gx->nlayers, sizeof *gx->log_ops);
    if (!gx->buckets || !gx->log_layers || !gx->log_ops)
        return ddl_fail(DDL_ERR_NOMEM, "ddl_gradx_commit: out of memory");
    for (int i = 0; i < gx->nlayers; i++)
        if (!(gx->buckets[i].layers = calloc((size_t)gx->nlayers, sizeof(int))))
            return ddl_fail(DDL_ERR_NOMEM, "ddl_gradx_commit: out of memory");

    /* the hybrid rule, layer by layer */
    const double p = gx->comm->size;
    uint64_t model_bytes = 0;
    for (int i = 0; i < gx->nlayers; i++) {
        layer_t *l = &gx->layers[i];
        const double full_b = 2.0 * (p - 1) / p * 4.0 * (double)l->count;
        if (l->rows == 0) {
            model_bytes += (uint64_t)llround(full_b);
            continue;
        }
        const double m = l->rows, n = l->cols, b = l->max_batch;
        const size_t fac_bytes = (size_t)(4.0 * b * (m + n));
        const double sfb_b = (p - 1) * (double)fac_bytes;
        const double t_full =
            gx->be.allreduce_us(gx->comm, 4 * l->count) + 2 * b * m * n / 1e6 / gx->gemm_mflops;
        const double t_sfb = gx->be.allgather_us(gx->comm, fac_bytes) +
                             2 * p * b * m * n / 1e6 / gx->gemm_mflops;
        const char *why;
        if (l->mode != DDL_GRADX_AUTO) {
            l->sfb = l->mode == DDL_GRADX_SFB;
            why = "the layer's mode";
        } else if (gx->sfb_env != 0) {
            l->sfb = gx->sfb_env == 1;
            why = "DDL_SFB";
        } else if (p < 2) {
            l->sfb = 0;
            why = "one rank";
        } else {
            l->sfb = t_sfb < t_full;
            why = "cost model";
        }
        model_bytes += (uint64_t)llround(l->sfb ? sfb_b : full_b);
        ddl_debug("gradient exchange: layer %d (%d x %d, batch %d per rank, %d ranks): %s "
                  "(%s); full matrix %.0f us, %.0f bytes sent; factors %.0f us, %.0f bytes "
                  "sent; GEMM %.1f GFLOP/s",
                  i, l->rows, l->cols, l->max_batch, gx->comm->size,
                  l->sfb ? "factors" : "full matrix", why, t_full, full_b, t_sfb, sfb_b,
                  gx->gemm_mflops * 1e3);
    }
    gx->stats.model_bytes = model_bytes;
    gx->committed = 1;
    return DDL_OK;
}

int ddl_gradx_layer_sfb(const ddl_gradx_t *gx, int layer)
{
    if (!gx || !gx->committed || layer < 0 || layer >= gx->nlayers)
        return -1;
    return gx->layers[layer].sfb;
}

/* ---- one step ---- */

static bucket_t *new_bucket(ddl_gradx_t *gx, int *idx)
{
    bucket_t *b = &gx->buckets[gx->nbuckets];
    b->n = 0;
    b->count = 0;
    b->sfb = b->inplace = b->closed = b->posted = b->done = 0;
    b->h = NULL;
    *idx = gx->nbuckets++;
    return b;
}

static int cmp_int(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

/* close: a fused bucket's layers in priority order, copied into its pack
 * (one layer alone stays in its own buffer). */
static ddl_status_t close_bucket(ddl_gradx_t *gx, bucket_t *b)
{
    b->closed = 1;
    if (b->sfb)
        return DDL_OK;
    qsort(b->layers, (size_t)b->n, sizeof(int), cmp_int);
    if (b->n == 1) {
        b->inplace = 1;
        b->count = gx->layers[b->layers[0]].count;
        return DDL_OK;
    }
    size_t off = 0;
    for (int i = 0; i < b->n; i++) {
        gx->layers[b->layers[i]].off = off;
        off += gx->layers[b->layers[i]].count;
    }
    if (grow(&b->pack, &b->pack_cap, off) < 0)
        return ddl_fail(DDL_ERR_NOMEM, "gradient exchange: out of memory for a bucket of %zu "
                        "values", off);
    for (int i = 0; i < b->n; i++) {
        const layer_t *l = &gx->layers[b->layers[i]];
        memcpy(b->pack + l->off, l->grad, l->count * sizeof(float));
    }
    b->count = off;
    return DDL_OK;
}

static ddl_status_t post_bucket(ddl_gradx_t *gx, bucket_t *b)
{
    ddl_opdesc_t d = {.comm = gx->comm, .dtype = DDL_FLOAT32, .op = gx->op};
    if (b->sfb) {
        d.kind = DDL_OPK_ALLGATHER;
        d.sendbuf = b->pack;
        d.recvbuf = b->gath;
        d.count = b->count;
    } else {
        d.kind = DDL_OPK_ALLREDUCE;
        d.sendbuf = DDL_IN_PLACE;
        d.recvbuf = b->inplace ? gx->layers[b->layers[0]].grad : b->pack;
        d.count = b->count;
    }
    ddl_status_t st = gx->be.post(&d, &b->h);
    if (st != DDL_OK) {
        gx->broken = st;
        return st;
    }
    b->posted = 1;
    for (int i = 0; i < b->n; i++) {
        gx->log_layers[gx->nlog] = b->layers[i];
        gx->log_ops[gx->nlog++] = gx->nposted;
    }
    gx->nposted++;
    gx->stats.operations++;
    return DDL_OK;
}

/* post_ready: the closed buckets ready[0..n) in priority order (the one
 * with the lowest-numbered layer first). */
static ddl_status_t post_ready(ddl_gradx_t *gx, bucket_t **ready, int n)
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (ready[j]->layers[0] < ready[i]->layers[0]) {
                bucket_t *t = ready[i];
                ready[i] = ready[j];
                ready[j] = t;
            }
    for (int i = 0; i < n; i++) {
        ddl_status_t st = post_bucket(gx, ready[i]);
        if (st != DDL_OK)
            return st;
    }
    return DDL_OK;
}

static ddl_status_t check_layer(ddl_gradx_t *gx, int layer, const char *fn)
{
    if (!gx)
        return ddl_fail(DDL_ERR_INVALID, "%s: gx is NULL", fn);
    if (gx->broken != DDL_OK)
        return ddl_fail(gx->broken, "%s: the exchange failed earlier (%s): free it",
                        fn, ddl_status_str(gx->broken));
    if (!gx->committed)
        return ddl_fail(DDL_ERR_INVALID, "%s: call ddl_gradx_commit() first", fn);
    if (layer < 0 || layer >= gx->nlayers)
        return ddl_fail(DDL_ERR_INVALID, "%s: layer %d: registered layers are 0..%d", fn, layer,
                        gx->nlayers - 1);
    return DDL_OK;
}

/* start_push: the layer's state at its push; a new step begins with the
 * first push after the last one ended. */
static ddl_status_t start_push(ddl_gradx_t *gx, layer_t *l, int layer, float *grad,
                               const char *fn)
{
    if (l->pushed)
        return ddl_fail(DDL_ERR_INVALID, "%s: layer %d pushed twice in one step: wait for "
                        "every layer before pushing it again", fn, layer);
    if (gx->npushed == 0) {
        gx->nlog = 0;
        gx->nposted = 0;
    }
    l->pushed = 1;
    l->grad = grad;
    gx->npushed++;
    return DDL_OK;
}

/* finish_push: layer joins the open bucket or goes alone (or in its own
 * sfb bucket, *sfb_b); buckets that became ready are posted. */
static ddl_status_t finish_push(ddl_gradx_t *gx, int layer, bucket_t *sfb_b)
{
    layer_t *l = &gx->layers[layer];
    bucket_t *ready[3];
    int nready = 0;
    ddl_status_t st;
    if (sfb_b) {
        ready[nready++] = sfb_b;
    } else if (gx->fusion_bytes == 0 || l->count * sizeof(float) >= gx->fusion_bytes) {
        bucket_t *b = new_bucket(gx, &l->bucket);
        b->layers[b->n++] = layer;
        if ((st = close_bucket(gx, b)) != DDL_OK)
            return gx->broken = st;
        ready[nready++] = b;
    } else {
        if (gx->open < 0) {
            new_bucket(gx, &gx->open);
            gx->open_bytes = 0;
        }
        bucket_t *b = &gx->buckets[gx->open];
        b->layers[b->n++] = layer;
        l->bucket = gx->open;
        gx->open_bytes += l->count * sizeof(float);
        if (gx->open_bytes >= gx->fusion_bytes) {
            gx->open = -1;
            if ((st = close_bucket(gx, b)) != DDL_OK)
                return gx->broken = st;
            ready[nready++] = b;
        }
    }
    if (gx->npushed == gx->nlayers && gx->open >= 0) { /* the step's last push */
        bucket_t *b = &gx->buckets[gx->open];
        gx->open = -1;
        if ((st = close_bucket(gx, b)) != DDL_OK)
            return gx->broken = st;
        ready[nready++] = b;
    }
    return post_ready(gx, ready, nready);
}

ddl_status_t ddl_gradx_push(ddl_gradx_t *gx, int layer, float *grad)
{
    ddl_status_t st = check_layer(gx, layer, "ddl_gradx_push");
    if (st != DDL_OK)
        return st;
    layer_t *l = &gx->layers[layer];
    if (!grad)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_push: layer %d: grad is NULL", layer);
    if (l->sfb)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_push: layer %d travels as factors "
                        "(ddl_gradx_layer_sfb() is 1): pass them with ddl_gradx_push_factors()",
                        layer);
    if ((st = start_push(gx, l, layer, grad, "ddl_gradx_push")) != DDL_OK)
        return st;
    return finish_push(gx, layer, NULL);
}

ddl_status_t ddl_gradx_push_factors(ddl_gradx_t *gx, int layer, const float *a, const float *d,
                                    int batch, float *grad)
{
    static const char fn[] = "ddl_gradx_push_factors";
    ddl_status_t st = check_layer(gx, layer, fn);
    if (st != DDL_OK)
        return st;
    layer_t *l = &gx->layers[layer];
    if (l->rows == 0)
        return ddl_fail(DDL_ERR_INVALID, "%s: layer %d was registered without a shape "
                        "(ddl_gradx_add_layer): register it with ddl_gradx_add_fc(), or pass "
                        "its gradient with ddl_gradx_push()", fn, layer);
    if (batch < 0 || batch > l->max_batch)
        return ddl_fail(DDL_ERR_INVALID, "%s: layer %d: batch %d is outside 0..%d (the "
                        "max_batch it was registered with)", fn, layer, batch, l->max_batch);
    if (!grad || (batch > 0 && (!a || !d)))
        return ddl_fail(DDL_ERR_INVALID, "%s: layer %d: NULL factors or grad", fn, layer);
    if (!l->sfb) { /* the full matrix travels: this rank's product */
        if (l->pushed)
            return start_push(gx, l, layer, grad, fn);
        gemm_atd(l->rows, l->cols, batch, a, d, grad);
        if ((st = start_push(gx, l, layer, grad, fn)) != DDL_OK)
            return st;
        return finish_push(gx, layer, NULL);
    }
    if ((st = start_push(gx, l, layer, grad, fn)) != DDL_OK)
        return st;
    bucket_t *b = new_bucket(gx, &l->bucket);
    b->sfb = 1;
    b->layers[b->n++] = layer;
    const size_t mb = (size_t)l->max_batch, m = (size_t)l->rows, n = (size_t)l->cols;
    const size_t block = mb * (m + n), p = (size_t)gx->comm->size;
    if (grow(&b->pack, &b->pack_cap, block) < 0 || grow(&b->gath, &b->gath_cap, p * block) < 0 ||
        grow(&b->re, &b->re_cap, p * block) < 0)
        return gx->broken = ddl_fail(DDL_ERR_NOMEM, "%s: layer %d: out of memory for %zu "
                                     "factor values", fn, layer, p * block);
    /* this rank's block: a, padded to max_batch rows with zeros, then d */
    memcpy(b->pack, a, (size_t)batch * m * sizeof(float));
    memset(b->pack + (size_t)batch * m, 0, (mb - (size_t)batch) * m * sizeof(float));
    memcpy(b->pack + mb * m, d, (size_t)batch * n * sizeof(float));
    memset(b->pack + mb * m + (size_t)batch * n, 0, (mb - (size_t)batch) * n * sizeof(float));
    b->count = block;
    b->closed = 1;
    return finish_push(gx, layer, b);
}

/* complete: the bucket's results into the layers' buffers. */
static void complete_bucket(ddl_gradx_t *gx, bucket_t *b)
{
    if (b->sfb) {
        const layer_t *l = &gx->layers[b->layers[0]];
        const size_t mb = (size_t)l->max_batch, m = (size_t)l->rows, n = (size_t)l->cols;
        const size_t block = mb * (m + n), p = (size_t)gx->comm->size;
        double t0 = now_us();
        /* every rank's a, in rank order, then every rank's d */
        for (size_t r = 0; r < p; r++) {
            memcpy(b->re + r * mb * m, b->gath + r * block, mb * m * sizeof(float));
            memcpy(b->re + p * mb * m + r * mb * n, b->gath + r * block + mb * m,
                   mb * n * sizeof(float));
        }
        gemm_atd(l->rows, l->cols, (int)(p * mb), b->re, b->re + p * mb * m, l->grad);
        if (gx->op == DDL_AVG)
            ddl_scale_local(l->grad, l->count, DDL_FLOAT32, (double)p);
        gx->stats.rebuild_us += now_us() - t0;
    } else if (!b->inplace) {
        for (int i = 0; i < b->n; i++) {
            const layer_t *l = &gx->layers[b->layers[i]];
            memcpy(l->grad, b->pack + l->off, l->count * sizeof(float));
        }
    }
    b->done = 1;
}

ddl_status_t ddl_gradx_wait(ddl_gradx_t *gx, int layer)
{
    ddl_status_t st = check_layer(gx, layer, "ddl_gradx_wait");
    if (st != DDL_OK)
        return st;
    layer_t *l = &gx->layers[layer];
    if (!l->pushed || l->waited)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_wait: layer %d was not pushed in this step",
                        layer);
    double t0 = now_us();
    bucket_t *b = &gx->buckets[l->bucket];
    if (!b->posted) { /* the open bucket: post it now */
        gx->open = -1;
        if ((st = close_bucket(gx, b)) != DDL_OK)
            return gx->broken = st;
        if ((st = post_bucket(gx, b)) != DDL_OK)
            return st;
    }
    if (!b->done) {
        double run_us = 0;
        uint64_t bytes = 0;
        void *h = b->h;
        b->h = NULL;
        st = gx->be.wait(h, &run_us, &bytes);
        gx->stats.comm_us += run_us;
        gx->stats.bytes_sent += bytes;
        if (st != DDL_OK) {
            gx->broken = st;
            gx->stats.exposed_us += now_us() - t0;
            return st;
        }
        complete_bucket(gx, b);
    }
    gx->stats.exposed_us += now_us() - t0;
    l->waited = 1;
    if (++gx->nwaited == gx->nlayers) { /* the step is over */
        for (int i = 0; i < gx->nlayers; i++)
            gx->layers[i].pushed = gx->layers[i].waited = 0;
        gx->npushed = gx->nwaited = 0;
        gx->nbuckets = 0;
        gx->open = -1;
        gx->stats.steps++;
    }
    return DDL_OK;
}

ddl_status_t ddl_gradx_stats(const ddl_gradx_t *gx, ddl_gradx_stats_t *st)
{
    if (!gx || !st)
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_stats: NULL argument");
    *st = gx->stats;
    return DDL_OK;
}

ddl_status_t ddl_gradx_posts(const ddl_gradx_t *gx, int *layers, int *ops, int cap, int *n)
{
    if (!gx || !n || (cap > 0 && (!layers || !ops)))
        return ddl_fail(DDL_ERR_INVALID, "ddl_gradx_posts: NULL argument");
    for (int i = 0; i < gx->nlog && i < cap; i++) {
        layers[i] = gx->log_layers[i];
        ops[i] = gx->log_ops[i];
    }
    *n = gx->nlog;
    return DDL_OK;
}

void ddl_gradx_free(ddl_gradx_t *gx)
{
    if (!gx)
        return;
    if (gx->buckets) {
        for (int i = 0; i < gx->nlayers; i++) {
            bucket_t *b = &gx->buckets[i];
            if (b->h) /* posted, not waited for: its buffers are in use */
                (void)gx->be.wait(b->h, NULL, NULL);
            free(b->layers);
            free(b->pack);
            free(b->gath);
            free(b->re);
        }
    }
    free(gx->buckets);
    free(gx->log_layers);
    free(gx->log_ops);
    free(gx->layers);
    free(gx);
}
