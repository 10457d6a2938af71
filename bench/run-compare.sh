#!/bin/sh
# run-compare.sh: ddl vs Open MPI vs raw UCX, measured in one run on this
# machine, printed as the tables that go into docs/benchmarks.md.
#
#   [REPEAT=R] bench/run-compare.sh BUILDDIR [NRANKS...]   (default: 2 4)
#
# For each rank count: ddl-bench and mpi-bench (allreduce, f32 sum, 8 B to
# 64 MiB, checked), alternately, R times (default 3), printed as one table
# of median times and bus bandwidths side by side (bench/sidebyside.awk),
# and a second table for ddl-bench -m mapped (buffers from ddl_mem_alloc,
# read in place by the node's ranks) against the same Open MPI runs;
# then ucx_perftest tag latency (8 B) and bandwidth (16 MiB) between
# two processes over the same path (loopback shared memory; UCX_TLS is
# honoured by all three).  Open MPI runs with --oversubscribe (and
# --allow-run-as-root as root).  Iterations: -n 200 -w 20 up to 512 KiB,
# -n 20 -w 3 from 1 MiB.
set -eu
build=${1:?usage: run-compare.sh BUILDDIR [NRANKS...]}
shift
[ $# -gt 0 ] || set -- 2 4
ddlrun="$build/launcher/ddlrun"
ddlbench="$build/bench/ddl-bench"
mpibench="$build/bench/mpi-bench"
top=$(cd "$(dirname "$0")/.." && pwd)
repeat=${REPEAT:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
root=""
[ "$(id -u)" = 0 ] && root="--allow-run-as-root"

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "# UCX $(ucx_info -v | sed -n 's/# Version //p'), $(mpirun --version 2>/dev/null | head -1)"
rows() { # rows TAG: "TAG SIZE TIME" for each table row on stdin
    awk -v tag="$1" '!/^#/ && NF == 8 { print tag, $1, $5 }'
}
for n in "$@"; do
    echo "## $n ranks, one node: median of $repeat runs"
    : >"$tmp/rows"
    i=0
    while [ $i -lt "$repeat" ]; do
        "$ddlrun" -n "$n" "$ddlbench" allreduce -b 8 -e 512K -f 8 -n 200 -w 20 -c 1 | rows ddl >>"$tmp/rows"
        "$ddlrun" -n "$n" "$ddlbench" allreduce -b 1M -e 64M -f 4 -n 20 -w 3 -c 1 | rows ddl >>"$tmp/rows"
        "$ddlrun" -n "$n" "$ddlbench" allreduce -b 8 -e 512K -f 8 -n 200 -w 20 -c 1 -m mapped | rows mapped >>"$tmp/rows"
        "$ddlrun" -n "$n" "$ddlbench" allreduce -b 1M -e 64M -f 4 -n 20 -w 3 -c 1 -m mapped | rows mapped >>"$tmp/rows"
        if [ -x "$mpibench" ]; then
            # shellcheck disable=SC2086
            mpirun $root --oversubscribe -n "$n" "$mpibench" allreduce -b 8 -e 512K -f 8 -n 200 -w 20 -c 1 | rows mpi >>"$tmp/rows"
            # shellcheck disable=SC2086
            mpirun $root --oversubscribe -n "$n" "$mpibench" allreduce -b 1M -e 64M -f 4 -n 20 -w 3 -c 1 | rows mpi >>"$tmp/rows"
        fi
        i=$((i + 1))
    done
    [ -x "$mpibench" ] || echo "# mpi-bench not built (install libopenmpi-dev and re-run configure)"
    awk -v ranks="$n" -f "$top/bench/sidebyside.awk" "$tmp/rows"
    echo "### the same Open MPI runs against ddl-bench -m mapped (ddl_mem_alloc buffers)"
    awk -v ranks="$n" -v left=mapped -f "$top/bench/sidebyside.awk" "$tmp/rows"
done
echo "## ucx_perftest, 2 processes"
port=$((20000 + $$ % 20000))
for t in "tag_lat -s 8 -n 20000" "tag_bw -s 16777216 -n 200" "ucp_put_bw -s 16777216 -n 200"; do
    # shellcheck disable=SC2086
    ucx_perftest -t $t -p $port >/dev/null 2>&1 &
    srv=$!
    sleep 1
    # shellcheck disable=SC2086
    ucx_perftest 127.0.0.1 -t $t -p $port 2>&1 | sed -n 's/^Final: */ucx_perftest '"${t%% *}"' final: /p'
    wait $srv || true
    port=$((port + 1))
done
