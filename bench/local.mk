# bench/: ddl-bench (libddl) and mpi-bench (its Open MPI peer, built only
# when configure finds Open MPI with pkg-config), printing the same table;
# rma-probe (UCX alone): put + flag against tag send, user or UCX memory.
# torch-ddp-bench.py (a Python script: nothing to build) times DDP with
# the ddl hook against gloo.
EXTRA_DIST += bench/torch-ddp-bench.py bench/run-torch-cluster.sh bench/congest.py
bin_PROGRAMS += bench/ddl-bench
bench_ddl_bench_SOURCES = bench/ddl-bench.c bench/bench_common.h
bench_ddl_bench_LDADD = collectives/libddl.la
if HAVE_CUDA
bench_ddl_bench_CFLAGS = $(AM_CFLAGS) $(CUDA_CPPFLAGS)
bench_ddl_bench_LDADD += $(CUDA_LIBS)
bench_ddl_bench_LDFLAGS = $(CUDA_LDFLAGS)
endif

noinst_PROGRAMS += bench/ft-probe
bench_ft_probe_SOURCES = bench/ft-probe.c
bench_ft_probe_LDADD = collectives/libddl.la

noinst_PROGRAMS += bench/rma-probe
bench_rma_probe_SOURCES = bench/rma-probe.c
bench_rma_probe_CFLAGS = $(AM_CFLAGS) $(UCX_CFLAGS)
bench_rma_probe_LDADD = $(UCX_LIBS)

# link-delay: netem's delay and jitter through a netfilter queue, for
# run-restart.sh's jitter rows (built when configure finds libnetfilter_queue).
if HAVE_NFQUEUE
noinst_PROGRAMS += bench/link-delay
bench_link_delay_SOURCES = bench/link-delay.c
bench_link_delay_CFLAGS = $(AM_CFLAGS) $(NFQUEUE_CFLAGS)
bench_link_delay_LDADD = $(NFQUEUE_LIBS)
endif

if HAVE_MPI
noinst_PROGRAMS += bench/mpi-bench
bench_mpi_bench_SOURCES = bench/mpi-bench.c bench/bench_common.h
bench_mpi_bench_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
bench_mpi_bench_LDADD = $(MPI_LIBS)
endif
EXTRA_DIST += bench/README.md bench/run-compare.sh bench/run-gpu.sh bench/run-bootstrap.sh bench/run-cluster-compare.sh \
    bench/run-restart.sh bench/run-ckpt.sh bench/run-ckpt-levels.sh bench/glusterfs.sh bench/sidebyside.awk bench/run-before-after.sh \
    bench/run-poseidon.sh bench/run-join.sh bench/run-takeover.sh
