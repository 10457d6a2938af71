/* ddl-bench.c: nccl-tests style benchmark of libddl's collectives.
 *
 *   ddlrun -n 4 ddl-bench allreduce -b 8 -e 64M -f 2 -t f32 -o sum [-a ALGO] [-c 1]
 *
 * For each size: warm-up iterations, then timed ones; the slowest rank's
 * average time is reported with algbw/busbw (see bench_common.h).  -a sets
 * DDL_ALLREDUCE_ALGO before ddl_init; -m mapped takes the buffers from
 * ddl_mem_alloc() (ranks of a node read each other's directly), -m cuda
 * from cudaMalloc (each rank on device local_rank % devices; inputs are
 * copied in before and results out after the timed calls).  The same table comes from
 * mpi-bench (Open MPI) for side-by-side comparisons.  Exit status 1 if any
 * result was wrong (with -c 1).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "bench_common.h"
#include "ddl.h"

/* Exit status when -m cuda cannot run here (automake's "skipped"). */
#define EXIT_NO_GPU 77

static ddl_dtype_t dtype_of(const char *t)
{
    return !strcmp(t, "f32") ? DDL_FLOAT32 : !strcmp(t, "f64") ? DDL_FLOAT64
         : !strcmp(t, "i32") ? DDL_INT32 : DDL_INT64;
}

static ddl_op_t op_of(const char *o)
{
    return !strcmp(o, "sum") ? DDL_SUM : !strcmp(o, "prod") ? DDL_PROD
         : !strcmp(o, "min") ? DDL_MIN : !strcmp(o, "max") ? DDL_MAX : DDL_AVG;
}

static void die(const char *what, ddl_status_t st)
{
    fprintf(stderr, "ddl-bench: %s: %s: %s\n", what, ddl_status_str(st), ddl_last_error());
    exit(1);
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    ddl_status_t st;
    int rc = bench_parse(argc, argv, &o);
    if (rc)
        return rc;
    if (o.algo)
        setenv("DDL_ALLREDUCE_ALGO", o.algo, 1);
#ifdef HAVE_CUDA
    /* libddl takes the device current at ddl_init() as this rank's GPU */
    if (!strcmp(o.mem, "cuda")) {
        int ndev = 0;
        const char *lr = getenv("DDL_LOCAL_RANK");
        if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0)
            cudaSetDevice((lr ? atoi(lr) : 0) % ndev);
    }
#endif
    if ((st = ddl_init()) != DDL_OK)
        die("ddl_init", st);
    ddl_comm_t *w = ddl_comm_world();
    int rank = ddl_rank(), n = ddl_size();
    size_t es = (size_t)bench_type_size(o.type);
    ddl_dtype_t dt = dtype_of(o.type);
    ddl_op_t op = op_of(o.op);
    int is_bcast = !strcmp(o.coll, "bcast"), failed = 0;
    const int mapped = !strcmp(o.mem, "mapped"), cuda = !strcmp(o.mem, "cuda");
    char *src = NULL, *dst = NULL;
    ddl_mem_t *msrc = NULL, *mdst = NULL;
    if (cuda && ddl_gpu_count() == 0) {
#ifdef HAVE_CUDA
        fprintf(stderr, "ddl-bench: -m cuda: no usable GPU here (libddl sees no CUDA device; "
                "DDL_LOG_LEVEL=debug says why)\n");
#else
        fprintf(stderr, "ddl-bench: -m cuda: built without CUDA (configure found no CUDA "
                "runtime; see --with-cuda)\n");
#endif
        ddl_finalize();
        return EXIT_NO_GPU;
    }
    if (mapped) {
        if ((st = ddl_mem_alloc(o.max_bytes + es, (void **)&src, &msrc)) != DDL_OK ||
            (st = ddl_mem_alloc(o.max_bytes + es, (void **)&dst, &mdst)) != DDL_OK)
            die("ddl_mem_alloc", st);
    } else {
        src = malloc(o.max_bytes + es);
        dst = malloc(o.max_bytes + es);
    }
    if (!src || !dst) {
        fprintf(stderr, "ddl-bench: cannot allocate 2 x %zu bytes\n", o.max_bytes);
        return 1;
    }
    /* with -m cuda, src and dst stay the host copies; the collectives run
     * on dsrc and ddst */
    char *dsrc = src, *ddst = dst;
#ifdef HAVE_CUDA
    if (cuda) {
        cudaError_t ce = cudaMalloc((void **)&dsrc, o.max_bytes + es);
        if (ce == cudaSuccess)
            ce = cudaMalloc((void **)&ddst, o.max_bytes + es);
        if (ce == cudaSuccess)
            ce = cudaMemset(ddst, 0, o.max_bytes + es);
        if (ce != cudaSuccess) {
            fprintf(stderr, "ddl-bench: rank %d: -m cuda: %s\n", rank, cudaGetErrorString(ce));
            return 1;
        }
    }
#endif
    memset(dst, 0, o.max_bytes + es);
    const char *algo = getenv("DDL_ALLREDUCE_ALGO");
    char algo_text[64];
    snprintf(algo_text, sizeof algo_text, "algo %s, memory %s", algo && *algo ? algo : "auto",
             o.mem);
    if (rank == 0)
        bench_header("ddl-bench", &o, n, algo_text);
    for (size_t bytes = o.min_bytes / es * es; bytes <= o.max_bytes;
         bytes = bench_next(bytes, &o, es)) {
        size_t count = bytes / es;
        bench_fill(src, o.type, count, rank);
#ifdef HAVE_CUDA
        if (cuda && cudaMemcpy(dsrc, src, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
            fprintf(stderr, "ddl-bench: rank %d: cudaMemcpy to the device failed\n", rank);
            return 1;
        }
#endif
        double total = 0;
        for (int it = 0; it < o.warmup + o.iters; it++) {
            if ((st = ddl_barrier(w)) != DDL_OK)
                die("ddl_barrier", st);
            double t0 = bench_now_us();
            st = is_bcast ? ddl_bcast(w, dsrc, count, dt, 0)
                          : ddl_allreduce(w, dsrc, ddst, count, dt, op);
            double t = bench_now_us() - t0;
            if (st != DDL_OK)
                die(o.coll, st);
            if (it >= o.warmup)
                total += t;
        }
        double avg = total / o.iters;
        if ((st = ddl_allreduce(w, DDL_IN_PLACE, &avg, 1, DDL_FLOAT64, DDL_MAX)) != DDL_OK)
            die("ddl_allreduce of the times", st);
        int64_t wrong = 0;
#ifdef HAVE_CUDA
        if (cuda && o.check &&
            (cudaMemcpy(src, dsrc, bytes, cudaMemcpyDeviceToHost) != cudaSuccess ||
             cudaMemcpy(dst, ddst, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)) {
            fprintf(stderr, "ddl-bench: rank %d: cudaMemcpy from the device failed\n", rank);
            return 1;
        }
#endif
        if (o.check) {
            if (is_bcast) {
                for (size_t i = 0; i < count; i++)
                    wrong += bench_get(src, o.type, i) != bench_input(0, i);
            } else {
                wrong = bench_count_wrong(dst, &o, count, n);
            }
            if ((st = ddl_allreduce(w, DDL_IN_PLACE, &wrong, 1, DDL_INT64, DDL_SUM)) != DDL_OK)
                die("ddl_allreduce of the error count", st);
        }
        if (rank == 0)
            bench_row(&o, bytes, count, avg, n, (long)wrong);
        if (wrong)
            failed = 1;
        if (bytes == 0 && o.max_bytes == 0)
            break;
    }
#ifdef HAVE_CUDA
    if (cuda) {
        cudaFree(dsrc);
        cudaFree(ddst);
    }
#endif
    if (mapped) {
        if ((st = ddl_mem_free(msrc)) != DDL_OK || (st = ddl_mem_free(mdst)) != DDL_OK)
            die("ddl_mem_free", st);
    } else {
        free(src);
        free(dst);
    }
    if ((st = ddl_finalize()) != DDL_OK)
        die("ddl_finalize", st);
    return failed; /* wrong results make the benchmark fail */
}
