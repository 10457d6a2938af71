#!/bin/sh
# t0035-straggler: the leader agent names a rank persistently slower than
# its peers, under `ddlrun --emulate` (3 nodes of 1 rank: rank 2's timing
# reaches the leader, node 0, over the agents' link):
#
#  1. fmnist-train --slow-rank 2 --slow-pct 20 --slow-steps 45 (rank 2
#     sleeps 20 % of its step's compute, --pace 100 ms included, before
#     each of its first 45 steps): one log line names rank 2 on node 2
#     (node2), about 20 % slower, by step 20, another its recovery after
#     step 45; while it is named `ddl-agent status` names it in text, in
#     --json and in --prometheus (ddl_straggler_rank 2);
#  2. the same run without --slow-rank: no straggler line, status --json
#     says none (null, 0 named);
#  3. DDL_STRAGGLER_PCT=0: the slowed run names nobody; a bad
#     DDL_STRAGGLER_PCT stops the job with the variable, its value and the
#     range.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

[ -x "$FMNIST" ] || t_skip_all "fmnist-train not built (configure found no OpenBLAS: apt-get install libopenblas-dev)"
data=${DDL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -r "$data/train-images-idx3-ubyte.gz" ] || t_skip_all "Fashion-MNIST missing in $data (apt-get install dataset-fashion-mnist)"
command -v python3 >/dev/null || t_skip_all "no python3 to read status --json"

# 3 emulated nodes of one rank; 80 steps of about 110 ms (--pace 100)
ARGS="--epochs 1 --limit 5120 --batch 64 --pace 100"

# straggler_of FILE: from status --json, the leader's (node 0) straggler as "RANK NODE PCT NAMED",
# "none NAMED", or nothing when no agent answered
straggler_of() {
    python3 -c '
import json, sys
try:
    steps = json.load(open(sys.argv[1]))
except Exception:
    sys.exit(0)
for s in steps if isinstance(steps, list) else [steps]:
    if s.get("node_id") == 0:
        st = s.get("straggler")
        if st:
            print(st["rank"], st["node_id"], st["slower_pct"], s["stragglers_named"])
        else:
            print("none", s.get("stragglers_named"))
' "$1"
}

# job NAME [FMNIST OPTIONS]: run it in the background (its pid in JOB),
# output in $T_TMP/NAME.out and NAME.err
job() {
    name=$1
    shift
    timeout -k 5 $((90 * ${DDL_TEST_TIME_SCALE:-1})) "$DDLRUN" -n 3 \
        --nodes 3 --emulate "$FMNIST" $ARGS "$@" >"$T_TMP/$name.out" 2>"$T_TMP/$name.err" &
    JOB=$!
}

# --- 1. a rank slowed by 20 % -------------------------------------------------
job slow --slow-rank 2 --slow-pct 20 --slow-steps 45
# until the three forms of status show it (it stays named for some 30 steps)
seen=""
i=0
while [ $i -lt 300 ] && kill -0 $JOB 2>/dev/null; do # at most 30 s
    "$DDL_AGENT" status --json >"$T_TMP/st.json" 2>/dev/null
    seen=$(straggler_of "$T_TMP/st.json")
    case $seen in [0-9]*)
        "$DDL_AGENT" status >"$T_TMP/st.txt" 2>&1
        "$DDL_AGENT" status --prometheus >"$T_TMP/st.prom" 2>&1
        grep -q '^  straggler: rank' "$T_TMP/st.txt" &&
            grep -q '^ddl_straggler_rank{.*} [0-9]' "$T_TMP/st.prom" && break ;;
    esac
    sleep 0.1
    i=$((i + 1))
done
wait $JOB
t_is $? 0 "ddlrun --emulate, 3 nodes, fmnist-train --slow-rank 2 --slow-pct 20 exits 0"
line=$(grep 'straggler: rank' "$T_TMP/slow.err" | head -1)
t_diag "$line"
t_is "$(grep -c 'straggler: rank 2 on node 2 (node2) is [0-9.]*% slower than its peers' "$T_TMP/slow.err")" 1 \
    "one log line names rank 2 on node 2 (node2) as a straggler"
pct=$(printf '%s\n' "$line" | sed -n 's/.* is \([0-9.]*\)% slower.*/\1/p')
at=$(printf '%s\n' "$line" | sed -n 's/.*(up to step \([0-9]*\)).*/\1/p')
t_ok "$(awk -v p="${pct:-0}" 'BEGIN { exit !(p >= 12 && p <= 40) }'; echo $?)" \
    "... about 20 % slower (${pct:-?} %, 12-40)"
t_ok "$([ "${at:-99}" -le 20 ] && echo 0 || echo 1)" "... named by step 20 (step ${at:-?})"
t_like "$T_TMP/slow.err" "over its last [0-9]* steps" "... over how many steps"
rec=$(grep 'straggler: rank 2 on node 2 (node2) recovered' "$T_TMP/slow.err")
t_diag "$rec"
rat=$(printf '%s\n' "$rec" | sed -n 's/.*(up to step \([0-9]*\)).*/\1/p' | head -1)
t_ok "$([ "${rat:-0}" -gt 45 ] && [ "${rat:-99}" -le 75 ] && echo 0 || echo 1)" \
    "after --slow-steps 45, one more line: rank 2 recovered (step ${rat:-?}, 46-75)"
set -- $seen
t_is "${1:-} ${2:-} ${4:-}" "2 2 1" "ddl-agent status --json on the leader: straggler rank 2, node 2, 1 named"
t_like "$T_TMP/st.txt" "^  straggler: rank 2 on node 2, [0-9.]*% slower than its peers" \
    "ddl-agent status names it"
t_like "$T_TMP/st.prom" '^ddl_straggler_rank{.*} 2$' "status --prometheus: ddl_straggler_rank 2"
t_like "$T_TMP/st.prom" '^ddl_straggler_slower_ratio{.*rank="2",node_id="2"} 0\.[0-9]*$' \
    "... and ddl_straggler_slower_ratio"
t_is "$(t_checksums "$T_TMP/slow.out" | cut -d' ' -f1)" 3 "... and the 3 replicas agree"

# --- 2. a clean run of the same length ---------------------------------------
job clean
last=""
while kill -0 $JOB 2>/dev/null; do
    "$DDL_AGENT" status --json >"$T_TMP/st.json" 2>/dev/null
    s=$(straggler_of "$T_TMP/st.json")
    [ -n "$s" ] && last=$s
    sleep 0.5
done
wait $JOB
t_is $? 0 "the same run without --slow-rank exits 0"
t_is "$(grep -c 'straggler' "$T_TMP/clean.err")" 0 "... no straggler named in the log"
grep straggler "$T_TMP/clean.err" | sed 's/^/# /'
t_is "$last" "none 0" "... status --json: none, 0 named (last answer while it ran)"

# --- 3. detection off; a bad setting ------------------------------------------
DDL_STRAGGLER_PCT=0 job off --slow-rank 2 --slow-pct 20
wait $JOB
t_is $? 0 "DDL_STRAGGLER_PCT=0, rank 2 slowed: exits 0"
t_is "$(grep -c 'straggler' "$T_TMP/off.err")" 0 "... no straggler named"

DDL_STRAGGLER_PCT=fast t_run 30 "$DDLRUN" -n 1 "$FMNIST" --help
t_ok "$([ $? -ne 0 ] && echo 0 || echo 1)" "DDL_STRAGGLER_PCT=fast: the job fails"
t_like "$T_TMP/err" "DDL_STRAGGLER_PCT='fast' is not a number .0-1000." \
    "... saying which variable, its value and the range"

# what this test started: its agents' sockets are under $T_TMP, its
# workers have its DDL_RUNTIME_DIR (other tests may run fmnist-train too)
left() {
    echo $(($(pgrep -f "$T_TMP" | wc -l) +
        $(t_procs_of fmnist-train fmnist-train "DDL_RUNTIME_DIR=$DDL_RUNTIME_DIR" | wc -l)))
}
i=0
while [ "$(left)" -gt 0 ] && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
t_is "$(left)" 0 "no process left"
t_done
