#!/bin/sh
# t0038-slurm-ckpt-local: the node-local checkpoint level with partner
# copies under `srun --ddl` on the 3-node namespace cluster: fmnist-train,
# 2 tasks per node on n1-n2, n3 a spare, each node's directory
# /var/tmp/ddl-loc.PID/%h (its host name), --ddl-checkpoint-shared-every=0
# so that the shared directory is never written; the data over TCP and the
# ring allreduce, so that the weights are bit-identical whenever the world
# is the same:
#
#  0. no failure: the weights of the run; the shared directory empty; the
#     node-local checkpoints removed at the end;
#  1. n2 crashed after a node-local checkpoint and its directory deleted
#     (its disk is gone): n3 takes its ranks and restores them from the
#     partner copies on n1 (nothing can come from the empty shared
#     directory), the same weights;
#  2. the same, every checkpoint also shared (--ddl-checkpoint-shared-every=1),
#     and n1's copies of n2's shards corrupted (bytes flipped): ranks 2-3
#     come from the shared directory, the same weights;
#  3. the same without the shared level, n1's copies of n2's shards
#     deleted: no valid copy anywhere, srun exits 95, no second restart.
# Skips like t0015 (root, Slurm, plugin, fmnist and its data).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
. "$top_srcdir/tests/slurm/lib-cluster.sh"
DATA=${DDL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -x "$FMNIST" ] || t_skip_all "fmnist-train not built (no OpenBLAS)"
[ -r "$DATA/train-images-idx3-ubyte.gz" ] || t_skip_all "no Fashion-MNIST in $DATA"

cl_init "/var/tmp/ddl-cluster.$$" 3 'max_restarts = 5
checkpoint_roots = {"/var/tmp"}'
cl_start
export UCX_TLS=tcp,self DDL_ALLREDUCE_ALGO=ring
unset MASTER_ADDR MASTER_PORT DDL_CKPT_LOCAL_DIR DDL_CKPT_SHARED_EVERY
CK=/var/tmp/ddl-ck.$$
LOC=/var/tmp/ddl-loc.$$
trap 'sh "$CLUSTER" stop "$CL_DIR" >/dev/null 2>&1; rm -rf "$CK"* "$LOC"*; t_cleanup' EXIT
ARGS="--epochs 1 --limit 4000 --checkpoint-every 10 --pace 150"

# train NAME [SRUN-OPTIONS]: the training in the background (pid in $run),
# shared directory $CK-NAME (never written), node-local $LOC-NAME/%h
train() {
    name=$1
    shift
    ck="$CK-$name" loc="$LOC-$name"
    # shellcheck disable=SC2086 # ARGS: several words
    DDL_LOG_LEVEL=info timeout -k 5 150 srun --mpi=pmix -N3 --ntasks-per-node=2 --ddl \
        --ddl-restarts=2 --ddl-spares=1 --no-kill --ddl-checkpoint-dir="$ck" \
        --ddl-checkpoint-local="$loc/%h" --ddl-checkpoint-shared-every=0 -J "$T_TOKEN" "$@" \
        "$FMNIST" $ARGS --checkpoint-dir "$ck" >"$T_TMP/$name.out" 2>"$T_TMP/$name.err" &
    run=$!
}
crc() { t_checksums "$T_TMP/$1.out"; }
nsteps() { find "$1" -maxdepth 1 -name 'step-*' 2>/dev/null | wc -l; }
clean() { # clean WHAT: nothing of the step left on the nodes
    cl_clean "$1: no fmnist-train, ddl-launch or ddl-agent left on the nodes that are up"
}

# lose: after a node-local checkpoint on n1, n2 crashed (link down first)
# and its directory deleted (its disk is gone)
lose() {
    t_wait_file "$loc/n1/latest" 60
    cl_crash n2 silent
    rm -rf "$loc/n2"
}

# --- 0. no failure ----------------------------------------------------------------
train base
t_wait_file "$loc/n1/latest" 60
t_ok $(ls "$loc"/n1/step-*/rank-2.shard >/dev/null 2>&1; echo $?) \
    "baseline: n1 holds the partner copies of n2's ranks (rank-2.shard)"
wait $run
t_status $? 0 "baseline: --ddl-checkpoint-local, shared every 0: exits 0" "$T_TMP/base.err"
want=$(crc base)
t_is "${want%% *}" 4 "... 4 ranks agree: ${want#* }"
t_is "$(nsteps "$ck")" 0 "... nothing in the shared directory"
t_is "$(find "$loc" -name 'step-*' 2>/dev/null | wc -l)" 0 "... the node-local checkpoints removed at the end"
clean base

# --- 1. n2 lost: partner copies ----------------------------------------------------
train partner
lose
wait $run
t_status $? 0 "partner: n2 crashed, its directory deleted: the step finishes" "$T_TMP/partner.err"
t_is "$(crc partner)" "$want" "... with the weights of the run without failure"
t_like "$T_TMP/partner.out" "^rank 2: restoring step [0-9]+ from .*/n3 \(partner copy\)" \
    "... rank 2, now on n3, restores from n1's partner copy"
t_like "$T_TMP/partner.err" "restored: 2 shards node-local, 2 from partner copies, 0 from the shared directory" \
    "... and nothing from the shared directory"
t_is "$(nsteps "$ck")" 0 "... which stayed empty"
clean partner

# --- 2. a corrupted partner copy: the shared level ------------------------------------
cl_restart
train corrupt --ddl-checkpoint-shared-every=1
lose
for f in "$loc"/n1/step-*/rank-2.shard "$loc"/n1/step-*/rank-3.shard; do
    [ -f "$f" ] && printf 'XXXXXXXX' | dd of="$f" bs=1 seek=100 conv=notrunc 2>/dev/null
done
wait $run
t_status $? 0 "corrupt: n2 crashed, n1's copies of shards 2-3 corrupted: the step finishes" "$T_TMP/corrupt.err"
t_is "$(crc corrupt)" "$want" "... with the weights of the run without failure"
t_like "$T_TMP/corrupt.err" "node-local copy of rank [23]'s shard, step [0-9]+, not used: .*(checksum|structure)" \
    "... the damaged copies are found by their CRC"
t_like "$T_TMP/corrupt.err" "restored: 2 shards node-local, 0 from partner copies, 2 from the shared directory" \
    "... ranks 2-3, now on n3, fall back to the shared directory"
clean corrupt

# --- 3. both copies gone: a clear stop ----------------------------------------------------
cl_restart
train gone
lose
rm -f "$loc"/n1/step-*/rank-2.shard "$loc"/n1/step-*/rank-3.shard
wait $run
t_status $? 95 "gone: n2 crashed, no copy of shards 2-3 anywhere: srun exits 95 (DDL_EXIT_NO_CHECKPOINT)" "$T_TMP/gone.err"
t_like "$T_TMP/gone.err" "no valid copy of rank [23]'s shard of checkpoint step [0-9]+ at any level" \
    "... the message names the rank and the step"
t_like "$T_TMP/gone.err" "no valid checkpoint to resume from \(exit status 95\): a restart would fail the same way" \
    "... the agents stop the step without another restart"
clean gone
t_done
