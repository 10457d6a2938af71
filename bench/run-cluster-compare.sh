#!/bin/sh
# run-cluster-compare.sh: allreduce bandwidth between the nodes of the
# namespace Slurm cluster of tests/slurm/cluster.sh, over TCP, ddl vs Open
# MPI vs raw UCX, measured in one run (as root).
#
#   [TPN=T] [REPEAT=R] bench/run-cluster-compare.sh BUILDDIR [NODES...]
#                                                              (default: 2 4)
#
# For each node count N (N <= 8), T tasks per node (default 1; `srun -N N
# -n N*T`): ddl-bench under `srun --mpi=pmix --ddl` and mpi-bench under
# `srun --mpi=pmix` (allreduce, f32 sum, checked, 8 B to 64 MiB), each R
# times (default 3), alternately; the tables give the median time and bus
# bandwidth per size side by side (bench/sidebyside.awk).  With T > 1,
# ddl-bench also runs with DDL_ALLREDUCE_ALGO=ring and =hier, to show the two-level
# algorithm against the flat ring.  Then ucx_perftest between nodes n1 and
# n2: tag latency (8 B), tag bandwidth and UCP put bandwidth (16 MiB).
# Everything uses TCP over the nodes' veths (UCX_TLS=tcp,self; Open MPI's
# ob1/tcp on eth0), as run-bootstrap.sh and the integration tests do.
# Iterations: -n 100 -w 10 up to 512 KiB, -n 10 -w 2 from 1 MiB.  The
# cluster is started once with the largest N (at least 2) and stopped
# afterwards; only one namespace cluster can run at a time.  A step that
# fails prints a line saying so; the exit status is then 1.
set -eu
build=$(cd "${1:?usage: run-cluster-compare.sh BUILDDIR [NODES...]}" && pwd)
shift
[ $# -gt 0 ] || set -- 2 4
tpn=${TPN:-1}
repeat=${REPEAT:-3}
case $tpn in [1-8]) ;; *) echo "run-cluster-compare: TPN='$tpn' is not 1-8" >&2; exit 2 ;; esac
top=$(cd "$(dirname "$0")/.." && pwd)
dir=/var/tmp/ddl-cluster-compare.$$
plugin="$build/plugins/.libs/spank_ddl.so"
ddlbench="$build/bench/ddl-bench"
mpibench="$build/bench/mpi-bench"
[ -f "$plugin" ] || { echo "run-cluster-compare: $plugin not built (libslurm-dev)" >&2; exit 1; }
max=2
for n in "$@"; do
    case $n in
    [1-8]) [ "$n" -le "$max" ] || max=$n ;;
    *) echo "run-cluster-compare: node count '$n' is not 1-8" >&2; exit 2 ;;
    esac
done

mkdir -p "$dir"
printf 'max_restarts = 5\n' >"$dir/ddl.conf"
echo "required $plugin config=$dir/ddl.conf launch=$build/launcher/ddl-launch" >"$dir/plugstack.conf"
DDL_CLUSTER_SHARE="$build $top" sh "$top/tests/slurm/cluster.sh" start "$dir" "$max" >/dev/null ||
    { st=$?; rm -rf "$dir"; exit $st; }
# Armed only now: `stop` removes every node namespace, even another cluster's.
trap 'sh "$top/tests/slurm/cluster.sh" stop "$dir" >/dev/null 2>&1' EXIT
trap 'exit 1' HUP INT TERM
export SLURM_CONF="$dir/slurm.conf" UCX_TLS=tcp,self
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=eth0 OMPI_MCA_osc=^ucx
# the nodes share 2 CPUs: let Open MPI yield while it waits, as ddl does
export OMPI_MCA_mpi_yield_when_idle=1
unset DDL_RUNTIME_DIR
failed=0

# step NAME quiet CMD...: run one srun step (at most 300 s) into $dir/out;
# on failure, a line with its status, and the run fails.
step() {
    name=$1
    shift 2
    st=0
    timeout 300 "$@" >"$dir/out" || st=$?
    [ $st -eq 0 ] && return 0
    echo "# $name failed (status $st)"
    failed=1
    return 1
}

small="allreduce -b 8 -e 512K -f 8 -n 100 -w 10 -c 1"
large="allreduce -b 1M -e 64M -f 4 -n 10 -w 2 -c 1"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "# UCX $(ucx_info -v | sed -n 's/# Version //p'), $(mpirun --version 2>/dev/null | head -1)"
echo "# namespace Slurm cluster of $max nodes, $tpn task(s) per node, TCP over veths (UCX_TLS=$UCX_TLS, Open MPI ob1/tcp on eth0, mpi_yield_when_idle=1)"
rows() { # rows TAG: "TAG SIZE TIME" for each table row of $dir/out
    awk -v tag="$1" '!/^#/ && NF == 8 { print tag, $1, $5 }' "$dir/out" >>"$dir/rows"
}
# bench TAG CMD...: the small and the large sizes, their rows tagged TAG
bench() {
    tag=$1
    shift
    # shellcheck disable=SC2086
    step "$tag" quiet "$@" $small && rows "$tag"
    # shellcheck disable=SC2086
    step "$tag" quiet "$@" $large && rows "$tag"
}
for n in "$@"; do
    t=$((n * tpn))
    echo "## $n nodes x $tpn task(s): median of $repeat runs"
    : >"$dir/rows"
    i=0
    while [ $i -lt "$repeat" ]; do
        bench ddl srun --mpi=pmix -N"$n" -n"$t" --ddl "$ddlbench"
        if [ "$tpn" -gt 1 ]; then
            bench ring env DDL_ALLREDUCE_ALGO=ring srun --mpi=pmix -N"$n" -n"$t" --ddl "$ddlbench"
            bench hier env DDL_ALLREDUCE_ALGO=hier srun --mpi=pmix -N"$n" -n"$t" --ddl "$ddlbench"
        fi
        [ -x "$mpibench" ] && bench mpi srun --mpi=pmix -N"$n" -n"$t" "$mpibench"
        i=$((i + 1))
    done
    [ -x "$mpibench" ] || echo "# mpi-bench not built (install libopenmpi-dev and re-run configure)"
    for tag in ddl $([ "$tpn" -gt 1 ] && echo ring hier); do
        [ "$tag" = ddl ] || echo "### DDL_ALLREDUCE_ALGO=$tag"
        awk -v ranks="$t" -v left="$tag" -f "$top/bench/sidebyside.awk" "$dir/rows"
    done
done

# ucx_perftest: the server in n1 (192.168.213.11, see cluster.sh), the client
# in n2; the client retries until the server listens.
echo "## ucx_perftest, n1 <-> n2"
port=$((20000 + $$ % 20000))
for t in "tag_lat -s 8 -n 10000" "tag_bw -s 16777216 -n 100" "ucp_put_bw -s 16777216 -n 100"; do
    # shellcheck disable=SC2086
    timeout 120 srun -N1 -n1 -w n1 ucx_perftest -t $t -p $port >"$dir/srv" 2>&1 &
    srv=$!
    i=0
    : >"$dir/cli"
    while :; do
        sleep 1
        # shellcheck disable=SC2086
        timeout 120 srun -N1 -n1 -w n2 ucx_perftest 192.168.213.11 -t $t -p $port >"$dir/cli" 2>&1 || true
        grep -q '^Final:' "$dir/cli" && break
        i=$((i + 1))
        [ $i -lt 10 ] && grep -qi 'refused\|connect' "$dir/cli" && continue
        break
    done
    grep -q '^Final:' "$dir/cli" || kill "$srv" 2>/dev/null || true
    st=0
    wait "$srv" || st=$?
    if grep -q '^Final:' "$dir/cli"; then
        sed -n 's/^Final: */ucx_perftest '"${t%% *}"' final: /p' "$dir/cli"
    else
        echo "# ucx_perftest ${t%% *} failed (server status $st)"
        tail -n 5 "$dir/cli" "$dir/srv" >&2
        failed=1
    fi
    port=$((port + 1))
done
exit $failed
