# bench/: ddl-bench (libddl) and mpi-bench (its Open MPI peer, built only
# when configure finds Open MPI with pkg-config), printing the same table.
bin_PROGRAMS += bench/ddl-bench
bench_ddl_bench_SOURCES = bench/ddl-bench.c bench/bench_common.h
bench_ddl_bench_LDADD = collectives/libddl.la

if HAVE_MPI
noinst_PROGRAMS += bench/mpi-bench
bench_mpi_bench_SOURCES = bench/mpi-bench.c bench/bench_common.h
bench_mpi_bench_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
bench_mpi_bench_LDADD = $(MPI_LIBS)
endif
EXTRA_DIST += bench/README.md bench/run-compare.sh bench/run-bootstrap.sh bench/run-cluster-compare.sh
