#!/bin/sh
# t0039-slurm-warm: warm restart in place under `srun --ddl` on a 2-node
# namespace cluster: fmnist-train --warm-restart, 2 tasks per node, the
# ring allreduce over TCP.  A run without failure, then one with rank 2's
# worker killed after the first checkpoint: ranks 0, 1 and 3 are kept (their
# supervisors say so) and resume from the checkpoint in memory, rank 2 starts
# again; the final weights are the failure-free run's, bit for bit; nothing
# of the step is left on the nodes.  The emulated scenarios (a lost node
# with a spare, the warm path failing) are t0036's.  Skips like t0015 (root,
# Slurm, plugin, fmnist and its data).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
. "$top_srcdir/tests/slurm/lib-cluster.sh"
DATA=${DDL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -x "$FMNIST" ] || t_skip_all "fmnist-train not built (no OpenBLAS)"
[ -r "$DATA/train-images-idx3-ubyte.gz" ] || t_skip_all "no Fashion-MNIST in $DATA"

cl_init "/var/tmp/ddl-cluster.$$" 2 'max_restarts = 5
checkpoint_roots = {"/var/tmp"}'
cl_start
export UCX_TLS=tcp,self DDL_ALLREDUCE_ALGO=ring
unset MASTER_ADDR MASTER_PORT
CK=/var/tmp/ddl-ck.$$
trap 'sh "$CLUSTER" stop "$CL_DIR" >/dev/null 2>&1; rm -rf "$CK"*; t_cleanup' EXIT
ARGS="--epochs 1 --limit 12000 --checkpoint-every 20 --pace 100 --warm-restart"

# train NAME: the training in the background (pid in $run), checkpoints in
# $CK-NAME, output in $T_TMP/NAME.out and .err
train() {
    name=$1
    ck="$CK-$name"
    # shellcheck disable=SC2086 # ARGS: several words
    timeout -k 5 120 srun --mpi=pmix -N2 --ntasks-per-node=2 --ddl --ddl-restarts=2 \
        --ddl-checkpoint-dir="$ck" -J "$T_TOKEN" "$FMNIST" $ARGS --checkpoint-dir "$ck" \
        >"$T_TMP/$name.out" 2>"$T_TMP/$name.err" &
    run=$!
}
crc() { t_checksums "$T_TMP/$1.out"; }
victim() { t_procs_of fmnist-train "fmnist-train .*$ck" "DDL_RANK=$1" | head -1; }
clean() { # clean WHAT: nothing of the step left on the nodes
    cl_clean "$1: no fmnist-train, ddl-launch or ddl-agent left on the nodes"
}

train base
wait $run
t_status $? 0 "baseline: srun --ddl -N2, fmnist-train --warm-restart: exits 0" "$T_TMP/base.err"
want=$(crc base)
t_is "${want%% *}" 4 "... 4 ranks agree: ${want#* }"
clean baseline

train kill
t_wait_file "$ck/latest" 60
p=$(victim 2)
t_ok $([ -n "$p" ]; echo $?) "kill: rank 2's worker after the first checkpoint: pid ${p:-?}"
[ -n "$p" ] && kill -KILL "$p"
wait $run
t_status $? 0 "... the step finishes (exit 0)" "$T_TMP/kill.err"
t_is "$(crc kill)" "$want" "... with the weights of the baseline, bit for bit"
t_is "$(grep -c "kept for a warm restart" "$T_TMP/kill.err")" 3 "... ranks 0, 1 and 3 were kept"
t_is "$(grep -c "^rank [0-9]*: warm restart 1: .* in memory$" "$T_TMP/kill.out")" 3 \
    "... and resumed from the checkpoint in memory"
clean kill
t_done
