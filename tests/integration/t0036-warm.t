#!/bin/sh
# t0036-warm: warm restart in place under `ddlrun --emulate` (ddl_warm_enable,
# ddl_rejoin; fmnist-train --warm-restart): after a failure the live workers
# stay, rejoin the new generation and resume from the checkpoint they kept
# in memory; only the dead ones start again (cold).  2 emulated nodes of 2
# ranks, a spare node, the ring allreduce over TCP, so that the final
# weights are bit-identical to a run without failure:
#
#  0. baseline: no failure (--warm-restart, --spares 1);
#  1. rank 2's worker killed: ranks 0, 1, 3 are kept (warm, from memory),
#     rank 2 starts again (cold, from disk); same weights;
#  2. node1 killed (its agent, tasks and workers) with --spares 1: ranks 0
#     and 1 are kept, the spare's fresh workers take ranks 2 and 3; same
#     weights;
#  3. the warm path failing: the killed rank's new worker starts later than
#     the others' exchange waits (DDL_BOOTSTRAP_TIMEOUT=3, a wrapper that
#     sleeps 6 s in generation 1): the kept workers' ddl_rejoin fails,
#     they withdraw and exit, and the next generation is cold; same weights;
#  4. the warm path failing for one kept rank only (its exchange waits 3 s,
#     the others' 30 s): the others, still rejoining the generation its exit
#     ended, join the next one warm; no third restart; same weights;
#  5. --checkpoint-async: the checkpoint pending at the kill is dropped by
#     the kept ranks (never committed); same weights;
#  6. rank 2 exiting inside a commit (DDL_CKPT_FAULT=exit:2), after rank 0
#     published the step: the others' commit failed, yet they resume from
#     their copy of that step in memory; same weights;
#
# and after each, nothing of the step left running.  Timings: bench/run-restart.sh.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

DATA=${DDL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -x "$FMNIST" ] || t_skip_all "fmnist-train not built (no OpenBLAS)"
[ -r "$DATA/train-images-idx3-ubyte.gz" ] || t_skip_all "no Fashion-MNIST in $DATA"
export UCX_TLS=tcp,self DDL_ALLREDUCE_ALGO=ring
unset MASTER_ADDR MASTER_PORT
ARGS="--epochs 1 --limit 12000 --checkpoint-every 20 --pace 60 --warm-restart"

# train NAME [DDLRUN-OPTIONS]: the training in the background (pid in $run)
# on 2 emulated nodes of 2 ranks and a spare, checkpoints in $T_TMP/ck-NAME,
# the command in $PROG (fmnist-train by default).
PROG=$FMNIST
train() {
    name=$1
    shift
    ck="$T_TMP/ck-$name"
    # shellcheck disable=SC2086 # ARGS: several words
    timeout -k 5 200 "$DDLRUN" -n 4 --nodes 2 --emulate --spares 1 --restarts 2 --checkpoint-dir "$ck" \
        "$@" $PROG $ARGS --checkpoint-dir "$ck" >"$T_TMP/$name.out" 2>"$T_TMP/$name.err" &
    run=$!
}
crc() { t_checksums "$T_TMP/$1.out"; }
victim() { t_procs_of fmnist-train "fmnist-train .*$ck" "DDL_RANK=$1" | head -1; }
node() { pgrep -f "ddl-agent serve --socket $DDL_RUNTIME_DIR/.*-node$1.sock"; }
clean() {
    i=0
    while [ $((i += 1)) -lt 50 ] && pgrep -f "$T_TMP" >/dev/null; do sleep 0.1; done
    t_is "$(pgrep -f "$T_TMP" | wc -l)" 0 "$1: no agent, ddl-launch or worker left"
}
warm_lines() { grep -c "^rank [0-9]*: warm restart $2: .* in memory$" "$T_TMP/$1.out"; }

# --- 0. baseline ---------------------------------------------------------------------
train base
wait $run
t_is $? 0 "baseline: --warm-restart without a failure: exits 0"
want=$(crc base)
t_like "$T_TMP/base.out" "^checksums: all 4 ranks agree" "... 4 ranks agree ($want)"
clean baseline

# --- 1. a worker killed -----------------------------------------------------------------
train kill
t_wait_file "$ck/latest" 120
p=$(victim 2)
t_ok $([ -n "$p" ]; echo $?) "kill: rank 2's worker after the first checkpoint: pid ${p:-?}"
keep="$(victim 0) $(victim 1) $(victim 3)"
[ -n "$p" ] && kill -KILL "$p"
wait $run
t_is $? 0 "... the step finishes (exit 0)"
t_is "$(crc kill)" "$want" "... with the weights of the baseline, bit for bit"
t_is "$(warm_lines kill 1)" 3 "... ranks 0, 1 and 3 resumed warm, from the checkpoint in memory"
t_is "$(grep -c "kept for a warm restart" "$T_TMP/kill.err")" 3 "... their supervisors kept them"
alive=0
for k in $keep; do grep -q "worker $k kept for a warm restart" "$T_TMP/kill.err" && alive=$((alive + 1)); done
t_is "$alive" 3 "... the kept workers are the processes of generation 0 ($keep)"
clean kill

# --- 2. a node lost, a spare ------------------------------------------------------------
train node
t_wait_file "$ck/latest" 120
g=$(node 1)
t_ok $([ -n "$g" ]; echo $?) "node: node1's process group: ${g:-?}"
[ -n "$g" ] && kill -s KILL -- "-$g"
wait $run
t_is $? 0 "... the step finishes (exit 0)"
t_is "$(crc node)" "$want" "... with the weights of the baseline, bit for bit"
t_is "$(warm_lines node 1)" 2 "... ranks 0 and 1 resumed warm, from memory"
t_like "$T_TMP/node.err" "the spare takes rank 2 of 4" "... the spare's workers took ranks 2 and 3"
clean node

# --- 3. the warm path failing --------------------------------------------------------
cat >"$T_TMP/slow.sh" <<'SH'
#!/bin/sh
# a worker that starts 6 s late in generation 1
[ "${DDL_GENERATION:-0}" != 1 ] || sleep 6
exec "$@"
SH
chmod +x "$T_TMP/slow.sh"
PROG="$T_TMP/slow.sh $FMNIST"
DDL_BOOTSTRAP_TIMEOUT=3 train fail --restarts 3
t_wait_file "$ck/latest" 120
p=$(victim 2)
t_ok $([ -n "$p" ]; echo $?) "fail: rank 2's worker after the first checkpoint: pid ${p:-?}"
[ -n "$p" ] && kill -KILL "$p"
wait $run
t_is $? 0 "... the step finishes (exit 0)"
t_is "$(crc fail)" "$want" "... with the weights of the baseline, bit for bit"
t_like "$T_TMP/fail.err" "ddl_rejoin failed: .*exit, to be restarted cold" \
    "... the kept workers' rejoin failed (the new generation's exchange timed out)"
t_like "$T_TMP/fail.err" "withdrew from warm restarts" "... they withdrew"
t_like "$T_TMP/fail.out" "^fmnist-train: resuming from checkpoint step [0-9]+ .*restart 2$" \
    "... and generation 2 started them cold"
t_is "$(warm_lines fail 2)" 0 "... no rank resumed warm into generation 2"
clean fail

# --- 4. a rank still rejoining when the warm path fails elsewhere ----------------------
# Rank 0's exchange gives up after 3 s, ranks 1 and 3's wait 30 s: rank 0
# withdraws and exits, which ends generation 1 before it formed.  Ranks 1
# and 3, still rejoining it, join generation 2 warm instead of withdrawing
# too (which would end generation 2 and spend a third restart: exit 90
# with --restarts 2).
cat >"$T_TMP/stagger.sh" <<'SH'
#!/bin/sh
case "${DDL_GENERATION:-0}:${DDL_RANK:-}" in
0:0) export DDL_BOOTSTRAP_TIMEOUT=3 ;;
0:*) export DDL_BOOTSTRAP_TIMEOUT=30 ;;
1:*) sleep 6 ;;
esac
exec "$@"
SH
chmod +x "$T_TMP/stagger.sh"
PROG="$T_TMP/stagger.sh $FMNIST"
train stagger
t_wait_file "$ck/latest" 120
p=$(victim 2)
t_ok $([ -n "$p" ]; echo $?) "stagger: rank 2's worker after the first checkpoint: pid ${p:-?}"
[ -n "$p" ] && kill -KILL "$p"
wait $run
t_is $? 0 "... the step finishes within --restarts 2 (exit 0)"
t_is "$(crc stagger)" "$want" "... with the weights of the baseline, bit for bit"
t_like "$T_TMP/stagger.err" "ddl_rejoin failed: .*rank 0 .generation 0. cannot join" \
    "... rank 0's rejoin timed out and it withdrew"
t_is "$(grep -c "generation 1 ended before it formed .*: joining generation 2" \
    "$T_TMP/stagger.err")" 2 "... ranks 1 and 3 joined generation 2 instead"
t_is "$(grep -c "^rank [13]: warm restart 1: .* in memory$" "$T_TMP/stagger.out")" 2 \
    "... and resumed warm into it, from memory"
t_is "$(grep -c "restart 3" "$T_TMP/stagger.out")" 0 "... no third restart"
clean stagger

# --- 5. an async checkpoint pending at the failure ------------------------------------
# With --checkpoint-async the checkpoint of the step before the kill is still
# pending (it is agreed at the next begin): the kept ranks' libddl drops it
# at ddl_rejoin (debug line), and every rank resumes from the one before.
PROG="$FMNIST --checkpoint-async"
export DDL_LOG_LEVEL=debug
train async
unset DDL_LOG_LEVEL
t_wait_file "$ck/latest" 120
p=$(victim 2)
t_ok $([ -n "$p" ]; echo $?) "async: rank 2's worker after the first checkpoint: pid ${p:-?}"
[ -n "$p" ] && kill -KILL "$p"
wait $run
t_is $? 0 "... the step finishes (exit 0)"
t_is "$(crc async)" "$want" "... with the weights of the baseline, bit for bit"
t_like "$T_TMP/async.err" "async checkpoint step [0-9]+ dropped uncommitted" \
    "... a kept rank dropped its pending checkpoint at the rejoin"
t_is "$(grep -c "^rank [013]: warm restart 1: " "$T_TMP/async.out")" 3 \
    "... ranks 0, 1 and 3 resumed warm"
clean async

# --- 6. a rank lost inside a commit -----------------------------------------------------
# DDL_CKPT_FAULT=exit:2: rank 2 exits inside the first commit (step 20) once
# every shard is written; rank 0 publishes step 20 and the other ranks'
# commit fails.  Step 20 is latest although their save failed: they kept
# its copy before saving, and resume from it in memory.
PROG=$FMNIST
export DDL_CKPT_FAULT=exit:2
train commit
unset DDL_CKPT_FAULT
wait $run
t_is $? 0 "commit: rank 2 exiting inside the first commit: the step finishes (exit 0)"
t_like "$T_TMP/commit.err" "rank 2 exits inside the commit of step 20" "... rank 2 exited there"
t_is "$(grep -c "^rank [013]: warm restart 1: rank [013] of 4, from checkpoint step 20 in memory$"     "$T_TMP/commit.out")" 3 "... ranks 0, 1 and 3 resumed from step 20 (published), in memory"
t_is "$(crc commit)" "$want" "... with the weights of the baseline, bit for bit"
clean commit
t_done
