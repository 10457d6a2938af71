#!/bin/sh
# t0008-checkpoint: the checkpoint API under ddlrun on 1-4 ranks: commits
# read back on every rank, a write failure on one rank fails the commit on
# all of them and leaves the previous checkpoint latest; a rank killed with
# SIGKILL after writing its shard, before the commit, leaves latest on the
# previous complete checkpoint, which reads back, and the next run commits
# over the leftovers; async mode commits at the next begin, ddl_ckpt_wait()
# and ddl_finalize(), and the time the caller blocks in sync and async mode
# is printed (64 MiB per rank; measured, not checked); with the async
# node-local level (2 nodes) a commit returns before its partner's, the
# copies arrive in each other node's directory, and an abort during the
# transfer fails that checkpoint's ddl_ckpt_wait() instead of hanging; a
# rank that exits while it stores a restored partner copy
# (DDL_CKPT_FAULT=store) leaves no partial shard under its name, and the
# next restore takes the partner copy again.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
CKPT_CHECK="$top_builddir/tests/helpers/ckpt-check"

show_failure() {
    grep -E 'FAIL' "$T_TMP/out" | sed 's/^/# /'
    sed 's/^/# /' "$T_TMP/err" | head -20
}

for n in 1 2 3 4; do
    dir="$T_TMP/ckpt-commit-$n"
    t_run 120 "$DDLRUN" -n "$n" "$CKPT_CHECK" commit "$dir"
    rc=$?
    t_ok $rc "ckpt-check commit on $n ranks"
    [ $rc -eq 0 ] || show_failure
    t_is "$(cat "$dir/latest" 2>/dev/null)" 6 "latest file names step 6 on $n ranks"
    t_is "$(ls "$dir" | grep -c '^step-')" 3 "three checkpoints kept (keep 3) on $n ranks"

    dir="$T_TMP/ckpt-kill-$n"
    t_run 120 "$DDLRUN" -n "$n" "$CKPT_CHECK" kill "$dir" 4
    rc=$?
    t_ok $([ $rc -ne 0 ] && [ $rc -ne 124 ]; echo $?) \
        "the job fails when a rank is killed during a commit on $n ranks (exit $rc)"
    t_like "$T_TMP/out" 'killing myself' "the last rank killed itself after its shard on $n ranks"
    t_is "$(cat "$dir/latest" 2>/dev/null)" 3 "latest still names step 3 on $n ranks"
    t_ok $([ -e "$dir/step-00000004/rank-$((n - 1)).shard" ] &&
           [ ! -e "$dir/step-00000004/MANIFEST" ]; echo $?) \
        "step 4 is partial: a shard but no MANIFEST on $n ranks"
    t_run 120 "$DDLRUN" -n "$n" "$CKPT_CHECK" verify "$dir" 3
    rc=$?
    t_ok $rc "step 3 reads back on every rank and step 4 commits afterwards on $n ranks"
    [ $rc -eq 0 ] || show_failure
done

for n in 1 2 4; do
    dir="$T_TMP/ckpt-async-$n"
    t_run 300 "$DDLRUN" -n "$n" "$CKPT_CHECK" async "$dir" 64
    rc=$?
    t_ok $rc "ckpt-check async 64 MiB per rank on $n ranks"
    [ $rc -eq 0 ] || show_failure
    grep 'caller blocked' "$T_TMP/out" | sed 's/^/# /'
done

# the async node-local level: the partner copies travel from the background
# thread, so a commit returns before the partner's; an abort stops them
dir="$T_TMP/ckpt-partner"
mkdir -p "$dir"
t_run 120 "$DDLRUN" -n 4 --nodes 2 "$CKPT_CHECK" partner "$dir"
rc=$?
t_ok $rc "ckpt-check partner on 4 ranks, 2 nodes: async partner copies in the background"
[ $rc -eq 0 ] || show_failure
grep 'step 2: ' "$T_TMP/out" | sed 's/^/# /'

# a process that ends while it stores a restored partner copy leaves no
# partial shard under its name: the next restore takes the partner's again
dir="$T_TMP/ckpt-storecrash"
mkdir -p "$dir"
t_run 120 "$DDLRUN" -n 4 --nodes 2 "$CKPT_CHECK" storecrash "$dir" 1
rc=$?
t_ok $([ $rc -ne 0 ] && [ $rc -ne 124 ]; echo $?) \
    "storecrash: rank 2 exits halfway through storing its restored partner copy (exit $rc)"
t_like "$T_TMP/err" "DDL_CKPT_FAULT=store: the process exits halfway through writing rank-2\.shard\.tmp\." \
    "... while writing its temporary file"
t_run 120 "$DDLRUN" -n 4 --nodes 2 "$CKPT_CHECK" storecrash "$dir" 2
rc=$?
t_ok $rc "storecrash: no partial shard under its name; the next restore takes the partner copy again"
[ $rc -eq 0 ] || show_failure
t_ok $(! grep -q "not used" "$T_TMP/err"; echo $?) "... without finding a damaged copy"
t_like "$T_TMP/err" "DDL_CKPT_FAULT=slowstore: rank-2\.shard stored after the program had read every buffer of it" \
    "... stored after the program read it: the store freed the restore's image"

t_run 10 "$CKPT_CHECK" bogus "$T_TMP/x"
t_is $? 2 "ckpt-check with an unknown mode -> usage"
t_done
