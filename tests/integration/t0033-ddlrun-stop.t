#!/bin/sh
# t0033-ddlrun-stop: SIGTERM (or SIGUSR1) to ddlrun stops the job at one step
# boundary, as Slurm's time limit does under srun --ddl: every fmnist-train
# rank gets DDL_STOP from ddl_should_stop() at the same step, commits the
# checkpoint of that step (not only the periodic ones) and exits with 94;
# ddlrun exits 94; run again, the job resumes from that checkpoint and ends
# with the same weights as a run that was never stopped.  A program without
# libddl gets the signal itself and may exit 94 on its own.  Nothing is left
# running.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

[ -x "$FMNIST" ] || t_skip_all "fmnist-train not built (configure found no OpenBLAS: apt-get install libopenblas-dev)"
data=${DDL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -r "$data/train-images-idx3-ubyte.gz" ] || t_skip_all "no Fashion-MNIST data in $data (scripts/install-deps.sh fetches it)"
export DDL_ALLREDUCE_ALGO=ring # the same reduction order in every run
args="--epochs 2 --limit 3000 --batch 64 --checkpoint-every 25"

# the reference: never stopped
t_run 120 "$DDLRUN" -n 3 "$FMNIST" $args --checkpoint-dir "$T_TMP/ref"
t_is $? 0 "an uninterrupted run: exit 0"
ref=$(t_checksums "$T_TMP/out")
t_ok $([ -n "$ref" ]; echo $?) "... its replicas agree ($ref)"

# stopped with SIGTERM once training is under way (the first periodic
# checkpoint is committed); --pace keeps it running long enough
ck="$T_TMP/ck-$T_TOKEN" # the token finds the job's processes
timeout -k 5 120 "$DDLRUN" -n 3 "$FMNIST" $args --pace 40 --checkpoint-dir "$ck" \
    >"$T_TMP/run.out" 2>"$T_TMP/run.err" &
pid=$!
t_wait_file "$ck/latest" 60
t_ok $? "training is under way (checkpoint $(cat "$ck/latest" 2>/dev/null) committed)"
kill -TERM $pid
wait $pid
t_is $? 94 "SIGTERM to ddlrun: the job stops with exit status 94"
t_diag "$(cat "$T_TMP/run.err")"
stopped=$(sed -n 's/^fmnist-train: stopped at step \([0-9]*\): checkpoint committed.*/\1/p' "$T_TMP/run.out")
t_ok $([ -n "$stopped" ]; echo $?) "... after committing the checkpoint of step ${stopped:-?}"
t_is "$(cat "$ck/latest" 2>/dev/null)" "$stopped" "... which is the latest checkpoint"
t_ok $([ -n "$stopped" ] && [ "$stopped" -gt 25 ] && [ -f "$ck/step-$(printf %08d "$stopped")/MANIFEST" ]; echo $?) \
    "... committed by every rank, after the periodic checkpoint of step 25"
t_like "$T_TMP/run.err" "stopping the step: SIGTERM .*every rank commits a checkpoint at one step boundary and exits with 94" \
    "the leader agent says why it stops the step"
t_like "$T_TMP/run.err" "generation 0: stopped \(SIGTERM .*\) at boundary [0-9]+: every rank committed its checkpoint and exited; exit status 94" \
    "... and how it ended"
t_wait_procs 0 10
t_is "$(t_procs)" 0 "no process of the stopped job is left"

# resumed: the same weights as the run never stopped
t_run 120 "$DDLRUN" -n 3 "$FMNIST" $args --checkpoint-dir "$ck"
t_is $? 0 "run again: exit 0"
t_like "$T_TMP/out" "^fmnist-train: resuming from checkpoint step $stopped " "... resuming from step $stopped"
t_is "$(t_checksums "$T_TMP/out")" "$ref" "... ending with the same weights as the uninterrupted run"

# SIGUSR1 (sbatch --signal=USR1@T under Slurm) does the same
ck2="$T_TMP/ck2-$T_TOKEN"
timeout -k 5 120 "$DDLRUN" -n 2 "$FMNIST" $args --pace 40 --checkpoint-dir "$ck2" \
    >"$T_TMP/run.out" 2>"$T_TMP/run.err" &
pid=$!
t_wait_file "$ck2/latest" 60
kill -USR1 $(pgrep -P $pid) # ddlrun, not timeout(1), which SIGUSR1 would end
wait $pid
t_is $? 94 "SIGUSR1 to ddlrun: exit status 94 too"
t_like "$T_TMP/run.out" "^fmnist-train: stopped at step [0-9]+: checkpoint committed" "... after a checkpoint"

# the Python package: ddl.should_stop() is True at one step on every rank
if t_find_python numpy; then
    cat >"$T_TMP/stop.py" <<'EOF'
import os, sys, numpy as np, ddl
ddl.init()
x = np.ones(1000, dtype=np.float32)
step = 0
while True:
    ddl.allreduce(x, op="avg")
    if ddl.should_stop(step):
        os.write(1, b"rank %d stops at step %d\n" % (ddl.rank(), step))
        ddl.finalize()
        sys.exit(ddl.EXIT_STOPPED)
    step += 1
    if step == 20:
        open(sys.argv[1] + ".%d" % ddl.rank(), "w").close()
EOF
    timeout -k 5 60 "$DDLRUN" -n 2 "$PY" -X "$T_TOKEN" "$T_TMP/stop.py" "$T_TMP/py-under-way" \
        >"$T_TMP/run.out" 2>"$T_TMP/run.err" &
    pid=$!
    t_wait_file "$T_TMP/py-under-way.1" 60
    kill -TERM $pid
    wait $pid
    t_is $? 94 "Python: SIGTERM to ddlrun, ddl.should_stop() says stop and the job exits 94"
    t_diag "$(cat "$T_TMP/run.err")"
    t_is "$(sed -n 's/^rank [01] stops at step \([0-9]*\)$/\1/p' "$T_TMP/run.out" | sort -u | wc -l)/$(grep -c stops "$T_TMP/run.out")" \
        "1/2" "... both ranks stop at the same step ($(head -1 "$T_TMP/run.out"))"
else
    t_skip "no ddl Python package with numpy: ddl.should_stop() not tested"
    t_skip "no ddl Python package with numpy"
fi

# a program without libddl gets the signal itself (the hook for other programs)
cat >"$T_TMP/other.sh" <<'EOF'
trap 'echo "rank $RANK checkpoints"; exit 94' TERM
while :; do sleep 0.1; done
EOF
timeout -k 5 60 "$DDLRUN" -n 2 sh "$T_TMP/other.sh" "$T_TOKEN" >"$T_TMP/run.out" 2>"$T_TMP/run.err" &
pid=$!
sleep 2
# the signal a ddl-launch asks for when its parent's forking thread ends
# (PR_SET_PDEATHSIG): while the parent lives on, neither a stop request nor
# passed on to the worker (as SIGTERM, it once stopped a whole Slurm step
# whose slurmstepd was killed on one node)
sups=$(pgrep -f "ddl-launch.*$T_TOKEN" | tr '\n' ' ')
t_is "$(echo $sups | wc -w)" 2 "the job's two ddl-launch processes: $sups"
# shellcheck disable=SC2086
/bin/kill -s RTMIN+1 $sups
sleep 1
t_is "$(pgrep -f "ddl-launch.*$T_TOKEN" | wc -l)" 2 "... SIGRTMIN+1 to them, their parent alive: both still run"
t_ok "$(grep -q "stopping the step" "$T_TMP/run.err"; [ $? -ne 0 ]; echo $?)" "... and nobody asked to stop the step"
kill -TERM $pid
wait $pid
t_is $? 94 "a program without libddl that exits 94 on SIGTERM: ddlrun exits 94"
t_is "$(grep -c checkpoints "$T_TMP/run.out")" 2 "... each rank got the signal once"
t_wait_procs 0 10
t_is "$(t_procs)" 0 "nothing is left running"
t_done
