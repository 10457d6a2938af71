#!/bin/sh
# run-bootstrap.sh: how long a whole Slurm step takes to start, bootstrap,
# do one 8-byte allreduce and end, `srun --ddl` against Open MPI under
# `srun --mpi=pmix` and against a plain `srun true`, on the namespace
# cluster of tests/slurm/cluster.sh (as root).  The goal: bootstrap of N ranks
# within 1.2x of srun --mpi=pmix + MPI_Init of Open MPI.
#
#   bench/run-bootstrap.sh BUILDDIR [NODES [TASKS [RUNS]]]   (default 3 6 10)
#
# Each variant runs RUNS times after one warm-up run; the table gives the
# median, minimum and maximum wall time of srun in milliseconds.  All
# variants use TCP between nodes (UCX_TLS=tcp,self; Open MPI's ob1/tcp on
# eth0), as the integration tests do.  The cluster is started for the run
# and stopped afterwards.
set -eu
build=$(cd "${1:?usage: run-bootstrap.sh BUILDDIR [NODES [TASKS [RUNS]]]}" && pwd)
nodes=${2:-3}
tasks=${3:-6}
runs=${4:-10}
top=$(cd "$(dirname "$0")/.." && pwd)
dir=/var/tmp/ddl-bootstrap.$$
plugin="$build/plugins/.libs/spank_ddl.so"
[ -f "$plugin" ] || { echo "run-bootstrap: $plugin not built (libslurm-dev)" >&2; exit 1; }

mkdir -p "$dir"
printf 'max_restarts = 5\n' >"$dir/ddl.conf"
echo "required $plugin config=$dir/ddl.conf launch=$build/launcher/ddl-launch" >"$dir/plugstack.conf"
DDL_CLUSTER_SHARE="$build $top" sh "$top/tests/slurm/cluster.sh" start "$dir" "$nodes" >/dev/null
trap 'sh "$top/tests/slurm/cluster.sh" stop "$dir" >/dev/null 2>&1' EXIT
export SLURM_CONF="$dir/slurm.conf" UCX_TLS=tcp,self
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=eth0 OMPI_MCA_osc=^ucx
unset DDL_RUNTIME_DIR

# measure NAME CMD...: RUNS timed runs after a warm-up; one table row.
measure() {
    name=$1
    shift
    timeout 120 "$@" >/dev/null 2>&1 || { echo "run-bootstrap: '$*' failed" >&2; return 1; }
    i=0
    : >"$dir/times"
    while [ $i -lt "$runs" ]; do
        t0=$(date +%s%N)
        timeout 120 "$@" >/dev/null 2>&1 || { echo "run-bootstrap: '$*' failed" >&2; return 1; }
        t1=$(date +%s%N)
        echo $(((t1 - t0) / 1000000)) >>"$dir/times"
        i=$((i + 1))
    done
    sort -n "$dir/times" | awk -v name="$name" '
        { t[NR] = $1 }
        END { printf "| %-44s | %6d | %6d | %6d |\n", name, t[int((NR + 1) / 2)], t[1], t[NR] }'
}

bench_args="allreduce -b 8 -e 8 -n 1 -w 0 -c 1"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $nodes nodes x $((tasks / nodes)) tasks, $runs runs each"
echo "| step ($tasks tasks on $nodes nodes) | median ms | min ms | max ms |"
echo "| --- | ---: | ---: | ---: |"
measure "srun true (Slurm alone)" srun -N"$nodes" -n"$tasks" true
measure "srun --mpi=pmix true" srun --mpi=pmix -N"$nodes" -n"$tasks" true
if [ -x "$build/bench/mpi-bench" ]; then
    # shellcheck disable=SC2086
    measure "srun --mpi=pmix mpi-bench (Open MPI)" \
        srun --mpi=pmix -N"$nodes" -n"$tasks" "$build/bench/mpi-bench" $bench_args
fi
# shellcheck disable=SC2086
measure "srun --mpi=pmix --ddl ddl-bench" \
    srun --mpi=pmix -N"$nodes" -n"$tasks" --ddl "$build/bench/ddl-bench" $bench_args
