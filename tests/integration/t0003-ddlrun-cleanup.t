#!/bin/sh
# t0003-ddlrun-cleanup: no process outlives ddlrun: not after a rank is
# killed with SIGKILL, not after SIGINT or SIGTERM to ddlrun, not when ranks
# ignore SIGTERM, not when ddlrun itself is killed with SIGKILL, and not a
# rank's background child.  Checked in the process table.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

sock_count() { find "$DDL_RUNTIME_DIR" -name '*.sock' 2>/dev/null | wc -l; }
# The workers below are `sh -c "sleep 1000 # TOKEN"`: the shell's child
# `sleep 1000` does not carry the token.  job_groups: the process groups of
# the job's token-carrying processes (one per rank); in_groups: how many
# processes are still in those groups, orphans included.
job_groups() { pgrep -f "^sh -c sleep 1000 # $T_TOKEN" | xargs -r ps -o pgid= -p | sort -u | tr -d ' ' | paste -sd, -; }
in_groups() { [ -n "$1" ] && pgrep -g "$1" | wc -l || echo 0; }

# A rank killed with SIGKILL while the others sleep.
"$DDLRUN" -n 4 --grace 2 sh -c "sleep 1000 # $T_TOKEN" >/dev/null 2>"$T_TMP/err" &
pid=$!
t_wait_procs 7 10 # settle
sleep 1
# the worker shell of one rank (not ddlrun or ddl-launch, whose command
# lines hold the same words)
victim=$(pgrep -f "^sh -c sleep 1000 # $T_TOKEN" | head -1)
t_ok $([ -n "$victim" ]; echo $?) "4 ranks are running (a worker pid: $victim)"
groups=$(job_groups)
kill -KILL "$victim"
wait $pid
t_is $? 137 "ddlrun exits 137 after a worker is SIGKILLed"
t_is "$(t_procs)" 0 "no process of the job is left"
t_is "$(in_groups "$groups")" 0 "... not even the shells' sleep children"
t_is "$(pgrep -f "ddl-agent serve.*$DDL_RUNTIME_DIR" | wc -l)" 0 "the agent is gone"
t_is "$(sock_count)" 0 "the agent socket is removed"

# SIGINT and SIGTERM to ddlrun.  SIGINT interrupts: 128 + 2.  SIGTERM asks
# the job to stop at a step boundary (t0029): every process of the job gets
# it, and workers it kills count as stopped: exit 94.
for sig in INT:130 TERM:94; do
    want=${sig#*:}
    sig=${sig%:*}
    "$DDLRUN" -n 3 sh -c "sleep 1000 # $T_TOKEN" >/dev/null 2>"$T_TMP/err" &
    pid=$!
    sleep 1
    kill -$sig $pid
    wait $pid
    rc=$?
    t_is $rc $want "SIG$sig to ddlrun -> exit $want"
    t_is "$(t_procs)" 0 "SIG$sig: no process of the job is left"
    t_is "$(sock_count)" 0 "SIG$sig: the agent socket is removed"
done

# Ranks that ignore SIGTERM are killed after the grace period.
start=$(date +%s)
"$DDLRUN" -n 2 --grace 1 sh -c "trap '' TERM INT; [ \$RANK = 1 ] && exit 9; while :; do sleep 1; done # $T_TOKEN" >/dev/null 2>"$T_TMP/err" &
pid=$!
wait $pid
t_is $? 9 "a rank exiting 9 while another ignores SIGTERM -> exit 9"
t_ok $([ $(($(date +%s) - start)) -lt 20 ]; echo $?) "... within the grace period plus slack"
t_is "$(t_procs)" 0 "the rank that ignored SIGTERM was killed"

# ddlrun itself killed with SIGKILL: its children die with it (PR_SET_PDEATHSIG).
"$DDLRUN" -n 3 --grace 1 sh -c "sleep 1000 # $T_TOKEN" >/dev/null 2>&1 &
pid=$!
sleep 1
t_ok $([ "$(t_procs)" -ge 3 ]; echo $?) "ranks running before ddlrun is killed"
groups=$(job_groups)
kill -KILL $pid
wait $pid 2>/dev/null
t_wait_procs 0 15
t_is "$(t_procs)" 0 "after SIGKILL of ddlrun, no process of the job is left"
i=0
while [ "$(in_groups "$groups")" -gt 0 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
t_is "$(in_groups "$groups")" 0 "... not even the shells' sleep children (ddl-launch adopts and kills them)"
t_wait_procs 0 5
t_is "$(pgrep -f "ddl-agent serve.*$DDL_RUNTIME_DIR" | wc -l)" 0 "... and the agent is gone"

# A forwarded signal reaches each worker exactly once.
"$DDLRUN" -n 2 sh -c "trap 'echo \$RANK >> $T_TMP/got; exit 0' TERM; while :; do sleep 0.1; done # $T_TOKEN" \
    >/dev/null 2>&1 &
pid=$!
sleep 1
kill -TERM $pid
wait $pid
t_is "$(sort "$T_TMP/got" 2>/dev/null | tr '\n' ' ')" "0 1 " "SIGTERM to ddlrun reaches each worker once"
t_is "$(t_procs)" 0 "... and the job is gone"

# A process that left its rank's process group (setsid) does not survive either.
t_run 30 "$DDLRUN" -n 1 sh -c "setsid -f sleep 1000 # $T_TOKEN"
t_is $? 0 "a rank that starts a setsid'd child exits 0"
t_wait_procs 0 5
t_is "$(t_procs)" 0 "the setsid'd child was killed when the job ended"

# A rank's background child does not outlive the job.
t_run 30 "$DDLRUN" -n 2 sh -c "sleep 1000 & echo started # $T_TOKEN"
t_is $? 0 "ranks that leave a background child exit 0"
t_wait_procs 0 5
t_is "$(t_procs)" 0 "their background children are gone too"
t_done
