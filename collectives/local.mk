# collectives/: libddl, the library training programs link.
lib_LTLIBRARIES += collectives/libddl.la
collectives_libddl_la_SOURCES = \
    collectives/ddl_int.h \
    collectives/init.c \
    collectives/coll.c \
    collectives/comm.c \
    collectives/engine.c \
    collectives/status.c \
    collectives/ucx.c \
    collectives/select.c \
    collectives/mem.c \
    collectives/heartbeat.c \
    collectives/allreduce_ring.c \
    collectives/allreduce_rd.c \
    collectives/allreduce_rabenseifner.c \
    collectives/allreduce_hier.c \
    collectives/bcast_binomial.c \
    collectives/bcast_chain.c \
    collectives/barrier_dissemination.c
collectives_libddl_la_CFLAGS = $(AM_CFLAGS) $(UCX_CFLAGS)
collectives_libddl_la_LIBADD = collectives/libddlreduce.la common/libddlcommon.la $(UCX_LIBS) $(PTHREAD_LIBS) -lm
collectives_libddl_la_LDFLAGS = $(AM_LDFLAGS) -version-info $(DDL_LT_VERSION) \
    -export-symbols-regex '^ddl_(init|finalize|rank|size|local_rank|local_size|node_id|num_nodes|comm_world|comm_node|comm_cross|comm_split|comm_free|comm_rank|comm_size|comm_abort|mem_register|mem_deregister|mem_alloc|mem_free|gpu_count|heartbeat|i?allreduce|i?bcast|i(allreduce|bcast|reduce_scatter|allgather)_stream|i?barrier|i?reduce_scatter|i?allgather|i?reduce|test|wait|request_free|status_str|last_error|dtype_size|ckpt_(begin|write|commit|wait|abort|latest|read|cleanup))$$'
include_HEADERS = collectives/include/ddl.h
nodist_include_HEADERS = collectives/include/ddl_version.h
EXTRA_DIST += collectives/README.md
# The GPU path's decisions (records, plan, blocks): built always, tested here.
collectives_libddl_la_SOURCES += collectives/gpu_plan.c
# CUDA device memory and streams, with the runtime; NCCL inside the node and
# the hierarchical allreduce across nodes, with NCCL.
if HAVE_CUDA
collectives_libddl_la_SOURCES += collectives/gpu.c collectives/gpu_int.h
collectives_libddl_la_CFLAGS += $(CUDA_CPPFLAGS)
collectives_libddl_la_LIBADD += $(CUDA_LIBS)
collectives_libddl_la_LDFLAGS += $(CUDA_LDFLAGS)
endif
if HAVE_NCCL
collectives_libddl_la_SOURCES += collectives/nccl.c
collectives_libddl_la_CFLAGS += $(NCCL_CPPFLAGS)
collectives_libddl_la_LIBADD += $(NCCL_LIBS)
collectives_libddl_la_LDFLAGS += $(NCCL_LDFLAGS)
endif
# Checkpoints: the API in ddl.h, the shard/manifest protocol and CRC-32C.
collectives_libddl_la_SOURCES += collectives/checkpoint.c collectives/crc32c.c \
    collectives/crc32c.h
# The reduction kernels, vectorised: GCC's -O2 (very cheap cost model) leaves
# loops of unknown trip count scalar, which made f32 sums 2x slower.
noinst_LTLIBRARIES += collectives/libddlreduce.la
collectives_libddlreduce_la_SOURCES = collectives/reduce.c
collectives_libddlreduce_la_CFLAGS = $(AM_CFLAGS) $(UCX_CFLAGS) -ftree-vectorize \
    -fvect-cost-model=dynamic
