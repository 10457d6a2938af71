#!/bin/sh
# t0009-slurm-cluster: the multi-node test bed itself (tests/slurm/cluster.sh):
# a 2-node Slurm 22.05 cluster of network namespaces starts, runs
# srun steps on both nodes with PMIx ranks, runs an Open MPI program across
# the nodes (the peer for later comparisons), survives the crash of a node's
# processes, reboots that node (its slurmd started again), and stops without
# leaving a namespace, bridge or daemon behind.
# Skips when not root or Slurm/munge are not installed.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
CLUSTER="$top_srcdir/tests/slurm/cluster.sh"
DIR="/var/tmp/ddl-cluster.$$"

export DDL_CLUSTER_SHARE="$top_builddir $top_srcdir $T_TMP"
sh "$CLUSTER" start "$DIR" 2 >"$T_TMP/start.out" 2>"$T_TMP/start.err"
rc=$?
[ $rc -eq 77 ] && t_skip_all "$(sed -n 's/^cluster.sh: skip: //p' "$T_TMP/start.err")"
trap 'sh "$CLUSTER" stop "$DIR" >/dev/null 2>&1; t_cleanup' EXIT
t_is $rc 0 "a 2-node cluster starts"
[ $rc -eq 0 ] || { sed 's/^/# /' "$T_TMP/start.err"; t_done; }
export SLURM_CONF="$DIR/slurm.conf"

t_run 30 sinfo -h -o '%D %T'
t_is "$(cat "$T_TMP/out")" "2 idle" "sinfo: 2 nodes idle"

t_run 60 srun -N2 -n2 hostname
t_is $? 0 "srun -N2 -n2 hostname"
t_is "$(sort "$T_TMP/out" | tr '\n' ' ')" "n1 n2 " "... ran once on n1 and once on n2"

t_run 60 srun --mpi=pmix -N2 -n4 sh -c 'echo "$(hostname) $PMIX_RANK $SLURM_PROCID"'
t_is $? 0 "srun --mpi=pmix -N2 -n4"
t_is "$(sort -k2 "$T_TMP/out" | awk '{print $1":"$2}' | tr '\n' ' ')" "n1:0 n1:1 n2:2 n2:3 " \
    "... PMIx ranks 0-3, two per node, in block order"

t_run 60 srun -N2 -n2 sh -c 'ip -4 -o addr show dev eth0 | awk "{print \$4}"'
t_is "$(sort "$T_TMP/out" | tr '\n' ' ')" "192.168.213.11/24 192.168.213.12/24 " \
    "each node has its own network namespace and address"

MPIBENCH="$top_builddir/bench/mpi-bench"
if [ -x "$MPIBENCH" ]; then
    t_run 120 srun --mpi=pmix -N2 -n2 "$MPIBENCH" allreduce -b 8 -e 64K -f 32 -n 5 -w 1 -c 1
    t_is $? 0 "Open MPI allreduce across the 2 nodes (srun --mpi=pmix mpi-bench)"
    t_is "$(awk '!/^#/ && NF == 8 {print $8}' "$T_TMP/out" | sort -u)" 0 "... with no wrong element"
else
    t_skip "mpi-bench not built (configure found no Open MPI)"
    t_skip "mpi-bench not built (configure found no Open MPI)"
fi

# crash n2: every process in its namespace killed, its link down
srun -N1 -w n2 sleep 300 >/dev/null 2>&1 &
spid=$!
sleep 1
sh "$CLUSTER" crash "$DIR" n2
t_is "$(ip netns pids ddln2 | wc -l)" 0 "crash n2: no process left in its namespace"
t_run 30 srun -N1 -w n1 hostname
t_is "$(cat "$T_TMP/out")" "n1" "n1 still runs steps after n2 crashed"
kill $spid 2>/dev/null
wait $spid 2>/dev/null

# reboot n2: its slurmd starts again and it runs steps; a running node is
# not rebooted
sh "$CLUSTER" reboot "$DIR" n2 2>"$T_TMP/reboot.err"
t_is $? 0 "reboot n2: its link comes up, its slurmd starts again"
t_run 60 srun -N1 -w n2 hostname
t_is "$(cat "$T_TMP/out")" "n2" "... and n2 runs steps again"
sh "$CLUSTER" reboot "$DIR" n1 2>"$T_TMP/reboot.err"
t_is $? 1 "reboot n1, which runs: refused"
t_like "$T_TMP/reboot.err" "n1 is running: crash it first" "... saying why"

sh "$CLUSTER" stop "$DIR"
t_is $? 0 "the cluster stops"
t_is "$(ip netns list | grep -c '^ddln')" 0 "no node namespace is left"
t_ok $(ip link show ddlbr0 >/dev/null 2>&1; [ $? -ne 0 ]; echo $?) "the bridge is gone"
t_is "$(pgrep -f "$DIR" | wc -l)" 0 "no slurmctld, slurmd or slurmstepd of the cluster is left"
t_ok $([ ! -e "$DIR" ]; echo $?) "its directory is removed"
t_done
