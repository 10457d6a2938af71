/* t_algos.c: every collective algorithm of libddl, run without UCX over the
 * loopback transport (collectives/transport_loopback.c): the ranks of a
 * world of 1 to 8 are threads of this process.  Each world runs a list of
 * jobs in order on the same communicators (as a program would): the four
 * allreduce algorithms (ring, recursive doubling, Rabenseifner, and the
 * two-level algorithm on every node shape the world allows) for every
 * offered type and op, the two broadcasts from several roots, the ring's
 * reduce-scatter, allgather and reduce (in place and not), and the
 * dissemination barrier; each with counts 0, 1, 2, 7, 33, 1000 and 4099,
 * under the default segments and under 64-byte segments with a window of
 * 3 (many segments per block), messages above 64 bytes staying in the
 * sender's buffer until received.
 *
 * Results are checked against a serial reference (reduce.c's kernels over
 * the ranks in order): bit for bit where the inputs make every order of
 * reduction exact (small integers, powers of two, integer types: every
 * algorithm must then give the reference's bits); with random floats, sums
 * must agree within rounding and allreduce must give the same bits on every
 * rank.  Also: a wait on a receive that never comes returns DDL_ERR_ABORTED
 * once the communicator is aborted, calling the transport's idle hook
 * meanwhile, and a message longer than its receive fails it.
 *
 * Built with collectives/noucx first on the include path (see
 * collectives/local.mk): no UCX header is reachable from here or from the
 * algorithms it links. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddl_int.h"
#include "log.h"
#include "transport_loopback.h"
#include "../tap.h"

enum { K_ALLREDUCE, K_BCAST, K_REDUCE_SCATTER, K_ALLGATHER, K_REDUCE, K_BARRIER };
enum { A_RING, A_RD, A_RABENSEIFNER, A_HIER, A_BINOMIAL, A_CHAIN };
static const char *const kind_name[] = {"allreduce", "bcast",  "reduce_scatter",
                                        "allgather", "reduce", "barrier"};
static const char *const algo_name[] = {"ring", "rd", "rabenseifner", "hier", "binomial", "chain"};
static const char *const type_name[] = {"f32", "f64", "i32", "i64", "f16", "bf16", "u8"};
static const char *const op_name[] = {"sum", "prod", "min", "max", "avg"};

static const size_t counts[] = {0, 1, 2, 7, 33, 1000, 4099};
#define NCOUNTS (sizeof counts / sizeof counts[0])
#define MAX_SHAPES 2 /* node shapes of one world for the two-level algorithm */

typedef struct {
    int kind, algo, shape; /* shape: index into the world's node shapes (hier) */
    int exact;             /* inputs make every reduction order exact */
    ddl_dtype_t dt;
    ddl_op_t op;
    size_t count; /* elements (per rank's block for reduce-scatter, allgather) */
    int root, in_place;
    unsigned char **in, **out; /* per rank */
    unsigned char *ref;        /* expected result (reductions) */
    size_t out_bytes;
    ddl_status_t *st;
    char (*err)[200];
    atomic_int arrived; /* barrier: ranks that reached it */
    int *saw_all;       /* barrier: per rank, all had arrived when it left */
} job_t;

typedef struct {
    int n, nshapes, nodes[MAX_SHAPES];
    ddl_loopback_t *lb;
    job_t *jobs;
    int njobs;
} world_t;

typedef struct {
    world_t *w;
    int rank;
} rank_arg_t;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* put: element i of buf (type dt) = v. */
static void put(void *buf, size_t i, ddl_dtype_t dt, double v, uint64_t bits)
{
    switch (dt) {
    case DDL_FLOAT32:
        ((float *)buf)[i] = (float)v;
        break;
    case DDL_FLOAT64:
        ((double *)buf)[i] = v;
        break;
    case DDL_INT32:
        ((uint32_t *)buf)[i] = (uint32_t)bits;
        break;
    case DDL_INT64:
        ((uint64_t *)buf)[i] = bits;
        break;
    case DDL_FLOAT16:
        ((uint16_t *)buf)[i] = ddl_float_to_half((float)v);
        break;
    case DDL_BFLOAT16:
        ((uint16_t *)buf)[i] = ddl_float_to_bf16((float)v);
        break;
    case DDL_UINT8:
        ((uint8_t *)buf)[i] = (uint8_t)bits;
        break;
    }
}

static double get(const void *buf, size_t i, ddl_dtype_t dt)
{
    switch (dt) {
    case DDL_FLOAT32:
        return ((const float *)buf)[i];
    case DDL_FLOAT64:
        return ((const double *)buf)[i];
    case DDL_FLOAT16:
        return ddl_half_to_float(((const uint16_t *)buf)[i]);
    case DDL_BFLOAT16:
        return ddl_bf16_to_float(((const uint16_t *)buf)[i]);
    default:
        return 0;
    }
}

static int is_float(ddl_dtype_t dt)
{
    return dt == DDL_FLOAT32 || dt == DDL_FLOAT64 || dt == DDL_FLOAT16 || dt == DDL_BFLOAT16;
}

/* fill: count elements of rank-specific input.  Exact: small integers for
 * sums, min and max (every partial sum of 8 fits even bfloat16's 8 bits),
 * +-1, +-2, +-0.5 for products; integers take any bits (they wrap).
 * Otherwise uniform in [-1, 1). */
static void fill(void *buf, size_t count, ddl_dtype_t dt, ddl_op_t op, int exact)
{
    static const double prod_vals[] = {1, -1, 2, -2, 0.5, -0.5};
    for (size_t i = 0; i < count; i++) {
        uint64_t b = rnd();
        double v;
        if (!exact)
            v = (double)(b >> 11) / 9007199254740992.0 * 2 - 1;
        else if (op == DDL_PROD)
            v = prod_vals[b % 6];
        else
            v = (double)((int)(b % 9) - 4);
        if (exact && v == 0)
            v = 0; /* never -0: min and max of -0 and +0 depend on the order */
        put(buf, i, dt, v, b);
    }
}

/* reference: the reduction of in[0..n) in rank order, in the element
 * type, avg scaled at the end. */
static void reference(unsigned char *ref, unsigned char **in, int n, size_t off, size_t count,
                      ddl_dtype_t dt, ddl_op_t op)
{
    size_t es = ddl_dtype_size(dt);
    memcpy(ref, in[0] + off * es, count * es);
    for (int r = 1; r < n; r++)
        ddl_reduce_local(ref, in[r] + off * es, count, dt, op == DDL_AVG ? DDL_SUM : op);
    if (op == DDL_AVG)
        ddl_scale_local(ref, count, dt, n);
}

static void comm_set(ddl_comm_t *c, int rank, int size, uint16_t id, int *world_ranks, ddl_tl_t *tl)
{
    memset(c, 0, sizeof *c);
    c->rank = rank;
    c->size = size;
    c->id = id;
    c->world_ranks = world_ranks;
    c->tl = tl;
    atomic_init(&c->aborted, 0);
    atomic_init(&c->pending, 0);
}

/* The choice functions that name one algorithm each (select.c's cost model
 * is what the library passes instead). */
static ddl_algo_t pick_ring(const ddl_comm_t *c, size_t b)
{
    (void)c, (void)b;
    return DDL_ALGO_RING;
}
static ddl_algo_t pick_rd(const ddl_comm_t *c, size_t b)
{
    (void)c, (void)b;
    return DDL_ALGO_RD;
}
static ddl_algo_t pick_rab(const ddl_comm_t *c, size_t b)
{
    (void)c, (void)b;
    return DDL_ALGO_RABENSEIFNER;
}
static ddl_algo_t pick_hier(const ddl_comm_t *c, size_t b)
{
    (void)c, (void)b;
    return DDL_ALGO_HIER;
}
static ddl_bcast_algo_t pick_binomial(const ddl_comm_t *c, size_t b)
{
    (void)c, (void)b;
    return DDL_BCAST_BINOMIAL;
}
static ddl_bcast_algo_t pick_chain(const ddl_comm_t *c, size_t b)
{
    (void)c, (void)b;
    return DDL_BCAST_CHAIN;
}

/* run_job: rank r's part of job j, through ddl_dispatch as coll.c runs it. */
static ddl_status_t run_job(job_t *j, int r, ddl_comm_t *world, ddl_comm_t *node, ddl_comm_t *cross)
{
    static const ddl_opkind_t kinds[] = {DDL_OPK_ALLREDUCE, DDL_OPK_BCAST,  DDL_OPK_REDUCE_SCATTER,
                                         DDL_OPK_ALLGATHER, DDL_OPK_REDUCE, DDL_OPK_BARRIER};
    const int n = world->size;
    const size_t es = j->kind == K_BARRIER ? 1 : ddl_dtype_size(j->dt), bytes = j->count * es;
    unsigned char *in = j->in[r], *out = j->out[r];
    ddl_dispatch_t how = {
        .allreduce = j->algo == A_RD             ? pick_rd
                     : j->algo == A_RABENSEIFNER ? pick_rab
                     : j->algo == A_HIER         ? pick_hier
                                                 : pick_ring,
        .bcast = j->algo == A_CHAIN ? pick_chain : pick_binomial,
        .node = &node[j->shape],
        .cross = &cross[j->shape],
        .world_size = n,
    };
    ddl_opdesc_t d = {.kind = kinds[j->kind],
                      .comm = world,
                      .sendbuf = in,
                      .recvbuf = out,
                      .count = j->count,
                      .dtype = j->dt,
                      .op = j->op,
                      .root = j->root};
    switch (j->kind) {
    case K_BCAST:
        if (r == j->root)
            memcpy(out, in, bytes);
        break;
    case K_REDUCE_SCATTER:
        if (j->in_place) {
            memcpy(out, in, bytes * (size_t)n);
            d.sendbuf = DDL_IN_PLACE;
        }
        break;
    case K_ALLGATHER:
        if (j->in_place) {
            memcpy(out + (size_t)r * bytes, in, bytes);
            d.sendbuf = DDL_IN_PLACE;
        }
        break;
    case K_ALLREDUCE:
    case K_REDUCE:
        if (j->in_place && (j->kind == K_ALLREDUCE || r == j->root)) {
            memcpy(out, in, bytes);
            d.sendbuf = DDL_IN_PLACE;
        }
        break;
    case K_BARRIER: {
        usleep((useconds_t)(r * 300));
        atomic_fetch_add(&j->arrived, 1);
        ddl_status_t st = ddl_dispatch(&d, &how);
        j->saw_all[r] = atomic_load(&j->arrived) == n;
        return st;
    }
    }
    return ddl_dispatch(&d, &how);
}

static void *rank_main(void *p)
{
    rank_arg_t *a = p;
    world_t *w = a->w;
    const int r = a->rank, n = w->n;
    ddl_tl_t *tl = ddl_loopback_tl(w->lb, r);
    ddl_comm_t world, node[MAX_SHAPES], cross[MAX_SHAPES];
    int node_ranks[MAX_SHAPES][8], cross_ranks[MAX_SHAPES][8];
    comm_set(&world, r, n, DDL_COMM_ID_WORLD, NULL, tl);
    for (int s = 0; s < w->nshapes; s++) {
        /* nodes of L consecutive ranks; cross: the ranks of my local rank */
        const int nodes = w->nodes[s], L = n / nodes, me_node = r / L, q = r % L;
        for (int i = 0; i < L; i++)
            node_ranks[s][i] = me_node * L + i;
        for (int i = 0; i < nodes; i++)
            cross_ranks[s][i] = i * L + q;
        comm_set(&node[s], q, L, (uint16_t)(1 + 2 * s), node_ranks[s], tl);
        comm_set(&cross[s], me_node, nodes, (uint16_t)(2 + 2 * s), cross_ranks[s], tl);
    }
    for (int i = 0; i < w->njobs; i++) {
        job_t *j = &w->jobs[i];
        ddl_clear_error();
        j->st[r] = run_job(j, r, &world, node, cross);
        if (j->st[r] != DDL_OK)
            snprintf(j->err[r], sizeof j->err[r], "%s", ddl_last_error());
    }
    ddl_scratch_free();
    return NULL;
}

static job_t *add_job(world_t *w, int kind, int algo, ddl_dtype_t dt, ddl_op_t op, size_t count)
{
    w->jobs = realloc(w->jobs, (size_t)(w->njobs + 1) * sizeof *w->jobs);
    if (!w->jobs)
        BAIL_OUT("out of memory");
    job_t *j = &w->jobs[w->njobs++];
    memset(j, 0, sizeof *j);
    j->kind = kind;
    j->algo = algo;
    j->dt = dt;
    j->op = op;
    j->count = count;
    j->exact = 1;
    return j;
}

/* alloc_bufs: inputs of in_elems, outputs of out_elems per rank. */
static void alloc_bufs(world_t *w, job_t *j, size_t in_elems, size_t out_elems)
{
    const int n = w->n;
    const size_t es = j->kind == K_BARRIER ? 1 : ddl_dtype_size(j->dt);
    j->in = calloc((size_t)n, sizeof *j->in);
    j->out = calloc((size_t)n, sizeof *j->out);
    j->st = calloc((size_t)n, sizeof *j->st);
    j->err = calloc((size_t)n, sizeof *j->err);
    j->saw_all = calloc((size_t)n, sizeof *j->saw_all);
    j->out_bytes = out_elems * es;
    if (!j->in || !j->out || !j->st || !j->err || !j->saw_all)
        BAIL_OUT("out of memory");
    for (int r = 0; r < n; r++) {
        j->in[r] = malloc(in_elems * es + 1);
        j->out[r] = malloc(out_elems * es + 1);
        if (!j->in[r] || !j->out[r])
            BAIL_OUT("out of memory");
        fill(j->in[r], in_elems, j->dt, j->op, j->exact);
        memset(j->out[r], 0xa5, out_elems * es + 1);
    }
}

static void free_job(world_t *w, job_t *j)
{
    for (int r = 0; j->in && r < w->n; r++) {
        free(j->in[r]);
        free(j->out[r]);
    }
    free(j->in);
    free(j->out);
    free(j->ref);
    free(j->st);
    free(j->err);
    free(j->saw_all);
}

/* close_enough: |a - b| within what rounding a sum of n values in
 * [-1, 1) in this type may lose (relative to the operands). */
static int close_enough(const unsigned char *a, const unsigned char *b, size_t count,
                        ddl_dtype_t dt, int n)
{
    const double eps = dt == DDL_FLOAT64   ? 1e-15
                       : dt == DDL_FLOAT32 ? 1e-6
                       : dt == DDL_FLOAT16 ? 1e-3
                                           : 8e-3;
    for (size_t i = 0; i < count; i++)
        if (fabs(get(a, i, dt) - get(b, i, dt)) > 4 * n * eps)
            return 0;
    return 1;
}

/* check_job: NULL if job j's results are right, else what is wrong. */
static const char *check_job(world_t *w, job_t *j, char *why, size_t cap)
{
    const int n = w->n;
    const size_t es = j->kind == K_BARRIER ? 1 : ddl_dtype_size(j->dt), bytes = j->count * es;
    for (int r = 0; r < n; r++)
        if (j->st[r] != DDL_OK) {
            snprintf(why, cap, "rank %d: %s: %s", r, ddl_status_str(j->st[r]), j->err[r]);
            return why;
        }
    for (int r = 0; r < n; r++) {
        const unsigned char *got = j->out[r], *want = NULL;
        size_t len = bytes, off = 0;
        switch (j->kind) {
        case K_ALLREDUCE:
            want = j->ref;
            if (!j->exact && memcmp(got, j->out[0], bytes) != 0) {
                snprintf(why, cap, "rank %d's bits differ from rank 0's", r);
                return why;
            }
            break;
        case K_BCAST:
            want = j->in[j->root];
            break;
        case K_REDUCE_SCATTER:
            want = j->ref + (size_t)r * bytes;
            break;
        case K_ALLGATHER:
            for (int b = 0; b < n; b++)
                if (memcmp(got + (size_t)b * bytes, j->in[b], bytes) != 0) {
                    snprintf(why, cap, "rank %d: block %d differs", r, b);
                    return why;
                }
            continue;
        case K_REDUCE:
            if (r != j->root)
                continue;
            want = j->ref;
            break;
        case K_BARRIER:
            if (!j->saw_all[r]) {
                snprintf(why, cap, "rank %d left the barrier before every rank reached it", r);
                return why;
            }
            continue;
        }
        if (j->exact || !is_float(j->dt) ? memcmp(got + off, want, len) != 0
                                         : !close_enough(got + off, want, j->count, j->dt, n)) {
            size_t e = 0;
            while (e + 1 < j->count && !memcmp(got + e * es, want + e * es, es))
                e++;
            snprintf(why, cap, "rank %d: element %zu differs from the reference%s", r, e,
                     j->exact ? " (bit for bit)" : "");
            return why;
        }
        /* nothing written past the result */
        if (j->out_bytes == bytes && got[bytes] != 0xa5) {
            snprintf(why, cap, "rank %d: a byte written past the result", r);
            return why;
        }
    }
    return NULL;
}

/* build_jobs: the whole list for world w. */
static void build_jobs(world_t *w)
{
    const int n = w->n;
    for (int algo = A_RING; algo <= A_HIER; algo++)
        for (int s = 0; s < (algo == A_HIER ? w->nshapes : 1); s++)
            for (int dt = 0; dt <= DDL_UINT8; dt++)
                for (int op = 0; op <= DDL_AVG; op++) {
                    if (ddl_check_dtype_op((ddl_dtype_t)dt, (ddl_op_t)op) != DDL_OK)
                        continue;
                    for (int exact = 1;
                         exact >= (is_float(dt) && (op == DDL_SUM || op == DDL_AVG) ? 0 : 1);
                         exact--)
                        for (size_t c = 0; c < NCOUNTS; c++) {
                            job_t *j = add_job(w, K_ALLREDUCE, algo, (ddl_dtype_t)dt, (ddl_op_t)op,
                                               counts[c]);
                            j->shape = s;
                            j->exact = exact;
                            j->in_place = (int)(c % 2);
                            alloc_bufs(w, j, j->count, j->count);
                            j->ref = malloc(j->count * ddl_dtype_size(j->dt) + 1);
                            reference(j->ref, j->in, n, 0, j->count, j->dt, j->op);
                        }
                }
    const int roots[] = {0, n - 1, n / 2};
    for (int algo = A_BINOMIAL; algo <= A_CHAIN; algo++)
        for (int ri = 0; ri < 3; ri++)
            for (size_t c = 0; c < NCOUNTS; c++) {
                job_t *j = add_job(w, K_BCAST, algo, DDL_FLOAT64, DDL_SUM, counts[c]);
                j->root = roots[ri];
                j->exact = 0; /* any bits */
                alloc_bufs(w, j, j->count, j->count);
            }
    const ddl_dtype_t rtypes[] = {DDL_FLOAT32, DDL_INT64, DDL_FLOAT16, DDL_UINT8};
    for (int kind = K_REDUCE_SCATTER; kind <= K_REDUCE; kind++)
        for (int ti = 0; ti < 4; ti++)
            for (int op = 0; op <= DDL_AVG; op++) {
                if (ddl_check_dtype_op(rtypes[ti], (ddl_op_t)op) != DDL_OK ||
                    (kind == K_ALLGATHER && op != DDL_SUM))
                    continue;
                for (int in_place = 0; in_place <= 1; in_place++)
                    for (size_t c = 0; c < NCOUNTS; c++) {
                        job_t *j = add_job(w, kind, A_RING, rtypes[ti], (ddl_op_t)op, counts[c]);
                        j->in_place = in_place;
                        j->root = (int)(c % (size_t)n);
                        const size_t all = j->count * (size_t)n;
                        if (kind == K_REDUCE_SCATTER) {
                            alloc_bufs(w, j, all, in_place ? all : j->count);
                            j->ref = malloc(all * ddl_dtype_size(j->dt) + 1);
                            reference(j->ref, j->in, n, 0, all, j->dt, j->op);
                        } else if (kind == K_ALLGATHER) {
                            alloc_bufs(w, j, j->count, all);
                        } else {
                            alloc_bufs(w, j, j->count, j->count);
                            j->ref = malloc(j->count * ddl_dtype_size(j->dt) + 1);
                            reference(j->ref, j->in, n, 0, j->count, j->dt, j->op);
                        }
                    }
            }
    for (int i = 0; i < 3; i++) {
        job_t *j = add_job(w, K_BARRIER, A_RING, DDL_UINT8, DDL_SUM, 0);
        alloc_bufs(w, j, 0, 0);
    }
}

/* run_world: every job on a world of n, one TAP line per collective and
 * algorithm (and node shape). */
static void run_world(int n, const char *tuning)
{
    world_t w = {.n = n};
    for (int nodes = 2; nodes < n && w.nshapes < MAX_SHAPES; nodes++)
        if (n % nodes == 0 && n / nodes > 1)
            w.nodes[w.nshapes++] = nodes;
    w.lb = ddl_loopback_new(n, 64);
    if (!w.lb)
        BAIL_OUT("out of memory");
    build_jobs(&w);
    pthread_t th[8];
    rank_arg_t args[8];
    for (int r = 0; r < n; r++) {
        args[r] = (rank_arg_t){&w, r};
        if (pthread_create(&th[r], NULL, rank_main, &args[r]) != 0)
            BAIL_OUT("pthread_create failed");
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);

    /* one line per (kind, algo, shape): the first wrong job, if any */
    for (int kind = K_ALLREDUCE; kind <= K_BARRIER; kind++)
        for (int algo = A_RING; algo <= A_CHAIN; algo++)
            for (int s = 0; s < MAX_SHAPES; s++) {
                int jobs = 0, bad = 0;
                char why[400], first[700] = "";
                for (int i = 0; i < w.njobs; i++) {
                    job_t *j = &w.jobs[i];
                    if (j->kind != kind || j->algo != algo || j->shape != s)
                        continue;
                    jobs++;
                    const char *e = check_job(&w, j, why, sizeof why);
                    if (e && !bad++)
                        snprintf(first, sizeof first, "%s %s %s, %zu elements%s%s, root %d: %s",
                                 kind_name[kind], type_name[j->dt], op_name[j->op], j->count,
                                 j->exact ? " (exact inputs)" : "", j->in_place ? ", in place" : "",
                                 j->root, e);
                }
                if (!jobs)
                    continue;
                char shape[32] = "";
                if (algo == A_HIER)
                    snprintf(shape, sizeof shape, " on %d nodes of %d", w.nodes[s], n / w.nodes[s]);
                ok(bad == 0, "%s %s, %d ranks%s, %s: %d jobs%s%s", kind_name[kind], algo_name[algo],
                   n, shape, tuning, jobs, bad ? ", first failure: " : "", first);
            }
    diag("%d ranks, %s: %lu messages", n, tuning, ddl_loopback_messages(w.lb));
    for (int i = 0; i < w.njobs; i++)
        free_job(&w, &w.jobs[i]);
    free(w.jobs);
    ddl_loopback_free(w.lb);
}

static atomic_int idle_calls;

static void count_idle(void)
{
    atomic_fetch_add(&idle_calls, 1);
}

typedef struct {
    ddl_comm_t *comm;
} abort_arg_t;

static void *abort_later(void *p)
{
    abort_arg_t *a = p;
    usleep(50000);
    snprintf(a->comm->abort_reason, sizeof a->comm->abort_reason, "test abort");
    atomic_store(&a->comm->aborted, 1);
    return NULL;
}

/* transport_errors: the wait's abort and idle hook; a truncated message. */
static void transport_errors(void)
{
    ddl_loopback_t *lb = ddl_loopback_new(2, 64);
    ddl_tl_t *t0 = ddl_loopback_tl(lb, 0), *t1 = ddl_loopback_tl(lb, 1);
    ddl_comm_t c0, c1;
    comm_set(&c0, 0, 2, 7, NULL, t0);
    comm_set(&c1, 1, 2, 7, NULL, t1);
    t0->idle = count_idle;

    char buf[16];
    void *req = NULL;
    pthread_t th;
    abort_arg_t a = {&c0};
    ddl_status_t st = ddl_tl_irecv(&c0, buf, sizeof buf, ddl_tag(&c0, 1, 1), &req);
    ok(st == DDL_OK && req, "a receive without its message is pending");
    pthread_create(&th, NULL, abort_later, &a);
    st = ddl_tl_waitall(&c0, &req, 1);
    pthread_join(th, NULL);
    is(st, DDL_ERR_ABORTED, "the wait returns DDL_ERR_ABORTED once the communicator is aborted");
    ok(req == NULL, "the abandoned receive is released");
    ok(atomic_load(&idle_calls) > 0, "the wait called the idle hook (%d times)",
       atomic_load(&idle_calls));
    ok(strstr(ddl_last_error(), "test abort") != NULL, "the error names the reason: %s",
       ddl_last_error());

    /* the cancelled receive must not take a later message */
    char big[32] = "0123456789abcdefghijklmnopqrstu", small[8];
    void *sreq = NULL, *rreq = NULL;
    st = ddl_tl_isend(&c1, 0, big, sizeof big, ddl_tag(&c1, 1, 1), &sreq);
    ok(st == DDL_OK, "a send to the cancelled receive's tag is posted");
    st = ddl_tl_irecv(&c0, small, sizeof small, ddl_tag(&c0, 1, 1), &rreq);
    is(st, DDL_ERR_TRANSPORT, "a 32-byte message into an 8-byte receive fails");
    ddl_tl_abandon(&c1, &sreq, 1);
    ddl_loopback_free(lb);
}

int main(void)
{
    plan(NO_PLAN);
    ddl_log_init("t_algos", DDL_LOG_WARN);
    transport_errors();
    /* 64-byte segments, 3 receives ahead: many segments per block */
    ddl_tune.seg_bytes = 64;
    ddl_tune.window = 3;
    for (int n = 1; n <= 8; n++)
        run_world(n, "64-byte segments, window 3");
    ddl_tune.seg_bytes = DDL_SEGMENT_BYTES_DEFAULT;
    ddl_tune.window = 4;
    for (int n = 1; n <= 8; n++)
        run_world(n, "default segments");
    ddl_scratch_free();
    return done_testing();
}
