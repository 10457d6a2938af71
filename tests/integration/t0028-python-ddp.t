#!/bin/sh
# t0028-python-ddp: ddl.torch's communication hooks in PyTorch's
# DistributedDataParallel under ddlrun (tests/helpers/py-ddp-check.py).
# On 2 and 3 ranks: with allreduce_hook, fp16_compress_hook and
# bf16_compress_hook every rank ends with the same weights, close to those
# of DDP's own gloo allreduce, the loss goes down, several buckets a step
# are posted and some while backward is still running (overlap).  Under
# `ddlrun --restarts 1`, a worker SIGKILLed in the middle of training: the
# other ranks (ignoring SIGTERM) get an exception from loss.backward()
# carrying the agents' reason, well before the 30 s grace period, and
# generation 1 completes.  Warm: the same kill, the others rejoin in place
# (ddl.torch.rejoin) and their ddl.Memory of generation 0 is refused.  A DDP module whose forward raised is let go
# inside the except clause by ddl.torch._release_frames() (ddl.torch.rejoin()
# calls it: the old process group must go before the new one is set up).
# Skips without the ddl package or torch.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
CHECK="$top_srcdir/tests/helpers/py-ddp-check.py"

t_find_python numpy torch ||
    t_skip_all "no ddl Python package in $top_builddir/python or no python3 with numpy and torch (apt-get install python3-torch python3-numpy)"
t_diag "$PY: torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
unset MASTER_ADDR MASTER_PORT

for n in 2 3; do
    t_run 300 "$DDLRUN" -n "$n" "$PY" -X "$T_TOKEN" "$CHECK" hooks
    rc=$?
    t_is "$rc:$(grep -c '^FAIL' "$T_TMP/out")" "0:0" \
        "DDP with the ddl hooks on $n ranks ($(grep -c '^PASS' "$T_TMP/out") checks passed)"
    if [ $rc -ne 0 ] || grep -q '^FAIL' "$T_TMP/out"; then
        grep '^FAIL' "$T_TMP/out" | head -20 | sed 's/^/# /'
        tail -n 20 "$T_TMP/err" | sed 's/^/# stderr: /'
    fi
    t_is "$(grep -c 'overlap)$' "$T_TMP/out")" "$((3 * n))" "... each hook overlapped with backward on every rank"
done

# TCP between the ranks: over UCX 1.13's shared memory a kept rank whose
# single-copy (CMA) transfer meets the killed one is aborted by UCX (t0029)
t_run 300 env UCX_TLS=tcp,self "$DDLRUN" -n 3 --restarts 1 "$PY" -X "$T_TOKEN" "$CHECK" warm
t_status $? 0 "warm restart: the last rank killed, the others rejoin in place" "$T_TMP/err"
grep -E '^(FAIL|rank)' "$T_TMP/out" | sed 's/^/# /'
t_is "$(grep -c '^PASS rank [01]: the Memory of generation 0 is refused after the rejoin' "$T_TMP/out")" 2 \
    "... the kept ranks' ddl.Memory of generation 0 is refused (BufferError)"
t_is "$(grep -c '^PASS rank [01]: ddl.torch.rejoin(): rank \([01]\) of 3 again' "$T_TMP/out")" 2 \
    "... they rejoined with their rank"
t_is "$(grep -c '^PASS rank [0-2]: generation 1: every rank holds the same weights' "$T_TMP/out")" 3 \
    "... and the 3 ranks of generation 1 agree"
t_is "$(grep -c '^FAIL' "$T_TMP/out")" 0 "... no check failed"

t_run 120 "$DDLRUN" -n 1 "$PY" -X "$T_TOKEN" "$CHECK" frames
t_status $? 0 "a DDP module whose forward raised: inside the except clause" "$T_TMP/err"
t_is "$(grep -c '^PASS rank 0: inside the except clause' "$T_TMP/out")" 2 \
    "... its traceback keeps it alive, and ddl.torch._release_frames() (which rejoin() calls) lets it go"
grep '^FAIL' "$T_TMP/out" | sed 's/^/# /'

t0=$(date +%s)
t_run 300 "$DDLRUN" -n 3 --restarts 1 --grace 30 "$PY" -X "$T_TOKEN" "$CHECK" abort
rc=$?
t1=$(date +%s)
t_status $rc 0 "ddlrun --restarts 1: a worker killed, the job restarted and completed" "$T_TMP/err"
sed 's/^/# /' "$T_TMP/out" | grep -v '^# PASS'
t_is "$(grep -c '^rank [01]: generation 0: training raised .*DDL_ERR_ABORTED.*the agents ended generation 0' "$T_TMP/out")" 2 \
    "the 2 surviving ranks got an exception in their training loop, with the agents' reason"
t_is "$(grep -c '^rank [0-9]: generation 1 completed$' "$T_TMP/out")" 3 "generation 1 completed on the 3 ranks"
slow=$(sed -n 's/.*training raised .* after \([0-9.]*\) s:.*/\1/p' "$T_TMP/out" | sort -n | tail -1)
t_ok "$(awk -v s="${slow:-99}" 'BEGIN { exit !(s < 20) }'; echo $?)" \
    "... the exception came ${slow:-?} s into the training (no wait for the 30 s grace period)"
t_diag "the run took $((t1 - t0)) s"
t_ok "$(t_wait_procs 0 10; echo $?)" "no Python process left"
t_done
