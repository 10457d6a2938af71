/* bench_common.h: what ddl-bench and its Open MPI peer share, so that both
 * parse the same options and print the same nccl-tests style table:
 *
 *   size  count  type  redop  time(us)  algbw(GB/s)  busbw(GB/s)  #wrong
 *
 * time is the slowest rank's average over the timed iterations; algbw =
 * size / time; busbw = algbw x 2(n-1)/n for allreduce, x 1 for broadcast
 * (nccl-tests' definitions).  #wrong counts result elements that differ from
 * the locally computed reference, summed over ranks (with -c 1).
 * Header-only; included by exactly one .c file per program.
 */
#ifndef DDL_BENCH_COMMON_H
#define DDL_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

typedef struct {
    const char *coll;  /* allreduce | bcast */
    size_t min_bytes;  /* -b */
    size_t max_bytes;  /* -e */
    double factor;     /* -f */
    const char *type;  /* -t: f32 f64 i32 i64 */
    const char *op;    /* -o: sum prod min max avg */
    const char *algo;  /* -a: passed to the library as DDL_ALLREDUCE_ALGO */
    int check;         /* -c */
    int iters, warmup; /* -n, -w */
    const char *mem;   /* -m: host (malloc) | mapped (ddl_mem_alloc) | cuda (ddl-bench only) */
} bench_opts_t;

static const char bench_usage[] =
    "usage: %s allreduce|bcast [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-t f32|f64|i32|i64]\n"
    "       [-o sum|prod|min|max|avg] [-a ALGO] [-c 0|1] [-n ITERS] [-w WARMUP]\n"
    "       [-m host|mapped|cuda]\n"
    "sizes take K, M, G suffixes (powers of 2); defaults: -b 8 -e 64M -f 2 -t f32 -o sum\n"
    "-c 1 -n 20 -w 5 -m host; ddl-bench only: -m mapped (buffers from ddl_mem_alloc()),\n"
    "-m cuda (buffers from cudaMalloc; exit status 77 without a usable GPU)\n";

/* bench_parse_size: "64M" -> 67108864; 0 on error. */
static size_t bench_parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    size_t mult = 1;
    if (end == s || v < 0)
        return 0;
    switch (*end) {
    case 'k': case 'K': mult = 1u << 10; end++; break;
    case 'm': case 'M': mult = 1u << 20; end++; break;
    case 'g': case 'G': mult = 1u << 30; end++; break;
    default: break;
    }
    if (*end != '\0')
        return 0;
    return (size_t)(v * (double)mult);
}

static int bench_type_size(const char *t)
{
    if (!strcmp(t, "f32") || !strcmp(t, "i32"))
        return 4;
    if (!strcmp(t, "f64") || !strcmp(t, "i64"))
        return 8;
    return 0;
}

/* bench_parse: 0 on success; prints the problem and returns 2 otherwise. */
static int bench_parse(int argc, char **argv, bench_opts_t *o)
{
    *o = (bench_opts_t){"", 8, 64u << 20, 2.0, "f32", "sum", NULL, 1, 20, 5, "host"};
    if (argc < 2 || (strcmp(argv[1], "allreduce") && strcmp(argv[1], "bcast"))) {
        fprintf(stderr, bench_usage, argv[0]);
        return 2;
    }
    o->coll = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (argv[i][0] != '-' || strlen(argv[i]) != 2 || !v) {
            fprintf(stderr, "%s: bad argument '%s'\n", argv[0], argv[i]);
            fprintf(stderr, bench_usage, argv[0]);
            return 2;
        }
        switch (argv[i][1]) {
        case 'b': o->min_bytes = bench_parse_size(v); break;
        case 'e': o->max_bytes = bench_parse_size(v); break;
        case 'f': o->factor = atof(v); break;
        case 't': o->type = v; break;
        case 'o': o->op = v; break;
        case 'a': o->algo = v; break;
        case 'c': o->check = atoi(v); break;
        case 'n': o->iters = atoi(v); break;
        case 'w': o->warmup = atoi(v); break;
        case 'm': o->mem = v; break;
        default:
            fprintf(stderr, "%s: unknown option '%s'\n", argv[0], argv[i]);
            return 2;
        }
        i++;
    }
    if (strcmp(o->mem, "host") && strcmp(o->mem, "mapped") && strcmp(o->mem, "cuda")) {
        fprintf(stderr, "%s: -m: '%s' is not a memory kind (host, mapped, cuda)\n", argv[0],
                o->mem);
        return 2;
    }
    if (!bench_type_size(o->type) || o->factor < 1.0001 || o->iters < 1 || o->warmup < 0 ||
        o->max_bytes < o->min_bytes || (strcmp(o->op, "sum") && strcmp(o->op, "prod") &&
                                        strcmp(o->op, "min") && strcmp(o->op, "max") &&
                                        strcmp(o->op, "avg"))) {
        fprintf(stderr, "%s: bad option value (type %s, op %s, factor %g, iters %d, sizes "
                "%zu..%zu)\n", argv[0], o->type, o->op, o->factor, o->iters, o->min_bytes,
                o->max_bytes);
        return 2;
    }
    return 0;
}

static double bench_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Input of rank r at index i: small integers, so that every reduction of
 * up to a few hundred ranks is exact in every type. */
static double bench_input(int r, size_t i)
{
    return (double)((int)((i * 7 + (size_t)r * 3) % 9) - 4);
}

static double bench_expected(const char *op, int nranks, size_t i)
{
    double acc = bench_input(0, i);
    for (int r = 1; r < nranks; r++) {
        double v = bench_input(r, i);
        if (!strcmp(op, "sum") || !strcmp(op, "avg"))
            acc += v;
        else if (!strcmp(op, "prod"))
            acc *= v;
        else if (!strcmp(op, "min"))
            acc = v < acc ? v : acc;
        else
            acc = v > acc ? v : acc;
    }
    if (!strcmp(op, "avg"))
        acc /= nranks;
    return acc;
}

static void bench_fill(void *buf, const char *type, size_t count, int rank)
{
    for (size_t i = 0; i < count; i++) {
        double v = bench_input(rank, i);
        if (!strcmp(type, "f32"))
            ((float *)buf)[i] = (float)v;
        else if (!strcmp(type, "f64"))
            ((double *)buf)[i] = v;
        else if (!strcmp(type, "i32"))
            ((int32_t *)buf)[i] = (int32_t)v;
        else
            ((int64_t *)buf)[i] = (int64_t)v;
    }
}

static double bench_get(const void *buf, const char *type, size_t i)
{
    if (!strcmp(type, "f32"))
        return ((const float *)buf)[i];
    if (!strcmp(type, "f64"))
        return ((const double *)buf)[i];
    if (!strcmp(type, "i32"))
        return ((const int32_t *)buf)[i];
    return (double)((const int64_t *)buf)[i];
}

/* bench_count_wrong: elements of an allreduce result that differ from the
 * reference (for f32 the reference is rounded to float first). */
static long bench_count_wrong(const void *buf, const bench_opts_t *o, size_t count, int nranks)
{
    long wrong = 0;
    for (size_t i = 0; i < count; i++) {
        double want = bench_expected(o->op, nranks, i);
        if (!strcmp(o->type, "f32"))
            want = (double)(float)want;
        else if (o->type[0] == 'i' && !strcmp(o->op, "avg"))
            want = (double)(int64_t)want;
        wrong += bench_get(buf, o->type, i) != want;
    }
    return wrong;
}

static void bench_header(const char *prog, const bench_opts_t *o, int nranks, const char *impl)
{
    printf("# %s %s: %d ranks, type %s, op %s, %d iterations after %d warm-up, check %d, %s\n",
           prog, o->coll, nranks, o->type, o->op, o->iters, o->warmup, o->check, impl);
    printf("# %12s %12s %5s %6s %12s %12s %12s %8s\n", "size", "count", "type", "redop",
           "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
}

static void bench_row(const bench_opts_t *o, size_t bytes, size_t count, double time_us,
                      int nranks, long wrong)
{
    double algbw = time_us > 0 ? (double)bytes / time_us / 1e3 : 0;
    double factor = !strcmp(o->coll, "allreduce") ? 2.0 * (nranks - 1) / nranks : 1.0;
    printf("  %12zu %12zu %5s %6s %12.2f %12.3f %12.3f %8ld\n", bytes, count, o->type,
           !strcmp(o->coll, "bcast") ? "none" : o->op, time_us, algbw, algbw * factor,
           o->check ? wrong : -1L);
    fflush(stdout);
}

/* bench_next: the next size of the sweep (at least one element larger). */
static size_t bench_next(size_t bytes, const bench_opts_t *o, size_t es)
{
    size_t next = (size_t)((double)bytes * o->factor);
    if (next < bytes + es)
        next = bytes + es;
    return next / es * es;
}

#endif
