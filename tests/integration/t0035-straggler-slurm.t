#!/bin/sh
# t0035-straggler-slurm: straggler detection in a `srun --ddl` step on the
# 2-node namespace cluster (2 tasks per node; the leader is n1's agent):
#
#  1. fmnist-train --slow-rank 3 --slow-pct 20 (rank 3, on n2, sleeps 20 %
#     of its step's compute, --pace 100 ms included): n2's agent forwards
#     its ranks' timing to the leader, whose log line (on the job's stderr)
#     names rank 3 on node 1 (n2), about 20 % slower, by step 20; `ddl-agent
#     status --json` inside n1 names it while the step runs;
#  2. the same step without --slow-rank: no straggler line.
#
# Skips like t0015 (root, Slurm, munge, the plugin), and without
# fmnist-train or the Fashion-MNIST data.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

DATA=${DDL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -x "$FMNIST" ] || t_skip_all "fmnist-train not built (configure found no OpenBLAS)"
[ -r "$DATA/train-images-idx3-ubyte.gz" ] || t_skip_all "no Fashion-MNIST in $DATA"
command -v python3 >/dev/null || t_skip_all "no python3 to read status --json"
# 4 ranks, 100 steps of about 110 ms: time for status to look while it runs
ARGS="--epochs 1 --limit 6400 --batch 64 --pace 100"

. "$top_srcdir/tests/slurm/lib-cluster.sh"
cl_init "/var/tmp/ddl-cluster.$$" 2 ""
cl_start
export UCX_TLS=tcp,self
unset MASTER_ADDR MASTER_PORT DDL_STRAGGLER_PCT DDL_STRAGGLER_WINDOW DDL_STRAGGLER_PERSIST

# leader_straggler FILE: from status --json, node 0's straggler as
# "RANK NODE NAMED" or "none NAMED"; nothing when no agent answered
leader_straggler() {
    python3 -c '
import json, sys
try:
    steps = json.load(open(sys.argv[1]))
except Exception:
    sys.exit(0)
for s in steps:
    if s.get("node_id") == 0 and s.get("leader"):
        st = s.get("straggler")
        if st:
            print(st["rank"], st["node_id"], s["stragglers_named"])
        else:
            print("none", s["stragglers_named"])
' "$1"
}

# step NAME [FMNIST OPTIONS]: srun in the background (pid in JOB)
step() {
    name=$1
    shift
    timeout -k 5 $((120 * ${DDL_TEST_TIME_SCALE:-1})) srun --mpi=pmix -N2 --ntasks-per-node=2 \
        --ddl -J "$T_TOKEN" "$FMNIST" $ARGS "$@" >"$T_TMP/$name.out" 2>"$T_TMP/$name.err" &
    JOB=$!
}

# --- 1. rank 3 slowed by 20 % --------------------------------------------------
step slow --slow-rank 3 --slow-pct 20
seen=""
i=0
t0=$(date +%s)
while [ $i -lt 120 ] && kill -0 $JOB 2>/dev/null; do # at most about 60 s
    on_node n1 "$DDL_AGENT" status --json >"$T_TMP/st.json" 2>/dev/null
    s=$(leader_straggler "$T_TMP/st.json")
    [ -n "$s" ] && seen=$s
    case $seen in [0-9]*) break ;; esac
    sleep 0.5
    i=$((i + 1))
done
t_diag "status asked $((i + 1)) times in $(($(date +%s) - t0)) s"
wait $JOB
t_is $? 0 "srun --ddl -N2 (2 tasks a node) fmnist-train --slow-rank 3 --slow-pct 20 exits 0"
line=$(grep 'straggler: rank' "$T_TMP/slow.err" | head -1)
t_diag "$line"
t_is "$(grep -c 'straggler: rank 3 on node 1 (n2) is [0-9.]*% slower than its peers' "$T_TMP/slow.err")" 1 \
    "the leader's log names rank 3 on node 1 (n2), once"
pct=$(printf '%s\n' "$line" | sed -n 's/.* is \([0-9.]*\)% slower.*/\1/p')
at=$(printf '%s\n' "$line" | sed -n 's/.*(up to step \([0-9]*\)).*/\1/p')
t_ok "$(awk -v p="${pct:-0}" 'BEGIN { exit !(p >= 12 && p <= 40) }'; echo $?)" \
    "... about 20 % slower (${pct:-?} %, 12-40)"
t_ok "$([ "${at:-99}" -le 20 ] && echo 0 || echo 1)" "... named by step 20 (step ${at:-?})"
t_is "$seen" "3 1 1" "ddl-agent status --json inside n1: straggler rank 3 on node 1, 1 named"

# --- 2. the same step, clean ------------------------------------------------
step clean
wait $JOB
t_is $? 0 "the same step without --slow-rank exits 0"
t_is "$(grep -c 'straggler' "$T_TMP/clean.err")" 0 "... no straggler named"
grep straggler "$T_TMP/clean.err" | sed 's/^/# /'

t_is "$(cl_procs fmnist-train) $(cl_procs ddl-agent)" "0 0" "nothing of the steps is left on the nodes"
t_done
