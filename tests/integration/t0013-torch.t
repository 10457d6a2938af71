#!/bin/sh
# t0013-torch: an unmodified PyTorch program under ddlrun:
# examples/torch/ddp_check.py forms a gloo process group with
# init_method=env:// from the variables ddlrun sets, trains a small MLP in
# DistributedDataParallel on different data per rank, and each rank prints
# the SHA-256 of its weights.  On 2 and 4 ranks: exit 0, every rank 0..N-1
# printed once with its local and node rank, all hashes equal, the loss
# went down; the same run twice gives the same hash; with --no-sync (no
# gradient averaging) the hashes differ, so the comparison does catch
# disagreeing replicas.  Skips when no python3 can import torch with gloo
# (apt-get install python3-torch).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
SCRIPT="$top_srcdir/examples/torch/ddp_check.py"

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
t_diag "$PY: torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"

# hashes: the distinct weight hashes in the output, one a line.
hashes() { sed -n 's/^rank [0-9]*\/[0-9]* .* weights-sha256 \([0-9a-f]\{64\}\)$/\1/p' "$T_TMP/out" | sort -u; }

# check_world N DESC: the output of a run of ddp_check.py on N ranks.
check_world() {
    local n="$1" d="$2"
    t_is "$(sed -n 's/^rank \([0-9]*\)\/.*/\1/p' "$T_TMP/out" | sort -n | tr '\n' ' ')" \
        "$(seq 0 $((n - 1)) | tr '\n' ' ')" "$d: ranks 0..$((n - 1)) each printed one line"
    t_is "$(grep -Ec "^rank ([0-9]+)/$n local ([0-9]+) node 0 weights-sha256 [0-9a-f]{64}$" "$T_TMP/out")" \
        "$n" "... each with world size $n, node 0 and a SHA-256"
    t_is "$(sed -n 's/^rank \([0-9]*\)\/[0-9]* local \([0-9]*\) .*/\1 \2/p' "$T_TMP/out" |
            awk '$1 != $2' | wc -l)" 0 "... and its local rank equal to its rank"
    t_is "$(hashes | wc -l)" 1 "... all ranks hold the same weights"
    local loss
    loss=$(sed -n "s/^loss \([0-9.]*\) -> \([0-9.]*\) after [0-9]* steps on $n ranks$/\1 \2/p" "$T_TMP/out")
    t_ok "$(echo "${loss:-0 0}" | awk '{ print !($2 < $1) }')" "... the loss went down (${loss:-no loss line})"
}

# $T_TOKEN goes into each Python process's command line as an -X option
# (which Python ignores), so lib.sh finds and kills them even if ddlrun dies.
t_run 120 "$DDLRUN" -n 2 "$PY" -X "$T_TOKEN" "$SCRIPT"
rc=$?
t_is $rc 0 "ddlrun -n 2 python3 ddp_check.py exits 0"
[ $rc -eq 0 ] || sed 's/^/# stderr: /' "$T_TMP/err" | tail -n 30
check_world 2 "2 ranks"
h2=$(hashes | head -n 1)

t_run 120 "$DDLRUN" -n 2 "$PY" -X "$T_TOKEN" "$SCRIPT"
t_is "$?:$(hashes | tr '\n' ' ')" "0:$h2 " "a second run on 2 ranks gives the same weights"

t_run 120 "$DDLRUN" -n 4 "$PY" -X "$T_TOKEN" "$SCRIPT"
rc=$?
t_is $rc 0 "ddlrun -n 4 python3 ddp_check.py exits 0"
[ $rc -eq 0 ] || sed 's/^/# stderr: /' "$T_TMP/err" | tail -n 30
sed 's/^/# /' "$T_TMP/out"
check_world 4 "4 ranks"
t_ok "$([ -n "$h2" ] && [ "$(hashes | head -n 1)" != "$h2" ]; echo $?)" \
    "... their weights differ from those of 2 ranks (the ranks' data differ)"

# Without gradient averaging the replicas drift apart: the check above
# would have seen it.
t_run 120 "$DDLRUN" -n 2 "$PY" -X "$T_TOKEN" "$SCRIPT" --no-sync
t_is $? 0 "ddlrun -n 2 python3 ddp_check.py --no-sync exits 0"
t_is "$(hashes | wc -l)" 2 "... and its 2 ranks print different hashes"

t_ok "$(t_wait_procs 0 10; echo $?)" "no Python process left"
t_done
