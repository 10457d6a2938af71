#!/bin/sh
# t0004-agent: ddl-agent: `status` (table and JSON) during a run, socket and
# directory permissions, the SO_PEERCRED owner check (as root: another uid
# is refused even when file permissions would let it in), and bad usage.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

# The step's checkpoint directory (srun --ddl-checkpoint-dir sets it under
# Slurm): libddl's commit leaves the latest step number in DIR/latest.
mkdir -p "$T_TMP/ckpt" && echo 1200 >"$T_TMP/ckpt/latest"
DDL_CHECKPOINT_DIR="$T_TMP/ckpt" "$DDLRUN" -n 3 sh -c "sleep 1000 # $T_TOKEN" >/dev/null 2>"$T_TMP/run.err" &
pid=$!
sock=""
for _ in $(seq 50); do
    sock=$(find "$DDL_RUNTIME_DIR" -name '*.sock' 2>/dev/null | head -1)
    [ -n "$sock" ] && "$DDL_AGENT" status --socket "$sock" 2>/dev/null | grep -c running | grep -q 3 && break
    sleep 0.1
done
t_ok $([ -n "$sock" ]; echo $?) "the agent's socket exists while the job runs"
t_is "$(stat -c %a "$sock")" 600 "the socket has mode 0600"
t_is "$(stat -c %a "$(dirname "$sock")")" 700 "its directory has mode 0700"

t_run 10 "$DDL_AGENT" status
t_is $? 0 "ddl-agent status exits 0"
t_like "$T_TMP/out" "^step local-$pid: 3 ranks on 1 node, generation 0" \
    "status names the step, its size and node count"
t_like "$T_TMP/out" "^  this node: $(hostname) \(node 0\), agent pid [0-9]+, $sock\$" \
    "... this node, the agent's pid and socket"
t_like "$T_TMP/out" "^  checkpoint: step 1200, committed [0-9.]+s ago, in $T_TMP/ckpt\$" \
    "... the latest committed checkpoint"
# RANK STATE PID WORKER CPUS GPU NIC RST HEARD EXIT; ddlrun binds each rank
# to cores (--bind auto), so CPUS is a list; heard within the last 60 s.
t_is "$(grep -cE '^  [0-2] +running +[0-9]+ +[0-9]+ +[0-9][-0-9,]* +[^ ]+ +[^ ]+ +0 +[0-9.]+s +-$' "$T_TMP/out")" 3 \
    "status lists 3 running ranks with pids, cores, GPU, NIC, 0 restarts and last contact"
for w in $(awk '$2 == "running" {print $4}' "$T_TMP/out"); do
    grep -q "$T_TOKEN" "/proc/$w/cmdline" 2>/dev/null || t_diag "worker pid $w is not the job's"
done

t_run 10 "$DDL_AGENT" status --json
t_is $? 0 "status --json exits 0"
t_like "$T_TMP/out" "^\[\{\"step\": \"local-$pid\"" "JSON names the step"
t_is "$(grep -o '"state": "running"' "$T_TMP/out" | wc -l)" 3 "JSON has 3 running ranks"
t_is "$(grep -oE '"cpus": "[0-9][-0-9,]*", "gpu": [^,]+, "nic": [^,]+, "restarts": 0, "heard_ms": [0-9]+' \
        "$T_TMP/out" | wc -l)" 3 "... each with its cores, GPU, NIC, restarts and last contact"
t_like "$T_TMP/out" '"nnodes": 1, "leader": true, .*"peers": \[\]\}\]$' \
    "... one node, which leads, and no peers"
t_like "$T_TMP/out" "\"checkpoint\": \\{\"dir\": \"$T_TMP/ckpt\", \"step\": 1200, \"age_ms\": [0-9]+\\}" \
    "... and the latest checkpoint"

kill -TERM $pid
wait $pid
t_run 10 "$DDL_AGENT" status
t_like "$T_TMP/out" "no ddl steps are running" "after the job: no steps"

t_run 10 "$DDL_AGENT" status --socket "$T_TMP/none.sock"
t_is $? 1 "status of a socket that does not exist -> exit 1"
t_like "$T_TMP/err" "cannot connect to agent socket $T_TMP/none.sock" "... naming the socket"

t_run 10 "$DDL_AGENT" frobnicate
t_is $? 2 "unknown subcommand -> exit 2"
t_run 10 "$DDL_AGENT" serve --size x --socket "$T_TMP/a.sock" --step s
t_is $? 2 "serve --size x -> exit 2"
t_like "$T_TMP/err" "--size: 'x' is not a number of ranks" "... naming the option and value"

# SO_PEERCRED: open the file permissions on purpose; the agent must still refuse.
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
    t_skip "peer credential check needs root and setpriv (util-linux)"
    t_skip "peer credential check needs root and setpriv (util-linux)"
    t_skip "peer credential check needs root and setpriv (util-linux)"
else
    open="$T_TMP/open"
    mkdir -p "$open" && chmod 755 "$T_TMP" "$open"
    "$DDL_AGENT" serve --socket "$open/agent.sock" --step peer-$T_TOKEN --size 1 2>"$T_TMP/agent.err" &
    apid=$!
    t_wait_file "$open/agent.sock" 5
    chmod 666 "$open/agent.sock"
    setpriv --reuid=65534 --regid=65534 --clear-groups "$DDL_AGENT" status --socket "$open/agent.sock" \
        >"$T_TMP/out" 2>"$T_TMP/err"
    t_is $? 1 "uid 65534 is refused by root's agent"
    t_like "$T_TMP/err" "permission denied: uid 65534 may not use the agent of uid 0" \
        "... with a message naming both uids"
    t_run 10 "$DDL_AGENT" status --socket "$open/agent.sock"
    t_like "$T_TMP/out" "^step peer-$T_TOKEN: 1 rank on 1 node" "the owner (root) is still served"
    kill $apid
    wait $apid
fi
t_done
