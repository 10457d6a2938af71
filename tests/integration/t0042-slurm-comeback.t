#!/bin/sh
# t0042-slurm-comeback: a node that comes back, under `srun --ddl` on the
# 3-node namespace cluster: fmnist-train, 2 tasks per node,
# --ddl-min-nodes=2 and no spare; after the first checkpoint, n3 freezes
# (every process of the node, slurmd included, stopped as by a hung
# kernel); the world shrinks to n1-n2; n3 resumes: its agent links to the
# leader again and is taken back as a spare, and the world grows back to 6
# ranks at the next checkpoint.  The final weights are those of a plain
# 6-rank step resumed from a copy of that checkpoint, bit for bit (the data
# over TCP and the ring allreduce).  Then the same twice with
# DDL_NODE_RETAKES=1: the second return is linked but never given ranks, and
# the step ends on 4 ranks.  Then a node that restarts: n3 crashes (every
# process killed, its link down) and its slurmd starts again a second later;
# the world shrinks; the leader starts n3's part of the step again there
# (a new step of the job, srun --overlap, running ddl-launch --rejoin), whose
# agent asks to be taken back; the world grows back, with the weights of the
# same plain step; at the end n3's new agent cancels the first step, whose
# srun would otherwise wait for n3's lost tasks, and srun exits 0.  And n3
# restarting twice with DDL_NODE_RETAKES=1: started again both times (the
# second time its slurmd starts only 2 s after the leader's srun, which
# waits for it), taken back once, the second time linked but never given
# ranks.  Then n1, the leader's node, crashes and restarts: n2 takes over
# and starts n1's part again; then n2 crashes and restarts: n1's new agent
# leads and starts n2's part again; the world grows back both times, with
# the weights of a plain step resumed from the second grow's checkpoint.
# Then n3 crashed for good, with DDL_REVIVE_WAIT_S=3 and
# DDL_REVIVE_GIVE_UP_S=15: the leader's srun for n3 is stopped 3 s after
# its start, and 15 s after the loss, before a second try (10 s after the
# first ended), the leader gives up; the step ends on 4 ranks.  And the step
# stopped (SIGUSR1 to srun, exit 94) while the leader's srun for the crashed
# n3 waits: the leader stops it.  Skips like t0015 (root, Slurm, plugin,
# fmnist and its data).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
. "$top_srcdir/tests/slurm/lib-cluster.sh"
DATA=${DDL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -x "$FMNIST" ] || t_skip_all "fmnist-train not built (no OpenBLAS)"
[ -r "$DATA/train-images-idx3-ubyte.gz" ] || t_skip_all "no Fashion-MNIST in $DATA"

cl_init "/var/tmp/ddl-cluster.$$" 3 'max_restarts = 5
checkpoint_roots = {"/var/tmp"}'
cl_start
export UCX_TLS=tcp,self DDL_ALLREDUCE_ALGO=ring
unset MASTER_ADDR MASTER_PORT DDL_CKPT_LOCAL_DIR DDL_CKPT_SHARED_EVERY DDL_NODE_RETAKES
CK=/var/tmp/ddl-ck.$$
trap 'sh "$CLUSTER" thaw "$CL_DIR" n3 >/dev/null 2>&1; sh "$CLUSTER" stop "$CL_DIR" >/dev/null 2>&1; rm -rf "$CK"*; t_cleanup' EXIT
ARGS="--epochs 1 --limit 6000 --checkpoint-every 10 --pace 100 --checkpoint-keep -1"

# leader REGEX NAME: how many of the leader agent's own lines in NAME.err
# match (the others repeat its decisions as "node N: ...", the workers in
# their abort messages)
leader() { grep -c "^ddl-agent: \(warning: \)\?generation [0-9]*: .*$1" "$T_TMP/$2.err"; }

# --- n3 freezes, the world shrinks, n3 resumes and the world grows back -------------
ck="$CK-back"
# shellcheck disable=SC2086 # ARGS: several words
DDL_LOG_LEVEL=info timeout -k 5 240 srun --mpi=pmix -N3 --ntasks-per-node=2 --ddl \
    --ddl-restarts=2 --ddl-min-nodes=2 --no-kill --ddl-checkpoint-dir="$ck" -J "$T_TOKEN" \
    "$FMNIST" $ARGS --checkpoint-dir "$ck" >"$T_TMP/back.out" 2>"$T_TMP/back.err" &
run=$!
t_wait_file "$ck/latest" 90
sh "$CLUSTER" freeze "$CL_DIR" n3
i=0
while [ $((i += 1)) -lt 300 ] && ! grep -q "shrunk to 2 nodes" "$T_TMP/back.err"; do sleep 0.1; done
sh "$CLUSTER" thaw "$CL_DIR" n3
wait $run
t_status $? 0 "n3 frozen after the first checkpoint, the world shrank, n3 resumed: srun exits 0" "$T_TMP/back.err"
t_like "$T_TMP/back.err" "node 2 \(n3\): its agent was silent for [0-9.]+ s .*\[node-lost\]; restart 1 of 2: generation 1 \(shrunk to 2 nodes, 4 ranks: no spare node left\)" \
    "... the leader finds n3 lost and shrinks the world"
t_like "$T_TMP/back.err" "node 2 \(n3\) came back after a loss: taken back as a spare \(1 of DDL_NODE_RETAKES=2\)" \
    "... n3's agent links again and is taken back as a spare"
t_like "$T_TMP/back.err" "the world grows back to 3 nodes, 6 ranks \(node 2 \(n3\) taken back\): generation 2 resumes from the checkpoint of step [0-9]+" \
    "... the world grows back at the next checkpoint, within the same srun"
t_is "$(t_checksums "$T_TMP/back.out" | cut -d' ' -f1)" 6 "... the step ends on 6 ranks, which agree"

# the same world from the grow's checkpoint on, without a failure
cl_grown_ref "$T_TMP/back.err" "$ck" "$CK-ref"
t_is "$(t_checksums "$T_TMP/back.out")" "$(t_checksums "$T_TMP/ref.out")" \
    "... with the weights of the step that grew back, bit for bit"

# --- n3 comes back twice, DDL_NODE_RETAKES=1 -----------------------------------------
ck="$CK-twice"
# shellcheck disable=SC2086 # ARGS: several words
DDL_NODE_RETAKES=1 DDL_LOG_LEVEL=info timeout -k 5 240 srun --mpi=pmix -N3 --ntasks-per-node=2 \
    --ddl --ddl-restarts=3 --ddl-min-nodes=2 --no-kill --ddl-checkpoint-dir="$ck" -J "$T_TOKEN" \
    "$FMNIST" $ARGS --limit 10000 --checkpoint-dir "$ck" >"$T_TMP/twice.out" 2>"$T_TMP/twice.err" &
run=$!
t_wait_file "$ck/latest" 90
for k in 1 2; do
    sh "$CLUSTER" freeze "$CL_DIR" n3
    i=0
    while [ $((i += 1)) -lt 300 ] && [ "$(leader "shrunk to 2 nodes" twice)" -lt $k ]; do
        sleep 0.1
    done
    sh "$CLUSTER" thaw "$CL_DIR" n3
    i=0
    while [ $((i += 1)) -lt 300 ] &&
        [ "$(leader "\(the world grows back to\|never given ranks\)" twice)" -lt $k ]; do
        sleep 0.1
    done
done
wait $run
t_status $? 0 "n3 frozen and resumed twice, DDL_NODE_RETAKES=1: srun exits 0" "$T_TMP/twice.err"
t_is "$(leader "the world grows back to" twice)" 1 "... the world grew back once"
t_like "$T_TMP/twice.err" "node 2 \(n3\) came back after a loss, 2 times: more than DDL_NODE_RETAKES=1, so it is linked but never given ranks again" \
    "... the second return is linked, never given ranks"
t_is "$(t_checksums "$T_TMP/twice.out" | cut -d' ' -f1)" 4 "... the step ends on 4 ranks, which agree"

# --- n3 crashes and restarts: started again by the leader, taken back -----------------
# reboot NAME TIMES [SRUN-OPTIONS]: train NAME (--limit LIMIT); TIMES times:
# crash n3, start its slurmd again a second later, and wait until the world
# has grown back onto it or it is linked without ranks; srun's status.  The
# LATE-th time: start n3's slurmd only 2 s after the leader's LATE-th srun
# to start n3's part again (5 s after the loss), and say in $T_TMP/NAME.early
# how many such sruns had started by then.
sruns() { grep -c "is lost: starting its part of the step again there" "$T_TMP/$1.err"; }
reboot() {
    name=$1 times=$2
    shift 2
    ck="$CK-$name"
    # shellcheck disable=SC2086 # ARGS: several words
    DDL_LOG_LEVEL=info timeout -k 5 240 srun --mpi=pmix -N3 --ntasks-per-node=2 --ddl \
        --ddl-min-nodes=2 --no-kill --ddl-checkpoint-dir="$ck" -J "$T_TOKEN" "$@" \
        "$FMNIST" $ARGS --limit "$LIMIT" --checkpoint-dir "$ck" >"$T_TMP/$name.out" \
        2>"$T_TMP/$name.err" &
    run=$!
    t_wait_file "$ck/latest" 90
    k=0
    while [ $((k += 1)) -le "$times" ]; do
        cl_crash n3
        if [ "$k" = "${LATE:-0}" ]; then
            i=0
            while [ $((i += 1)) -lt 300 ] && [ "$(sruns "$name")" -lt "$k" ]; do sleep 0.1; done
            sleep 2
            sruns "$name" >"$T_TMP/$name.early"
        else
            sleep 1
        fi
        sh "$CLUSTER" reboot "$CL_DIR" n3 >/dev/null 2>&1
        i=0
        while [ $((i += 1)) -lt 600 ] &&
            [ "$(leader "\(the world grows back to\|never given ranks\)" "$name")" -lt $k ]; do
            sleep 0.1
        done
    done
    wait $run
}
# grew_back NAME LIMIT: the step NAME (--limit LIMIT) ended on 6 ranks with
# the weights of a plain step resumed from its last grow's checkpoint, and
# left nothing on the nodes (4 test points)
grew_back() {
    t_is "$(t_checksums "$T_TMP/$1.out" | cut -d' ' -f1)" 6 "... the step ends on 6 ranks, which agree"
    ARGS="$ARGS --limit $2" cl_grown_ref "$T_TMP/$1.err" "$CK-$1" "$CK-$1-ref"
    t_is "$(t_checksums "$T_TMP/$1.out")" "$(t_checksums "$T_TMP/ref.out")" \
        "... with the weights of a plain step resumed from the last grow's checkpoint, bit for bit"
    cl_clean "$1: no fmnist-train, ddl-launch or ddl-agent left on the nodes"
}
LIMIT=20000
reboot restart 1 --ddl-restarts=2
t_status $? 0 "n3 crashed and restarted after the first checkpoint: srun exits 0" "$T_TMP/restart.err"
t_like "$T_TMP/restart.err" "node 2 \(n3\): its agent closed its link \[node-lost\]; restart 1 of 2: generation 1 \(shrunk to 2 nodes, 4 ranks" \
    "... the world shrinks without n3"
t_like "$T_TMP/restart.err" "generation 1: node 2 \(n3\) is lost: starting its part of the step again there, in case it restarted \(srun --jobid=[0-9]+ --overlap -w n3, pid [0-9]+, try [0-9]+\)" \
    "... the leader starts n3's part of the step again with srun"
t_like "$T_TMP/restart.err" "node 2 restarted after a loss: it asks the step's agents to take it back" \
    "... n3's new agent asks to be taken back"
t_like "$T_TMP/restart.err" "generation 1: node 2 \(n3\) came back after a loss: taken back as a spare \(1 of DDL_NODE_RETAKES=2\)" \
    "... the leader takes it back as a spare"
t_like "$T_TMP/restart.err" "generation 1: the world grows back to 3 nodes, 6 ranks \(node 2 \(n3\) taken back\): generation 2 resumes from the checkpoint of step [0-9]+" \
    "... the world grows back at the next checkpoint"
t_like "$T_TMP/restart.err" "node 2: the step ended; cancelling Slurm step [0-9]+\.0, whose srun still waits for this node's tasks from before its restart" \
    "... at the end n3's new agent releases the first step"
grew_back restart "$LIMIT"

LIMIT=30000
export DDL_NODE_RETAKES=1
LATE=2 # the second time, n3's slurmd is still down when the leader's srun starts
reboot restart2 2 --ddl-restarts=3
rc=$?
unset DDL_NODE_RETAKES LATE
t_status $rc 0 "n3 crashed and restarted twice, DDL_NODE_RETAKES=1: srun exits 0" "$T_TMP/restart2.err"
t_is "$(cat "$T_TMP/restart2.early")" 2 "... the second time, the leader's srun started 2 s before n3's slurmd"
t_is "$(sruns restart2)" 2 \
    "... the leader started n3's part again once after each loss (that srun waited for n3's slurmd)"
t_is "$(leader "the world grows back to" restart2)" 1 "... the world grew back once"
t_like "$T_TMP/restart2.err" "node 2 \(n3\) came back after a loss, 2 times: more than DDL_NODE_RETAKES=1, so it is linked but never given ranks again" \
    "... the second return is linked, never given ranks"
t_is "$(t_checksums "$T_TMP/restart2.out" | cut -d' ' -f1)" 4 "... the step ends on 4 ranks, which agree"

cl_clean "restart2: no fmnist-train, ddl-launch or ddl-agent left on the nodes"

# --- the leader's node restarts, then the new leader's: a restarted node leads ------------
# n1 (the leader's node) crashes and restarts: n2 takes over and starts
# n1's part again; the world grows back; then n2 crashes and restarts: n1's
# new agent, whose command line is ddl-launch --rejoin -- COMMAND, leads and
# starts n2's part again; the world grows back again.  n1's new agent
# reaches srun's output through n2's srun, which ends with n2: from then on
# the decisions show as node 2's repeats ("node 2: generation N: ...").
ck="$CK-lead"
# shellcheck disable=SC2086 # ARGS: several words
DDL_LOG_LEVEL=info timeout -k 5 240 srun --mpi=pmix -N3 --ntasks-per-node=2 --ddl \
    --ddl-restarts=4 --ddl-min-nodes=2 --no-kill --ddl-checkpoint-dir="$ck" -J "$T_TOKEN" \
    "$FMNIST" $ARGS --limit 60000 --checkpoint-dir "$ck" >"$T_TMP/lead.out" 2>"$T_TMP/lead.err" &
run=$!
t_wait_file "$ck/latest" 90
for n in 1 2; do
    cl_crash "n$n"
    sleep 1
    sh "$CLUSTER" reboot "$CL_DIR" "n$n" >/dev/null 2>&1
    i=0
    while [ $((i += 1)) -lt 600 ] && ! grep -q "the world grows back to 3 nodes, 6 ranks (node $((n - 1)) (n$n) taken back)" "$T_TMP/lead.err"; do
        sleep 0.1
    done
done
wait $run
t_status $? 0 "n1 (the leader's node) crashed and restarted, then n2 (the next leader's): srun exits 0" \
    "$T_TMP/lead.err"
t_like "$T_TMP/lead.err" "generation 0: node 1 \(n2\) takes over as the leader" "... n2 takes over from n1"
t_like "$T_TMP/lead.err" "generation 1: node 0 \(n1\) is lost: starting its part of the step again there, in case it restarted \(srun --jobid=[0-9]+ --overlap -w n1" \
    "... and starts n1's part again"
t_like "$T_TMP/lead.err" "the world grows back to 3 nodes, 6 ranks \(node 0 \(n1\) taken back\)" \
    "... the world grows back onto n1"
t_like "$T_TMP/lead.err" "generation [0-9]+: node 2 follows node 0 \([0-9.:]+\), the new leader" \
    "... n2 lost: n1's new agent leads"
t_like "$T_TMP/lead.err" "node 2: generation [0-9]+: the world grows back to 3 nodes, 6 ranks \(node 1 \(n2\) taken back\)" \
    "... it starts n2's part again and the world grows back onto n2"
grew_back lead 60000

# --- n3 crashes for good: the leader's srun stopped, then no more tries -------------------
# gone NAME LIMIT [SRUN-OPTIONS]: train NAME (--limit LIMIT); crash n3 after
# the first checkpoint and leave it down
gone() {
    name=$1 limit=$2
    shift 2
    ck="$CK-$name"
    # shellcheck disable=SC2086 # ARGS: several words
    DDL_LOG_LEVEL=info timeout -k 5 240 srun --mpi=pmix -N3 --ntasks-per-node=2 --ddl \
        --ddl-restarts=2 --ddl-min-nodes=2 --no-kill --ddl-checkpoint-dir="$ck" -J "$T_TOKEN" \
        "$@" "$FMNIST" $ARGS --limit "$limit" --checkpoint-dir "$ck" >"$T_TMP/$name.out" \
        2>"$T_TMP/$name.err" &
    run=$!
    t_wait_file "$ck/latest" 90
    cl_crash n3
}
# its srun (first try 5 s after the loss) stopped 3 s later; no try started
# 15 s after the loss, when the next would have come 10 s after the first
# ended; the step goes on with 4 ranks for another 10 s or so
DDL_REVIVE_WAIT_S=3 DDL_REVIVE_GIVE_UP_S=15 gone giveup 30000
wait $run
t_status $? 0 "n3 crashed for good, DDL_REVIVE_WAIT_S=3, DDL_REVIVE_GIVE_UP_S=15: srun exits 0" \
    "$T_TMP/giveup.err"
t_like "$T_TMP/giveup.err" "node 2 \(n3\): not back 3 s after its srun started: stopping that srun \(pid [0-9]+\)" \
    "... the leader stops its srun for n3 3 s after starting it"
t_like "$T_TMP/giveup.err" "node 2 \(n3\): srun to start it again \(try 1\) .* before the node came back; next try in 10 s" \
    "... that srun ends; the next try would come 10 s later"
t_like "$T_TMP/giveup.err" "node 2 \(n3\): still lost 15 s after its loss: no more tries to start it again \(DDL_REVIVE_GIVE_UP_S\)" \
    "... 15 s after the loss the leader gives up"
t_is "$(sruns giveup)" 1 "... one srun in all"
t_is "$(t_checksums "$T_TMP/giveup.out" | cut -d' ' -f1)" 4 "... the step ends on 4 ranks, which agree"
t_is "$(cl_procs srun)" 0 "... no srun left on the nodes"
cl_clean "giveup: no fmnist-train, ddl-launch or ddl-agent left on the nodes that are up"

# the step stopped (SIGUSR1 to srun) while the leader's srun for n3 waits
# for the node: the leader stops that srun and exits only once it has ended
cl_restart
gone stopped 60000
i=0
while [ $((i += 1)) -lt 300 ] && [ "$(sruns stopped)" -lt 1 ]; do sleep 0.1; done
pkill -USR1 -P "$run" -x srun
wait $run
t_status $? 94 "n3 crashed for good, the step stopped while the leader's srun for n3 waits: srun exits 94" \
    "$T_TMP/stopped.err"
t_like "$T_TMP/stopped.err" "node 2 \(n3\): the step ends: stopping the srun that would start it again \(pid [0-9]+; the node is not back\)" \
    "... the leader stops its srun for n3"
t_is "$(cl_procs srun)" 0 "... no srun left on the nodes"
cl_clean "stopped: no fmnist-train, ddl-launch or ddl-agent left on the nodes that are up"
t_done
