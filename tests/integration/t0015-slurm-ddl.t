#!/bin/sh
# t0015-slurm-ddl: `srun --mpi=pmix --ddl` across 3 nodes.  On a
# 3-node namespace cluster (tests/slurm/cluster.sh) with spank_ddl.so loaded
# as in t0010 (--ddl bootstraps through PMIx; the cluster's MpiDefault is
# none), a step of 6 tasks, two per node:
#
#  1. environment: ranks 0-5 once each; RANK = SLURM_PROCID = DDL_RANK,
#     WORLD_SIZE 6, LOCAL_WORLD_SIZE 2, LOCAL_RANK 0/1 and NODE_RANK 0/1/2
#     on n1/n2/n3, one MASTER_ADDR (n1's address) and MASTER_PORT for all,
#     and no PMIX_* variable in any worker (a worker is never a PMIx client);
#  2. ddl-bench allreduce (auto, ring, rd) with UCX held to TCP
#     (UCX_TLS=tcp,self, which libddl honours), so that the data crosses the
#     veths: exit 0, one table, #wrong 0 on every row, the veths carry it;
#  3. fmnist-train: every rank prints the same weights CRC, and the same as
#     `ddlrun -n 6` on this host (the example's README, "Determinism": the
#     bits depend only on the seed and the number of ranks; the allreduce
#     algorithm is chosen from the size and the number of ranks alone);
#  4. while a long step (`sleep 300`) runs: `ddl-agent status` inside n1,
#     as root (table and --json: the step, its 2 local ranks running), and
#     as a second user (ddltest, created if missing), who sees no step and
#     is refused both by the runtime directory's permissions and, when given
#     CAP_DAC_OVERRIDE to get past them, by the agent's SO_PEERCRED check;
#  5. `scancel` of that step: within KillWait (5 s) plus a margin, no
#     ddl-launch, ddl-agent or worker process is left on any node, no file
#     under any node's /run/ddl/0, and srun has exited.
#
# Skips when spank_ddl.so or ddl-launch is not built, when not root or when
# Slurm/munge are not installed (cluster.sh exits 77); the fmnist assertions
# skip without fmnist-train or the Fashion-MNIST data, the second-user ones
# without a way to create the user.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
CLUSTER="$top_srcdir/tests/slurm/cluster.sh"
DIR="/var/tmp/ddl-cluster.$$"
PLUGIN="$top_builddir/plugins/.libs/spank_ddl.so"
BENCH="$top_builddir/bench/ddl-bench"
CONF="$T_TMP/ddl.conf"
NODES=3
RANKS=6
MASTER=192.168.213.11 # n1's eth0 (cluster.sh: 192.168.213.(10 + i))
OTHER=ddltest         # the second user
FMNIST_DATA=${DDL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
FMNIST_OPTS="--epochs 1 --limit 3000"

# A signal (make check interrupted) ends the script through its EXIT trap,
# which stops the cluster: sh does not run that trap on a fatal signal.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

[ -f "$PLUGIN" ] || t_skip_all "spank_ddl.so not built (configure found no slurm/spank.h)"
[ -x "$DDL_LAUNCH" ] || t_skip_all "ddl-launch not built"
[ "$(id -u)" = 0 ] || t_skip_all "needs root (network namespaces, slurmd)"

# fmnist's reference: the same ranks on this host under ddlrun, before the
# cluster (lib.sh's DDL_RUNTIME_DIR still set).
crc_lines() { sed -n 's/^rank \([0-9]*\): weights crc32 \(0x[0-9a-f]\{8\}\)$/\1 \2/p' "$T_TMP/out"; }
FMNIST_OK=0
if [ -x "$FMNIST" ] && [ -r "$FMNIST_DATA/train-images-idx3-ubyte.gz" ]; then
    FMNIST_OK=1
    # shellcheck disable=SC2086 # FMNIST_OPTS: several words
    # one algorithm on both sides: the automatic choice differs between one
    # node and three (bits follow the reduction order)
    DDL_ALLREDUCE_ALGO=ring t_run 180 "$DDLRUN" -n $RANKS "$FMNIST" $FMNIST_OPTS
    t_is $? 0 "ddlrun -n $RANKS fmnist-train $FMNIST_OPTS on the host exits 0 (the reference)"
    ref=$(crc_lines | awk '{print $2}' | sort -u)
    t_is "$(crc_lines | wc -l) $(echo "$ref" | wc -l)" "$RANKS 1" "... its $RANKS ranks agree"
fi

# One namespace cluster at a time on a host (one bridge, ddlbr0).
. "$top_srcdir/tests/slurm/lib-cluster.sh"
cl_prepare

# The plugin as in t0010, told where this build's ddl-launch is; both files
# exist before the cluster starts.
printf 'max_restarts = 5\ncheckpoint_roots = {"/var/tmp"}\n' >"$CONF"
mkdir -p "$DIR"
echo "required $PLUGIN config=$CONF launch=$DDL_LAUNCH" >"$DIR/plugstack.conf"

export DDL_CLUSTER_SHARE="$top_builddir $top_srcdir $T_TMP"
sh "$CLUSTER" start "$DIR" $NODES >"$T_TMP/start.out" 2>"$T_TMP/start.err"
rc=$?
[ $rc -eq 77 ] && { rm -rf "$DIR"; t_skip_all "$(sed -n 's/^cluster.sh: skip: //p' "$T_TMP/start.err")"; }
# A failed start has already cleaned up what it made; only a cluster that
# started is ours to stop (`stop` removes every node namespace and ddlbr0).
# The background srun below has $T_TOKEN in its job name: t_cleanup kills it.
[ $rc -eq 0 ] && trap 'sh "$CLUSTER" stop "$DIR" >/dev/null 2>&1; t_cleanup' EXIT
t_is $rc 0 "a $NODES-node cluster starts with spank_ddl.so in plugstack.conf"
[ $rc -eq 0 ] || { sed 's/^/# /' "$T_TMP/start.err"; rm -rf "$DIR"; t_done; }
export SLURM_CONF="$DIR/slurm.conf"
# lib.sh's DDL_RUNTIME_DIR lies in $T_TMP, which every node shares: the node
# agents' sockets (step-JOB.STEP.sock) would collide there.  Each node's own
# /tmp (the host's $DIR/nodes/nI/tmp) is private to this cluster.
unset DDL_RUNTIME_DIR
# ddl-launch keeps a user's MASTER_ADDR/MASTER_PORT: none here.
unset MASTER_ADDR MASTER_PORT DDL_ALLREDUCE_ALGO

# Helpers over the nodes.  Every node's processes share the host's pid
# namespace, so pgrep on the host sees them; --ns/--nslist net keeps to the
# processes in node nI's network namespace (not another test's on the host).
slurmd_pid() { cat "$DIR/nodes/$1/slurmd.pid" 2>/dev/null; }
on_node() { # on_node NODE CMD...: CMD in the node's net/mount/uts namespaces
    n=$1
    shift
    timeout -k 5 30 nsenter -t "$(slurmd_pid "$n")" -n -m -u -- "$@"
}
node_procs() { # node_procs NAME: such processes (exact name) on all nodes
    for n in $(seq $NODES); do
        p=$(slurmd_pid "n$n")
        if [ -n "$p" ] && [ -d "/proc/$p" ]; then
            pgrep --ns "$p" --nslist net -x "$1"
        else
            echo "n$n: no slurmd" # counts, so that a lost node cannot pass for a clean one
        fi
    done | wc -l
}
step_socks() { # step_socks NODE: the agents' sockets in the node's /run/ddl/0
    find "$DIR/nodes/$1/run-ddl/0" -maxdepth 1 -type s -name 'step-*.sock' 2>/dev/null
}
running() { # running PID: PID is alive (not a zombie left for `wait`)
    case $(ps -o stat= -p "$1" 2>/dev/null) in '' | Z*) return 1 ;; esac
}
leftovers() { # files under the nodes' /run/ddl/0 (the directory itself may stay)
    for n in $(seq $NODES); do
        find "$DIR/nodes/n$n/run-ddl/0" -mindepth 1 2>/dev/null
    done
}

# --- 1. the workers' environment ---------------------------------------------
cat >"$T_TMP/env.sh" <<'EOF'
echo "$(hostname) procid=${SLURM_PROCID-} localid=${SLURM_LOCALID-} rank=${RANK-} ddl_rank=${DDL_RANK-}" \
     "world=${WORLD_SIZE-} local=${LOCAL_RANK-} local_world=${LOCAL_WORLD_SIZE-} node=${NODE_RANK-}" \
     "master=${MASTER_ADDR-}:${MASTER_PORT-} pmix=$(env | grep -c '^PMIX_')"
EOF
t_run 60 srun --mpi=pmix --kill-on-bad-exit=1 -N$NODES -n$RANKS --ddl sh "$T_TMP/env.sh"
rc=$?
t_is $rc 0 "srun --mpi=pmix -N$NODES -n$RANKS --ddl sh env.sh exits 0"
[ $rc -eq 0 ] || sed 's/^/# stderr: /' "$T_TMP/err" | tail -n 20
sed 's/^/# /' "$T_TMP/out"
# One line per task: $1 hostname, then NAME=VALUE words: $2 procid, $3
# localid, $4 rank, $5 ddl_rank, $6 world, $7 local, $8 local_world, $9 node,
# $10 master (ADDR:PORT), $11 pmix (the number of PMIX_* variables).
grep '^n[0-9] ' "$T_TMP/out" >"$T_TMP/envs"
t_is "$(sed -n 's/^\(n[0-9]\) procid=\([0-9]*\) .*/\2:\1/p' "$T_TMP/envs" | sort -n | tr '\n' ' ')" \
    "0:n1 1:n1 2:n2 3:n2 4:n3 5:n3 " "ranks 0-5 each ran once, two per node in block order"
t_is "$(awk '{ split($2, p, "="); split($4, r, "="); split($5, d, "=");
               if (p[2] != "" && p[2] == r[2] && r[2] == d[2]) n++ } END { print n + 0 }' \
        "$T_TMP/envs")" $RANKS "... RANK = SLURM_PROCID = DDL_RANK in every task"
t_is "$(grep -c " world=$RANKS .* local_world=2 " "$T_TMP/envs")" $RANKS \
    "... WORLD_SIZE=$RANKS and LOCAL_WORLD_SIZE=2 in every task"
t_is "$(awk '{ split($3, l, "="); split($7, lr, "=");
               print $1 ":" $9 ":" $7 (l[2] == lr[2] ? "" : ":localid=" l[2]) }' "$T_TMP/envs" |
        sort | tr '\n' ' ')" \
    "n1:node=0:local=0 n1:node=0:local=1 n2:node=1:local=0 n2:node=1:local=1 n3:node=2:local=0 n3:node=2:local=1 " \
    "... NODE_RANK 0, 1, 2 on n1, n2, n3; LOCAL_RANK 0 and 1 (= SLURM_LOCALID) on each"
t_is "$(awk '{print $10}' "$T_TMP/envs" | sed 's/:.*//' | sort | uniq -c | awk '{print $1, $2}')" \
    "$RANKS master=$MASTER" "... MASTER_ADDR is n1's address ($MASTER) in every task"
t_is "$(awk '{print $10}' "$T_TMP/envs" | sort -u | grep -Ec ':[1-9][0-9]*$')" 1 \
    "... and MASTER_PORT one port number, the same in every task"
t_is "$(awk '{print $11}' "$T_TMP/envs" | sort | uniq -c | awk '{print $1, $2}')" "$RANKS pmix=0" \
    "... no worker has a PMIX_* variable"

# --- 2. ddl-bench across the nodes, UCX over TCP ----------------------------------
# UCX held to TCP (no shared memory between nodes that share a kernel): the
# data between nodes crosses the veths.  Bytes the host end of vddlI
# received = what node nI sent.
export UCX_TLS=tcp,self
sent() { cat "/sys/class/net/vddl$1/statistics/rx_bytes" 2>/dev/null || echo 0; }
for n in $(seq $NODES); do eval "before$n=\$(sent $n)"; done

ITERS=5 WARMUP=1 MAXROW=524288
t_run 180 srun --mpi=pmix --kill-on-bad-exit=1 -N$NODES -n$RANKS --ddl \
    "$BENCH" allreduce -b 8 -e 1M -f 16 -n $ITERS -w $WARMUP
rc=$?
t_is $rc 0 "srun --ddl -N$NODES -n$RANKS ddl-bench allreduce (UCX_TLS=tcp,self) exits 0"
[ $rc -eq 0 ] || { t_diag "stdout:"; sed 's/^/#   /' "$T_TMP/out"; t_diag "stderr:"; sed 's/^/#   /' "$T_TMP/err" | tail -n 30; }
# Rank 0 alone prints the header and the rows (bench/README.md).
t_is "$(grep -c '^# ddl-bench allreduce:' "$T_TMP/out")" 1 "... one header: one world of ranks"
t_like "$T_TMP/out" "^# ddl-bench allreduce: $RANKS ranks, type f32, op sum, $ITERS iterations .* algo auto, memory host$" \
    "... of $RANKS ranks"
awk '!/^#/' "$T_TMP/out" >"$T_TMP/rows"
t_is "$(awk 'NF == 8 {print $1}' "$T_TMP/rows" | tr '\n' ' ')" "8 128 2048 32768 524288 " \
    "... one row per size, 8 B to 512 KiB"
t_is "$(awk 'NF == 8 {print $8}' "$T_TMP/rows" | sort -u | tr '\n' ' ')" "0 " \
    "... and #wrong is 0 on every row"
t_is "$(awk 'NF != 8' "$T_TMP/rows" | wc -l)" 0 "... and no other output line"

# Whatever the algorithm, each node must send at least its 512 KiB share of
# every call of the last row (the others cannot form the sum without it).
low=""
for n in $(seq $NODES); do
    b=0
    eval "b=\$before$n"
    d=$(($(sent "$n") - b))
    t_diag "n$n sent $d bytes over its veth during the run"
    [ $d -ge $(((ITERS + WARMUP) * MAXROW)) ] || low="$low n$n:$d"
done
t_is "$low" "" "... and the data crossed the veths (each node sent >= $(((ITERS + WARMUP) * MAXROW)) bytes)"

for algo in ring rd; do
    t_run 180 srun --mpi=pmix --kill-on-bad-exit=1 -N$NODES -n$RANKS --ddl \
        "$BENCH" allreduce -b 4 -e 256K -f 64 -n 3 -w 1 -a $algo
    rc=$?
    t_is $rc 0 "srun --ddl ddl-bench allreduce -a $algo exits 0"
    [ $rc -eq 0 ] || sed 's/^/# stderr: /' "$T_TMP/err" | tail -n 20
    t_is "$(grep -c "^# ddl-bench allreduce: $RANKS ranks, .* algo $algo, memory host\$" "$T_TMP/out")" 1 \
        "... one header, $RANKS ranks, algo $algo"
    t_is "$(awk '!/^#/ && NF == 8 {print $1 ":" $8}' "$T_TMP/out" | tr '\n' ' ')" \
        "4:0 256:0 16384:0 " "... rows 4 B, 256 B, 16 KiB with #wrong 0"
done

# --- 3. fmnist-train across the nodes --------------------------------------------
if [ $FMNIST_OK = 1 ]; then
    # shellcheck disable=SC2086 # FMNIST_OPTS: several words
    DDL_ALLREDUCE_ALGO=ring t_run 180 srun --mpi=pmix --kill-on-bad-exit=1 -N$NODES -n$RANKS \
        --ddl "$FMNIST" $FMNIST_OPTS
    rc=$?
    t_is $rc 0 "srun --ddl -N$NODES -n$RANKS fmnist-train $FMNIST_OPTS exits 0"
    [ $rc -eq 0 ] || sed 's/^/# stderr: /' "$T_TMP/err" | tail -n 20
    t_is "$(crc_lines | awk '{print $1}' | sort -n | tr '\n' ' ')" "0 1 2 3 4 5 " \
        "... every rank printed its weights crc32 once"
    t_is "$(crc_lines | awk '{print $2}' | sort -u | wc -l)" 1 "... all the same"
    t_like "$T_TMP/out" "^checksums: all $RANKS ranks agree \(0x[0-9a-f]{8}\)$" "... rank 0 says they agree"
    t_is "$(crc_lines | awk '{print $2}' | sort -u)" "$ref" "... and equal to ddlrun -n $RANKS's on the host"
else
    for i in 1 2 3 4 5; do
        t_skip "fmnist-train not built or no Fashion-MNIST in $FMNIST_DATA"
    done
fi

# The steps above ended normally: their agents removed their sockets.
t_is "$(leftovers | tr '\n' ' ')" "" "no file is left under any node's /run/ddl/0 after those steps"

# --- 4. a long step: ddl-agent status inside n1, as root and as another user -------
JOB_NAME="t0015-$T_TOKEN"
timeout -k 5 120 srun --mpi=pmix -N$NODES -n$RANKS -J "$JOB_NAME" --ddl sleep 300 \
    </dev/null >"$T_TMP/long.out" 2>"$T_TMP/long.err" &
LONG_PID=$!
i=0
socks=""
while [ $i -lt 300 ]; do
    socks=$(for n in $(seq $NODES); do step_socks "n$n"; done | wc -l)
    [ "$socks" = $NODES ] && [ "$(node_procs sleep)" = $RANKS ] && break
    sleep 0.2
    i=$((i + 1))
done
t_is "$socks" $NODES "a long --ddl step: each node has its agent's socket under /run/ddl/0"
t_is "$(node_procs ddl-launch) $(node_procs ddl-agent) $(node_procs sleep)" "$RANKS $NODES $RANKS" \
    "... $RANKS ddl-launch, $NODES ddl-agent and $RANKS workers run on the nodes"
SOCK=$(step_socks n1 | head -n 1)
SOCK=${SOCK##*/}
STEP=$(echo "$SOCK" | sed -n 's/^step-\([0-9]*\.[0-9]*\)\.sock$/\1/p')
JOB=${STEP%.*}
t_diag "step $STEP, socket /run/ddl/0/$SOCK on n1"
t_is "$(stat -c '%a %u' "$DIR/nodes/n1/run-ddl/0" 2>&1)" "700 0" "... n1's /run/ddl/0 is root's, mode 0700"

# ---- ddl-agent status (table and --json; schema in docs/user-guide.md) ----
# The ranks report `running` just after their workers start: wait a little.
status_json() { on_node n1 "$DDL_AGENT" status --json 2>"$T_TMP/status.err"; }
summary='import json, sys
d = json.load(sys.stdin)
print(len(d), " ".join("%s %s %s" % (s["step"], s["size"], ",".join("%d:%s" % (r["rank"], r["state"])
      for r in s["ranks"])) for s in d))'
i=0
while [ $i -lt 50 ]; do
    status_json >"$T_TMP/status.json"
    python3 -c "$summary" <"$T_TMP/status.json" >"$T_TMP/summary" 2>&1
    [ "$(cat "$T_TMP/summary")" = "1 $STEP $RANKS 0:running,1:running" ] && break
    sleep 0.2
    i=$((i + 1))
done
status_json >"$T_TMP/status.json"
t_is $? 0 "ddl-agent status --json as root inside n1 exits 0"
t_ok "$(python3 -c 'import json, sys; json.load(sys.stdin)' <"$T_TMP/status.json" >/dev/null 2>&1; echo $?)" \
    "... its output is valid JSON"
t_is "$(python3 -c "$summary" <"$T_TMP/status.json" 2>&1)" "1 $STEP $RANKS 0:running,1:running" \
    "... one step, $STEP of $RANKS ranks, with n1's ranks 0 and 1 running"
on_node n1 "$DDL_AGENT" status >"$T_TMP/status.txt" 2>"$T_TMP/status.err"
t_is $? 0 "ddl-agent status as root inside n1 exits 0"
sed 's/^/# /' "$T_TMP/status.txt"
t_like "$T_TMP/status.txt" "^step $STEP: $RANKS ranks on $NODES nodes, generation 0$" \
    "... it names the step, its size and node count"
t_like "$T_TMP/status.txt" "^  this node: n1 \(node 0, leader\), agent pid [0-9]+, /run/ddl/0/$SOCK$" \
    "... this node, which leads, its agent and socket"
# rank rows: RANK STATE PID WORKER CPUS GPU NIC RST HEARD EXIT (10 columns);
# peer rows: NODE HOST ADDRESS LINK HEARD (5)
awk '$1 ~ /^[0-9]+$/ && NF >= 10' "$T_TMP/status.txt" >"$T_TMP/status.rows"
awk '$1 ~ /^[0-9]+$/ && NF == 5' "$T_TMP/status.txt" >"$T_TMP/status.peers"
t_is "$(awk '{print $1 ":" $2}' "$T_TMP/status.rows" | tr '\n' ' ')" "0:running 1:running " \
    "... and lists 2 ranks, 0 and 1, running"
t_is "$(awk '{print $3}' "$T_TMP/status.rows" | xargs -r ps -o comm= -p | sort | tr '\n' ' ')" \
    "ddl-launch ddl-launch " "... whose PID column is their ddl-launch"
t_is "$(awk '{print $4}' "$T_TMP/status.rows" | xargs -r ps -o comm= -p | sort | tr '\n' ' ')" \
    "sleep sleep " "... and WORKER column their workers"
# --ddl-bind defaults to auto: each rank on its own core of the node's 2,
# the node's one NIC (eth0); no restart yet; heard from at registration.
t_is "$(awk '{print $5, $7, $8}' "$T_TMP/status.rows" | sort | tr '\n' ' ')" "0 eth0 0 1 eth0 0 " \
    "... on cores 0 and 1, NIC eth0, 0 restarts"
t_is "$(awk '$9 ~ /^[0-9.]+s$/' "$T_TMP/status.rows" | wc -l)" 2 "... each with the age of its last contact"
t_is "$(awk '{print $1, $2, $3, $4}' "$T_TMP/status.peers" | tr '\n' ' ')" \
    "1 n2 192.168.213.12 up 2 n3 192.168.213.13 up " \
    "... and the leader's links to nodes 1 (n2) and 2 (n3), both up"
# Heartbeats between agents every DDL_HEARTBEAT_MS (0.1 s by default): a
# link's last contact is recent; each node's agent links to the leader.
peers='import json, sys
for s in json.load(sys.stdin):
    print(s["host"], s["node_id"], "leader" if s["leader"] else "-",
          " ".join("%d:%s:%s:%s" % (p["node_id"], p["host"], p["link"],
                   "fresh" if p["heard_ms"] is not None and p["heard_ms"] < 3000 else p["heard_ms"])
                   for p in s["peers"]))'
for n in 1 2 3; do
    on_node n$n "$DDL_AGENT" status --json 2>&1 | python3 -c "$peers" 2>&1
done >"$T_TMP/peers"
t_is "$(tr '\n' ';' <"$T_TMP/peers")" \
    "n1 0 leader 1:n2:up:fresh 2:n3:up:fresh;n2 1 - 0:n1:up:fresh;n3 2 - 0:n1:up:fresh;" \
    "--json on each node: the leader sees n2 and n3, the others the leader, all heard within 3 s"
# ---- end of ddl-agent status ----

# The second user: created if missing (a system user, no home, no shell).
if ! id -u $OTHER >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin $OTHER >/dev/null 2>&1 ||
        id -u $OTHER >/dev/null 2>&1 # created meanwhile by someone else: fine
fi
if OTHER_UID=$(id -u $OTHER 2>/dev/null); then
    on_node n1 runuser -u $OTHER -- "$DDL_AGENT" status >"$T_TMP/o.out" 2>"$T_TMP/o.err"
    rc=$?
    t_is "$rc $(cat "$T_TMP/o.out")" "0 no ddl steps are running on this node" \
        "$OTHER's ddl-agent status inside n1 sees no step (only its own directory)"
    on_node n1 runuser -u $OTHER -- "$DDL_AGENT" status --socket "/run/ddl/0/$SOCK" \
        >"$T_TMP/o.out" 2>"$T_TMP/o.err"
    rc=$?
    t_is "$rc $(grep -c running "$T_TMP/o.out")" "1 0" \
        "... given root's socket, it fails and shows no rank"
    t_like "$T_TMP/o.err" "Permission denied" "... stopped by /run/ddl/0's permissions"
    # Past the directory and socket permissions (CAP_DAC_OVERRIDE), the
    # agent itself refuses the connection: SO_PEERCRED gives the uid.
    on_node n1 setpriv --reuid=$OTHER --regid=$OTHER --clear-groups \
        --inh-caps=+dac_override --ambient-caps=+dac_override -- \
        "$DDL_AGENT" status --socket "/run/ddl/0/$SOCK" >"$T_TMP/o.out" 2>"$T_TMP/o.err"
    rc=$?
    t_is "$rc $(grep -c running "$T_TMP/o.out")" "1 0" \
        "... with CAP_DAC_OVERRIDE too it fails and shows no rank"
    t_like "$T_TMP/o.err" "refused: permission denied: uid $OTHER_UID may not use the agent of uid 0" \
        "... refused by the agent (SO_PEERCRED)"
else
    for i in 1 2 3 4 5; do t_skip "no user $OTHER and useradd failed"; done
fi

# --- 5. scancel: everything of the step goes, on every node ------------------
t_run 30 scancel "$JOB"
t_is $? 0 "scancel $JOB"
# KillWait is 5 s (cluster.sh); 15 s more for the step's end.
start=$(date +%s)
i=0
while [ $i -lt 100 ]; do
    if ! running $LONG_PID; then
        [ "$(node_procs ddl-launch)$(node_procs ddl-agent)$(node_procs sleep)" = 000 ] &&
            [ -z "$(leftovers)" ] && break
    fi
    sleep 0.2
    i=$((i + 1))
done
t_diag "$(($(date +%s) - start)) s after scancel"
alive=0
running $LONG_PID && alive=1
t_is $alive 0 "... srun has exited within 20 s"
[ $alive = 0 ] || kill $LONG_PID
wait $LONG_PID
t_diag "srun's exit status: $?" "$(sed 's/^/srun: /' "$T_TMP/long.err" | tail -n 5)"
t_is "$(node_procs ddl-launch) $(node_procs ddl-agent) $(node_procs sleep)" "0 0 0" \
    "... no ddl-launch, ddl-agent or worker is left on any node"
# The per-user directory /run/ddl/0 itself may stay (ddl_runtime_dir makes
# it once per node and user; nothing removes it), but nothing in it.
t_is "$(leftovers | tr '\n' ' ')" "" "... no file is left under any node's /run/ddl/0"

sh "$CLUSTER" stop "$DIR"
t_is $? 0 "the cluster stops"
# A second `stop` from the trap would remove whatever cluster started since.
trap t_cleanup EXIT
t_done
