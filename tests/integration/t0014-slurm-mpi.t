#!/bin/sh
# t0014-slurm-mpi: the Slurm plugin spank_ddl.so stays out of the way of
# steps without --ddl.  On a 3-node namespace cluster (tests/slurm/cluster.sh)
# with the plugin loaded as in t0010, an Open MPI program started with
# `srun --mpi=pmix -N3 -n6` and no --ddl runs as it would without the plugin:
# 6 ranks, two per node, form one MPI world, and bench/mpi-bench's allreduce
# gives exact results (#wrong 0 on every row, exit status 0).
#
# Open MPI is held to TCP over the nodes' eth0 (pml ob1, btl self,tcp), so
# that the data crosses the veths whatever Open MPI would pick by itself: the
# nodes share one kernel and UCX could reach peers through shared memory.
# Open MPI 4.1.4 on Debian 12 picks ob1 and tcp between these
# nodes anyway (its pml ucx wants mlx devices), so this pins, not repairs.
# The host ends of the veths must carry at least the data that the
# allreduce has to move off each node.
#
# Skips when spank_ddl.so or mpi-bench is not built, when not root or when
# Slurm/munge are not installed (cluster.sh exits 77).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
CLUSTER="$top_srcdir/tests/slurm/cluster.sh"
DIR="/var/tmp/ddl-cluster.$$"
PLUGIN="$top_builddir/plugins/.libs/spank_ddl.so"
MPIBENCH="$top_builddir/bench/mpi-bench"
CONF="$T_TMP/ddl.conf"
NODES=3
RANKS=6

[ -f "$PLUGIN" ] || t_skip_all "spank_ddl.so not built (configure found no slurm/spank.h)"
[ -x "$MPIBENCH" ] || t_skip_all "mpi-bench not built (configure found no Open MPI: libopenmpi-dev)"
[ "$(id -u)" = 0 ] || t_skip_all "needs root (network namespaces, slurmd)"

# One namespace cluster at a time on a host (one bridge, ddlbr0).
. "$top_srcdir/tests/slurm/lib-cluster.sh"
cl_prepare

# The plugin exactly as in t0010: a plugstack.conf and a valid ddl.conf,
# both in place before the cluster starts.
printf 'max_restarts = 5\ncheckpoint_roots = {"/var/tmp"}\n' >"$CONF"
mkdir -p "$DIR"
echo "required $PLUGIN config=$CONF" >"$DIR/plugstack.conf"

export DDL_CLUSTER_SHARE="$top_builddir $top_srcdir $T_TMP"
sh "$CLUSTER" start "$DIR" $NODES >"$T_TMP/start.out" 2>"$T_TMP/start.err"
rc=$?
[ $rc -eq 77 ] && { rm -rf "$DIR"; t_skip_all "$(sed -n 's/^cluster.sh: skip: //p' "$T_TMP/start.err")"; }
# A failed start has already cleaned up what it made; only a cluster that
# started is ours to stop (`stop` removes every node namespace and ddlbr0).
[ $rc -eq 0 ] && trap 'sh "$CLUSTER" stop "$DIR" >/dev/null 2>&1; t_cleanup' EXIT
t_is $rc 0 "a $NODES-node cluster starts with spank_ddl.so in plugstack.conf"
[ $rc -eq 0 ] || { sed 's/^/# /' "$T_TMP/start.err"; rm -rf "$DIR"; t_done; }
export SLURM_CONF="$DIR/slurm.conf"

# The plugin is really loaded: srun shows its options.
t_run 30 srun --help
t_like "$T_TMP/out" '--ddl-restarts=N' "srun --help lists the plugin's --ddl-restarts"

# Open MPI over TCP on eth0 only (each node's lo and eth0 are its only links);
# no UCX anywhere (pml ucx, osc ucx), and UCX held to TCP should it load.
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=eth0 \
    OMPI_MCA_osc=^ucx UCX_TLS=tcp,self

# The 6 ranks of such a step: two per node in block order, each with the
# DDL_* variables of srun's environment (lib.sh's DDL_RUNTIME_DIR,
# DDL_CLUSTER_SHARE) and none that the plugin would add.
cat >"$T_TMP/task.sh" <<'EOF'
ddl_names() { env | sed -n 's/^\(DDL_[A-Za-z0-9_]*\)=.*/\1/p' | sort | tr '\n' ,; }
[ $# -eq 0 ] && ddl_names || echo "$(hostname) ${PMIX_RANK:-none} $(ddl_names)"
EOF
t_run 60 srun --mpi=pmix -N$NODES -n$RANKS sh "$T_TMP/task.sh" rank
rc=$?
t_is $rc 0 "srun --mpi=pmix -N$NODES -n$RANKS without --ddl runs"
[ $rc -eq 0 ] || sed 's/^/#   /' "$T_TMP/err" | tail -n 20
t_is "$(sort -n -k2 "$T_TMP/out" | awk '{print $1":"$2}' | tr '\n' ' ')" \
    "n1:0 n1:1 n2:2 n2:3 n3:4 n3:5 " "... PMIx ranks 0-5, two on each of n1, n2, n3"
t_is "$(awk '{print $3}' "$T_TMP/out" | sort | uniq -c | awk '{print $1, $2}')" \
    "$RANKS $(sh "$T_TMP/task.sh")" "... each task has srun's own DDL_* variables, no other"

# Bytes the host ends of the veths received (= what each node sent).
sent() { cat /sys/class/net/vddl$1/statistics/rx_bytes 2>/dev/null || echo 0; }
for n in $(seq $NODES); do eval "before$n=\$(sent $n)"; done

# allreduce from 16 B to 1 MiB (x4), 5 timed calls after 1 warm-up each.
ITERS=5 WARMUP=1 MAXB=1048576
t_run 180 srun --mpi=pmix -N$NODES -n$RANKS \
    "$MPIBENCH" allreduce -b 16 -e 1M -f 4 -n $ITERS -w $WARMUP -c 1
rc=$?
t_is $rc 0 "srun --mpi=pmix -N$NODES -n$RANKS mpi-bench allreduce (no --ddl) exits 0"
[ $rc -eq 0 ] || { t_diag "stdout:"; sed 's/^/#   /' "$T_TMP/out"; t_diag "stderr:"; sed 's/^/#   /' "$T_TMP/err" | tail -n 30; }
t_is "$(grep -c '^# mpi-bench allreduce:' "$T_TMP/out")" 1 "... one MPI world prints one header"
t_like "$T_TMP/out" "^# mpi-bench allreduce: $RANKS ranks, type f32, op sum, $ITERS iterations" \
    "... of $RANKS ranks"
awk '!/^#/' "$T_TMP/out" >"$T_TMP/rows"
t_is "$(awk 'NF == 8 {print $1}' "$T_TMP/rows" | tr '\n' ' ')" \
    "16 64 256 1024 4096 16384 65536 262144 1048576 " "... one row per size, 16 B to 1 MiB"
t_is "$(awk 'NF == 8 {print $8}' "$T_TMP/rows" | sort -u | tr '\n' ' ')" "0 " \
    "... and #wrong is 0 on every row"
t_is "$(awk 'NF != 8' "$T_TMP/rows" | wc -l)" 0 "... and no other output line"

# Each node must send at least its share of every 1 MiB call (the others
# cannot form the sum without it): far more than Slurm's own traffic.
low=""
for n in $(seq $NODES); do
    eval "b=\$before$n"
    d=$(($(sent $n) - b))
    t_diag "n$n sent $d bytes over its veth during the run"
    [ $d -ge $(((ITERS + WARMUP) * MAXB)) ] || low="$low n$n:$d"
done
t_is "$low" "" "... and the data crossed the veths (each node sent >= $(((ITERS + WARMUP) * MAXB)) bytes)"

sh "$CLUSTER" stop "$DIR"
t_is $? 0 "the cluster stops"
# A second `stop` from the trap would remove whatever cluster started since.
trap t_cleanup EXIT
t_done
