#!/bin/sh
# t0027-python: the ddl Python package (python/) under ddlrun, by
# tests/helpers/py-check.py, one scenario a run: every collective on every
# dtype (numpy, torch CPU tensors with bfloat16, bytearray, memoryview),
# blocking and non-blocking (wait, test, torch futures), in place, against
# references, on 1-4 ranks; bad input (before init, read-only,
# non-contiguous, unsupported dtypes, sizes, a CUDA buffer without a GPU,
# ranks disagreeing with ddl.set_checks) gives a clear exception and the
# ranks go on; a wait that times out; abort while requests wait (ddl.Aborted
# within 1 s); mapped memory; checkpoints restored bit for bit.  Skips when
# the package is not built (configure --without-python, no python3-dev) or
# no python3 imports it with numpy.  Without torch the torch parts are left
# out (each run prints SKIP).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
CHECK="$top_srcdir/tests/helpers/py-check.py"

t_find_python numpy torch || t_find_python numpy ||
    t_skip_all "no ddl Python package in $top_builddir/python or no python3 with numpy (configure with python3-dev installed)"
t_diag "$PY, PYTHONPATH=$PYTHONPATH"
"$PY" -c 'import torch' 2>/dev/null || t_diag "$PY has no torch: torch tensors and futures are not tested"

# run_check N MODE [ARGS]: py-check.py MODE on N ranks; one TAP line, with
# the failing checks as diagnostics.
run_check() {
    local n=$1 mode=$2
    shift 2
    # $T_TOKEN in each Python command line lets lib.sh kill what is left
    t_run 300 "$DDLRUN" -n "$n" "$PY" -X "$T_TOKEN" "$CHECK" "$mode" "$@"
    local rc=$? pass
    pass=$(grep -c '^PASS' "$T_TMP/out")
    t_is "$rc:$(grep -c '^FAIL' "$T_TMP/out")" "0:0" "py-check $mode on $n ranks ($pass checks passed)"
    if [ $rc -ne 0 ] || grep -q '^FAIL' "$T_TMP/out"; then
        grep '^FAIL' "$T_TMP/out" | head -20 | sed 's/^/# /'
        tail -n 20 "$T_TMP/err" | sed 's/^/# stderr: /'
    fi
    RUN_PASS=$pass
}

for n in 1 2 3 4; do
    run_check "$n" colls
    t_ok "$([ "$RUN_PASS" -gt $((n * 1000)) ]; echo $?)" "... more than $((n * 1000)) checks ran"
done
for n in 1 2 3; do
    run_check "$n" errors
    t_ok "$([ "$RUN_PASS" -ge $((n * 25)) ]; echo $?)" "... every rank checked its errors"
done
for n in 2 3; do
    run_check "$n" abort
    worst=$(sed -n 's/.*abort latency \([0-9.-]*\) ms/\1/p' "$T_TMP/out" | sort -n | tail -1)
    t_ok "$(awk -v w="${worst:-9999}" 'BEGIN { exit !(w < 1000) }'; echo $?)" \
        "abort on $n ranks: slowest pending request failed after ${worst:-?} ms (< 1000)"
done
run_check 2 mem
mkdir -p "$T_TMP/ck"
run_check 3 ckpt "$T_TMP/ck"
t_ok "$([ -f "$T_TMP/ck/step-00000020/MANIFEST" ]; echo $?)" "... the checkpoint directory holds the committed step 20"

t_run 30 "$PY" -X "$T_TOKEN" "$CHECK" bogus
t_is $? 2 "py-check.py with an unknown mode -> usage"
t_ok "$(t_wait_procs 0 10; echo $?)" "no Python process left"
t_done
