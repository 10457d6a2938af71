#!/bin/sh
# t0020-ddlrun-emulate: `ddlrun --emulate`: one ddl-agent per
# emulated node, each node a process group (its agent, its ddl-launch tasks
# and their workers), supervised by the agents as under `srun --ddl`; so
# the node-loss scenarios of t0019 run here without Slurm or root.
# fmnist-train with checkpoints, 2 ranks per node, the data over TCP
# (UCX_TLS=tcp,self) and the ring allreduce, so that the final weights are
# bit-identical whenever the world is the same:
#
#  0. baseline: -n 4 --nodes 2 --spares 1: 4 ranks on node0-node1, node2
#     idle; the same weights as plain `ddlrun -n 4 --nodes 2`; `ddl-agent
#     status` shows the three agents and the spare tasks;
#  1. a worker killed with SIGKILL: restart, same weights, the status and
#     failure-gen0.json name it;
#  2. a worker stopped with SIGSTOP: found by --hang-timeout 2, same weights;
#  3. node1 killed (SIGKILL to its process group) with --spares 1: node2
#     takes its place, same weights; node1 frozen (SIGSTOP: its link stays
#     up but silent, like a crash with its link down): the same; node1
#     frozen without a spare: exit 93 after the whole node timeout
#     (DDL_DETECTOR=auto), or after the adaptive allowance with
#     DDL_DETECTOR=adaptive;
#  4. node1 killed without a spare, --min-nodes 1: the world shrinks to 2
#     ranks, the run completes with a sane accuracy;
#  5. node0, the leader's node, frozen with --spares 1: node1 takes over as
#     the leader, node2 replaces node0, same weights; node0 resumes, alone:
#     it forms no world and is taken back as a spare; node1 killed without
#     a spare or --min-nodes: exit 93; a rank's ddl-launch killed: the
#     step stops (its status, 137, is the highest), class supervisor-lost;
#     node0 and node1 killed at once on 5 nodes, --min-nodes 3: node2
#     leads, node3 and node4 follow it, the world shrinks to 3 nodes;
#  6. every worker killed during async checkpoints: the restart resumes from
#     a committed checkpoint, same weights;
#  7. a worker that exits 1 every time: exit 90 after the budget; with
#     checkpoints and no progress, exit 91; SIGINT to ddlrun: exit 130;
#  8. a worker killed while the others wait in allreduces and ignore
#     SIGTERM: the agents' notice aborts their collectives (DDL_ERR_ABORTED),
#     so the restart does not wait for the grace period;
#  9. nodes that come back: node1 frozen, the world shrinks (--min-nodes 1),
#     node1 resumes: taken back as a spare, the world grows back at the next
#     checkpoint, with the weights of a 4-rank run resumed from that
#     checkpoint; the same twice with DDL_NODE_RETAKES=1: the second return
#     is linked but never given ranks; the count outlives a takeover: a
#     node back once to node0, then lost and back again to node1, the new
#     leader, is not given ranks either;
# 10. nodes that restart (--reboot-after 0.5: a node whose process group was
#     killed starts again, a new agent and new tasks, as a machine that
#     rebooted): node1 killed, the world shrinks, node1 starts again, is
#     taken back and the world grows back, with the weights of a 6-rank run
#     resumed from the grow's checkpoint; node0, the leader, killed twice
#     with DDL_NODE_RETAKES=1: node1 takes over, node0 comes back and is
#     taken back once, the second time linked but never given ranks;
#
# and after each, nothing of the step left running.  Timings are measured
# by bench/run-restart.sh, not here.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
DATA=${DDL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -x "$FMNIST" ] || t_skip_all "fmnist-train not built (no OpenBLAS)"
[ -r "$DATA/train-images-idx3-ubyte.gz" ] || t_skip_all "no Fashion-MNIST in $DATA"
export UCX_TLS=tcp,self DDL_ALLREDUCE_ALGO=ring
unset MASTER_ADDR MASTER_PORT
ARGS="--epochs 2 --limit 20000 --checkpoint-every 25"

# train NAME [DDLRUN-OPTIONS]: start the training in the background (pid in
# $run) on 2 emulated nodes of 2 ranks, checkpoints in $T_TMP/ck-NAME, the
# program's extra options in $FARGS, output in $T_TMP/NAME.out and .err.
FARGS=""
train() {
    name=$1
    shift
    ck="$T_TMP/ck-$name"
    # shellcheck disable=SC2086 # ARGS, FARGS: several words
    timeout -k 5 200 "$DDLRUN" -n 4 --nodes 2 --emulate --restarts 2 --checkpoint-dir "$ck" \
        "$@" "$FMNIST" $ARGS $FARGS --checkpoint-dir "$ck" >"$T_TMP/$name.out" 2>"$T_TMP/$name.err" &
    run=$!
}
crc() { t_checksums "$T_TMP/$1.out"; }
# victim RANK: the pid of world rank RANK's worker (the program itself)
victim() { t_procs_of fmnist-train "fmnist-train .*$ck" "DDL_RANK=$1" | head -1; }
# node K: the process group of emulated node K (its agent's pid)
node() { pgrep -f "ddl-agent serve --socket $DDL_RUNTIME_DIR/.*-node$1.sock"; }
# crash NAME SIGNAL K [DDLRUN-OPTIONS]: train NAME; after the first
# checkpoint, SIGNAL to emulated node K's process group; the run's status.
crash() {
    cname=$1 sig=$2 k=$3
    shift 3
    train "$cname" "$@"
    t_wait_file "$ck/latest" 120
    g=$(node "$k")
    [ -n "$g" ] && kill -s "$sig" -- "-$g"
    wait $run
}
clean() { # clean WHAT: nothing of the step left (agents' sockets and checkpoints are in $T_TMP)
    i=0
    while [ $((i += 1)) -lt 50 ] && pgrep -f "$T_TMP" >/dev/null; do sleep 0.1; done
    t_is "$(pgrep -f "$T_TMP" | wc -l)" 0 "$1: no agent, ddl-launch or worker left"
}
summary() { cat "$T_TMP/ck-$1/failure-gen0.json" 2>/dev/null; }

# --- 0. baseline ------------------------------------------------------------------
# shellcheck disable=SC2086
t_run 200 "$DDLRUN" -n 4 --nodes 2 "$FMNIST" $ARGS --checkpoint-dir "$T_TMP/ck-plain"
t_is $? 0 "plain ddlrun -n 4 --nodes 2 (one agent): exits 0"
plain=$(t_checksums "$T_TMP/out" | sed -n 's/^4 //p')
train base --spares 1
i=0
while [ $((i += 1)) -lt 100 ] && [ "$("$DDL_AGENT" status 2>/dev/null | grep -c "spare")" -lt 2 ]; do
    sleep 0.1
done
"$DDL_AGENT" status >"$T_TMP/status" 2>&1
wait $run
t_is $? 0 "--emulate --spares 1: 3 agents, node2 a spare: exits 0"
want=$(crc base)
t_is "$want" "4 $plain" "... 4 ranks agree, with the weights of plain ddlrun --nodes 2 ($plain)"
t_is "$(grep -c "^step local-" "$T_TMP/status")" 3 "... ddl-agent status shows the step's 3 agents"
t_like "$T_TMP/status" "this node: node0 \(node 0, leader\)" "... node0's the leader"
t_like "$T_TMP/status" "^  [45] +spare " "... and node2's tasks are spares"
clean baseline

# --- 1. SIGKILL --------------------------------------------------------------------
train kill --spares 1
t_wait_file "$ck/latest" 120
p=$(victim 2)
t_ok $([ -n "$p" ]; echo $?) "kill: rank 2's worker after the first checkpoint: pid ${p:-?}"
[ -n "$p" ] && kill -KILL "$p"
i=0
while [ $((i += 1)) -lt 100 ] && ! "$DDL_AGENT" status 2>/dev/null | grep -q "last failure"; do
    sleep 0.1
done
"$DDL_AGENT" status >"$T_TMP/status" 2>&1
wait $run
t_is $? 0 "... the step finishes (exit 0)"
t_is "$(crc kill)" "$want" "... with the weights of the baseline"
t_like "$T_TMP/status" "last failure: generation 0: rank 2 on node 1 \(node1\): worker $p was killed by signal 9 \(SIGKILL\) \[worker-signal\]; restart 1 of 2" \
    "... ddl-agent status names the failure while the step runs on"
t_like "$T_TMP/kill.err" "generation 0: rank 2 on node 1 \(node1\): worker [0-9]+ was killed by signal 9 \(SIGKILL\) \[worker-signal\]; restart 1 of 2: generation 1 resumes from the checkpoint of step [0-9]+" \
    "... ddlrun's output names it in one line"
summary kill >"$T_TMP/sum"
t_like "$T_TMP/sum" '"rank": 2, "node": 1, "host": "node1", "class": "worker-signal", .*"decision": "restart"' \
    "... and failure-gen0.json"
clean kill

# --- 2. SIGSTOP --------------------------------------------------------------------
# Workers must reach their first collective within the hang timeout: 2 s,
# times DDL_TEST_TIME_SCALE under a slow build (scripts/sanitize.sh sets 3).
HANG_S=$((2 * ${DDL_TEST_TIME_SCALE:-1}))
train hang --spares 1 --hang-timeout $HANG_S
t_wait_file "$ck/latest" 120
p=$(victim 1)
t_ok $([ -n "$p" ]; echo $?) "hang: rank 1's worker stopped after the first checkpoint: pid ${p:-?}"
[ -n "$p" ] && kill -STOP "$p"
wait $run
t_status $? 0 "... the step finishes (exit 0)" "$T_TMP/hang.err"
t_is "$(crc hang)" "$want" "... with the weights of the baseline"
t_like "$T_TMP/hang.err" "rank 1 on node 0 \(node0\): worker $p hung: nothing heard for [0-9.]+ s \(hang timeout $HANG_S.0 s\); .*now stopped \(state T" \
    "... named as hung, with what it was doing"
clean hang

# --- 3. a node lost, a spare takes its place ---------------------------------------
train spare --spares 1
t_wait_file "$ck/latest" 120
g=$(node 1)
t_ok $([ -n "$g" ]; echo $?) "spare: node1 (process group ${g:-?}) killed after the first checkpoint"
[ -n "$g" ] && kill -s KILL -- "-$g" # (dash takes -s SIG before --, not -SIG)
wait $run
t_status $? 0 "... the step finishes (exit 0: node1's tasks do not count, as under srun)" "$T_TMP/spare.err"
t_is "$(crc spare)" "$want" "... with the weights of the baseline"
t_like "$T_TMP/spare.err" "node 1 \(node1\): its agent closed its link \[node-lost\]; restart 1 of 2: generation 1 \(spare node 2, node2, in place of node 1\)" \
    "... the leader names the lost node and the spare"
t_like "$T_TMP/spare.err" "task 4: the spare takes rank 2 of 4 \(generation 1\)" "... node2's first task takes rank 2"
summary spare >"$T_TMP/sum"
t_like "$T_TMP/sum" '"rank": -1, "node": 1, "host": "node1", "class": "node-lost"' \
    "... failure-gen0.json: node-lost"
clean spare

crash frozen STOP 1 --spares 1
t_status $? 0 "frozen: node1 stopped (SIGSTOP to its process group): the step finishes (exit 0)" "$T_TMP/frozen.err"
t_is "$(crc frozen)" "$want" "... with the weights of the baseline"
t_like "$T_TMP/frozen.err" "node 1 \(node1\): its agent was silent for [0-9.]+ s \(allowed [0-9.]+ s, node timeout 2.0 s\) \[node-lost\]; restart 1 of 2: generation 1 \(spare node 2, node2, in place of node 1\)" \
    "... found silent"
allowed=$(sed -n 's/.*node 1 (node1): its agent was silent for [0-9.]* s (allowed \([0-9.]*\) s.*/\1/p' "$T_TMP/frozen.err" | head -n 1)
t_ok $(awk "BEGIN{exit !(\"${allowed:-9}\" + 0 < 1)}"; echo $?) \
    "... by the adaptive detector, which allowed ${allowed:-?} s of silence (less than 1 s; beats every 0.1 s)"
t_like "$T_TMP/frozen.err" "node 1 \(node1\) is stopped and every other task has ended: killed, as a lost node" \
    "... and killed by ddlrun at the end"
clean frozen

# The same with DDL_DETECTOR=fixed: the link is allowed the whole node timeout.
export DDL_DETECTOR=fixed
crash fixed STOP 1 --spares 1
t_status $? 0 "fixed detector: node1 stopped: the step finishes (exit 0)" "$T_TMP/fixed.err"
t_like "$T_TMP/fixed.err" "node 1 \(node1\): its agent was silent for 2\.[0-9]+ s \(allowed 2\.00 s, node timeout 2\.0 s\) \[node-lost\]" \
    "... found silent after the whole node timeout"
unset DDL_DETECTOR
clean fixed

# DDL_DETECTOR=auto (the default) without a spare or --min-nodes: a lost
# node ends the step, so the adaptive allowance is not used there (a few
# late beats on an overloaded machine must not end a healthy step)
crash frozen-nospare STOP 1
t_status $? 93 "no spare: node1 stopped: the step stops (exit 93)" "$T_TMP/frozen-nospare.err"
t_like "$T_TMP/frozen-nospare.err" "node 1 \(node1\): its agent was silent for 2\.[0-9]+ s \(allowed 2\.00 s, node timeout 2\.0 s\) \[node-lost\]" \
    "... found silent after the whole node timeout (DDL_DETECTOR=auto: a lost node would end the step)"
clean frozen-nospare
export DDL_DETECTOR=adaptive
crash frozen-adaptive STOP 1
t_status $? 93 "DDL_DETECTOR=adaptive, no spare: node1 stopped: exit 93" "$T_TMP/frozen-adaptive.err"
allowed=$(sed -n 's/.*node 1 (node1): its agent was silent for [0-9.]* s (allowed \([0-9.]*\) s.*/\1/p' "$T_TMP/frozen-adaptive.err" | head -n 1)
t_ok $(awk "BEGIN{exit !(\"${allowed:-9}\" + 0 < 1)}"; echo $?) \
    "... found silent by the adaptive allowance (${allowed:-?} s, less than 1 s)"
unset DDL_DETECTOR
clean frozen-adaptive

# --- 4. shrink ---------------------------------------------------------------------
crash shrink KILL 1 --min-nodes 1
t_status $? 0 "shrink: node1 killed, no spare, --min-nodes 1: the step finishes (exit 0)" "$T_TMP/shrink.err"
t_is "$(crc shrink | cut -d' ' -f1)" 2 "... on 2 ranks, which agree"
acc=$(sed -n 's/^final test accuracy: \([0-9]*\)\..*/\1/p' "$T_TMP/shrink.out")
t_ok $([ "${acc:-0}" -ge 75 ]; echo $?) "... test accuracy ${acc:-?}% (at least 75%)"
t_like "$T_TMP/shrink.err" "generation 1 \(shrunk to 1 node, 2 ranks: no spare node left\)" \
    "... the leader says the world shrank"
clean shrink

# --- 5. the leader's node lost -------------------------------------------------------
# node0 frozen until node1 has put the spare in its place, then resumed:
# its agent finds itself alone (1 of 3 nodes, no majority), forms no
# world, and asks to be taken back: node1 takes it as a spare.
FARGS="--pace 20"
train leader --spares 1
FARGS=""
t_wait_file "$ck/latest" 120
g=$(node 0)
[ -n "$g" ] && kill -s STOP -- "-$g"
i=0
while [ $((i += 1)) -lt 300 ] && ! grep -q "in place of node 0" "$T_TMP/leader.err"; do sleep 0.1; done
[ -n "$g" ] && kill -s CONT -- "-$g"
wait $run
t_status $? 0 "leader: node0 (the leader's node) frozen, then resumed: the step finishes (exit 0)" "$T_TMP/leader.err"
t_is "$(crc leader)" "$want" "... with the weights of the baseline"
t_like "$T_TMP/leader.err" "node 1 \(node1\) takes over as the leader" "... node1, the lowest live node, leads"
t_like "$T_TMP/leader.err" "node 2 follows node 1" "... node2 follows it"
t_like "$T_TMP/leader.err" "node 0 \(node0\): the leader's agent was silent for [0-9.]+ s \(allowed [0-9.]+ s, node timeout 2.0 s\) \[node-lost\]; restart 1 of 2: generation 1 \(spare node 2, node2, in place of node 0\)" \
    "... and restarts with the spare in node0's place"
t_like "$T_TMP/leader.err" "only 1 of the step's 3 nodes answer \(node 0\): .*: node 0 waits to be taken back" \
    "... node0 resumes alone: no world of its own, it waits"
t_like "$T_TMP/leader.err" "node 0 \(node0\) came back after a loss: taken back as a spare \(1 of DDL_NODE_RETAKES=2\)" \
    "... node1 takes the old leader's node back as a spare"
clean leader

# --- 5a. the leader and the next node lost together --------------------------------
# 5 nodes of 1 rank, --min-nodes 3: node0 and node1 killed at once; the
# others try every node below them at once and follow the lowest that
# answers: node2 leads, node3 and node4 follow it, the world shrinks to 3.
ck="$T_TMP/ck-two"
# shellcheck disable=SC2086 # ARGS: several words
timeout -k 5 200 "$DDLRUN" -n 5 --nodes 5 --emulate --restarts 2 --min-nodes 3 \
    --checkpoint-dir "$ck" "$FMNIST" $ARGS --limit 10000 --pace 20 --checkpoint-dir "$ck" \
    >"$T_TMP/two.out" 2>"$T_TMP/two.err" &
run=$!
t_wait_file "$ck/latest" 120
g0=$(node 0) g1=$(node 1)
t_ok $([ -n "$g0" ] && [ -n "$g1" ]; echo $?) "two: node0's and node1's agents after the first checkpoint (${g0:-?}, ${g1:-?})"
[ -n "$g0" ] && [ -n "$g1" ] && kill -s KILL -- "-$g0" "-$g1"
wait $run
t_status $? 0 "two: node0 (the leader) and node1 killed at once, --min-nodes 3: exit 0" "$T_TMP/two.err"
t_is "$(crc two | cut -d' ' -f1)" 3 "... the step ends on 3 ranks, which agree"
t_like "$T_TMP/two.err" "node 2 \(node2\) takes over as the leader" "... node2, the lowest live node, leads"
t_like "$T_TMP/two.err" "node 3 follows node 2" "... node3 follows it"
t_like "$T_TMP/two.err" "node 4 follows node 2" "... node4 too"
t_like "$T_TMP/two.err" "generation 1 \(shrunk to 3 nodes, 3 ranks" "... and the world shrinks to 3 nodes"
clean two

crash nospare KILL 1
t_status $? 93 "no spare: node1 killed, no spare, no --min-nodes: exit 93" "$T_TMP/nospare.err"
t_like "$T_TMP/nospare.err" "node 1 \(node1\): its agent closed its link \[node-lost\]; stopping the step \(exit status 93\)" \
    "... saying the world cannot be formed again"
clean nospare

train super
t_wait_file "$ck/latest" 120
p=$(t_procs_of ddl-launch "ddl-launch --node -- .*$ck" DDL_RANK=2 | head -1)
t_ok $([ -n "$p" ]; echo $?) "supervisor: rank 2's ddl-launch (pid ${p:-?}) killed with SIGKILL"
[ -n "$p" ] && kill -KILL "$p"
wait $run
t_status $? 137 "... the agents stop the step; ddlrun exits 137, the killed task's status (the others' is 93), as srun would" \
    "$T_TMP/super.err"
t_like "$T_TMP/super.err" "rank 2 on node 1 \(node1\): its supervisor ddl-launch \(pid $p\) is gone \[supervisor-lost\]; stopping the step \(exit status 93\)" \
    "... named as a lost supervisor"
summary super >"$T_TMP/sum"
t_like "$T_TMP/sum" '"rank": 2, "node": 1, "host": "node1", "class": "supervisor-lost", .*"decision": "stop"' \
    "... failure-gen0.json: supervisor-lost"
clean super

# --- 6. every worker killed during async checkpoints --------------------------------
FARGS=--checkpoint-async
train async --spares 1
t_wait_file "$ck/latest" 120
ps=$(t_procs_of fmnist-train "fmnist-train .*$ck")
# shellcheck disable=SC2086
[ -n "$ps" ] && kill -KILL $ps
wait $run
t_status $? 0 "async: every worker killed with SIGKILL at once: the step finishes (exit 0)" "$T_TMP/async.err"
t_like "$T_TMP/async.err" "restart 1 of 2: generation 1 resumes from the checkpoint of step [0-9]+" \
    "... resuming from a committed checkpoint"
t_is "$(crc async)" "$want" "... with the weights of the baseline"
FARGS=""
clean async

# --- 7. budget, crash loop, interruption -----------------------------------------------
cat >"$T_TMP/fail.sh" <<'EOF'
sleep 0.3
[ "$DDL_RANK" = 1 ] && exit 1
sleep 20
EOF
t_run 60 "$DDLRUN" -n 4 --nodes 2 --emulate --restarts 2 sh "$T_TMP/fail.sh" "$T_TMP"
t_status $? 90 "budget: a worker that exits 1 every time: exit 90 after 2 restarts" "$T_TMP/err"
t_like "$T_TMP/err" "generation 2: rank 1 on node 0 \(node0\): worker [0-9]+ exited with status 1 \[worker-exit\]; stopping the step \(exit status 90\)" \
    "... the last failure says the budget is spent"
t_run 60 "$DDLRUN" -n 4 --nodes 2 --emulate --restarts 5 --crash-loop 1 --checkpoint-dir "$T_TMP/ck-loop" \
    sh "$T_TMP/fail.sh" "$T_TMP"
t_status $? 91 "crash loop: no checkpoint progress, --crash-loop 1: exit 91" "$T_TMP/err"
t_like "$T_TMP/err" "a crash loop \(do not requeue\)" "... named a crash loop"
echo "sleep 30" >"$T_TMP/sleep.sh"
timeout -k 5 60 "$DDLRUN" -n 4 --nodes 2 --emulate --spares 1 sh "$T_TMP/sleep.sh" \
    >"$T_TMP/int.out" 2>"$T_TMP/int.err" &
run=$!
i=0
while [ $((i += 1)) -lt 100 ] && [ "$(pgrep -f "^sh $T_TMP/sleep.sh" | wc -l)" -lt 4 ]; do sleep 0.1; done
kill -INT $run
wait $run
t_status $? 130 "SIGINT to ddlrun --emulate: exit 130" "$T_TMP/int.err"
clean loop
# --- 8. the agents abort the collectives in flight ------------------------------------
# ft-probe (8-byte allreduces every 10 ms) ignores SIGTERM here, like a
# program that saves its state on SIGTERM: the ranks waiting for the killed
# one leave their allreduce with DDL_ERR_ABORTED as soon as the agents
# decide, and exit, so the restart does not wait for the SIGKILL at the end
# of the 30 s grace period.
PROBE="$top_builddir/bench/ft-probe"
FT_PROBE_IGNORE_TERM=1 timeout -k 5 90 "$DDLRUN" -n 4 --nodes 2 --emulate --restarts 1 --grace 30 \
    "$PROBE" 20 "$T_TMP" >"$T_TMP/abort.out" 2>"$T_TMP/abort.err" &
run=$!
t0=$(date +%s)
i=0
while [ $((i += 1)) -lt 300 ] && ! grep -q "first-step gen 0" "$T_TMP/abort.out"; do sleep 0.1; done
p=$(t_procs_of ft-probe "ft-probe 20 $T_TMP" DDL_RANK=1 | head -1)
t_ok $([ -n "$p" ]; echo $?) "abort: rank 1's worker (pid ${p:-?}) killed while the others run allreduces"
t1=$(date +%s)
[ -n "$p" ] && kill -KILL "$p"
wait $run
rc=$?
t2=$(date +%s)
t_status $rc 0 "... the step restarts and finishes (exit 0)" "$T_TMP/abort.err"
t_ok $([ $((t2 - t1)) -lt 15 ]; echo $?) \
    "... $((t2 - t1)) s after the kill, well within the 30 s grace period (it took $((t2 - t0)) s in all)"
t_like "$T_TMP/abort.err" "ft-probe: rank [0-3]: ddl_allreduce at [0-9]+: (DDL_ERR_ABORTED.*: communicator aborted: the agents ended generation 0: generation 0: rank 1 on node 0 \(node0\): worker [0-9]+ was killed by signal 9|DDL_ERR_PEER: a peer rank failed: .* rank 1 failed)" \
    "... a waiting rank's allreduce returned DDL_ERR_ABORTED with the agents' reason (or DDL_ERR_PEER, its transport first)"
t_like "$T_TMP/abort.out" "first-step gen 1" "... and generation 1 ran"
clean abort

# --- 9. nodes that come back ---------------------------------------------------------
# leader REGEX NAME: how many of the leader agent's own lines in NAME.err
# match (the others repeat its decisions as "node N: ..." at level info,
# the workers in their abort messages)
leader() { grep -c "^ddl-agent: \(warning: \)\?generation [0-9]*: .*$1" "$T_TMP/$2.err"; }
# comeback NAME TIMES [DDLRUN-OPTIONS]: train NAME (--min-nodes 1, every
# checkpoint kept); TIMES times: freeze node1 (SIGSTOP to its process group),
# and once the world has shrunk without it, thaw it (SIGCONT: its agent asks
# the leader to link again); the run's status.
comeback() {
    cname=$1 times=$2
    shift 2
    FARGS="--pace 20 --checkpoint-keep -1"
    train "$cname" --min-nodes 1 "$@"
    FARGS=""
    t_wait_file "$ck/latest" 120
    g=$(node 1)
    k=0
    while [ -n "$g" ] && [ $((k += 1)) -le "$times" ]; do
        kill -s STOP -- "-$g"
        i=0
        while [ $((i += 1)) -lt 300 ] && [ "$(leader "shrunk to 1 node" "$cname")" -lt $k ]; do
            sleep 0.1
        done
        kill -s CONT -- "-$g"
        i=0
        while [ $((i += 1)) -lt 300 ] &&
            [ "$(leader "\(the world grows back to\|never given ranks\)" "$cname")" -lt $k ]; do
            sleep 0.1
        done
    done
    wait $run
}
comeback back 1
t_status $? 0 "comeback: node1 frozen, the world shrinks, node1 resumes: the step finishes (exit 0)" "$T_TMP/back.err"
t_like "$T_TMP/back.err" "generation 1: node 1 \(node1\) came back after a loss: taken back as a spare \(1 of DDL_NODE_RETAKES=2\)" \
    "... the leader takes node1 back as a spare"
t_like "$T_TMP/back.err" "task [23]: its node holds no rank in generation 1: the task waits as a spare" \
    "... node1's tasks wait as a spare's"
t_like "$T_TMP/back.err" "generation 1: the world grows back to 2 nodes, 4 ranks \(node 1 \(node1\) taken back\): generation 2 resumes from the checkpoint of step [0-9]+" \
    "... and the world grows back at the next checkpoint"
t_is "$(crc back | cut -d' ' -f1)" 4 "... the run ends on 4 ranks, which agree"
t_is "$(leader "restart [0-9] of 2" back)" 1 "... growing spent no restart of the budget"
[ "$(leader "restart [0-9] of 2" back)" = 1 ] || t_diag "$(grep "restart [0-9] of 2" "$T_TMP/back.err")"
# grown NAME N K: the same world from the grow's checkpoint on, without a
# failure: a plain run of N ranks on K nodes resumed from a copy of that
# checkpoint of NAME ends with NAME's weights (two test points)
grown() {
    s=$(sed -n 's/.*the world grows back.*resumes from the checkpoint of step \([0-9]*\)$/\1/p' "$T_TMP/$1.err" | head -n 1)
    rm -rf "$T_TMP/ck-grown"
    mkdir -p "$T_TMP/ck-grown"
    cp -r "$T_TMP/ck-$1/step-$(printf %08d "${s:-0}")" "$T_TMP/ck-grown/" 2>/dev/null
    echo "${s:-0}" >"$T_TMP/ck-grown/latest"
    # shellcheck disable=SC2086
    t_run 200 "$DDLRUN" -n "$2" --nodes "$3" "$FMNIST" $ARGS --checkpoint-dir "$T_TMP/ck-grown"
    t_is $? 0 "... a plain $2-rank run resumed from the grow's checkpoint (step ${s:-?}): exits 0"
    t_is "$(t_checksums "$T_TMP/out")" "$(crc "$1")" "... with the same weights, bit for bit"
}
grown back 4 2
clean comeback

export DDL_NODE_RETAKES=1
comeback twice 2 --restarts 3
unset DDL_NODE_RETAKES
t_status $? 0 "comeback twice, DDL_NODE_RETAKES=1: the step finishes (exit 0)" "$T_TMP/twice.err"
t_is "$(leader "the world grows back to" twice)" 1 "... the world grew back once"
t_like "$T_TMP/twice.err" "generation 3: node 1 \(node1\) came back after a loss, 2 times: more than DDL_NODE_RETAKES=1, so it is linked but never given ranks again" \
    "... the second return is linked, never given ranks"
t_is "$(crc twice | cut -d' ' -f1)" 2 "... the run ends on 2 ranks, which agree"
t_is "$(grep -c "takes over as the leader" "$T_TMP/twice.err")" 0 "... no takeover by the returned node"
clean twice

# The retake count outlives its leader: 3 nodes, DDL_NODE_RETAKES=1.  node2
# comes back once to node0; node0, the leader, is frozen for good and node1
# takes over (the world shrinks to node1-node2); node2 is lost and comes back
# again, now to node1: its second return, counted from the ROSTER that node0
# sent, so it is linked but never given ranks.
# hold K REGEX N: freeze node K until the leader's lines matching REGEX
# number N in heir.err; its process group in $g.
hold() {
    g=$(node "$1")
    [ -n "$g" ] && kill -s STOP -- "-$g"
    i=0
    while [ $((i += 1)) -lt 300 ] && [ "$(leader "$2" heir)" -lt "$3" ]; do sleep 0.1; done
}
ck="$T_TMP/ck-heir"
# shellcheck disable=SC2086
DDL_NODE_RETAKES=1 timeout -k 5 200 "$DDLRUN" -n 6 --nodes 3 --emulate --restarts 4 --min-nodes 1 \
    --checkpoint-dir "$ck" "$FMNIST" $ARGS --pace 20 --checkpoint-keep -1 --checkpoint-dir "$ck" \
    >"$T_TMP/heir.out" 2>"$T_TMP/heir.err" &
run=$!
t_wait_file "$ck/latest" 120
hold 2 "shrunk to 2 nodes" 1
kill -s CONT -- "-$g"
i=0
while [ $((i += 1)) -lt 300 ] && [ "$(leader "the world grows back to" heir)" -lt 1 ]; do sleep 0.1; done
hold 0 "shrunk to 2 nodes" 2
hold 2 "shrunk to 1 node" 1
# node2's agent resumes first and is taken back, its tasks later: they find
# the leader's current generation waiting beside their own restart into
# the generation that node2 missed, whose backoff is over (the newer
# decision must replace it)
kill -s CONT "$g"
i=0
while [ $((i += 1)) -lt 300 ] && [ "$(leader "came back after a loss, 2 times" heir)" -lt 1 ]; do
    sleep 0.1
done
sleep 0.5
kill -s CONT -- "-$g"
i=0
while [ $((i += 1)) -lt 300 ] && [ "$(leader "never given ranks\|grows back to" heir)" -lt 2 ]; do sleep 0.1; done
wait $run
t_status $? 0 "retakes across a takeover: the step finishes (exit 0)" "$T_TMP/heir.err"
t_like "$T_TMP/heir.err" "node 2 \(node2\) came back after a loss: taken back as a spare \(1 of DDL_NODE_RETAKES=1\)" \
    "... node2's first return, to node0: taken back"
t_like "$T_TMP/heir.err" "node 1 \(node1\) takes over as the leader" "... node0 frozen: node1 leads"
t_like "$T_TMP/heir.err" "generation [0-9]+: node 2 \(node2\) came back after a loss, 2 times: more than DDL_NODE_RETAKES=1, so it is linked but never given ranks again" \
    "... node2's second return, to node1, counts the first: never given ranks"
t_is "$(leader "the world grows back to" heir)" 1 "... the world grew back once"
t_is "$(crc heir | cut -d' ' -f1)" 2 "... the run ends on 2 ranks, which agree"
last=$(sed -n 's/.*: generation \([0-9]*\) (shrunk to 1 node.*/\1/p' "$T_TMP/heir.err" | head -n 1)
t_is "$(grep -c "task [45]: its node holds no rank in generation ${last:-?}: the task waits as a spare" \
    "$T_TMP/heir.err")" 2 "... node2's tasks wait as a spare's in generation ${last:-?}: the newer decision replaced their pending restart"
clean heir

# --- 10. nodes that restart --------------------------------------------------------
# reboot NAME K TIMES [DDLRUN-OPTIONS]: train NAME on 3 nodes (--min-nodes 1,
# every checkpoint kept, --reboot-after 0.5); TIMES times: kill node K's
# process group (its agent, tasks and workers, as a machine that crashed)
# and wait until ddlrun has started it again and the leader has taken it
# back (the world grows back) or refused it ranks; the run's status.
reboot() {
    rname=$1 k=$2 times=$3
    shift 3
    ck="$T_TMP/ck-$rname"
    # shellcheck disable=SC2086
    timeout -k 5 200 "$DDLRUN" -n 6 --nodes 3 --emulate --restarts 4 --min-nodes 1 \
        --reboot-after 0.5 --checkpoint-dir "$ck" "$@" "$FMNIST" $ARGS --pace 20 \
        --checkpoint-keep -1 --checkpoint-dir "$ck" >"$T_TMP/$rname.out" 2>"$T_TMP/$rname.err" &
    run=$!
    t_wait_file "$ck/latest" 120
    j=0
    while [ $((j += 1)) -le "$times" ]; do
        g=$(node "$k")
        [ -n "$g" ] && kill -s KILL -- "-$g"
        i=0
        while [ $((i += 1)) -lt 300 ] &&
            [ "$(leader "\(the world grows back to\|never given ranks\)" "$rname")" -lt $j ]; do
            sleep 0.1
        done
    done
    wait $run
}
reboot restart 1 1
t_status $? 0 "restart: node1 killed, the world shrinks, node1 starts again: the step finishes (exit 0)" "$T_TMP/restart.err"
t_like "$T_TMP/restart.err" "generation 0: node 1 \(node1\): its agent closed its link \[node-lost\]; restart 1 of 4: generation 1 \(shrunk to 2 nodes, 4 ranks" \
    "... the world shrinks without node1"
t_like "$T_TMP/restart.err" "node 1 \(node1\) starts again \(--reboot-after, 1 time\)" "... ddlrun starts node1 again"
t_like "$T_TMP/restart.err" "node 1 restarted after a loss: it asks the step's agents to take it back" \
    "... its new agent asks to be taken back"
t_like "$T_TMP/restart.err" "generation 1: node 1 \(node1\) came back after a loss: taken back as a spare \(1 of DDL_NODE_RETAKES=2\)" \
    "... the leader takes it back as a spare"
t_like "$T_TMP/restart.err" "generation 1: the world grows back to 3 nodes, 6 ranks \(node 1 \(node1\) taken back\): generation 2 resumes from the checkpoint of step [0-9]+" \
    "... and the world grows back at the next checkpoint"
t_like "$T_TMP/restart.err" "task [23]: the spare takes rank [45] of 6 \(generation 2\)" \
    "... node1's new tasks take ranks 4 and 5"
t_is "$(crc restart | cut -d' ' -f1)" 6 "... the run ends on 6 ranks, which agree"
t_is "$(leader "restart [0-9] of 4" restart)" 1 "... growing spent no restart of the budget"
grown restart 6 3
clean restart

export DDL_NODE_RETAKES=1
reboot restart0 0 2
rc=$?
unset DDL_NODE_RETAKES
t_status $rc 0 "restart twice: node0, the leader, killed and started again twice, DDL_NODE_RETAKES=1: the step finishes (exit 0)" "$T_TMP/restart0.err"
t_like "$T_TMP/restart0.err" "node 1 \(node1\) takes over as the leader" "... node1 takes over"
t_like "$T_TMP/restart0.err" "generation 1: node 0 \(node0\) came back after a loss: taken back as a spare \(1 of DDL_NODE_RETAKES=1\)" \
    "... node0's first return: taken back by node1"
t_like "$T_TMP/restart0.err" "node 0 \(node0\) starts again \(--reboot-after, 2 times\)" "... ddlrun starts node0 a second time"
t_like "$T_TMP/restart0.err" "generation [0-9]+: node 0 \(node0\) came back after a loss, 2 times: more than DDL_NODE_RETAKES=1, so it is linked but never given ranks again" \
    "... its second return is linked, never given ranks"
t_is "$(leader "the world grows back to" restart0)" 1 "... the world grew back once"
t_is "$(crc restart0 | cut -d' ' -f1)" 4 "... the run ends on 4 ranks, which agree"
clean restart0

# bad input to the pieces ddlrun --emulate starts
t_run 10 env -u DDL_SIZE "$DDL_LAUNCH" --node true
t_is $? 1 "ddl-launch --node outside ddlrun --emulate (no DDL_SIZE): exit 1"
t_like "$T_TMP/err" "DDL_SIZE is not set: ddl-launch --node runs only as a task of ddlrun --emulate" \
    "... saying where it runs"
t_run 10 env -u DDL_STEP_ID "$DDL_LAUNCH" --rejoin true
t_is $? 1 "ddl-launch --rejoin outside a step started by a leader agent (no DDL_STEP_ID): exit 1"
t_like "$T_TMP/err" "DDL_STEP_ID or DDL_REJOIN is missing or too long: ddl-launch --rejoin runs only as a task of the step that a leader agent starts on a node restarted after a loss" \
    "... saying where it runs"
t_run 10 env DDL_STEP_ID=5.0 DDL_REJOIN=127.0.0.1:9,, DDL_NODE_ID=1 DDL_NNODES=3 DDL_SIZE=6 \
    DDL_LOCAL_SIZE=2 SLURM_STEP_NUM_TASKS=2 SLURM_LOCALID=0 DDL_MIN_NODES=1 \
    DDL_RUNTIME_DIR="$T_TMP" "$DDL_LAUNCH" --rejoin true </dev/null
t_is $? 1 "ddl-launch --rejoin without the step's secret on standard input: exit 1"
t_like "$T_TMP/err" "no step secret on standard input" "... saying so"
t_run 10 env DDL_STEP_ID=5.0 DDL_REJOIN=127.0.0.1:9,, DDL_NODE_ID=1 DDL_NNODES=3 DDL_SIZE=6 \
    DDL_LOCAL_SIZE=2 SLURM_STEP_NUM_TASKS=3 SLURM_LOCALID=0 "$DDL_LAUNCH" --rejoin true
t_is $? 1 "ddl-launch --rejoin in a step of 3 tasks for a node of 2: exit 1"
t_like "$T_TMP/err" "SLURM_STEP_NUM_TASKS='3' is not a number in 2-2" "... naming the variable and the range"
t_run 10 "$DDL_AGENT" serve --socket "$T_TMP/x.sock" --step s --size 1 --host 'node 1'
t_is $? 2 "ddl-agent serve --host 'node 1': exit 2"
t_like "$T_TMP/err" "--host: 'node 1' is not a node name \(1-63 characters, no blanks or quotes\)" \
    "... naming the rule"
t_run 10 "$DDL_AGENT" serve --socket "$T_TMP/x.sock" --step s --size 1 --option-names mpirun
t_is $? 2 "ddl-agent serve --option-names mpirun: exit 2"
t_like "$T_TMP/err" "--option-names: 'mpirun' is not srun or ddlrun" "... naming the choices"
t_run 10 "$DDLRUN" -n 4 --nodes 2 --spares 1 true
t_is $? 2 "--spares without --emulate is refused (exit 2)"
t_like "$T_TMP/err" "--spares needs --emulate" "... saying what it needs"
t_done
