#!/bin/sh
# t0030-metrics: the agents' Prometheus metrics under ddlrun, read back
# with a real parser (Python's prometheus_client, Debian's
# python3-prometheus-client):
#
#  1. `ddl-agent status --prometheus` during a 2-rank job whose workers
#     beat steps 1, 2, 3... ten times a second (`ddl-agent heartbeat`,
#     under --hang-timeout so that their supervisors read the beats): the
#     families with HELP and TYPE, counters ending in _total, labels job,
#     step and node; 2 ranks running, their last step and a rate of steps
#     per second near the one they keep;
#  2. DDL_METRICS_DIR: the agent's file, rewritten every
#     DDL_METRICS_INTERVAL_S (1) seconds while the job runs, mode 0644, no
#     temporary file left; at the end ddl_step_active 0, both ranks exited,
#     their last steps;
#  3. a failure and a restart (--restarts 1, rank 1 exits 3 in generation
#     0): failures by kind, restarts, generation and the checkpoint
#     (DIR/latest) in the last file;
#  4. a metrics directory others may write that is not sticky: refused with
#     a message, no file; with no agent, --prometheus prints the families
#     only; --json with --prometheus is bad usage.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

t_prom_python >/dev/null ||
    t_skip_all "no python3 with prometheus_client (apt-get install python3-prometheus-client)"

# The worker: a heartbeat with the next step every 0.1 s (about 4-10 steps
# a second) until the test creates $T_TMP/stop (at most 600 steps); then it
# writes its last step to $T_TMP/last.RANK.
cat >"$T_TMP/beat.sh" <<EOF
i=1
while [ \$i -le 600 ]; do
    "$DDL_AGENT" heartbeat \$i || exit 1
    [ -e "$T_TMP/stop" ] && break
    sleep 0.1
    i=\$((i + 1))
done
echo \$i >"$T_TMP/last.\$DDL_RANK"
EOF

HOST=$(hostname)

# --- 1. status --prometheus during a job ----------------------------------
MX="$T_TMP/metrics"
mkdir -m 0755 "$MX"
DDL_METRICS_DIR="$MX" DDL_METRICS_INTERVAL_S=1 \
    timeout -k 5 60 "$DDLRUN" -n 2 --hang-timeout 30 sh "$T_TMP/beat.sh" \
    >"$T_TMP/job.out" 2>"$T_TMP/job.err" &
JOB=$! # timeout's pid; ddlrun is its child
i=0
while [ $i -lt 100 ]; do # the rate needs 2 s of beats
    "$DDL_AGENT" status --prometheus >"$T_TMP/live.prom" 2>"$T_TMP/live.err"
    t_prom_parse "$T_TMP/live.prom"
    r0=$(t_prom_value ddl_rank_iterations_per_second rank=0)
    r1=$(t_prom_value ddl_rank_iterations_per_second rank=1)
    [ -n "$r0" ] && [ -n "$r1" ] && [ "$(t_prom_value ddl_ranks state=running)" = 2.0 ] && break
    sleep 0.1
    i=$((i + 1))
done
"$DDL_AGENT" status --prometheus >"$T_TMP/live.prom" 2>"$T_TMP/live.err"
t_is $? 0 "ddl-agent status --prometheus exits 0 during the job"
t_prom_parse "$T_TMP/live.prom"
t_is $? 0 "... prometheus_client's parser reads its output"
t_is "$(grep -c '^PROBLEM' "$T_TMP/samples")" 0 \
    "... one HELP and TYPE per family, ddl_ names, counters ending in _total, labels job, step, node"
grep '^PROBLEM\|^ERROR' "$T_TMP/samples" | sed 's/^/# /'
ID=$(sed -n 's/^ddl_world_ranks{job=local-\([0-9]*\),node=\([^,]*\),step=} .*/\1 \2/p' "$T_TMP/samples")
PID=${ID%% *}
t_is "$(ps -o comm= -p "${PID:-0}" | sed 's/^lt-//') ${ID#* }" "ddlrun $HOST" \
    "... labelled job=local-PID (ddlrun's pid), step empty, node=$HOST"

t_is "$(t_prom_value ddl_world_ranks) $(t_prom_value ddl_ranks state=running) $(t_prom_value ddl_ranks state=failed)" \
    "2.0 2.0 0.0" "... a world of 2 ranks, both running, none failed"
t_is "$(t_prom_value ddl_generation) $(t_prom_value ddl_restarts_total) $(t_prom_value ddl_failures_total kind=worker-exit)" \
    "0.0 0.0 0.0" "... generation 0, no restart, no failure"
t_ok "$(awk -v a="$(t_prom_value ddl_rank_step rank=0)" -v b="$(t_prom_value ddl_rank_step rank=1)" \
    'BEGIN { exit !(a >= 1 && b >= 1) }'; echo $?)" \
    "... each rank's last step (ddl_rank_step), 1 or more"
t_ok "$(awk -v a="$r0" -v b="$r1" 'BEGIN { exit !(a >= 2 && a <= 12 && b >= 2 && b <= 12) }'; echo $?)" \
    "... each rank's ddl_rank_iterations_per_second near its pace ($r0, $r1; 2-12)"
t_like "$T_TMP/live.prom" '^# TYPE ddl_failures_total counter$' "... ddl_failures_total is a counter"
t_like "$T_TMP/live.prom" '^# TYPE ddl_ranks gauge$' "... ddl_ranks a gauge"

# --- 2. the metrics file --------------------------------------------------
F="$MX/ddl-local-$PID-$HOST.prom"
t_ok "$([ -f "$F" ]; echo $?)" "DDL_METRICS_DIR: the agent keeps ddl-local-PID-HOST.prom during the job"
t_is "$(stat -c %a "$F" 2>&1)" 644 "... mode 0644 (the collector runs as another user)"
m1=$(stat -c %Y.%i "$F" 2>/dev/null)
sleep 2.2
m2=$(stat -c %Y.%i "$F" 2>/dev/null)
t_ok "$([ -n "$m1" ] && [ "$m1" != "$m2" ]; echo $?)" "... replaced (a new file renamed over it) within 2 s"
cp "$F" "$T_TMP/mid.prom"
t_prom_parse "$T_TMP/mid.prom"
t_is "$?:$(t_prom_value ddl_step_active):$(t_prom_value ddl_ranks state=running)" "0:1.0:2.0" \
    "... which parses, step active, 2 ranks running"
touch "$T_TMP/stop"
wait $JOB
t_is $? 0 "the job exits 0"
t_prom_parse "$F"
t_is "$?:$(t_prom_value ddl_step_active):$(t_prom_value ddl_ranks state=exited)" "0:0.0:2.0" \
    "the last file: step no longer active, both ranks exited"
t_is "$(t_prom_value ddl_rank_step rank=0) $(t_prom_value ddl_rank_step rank=1)" \
    "$(cat "$T_TMP/last.0").0 $(cat "$T_TMP/last.1").0" "... with each rank's last step"
t_is "$(ls -A "$MX" | tr '\n' ' ')" "ddl-local-$PID-$HOST.prom " "... and no temporary file is left"

# --- 3. a failure, a restart, a checkpoint ---------------------------------
CK="$T_TMP/ckpt"
mkdir -m 0700 "$CK"
echo 7 >"$CK/latest"
cat >"$T_TMP/fail.sh" <<'EOF'
[ "$DDL_GENERATION" = 0 ] && [ "$DDL_RANK" = 1 ] && exit 3
exit 0
EOF
DDL_METRICS_DIR="$MX" t_run 60 "$DDLRUN" -n 2 --restarts 1 --checkpoint-dir "$CK" sh "$T_TMP/fail.sh"
t_status $? 0 "a job whose rank 1 exits 3 once, with --restarts 1, exits 0" "$T_TMP/err"
F=$(ls "$MX"/ddl-local-*.prom | grep -v "local-$PID-")
t_prom_parse "$F"
t_is "$(t_prom_value ddl_failures_total kind=worker-exit) $(t_prom_value ddl_failures_total kind=worker-signal)" \
    "1.0 0.0" "its last file: one worker-exit failure, no other"
t_is "$(t_prom_value ddl_restarts_total) $(t_prom_value ddl_generation)" "1.0 1.0" "... one restart, generation 1"
t_is "$(t_prom_value ddl_checkpoint_step)" "7.0" "... the checkpoint step of $CK/latest"
t_ok "$(awk -v a="$(t_prom_value ddl_checkpoint_age_seconds)" 'BEGIN { exit !(a >= 0 && a < 60) }'; echo $?)" \
    "... and its age in seconds"

# --- 4. refusals -------------------------------------------------------------
OPEN="$T_TMP/open"
mkdir -m 0777 "$OPEN"
chmod 0777 "$OPEN"
DDL_METRICS_DIR="$OPEN" t_run 30 "$DDLRUN" -n 1 true
t_is $? 0 "a metrics directory others may write without the sticky bit: the job still runs"
t_like "$T_TMP/err" "no metrics in $OPEN: metrics directory $OPEN has mode 0777: others may write it but it is not sticky" \
    "... and the agent says why it writes no metrics"
t_is "$(ls -A "$OPEN" | wc -l)" 0 "... and writes nothing there"

t_run 10 "$DDL_AGENT" status --prometheus
t_is $? 0 "status --prometheus with no agent exits 0"
cp "$T_TMP/out" "$T_TMP/none.prom"
t_prom_parse "$T_TMP/none.prom"
t_is "$?:$(grep -vc '^PROBLEM' "$T_TMP/samples")" "0:0" "... and prints families without samples"
t_run 10 "$DDL_AGENT" status --json --prometheus
t_is $? 2 "status --json --prometheus is bad usage (2)"
t_done
