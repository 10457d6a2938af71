# lib-cluster.sh: helpers for the integration tests that run on the
# namespace cluster of cluster.sh.  Source it after tests/integration/lib.sh.
#
#   cl_wait_bridge            wait (up to 300 s) until no other cluster holds the bridge
#   cl_init DIR NODES CONF    take the one bridge (waiting for another cluster to
#                             stop), write ddl.conf (CONF: its text) and a
#                             plugstack.conf that loads this build's plugin
#   cl_start                  start the cluster; skips the whole test if Slurm
#                             cannot run here; fails and ends it if the start fails
#   cl_restart                stop and start again (after a node crash)
#   cl_crash NODE [silent]    crash a node (cluster.sh crash)
#   on_node NODE CMD...       CMD inside node NODE (net, mount, uts namespaces)
#   cl_procs NAME             processes named NAME on the nodes that are up
#   cl_grown_ref ERR CK REF   a plain step of 3 nodes x 2 tasks resumed from a copy
#                             (in REF) of CK's checkpoint at which the world grew
#                             back last (ERR says which): fmnist-train $ARGS, output in
#                             $T_TMP/ref.out and ref.err; checks its exit status
#
# The EXIT trap stops the cluster; lib.sh's t_cleanup runs after it.

CLUSTER="$top_srcdir/tests/slurm/cluster.sh"
PLUGIN="$top_builddir/plugins/.libs/spank_ddl.so"

trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# cl_wait_bridge: one namespace cluster at a time on a host (one bridge,
# ddlbr0): wait, for a bounded time, for one that another test or person
# runs to stop.
cl_wait_bridge() {
    i=0
    while ip link show ddlbr0 >/dev/null 2>&1 && [ $i -lt 150 ]; do
        [ $i -eq 0 ] && t_diag "bridge ddlbr0 exists: waiting up to 300 s for that cluster to stop"
        sleep 2
        i=$((i + 1))
    done
}

# cl_prepare: for tests that start cluster.sh themselves (PLUGIN set): wait
# for the bridge and preload the sanitizer runtimes when the plugin needs them.
cl_prepare() {
    cl_wait_bridge
    cl_sanitizer_runtime
}

cl_init() {
    CL_DIR=$1
    CL_NODES=$2
    [ -f "$PLUGIN" ] || t_skip_all "spank_ddl.so not built (configure found no slurm/spank.h)"
    [ -x "$DDL_LAUNCH" ] || t_skip_all "ddl-launch not built"
    [ "$(id -u)" = 0 ] || t_skip_all "needs root (network namespaces, slurmd)"
    cl_wait_bridge
    CL_CONF="$T_TMP/ddl.conf"
    printf '%s\n' "$3" >"$CL_CONF"
    export DDL_CLUSTER_SHARE="$top_builddir $top_srcdir $T_TMP"
    export SLURM_CONF="$CL_DIR/slurm.conf"
    # Each node's agents put their sockets in the node's own /tmp.
    unset DDL_RUNTIME_DIR
    cl_sanitizer_runtime
}

# cl_sanitizer_runtime: with --enable-sanitizers the tasks (ddl-launch, the
# workers) carry the ASan and UBSan runtimes themselves; the plugin is built
# without them (plugins/local.mk: preloaded into slurmstepd, ASan deadlocked
# a forked task), so Slurm's daemons, srun, sbatch and salloc run as they
# are.  srun, sbatch and salloc are wrapped in $T_TMP/san-bin, first in
# PATH, only to pass the tasks ASAN_OPTIONS with leak checking off: a task
# that Slurm kills at the end of a step is not a leak of ddl's (the tests
# outside the cluster check ddl's).
cl_sanitizer_runtime() {
    ldd "$DDL_LAUNCH" 2>/dev/null | grep -q 'libasan\.so' || return 0
    # once per test: a second cl_init would wrap the wrappers (srun exec'ing itself)
    [ -d "$T_TMP/san-bin" ] && return 0
    san_opts="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    mkdir -p "$T_TMP/san-bin"
    for tool in srun sbatch salloc; do
        real=$(command -v "$tool") || continue
        printf '#!/bin/sh\nASAN_OPTIONS="%s" exec %s "$@"\n' "$san_opts" "$real" >"$T_TMP/san-bin/$tool"
        chmod 755 "$T_TMP/san-bin/$tool"
    done
    export PATH="$T_TMP/san-bin:$PATH"
    t_diag "sanitizer build: the tasks run with ASAN_OPTIONS=$san_opts (srun, sbatch, salloc wrapped); the plugin and Slurm without sanitizers"
}

cl_plugstack() {
    mkdir -p "$CL_DIR"
    echo "required $PLUGIN config=$CL_CONF launch=$DDL_LAUNCH" >"$CL_DIR/plugstack.conf"
}

cl_start() {
    cl_plugstack
    sh "$CLUSTER" start "$CL_DIR" "$CL_NODES" >"$T_TMP/start.out" 2>"$T_TMP/start.err"
    rc=$?
    if [ $rc -eq 77 ]; then
        rm -rf "$CL_DIR"
        t_skip_all "$(sed -n 's/^cluster.sh: skip: //p' "$T_TMP/start.err")"
    fi
    [ $rc -eq 0 ] && trap 'sh "$CLUSTER" stop "$CL_DIR" >/dev/null 2>&1; t_cleanup' EXIT
    t_is $rc 0 "a $CL_NODES-node cluster starts with spank_ddl.so in plugstack.conf"
    [ $rc -eq 0 ] || { sed 's/^/# /' "$T_TMP/start.err"; rm -rf "$CL_DIR"; t_done; }
}

cl_restart() {
    sh "$CLUSTER" stop "$CL_DIR" >/dev/null 2>&1
    cl_plugstack
    sh "$CLUSTER" start "$CL_DIR" "$CL_NODES" >"$T_TMP/start.out" 2>"$T_TMP/start.err"
    rc=$?
    t_is $rc 0 "the cluster starts again (fresh nodes)"
    [ $rc -eq 0 ] || { sed 's/^/# /' "$T_TMP/start.err"; t_done; }
}

cl_crash() { sh "$CLUSTER" crash "$CL_DIR" "$@"; }

slurmd_pid() { cat "$CL_DIR/nodes/$1/slurmd.pid" 2>/dev/null; }

on_node() {
    n=$1
    shift
    timeout -k 5 30 nsenter -t "$(slurmd_pid "$n")" -n -m -u -- "$@"
}

cl_procs() {
    for n in $(seq "$CL_NODES"); do
        p=$(slurmd_pid "n$n")
        [ -n "$p" ] && [ -d "/proc/$p" ] && pgrep --ns "$p" --nslist net -x "$1"
    done | wc -l
}

# cl_clean DESCRIPTION: wait up to 10 s for no fmnist-train, ddl-launch or
# ddl-agent on the nodes that are up, then check it (one test point)
cl_clean() {
    i=0
    while [ $((i += 1)) -lt 100 ] &&
        [ "$(cl_procs fmnist-train)$(cl_procs ddl-launch)$(cl_procs ddl-agent)" != 000 ]; do
        sleep 0.1
    done
    t_is "$(cl_procs fmnist-train) $(cl_procs ddl-launch) $(cl_procs ddl-agent)" "0 0 0" "$1"
}

cl_grown_ref() {
    s=$(sed -n 's/.*the world grows back.*resumes from the checkpoint of step \([0-9]*\)$/\1/p' "$1" |
        tail -n 1)
    mkdir -p "$3"
    cp -r "$2/step-$(printf %08d "${s:-0}")" "$3/" 2>/dev/null
    echo "${s:-0}" >"$3/latest"
    # shellcheck disable=SC2086 # ARGS: several words
    timeout -k 5 240 srun --mpi=pmix -N3 --ntasks-per-node=2 --ddl --ddl-checkpoint-dir="$3" \
        -J "$T_TOKEN" "$FMNIST" $ARGS --checkpoint-dir "$3" >"$T_TMP/ref.out" 2>"$T_TMP/ref.err"
    t_status $? 0 "a plain 6-rank step resumed from the grow's checkpoint (step ${s:-?}): exits 0" \
        "$T_TMP/ref.err"
}
