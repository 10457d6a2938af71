#!/bin/sh
# t0037-ckpt-local: the node-local checkpoint level with partner copies
# (DDL_CKPT_LOCAL_DIR, ddl.h "the node-local level") under `ddlrun
# --emulate`: fmnist-train, 4 ranks on 2 emulated nodes and a spare, each
# emulated machine with its own directory $loc/node-K; the data over TCP
# and the ring allreduce, so that the weights are bit-identical whenever
# the world is the same:
#
#  0. no failure, --checkpoint-shared-every 0: the weights of a run with
#     the shared directory only; partner copies made (each node holds the
#     other's shards), the shared directory never written, and the node-local
#     checkpoints removed at the end;
#  1. node1 killed after a checkpoint, its directory deleted (its disk is
#     gone), shared level never written, async checkpoints (the partner
#     copies sent from the background thread): the spare restores ranks 2-3
#     from the partner copies on node0 (nothing can come from the empty
#     shared directory), the same weights;
#  2. the same with --checkpoint-shared-every 1 and node0's partner copies
#     corrupted (bytes flipped): ranks 2-3 fall back to the shared
#     directory, the same weights;
#  3. both copies gone: the step stops with exit 95 (DDL_EXIT_NO_CHECKPOINT)
#     and a message naming the rank and each level, after one restart only;
#  4. bad values: --checkpoint-shared-every x, --checkpoint-local relative,
#     DDL_CKPT_SHARED_EVERY=x and DDL_CKPT_LOCAL_DIR with %q.
#
# The namespace Slurm cluster's scenario is in t0038-slurm-ckpt-local.t.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
DATA=${DDL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -x "$FMNIST" ] || t_skip_all "fmnist-train not built (no OpenBLAS)"
[ -r "$DATA/train-images-idx3-ubyte.gz" ] || t_skip_all "no Fashion-MNIST in $DATA"
export UCX_TLS=tcp,self DDL_ALLREDUCE_ALGO=ring
unset MASTER_ADDR MASTER_PORT DDL_CKPT_LOCAL_DIR DDL_CKPT_SHARED_EVERY
ARGS="--epochs 1 --limit 4000 --checkpoint-every 10"
FM_MORE= # more fmnist-train options, for one scenario

# train NAME K [DDLRUN-OPTIONS]: fmnist-train in the background (pid in $run)
# on 2 emulated nodes of 2 ranks and a spare, the shared directory $ck, the
# node-local one $loc, every K-th checkpoint shared; output in NAME.out/.err.
train() {
    name=$1 every=$2
    shift 2
    ck="$T_TMP/ck-$name" loc="$T_TMP/loc-$name"
    # shellcheck disable=SC2086 # ARGS: several words
    DDL_LOG_LEVEL=info timeout -k 5 120 "$DDLRUN" -n 4 --nodes 2 --emulate --spares 1 --restarts 2 \
        --checkpoint-dir "$ck" --checkpoint-local "$loc" --checkpoint-shared-every "$every" \
        "$@" "$FMNIST" $ARGS $FM_MORE --pace 120 --checkpoint-dir "$ck" \
        >"$T_TMP/$name.out" 2>"$T_TMP/$name.err" &
    run=$!
}
crc() { t_checksums "$T_TMP/$1.out"; }
node() { pgrep -f "ddl-agent serve --socket $DDL_RUNTIME_DIR/.*-node$1.sock" | head -1; }
# lose NAME: after the first node-local checkpoint, node1's process group
# killed and its directory deleted, as if the machine and its disk were gone
lose() {
    t_wait_file "$loc/node-0/latest" 60
    g=$(node 1)
    t_ok $([ -n "$g" ]; echo $?) "$1: node1 (process group ${g:-?}) killed after a node-local checkpoint"
    [ -n "$g" ] && kill -s KILL -- "-$g"
    rm -rf "$loc/node-1"
}
clean() {
    i=0
    while [ $((i += 1)) -lt 50 ] && pgrep -f "$T_TMP" >/dev/null; do sleep 0.1; done
    t_is "$(pgrep -f "$T_TMP" | wc -l)" 0 "$1: no agent, ddl-launch or worker left"
}
nsteps() { find "$1" -maxdepth 1 -name 'step-*' 2>/dev/null | wc -l; }

# --- 0. no failure -----------------------------------------------------------------
# shellcheck disable=SC2086
t_run 120 "$DDLRUN" -n 4 --nodes 2 "$FMNIST" $ARGS --checkpoint-dir "$T_TMP/ck-plain"
t_is $? 0 "the shared level only (plain ddlrun -n 4 --nodes 2): exits 0"
want=$(t_checksums "$T_TMP/out")
t_ok $([ -n "$want" ]; echo $?) "... its weights: ${want:-none}"

train base 0
# while it runs: node0 holds its own shards and node1's partner copies
t_wait_file "$loc/node-0/latest" 60
s=$(cat "$loc/node-0/latest" 2>/dev/null)
d=$(printf '%s/node-0/step-%08d' "$loc" "${s:-0}")
t_is "$(cd "$d" 2>/dev/null && ls | tr '\n' ' ')" "MANIFEST rank-0.shard rank-1.shard rank-2.shard rank-3.shard " \
    "node0's step ${s:-?}: its shards 0-1 and the partner copies of 2-3"
wait $run
t_status $? 0 "--checkpoint-local, --checkpoint-shared-every 0: exits 0" "$T_TMP/base.err"
t_is "$(crc base)" "$want" "... the weights of the shared level's run"
t_is "$(nsteps "$ck")" 0 "... nothing written to the shared directory"
t_is "$(find "$loc" -mindepth 1 2>/dev/null | wc -l)" 0 "... the node-local checkpoints removed at the end"
clean baseline

# --- 1. node lost: the partner copies -------------------------------------------------
# async checkpoints: the partner copies travel from the background thread
FM_MORE=--checkpoint-async
train partner 0
FM_MORE=
lose partner
wait $run
t_status $? 0 "partner: the spare takes node1's ranks, the run finishes" "$T_TMP/partner.err"
t_is "$(crc partner)" "$want" "... with the weights of the run without failure"
t_like "$T_TMP/partner.out" "^rank 2: restoring step [0-9]+ from .*/loc-partner/node-2 \(partner copy\)" \
    "... rank 2 (on the spare) restores from node0's partner copy"
t_like "$T_TMP/partner.out" "^rank 0: restoring step [0-9]+ from .*/loc-partner/node-0 \(node-local\)" \
    "... rank 0 from its own node"
t_like "$T_TMP/partner.err" "restored: 2 shards node-local, 2 from partner copies, 0 from the shared directory" \
    "... rank 0 logs the levels: none from the shared directory"
t_is "$(nsteps "$ck")" 0 "... the shared directory was empty throughout"
clean partner

# --- 2. a corrupted partner copy: the shared level -------------------------------------
train corrupt 1
lose corrupt
for f in "$loc"/node-0/step-*/rank-2.shard "$loc"/node-0/step-*/rank-3.shard; do
    [ -f "$f" ] && printf 'XXXXXXXX' | dd of="$f" bs=1 seek=100 conv=notrunc 2>/dev/null
done
wait $run
t_status $? 0 "corrupt: node0's copies of shards 2-3 corrupted, the run finishes" "$T_TMP/corrupt.err"
t_is "$(crc corrupt)" "$want" "... with the weights of the run without failure"
t_like "$T_TMP/corrupt.err" "node-local copy of rank [23]'s shard, step [0-9]+, not used: .*(checksum|structure)" \
    "... the damaged copies are found by their CRC"
t_like "$T_TMP/corrupt.out" "^rank 3: restoring step [0-9]+ from .*/ck-corrupt \(shared\)" \
    "... rank 3 falls back to the shared directory"
t_like "$T_TMP/corrupt.err" "restored: 2 shards node-local, 0 from partner copies, 2 from the shared directory" \
    "... rank 0 logs the levels"
clean corrupt

# --- 3. both copies gone: a clear stop ------------------------------------------------------
train gone 0
lose gone
rm -f "$loc"/node-0/step-*/rank-2.shard "$loc"/node-0/step-*/rank-3.shard
wait $run
t_status $? 95 "gone: no copy of shards 2-3 anywhere: exit 95 (DDL_EXIT_NO_CHECKPOINT)" "$T_TMP/gone.err"
t_like "$T_TMP/gone.err" "no valid copy of rank [23]'s shard of checkpoint step [0-9]+ at any level" \
    "... the message names the rank and the step"
t_like "$T_TMP/gone.err" "no valid checkpoint to resume from \(exit status 95\): a restart would fail the same way" \
    "... the agents stop the step without another restart"
t_is "$(grep -o 'restart [0-9] of 2: generation [0-9]' "$T_TMP/gone.err" | sort -u | tr '\n' ' ')" \
    "restart 1 of 2: generation 1 " "... after the one restart of the node loss"
clean gone

# --- 4. bad values ---------------------------------------------------------------------
t_run 10 "$DDLRUN" -n 1 --checkpoint-shared-every x true
t_is $? 2 "--checkpoint-shared-every x: exit 2"
t_like "$T_TMP/err" "--checkpoint-shared-every: 'x' is not a number \(0-1000000; 0: never\)" "... with the range"
t_run 10 "$DDLRUN" -n 1 --checkpoint-local rel/dir true
t_is $? 2 "--checkpoint-local rel/dir: exit 2"
t_like "$T_TMP/err" "--checkpoint-local: 'rel/dir' is not an absolute path" "... says why"
# shellcheck disable=SC2086
DDL_CKPT_LOCAL_DIR="$T_TMP/l" DDL_CKPT_SHARED_EVERY=x t_run 60 "$DDLRUN" -n 2 "$FMNIST" $ARGS --checkpoint-dir "$T_TMP/ck-bad"
t_is $? 1 "DDL_CKPT_SHARED_EVERY=x: exit 1"
t_like "$T_TMP/err" "DDL_CKPT_SHARED_EVERY='x' is not" "... naming the variable"
# shellcheck disable=SC2086
DDL_CKPT_LOCAL_DIR="$T_TMP/l-%q" t_run 60 "$DDLRUN" -n 2 "$FMNIST" $ARGS --checkpoint-dir "$T_TMP/ck-bad2"
t_is $? 1 "DDL_CKPT_LOCAL_DIR with %q: exit 1"
t_like "$T_TMP/err" "'%q' is not %n \(node id\), %h \(host name\) or %%" "... naming the accepted sequences"
t_done
