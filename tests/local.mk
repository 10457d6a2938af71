# tests/: TAP unit tests (C programs, no extension) and integration tests
# (.t shell scripts), both run by automake's tap-driver.sh.
check_PROGRAMS += tests/unit/t_proto tests/unit/t_util tests/unit/t_ddlrun_args \
                  tests/unit/t_agent_args tests/unit/t_rank_env \
                  tests/unit/t_reduce tests/unit/t_api tests/unit/t_gpu_plan \
                  tests/helpers/coll-check tests/helpers/nb-check
tests_unit_t_proto_SOURCES = tests/unit/t_proto.c tests/tap.h
tests_unit_t_proto_LDADD = common/libddlcommon.la
tests_unit_t_agent_args_SOURCES = tests/unit/t_agent_args.c tests/tap.h
tests_unit_t_agent_args_LDADD = common/libddlcommon.la
tests_unit_t_rank_env_SOURCES = tests/unit/t_rank_env.c tests/tap.h
tests_unit_t_rank_env_LDADD = common/libddlcommon.la
# How ddl-launch records a worker and starts it again (launcher/respawn.c).
check_PROGRAMS += tests/unit/t_respawn
TESTS += tests/unit/t_respawn
tests_unit_t_respawn_SOURCES = tests/unit/t_respawn.c launcher/respawn.c tests/tap.h
tests_unit_t_respawn_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/launcher
tests_unit_t_respawn_LDADD = common/libddlcommon.la
# The step log written by a thread of its own (common/log.c).
check_PROGRAMS += tests/unit/t_log
TESTS += tests/unit/t_log
tests_unit_t_log_SOURCES = tests/unit/t_log.c tests/tap.h
tests_unit_t_log_LDADD = common/libddlcommon.la $(PTHREAD_LIBS)
check_PROGRAMS += tests/unit/t_bgfile
TESTS += tests/unit/t_bgfile
tests_unit_t_bgfile_SOURCES = tests/unit/t_bgfile.c tests/tap.h
tests_unit_t_bgfile_LDADD = common/libddlcommon.la $(PTHREAD_LIBS)
tests_unit_t_util_SOURCES = tests/unit/t_util.c tests/tap.h
tests_unit_t_util_LDADD = common/libddlcommon.la
tests_unit_t_ddlrun_args_SOURCES = tests/unit/t_ddlrun_args.c launcher/ddlrun_args.c tests/tap.h
tests_unit_t_ddlrun_args_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/launcher
tests_unit_t_ddlrun_args_LDADD = common/libddlcommon.la
tests_unit_t_reduce_SOURCES = tests/unit/t_reduce.c collectives/reduce.c collectives/status.c \
                              tests/tap.h
tests_unit_t_reduce_CPPFLAGS = $(DDL_NOUCX_CPPFLAGS) -I$(top_srcdir)/collectives
tests_unit_t_reduce_LDADD = common/libddlcommon.la
tests_unit_t_gpu_plan_SOURCES = tests/unit/t_gpu_plan.c collectives/gpu_plan.c tests/tap.h
tests_unit_t_gpu_plan_CPPFLAGS = $(DDL_NOUCX_CPPFLAGS) -I$(top_srcdir)/collectives
# t_algos: every algorithm over the loopback transport, without UCX (no UCX
# header reachable: collectives/noucx comes first on the include path)
check_PROGRAMS += tests/unit/t_algos
TESTS += tests/unit/t_algos
tests_unit_t_algos_SOURCES = tests/unit/t_algos.c collectives/transport_loopback.c \
                             collectives/transport_loopback.h tests/tap.h
tests_unit_t_algos_CPPFLAGS = $(DDL_NOUCX_CPPFLAGS) -I$(top_srcdir)/collectives
tests_unit_t_algos_LDADD = collectives/libddlalgo.la collectives/libddlreduce.la \
                           common/libddlcommon.la $(PTHREAD_LIBS) -lm
# t_gradx: the gradient exchange over the loopback transport
check_PROGRAMS += tests/unit/t_gradx
TESTS += tests/unit/t_gradx
tests_unit_t_gradx_SOURCES = tests/unit/t_gradx.c collectives/transport_loopback.c \
                             collectives/transport_loopback.h tests/tap.h
tests_unit_t_gradx_CPPFLAGS = $(DDL_NOUCX_CPPFLAGS) -I$(top_srcdir)/collectives
tests_unit_t_gradx_LDADD = collectives/libddlalgo.la collectives/libddlreduce.la \
                           common/libddlcommon.la $(PTHREAD_LIBS) -lm
if HAVE_BLAS
tests_unit_t_gradx_CPPFLAGS += $(BLAS_CFLAGS)
endif
tests_unit_t_api_SOURCES = tests/unit/t_api.c tests/tap.h
tests_unit_t_api_LDADD = collectives/libddl.la
tests_helpers_nb_check_SOURCES = tests/helpers/nb-check.c tests/helpers/check.h
tests_helpers_nb_check_LDADD = collectives/libddl.la $(PTHREAD_LIBS)
# gpu-check: device memory and CUDA streams (t0017), with the CUDA runtime
if HAVE_CUDA
check_PROGRAMS += tests/helpers/gpu-check
tests_helpers_gpu_check_SOURCES = tests/helpers/gpu-check.c tests/helpers/check.h
tests_helpers_gpu_check_CFLAGS = $(AM_CFLAGS) $(CUDA_CPPFLAGS) $(ZLIB_CFLAGS)
tests_helpers_gpu_check_LDADD = collectives/libddl.la $(CUDA_LIBS) $(ZLIB_LIBS) $(PTHREAD_LIBS)
tests_helpers_gpu_check_LDFLAGS = $(CUDA_LDFLAGS)
endif
tests_helpers_coll_check_SOURCES = tests/helpers/coll-check.c
tests_helpers_coll_check_LDADD = collectives/libddl.la $(ZLIB_LIBS) -lm

TESTS += tests/unit/t_proto tests/unit/t_util tests/unit/t_ddlrun_args tests/unit/t_reduce \
         tests/unit/t_agent_args tests/unit/t_rank_env \
         tests/unit/t_api tests/unit/t_gpu_plan

dist_check_SCRIPTS += tests/integration/lib.sh
EXTRA_DIST += tests/helpers/py-check.py tests/helpers/py-ddp-check.py tests/helpers/py-gpu-check.py
INTEGRATION_TESTS = \
    tests/integration/t0001-allreduce.t \
    tests/integration/t0002-ddlrun-exit.t \
    tests/integration/t0003-ddlrun-cleanup.t \
    tests/integration/t0004-agent.t \
    tests/integration/t0005-fmnist.t \
    tests/integration/t0007-nonblocking.t \
    tests/integration/t0009-slurm-cluster.t \
    tests/integration/t0012-bench.t \
    tests/integration/t0017-gpu.t \
    tests/integration/t0018-restart.t \
    tests/integration/t0020-ddlrun-emulate.t \
    tests/integration/t0023-deps.t \
    tests/integration/t0024-limits.t \
    tests/integration/t0026-ddlrun-abort.t \
    tests/integration/t0027-python.t \
    tests/integration/t0028-python-ddp.t \
    tests/integration/t0029-python-fmnist.t \
    tests/integration/t0030-metrics.t \
    tests/integration/t0033-ddlrun-stop.t \
    tests/integration/t0034-gradx.t \
    tests/integration/t0037-ckpt-local.t \
    tests/integration/t0035-straggler.t \
    tests/integration/t0036-warm.t \
    tests/integration/t0040-man.t \
    tests/integration/t0041-python-gpu.t
TESTS += $(INTEGRATION_TESTS)
EXTRA_DIST += $(INTEGRATION_TESTS) tests/README.md tests/lsan.supp tests/slurm/cluster.sh \
              tests/helpers/prom-samples.py

# Topology and placement: unit test over real machines' hwloc XML exports
# (tests/data/topologies) and the integration test of `ddl-agent topo` and
# `ddlrun --bind`.
check_PROGRAMS += tests/unit/t_topo
TESTS += tests/unit/t_topo
tests_unit_t_topo_SOURCES = tests/unit/t_topo.c tests/tap.h
tests_unit_t_topo_CFLAGS = $(AM_CFLAGS) $(HWLOC_CFLAGS)
tests_unit_t_topo_CPPFLAGS = $(AM_CPPFLAGS) -DDDL_TOP_SRCDIR='"$(abs_top_srcdir)"'
tests_unit_t_topo_LDADD = common/libddlnode.la common/libddlcommon.la $(HWLOC_LIBS)
INTEGRATION_TESTS += tests/integration/t0006-topo.t
EXTRA_DIST += tests/data/topologies/README.md \
              tests/data/topologies/coral-lassen.xml \
              tests/data/topologies/eas-tioga.xml \
              tests/data/topologies/epyc-corona-p2.xml \
              tests/data/topologies/g4dnmetal.xml \
              tests/data/topologies/nvidiaDGX2.xml

# Checkpoints: the single-process unit test (CRC-32C, round trip, damage,
# partial and failed commits, keep-K, async) and the ddlrun test of the
# collective commit, kill -9 during a commit loop and async blocking time.
check_PROGRAMS += tests/unit/t_ckpt tests/helpers/ckpt-check
TESTS += tests/unit/t_ckpt
tests_unit_t_ckpt_SOURCES = tests/unit/t_ckpt.c collectives/crc32c.c tests/tap.h
tests_unit_t_ckpt_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/collectives
tests_unit_t_ckpt_LDADD = collectives/libddl.la $(PTHREAD_LIBS)
tests_helpers_ckpt_check_SOURCES = tests/helpers/ckpt-check.c tests/helpers/check.h
tests_helpers_ckpt_check_LDADD = collectives/libddl.la
INTEGRATION_TESTS += tests/integration/t0008-checkpoint.t

# An unmodified PyTorch DDP job (examples/torch/ddp_check.py, gloo,
# init_method=env://) under ddlrun on 2 and 4 ranks; skips without
# python3-torch.
INTEGRATION_TESTS += tests/integration/t0013-torch.t

# Slurm plugin: the administrator's configuration reader and
# the plugin's options on the namespace cluster.  t0010 starts a cluster
# like t0009 (one bridge, one cluster at a time): it runs after t0009.
check_PROGRAMS += tests/unit/t_conf
TESTS += tests/unit/t_conf
tests_unit_t_conf_SOURCES = tests/unit/t_conf.c tests/tap.h
tests_unit_t_conf_LDADD = common/libddlnode.la common/libddlcommon.la
# The plugin's checks of srun's --ddl-* values against common/ddl_limits.h:
# spank_ddl.c compiled into the test with stand-ins for Slurm's functions.
if HAVE_SLURM
check_PROGRAMS += tests/unit/t_spank_opts
TESTS += tests/unit/t_spank_opts
tests_unit_t_spank_opts_SOURCES = tests/unit/t_spank_opts.c plugins/spank_opts.c tests/tap.h
tests_unit_t_spank_opts_CPPFLAGS = $(AM_CPPFLAGS) $(SLURM_CPPFLAGS)
tests_unit_t_spank_opts_CFLAGS = $(AM_CFLAGS) $(CONFUSE_CFLAGS)
tests_unit_t_spank_opts_LDADD = common/libddlnode.la common/libddlcommon.la
endif
EXTRA_DIST += tests/unit/t_spank_opts.c
INTEGRATION_TESTS += tests/integration/t0010-spank.t tests/integration/t0011-config-check.t
tests/integration/t0010-spank.log: tests/integration/t0009-slurm-cluster.log

# Open MPI under srun --mpi=pmix, without --ddl, on a 3-node namespace
# cluster with spank_ddl.so loaded: the plugin stays out of the way.  One
# cluster at a time: it runs after t0010.
INTEGRATION_TESTS += tests/integration/t0014-slurm-mpi.t
tests/integration/t0014-slurm-mpi.log: tests/integration/t0010-spank.log

# srun --mpi=pmix --ddl on a 3-node namespace cluster: the workers'
# environment (ranks, MASTER_*, no PMIX_*), ddl-bench and fmnist-train over
# TCP across the nodes, ddl-agent status as root and as another user inside
# a node, and nothing left on any node after scancel.  One cluster at a
# time: it runs after t0014.
INTEGRATION_TESTS += tests/integration/t0015-slurm-ddl.t
tests/integration/t0015-slurm-ddl.log: tests/integration/t0014-slurm-mpi.log

# An unmodified PyTorch DDP job under srun --mpi=pmix --ddl on the 2-node
# namespace cluster, compared with ddlrun -n 4 on the host; skips without
# python3-torch.  One cluster at a time: it runs after t0015.
INTEGRATION_TESTS += tests/integration/t0016-slurm-torch.t
tests/integration/t0016-slurm-torch.log: tests/integration/t0015-slurm-ddl.log

# Recovery under srun --ddl on the 3-node namespace cluster: a killed and a
# stopped worker, a crashed node replaced by a spare, a shrunk world, a
# crashed leader, the restart budget and the crash-loop guard.  One cluster
# at a time: it runs after t0016.
INTEGRATION_TESTS += tests/integration/t0019-slurm-recovery.t
tests/integration/t0019-slurm-recovery.log: tests/integration/t0016-slurm-torch.log

# What ddl.conf's ucx_tls, log_level, log_dir, metrics_dir and srun's
# --ddl-verbose do in a --ddl step on the 2-node namespace cluster, as root
# and as an ordinary user.  One cluster at a time: it runs after t0019.
INTEGRATION_TESTS += tests/integration/t0031-slurm-ops.t
tests/integration/t0031-slurm-ops.log: tests/integration/t0019-slurm-recovery.log

# Time limits under sbatch on the 2-node namespace cluster: --signal stops
# fmnist-train at a committed checkpoint, the job is requeued and ends with
# the uninterrupted weights.  One cluster at a time: it runs after t0031.
INTEGRATION_TESTS += tests/integration/t0032-slurm-preempt.t
tests/integration/t0032-slurm-preempt.log: tests/integration/t0031-slurm-ops.log
# the node-local checkpoint level on the namespace cluster; one cluster at a time
INTEGRATION_TESTS += tests/integration/t0038-slurm-ckpt-local.t
tests/integration/t0038-slurm-ckpt-local.log: tests/integration/t0032-slurm-preempt.log

# Straggler detection in a srun --ddl step (t0035-straggler-slurm): a rank
# slowed by 20 % named by the leader.  One cluster at a time: after t0038.
INTEGRATION_TESTS += tests/integration/t0035-straggler-slurm.t
tests/integration/t0035-straggler-slurm.log: tests/integration/t0038-slurm-ckpt-local.log

# Warm restart in place under srun --ddl (2 nodes); one cluster at a time:
# after t0035-straggler-slurm.
INTEGRATION_TESTS += tests/integration/t0039-slurm-warm.t
tests/integration/t0039-slurm-warm.log: tests/integration/t0035-straggler-slurm.log

# A node that freezes and resumes under srun --ddl (3 nodes): taken back as
# a spare, the shrunk world grows back.  One cluster at a time: after t0039.
INTEGRATION_TESTS += tests/integration/t0042-slurm-comeback.t
tests/integration/t0042-slurm-comeback.log: tests/integration/t0039-slurm-warm.log

# A network partition under srun --ddl (3 nodes): the majority side trains
# on, the cut-off node forms no world of its own and is taken back when the
# cut heals.  One cluster at a time: after t0042.
INTEGRATION_TESTS += tests/integration/t0043-slurm-partition.t
tests/integration/t0043-slurm-partition.log: tests/integration/t0042-slurm-comeback.log
EXTRA_DIST += tests/slurm/lib-cluster.sh

# The event loop of the agent, ddlrun and ddl-launch (common/evloop.c):
# fds on pipes and socketpairs, timer order, removal inside callbacks,
# re-arming, stop, a signalfd.
check_PROGRAMS += tests/unit/t_evloop
TESTS += tests/unit/t_evloop
tests_unit_t_evloop_SOURCES = tests/unit/t_evloop.c tests/tap.h
tests_unit_t_evloop_LDADD = common/libddlcommon.la

check_PROGRAMS += tests/unit/t_auth tests/unit/t_world tests/unit/t_policy
TESTS += tests/unit/t_auth tests/unit/t_world tests/unit/t_policy

# The agent's file I/O off its loop (agent/fileio.c).
check_PROGRAMS += tests/unit/t_fileio
TESTS += tests/unit/t_fileio
tests_unit_t_fileio_SOURCES = tests/unit/t_fileio.c agent/fileio.c agent/fileio.h tests/tap.h
tests_unit_t_fileio_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/agent
tests_unit_t_fileio_CFLAGS = $(AM_CFLAGS) $(PTHREAD_CFLAGS)
tests_unit_t_fileio_LDADD = common/libddlnode.la common/libddlcommon.la $(PTHREAD_LIBS)

# The agents' per-link failure detector (agent/detector.c) on simulated
# beat arrivals.
check_PROGRAMS += tests/unit/t_detector
TESTS += tests/unit/t_detector
tests_unit_t_detector_SOURCES = tests/unit/t_detector.c agent/detector.c agent/detector.h tests/tap.h
tests_unit_t_detector_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/agent
tests_unit_t_detector_LDADD = -lm

# When the leader counts a silent link between agents as lost (agent/links.c
# check_silence) on real sockets: the learned allowance, bytes waiting
# unread, the node timeout, DDL_DETECTOR.  The rest of the agent is stubbed.
check_PROGRAMS += tests/unit/t_links
TESTS += tests/unit/t_links
tests_unit_t_links_SOURCES = tests/unit/t_links.c agent/links.c agent/detector.c agent/auth.c \
                             agent/policy.c agent/agent_int.h tests/tap.h
tests_unit_t_links_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/agent
tests_unit_t_links_CFLAGS = $(AM_CFLAGS) $(CRYPTO_CFLAGS)
tests_unit_t_links_LDADD = common/libddlcommon.la $(CRYPTO_LIBS) -lm

# The leader agent's straggler detector (agent/straggler.c) on simulated
# synchronous steps: named within 20 steps, recovered, no false report.
check_PROGRAMS += tests/unit/t_straggler
TESTS += tests/unit/t_straggler
tests_unit_t_straggler_SOURCES = tests/unit/t_straggler.c agent/straggler.c agent/straggler.h \
                                 tests/tap.h
tests_unit_t_straggler_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/agent
tests_unit_t_straggler_LDADD = common/libddlcommon.la
tests_unit_t_world_SOURCES = tests/unit/t_world.c agent/world.c agent/world.h tests/tap.h
tests_unit_t_world_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/agent
tests_unit_t_policy_SOURCES = tests/unit/t_policy.c agent/policy.c agent/policy.h tests/tap.h
tests_unit_t_policy_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/agent
tests_unit_t_policy_LDADD = common/libddlcommon.la
tests_unit_t_auth_SOURCES = tests/unit/t_auth.c agent/auth.c agent/auth.h tests/tap.h
tests_unit_t_auth_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/agent
tests_unit_t_auth_CFLAGS = $(AM_CFLAGS) $(CRYPTO_CFLAGS)
tests_unit_t_auth_LDADD = common/libddlcommon.la $(CRYPTO_LIBS)

# Attacks on the agents' links (t0021): a real ddl-agent per scenario, the
# other nodes played by agent-attack with the step's secret or without it.
check_PROGRAMS += tests/helpers/agent-attack
tests_helpers_agent_attack_SOURCES = tests/helpers/agent-attack.c agent/auth.c agent/auth.h
tests_helpers_agent_attack_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/agent
tests_helpers_agent_attack_CFLAGS = $(AM_CFLAGS) $(CRYPTO_CFLAGS) $(PTHREAD_CFLAGS)
tests_helpers_agent_attack_LDADD = common/libddlcommon.la $(CRYPTO_LIBS) $(PTHREAD_LIBS)
TESTS += tests/integration/t0021-agent-security.t
EXTRA_DIST += tests/integration/t0021-agent-security.t

# Files and directories another user could redirect: checkpoints, failure
# summaries, the runtime directory, `ddl-agent status` (docs/security.md).
check_PROGRAMS += tests/helpers/fake-agent
tests_helpers_fake_agent_SOURCES = tests/helpers/fake-agent.c
tests_helpers_fake_agent_LDADD = common/libddlcommon.la
INTEGRATION_TESTS += tests/integration/t0022-file-safety.t

# libFuzzer targets (built with clang when configure finds one).
include tests/fuzz/local.mk

# The table of DDL_* variables (common/ddl_env.def): env-doc prints it as
# docs/user-guide.md's table; t0025 checks that the two agree and that the
# sources use no variable outside it.  `make env-doc` rewrites the guide's.
check_PROGRAMS += tests/helpers/env-doc
tests_helpers_env_doc_SOURCES = tests/helpers/env-doc.c
tests_helpers_env_doc_LDADD = common/libddlcommon.la
INTEGRATION_TESTS += tests/integration/t0025-env-doc.t
.PHONY: env-doc
env-doc: tests/helpers/env-doc
	tests/helpers/env-doc >env-doc.tmp
	awk -v table=env-doc.tmp \
	    '/^<!-- END ddl_env.def/ { skip = 0 } \
	     !skip { print } \
	     /^<!-- BEGIN ddl_env.def/ { while ((getline l < table) > 0) print l; skip = 1 }' \
	    $(top_srcdir)/docs/user-guide.md >user-guide.tmp
	mv user-guide.tmp $(top_srcdir)/docs/user-guide.md
	rm -f env-doc.tmp
