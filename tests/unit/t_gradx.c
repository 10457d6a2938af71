/* t_gradx.c: libddl's gradient exchange (collectives/gradx.c) over the
 * loopback transport: the ranks of a world of 1 to 4 are threads of this
 * process, each with a worker thread that runs its posted collectives in
 * order (as libddl's progress thread does) with the ring algorithms.
 *
 * Checked: with DDL_FUSION_BYTES=0 every layer's result is bit-identical
 * to one allreduce of that layer alone; with fusion, bit-identical where
 * the inputs make every order of summation exact, within rounding with
 * random floats, and the same bits on every rank; the buckets and their
 * posting order (fusion, priority); sufficient factors equal to the
 * product over every rank's factors in rank order, on every rank, and
 * close to the summed full gradient; DDL_AVG; a step repeated; abort while
 * a peer is missing: DDL_ERR_ABORTED on every rank within 1 s; bad
 * registrations (size 0, factors for a layer without a shape, different
 * layers on different ranks) refused with a clear error. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef HAVE_CBLAS
#include <cblas.h>
#endif

#include "ddl_int.h"
#include "log.h"
#include "transport_loopback.h"
#include "../tap.h"

#define MAXR 4
#define MAXL 8

/* ---- a progress thread per rank: posted operations run in order ---- */

typedef struct op {
    ddl_opdesc_t d;
    ddl_status_t st;
    int done;
    double run_us;
    uint64_t bytes;
    char err[300];
    struct op *next;
} op_t;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    op_t *head, *tail;
    int stop;
    pthread_t th;
} worker_t;

static __thread worker_t *my_worker; /* the posting rank's */

static ddl_algo_t pick_ring(const ddl_comm_t *c, size_t b)
{
    (void)c, (void)b;
    return DDL_ALGO_RING;
}
static ddl_bcast_algo_t pick_binomial(const ddl_comm_t *c, size_t b)
{
    (void)c, (void)b;
    return DDL_BCAST_BINOMIAL;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static ddl_status_t run_op(const ddl_opdesc_t *d)
{
    ddl_dispatch_t how = {.allreduce = pick_ring, .bcast = pick_binomial,
                          .world_size = d->comm->size};
    ddl_status_t st = ddl_comm_check_abort(d->comm);
    if (st != DDL_OK)
        return st;
    return ddl_dispatch(d, &how); /* the ring divides DDL_AVG itself */
}

static void *worker_main(void *p)
{
    worker_t *w = p;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->head && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->head)
            break;
        op_t *o = w->head;
        pthread_mutex_unlock(&w->mu);
        ddl_tl_t *tl = o->d.comm->tl;
        uint64_t b0 = atomic_load(&tl->bytes_sent);
        double t0 = now_us();
        ddl_status_t st = run_op(&o->d);
        pthread_mutex_lock(&w->mu);
        o->run_us = now_us() - t0;
        o->bytes = atomic_load(&tl->bytes_sent) - b0;
        o->st = st;
        if (st != DDL_OK)
            snprintf(o->err, sizeof o->err, "%s", ddl_last_error());
        o->done = 1;
        w->head = o->next;
        if (!w->head)
            w->tail = NULL;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    ddl_scratch_free();
    return NULL;
}

static ddl_status_t be_post(const ddl_opdesc_t *d, void **h)
{
    worker_t *w = my_worker;
    op_t *o = calloc(1, sizeof *o);
    if (!o)
        return DDL_ERR_NOMEM;
    o->d = *d;
    pthread_mutex_lock(&w->mu);
    if (w->tail)
        w->tail->next = o;
    else
        w->head = o;
    w->tail = o;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    *h = o;
    return DDL_OK;
}

static ddl_status_t be_wait(void *h, double *run_us, uint64_t *bytes)
{
    worker_t *w = my_worker;
    op_t *o = h;
    pthread_mutex_lock(&w->mu);
    while (!o->done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    ddl_status_t st = o->st;
    if (st != DDL_OK)
        ddl_fail(st, "%s", o->err);
    if (run_us)
        *run_us = o->run_us;
    if (bytes)
        *bytes = o->bytes;
    free(o);
    return st;
}

static void be_release(void *h)
{
    (void)be_wait(h, NULL, NULL);
}

/* A plain alpha-beta model: 10 us per message, 1 GB/s. */
static double be_allreduce_us(const ddl_comm_t *c, size_t bytes)
{
    double p = c->size;
    return 2 * (p - 1) * 10 + 2 * (p - 1) / p * (double)bytes * 1e-3;
}
static double be_allgather_us(const ddl_comm_t *c, size_t bytes)
{
    return (c->size - 1) * (10 + (double)bytes * 1e-3);
}

static const ddl_gradx_backend_t backend = {be_post, be_wait, be_release, be_allreduce_us,
                                            be_allgather_us};

/* ---- worlds ---- */

typedef struct world world_t;
typedef struct {
    world_t *w;
    int rank;
    ddl_comm_t comm;
    worker_t wk;
    /* results */
    ddl_status_t st;
    char err[400];
    float *out[MAXL];
    int post_layers[64], post_ops[64], nposts;
    double abort_ms; /* abort test: from the abort to the wait's return */
    int sfb[MAXL];
    ddl_gradx_stats_t stats;
} rank_t;

typedef void (*body_t)(rank_t *r);

struct world {
    int n;
    ddl_loopback_t *lb;
    rank_t ranks[MAXR];
    body_t body;
    double abort_at; /* abort test: when the comms were aborted (us) */
};

static void *rank_main(void *p)
{
    rank_t *r = p;
    my_worker = &r->wk;
    r->w->body(r);
    pthread_mutex_lock(&r->wk.mu);
    r->wk.stop = 1;
    pthread_cond_broadcast(&r->wk.cv);
    pthread_mutex_unlock(&r->wk.mu);
    return NULL;
}

static void run_world(world_t *w, int n, body_t body)
{
    memset(w, 0, sizeof *w);
    w->n = n;
    w->body = body;
    w->lb = ddl_loopback_new(n, 64);
    pthread_t th[MAXR];
    for (int i = 0; i < n; i++) {
        rank_t *r = &w->ranks[i];
        r->w = w;
        r->rank = i;
        r->comm.rank = i;
        r->comm.size = n;
        r->comm.id = 9;
        r->comm.tl = ddl_loopback_tl(w->lb, i);
        atomic_init(&r->comm.aborted, 0);
        atomic_init(&r->comm.pending, 0);
        pthread_mutex_init(&r->wk.mu, NULL);
        pthread_cond_init(&r->wk.cv, NULL);
        pthread_create(&r->wk.th, NULL, worker_main, &r->wk);
    }
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, rank_main, &w->ranks[i]);
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        pthread_join(w->ranks[i].wk.th, NULL);
    }
    ddl_loopback_free(w->lb);
}

static void world_free(world_t *w)
{
    for (int i = 0; i < w->n; i++)
        for (int l = 0; l < MAXL; l++)
            free(w->ranks[i].out[l]);
}

/* ---- inputs ---- */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15u;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

/* value i of layer l on rank r (step s): exact ones are small integers */
static float input(int exact, int r, int l, size_t i, int s)
{
    uint64_t h = mix(((uint64_t)r << 48) ^ ((uint64_t)l << 40) ^ ((uint64_t)s << 32) ^ i);
    if (exact)
        return (float)((int)(h % 17) - 8);
    return (float)((double)(h >> 11) * 0x1.0p-53 * 2.0 - 1.0) * 1.37f;
}

/* ---- test: full matrices ---- */

static size_t layer_sizes[MAXL] = {3000, 7, 1000, 33, 1, 2500, 64, 5};
static int g_nlayers, g_exact, g_steps, g_avg;

static void body_full(rank_t *r)
{
    ddl_gradx_t *gx;
    r->st = ddl_gradx_create_with(&r->comm, g_avg ? DDL_AVG : DDL_SUM, &backend, &gx);
    for (int l = 0; r->st == DDL_OK && l < g_nlayers; l++)
        r->st = ddl_gradx_add_layer(gx, layer_sizes[l], NULL);
    if (r->st == DDL_OK)
        r->st = ddl_gradx_commit(gx);
    for (int l = 0; l < g_nlayers; l++)
        r->out[l] = malloc(layer_sizes[l] * sizeof(float));
    for (int s = 0; s < g_steps && r->st == DDL_OK; s++) {
        for (int l = g_nlayers - 1; l >= 0 && r->st == DDL_OK; l--) { /* backward */
            for (size_t i = 0; i < layer_sizes[l]; i++)
                r->out[l][i] = input(g_exact, r->rank, l, i, s);
            r->st = ddl_gradx_push(gx, l, r->out[l]);
        }
        for (int l = 0; l < g_nlayers && r->st == DDL_OK; l++)
            r->st = ddl_gradx_wait(gx, l);
    }
    if (r->st != DDL_OK)
        snprintf(r->err, sizeof r->err, "%s", ddl_last_error());
    else
        ddl_gradx_posts(gx, r->post_layers, r->post_ops, 64, &r->nposts);
    ddl_gradx_stats(gx, &r->stats);
    ddl_gradx_free(gx);
}

/* reference: each layer alone, through the same ring over a fresh world */
static float *g_ref[MAXL];
static void body_ref(rank_t *r)
{
    my_worker = &r->wk;
    for (int l = 0; l < g_nlayers; l++) {
        float *buf = malloc(layer_sizes[l] * sizeof(float));
        for (size_t i = 0; i < layer_sizes[l]; i++)
            buf[i] = input(g_exact, r->rank, l, i, g_steps - 1);
        ddl_opdesc_t d = {.kind = DDL_OPK_ALLREDUCE, .comm = &r->comm, .sendbuf = DDL_IN_PLACE,
                          .recvbuf = buf, .count = layer_sizes[l], .dtype = DDL_FLOAT32,
                          .op = g_avg ? DDL_AVG : DDL_SUM};
        void *h;
        if (be_post(&d, &h) == DDL_OK && be_wait(h, NULL, NULL) == DDL_OK && r->rank == 0)
            g_ref[l] = buf;
        else
            free(buf);
    }
}

static void check_full(int n, const char *fusion, int exact, int avg, int steps, int want_bits)
{
    world_t w, ref;
    setenv("DDL_FUSION_BYTES", fusion, 1);
    g_nlayers = MAXL;
    g_exact = exact;
    g_steps = steps;
    g_avg = avg;
    run_world(&w, n, body_full);
    run_world(&ref, n, body_ref);
    int st_ok = 1, bits = 1, same = 1, close = 1;
    for (int i = 0; i < n; i++) {
        if (w.ranks[i].st != DDL_OK) {
            st_ok = 0;
            diag("rank %d: %s: %s", i, ddl_status_str(w.ranks[i].st), w.ranks[i].err);
        }
    }
    if (st_ok)
        for (int l = 0; l < MAXL; l++) {
            if (!g_ref[l]) {
                bits = close = 0;
                continue;
            }
            for (int i = 0; i < n; i++) {
                if (memcmp(w.ranks[i].out[l], w.ranks[0].out[l], layer_sizes[l] * 4))
                    same = 0;
                if (memcmp(w.ranks[i].out[l], g_ref[l], layer_sizes[l] * 4))
                    bits = 0;
                for (size_t k = 0; k < layer_sizes[l]; k++)
                    if (fabsf(w.ranks[i].out[l][k] - g_ref[l][k]) >
                        1e-5f * (1.0f + fabsf(g_ref[l][k])))
                        close = 0;
            }
        }
    ok(st_ok, "%d ranks, DDL_FUSION_BYTES=%s, %s inputs, %s, %d steps: every push and wait "
       "succeeds", n, fusion, exact ? "exact" : "random", avg ? "avg" : "sum", steps);
    if (want_bits)
        ok(st_ok && bits, "  every layer bit-identical to one allreduce of that layer alone");
    else
        ok(st_ok && close, "  every layer equal to one allreduce of that layer within rounding");
    ok(st_ok && same, "  the same bits on every rank");
    ok(w.ranks[0].stats.steps == (uint64_t)steps, "  %llu steps counted",
       (unsigned long long)w.ranks[0].stats.steps);
    for (int l = 0; l < MAXL; l++) {
        free(g_ref[l]);
        g_ref[l] = NULL;
    }
    world_free(&w);
}

/* posts: the operations of the last step, "[0 1] [2]" */
static void posts_str(const rank_t *r, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < r->nposts && o < cap; i++) {
        int first = i == 0 || r->post_ops[i] != r->post_ops[i - 1];
        int last = i == r->nposts - 1 || r->post_ops[i + 1] != r->post_ops[i];
        o += (size_t)snprintf(buf + o, cap - o, "%s%s%d%s", first && i ? " " : "",
                              first ? "[" : "", r->post_layers[i], last ? "]" : " ");
    }
}

static void check_buckets(void)
{
    world_t w;
    char got[256];
    g_exact = 1;
    g_steps = 2;
    g_avg = 0;
    /* sizes 3000 7 1000 33 1 2500 64 5 (x 4 bytes), pushed 7..0 */
    setenv("DDL_FUSION_BYTES", "0", 1);
    g_nlayers = MAXL;
    run_world(&w, 2, body_full);
    posts_str(&w.ranks[0], got, sizeof got);
    is_str(got, "[7] [6] [5] [4] [3] [2] [1] [0]", "no fusion: one allreduce per layer, in push order");
    world_free(&w);

    setenv("DDL_FUSION_BYTES", "1048576", 1);
    run_world(&w, 2, body_full);
    posts_str(&w.ranks[0], got, sizeof got);
    is_str(got, "[0 1 2 3 4 5 6 7]", "1 MiB buckets: every layer in one allreduce, in priority "
           "order");
    ok(w.ranks[0].stats.operations == 2, "  one operation per step (%llu in 2 steps)",
       (unsigned long long)w.ranks[0].stats.operations);
    world_free(&w);

    /* 4096 bytes: 5 and 64 values (276 B) open a bucket, 2500 (10000 B)
     * goes alone, 1, 33 and 1000 (4000 B) fill the bucket, 7 opens the next,
     * 3000 (12000 B) goes alone at the last push */
    setenv("DDL_FUSION_BYTES", "4096", 1);
    run_world(&w, 2, body_full);
    posts_str(&w.ranks[0], got, sizeof got);
    is_str(got, "[5] [2 3 4 6 7] [0] [1]",
           "4 KiB buckets: a large layer alone as it comes, the open bucket posted once it "
           "holds 4 KiB; at the last push, layer 0 goes before the open bucket holding "
           "layer 1 (priority)");
    world_free(&w);

    setenv("DDL_FUSION_BYTES", "40", 1);
    g_nlayers = 2; /* layers 0 (3000) and 1 (7: 28 B) */
    run_world(&w, 3, body_full);
    posts_str(&w.ranks[0], got, sizeof got);
    is_str(got, "[0] [1]", "2 layers, 40-byte buckets: the small one waits in the open bucket, "
           "the large one (higher priority) goes first");
    world_free(&w);
}

/* ---- test: sufficient factors ---- */

typedef struct {
    int rows, cols, batch, mode;
} fc_t;
static fc_t g_fc[2] = {{96, 80, 5, DDL_GRADX_SFB}, {40, 24, 9, DDL_GRADX_FULL}};
static int g_batch_of[MAXR] = {5, 3, 5, 4}; /* rank r's samples, at most batch */

static void factors(int r, int l, int s, float **a, float **d)
{
    const fc_t *f = &g_fc[l];
    int b = g_batch_of[r] * f->batch / 5;
    *a = malloc((size_t)(b + 1) * (size_t)f->rows * sizeof(float));
    *d = malloc((size_t)(b + 1) * (size_t)f->cols * sizeof(float));
    for (size_t i = 0; i < (size_t)b * (size_t)f->rows; i++)
        (*a)[i] = input(0, r, l, i, s);
    for (size_t i = 0; i < (size_t)b * (size_t)f->cols; i++)
        (*d)[i] = input(0, r, l + 10, i, s);
}

static void gemm_ref(int rows, int cols, int k, const float *a, const float *d, float *g)
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
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < cols; j++)
                g[(size_t)i * cols + j] += a[(size_t)s * rows + i] * d[(size_t)s * cols + j];
}

static void body_sfb(rank_t *r)
{
    ddl_gradx_t *gx;
    int bias;
    r->st = ddl_gradx_create_with(&r->comm, g_avg ? DDL_AVG : DDL_SUM, &backend, &gx);
    for (int l = 0; r->st == DDL_OK && l < 2; l++)
        r->st = ddl_gradx_add_fc(gx, g_fc[l].rows, g_fc[l].cols, g_fc[l].batch, g_fc[l].mode,
                                 NULL);
    if (r->st == DDL_OK)
        r->st = ddl_gradx_add_layer(gx, 24, &bias);
    if (r->st == DDL_OK)
        r->st = ddl_gradx_commit(gx);
    for (int l = 0; l < 2; l++) {
        r->out[l] = malloc((size_t)g_fc[l].rows * g_fc[l].cols * sizeof(float));
        r->sfb[l] = ddl_gradx_layer_sfb(gx, l);
    }
    r->out[2] = malloc(24 * sizeof(float));
    for (int s = 0; s < 2 && r->st == DDL_OK; s++) {
        for (int i = 0; i < 24; i++)
            r->out[2][i] = input(1, r->rank, 2, (size_t)i, s);
        r->st = ddl_gradx_push(gx, bias, r->out[2]);
        for (int l = 1; l >= 0 && r->st == DDL_OK; l--) {
            float *a, *d;
            factors(r->rank, l, s, &a, &d);
            r->st = ddl_gradx_push_factors(gx, l, a, d, g_batch_of[r->rank] * g_fc[l].batch / 5,
                                           r->out[l]);
            free(a); /* copied by the push */
            free(d);
        }
        for (int l = 0; l < 3 && r->st == DDL_OK; l++)
            r->st = ddl_gradx_wait(gx, l);
    }
    if (r->st != DDL_OK)
        snprintf(r->err, sizeof r->err, "%s", ddl_last_error());
    ddl_gradx_stats(gx, &r->stats);
    ddl_gradx_free(gx);
}

static void check_sfb(int n)
{
    world_t w;
    setenv("DDL_FUSION_BYTES", "1048576", 1);
    g_avg = n == 3;
    run_world(&w, n, body_sfb);
    int st_ok = 1;
    for (int i = 0; i < n; i++)
        if (w.ranks[i].st != DDL_OK) {
            st_ok = 0;
            diag("rank %d: %s: %s", i, ddl_status_str(w.ranks[i].st), w.ranks[i].err);
        }
    ok(st_ok, "%d ranks, %s: factors pushed and waited for, 2 steps", n, g_avg ? "avg" : "sum");
    ok(w.ranks[0].sfb[0] == 1 && w.ranks[0].sfb[1] == 0,
       "  layer 0 (DDL_GRADX_SFB) travels as factors, layer 1 (DDL_GRADX_FULL) as a matrix");
    for (int l = 0; l < 2 && st_ok; l++) {
        const fc_t *f = &g_fc[l];
        const size_t mb = (size_t)f->batch, m = (size_t)f->rows, c = (size_t)f->cols;
        const size_t cnt = m * c;
        /* every rank's factors, padded, in rank order: the rebuild's GEMM */
        float *A = calloc((size_t)n * mb * m, sizeof(float));
        float *D = calloc((size_t)n * mb * c, sizeof(float));
        float *ref = calloc(cnt, sizeof(float)), *sum = calloc(cnt, sizeof(float));
        float *one = calloc(cnt, sizeof(float));
        for (int r = 0; r < n; r++) {
            float *a, *d;
            int b = g_batch_of[r] * f->batch / 5;
            factors(r, l, 1, &a, &d);
            memcpy(A + (size_t)r * mb * m, a, (size_t)b * m * sizeof(float));
            memcpy(D + (size_t)r * mb * c, d, (size_t)b * c * sizeof(float));
            gemm_ref(f->rows, f->cols, b, a, d, one);
            for (size_t k = 0; k < cnt; k++)
                sum[k] += one[k];
            free(a);
            free(d);
        }
        gemm_ref(f->rows, f->cols, (int)(n * mb), A, D, ref);
        if (g_avg)
            ddl_scale_local(ref, cnt, DDL_FLOAT32, n);
        if (g_avg)
            ddl_scale_local(sum, cnt, DDL_FLOAT32, n);
        int same = 1, bits = 1, close = 1;
        for (int r = 0; r < n; r++) {
            same &= !memcmp(w.ranks[r].out[l], w.ranks[0].out[l], cnt * 4);
            bits &= !memcmp(w.ranks[r].out[l], ref, cnt * 4);
            for (size_t k = 0; k < cnt; k++)
                close &= fabsf(w.ranks[r].out[l][k] - sum[k]) <= 1e-4f * (1 + fabsf(sum[k]));
        }
        ok(same, "  layer %d: the same bits on every rank", l);
        if (l == 0)
            ok(bits, "  layer 0: bit-identical to the GEMM over every rank's factors in rank "
               "order");
        ok(close, "  layer %d: equal to the sum of the ranks' gradients within rounding", l);
        free(A);
        free(D);
        free(ref);
        free(sum);
        free(one);
    }
    if (st_ok && n > 1) {
        /* model bytes: layer 0 allgather (n-1) * 4 * 5 * (96 + 80); layer 1
         * and the bias: ring 2 (n-1)/n * 4 * (960 + 24) */
        double want = (n - 1) * 4.0 * 5 * 176 + 2.0 * (n - 1) / n * 4 * (960 + 24);
        ok(fabs((double)w.ranks[0].stats.model_bytes - want) < 2,
           "  the model's bytes per step: %llu (expected %.0f)",
           (unsigned long long)w.ranks[0].stats.model_bytes, want);
        double per = (double)w.ranks[0].stats.bytes_sent / 2;
        ok(fabs(per - want) <= 0.1 * want, "  bytes sent per step %.0f, within 10%% of the model",
           per);
    }
    world_free(&w);
}

/* auto: the cost model decides (1 GB/s, 10 us per message here) */
static void body_auto(rank_t *r)
{
    ddl_gradx_t *gx;
    r->st = ddl_gradx_create_with(&r->comm, DDL_SUM, &backend, &gx);
    if (r->st == DDL_OK)
        r->st = ddl_gradx_add_fc(gx, 2048, 2048, 1, DDL_GRADX_AUTO, NULL);
    if (r->st == DDL_OK)
        r->st = ddl_gradx_add_fc(gx, 8, 8, 256, DDL_GRADX_AUTO, NULL);
    if (r->st == DDL_OK)
        r->st = ddl_gradx_commit(gx);
    r->sfb[0] = ddl_gradx_layer_sfb(gx, 0);
    r->sfb[1] = ddl_gradx_layer_sfb(gx, 1);
    ddl_gradx_free(gx);
}

static void check_auto(void)
{
    world_t w;
    unsetenv("DDL_SFB");
    /* a GEMM of about 4 GFLOP/s on every rank: a rank that a loaded machine
     * descheduled while it timed its own would tip the choice */
    ddl_gradx_test_gemm_us = 500;
    run_world(&w, 4, body_auto);
    ddl_gradx_test_gemm_us = 0;
    ok(w.ranks[0].st == DDL_OK && w.ranks[0].sfb[0] == 1 && w.ranks[0].sfb[1] == 0,
       "DDL_SFB=auto: a 2048 x 2048 layer with 1 sample per rank sends factors, an 8 x 8 one "
       "with 256 the matrix");
    int same = 1;
    for (int i = 1; i < 4; i++)
        same &= w.ranks[i].sfb[0] == w.ranks[0].sfb[0] && w.ranks[i].sfb[1] == w.ranks[0].sfb[1];
    ok(same, "  every rank decides the same");
    setenv("DDL_SFB", "off", 1);
    run_world(&w, 4, body_auto);
    ok(w.ranks[0].sfb[0] == 0 && w.ranks[0].sfb[1] == 0, "DDL_SFB=off: no layer sends factors");
    setenv("DDL_SFB", "on", 1);
    run_world(&w, 4, body_auto);
    ok(w.ranks[0].sfb[0] == 1 && w.ranks[0].sfb[1] == 1, "DDL_SFB=on: every FC layer does");
    unsetenv("DDL_SFB");
}

/* ---- test: abort ---- */

static void *abort_all(void *p)
{
    world_t *w = p;
    usleep(200000);
    w->abort_at = now_us();
    for (int i = 0; i < w->n; i++) {
        ddl_comm_t *c = &w->ranks[i].comm;
        snprintf(c->abort_reason, sizeof c->abort_reason, "test abort");
        atomic_store(&c->aborted, 1);
    }
    return NULL;
}

static void body_abort(rank_t *r)
{
    ddl_gradx_t *gx;
    pthread_t th;
    const int last = r->rank == r->w->n - 1;
    if (r->rank == 0)
        pthread_create(&th, NULL, abort_all, r->w);
    r->st = ddl_gradx_create_with(&r->comm, DDL_SUM, &backend, &gx);
    for (int l = 0; r->st == DDL_OK && l < 3; l++)
        r->st = ddl_gradx_add_layer(gx, 5000, NULL);
    if (r->st == DDL_OK)
        r->st = ddl_gradx_commit(gx);
    for (int l = 0; l < 3; l++)
        r->out[l] = calloc(5000, sizeof(float));
    /* the last rank hands layer 0 over only after the abort: the others
     * wait for it meanwhile */
    for (int l = 2; l >= (last ? 1 : 0) && r->st == DDL_OK; l--)
        r->st = ddl_gradx_push(gx, l, r->out[l]);
    if (last) {
        while (!atomic_load(&r->comm.aborted))
            usleep(1000);
    }
    if (r->st == DDL_OK && (!last || ddl_gradx_push(gx, 0, r->out[0]) == DDL_OK))
        r->st = ddl_gradx_wait(gx, 0);
    r->abort_ms = (now_us() - r->w->abort_at) / 1e3;
    snprintf(r->err, sizeof r->err, "%s", ddl_last_error());
    if (ddl_gradx_wait(gx, 1) != r->st) /* the exchange stays failed */
        r->st = DDL_ERR_INTERNAL;
    ddl_gradx_free(gx);
    if (r->rank == 0)
        pthread_join(th, NULL);
}

static void check_abort(int n)
{
    world_t w;
    setenv("DDL_FUSION_BYTES", "0", 1);
    run_world(&w, n, body_abort);
    int all = 1;
    double worst = 0;
    for (int i = 0; i < n; i++) {
        all &= w.ranks[i].st == DDL_ERR_ABORTED && strstr(w.ranks[i].err, "test abort");
        worst = fmax(worst, w.ranks[i].abort_ms);
        if (w.ranks[i].st != DDL_ERR_ABORTED)
            diag("rank %d: %s: %s", i, ddl_status_str(w.ranks[i].st), w.ranks[i].err);
    }
    ok(all, "%d ranks, a peer late, the communicators aborted: every rank's wait returns "
       "DDL_ERR_ABORTED, and so does every later call (\"%s\")", n, w.ranks[0].err);
    ok(worst < 1000, "  within 1 s of the abort on every rank (slowest %.1f ms)", worst);
    world_free(&w);
}

/* ---- test: bad registrations ---- */

static void body_bad_alone(rank_t *r)
{
    ddl_gradx_t *gx;
    int plain;
    float g[4] = {0}, a[4] = {0};
    ddl_status_t st = ddl_gradx_create_with(&r->comm, DDL_MAX, &backend, &gx);
    is(st, DDL_ERR_INVALID, "op DDL_MAX refused: %s", ddl_last_error());
    ddl_gradx_create_with(&r->comm, DDL_SUM, &backend, &gx);
    st = ddl_gradx_add_layer(gx, 0, NULL);
    is(st, DDL_ERR_INVALID, "a layer of size 0 refused: %s", ddl_last_error());
    ok(strstr(ddl_last_error(), "size 0") != NULL, "  the text says so");
    st = ddl_gradx_add_fc(gx, 4, 0, 1, DDL_GRADX_AUTO, NULL);
    is(st, DDL_ERR_INVALID, "an FC layer of 4 x 0 refused: %s", ddl_last_error());
    st = ddl_gradx_commit(gx);
    is(st, DDL_ERR_INVALID, "a commit without layers refused: %s", ddl_last_error());
    ddl_gradx_add_layer(gx, 4, &plain);
    st = ddl_gradx_push(gx, plain, g);
    is(st, DDL_ERR_INVALID, "a push before the commit refused: %s", ddl_last_error());
    is(ddl_gradx_commit(gx), DDL_OK, "a world of one commits");
    st = ddl_gradx_push_factors(gx, plain, a, a, 1, g);
    is(st, DDL_ERR_INVALID, "factors for a layer registered without a shape refused: %s",
       ddl_last_error());
    ok(strstr(ddl_last_error(), "without a shape") != NULL, "  the text says so");
    st = ddl_gradx_wait(gx, plain);
    is(st, DDL_ERR_INVALID, "a wait for a layer not pushed refused: %s", ddl_last_error());
    st = ddl_gradx_push(gx, 7, g);
    is(st, DDL_ERR_INVALID, "layer 7 of 1 refused: %s", ddl_last_error());
    is(ddl_gradx_push(gx, plain, g), DDL_OK, "a push");
    st = ddl_gradx_push(gx, plain, g);
    is(st, DDL_ERR_INVALID, "the same layer twice in a step refused: %s", ddl_last_error());
    is(ddl_gradx_wait(gx, plain), DDL_OK, "its wait");
    ddl_gradx_free(gx);
}

static void body_mismatch(rank_t *r)
{
    ddl_gradx_t *gx;
    r->st = ddl_gradx_create_with(&r->comm, DDL_SUM, &backend, &gx);
    ddl_gradx_add_layer(gx, 100, NULL);
    if (r->rank == 1)
        ddl_gradx_add_fc(gx, 10, 20, 4, DDL_GRADX_AUTO, NULL);
    else
        ddl_gradx_add_fc(gx, 20, 10, 4, DDL_GRADX_AUTO, NULL);
    r->st = ddl_gradx_commit(gx);
    snprintf(r->err, sizeof r->err, "%s", ddl_last_error());
    ddl_gradx_free(gx);
}

static void check_bad(void)
{
    world_t w;
    run_world(&w, 1, body_bad_alone);
    run_world(&w, 3, body_mismatch);
    int all = 1;
    for (int i = 0; i < 3; i++)
        all &= w.ranks[i].st == DDL_ERR_INVALID && strstr(w.ranks[i].err, "different layers");
    ok(all, "3 ranks, rank 1 registers a 10 x 20 layer where the others have 20 x 10: every "
       "rank's commit fails: %s", w.ranks[0].err);
}

int main(void)
{
    plan(NO_PLAN);
    ddl_log_init("t_gradx", DDL_LOG_WARN);
    unsetenv("DDL_SFB");
    check_bad();
    check_buckets();
    for (int n = 1; n <= 4; n++) {
        check_full(n, "0", 0, 0, 2, 1);             /* alone: the same call's bits */
        check_full(n, "1048576", 1, 0, 2, 1);       /* fused, exact inputs */
        check_full(n, "4096", 0, n == 3, 3, n < 3); /* fused, random: exact for n <= 2 */
    }
    for (int n = 1; n <= 4; n++)
        check_sfb(n);
    check_auto();
    for (int n = 2; n <= 4; n++)
        check_abort(n);
    ddl_scratch_free();
    return done_testing();
}
