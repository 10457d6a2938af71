#!/bin/sh
# t0007-nonblocking: non-blocking collectives (several in flight while the
# ranks compute, test/wait, timeouts, early free) and abort: operations
# pending on several ranks, and a blocking allreduce, all fail with
# DDL_ERR_ABORTED within 1 s of ddl_comm_abort(); an operation queued on an
# aborted communicator fails at once even behind a blocked one; a world abort
# covers every communicator; ddl_comm_free refuses a busy communicator.
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
t_run 10 "$NB_CHECK" bogus
t_is $? 2 "nb-check with an unknown mode -> usage"
t_done
