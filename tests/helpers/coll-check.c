/* coll-check.c: correctness check of libddl's collectives, run under
 * `ddlrun -n N` by tests/integration/t0001-allreduce.t.
 *
 * Every rank builds every rank's input from (rank, index), so it can compute
 * the expected result locally.  Inputs are chosen so that the reference is
 * exact (small integers, powers of two): any difference is a bug, not
 * rounding.  A second pass with random floats checks that the result is
 * bit-identical on every rank.  Each rank prints its first few mismatches to
 * stderr; rank 0 prints one line per case and a summary.  Exit status 0
 * only if every case passed on every rank.
 *
 *   coll-check [--sizes N,N,...] [--quick] [--big]
 *
 * --big adds one f32 sum allreduce of 64 Mi elements (256 MiB per rank).
 * The algorithm is whatever DDL_ALLREDUCE_ALGO selects; rank 0 prints it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "ddl.h"

static int rank, size;
static int failures; /* cases failed on this rank */

static void die(const char *what, ddl_status_t st)
{
    fprintf(stderr, "coll-check: rank %d: %s: %s: %s\n", rank, what, ddl_status_str(st),
            ddl_last_error());
    exit(1);
}

/* input value of rank r at index i: exact in every type for the ops used */
static double input(int r, size_t i, ddl_op_t op)
{
    if (op == DDL_PROD) {
        static const double f[] = {1.0, -1.0, 2.0, 0.5, 1.0, -2.0, 1.0};
        return f[(i * 7 + (size_t)r * 3) % 7];
    }
    return (double)((long)((i * 131 + (size_t)r * 977) % 2001) - 1000) / 4.0;
}

static double input_int(int r, size_t i, ddl_op_t op)
{
    if (op == DDL_PROD)
        return (((i + (size_t)r) % 3) == 0 ? -1.0 : 1.0) * (((i + (size_t)r) % 5) == 0 ? 2.0 : 1.0);
    return (double)((long)((i * 131 + (size_t)r * 977) % 200001) - 100000);
}

static double expected(size_t i, ddl_dtype_t dt, ddl_op_t op)
{
    int is_int = dt == DDL_INT32 || dt == DDL_INT64;
    double acc = 0;
    for (int r = 0; r < size; r++) {
        double v = is_int ? input_int(r, i, op) : input(r, i, op);
        if (r == 0)
            acc = v;
        else if (op == DDL_SUM || op == DDL_AVG)
            acc += v;
        else if (op == DDL_PROD)
            acc *= v;
        else if (op == DDL_MIN)
            acc = v < acc ? v : acc;
        else
            acc = v > acc ? v : acc;
    }
    return acc;
}

static void put(void *buf, size_t i, ddl_dtype_t dt, double v)
{
    switch (dt) {
    case DDL_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case DDL_FLOAT64: ((double *)buf)[i] = v; break;
    case DDL_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case DDL_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    }
}

static double get(const void *buf, size_t i, ddl_dtype_t dt)
{
    switch (dt) {
    case DDL_FLOAT32: return ((const float *)buf)[i];
    case DDL_FLOAT64: return ((const double *)buf)[i];
    case DDL_INT32: return ((const int32_t *)buf)[i];
    case DDL_INT64: return (double)((const int64_t *)buf)[i];
    }
    return 0;
}

static const char *dt_name(ddl_dtype_t dt)
{
    static const char *const n[] = {"f32", "f64", "i32", "i64"};
    return n[dt];
}

static const char *op_name(ddl_op_t op)
{
    static const char *const n[] = {"sum", "prod", "min", "max", "avg"};
    return n[op];
}

/* report: agree on a case's verdict across ranks; rank 0 prints it. */
static void report(const char *name, int64_t wrong)
{
    int64_t total = wrong;
    ddl_status_t st = ddl_allreduce(ddl_comm_world(), DDL_IN_PLACE, &total, 1, DDL_INT64, DDL_SUM);
    if (st != DDL_OK)
        die("allreduce of the verdict", st);
    if (total)
        failures++;
    if (rank == 0)
        printf("%s %s (%" PRId64 " wrong elements over all ranks)\n", total ? "FAIL" : "pass",
               name, total);
    fflush(stdout);
}

static void check_allreduce(ddl_dtype_t dt, ddl_op_t op, size_t n, int in_place)
{
    size_t es = ddl_dtype_size(dt);
    char name[128];
    void *src = malloc(n * es + 1), *dst = malloc(n * es + 1);
    int is_int = dt == DDL_INT32 || dt == DDL_INT64;
    if (!src || !dst)
        die("malloc", DDL_ERR_NOMEM);
    for (size_t i = 0; i < n; i++)
        put(src, i, dt, is_int ? input_int(rank, i, op) : input(rank, i, op));
    ddl_status_t st = in_place ? ddl_allreduce(ddl_comm_world(), DDL_IN_PLACE, src, n, dt, op)
                               : ddl_allreduce(ddl_comm_world(), src, dst, n, dt, op);
    if (st != DDL_OK)
        die("ddl_allreduce", st);
    const void *res = in_place ? src : dst;
    int64_t wrong = 0;
    for (size_t i = 0; i < n; i++) {
        double want = expected(i, dt, op);
        if (op == DDL_AVG) {
            /* the same single rounding step as the library */
            if (dt == DDL_FLOAT32)
                want = (double)((float)want / (float)size);
            else
                want = want / size;
        }
        double got = get(res, i, dt);
        if (dt == DDL_FLOAT32)
            want = (double)(float)want;
        if (got != want) {
            if (wrong < 3)
                fprintf(stderr, "# rank %d: allreduce %s %s n=%zu: element %zu is %.9g, expected "
                        "%.9g\n", rank, dt_name(dt), op_name(op), n, i, got, want);
            wrong++;
        }
    }
    snprintf(name, sizeof name, "allreduce %s %s n=%zu%s", dt_name(dt), op_name(op), n,
             in_place ? " in-place" : "");
    report(name, wrong);
    free(src);
    free(dst);
}

/* check_identical: random floats; every rank must get the same bits. */
static void check_identical(ddl_dtype_t dt, size_t n)
{
    size_t es = ddl_dtype_size(dt);
    unsigned char *buf = malloc(n * es + 1);
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
    char name[96];
    if (!buf)
        die("malloc", DDL_ERR_NOMEM);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        put(buf, i, dt, (double)(x >> 11) / 9007199254740992.0 - 0.5);
    }
    ddl_status_t st = ddl_allreduce(ddl_comm_world(), DDL_IN_PLACE, buf, n, dt, DDL_SUM);
    if (st != DDL_OK)
        die("ddl_allreduce", st);
    int64_t crc = (int64_t)crc32(0, buf, (uInt)(n * es));
    int64_t lo = crc, hi = crc;
    if ((st = ddl_allreduce(ddl_comm_world(), DDL_IN_PLACE, &lo, 1, DDL_INT64, DDL_MIN)) ||
        (st = ddl_allreduce(ddl_comm_world(), DDL_IN_PLACE, &hi, 1, DDL_INT64, DDL_MAX)))
        die("ddl_allreduce of checksums", st);
    snprintf(name, sizeof name, "allreduce %s sum n=%zu bit-identical on every rank", dt_name(dt),
             n);
    report(name, lo != hi);
    free(buf);
}

static void check_bcast(size_t n, int root)
{
    int32_t *v = malloc(n * sizeof *v + 1);
    char name[64];
    if (!v)
        die("malloc", DDL_ERR_NOMEM);
    for (size_t i = 0; i < n; i++)
        v[i] = rank == root ? (int32_t)(i * 7 + (size_t)root) : -1;
    ddl_status_t st = ddl_bcast(ddl_comm_world(), v, n, DDL_INT32, root);
    if (st != DDL_OK)
        die("ddl_bcast", st);
    int64_t wrong = 0;
    for (size_t i = 0; i < n; i++)
        wrong += v[i] != (int32_t)(i * 7 + (size_t)root);
    snprintf(name, sizeof name, "bcast i32 n=%zu root=%d", n, root);
    report(name, wrong);
    free(v);
}

int main(int argc, char **argv)
{
    size_t sizes[16] = {0, 1, 2, 7, 1000, 4097, 1048579};
    int nsizes = 7, quick = 0, big = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--big") == 0)
            big = 1;
        else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
            nsizes = 0;
            for (char *t = strtok(argv[++i], ","); t && nsizes < 16; t = strtok(NULL, ","))
                sizes[nsizes++] = strtoull(t, NULL, 10);
        } else {
            fprintf(stderr, "usage: coll-check [--sizes N,N,...] [--quick] [--big]\n");
            return 2;
        }
    }
    ddl_status_t st = ddl_init();
    if (st != DDL_OK)
        die("ddl_init", st);
    rank = ddl_rank();
    size = ddl_size();
    if (rank == 0)
        printf("coll-check: %d ranks, DDL_ALLREDUCE_ALGO=%s\n", size,
               getenv("DDL_ALLREDUCE_ALGO") ? getenv("DDL_ALLREDUCE_ALGO") : "auto");
    if (big)
        check_allreduce(DDL_FLOAT32, DDL_SUM, (size_t)64 << 20, 1);

    for (int s = 0; s < nsizes; s++) {
        size_t n = sizes[s];
        int large = n > 100000;
        check_allreduce(DDL_FLOAT32, DDL_SUM, n, 0);
        check_allreduce(DDL_FLOAT32, DDL_AVG, n, 1);
        check_allreduce(DDL_FLOAT64, DDL_SUM, n, 1);
        check_allreduce(DDL_FLOAT64, DDL_AVG, n, 0);
        if (quick && large)
            continue;
        check_allreduce(DDL_FLOAT32, DDL_MIN, n, 0);
        check_allreduce(DDL_FLOAT64, DDL_MAX, n, 0);
        check_allreduce(DDL_FLOAT64, DDL_PROD, n, 1);
        check_allreduce(DDL_INT32, DDL_SUM, n, 0);
        check_allreduce(DDL_INT64, DDL_SUM, n, 1);
        check_allreduce(DDL_INT32, DDL_MAX, n, 1);
        check_allreduce(DDL_INT64, DDL_MIN, n, 0);
        check_allreduce(DDL_INT32, DDL_PROD, n, 0);
        check_identical(DDL_FLOAT32, n);
        check_identical(DDL_FLOAT64, n);
        for (int root = 0; root < size; root += (size > 3 ? size - 1 : 1))
            check_bcast(n, root);
    }
    for (int i = 0; i < 20; i++)
        if ((st = ddl_barrier(ddl_comm_world())) != DDL_OK)
            die("ddl_barrier", st);
    if (rank == 0)
        printf("coll-check: %s\n", failures ? "FAILED" : "all cases passed");
    fflush(stdout);
    if ((st = ddl_finalize()) != DDL_OK)
        die("ddl_finalize", st);
    return failures ? 1 : 0;
}
