#!/bin/sh
# t0019-slurm-recovery: failures under `srun --ddl` on the 3-node namespace
# cluster: fmnist-train with checkpoints, 2 tasks per node, each
# scenario started fresh, the data over TCP (UCX_TLS=tcp,self) and one
# allreduce algorithm (ring), so that the final weights are bit-identical
# whenever the world is the same:
#
#  0. baseline: -N3 --ddl-spares=1: 4 ranks on n1-n2, n3 idle; exits 0;
#     --ddl-spares without --no-kill draws srun's warning;
#  1. a worker killed with SIGKILL after the first checkpoint: restart,
#     same weights, `ddl-agent status` on n1 and failure-gen0.json name it;
#  2. a worker stopped with SIGSTOP: found by --ddl-hang-timeout=2, same
#     weights, class worker-hang;
#  3. n2 crashed (link down first: no FIN) with --ddl-spares=1: n3 takes its
#     place, same weights, class node-lost; srun exits 0 once Slurm has
#     seen the node fail;
# 3b. the same with examples/torch/fmnist_ddp.py (DDP with ddl's hook and
#     ddl.checkpoint): the weights of the same world under srun without a
#     failure (DDL_ALLREDUCE_ALGO=rd);
#  4. n3 crashed without a spare, --ddl-min-nodes=2: the world shrinks to 4
#     ranks, the run completes with a sane accuracy;
#  5. n1, the leader's node, crashed with --ddl-spares=1: n2 takes over as
#     the leader, n3 replaces n1, same weights; and n1's agent killed
#     without a spare: every task exits 93;
#  6. every worker killed with SIGKILL during async checkpoints: the restart
#     resumes from a committed checkpoint, same weights; checkpoints on a
#     full disk (a 2 MiB tmpfs): every commit fails cleanly, same weights;
#  7. a worker that exits 1 every time: exit 90 after the budget
#     (--ddl-restarts=2); with checkpoints and no progress, exit 91 (the
#     crash-loop guard, DDL_CRASH_LOOP=1);
#
# and after each, no fmnist-train, ddl-launch or ddl-agent on any node that
# is up.  Detection and recovery times are measured by bench/run-node-loss.sh,
# not here.  Skips like t0015 (root, Slurm, plugin, fmnist and its data).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
. "$top_srcdir/tests/slurm/lib-cluster.sh"
DATA=${DDL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -x "$FMNIST" ] || t_skip_all "fmnist-train not built (no OpenBLAS)"
[ -r "$DATA/train-images-idx3-ubyte.gz" ] || t_skip_all "no Fashion-MNIST in $DATA"

cl_init "/var/tmp/ddl-cluster.$$" 3 'max_restarts = 5
hang_timeout_min = 1
checkpoint_roots = {"/var/tmp"}'
# a full disk for scenario 6: a 2 MiB tmpfs, mounted before the nodes start
# (they copy the host's mounts when they start)
TINY=/var/tmp/ddl-tiny.$$
mkdir -p "$TINY" && mount -t tmpfs -o size=2m tmpfs "$TINY" 2>/dev/null || TINY=""
cl_start
export UCX_TLS=tcp,self DDL_ALLREDUCE_ALGO=ring
unset MASTER_ADDR MASTER_PORT
CK=/var/tmp/ddl-ck.$$
trap 'sh "$CLUSTER" stop "$CL_DIR" >/dev/null 2>&1; rm -rf "$CK"*;
      [ -n "$TINY" ] && umount -l "$TINY" && rmdir "$TINY"; t_cleanup' EXIT
ARGS="--epochs 2 --limit 30000 --checkpoint-every 25"

# train NAME [SRUN-OPTIONS]: start the training in the background (pid in
# $run), checkpoints in $CK-NAME (or $CKDIR), the program's extra options
# in $FARGS, output in $T_TMP/NAME.out and .err.
FARGS=""
train() {
    name=$1
    shift
    ck="${CKDIR:-$CK-$name}"
    # shellcheck disable=SC2086 # ARGS, FARGS: several words
    timeout -k 5 240 srun --mpi=pmix -N3 --ntasks-per-node=2 --ddl --ddl-restarts=2 \
        --ddl-checkpoint-dir="$ck" -J "$T_TOKEN" "$@" "$FMNIST" $ARGS $FARGS --checkpoint-dir "$ck" \
        >"$T_TMP/$name.out" 2>"$T_TMP/$name.err" &
    run=$!
    t_begin=$(date +%s)
}
# wait_run: wait for the step; its exit status, and how long it ran as a
# diagnostic line (Slurm's own node-failure notice takes about 30 s)
wait_run() {
    wait $run
    rc=$?
    t_diag "$name: srun exited $rc after $(($(date +%s) - t_begin)) s"
    return $rc
}
crc() { t_checksums "$T_TMP/$1.out"; }
# victim RANK [NAME=VALUE...]: the pid of world rank RANK's worker (the program itself)
victim() {
    r=$1
    shift
    t_procs_of fmnist-train "fmnist-train .*$ck" "DDL_RANK=$r" "$@" | head -1
}
clean() { # clean WHAT: nothing of the step left on the nodes
    cl_clean "$1: no fmnist-train, ddl-launch or ddl-agent left on the nodes that are up"
}
summary() { cat "$CK-$1/failure-gen0.json" 2>/dev/null; }

# --- 0. baseline --------------------------------------------------------------
train base --ddl-spares=1
wait_run
t_status $? 0 "baseline: 3 nodes, one of them a spare: exits 0" "$T_TMP/base.err"
want=$(crc base)
t_is "${want%% *}" 4 "... 4 ranks trained (n3 was idle) and agree: ${want#* }"
t_like "$T_TMP/base.err" "warning: --ddl-spares and --ddl-min-nodes recover from a lost node only if Slurm keeps the job and the step: add --no-kill" \
    "... srun warns that --ddl-spares needs --no-kill"
clean baseline

# --- 1. SIGKILL ------------------------------------------------------------------
train kill --ddl-spares=1 --no-kill
t_wait_file "$ck/latest" 120
p=$(victim 2)
t_ok $([ -n "$p" ]; echo $?) "kill: rank 2's worker after the first checkpoint: pid ${p:-?}"
[ -n "$p" ] && kill -KILL "$p"
i=0
while [ $((i += 1)) -lt 100 ] && ! on_node n1 "$DDL_AGENT" status 2>/dev/null | grep -q "last failure"; do
    sleep 0.1
done
on_node n1 "$DDL_AGENT" status >"$T_TMP/status" 2>&1
t_like "$T_TMP/status" "last failure: generation 0: rank 2 on node 1 \(n2\): worker $p was killed by signal 9 \(SIGKILL\) \[worker-signal\]; restart 1 of 2" \
    "... ddl-agent status on n1 names the failure while the step runs on"
wait_run
t_status $? 0 "... the step finishes (exit 0)" "$T_TMP/kill.err"
t_is "$(crc kill)" "$want" "... with the weights of the baseline"
t_like "$T_TMP/kill.err" "generation 0: rank 2 on node 1 \(n2\): worker [0-9]+ was killed by signal 9 \(SIGKILL\) \[worker-signal\]; restart 1 of 2: generation 1 resumes from the checkpoint of step [0-9]+" \
    "... srun's output names it in one line"
summary kill >"$T_TMP/sum"
t_like "$T_TMP/sum" '"generation": 0, "rank": 2, "node": 1, "host": "n2", "class": "worker-signal", .*"signal": 9, .*"decision": "restart"' \
    "... and failure-gen0.json"
clean kill

# --- 2. SIGSTOP ------------------------------------------------------------------
# 2 s, times DDL_TEST_TIME_SCALE under a slow build (scripts/sanitize.sh sets
# 3): a sanitizer build's worker takes longer than 2 s to its first beat.
HANG_S=$((2 * ${DDL_TEST_TIME_SCALE:-1}))
train hang --ddl-hang-timeout=$HANG_S --ddl-spares=1 --no-kill
t_wait_file "$ck/latest" 120
p=$(victim 1)
t_ok $([ -n "$p" ]; echo $?) "hang: rank 1's worker stopped after the first checkpoint: pid ${p:-?}"
[ -n "$p" ] && kill -STOP "$p"
wait_run
t_status $? 0 "... the step finishes (exit 0)" "$T_TMP/hang.err"
t_is "$(crc hang)" "$want" "... with the weights of the baseline"
t_like "$T_TMP/hang.err" "rank 1 on node 0 \(n1\): worker $p hung: nothing heard for [0-9.]+ s \(hang timeout $HANG_S.0 s\); .*now stopped \(state T" \
    "... named as hung, with what it was doing"
summary hang >"$T_TMP/sum"
t_like "$T_TMP/sum" '"rank": 1, .*"class": "worker-hang"' "... failure-gen0.json: worker-hang"
clean hang

# --- 6a. every worker killed during async checkpoints ---------------------------
FARGS=--checkpoint-async
train async --ddl-spares=1 --no-kill
t_wait_file "$ck/latest" 120
ps=$(t_procs_of fmnist-train "fmnist-train .*$ck")
t_is "$(echo $ps | wc -w)" 4 "async: the 4 workers, after the first committed checkpoint"
# shellcheck disable=SC2086 # several pids
kill -KILL $ps
wait_run
t_status $? 0 "... all killed with SIGKILL at once: the step finishes (exit 0)" "$T_TMP/async.err"
t_like "$T_TMP/async.out" "^fmnist-train: resuming from checkpoint step [0-9]+" \
    "... resuming from a committed checkpoint"
t_is "$(crc async)" "$want" "... with the weights of the baseline"
FARGS=""
clean async

# --- 6b. a full disk ---------------------------------------------------------------
if [ -n "$TINY" ]; then
    CKDIR="$TINY/ck" train tiny --ddl-spares=1 --no-kill
    wait_run
    t_status $? 0 "full disk (2 MiB tmpfs): every commit fails, the step ends normally (exit 0)" "$T_TMP/tiny.err"
    t_like "$T_TMP/tiny.out" "checkpoint [0-9]+ not committed \(DDL_ERR_IO.*No space left on device" \
        "... each failed commit is reported with its cause"
    t_is "$(crc tiny)" "$want" "... and training ends with the baseline's weights"
    clean tiny
else
    t_skip "full disk: cannot mount a 2 MiB tmpfs"
fi

# --- 3. a node lost, a spare takes its place ------------------------------------
train spare --ddl-spares=1 --no-kill
t_wait_file "$ck/latest" 120
cl_crash n2 silent
wait_run
t_status $? 0 "spare: n2 crashed (link down first): the step finishes (exit 0)" "$T_TMP/spare.err"
t_is "$(crc spare)" "$want" "... with the weights of the baseline"
t_like "$T_TMP/spare.err" "node 1 \(n2\): its agent was silent for [0-9.]+ s \(allowed [0-9.]+ s, node timeout 2.0 s\) \[node-lost\]; restart 1 of 2: generation 1 \(spare node 2, n3, in place of node 1\)" \
    "... the leader names the lost node and the spare"
# the adaptive detector's allowance, learned from 0.1 s beats: a
# diagnostic line, not a check (about 0.3 s on an idle machine, more under
# make check's load; its speed is measured by bench/run-restart.sh)
adaptive_allowance() { # adaptive_allowance FILE WHO
    set -- "$(sed -n 's/.*was silent for \([0-9.]*\) s (allowed \([0-9.]*\) s, node timeout.*/\1 \2/p' "$1" | head -1)" "$2"
    t_diag "$2 was known lost after a silence of ${1% *} s, past an allowance of ${1#* } s"
}
adaptive_allowance "$T_TMP/spare.err" "n2"
t_like "$T_TMP/spare.err" "task 4: the spare takes rank 2 of 4" "... n3's first task takes rank 2"
summary spare >"$T_TMP/sum"
t_like "$T_TMP/sum" '"rank": -1, "node": 1, "host": "n2", "class": "node-lost", .*"decision": "restart"' \
    "... failure-gen0.json: node-lost"
clean spare
cl_restart

# --- 3b. the same with the PyTorch example (ddl.torch hook, ddl.checkpoint) ------
# the reference is the same world without a failure (4 ranks on 2 nodes);
# recursive doubling reduces in the same order whatever DDP's buckets are
if t_find_python numpy torch; then
    PYARGS="--epochs 1 --train-samples 2400 --test-samples 1000 --checkpoint-every 5 --data $DATA"
    pyrun() { # pyrun NAME SRUN-OPTIONS...: fmnist_ddp.py under srun --ddl, output in $T_TMP/NAME.*
        pyname=$1
        shift
        # shellcheck disable=SC2086
        DDL_ALLREDUCE_ALGO=rd GLOO_SOCKET_IFNAME=eth0 timeout -k 5 300 \
            srun --mpi=pmix --ntasks-per-node=2 --ddl -J "$T_TOKEN" "$@" \
            "$PY" "$top_srcdir/examples/torch/fmnist_ddp.py" $PYARGS \
            >"$T_TMP/$pyname.out" 2>"$T_TMP/$pyname.err"
    }
    pyhash() { sed -n 's/^rank [0-9]*: weights sha256 \([0-9a-f]\{64\}\)$/\1/p' "$1" | sort -u | tr '\n' ' '; }
    pyrun pyref -N2 --ddl-checkpoint-dir="$CK-pyref"
    t_status $? 0 "python: fmnist_ddp.py under srun -N2 --ddl (the reference) exits 0" "$T_TMP/pyref.err"
    pyref=$(pyhash "$T_TMP/pyref.out")
    t_is "$(echo $pyref | wc -w)" 1 "... every rank ends with the same weights (${pyref:-none})"
    ck="$CK-python"
    pyrun python -N3 --ddl-restarts=2 --ddl-spares=1 --no-kill --ddl-checkpoint-dir="$ck" &
    run=$! name=python t_begin=$(date +%s)
    t_wait_file "$ck/latest" 200
    cl_crash n2 silent
    wait_run
    t_status $? 0 "python: fmnist_ddp.py under srun --ddl --ddl-spares=1, n2 crashed after the first checkpoint: exit 0" \
        "$T_TMP/python.err"
    t_like "$T_TMP/python.out" '^generation 1: resumed from the checkpoint of step [0-9]+$' \
        "... generation 1 resumed from a checkpoint"
    t_is "$(pyhash "$T_TMP/python.out")" "${pyref:-none}" \
        "... and every rank ended with the reference's weights"
    t_like "$T_TMP/python.err" "task 4: the spare takes rank 2 of 4" "... n3's first task took rank 2"
    clean python
    cl_restart
else
    for i in 1 2 3 4 5 6 7 8; do t_skip "python: no python3 with torch and the ddl package"; done
fi

# --- 4. a node lost, the world shrinks -------------------------------------------
train shrink --ddl-min-nodes=2 --no-kill
t_wait_file "$ck/latest" 120
cl_crash n3
wait_run
t_status $? 0 "shrink: n3 crashed, no spare, --ddl-min-nodes=2: the step finishes (exit 0)" "$T_TMP/shrink.err"
t_is "$(crc shrink | cut -d' ' -f1)" 4 "... on 4 ranks, which agree"
acc=$(sed -n 's/^final test accuracy: \([0-9]*\)\..*/\1/p' "$T_TMP/shrink.out")
t_ok $([ "${acc:-0}" -ge 80 ]; echo $?) "... test accuracy ${acc:-?}% (at least 80%)"
t_like "$T_TMP/shrink.err" "node 2 \(n3\): its agent closed its link \[node-lost\]; restart 1 of 2: generation 1 \(shrunk to 2 nodes, 4 ranks" \
    "... the leader says the world shrank"
clean shrink
cl_restart

# --- 5. the leader lost ----------------------------------------------------------
train leader --ddl-spares=1 --no-kill
t_wait_file "$ck/latest" 120
cl_crash n1 silent
# while generation 1 runs: rank 0's new worker, on n3, has MASTER_ADDR naming n3
i=0
m=""
while [ $((i += 1)) -lt 300 ] && [ -z "$m" ] && kill -0 $run 2>/dev/null; do
    p=$(victim 0 DDL_GENERATION=1)
    [ -n "$p" ] && m=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^MASTER_ADDR=//p')
    sleep 0.1
done
wait_run
t_status $? 0 "leader: n1 (the leader's node) crashed, link down first: the step finishes (exit 0)" "$T_TMP/leader.err"
t_is "$(crc leader)" "$want" "... with the weights of the baseline"
t_like "$T_TMP/leader.err" "node 1 \(n2\) takes over as the leader" "... n2, the lowest live node, leads"
t_like "$T_TMP/leader.err" "node 2 follows node 1" "... n3 follows it"
t_is "$m" "192.168.213.13" "... rank 0's worker in generation 1 (on n3) gets MASTER_ADDR=n3's address"
t_like "$T_TMP/leader.err" "node 0 \(n1\): the leader's agent was silent for [0-9.]+ s \(allowed [0-9.]+ s, node timeout 2.0 s\) \[node-lost\]; restart 1 of 2: generation 1 \(spare node 2, n3, in place of node 0\)" \
    "... and restarts with the spare in n1's place"
adaptive_allowance "$T_TMP/leader.err" "n1 (the leader)"
summary leader >"$T_TMP/sum"
t_like "$T_TMP/sum" '"rank": -1, "node": 0, "host": "n1", "class": "node-lost"' \
    "... failure-gen0.json, written by the new leader"
clean leader
cl_restart

# --- 5b. an agent killed, no spare -----------------------------------------------
train agent
t_wait_file "$ck/latest" 120
p=$(pgrep --ns "$(slurmd_pid n1)" --nslist net -x ddl-agent)
t_ok $([ -n "$p" ]; echo $?) "agent: n1's ddl-agent (the leader, pid ${p:-?}) after the first checkpoint"
[ -n "$p" ] && kill -KILL "$p"
wait_run
t_status $? 93 "... killed: srun exits 93 (no spare: no world without n1)" "$T_TMP/agent.err"
t_like "$T_TMP/agent.err" "rank [01]: lost the node's ddl-agent; stopping the worker \(exit status 93\)" \
    "... n1's supervisors see their agent go"
t_like "$T_TMP/agent.err" "lost the leader agent \(node 0, 192.168.213.11:[0-9]+\): closed its link; stopping this node's ranks \(exit status 93\)" \
    "... the other nodes see the leader's link close"
clean agent

# --- 7. budget and crash loop ----------------------------------------------------
cat >"$T_TMP/fail.sh" <<'EOF'
sleep 0.3
[ "$DDL_RANK" = 1 ] && exit 1
sleep 20
EOF
timeout -k 5 120 srun --mpi=pmix -N2 --ntasks-per-node=2 --ddl --ddl-restarts=2 -J "$T_TOKEN" \
    sh "$T_TMP/fail.sh" >"$T_TMP/loop.out" 2>"$T_TMP/loop.err"
t_status $? 90 "budget: a worker that exits 1 every time: exit 90 after 2 restarts" "$T_TMP/loop.err"
t_like "$T_TMP/loop.err" "generation 2: rank 1 on node 0 \(n1\): worker [0-9]+ exited with status 1 \[worker-exit\]; stopping the step \(exit status 90\): the restarts allowed \(--ddl-restarts\) are spent" \
    "... the last failure says the budget is spent"
mkdir -p "$CK-loop"
DDL_CRASH_LOOP=1 timeout -k 5 120 srun --mpi=pmix -N2 --ntasks-per-node=2 --ddl --ddl-restarts=5 \
    --ddl-checkpoint-dir="$CK-loop" -J "$T_TOKEN" sh "$T_TMP/fail.sh" >"$T_TMP/loop.out" 2>"$T_TMP/loop.err"
t_status $? 91 "crash loop: no checkpoint progress over 2 failures (DDL_CRASH_LOOP=1): exit 91" "$T_TMP/loop.err"
t_like "$T_TMP/loop.err" "stopping the step \(exit status 91\): failures in a row without a new checkpoint: a crash loop \(do not requeue\)" \
    "... named a crash loop"
clean loop
t_done
