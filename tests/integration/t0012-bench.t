#!/bin/sh
# t0012-bench: the benchmarks run and check their results: ddl-bench under
# ddlrun (allreduce with each algorithm, bcast) and, when Open MPI is there,
# mpi-bench under mpirun print the same table with #wrong 0 and exit 0; bad
# options are refused.  Speed is not judged here (docs/benchmarks.md).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
DDLBENCH="$top_builddir/bench/ddl-bench"
MPIBENCH="$top_builddir/bench/mpi-bench"

rows_ok() { # rows_ok FILE N: N table rows, every #wrong 0
    [ "$(awk '!/^#/ && NF == 8' "$1" | wc -l)" = "$2" ] &&
        [ "$(awk '!/^#/ && NF == 8 {print $8}' "$1" | sort -u)" = 0 ]
}

for algo in ring rd auto; do
    t_run 120 "$DDLRUN" -n 3 "$DDLBENCH" allreduce -b 8 -e 64K -f 8 -n 3 -w 1 -c 1 -a "$algo"
    t_is $? 0 "ddl-bench allreduce -a $algo on 3 ranks exits 0"
    t_ok $(rows_ok "$T_TMP/out" 5; echo $?) "... 5 sizes, no wrong element"
    t_like "$T_TMP/out" "^# ddl-bench allreduce: 3 ranks, .*algo $algo" "... and says which algorithm"
done
t_run 120 "$DDLRUN" -n 3 "$DDLBENCH" allreduce -b 8 -e 1M -f 16 -n 3 -w 1 -c 1 -m mapped
t_is $? 0 "ddl-bench allreduce -m mapped (ddl_mem_alloc buffers) on 3 ranks exits 0"
t_ok $(rows_ok "$T_TMP/out" 5; echo $?) "... 5 sizes, no wrong element"
t_like "$T_TMP/out" "^# ddl-bench allreduce: 3 ranks, .*memory mapped" "... and says which memory"
t_run 30 "$DDLRUN" -n 1 "$DDLBENCH" allreduce -m disk
t_is $? 2 "ddl-bench with an unknown memory kind exits 2"
t_like "$T_TMP/err" "-m: 'disk' is not a memory kind \(host, mapped, cuda\)" "... saying which are known"
t_run 120 "$DDLRUN" -n 2 "$DDLBENCH" bcast -b 4 -e 4096 -f 32 -t i32 -n 3 -w 1 -c 1
t_is $? 0 "ddl-bench bcast exits 0"
t_ok $(rows_ok "$T_TMP/out" 3; echo $?) "... 3 sizes, no wrong element"
t_run 30 "$DDLRUN" -n 1 "$DDLBENCH" allreduce -t f8
t_is $? 2 "ddl-bench with a bad type exits 2"

if [ -x "$MPIBENCH" ] && command -v mpirun >/dev/null; then
    root=""
    [ "$(id -u)" = 0 ] && root="--allow-run-as-root"
    # shellcheck disable=SC2086
    t_run 120 mpirun $root --oversubscribe -n 2 "$MPIBENCH" allreduce -b 8 -e 64K -f 8 -n 3 -w 1 -c 1
    t_is $? 0 "mpi-bench allreduce on 2 ranks exits 0"
    t_ok $(rows_ok "$T_TMP/out" 5; echo $?) "... 5 sizes, no wrong element, same table"
else
    t_skip "mpi-bench not built or mpirun missing (libopenmpi-dev, openmpi-bin)"
    t_skip "mpi-bench not built or mpirun missing (libopenmpi-dev, openmpi-bin)"
fi
t_done
