#!/bin/sh
# t0043-slurm-partition: a network partition that heals, under `srun --ddl`
# on the 3-node namespace cluster: fmnist-train, 2 tasks per node,
# --ddl-min-nodes=1 (a world of one node would be allowed); after the first
# checkpoint n3 and the other nodes stop reaching each other, both ways and
# silently (the host, so slurmctld and srun, still reaches every node).  Each
# side sees the other lost.  n1-n2, 2 of the step's 3 nodes, shrink the
# world and train on; n3, which takes over as the leader of its side, has 1
# of 3: it forms no world of its own (two worlds would train apart and write
# the same checkpoints); its tasks wait as a spare's and it asks the others
# to take it back.  The partition heals: n1 takes n3 back as a spare and the
# world grows back to 6 ranks at the next checkpoint; the final weights are
# those of a plain 6-rank step resumed from that checkpoint, bit for bit.
# Then n3 cut off for good with DDL_CUT_OFF_WAIT_S=3: it stops after 3 s;
# and on 4 nodes, a minority of two nodes cut off together (below).
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
unset MASTER_ADDR MASTER_PORT DDL_CKPT_LOCAL_DIR DDL_CKPT_SHARED_EVERY DDL_NODE_RETAKES
CK=/var/tmp/ddl-ck.$$
trap 'sh "$CLUSTER" heal "$CL_DIR" n3 >/dev/null 2>&1; sh "$CLUSTER" stop "$CL_DIR" >/dev/null 2>&1; rm -rf "$CK"*; t_cleanup' EXIT
ARGS="--epochs 1 --limit 24000 --checkpoint-every 10 --pace 100 --checkpoint-keep -1"

ck="$CK-cut"
# shellcheck disable=SC2086 # ARGS: several words
timeout -k 5 240 srun --mpi=pmix -N3 --ntasks-per-node=2 --ddl --ddl-restarts=2 \
    --ddl-min-nodes=1 --no-kill --ddl-checkpoint-dir="$ck" -J "$T_TOKEN" \
    "$FMNIST" $ARGS --checkpoint-dir "$ck" >"$T_TMP/cut.out" 2>"$T_TMP/cut.err" &
run=$!
t_wait_file "$ck/latest" 90
sh "$CLUSTER" cut "$CL_DIR" n3
# both sides have decided (n3 waits the node timeout plus 1 s for agents
# that never come), or 30 s
i=0
while [ $((i += 1)) -lt 300 ] && ! { grep -q "shrunk to 2 nodes" "$T_TMP/cut.err" &&
    grep -q "waits to be taken back" "$T_TMP/cut.err"; }; do
    sleep 0.1
done
sleep 2 # n3 asks in vain for a while
sh "$CLUSTER" heal "$CL_DIR" n3
wait $run
t_status $? 0 "n3 cut off from n1-n2 after the first checkpoint, then healed: srun exits 0" \
    "$T_TMP/cut.err"
t_like "$T_TMP/cut.err" "generation 0: node 2 \(n3\): its agent was silent for [0-9.]+ s .*\[node-lost\]; restart 1 of 2: generation 1 \(shrunk to 2 nodes, 4 ranks: no spare node left\)" \
    "... n1, the leader, finds n3 lost and shrinks the world to n1-n2"
t_like "$T_TMP/cut.err" "node 2 \(n3\) takes over as the leader" "... n3 finds the leader lost and leads its side"
t_like "$T_TMP/cut.err" "generation 0: node 0 \(n1\): the leader's agent .*\[node-lost\]; only 1 of the step's 3 nodes answer \(node 2\): this side may be cut off from the others by a network partition, and does not go on alone: node 2 waits to be taken back" \
    "... but with 1 of the 3 nodes forms no world: it waits to be taken back"
t_is "$(grep -c "shrunk to 1 node" "$T_TMP/cut.err")" 0 "... no world of n3 alone (no second world training apart)"
t_like "$T_TMP/cut.err" "node 2 reaches the step's leader agent \(node 0, [0-9.:]+\): linked again" \
    "... the partition heals: n3 reaches n1 again"
t_like "$T_TMP/cut.err" "node 2 \(n3\) came back after a loss: taken back as a spare \(1 of DDL_NODE_RETAKES=2\)" \
    "... n1 takes n3 back as a spare"
t_like "$T_TMP/cut.err" "the world grows back to 3 nodes, 6 ranks \(node 2 \(n3\) taken back\): generation 2 resumes from the checkpoint of step [0-9]+" \
    "... and the world grows back at the next checkpoint, within the same srun"
t_is "$(t_checksums "$T_TMP/cut.out" | cut -d' ' -f1)" 6 "... the step ends on 6 ranks, which agree"
t_is "$(ls "$ck" | grep -c '^failure-gen0')" 1 "... one failure summary for generation 0 (n1's: n3 writes none)"

# the same world from the grow's checkpoint on, without a failure
cl_grown_ref "$T_TMP/cut.err" "$ck" "$CK-ref"
t_is "$(t_checksums "$T_TMP/cut.out")" "$(t_checksums "$T_TMP/ref.out")" \
    "... with the weights of the step that grew back, bit for bit"

cl_clean "no fmnist-train, ddl-launch or ddl-agent left on the nodes"

# A node cut off that nobody takes back: DDL_CUT_OFF_WAIT_S=3 (60 s by
# default), n3 cut off after the first checkpoint and healed only after the
# step.  n1-n2 shrink and finish; n3 waits 3 s, then its tasks stop with 93.
ck="$CK-wait"
# shellcheck disable=SC2086 # ARGS: several words
DDL_CUT_OFF_WAIT_S=3 timeout -k 5 240 srun --mpi=pmix -N3 --ntasks-per-node=2 --ddl \
    --ddl-restarts=2 --ddl-min-nodes=1 --no-kill --ddl-checkpoint-dir="$ck" -J "$T_TOKEN" \
    "$FMNIST" $ARGS --checkpoint-dir "$ck" >"$T_TMP/wait.out" 2>"$T_TMP/wait.err" &
run=$!
t_wait_file "$ck/latest" 90
sh "$CLUSTER" cut "$CL_DIR" n3
wait $run
rc=$?
sh "$CLUSTER" heal "$CL_DIR" n3
t_status "$rc" 93 "DDL_CUT_OFF_WAIT_S=3, n3 cut off for good: srun exits 93 (n3's tasks)" \
    "$T_TMP/wait.err"
t_like "$T_TMP/wait.err" "node 2 waits to be taken back \(up to 3 s\)" "... n3 waits to be taken back, up to 3 s"
t_like "$T_TMP/wait.err" "no other node of the step took this one back within 3 s of the cut \(DDL_CUT_OFF_WAIT_S\)" \
    "... then its tasks stop, saying why"
t_is "$(t_checksums "$T_TMP/wait.out" | cut -d' ' -f1)" 4 "... n1-n2 end the step on 4 ranks, which agree"
cl_clean "no fmnist-train, ddl-launch or ddl-agent left on the nodes"

# A minority of several nodes: 4 nodes, 1 task each; n3-n4 cut off from
# n1-n2 together.  n1-n2 are half of the step with the lowest-numbered
# node: they shrink to 2 ranks and train on.  n3 and n4 still reach each
# other, but have no majority: n3 takes over on their side, finds 2 of 4
# without node 0 and steps down; n4, its link closed, takes over and finds
# itself alone: each waits on its own and asks to be taken back.  Healed,
# n1 takes both back, one after the other, and the world grows back to 4
# ranks.  (The weights depend on when each grow happens: only their
# agreement is checked; the bit-for-bit comparison is the first part's.)
sh "$CLUSTER" stop "$CL_DIR" >/dev/null 2>&1
cl_init "/var/tmp/ddl-cluster.$$" 4 'max_restarts = 5
checkpoint_roots = {"/var/tmp"}'
cl_start
trap 'sh "$CLUSTER" heal "$CL_DIR" n3,n4 >/dev/null 2>&1; sh "$CLUSTER" stop "$CL_DIR" >/dev/null 2>&1; rm -rf "$CK"*; t_cleanup' EXIT
ck="$CK-cut2"
# shellcheck disable=SC2086 # ARGS: several words
timeout -k 5 240 srun --mpi=pmix -N4 --ntasks-per-node=1 --ddl --ddl-restarts=4 \
    --ddl-min-nodes=1 --no-kill --ddl-checkpoint-dir="$ck" -J "$T_TOKEN" \
    "$FMNIST" $ARGS --checkpoint-dir "$ck" >"$T_TMP/cut2.out" 2>"$T_TMP/cut2.err" &
run=$!
t_wait_file "$ck/latest" 90
sh "$CLUSTER" cut "$CL_DIR" n3,n4
i=0
while [ $((i += 1)) -lt 300 ] && ! { grep -q "shrunk to 2 nodes" "$T_TMP/cut2.err" &&
    [ "$(grep -c "waits to be taken back" "$T_TMP/cut2.err")" -ge 2 ]; }; do
    sleep 0.1
done
sleep 2
sh "$CLUSTER" heal "$CL_DIR" n3,n4
wait $run
t_status $? 0 "n3-n4 cut off together from n1-n2, then healed: srun exits 0" "$T_TMP/cut2.err"
t_like "$T_TMP/cut2.err" "restart [12] of 4: generation [12] \(shrunk to 2 nodes, 2 ranks: no spare node left\)" \
    "... n1-n2, half of the nodes with node 0, shrink the world to 2 ranks (n3 and n4 lost at once or one after the other)"
t_is "$(grep -c "node [01] (n[12]): .*shrunk to" "$T_TMP/cut2.err")" 0 \
    "... n3-n4 form no world of their own (none after losing n1 or n2)"
t_like "$T_TMP/cut2.err" "only 2 of the step's 4 nodes answer \(nodes 2, 3\), half of them but not the lowest-numbered: this side may be cut off .*: node 2 waits to be taken back" \
    "... n3 leads their side, finds 2 of 4 without node 0, and waits to be taken back"
t_like "$T_TMP/cut2.err" "only [12] of the step's 4 nodes answer \(nodes? [23, ]+\).*: node 3 waits to be taken back" \
    "... n4, its link to n3 closed, leads alone and waits too"
t_like "$T_TMP/cut2.err" "node 2 \(n3\) came back after a loss: taken back as a spare" "... healed: n1 takes n3 back"
t_like "$T_TMP/cut2.err" "node 3 \(n4\) came back after a loss: taken back as a spare" "... and n4"
t_like "$T_TMP/cut2.err" "the world grows back to 4 nodes, 4 ranks" "... and the world grows back to 4 ranks"
t_is "$(t_checksums "$T_TMP/cut2.out" | cut -d' ' -f1)" 4 "... the step ends on 4 ranks, which agree"
i=0
while [ $((i += 1)) -lt 100 ] &&
    [ "$(cl_procs fmnist-train)$(cl_procs ddl-launch)$(cl_procs ddl-agent)" != 000 ]; do
    sleep 0.1
done
t_is "$(cl_procs fmnist-train) $(cl_procs ddl-launch) $(cl_procs ddl-agent)" "0 0 0" \
    "no fmnist-train, ddl-launch or ddl-agent left on the 4 nodes"
t_done
