/* mpi-bench.c: the Open MPI peer of ddl-bench: the same options, the same
 * measurement loop and the same table (bench_common.h), with MPI_Allreduce
 * and MPI_Bcast, so that both can be run side by side:
 *
 *   mpirun -n 4 --oversubscribe bench/mpi-bench allreduce -b 8 -e 64M
 *
 * Built only when configure finds Open MPI (pkg-config ompi-c, from
 * libopenmpi-dev).  Exit status 1 if any result was wrong (with -c 1).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

static MPI_Datatype mpi_type(const char *t)
{
    return !strcmp(t, "f32") ? MPI_FLOAT : !strcmp(t, "f64") ? MPI_DOUBLE
         : !strcmp(t, "i32") ? MPI_INT32_T : MPI_INT64_T;
}

static MPI_Op mpi_op(const char *o)
{
    return !strcmp(o, "prod") ? MPI_PROD : !strcmp(o, "min") ? MPI_MIN
         : !strcmp(o, "max") ? MPI_MAX : MPI_SUM;
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    int rank, n;
    MPI_Init(&argc, &argv);
    int rc = bench_parse(argc, argv, &o);
    if (rc) {
        MPI_Finalize();
        return rc;
    }
    if (strcmp(o.mem, "host")) {
        fprintf(stderr, "mpi-bench: -m %s: only host memory is measured here\n", o.mem);
        MPI_Finalize();
        return 2;
    }
    if (!strcmp(o.op, "avg")) {
        fprintf(stderr, "mpi-bench: MPI has no avg reduction\n");
        MPI_Finalize();
        return 2;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    size_t es = (size_t)bench_type_size(o.type);
    int is_bcast = !strcmp(o.coll, "bcast"), failed = 0;
    char *src = malloc(o.max_bytes + es), *dst = malloc(o.max_bytes + es);
    if (!src || !dst) {
        fprintf(stderr, "mpi-bench: cannot allocate 2 x %zu bytes\n", o.max_bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(dst, 0, o.max_bytes + es);
    if (rank == 0) {
        char version[MPI_MAX_LIBRARY_VERSION_STRING];
        int len;
        MPI_Get_library_version(version, &len);
        char *nl = strchr(version, ',');
        if (nl)
            *nl = '\0';
        bench_header("mpi-bench", &o, n, version);
    }
    for (size_t bytes = o.min_bytes / es * es; bytes <= o.max_bytes;
         bytes = bench_next(bytes, &o, es)) {
        size_t count = bytes / es;
        bench_fill(src, o.type, count, rank);
        double total = 0;
        for (int it = 0; it < o.warmup + o.iters; it++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = bench_now_us();
            if (is_bcast)
                MPI_Bcast(src, (int)count, mpi_type(o.type), 0, MPI_COMM_WORLD);
            else
                MPI_Allreduce(src, dst, (int)count, mpi_type(o.type), mpi_op(o.op),
                              MPI_COMM_WORLD);
            double t = bench_now_us() - t0;
            if (it >= o.warmup)
                total += t;
        }
        double avg = total / o.iters, worst;
        MPI_Allreduce(&avg, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        long wrong = 0, all_wrong = 0;
        if (o.check) {
            if (is_bcast) {
                for (size_t i = 0; i < count; i++)
                    wrong += bench_get(src, o.type, i) != bench_input(0, i);
            } else {
                wrong = bench_count_wrong(dst, &o, count, n);
            }
        }
        MPI_Allreduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0)
            bench_row(&o, bytes, count, worst, n, all_wrong);
        if (all_wrong)
            failed = 1;
    }
    free(src);
    free(dst);
    MPI_Finalize();
    return failed;
}
