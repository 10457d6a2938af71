#!/bin/sh
# t0001-allreduce: libddl's allreduce (f32/f64 sum and avg, and more), bcast
# and barrier under `ddlrun -n N` for N = 1..6, against locally computed
# references, at sizes 0, 1, 7, 1000, 1 Mi and 1 Mi + 3 elements.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

"$COLL_CHECK" >"$T_TMP/out" 2>"$T_TMP/err" --sizes 0,1,7,1000
t_ok $? "coll-check as a single process, without ddlrun or an agent"

for n in 1 2 3 4 5 6; do
    t_run 240 "$DDLRUN" -n "$n" "$COLL_CHECK"
    rc=$?
    t_ok $rc "ddlrun -n $n coll-check: every case passes on every rank"
    if [ $rc -ne 0 ]; then
        t_diag "exit status $rc"
        grep -v '^pass' "$T_TMP/out" | sed 's/^/# /'
        sed 's/^/# /' "$T_TMP/err" | head -30
    fi
    cases=$(grep -c '^pass' "$T_TMP/out")
    t_ok $([ "$cases" -ge 90 ]; echo $?) "ddlrun -n $n: $cases cases were checked"
done
t_done
