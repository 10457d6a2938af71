#!/bin/sh
# t0026-ddlrun-abort: plain `ddlrun --restarts` (no --emulate) supervises
# through its agent, like the agents of `ddlrun --emulate` and `srun --ddl`:
# when a worker is killed while the others wait in allreduces and ignore
# SIGTERM, the agent's notice aborts the collectives in flight (the
# waiting ranks' allreduce returns DDL_ERR_ABORTED with the agent's
# reason), so the restart does not wait for the SIGKILL at the end of the
# 30 s grace period; generation 1 runs, the step exits 0 and nothing of it
# is left running.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
PROBE="$top_builddir/bench/ft-probe"
[ -x "$PROBE" ] || t_skip_all "bench/ft-probe not built"
export UCX_TLS=tcp,self
unset MASTER_ADDR MASTER_PORT

# ft-probe: 8-byte allreduces every 10 ms; with FT_PROBE_IGNORE_TERM=1 it
# ignores SIGTERM, like a program that saves its state on SIGTERM, so only
# an aborted collective ends it before its supervisor's SIGKILL
FT_PROBE_IGNORE_TERM=1 timeout -k 5 90 "$DDLRUN" -n 4 --restarts 1 --grace 30 \
    "$PROBE" 20 "$T_TMP" >"$T_TMP/abort.out" 2>"$T_TMP/abort.err" &
run=$!
t0=$(date +%s)
i=0
while [ $((i += 1)) -lt 300 ] && ! grep -q "first-step gen 0" "$T_TMP/abort.out"; do sleep 0.1; done
p=$(t_procs_of ft-probe "ft-probe 20 $T_TMP" DDL_RANK=1 | head -1)
t_ok $([ -n "$p" ]; echo $?) "rank 1's worker (pid ${p:-?}) killed while the others run allreduces"
t1=$(date +%s)
[ -n "$p" ] && kill -KILL "$p"
wait $run
rc=$?
t2=$(date +%s)
t_status $rc 0 "... the step restarts and finishes (exit 0)" "$T_TMP/abort.err"
t_ok $([ $((t2 - t1)) -lt 15 ]; echo $?) \
    "... $((t2 - t1)) s after the kill, well within the 30 s grace period (it took $((t2 - t0)) s in all)"
# the agent's notice, or the transport itself (it can see the killed peer
# first on a loaded machine): either way the waiting ranks leave at once
t_like "$T_TMP/abort.err" "ft-probe: rank [0-3]: ddl_allreduce at [0-9]+: (DDL_ERR_ABORTED.*: communicator aborted: the agents ended generation 0: generation 0: rank 1 on node 0 \([^)]*\): worker $p was killed by signal 9|DDL_ERR_PEER: a peer rank failed: .* rank 1 failed)" \
    "... a waiting rank's allreduce returned DDL_ERR_ABORTED with the agent's reason (or DDL_ERR_PEER, its transport first)"
t_like "$T_TMP/abort.err" "generation 0: rank 1 on node 0 \([^)]*\): worker $p was killed by signal 9 \(SIGKILL\) \[worker-signal\]; restart 1 of 1: generation 1 starts over" \
    "... the failure and the restart in one line"
t_like "$T_TMP/abort.out" "first-step gen 1" "... and generation 1 ran"
i=0
while [ $((i += 1)) -lt 50 ] && pgrep -f "$T_TMP" >/dev/null; do sleep 0.1; done
t_is "$(pgrep -f "$T_TMP" | wc -l)" 0 "no agent, ddl-launch or worker left"
t_done
