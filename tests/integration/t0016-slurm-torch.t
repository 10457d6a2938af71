#!/bin/sh
# t0016-slurm-torch: an unmodified PyTorch program under `srun --ddl`.
# On the 2-node namespace cluster (tests/slurm/cluster.sh) with
# spank_ddl.so loaded, `srun --mpi=pmix -N2 -n4 --ddl python3 ddp_check.py`
# (--ddl bootstraps through PMIx; the cluster's MpiDefault is none) forms a
# gloo process group with init_method=env:// from the variables ddl-launch
# sets, trains in DistributedDataParallel across both nodes, and: exits 0,
# every rank 0..3 printed once, two ranks per node with local ranks 0 and 1
# and node ranks 0 and 1, all four hashes equal, the loss went down, and the
# weights are bit-identical to those of `ddlrun -n 4` on this host (same
# ranks, same data, same reduction order).  With --no-sync the hashes
# differ, so the comparison does catch disagreeing replicas.
#
# The nodes' hostnames (n1, n2) resolve nowhere, so gloo would bind to
# loopback; GLOO_SOCKET_IFNAME=eth0 (each node's link, as on a real cluster
# its resolvable address) is part of the test bed, not of the program.
#
# Skips when no python3 can import torch with gloo (apt-get install
# python3-torch), when spank_ddl.so is not built, when not root or when
# Slurm/munge are not installed (cluster.sh exits 77).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
CLUSTER="$top_srcdir/tests/slurm/cluster.sh"
DIR="/var/tmp/ddl-cluster.$$"
PLUGIN="$top_builddir/plugins/.libs/spank_ddl.so"
SCRIPT="$top_srcdir/examples/torch/ddp_check.py"
CONF="$T_TMP/ddl.conf"

# Debian's torch is built for /usr/bin/python3; a python3 earlier in PATH
# (pyenv, a virtual environment) may lack it.  $PYTHON is tried first.
PY=""
for p in ${PYTHON:-} python3 /usr/bin/python3; do
    if timeout 60 "$p" -c 'import torch.distributed as d; assert d.is_available() and d.is_gloo_available()' \
        >/dev/null 2>&1; then
        PY=$(command -v "$p")
        break
    fi
done
[ -n "$PY" ] || t_skip_all "no python3 can import torch with gloo (apt-get install python3-torch)"
[ -f "$PLUGIN" ] || t_skip_all "spank_ddl.so not built (configure found no slurm/spank.h)"
[ -x "$DDL_LAUNCH" ] || t_skip_all "ddl-launch not built"
[ "$(id -u)" = 0 ] || t_skip_all "needs root (network namespaces, slurmd)"
t_diag "$PY: torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"

# hashes: the distinct weight hashes in the output, one a line.
hashes() { sed -n 's/^rank [0-9]*\/[0-9]* .* weights-sha256 \([0-9a-f]\{64\}\)$/\1/p' "$T_TMP/out" | sort -u; }

# The reference: the same job under ddlrun on this host, before the cluster.
# $T_TOKEN goes into each Python process's command line as an -X option
# (which Python ignores), so lib.sh finds and kills them whatever happens.
t_run 120 "$DDLRUN" -n 4 "$PY" -X "$T_TOKEN" "$SCRIPT"
t_is $? 0 "ddlrun -n 4 python3 ddp_check.py on the host exits 0 (the reference)"
t_is "$(hashes | wc -l)" 1 "... its 4 ranks agree"
ref=$(hashes | head -n 1)

# One namespace cluster at a time on a host (one bridge, ddlbr0).
. "$top_srcdir/tests/slurm/lib-cluster.sh"
cl_prepare

# The plugin as in t0010, told where this build's ddl-launch is; both files
# exist before the cluster starts.
printf 'max_restarts = 5\ncheckpoint_roots = {"/var/tmp"}\n' >"$CONF"
mkdir -p "$DIR"
echo "required $PLUGIN config=$CONF launch=$DDL_LAUNCH" >"$DIR/plugstack.conf"

export DDL_CLUSTER_SHARE="$top_builddir $top_srcdir $T_TMP"
sh "$CLUSTER" start "$DIR" 2 >"$T_TMP/start.out" 2>"$T_TMP/start.err"
rc=$?
[ $rc -eq 77 ] && { rm -rf "$DIR"; t_skip_all "$(sed -n 's/^cluster.sh: skip: //p' "$T_TMP/start.err")"; }
# A failed start has already cleaned up what it made; only a cluster that
# started is ours to stop.
[ $rc -eq 0 ] && trap 'sh "$CLUSTER" stop "$DIR" >/dev/null 2>&1; t_cleanup' EXIT
t_is $rc 0 "a 2-node cluster starts with spank_ddl.so in plugstack.conf"
[ $rc -eq 0 ] || { sed 's/^/# /' "$T_TMP/start.err"; rm -rf "$DIR"; t_done; }
export SLURM_CONF="$DIR/slurm.conf"
export GLOO_SOCKET_IFNAME=eth0
# lib.sh's DDL_RUNTIME_DIR lies in $T_TMP, which every node shares: the
# node agents' sockets (step-JOB.STEP.sock) would collide there.  Each
# node's own /tmp is private to this cluster.
unset DDL_RUNTIME_DIR

# --kill-on-bad-exit: a failed rank ends the step at once, rather than its
# peers waiting for it until their gloo timeout.
t_run 180 srun --mpi=pmix --kill-on-bad-exit=1 -N2 -n4 --ddl "$PY" -X "$T_TOKEN" "$SCRIPT"
rc=$?
t_is $rc 0 "srun --mpi=pmix -N2 -n4 --ddl python3 ddp_check.py exits 0"
[ $rc -eq 0 ] || sed 's/^/# stderr: /' "$T_TMP/err" | tail -n 30
sed 's/^/# /' "$T_TMP/out"
t_is "$(sed -n 's/^rank \([0-9]*\)\/.*/\1/p' "$T_TMP/out" | sort -n | tr '\n' ' ')" "0 1 2 3 " \
    "ranks 0..3 each printed one line"
t_is "$(grep -Ec '^rank [0-9]+/4 local [0-9]+ node [0-9]+ weights-sha256 [0-9a-f]{64}$' "$T_TMP/out")" 4 \
    "... each with world size 4 and a SHA-256"
t_is "$(sed -n 's/^rank [0-9]*\/4 local \([0-9]*\) node \([0-9]*\) .*/\2:\1/p' "$T_TMP/out" |
        sort | tr '\n' ' ')" "0:0 0:1 1:0 1:1 " \
    "... two ranks per node: node ranks 0 and 1, local ranks 0 and 1 on each"
t_is "$(hashes | wc -l)" 1 "... all ranks hold the same weights"
t_is "$(hashes | head -n 1)" "$ref" "... the same as under ddlrun -n 4"
loss=$(sed -n 's/^loss \([0-9.]*\) -> \([0-9.]*\) after [0-9]* steps on 4 ranks$/\1 \2/p' "$T_TMP/out")
t_ok "$(echo "${loss:-0 0}" | awk '{ print !($2 < $1) }')" "... the loss went down (${loss:-no loss line})"

# Without gradient averaging the replicas drift apart: the check above
# would have seen it.
t_run 180 srun --mpi=pmix --kill-on-bad-exit=1 -N2 -n4 --ddl "$PY" -X "$T_TOKEN" "$SCRIPT" --no-sync
t_is $? 0 "... with --no-sync exits 0"
t_is "$(hashes | wc -l)" 4 "... and its 4 ranks print 4 different hashes"

t_ok "$(t_wait_procs 0 15; echo $?)" "no Python process left"
sh "$CLUSTER" stop "$DIR"
t_is $? 0 "the cluster stops"
t_done
