#!/bin/sh
# run-gpu.sh: libddl's collectives on CUDA device memory against the same
# collectives on host memory, measured in one run on this machine, printed
# as the tables that go into docs/benchmarks.md.
#
#   [REPEAT=R] bench/run-gpu.sh BUILDDIR
#
# Configurations (ddl-bench allreduce, f32 sum, 8 B to 64 MiB, every
# element checked, median of R runs, default 3):
#   - one node, 2 ranks: NCCL when each rank has its own GPU, else (ranks
#     sharing one GPU) staged through pinned host memory;
#   - 2 emulated nodes of 1 rank (ddlrun --nodes 2): the hierarchical path,
#     the buffer through pinned host memory in chunks over UCX;
#   - 2 emulated nodes of 2 ranks: hierarchical with NCCL inside each node
#     when there are 4 GPUs, else staged.
# Each against ddl-bench -m host in the same run.  When nccl-tests'
# all_reduce_perf is on PATH (and there are 2 GPUs), its table is printed
# too, as the GPU peer.  Exit status 77 when there is no usable GPU.
set -eu
build=${1:?usage: run-gpu.sh BUILDDIR}
ddlrun="$build/launcher/ddlrun"
ddlbench="$build/bench/ddl-bench"
top=$(cd "$(dirname "$0")/.." && pwd)
repeat=${REPEAT:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! "$ddlrun" -n 1 "$ddlbench" allreduce -m cuda -b 8 -e 8 -n 1 -w 0 -c 1 >"$tmp/probe" 2>&1; then
    cat "$tmp/probe" >&2
    echo "run-gpu.sh: no usable GPU here" >&2
    exit 77
fi
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "# GPUs: $gpus: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
echo "# UCX $(ucx_info -v | sed -n 's/# Version //p'); UCX memory types: $(ucx_info -d 2>/dev/null | grep -c 'cuda' || true) cuda lines in ucx_info -d"
rows() { # rows TAG: "TAG SIZE TIME" for each table row on stdin
    awk -v tag="$1" '!/^#/ && NF == 8 { print tag, $1, $5 }'
}
sweep() { # sweep TAG MEM DDLRUN-ARGS...
    tag=$1 mem=$2
    shift 2
    "$ddlrun" "$@" "$ddlbench" allreduce -m "$mem" -b 8 -e 512K -f 8 -n 100 -w 10 -c 1 | rows "$tag" >>"$tmp/rows"
    "$ddlrun" "$@" "$ddlbench" allreduce -m "$mem" -b 1M -e 64M -f 4 -n 20 -w 3 -c 1 | rows "$tag" >>"$tmp/rows"
}
for cfg in "2 ranks, one node|-n 2" "2 emulated nodes x 1 rank|-n 2 --nodes 2" \
           "2 emulated nodes x 2 ranks|-n 4 --nodes 2"; do
    name=${cfg%%|*}
    args=${cfg#*|}
    echo "## $name: median of $repeat runs"
    : >"$tmp/rows"
    i=0
    while [ $i -lt "$repeat" ]; do
        # shellcheck disable=SC2086
        sweep cuda cuda $args
        # shellcheck disable=SC2086
        sweep host host $args
        i=$((i + 1))
    done
    n=$(echo "$args" | sed 's/-n \([0-9]*\).*/\1/')
    awk -v ranks="$n" -v left=cuda -v right=host -f "$top/bench/sidebyside.awk" "$tmp/rows"
done
if command -v all_reduce_perf >/dev/null 2>&1 && [ "$gpus" -ge 2 ]; then
    echo "## nccl-tests all_reduce_perf, 2 GPUs, one process"
    all_reduce_perf -b 8 -e 64M -f 8 -g 2
else
    echo "# nccl-tests' all_reduce_perf not on PATH (or fewer than 2 GPUs): no NCCL peer table"
fi
