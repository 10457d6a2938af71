#!/bin/sh
# t0018-restart: ddlrun --restarts on one machine: a
# worker killed with SIGKILL mid-training, or stopped with SIGSTOP (found
# by --hang-timeout), costs a restart from the last committed checkpoint,
# and the final weights are bit-identical to a run without failure; the
# failure is named in one line and in DIR/failure-gen0.json; nothing is
# left running.  With async checkpoints, every worker killed at once
# restarts from the last committed checkpoint, with the same result; on a
# full disk (root: a 2 MiB tmpfs) every commit fails cleanly and training
# ends as without checkpoints.  A program that fails at
# start every time stops after the restart budget (exit 90), or earlier at
# the crash-loop guard (exit 91) when checkpoints make no progress.  A
# program without libddl beats with `ddl-agent heartbeat STEP`.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

# the restart budget and the crash-loop guard, with a program that fails
# at once (a token in its arguments finds leftovers)
t_run 60 "$DDLRUN" -n 2 --restarts 2 sh -c 'echo "generation $DDL_GENERATION restart $DDL_RESTART_COUNT"; exit 3' "$T_TOKEN"
t_is $? 90 "a program failing every time: ddlrun --restarts 2 exits 90 when the budget is spent"
# (a rank may be stopped before it prints: its peer's failure comes first)
n=$(grep -c '^generation 2 restart 2$' "$T_TMP/out")
t_ok $([ "$n" -ge 1 ] && ! grep -q '^generation 3' "$T_TMP/out"; echo $?) \
    "... after generations 0, 1 and 2, each with DDL_GENERATION and DDL_RESTART_COUNT ($n of 2 ranks said generation 2)"
t_like "$T_TMP/err" "generation 2: rank [01] on node 0 .*; stopping the step \(exit status 90\): the restarts allowed \(--restarts\) are spent \(2 of 2 used\)" "... saying why"
t_run 60 "$DDLRUN" -n 2 --restarts 10 --crash-loop 2 --checkpoint-dir "$T_TMP/loop" sh -c 'exit 1' "$T_TOKEN"
t_is $? 91 "with --checkpoint-dir and no checkpoint progress: --crash-loop 2 stops with exit 91"
t_like "$T_TMP/err" "without a new checkpoint: a crash loop \(do not requeue\): 3 failures in a row, the latest checkpoint: none" "... saying it is a crash loop"
t_ok $([ -f "$T_TMP/loop/failure-gen2.json" ] && [ ! -f "$T_TMP/loop/failure-gen3.json" ]; echo $?) \
    "... after 3 generations, each summarised in failure-gen<G>.json"
t_run 30 "$DDLRUN" -n 1 --restarts x true
t_is $? 2 "--restarts x is refused (exit 2)"
t_like "$T_TMP/err" "--restarts: 'x' is not a number \(0-100\)" "... with the accepted range"

# a program without libddl beats with `ddl-agent heartbeat STEP`: while it
# does, it is not hung; once it stops, it is, with its last step reported
cat >"$T_TMP/beat.sh" <<EOF
i=0
while [ \$i -lt 20 ]; do "$DDL_AGENT" heartbeat \$i || exit 9; sleep 0.1; i=\$((i + 1)); done
[ "\$1" = stop ] && sleep 30
exit 0
EOF
t_run 60 "$DDLRUN" -n 2 --hang-timeout 1 sh "$T_TMP/beat.sh" go "$T_TOKEN"
t_is $? 0 "ddl-agent heartbeat every 0.1 s for 2 s under --hang-timeout 1: not taken as hung (exit 0)"
t_run 60 "$DDLRUN" -n 1 --hang-timeout 1 sh "$T_TMP/beat.sh" stop "$T_TOKEN"
t_is $? 92 "... silent afterwards: hung (exit 92)"
t_like "$T_TMP/err" "hung: nothing heard for 1.[0-9] s .*last beat after 0 collectives, step 19;" \
    "... the report names the last step given to ddl-agent heartbeat"
"$DDL_AGENT" heartbeat 3 2>"$T_TMP/err"
t_is $? 1 "ddl-agent heartbeat outside a watched worker: exit 1"
t_like "$T_TMP/err" "no supervisor to tell" "... saying there is no supervisor"

[ -x "$FMNIST" ] || { t_skip "fmnist-train not built (no OpenBLAS): no training to resume"; t_done; }
data=${DDL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -f "$data/train-images-idx3-ubyte.gz" ] || { t_skip "no Fashion-MNIST in $data"; t_done; }

# the same algorithm choices in every run and generation: one tune file
export DDL_TUNE_FILE="$T_TMP/tune"
args="--epochs 2 --limit 30000 --checkpoint-every 25"
# shellcheck disable=SC2086
t_run 300 "$DDLRUN" -n 4 "$FMNIST" $args --checkpoint-dir "$T_TMP/base"
t_is $? 0 "baseline: fmnist-train on 4 ranks with checkpoints, no failure"
want=$(sed -n 's/^checksums: all 4 ranks agree (\(0x[0-9a-f]*\))$/\1/p' "$T_TMP/out")

# fail_run NAME SIGNAL RANK [DDLRUN-OPTIONS]: run the training (with the
# program options $args $fargs) under --restarts 2, send SIGNAL to rank
# RANK's worker (RANK "all": to every worker at once) once the first
# checkpoint is committed; the output is in $T_TMP/out and err, the
# checkpoints in $ck
fargs=""
fail_run() {
    name=$1 sig=$2 victim_rank=$3
    shift 3
    ck="$T_TMP/ck-$name-$T_TOKEN"
    # shellcheck disable=SC2086
    timeout -k 5 300 "$DDLRUN" -n 4 --restarts 2 --checkpoint-dir "$ck" "$@" "$FMNIST" $args \
        $fargs --checkpoint-dir "$ck" >"$T_TMP/out" 2>"$T_TMP/err" &
    run=$!
    t_wait_file "$ck/latest" 120
    victims=""
    for p in $(pgrep -f "fmnist-train .*$ck"); do
        case "$(cat /proc/"$p"/comm 2>/dev/null)" in ddl-launch | ddlrun | timeout) continue ;; esac
        if [ "$victim_rank" = all ]; then
            victims="$victims $p"
        elif tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "DDL_RANK=$victim_rank"; then
            victims=$p
            break
        fi
    done
    t_ok $([ -n "$victims" ]; echo $?) "$name: the first checkpoint is committed; rank $victim_rank's worker: pid ${victims:-?}"
    # shellcheck disable=SC2086
    [ -n "$victims" ] && kill -s "$sig" $victims
    wait $run
}

fail_run kill KILL 2
t_is $? 0 "rank 2 killed with SIGKILL: ddlrun --restarts 2 finishes the training (exit 0)"
t_like "$T_TMP/err" "generation 0: rank 2 on node 0 \([^)]*\): worker [0-9]+ was killed by signal 9 \(SIGKILL\) \[worker-signal\]" \
    "... the failure in one line: generation, rank, signal"
t_like "$T_TMP/err" "restart 1 of 2: generation 1 resumes from the checkpoint of step [0-9]+" \
    "... and the restart, from which checkpoint"
t_like "$T_TMP/out" "^fmnist-train: resuming from checkpoint step [0-9]+" "... the program resumed"
got=$(sed -n 's/^checksums: all 4 ranks agree (\(0x[0-9a-f]*\))$/\1/p' "$T_TMP/out")
t_is "$got" "$want" "the final weights are bit-identical to the run without failure ($want)"
t_like "$ck/failure-gen0.json" '"generation": 0, "rank": 2, .*"class": "worker-signal", .*"signal": 9' \
    "failure-gen0.json names the rank, the class and the signal"
t_ok $(t_wait_procs 0 10; echo $?) "no process of the test is left"

# a hung rank: stopped, so it sends no heartbeat; the others wait for it in
# a collective, beating, and are not blamed
t0=$(date +%s)
fail_run hang STOP 1 --hang-timeout 5
t_is $? 0 "rank 1 stopped with SIGSTOP: --hang-timeout 5 finds it and the restart finishes (exit 0)"
t_like "$T_TMP/err" "rank 1: worker [0-9]+ hung: nothing heard for [0-9.]+ s .*now stopped \(state T" \
    "... ddl-launch reports the hang: how long, the last beat, the worker's state"
t_like "$T_TMP/err" "generation 0: rank 1 on node 0 \([^)]*\): worker [0-9]+ hung: .*\[worker-hang\]; restart 1 of 2" \
    "... the agent names rank 1 as the one that hung"
t_is "$(grep -o 'rank [0-9]*[: ].*hung:' "$T_TMP/err" | grep -o '^rank [0-9]*' | sort -u | tr '\n' ' ')" "rank 1 " \
    "... and no other rank"
got=$(sed -n 's/^checksums: all 4 ranks agree (\(0x[0-9a-f]*\))$/\1/p' "$T_TMP/out")
t_is "$got" "$want" "the final weights are bit-identical to the run without failure ($want)"
t_like "$ck/failure-gen0.json" '"rank": 1, .*"class": "worker-hang"' "failure-gen0.json: class worker-hang"
t_diag "the hang run took $(($(date +%s) - t0)) s"
t_ok $(t_wait_procs 0 10; echo $?) "no process of the test is left"

# async checkpoints, and every worker killed at once (perhaps during a
# background write): the restart resumes from the last committed one
fargs="--checkpoint-async"
fail_run all-async KILL all
t_is $? 0 "async checkpoints, every worker killed with SIGKILL: the restart finishes (exit 0)"
t_like "$T_TMP/out" "^fmnist-train: resuming from checkpoint step [0-9]+" "... resuming from a committed checkpoint"
got=$(sed -n 's/^checksums: all 4 ranks agree (\(0x[0-9a-f]*\))$/\1/p' "$T_TMP/out")
t_is "$got" "$want" "the final weights are bit-identical to the run without failure ($want)"
t_ok $(t_wait_procs 0 10; echo $?) "no process of the test is left"
fargs=""

# a full disk (a 2 MiB tmpfs: not one checkpoint fits): every commit fails
# cleanly, training goes on and ends as without checkpoints
if [ "$(id -u)" = 0 ] && mkdir -p "$T_TMP/tiny" && mount -t tmpfs -o size=2m tmpfs "$T_TMP/tiny" 2>/dev/null; then
    for mode in sync async; do
        fa=""
        [ $mode = async ] && fa="--checkpoint-async"
        # shellcheck disable=SC2086
        t_run 300 "$DDLRUN" -n 4 "$FMNIST" $args $fa --checkpoint-dir "$T_TMP/tiny/$mode"
        t_is $? 0 "$mode checkpoints on a full disk: the training ends normally (exit 0)"
        t_like "$T_TMP/out" "checkpoint [0-9]+ not committed \(DDL_ERR_IO.*No space left on device" \
            "... each failed commit is reported with its cause"
        got=$(sed -n 's/^checksums: all 4 ranks agree (\(0x[0-9a-f]*\))$/\1/p' "$T_TMP/out")
        t_is "$got" "$want" "... and the weights are those of the run with checkpoints ($want)"
    done
    umount "$T_TMP/tiny"
else
    t_skip "a full disk needs root to mount a small tmpfs"
fi
t_done
