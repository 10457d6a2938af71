#!/bin/sh
# t0007-nonblocking: non-blocking collectives (several in flight while the
# ranks compute, test/wait, timeouts, early free) and abort: operations
# pending on several ranks, and a blocking allreduce, all fail with
# DDL_ERR_ABORTED within 1 s of ddl_comm_abort(); an operation queued on an
# aborted communicator fails at once even behind a blocked one; a world abort
# covers every communicator; ddl_comm_free refuses a busy communicator.
# Warm restart's early path (nb-check warm-due, ddlrun --restarts 1): a rank
# that sees a failure before the agents decided anything gets DDL_RESTART
# and ddl_restart_pending() at once; with no decision coming, its
# ddl_rejoin() gives up after DDL_BOOTSTRAP_TIMEOUT and it is restarted
# cold, while the others rejoin warm.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
NB_CHECK="$top_builddir/tests/helpers/nb-check"

for mode in overlap abort-pending abort-blocking abort-queued; do
    for n in 1 2 3 4; do
        t_run 120 "$DDLRUN" -n "$n" "$NB_CHECK" "$mode"
        rc=$?
        t_ok $rc "nb-check $mode on $n ranks"
        if [ $rc -ne 0 ]; then
            grep -E 'FAIL' "$T_TMP/out" | sed 's/^/# /'
            sed 's/^/# /' "$T_TMP/err" | head -20
        fi
        case $mode in abort-*)
            if [ "$n" -gt 1 ]; then
                worst=$(sed -n 's/.*abort latency \([0-9.-]*\) ms/\1/p' "$T_TMP/out" | sort -n | tail -1)
                t_ok $(awk -v w="${worst:-9999}" 'BEGIN { exit !(w < 1000) }'; echo $?) \
                    "nb-check $mode on $n ranks: slowest abort took ${worst:-?} ms (< 1000)"
            fi ;;
        esac
    done
done
for n in 2 3; do
    DDL_BOOTSTRAP_TIMEOUT=2 t_run 90 "$DDLRUN" -n "$n" --restarts 1 "$NB_CHECK" warm-due
    rc=$?
    t_status $rc 0 "nb-check warm-due on $n ranks" "$T_TMP/err"
    [ $rc -eq 0 ] || grep -E 'FAIL' "$T_TMP/out" | sed 's/^/# /'
    t_is "$(grep -c "PASS .*DDL_RESTART\|PASS .*says 1\|PASS .*gives up with DDL_ERR_TIMEOUT\|PASS .*after DDL_BOOTSTRAP_TIMEOUT" "$T_TMP/out")" \
        $((4 + 2 * (n - 1))) "... the early failure: DDL_RESTART, restart pending, ddl_rejoin gives up after 2 s"
    t_like "$T_TMP/err" "rank $((n - 1)): worker [0-9]+ withdrew from warm restarts" \
        "... rank $((n - 1)) withdrew and was restarted cold"
    t_is "$(grep -c "^rank [0-9]*: generation 1 (warm), done" "$T_TMP/out")" $((n - 1)) \
        "... the $((n - 1)) other rank(s) went on warm in generation 1"
done
t_run 10 "$NB_CHECK" bogus
t_is $? 2 "nb-check with an unknown mode -> usage"
t_done
