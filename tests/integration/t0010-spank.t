#!/bin/sh
# t0010-spank: the Slurm plugin spank_ddl.so on the
# 2-node namespace cluster (tests/slurm/cluster.sh): its --ddl* options in
# `srun --help`, a bad option value refused by srun before the step starts,
# the DDL_* variables in the tasks of a --ddl step on both nodes, nothing
# without --ddl, and an invalid ddl.conf refusing --ddl steps only.
# Skips when spank_ddl.so is not built (no libslurm-dev), when not root or
# when Slurm/munge are not installed.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
CLUSTER="$top_srcdir/tests/slurm/cluster.sh"
DIR="/var/tmp/ddl-cluster.$$"
PLUGIN="$top_builddir/plugins/.libs/spank_ddl.so"
CONF="$T_TMP/ddl.conf"

[ -f "$PLUGIN" ] || t_skip_all "spank_ddl.so not built (configure found no slurm/spank.h)"

# One namespace cluster at a time on a host (one bridge, ddlbr0).
. "$top_srcdir/tests/slurm/lib-cluster.sh"
cl_prepare

# The cluster reads plugstack.conf when it starts steps, srun at each
# invocation: both exist before the cluster starts.
printf 'max_restarts = 5\ncheckpoint_roots = {"/var/tmp"}\n' >"$CONF"
mkdir -p "$DIR"
echo "required $PLUGIN config=$CONF launch=$DDL_LAUNCH" >"$DIR/plugstack.conf"

export DDL_CLUSTER_SHARE="$top_builddir $top_srcdir $T_TMP"
sh "$CLUSTER" start "$DIR" 2 >"$T_TMP/start.out" 2>"$T_TMP/start.err"
rc=$?
[ $rc -eq 77 ] && { rm -rf "$DIR"; t_skip_all "$(sed -n 's/^cluster.sh: skip: //p' "$T_TMP/start.err")"; }
trap 'sh "$CLUSTER" stop "$DIR" >/dev/null 2>&1; t_cleanup' EXIT
t_is $rc 0 "a 2-node cluster starts with spank_ddl.so in plugstack.conf"
[ $rc -eq 0 ] || { sed 's/^/# /' "$T_TMP/start.err"; t_done; }
export SLURM_CONF="$DIR/slurm.conf"
# lib.sh's DDL_RUNTIME_DIR lies in $T_TMP, which every node shares: the node
# agents' sockets (step-JOB.STEP.sock) would collide there.
unset DDL_RUNTIME_DIR

t_run 30 srun --help
t_like "$T_TMP/out" '--ddl-restarts=N' "srun --help lists --ddl-restarts"
t_like "$T_TMP/out" '--ddl-checkpoint-dir=DIR' "... and --ddl-checkpoint-dir"

# A bad value: srun fails before the step starts, with the plugin's line.
MARK="$T_TMP/marker"
t_run 60 srun -N2 -n2 --ddl --ddl-restarts=x touch "$MARK"
t_ok $([ $? -ne 0 ]; echo $?) "srun --ddl --ddl-restarts=x fails"
t_is "$(grep -c "ddl: --ddl-restarts: 'x' is not a number (0-100)" "$T_TMP/err")" 1 \
    "... with one line naming the option, the value and the range"
t_ok $([ ! -e "$MARK" ]; echo $?) "... and the step does not run"

t_run 60 srun -N2 -n2 --ddl --ddl-restarts=6 touch "$MARK"
t_ok $([ $? -ne 0 ]; echo $?) "srun --ddl --ddl-restarts=6 fails (max_restarts = 5)"
t_like "$T_TMP/err" "ddl: --ddl-restarts: 6 is more than this site allows \(max_restarts = 5" \
    "... naming the site's limit"
t_ok $([ ! -e "$MARK" ]; echo $?) "... and the step does not run"

t_run 60 srun -N2 -n2 --ddl --ddl-checkpoint-dir=/scratch/x touch "$MARK"
t_ok $([ $? -ne 0 ]; echo $?) "a checkpoint directory outside checkpoint_roots is refused"
t_ok $([ ! -e "$MARK" ]; echo $?) "... before the step runs"

# A --ddl step: the validated options reach every task, on both nodes.
# --ddl bootstraps through PMIx; the cluster's MpiDefault is none.
t_run 60 srun --mpi=pmix -N2 -n2 --ddl --ddl-restarts=3 --ddl-checkpoint-dir=/var/tmp/x --ddl-verbose \
    sh -c 'echo "$(hostname) $DDL_ENABLED $DDL_RESTARTS $DDL_CHECKPOINT_DIR $DDL_SPARES" \
                "$DDL_HEARTBEAT_MS $DDL_HANG_TIMEOUT_S $DDL_BIND $DDL_VERBOSE $DDL_CONFIG"'
rc=$?
t_is $rc 0 "srun --ddl --ddl-restarts=3 --ddl-checkpoint-dir=/var/tmp/x runs"
[ $rc -eq 0 ] || sed 's/^/# stderr: /' "$T_TMP/err" | tail -n 20
t_is "$(sort "$T_TMP/out" | tr '\n' ' ')" \
    "n1 1 3 /var/tmp/x 0 100 3600 auto 1 $CONF n2 1 3 /var/tmp/x 0 100 3600 auto 1 $CONF " \
    "... every task on n1 and n2 has DDL_* from the options and ddl.conf's defaults"

t_run 60 srun -N2 -n2 env
t_is $? 0 "srun env without --ddl runs"
t_is "$(grep -c -E '^DDL_(ENABLED|CHECKPOINT_DIR|RESTARTS|SPARES|HEARTBEAT_MS|HANG_TIMEOUT_S|BIND|VERBOSE|CONFIG)=' \
        "$T_TMP/out")" 0 "... and no task has a variable of the plugin (DDL_ENABLED...)"

# An invalid ddl.conf (srun reads it at each invocation): --ddl steps are
# refused with the file and line, other steps run as before.
printf 'max_restarts = 5\nno_such_key = 1\n' >"$CONF"
t_run 60 srun -N2 -n2 --ddl touch "$MARK"
t_ok $([ $? -ne 0 ]; echo $?) "with an invalid ddl.conf, srun --ddl fails"
t_like "$T_TMP/err" "ddl: $CONF:2: no such option 'no_such_key'" "... naming the file and line"
t_ok $([ ! -e "$MARK" ]; echo $?) "... and the step does not run"
t_run 60 srun -N2 -n2 touch "$MARK"
t_is $? 0 "srun without --ddl still runs"
t_ok $([ -e "$MARK" ]; echo $?) "... its step did"

sh "$CLUSTER" stop "$DIR"
t_is $? 0 "the cluster stops"
t_done
