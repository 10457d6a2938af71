#!/bin/sh
# run-torch-cluster.sh: bench/torch-ddp-bench.py (DDP with ddl's allreduce
# hook against DDP on gloo, same run) on N nodes of the namespace Slurm
# cluster (tests/slurm/cluster.sh, started and stopped here), one rank per
# node, under `srun --mpi=pmix --ddl`, both over TCP on the nodes' veths:
# UCX_TLS=tcp,self for libddl, GLOO_SOCKET_IFNAME=eth0 for gloo.
#
#   [NODES=2] bench/run-torch-cluster.sh BUILDDIR [torch-ddp-bench.py options]
#
# As root; one cluster at a time: run it under flock /tmp/ddl-cluster.lock.
# Prints torch-ddp-bench.py's Markdown tables, after a line naming the
# machine, the load and the date.
set -eu
build=$(cd "${1:?usage: run-torch-cluster.sh BUILDDIR [options]}" && pwd)
shift
nodes=${NODES:-2}
case $nodes in [2-8]) ;; *) echo "run-torch-cluster: NODES='$nodes' is not 2-8" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "run-torch-cluster: run as root (the cluster is made of network namespaces)" >&2; exit 2; }
top=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-/usr/bin/python3}
[ -e "$build/python/ddl/_ddl.so" ] ||
    { echo "run-torch-cluster: $build/python/ddl/_ddl.so is missing: build with python3-dev installed" >&2; exit 2; }
dir=/var/tmp/ddl-torch-bench.$$
mkdir -p "$dir"
printf 'max_restarts = 0\n' >"$dir/ddl.conf"
echo "required $build/plugins/.libs/spank_ddl.so config=$dir/ddl.conf launch=$build/launcher/ddl-launch" \
    >"$dir/plugstack.conf"
DDL_CLUSTER_SHARE="$build $top" sh "$top/tests/slurm/cluster.sh" start "$dir" "$nodes" >/dev/null ||
    { st=$?; rm -rf "$dir"; exit $st; }
# armed only now: `stop` removes every node namespace, even another cluster's
trap 'sh "$top/tests/slurm/cluster.sh" stop "$dir" >/dev/null 2>&1; rm -rf "$dir"' EXIT
trap 'exit 1' HUP INT TERM
export SLURM_CONF="$dir/slurm.conf" UCX_TLS=tcp,self GLOO_SOCKET_IFNAME=eth0
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
unset DDL_RUNTIME_DIR MASTER_ADDR MASTER_PORT
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $nodes ranks on $nodes namespace nodes over TCP"
timeout 1800 srun --mpi=pmix -N "$nodes" -n "$nodes" --ddl "$py" "$top/bench/torch-ddp-bench.py" "$@"
