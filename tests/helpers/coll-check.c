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
 *   coll-check [--sizes N,N,...] [--quick] [--big] [--huge] [--mem host|mapped|mixed]
 *
 * --mem mapped takes every buffer of the checks from ddl_mem_alloc() (ranks
 * of a node read each other's directly); mixed makes every rank allocate
 * but only the odd ranks use the allocation (the others use malloc), so
 * that neighbours of both kinds meet in every ring.
 * --big adds one f32 sum allreduce of 64 Mi elements (256 MiB per rank);
 * --huge one u8 sum allreduce of 2^31 + 5 elements (2 GiB per rank).
 * The algorithm is whatever DDL_ALLREDUCE_ALGO selects; rank 0 prints it.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "ddl.h"

static int rank, size;
static int failures; /* cases failed on this rank */
static enum { MEM_HOST, MEM_MAPPED, MEM_MIXED } mem_kind;

static void die(const char *what, ddl_status_t st)
{
    fprintf(stderr, "coll-check: rank %d: %s: %s: %s\n", rank, what, ddl_status_str(st),
            ddl_last_error());
    exit(1);
}

/* Test buffers: malloc, or ddl_mem_alloc (a collective: every rank
 * allocates and frees the same buffers in the same order) per --mem. */
#define MAX_TBUF 8
static struct {
    void *ptr;
    ddl_mem_t *mem;
} tbufs[MAX_TBUF];

static void *tbuf_alloc(size_t bytes)
{
    if (mem_kind == MEM_HOST)
        return malloc(bytes);
    for (int i = 0; i < MAX_TBUF; i++) {
        if (tbufs[i].ptr)
            continue;
        void *p;
        ddl_status_t st = ddl_mem_alloc(bytes, &p, &tbufs[i].mem);
        if (st != DDL_OK)
            die("ddl_mem_alloc", st);
        if (mem_kind == MEM_MIXED && rank % 2 == 0)
            p = malloc(bytes);
        tbufs[i].ptr = p;
        return p;
    }
    return NULL;
}

static void tbuf_free(void *p)
{
    if (mem_kind == MEM_HOST) {
        free(p);
        return;
    }
    for (int i = 0; i < MAX_TBUF; i++) {
        if (tbufs[i].ptr != p)
            continue;
        if (mem_kind == MEM_MIXED && rank % 2 == 0)
            free(p);
        ddl_status_t st = ddl_mem_free(tbufs[i].mem);
        if (st != DDL_OK)
            die("ddl_mem_free", st);
        tbufs[i].ptr = NULL;
        return;
    }
}

/* 16-bit float helpers for the test (exact for the small integers used) */
static uint16_t to_half(double v)
{
    if (v == 0)
        return signbit(v) ? 0x8000 : 0;
    int sign = v < 0, e = 0;
    double a = fabs(v);
    while (a >= 2) {
        a /= 2;
        e++;
    }
    while (a < 1) {
        a *= 2;
        e--;
    }
    return (uint16_t)((sign << 15) | ((e + 15) << 10) | (int)((a - 1) * 1024));
}

static double from_half(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e ? ldexp(1 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
    return h & 0x8000 ? -v : v;
}

static uint16_t to_bf16(double v)
{
    float f = (float)v;
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)(b >> 16); /* exact for the values used */
}

static double from_bf16(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static int is_int(ddl_dtype_t dt)
{
    return dt == DDL_INT32 || dt == DDL_INT64 || dt == DDL_UINT8;
}

/* input value of rank r at index i: exact in the type for the ops used, so
 * the reference is exact too (16-bit floats get small integers) */
static double input_of(ddl_dtype_t dt, int r, size_t i, ddl_op_t op)
{
    if (op == DDL_PROD) {
        static const double f[] = {1.0, -1.0, 2.0, 0.5, 1.0, -2.0, 1.0};
        double v = f[(i * 7 + (size_t)r * 3) % 7];
        if (is_int(dt))
            v = v == 0.5 ? 1 : v;
        if (dt == DDL_UINT8)
            v = fabs(v);
        return v;
    }
    if (dt == DDL_UINT8)
        return (double)((i * 131 + (size_t)r * 97) % 256);
    if (dt == DDL_FLOAT16 || dt == DDL_BFLOAT16)
        return (double)((long)((i * 13 + (size_t)r * 7) % 17) - 8);
    if (is_int(dt))
        return (double)((long)((i * 131 + (size_t)r * 977) % 200001) - 100000);
    return (double)((long)((i * 131 + (size_t)r * 977) % 2001) - 1000) / 4.0;
}

static double expected_of(ddl_dtype_t dt, size_t i, ddl_op_t op, int nranks)
{
    double acc = 0;
    for (int r = 0; r < nranks; r++) {
        double v = input_of(dt, r, i, op);
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
    if (dt == DDL_UINT8)
        acc = fmod(acc, 256);
    if (op == DDL_AVG) {
        /* the library's single rounding step in the element type */
        if (dt == DDL_FLOAT64)
            acc = acc / nranks;
        else
            acc = (double)((float)acc / (float)nranks);
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
    case DDL_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case DDL_FLOAT16: ((uint16_t *)buf)[i] = to_half(v); break;
    case DDL_BFLOAT16: ((uint16_t *)buf)[i] = to_bf16(v); break;
    }
}

static double get(const void *buf, size_t i, ddl_dtype_t dt)
{
    switch (dt) {
    case DDL_FLOAT32: return ((const float *)buf)[i];
    case DDL_FLOAT64: return ((const double *)buf)[i];
    case DDL_INT32: return ((const int32_t *)buf)[i];
    case DDL_INT64: return (double)((const int64_t *)buf)[i];
    case DDL_UINT8: return ((const uint8_t *)buf)[i];
    case DDL_FLOAT16: return from_half(((const uint16_t *)buf)[i]);
    case DDL_BFLOAT16: return from_bf16(((const uint16_t *)buf)[i]);
    }
    return 0;
}

/* rounded: the reference as the type stores it */
static double rounded(double v, ddl_dtype_t dt)
{
    double out = 0;
    unsigned char tmp[8];
    if (dt == DDL_FLOAT16 || dt == DDL_BFLOAT16) {
        /* avg results are not small integers: round through float */
        float f = (float)v;
        if (dt == DDL_BFLOAT16) {
            uint32_t b;
            memcpy(&b, &f, 4);
            b += 0x7fff + ((b >> 16) & 1);
            return from_bf16((uint16_t)(b >> 16));
        }
        /* half: nearest even among representable values around f */
        double best = 0, bestd = INFINITY;
        int e;
        frexp(f, &e);
        double ulp = ldexp(1, e - 11 < -24 ? -24 : e - 11);
        double lo = floor(f / ulp) * ulp;
        for (int k = 0; k < 2; k++) {
            double c = lo + k * ulp, d = fabs(c - f);
            if (d < bestd || (d == bestd && fmod(c / ulp, 2) == 0)) {
                best = c;
                bestd = d;
            }
        }
        return best;
    }
    put(tmp, 0, dt, v);
    out = get(tmp, 0, dt);
    return out;
}

static const char *dt_name(ddl_dtype_t dt)
{
    static const char *const n[] = {"f32", "f64", "i32", "i64", "f16", "bf16", "u8"};
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
    void *src = tbuf_alloc(n * es + 1), *dst = tbuf_alloc(n * es + 1);
    if (!src || !dst)
        die("malloc", DDL_ERR_NOMEM);
    for (size_t i = 0; i < n; i++)
        put(src, i, dt, input_of(dt, rank, i, op));
    ddl_status_t st = in_place ? ddl_allreduce(ddl_comm_world(), DDL_IN_PLACE, src, n, dt, op)
                               : ddl_allreduce(ddl_comm_world(), src, dst, n, dt, op);
    if (st != DDL_OK)
        die("ddl_allreduce", st);
    const void *res = in_place ? src : dst;
    int64_t wrong = 0;
    for (size_t i = 0; i < n; i++) {
        double want = rounded(expected_of(dt, i, op, size), dt), got = get(res, i, dt);
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
    tbuf_free(src);
    tbuf_free(dst);
}

/* reduce_scatter, allgather and reduce against the same references */
static void check_rs_ag_reduce(ddl_dtype_t dt, ddl_op_t op, size_t blk)
{
    size_t es = ddl_dtype_size(dt), total = blk * (size_t)size;
    char *src = tbuf_alloc(total * es + 1), *dst = tbuf_alloc(total * es + 1);
    char name[128];
    int64_t wrong = 0;
    ddl_status_t st;
    if (!src || !dst)
        die("malloc", DDL_ERR_NOMEM);
    for (size_t i = 0; i < total; i++)
        put(src, i, dt, input_of(dt, rank, i, op));
    if ((st = ddl_reduce_scatter(ddl_comm_world(), src, dst, blk, dt, op)) != DDL_OK)
        die("ddl_reduce_scatter", st);
    for (size_t i = 0; i < blk; i++)
        wrong += get(dst, i, dt) != rounded(expected_of(dt, (size_t)rank * blk + i, op, size), dt);
    snprintf(name, sizeof name, "reduce_scatter %s %s block=%zu", dt_name(dt), op_name(op), blk);
    report(name, wrong);

    /* in place: the input in recvbuf, the block lands at its start */
    wrong = 0;
    memcpy(dst, src, total * es);
    if ((st = ddl_reduce_scatter(ddl_comm_world(), DDL_IN_PLACE, dst, blk, dt, op)) != DDL_OK)
        die("ddl_reduce_scatter in place", st);
    for (size_t i = 0; i < blk; i++)
        wrong += get(dst, i, dt) != rounded(expected_of(dt, (size_t)rank * blk + i, op, size), dt);
    snprintf(name, sizeof name, "reduce_scatter %s %s block=%zu in-place", dt_name(dt),
             op_name(op), blk);
    report(name, wrong);

    /* allgather of each rank's block of its own input */
    wrong = 0;
    if ((st = ddl_allgather(ddl_comm_world(), src + (size_t)rank * blk * es, dst, blk, dt)) !=
        DDL_OK)
        die("ddl_allgather", st);
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < blk; i++)
            wrong += get(dst, (size_t)r * blk + i, dt) !=
                     rounded(input_of(dt, r, (size_t)r * blk + i, op), dt);
    snprintf(name, sizeof name, "allgather %s block=%zu", dt_name(dt), blk);
    report(name, wrong);

    /* reduce to the last rank */
    wrong = 0;
    int root = size - 1;
    memset(dst, 0x5a, total * es);
    if ((st = ddl_reduce(ddl_comm_world(), src, rank == root ? dst : NULL, total, dt, op, root)) !=
        DDL_OK)
        die("ddl_reduce", st);
    if (rank == root)
        for (size_t i = 0; i < total; i++)
            wrong += get(dst, i, dt) != rounded(expected_of(dt, i, op, size), dt);
    snprintf(name, sizeof name, "reduce %s %s n=%zu root=%d", dt_name(dt), op_name(op), total,
             root);
    report(name, wrong);
    tbuf_free(src);
    tbuf_free(dst);
}

/* communicators: node (the ranks of this node, in blocks under ddlrun
 * --nodes), cross (one rank per node), and a split */
static void check_comms(void)
{
    ddl_comm_t *node = ddl_comm_node(), *cross = ddl_comm_cross(), *half = NULL;
    ddl_status_t st;
    report("node communicator holds this node's ranks",
           !(node && ddl_comm_size(node) == ddl_local_size() &&
             ddl_comm_rank(node) == ddl_local_rank()));
    report("cross communicator holds one rank per node",
           !(cross && ddl_comm_size(cross) == ddl_num_nodes() &&
             ddl_comm_rank(cross) == ddl_node_id()));
    /* the node communicator works: its sum of world ranks is that of the
     * block of ranks this node holds */
    int64_t mine = rank, nsum = -1, nwant = 0;
    if ((st = ddl_allreduce(node, &mine, &nsum, 1, DDL_INT64, DDL_SUM)) != DDL_OK)
        die("ddl_allreduce on the node communicator", st);
    for (int r = ddl_node_id() * ddl_local_size(); r < (ddl_node_id() + 1) * ddl_local_size(); r++)
        nwant += r;
    report("node communicator: allreduce of the world ranks", nsum != nwant);
    /* odd and even ranks, ordered by descending rank (key) */
    if ((st = ddl_comm_split(ddl_comm_world(), rank % 2, -rank, &half)) != DDL_OK)
        die("ddl_comm_split", st);
    int members = (size + 1 - rank % 2) / 2;
    int64_t wrong = !(half && ddl_comm_size(half) == members);
    int64_t v = rank, sum = 0;
    if ((st = ddl_allreduce(half, &v, &sum, 1, DDL_INT64, DDL_SUM)) != DDL_OK)
        die("ddl_allreduce on a split communicator", st);
    int64_t want = 0;
    for (int r = rank % 2; r < size; r += 2)
        want += r;
    wrong += sum != want;
    /* key -rank: the highest rank is rank 0 of the new communicator */
    int64_t first = rank;
    if ((st = ddl_bcast(half, &first, 1, DDL_INT64, 0)) != DDL_OK)
        die("ddl_bcast on a split communicator", st);
    int top = size - 1 - ((size - 1) % 2 != rank % 2);
    wrong += first != top;
    report("comm_split by parity: sizes, allreduce and key order", wrong);
    ddl_comm_t *none = (ddl_comm_t *)1;
    if ((st = ddl_comm_split(ddl_comm_world(), DDL_UNDEFINED, 0, &none)) != DDL_OK)
        die("ddl_comm_split undefined", st);
    report("comm_split with DDL_UNDEFINED gives NULL", none != NULL);
    ddl_comm_free(half);
}

/* check_identical: random floats; every rank must get the same bits, and
 * with --mem mapped or mixed the same bits as from malloc'd buffers. */
static void check_identical(ddl_dtype_t dt, size_t n)
{
    size_t es = ddl_dtype_size(dt);
    unsigned char *buf = tbuf_alloc(n * es + 1), *ref = malloc(n * es + 1);
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
    char name[128];
    if (!buf || !ref)
        die("malloc", DDL_ERR_NOMEM);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        put(buf, i, dt, (double)(x >> 11) / 9007199254740992.0 - 0.5);
    }
    memcpy(ref, buf, n * es);
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
    if (mem_kind != MEM_HOST) {
        if ((st = ddl_allreduce(ddl_comm_world(), DDL_IN_PLACE, ref, n, dt, DDL_SUM)) != DDL_OK)
            die("ddl_allreduce", st);
        snprintf(name, sizeof name, "allreduce %s sum n=%zu: the same bits as from malloc'd "
                 "buffers", dt_name(dt), n);
        report(name, memcmp(ref, buf, n * es) != 0);
    }
    free(ref);
    tbuf_free(buf);
}

static void check_bcast(size_t n, int root)
{
    int32_t *v = tbuf_alloc(n * sizeof *v + 1);
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
    tbuf_free(v);
}

/* check_huge: one u8 sum allreduce of more than 2^31 elements (2 GiB per
 * rank), every element checked: counts are size_t all the way down. */
static void check_huge(void)
{
    const size_t n = ((size_t)1 << 31) + 5;
    uint8_t *buf = malloc(n);
    if (!buf)
        die("malloc of 2 GiB", DDL_ERR_NOMEM);
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)(i * 131 + (size_t)rank * 97);
    ddl_status_t st = ddl_allreduce(ddl_comm_world(), DDL_IN_PLACE, buf, n, DDL_UINT8, DDL_SUM);
    if (st != DDL_OK)
        die("ddl_allreduce of 2^31 + 5 elements", st);
    size_t ranks97 = 0;
    for (int r = 0; r < size; r++)
        ranks97 += (size_t)r * 97;
    int64_t wrong = 0;
    for (size_t i = 0; i < n; i++)
        wrong += buf[i] != (uint8_t)(i * 131 * (size_t)size + ranks97);
    report("allreduce u8 sum n=2147483653 in-place (more than 2^31 elements)", wrong);
    free(buf);
}

/* registered: allreduce on a registered buffer (the transfers carry the
 * registration) gives the same results, over several calls. */
static void check_registered(size_t n)
{
    float *buf = malloc((n + 1) * sizeof *buf);
    ddl_mem_t *mem = NULL;
    ddl_status_t st;
    if (!buf)
        die("malloc", DDL_ERR_NOMEM);
    if ((st = ddl_mem_register(buf, (n + 1) * sizeof *buf, &mem)) != DDL_OK)
        die("ddl_mem_register", st);
    int64_t wrong = 0;
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < n; i++)
            put(buf, i, DDL_FLOAT32, input_of(DDL_FLOAT32, rank, i + (size_t)round, DDL_SUM));
        if ((st = ddl_allreduce(ddl_comm_world(), DDL_IN_PLACE, buf, n, DDL_FLOAT32, DDL_SUM)) !=
            DDL_OK)
            die("ddl_allreduce on a registered buffer", st);
        for (size_t i = 0; i < n; i++)
            wrong += buf[i] != (float)expected_of(DDL_FLOAT32, i + (size_t)round, DDL_SUM, size);
    }
    if ((st = ddl_mem_deregister(mem)) != DDL_OK)
        die("ddl_mem_deregister", st);
    char name[96];
    snprintf(name, sizeof name, "allreduce f32 sum n=%zu on a registered buffer, 3 rounds", n);
    report(name, wrong);
    free(buf);
}

int main(int argc, char **argv)
{
    size_t sizes[16] = {0, 1, 2, 7, 1000, 4097, 1048579};
    int nsizes = 7, quick = 0, big = 0, huge = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--big") == 0)
            big = 1;
        else if (strcmp(argv[i], "--huge") == 0)
            huge = 1;
        else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
            nsizes = 0;
            for (char *t = strtok(argv[++i], ","); t && nsizes < 16; t = strtok(NULL, ","))
                sizes[nsizes++] = strtoull(t, NULL, 10);
        } else if (strcmp(argv[i], "--mem") == 0 && i + 1 < argc) {
            const char *k = argv[++i];
            mem_kind = !strcmp(k, "mapped") ? MEM_MAPPED : !strcmp(k, "mixed") ? MEM_MIXED
                                                                               : MEM_HOST;
            if (mem_kind == MEM_HOST && strcmp(k, "host")) {
                fprintf(stderr, "coll-check: --mem: '%s' is not host, mapped or mixed\n", k);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: coll-check [--sizes N,N,...] [--quick] [--big] [--huge] "
                    "[--mem host|mapped|mixed]\n");
            return 2;
        }
    }
    ddl_status_t st = ddl_init();
    if (st != DDL_OK)
        die("ddl_init", st);
    rank = ddl_rank();
    size = ddl_size();
    if (rank == 0)
        printf("coll-check: %d ranks, DDL_ALLREDUCE_ALGO=%s, memory %s\n", size,
               getenv("DDL_ALLREDUCE_ALGO") ? getenv("DDL_ALLREDUCE_ALGO") : "auto",
               mem_kind == MEM_HOST ? "host" : mem_kind == MEM_MAPPED ? "mapped" : "mixed");
    if (big)
        check_allreduce(DDL_FLOAT32, DDL_SUM, (size_t)64 << 20, 1);
    if (huge)
        check_huge();

    static const ddl_dtype_t types[] = {DDL_FLOAT32, DDL_FLOAT64, DDL_INT32, DDL_INT64,
                                        DDL_FLOAT16, DDL_BFLOAT16, DDL_UINT8};
    static const ddl_op_t ops[] = {DDL_SUM, DDL_PROD, DDL_MIN, DDL_MAX, DDL_AVG};
    for (int s = 0; s < nsizes; s++) {
        size_t n = sizes[s];
        int large = n > 100000;
        for (int t = 0; t < 7; t++) {
            for (int o = 0; o < 5; o++) {
                if (ops[o] == DDL_AVG && is_int(types[t]))
                    continue;
                if (quick && large && !(types[t] == DDL_FLOAT32 && ops[o] == DDL_SUM))
                    continue;
                check_allreduce(types[t], ops[o], n, (t + o) % 2);
            }
        }
        if (quick && large)
            continue;
        check_identical(DDL_FLOAT32, n);
        check_identical(DDL_FLOAT64, n);
        for (int root = 0; root < size; root += (size > 3 ? size - 1 : 1))
            check_bcast(n, root);
        size_t blk = n / (size_t)size;
        check_rs_ag_reduce(DDL_FLOAT32, DDL_SUM, blk);
        check_rs_ag_reduce(DDL_INT64, DDL_MAX, blk);
        check_rs_ag_reduce(DDL_BFLOAT16, DDL_AVG, blk);
        check_rs_ag_reduce(DDL_UINT8, DDL_SUM, blk);
    }
    for (int s = 0; s < nsizes; s++)
        if (sizes[s] > 1000)
            check_registered(sizes[s]);
    check_comms();
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
