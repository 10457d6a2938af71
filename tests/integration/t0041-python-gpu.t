#!/bin/sh
# t0041-python-gpu: the ddl Python package on CUDA tensors
# (tests/helpers/py-gpu-check.py).  Every collective on every dtype on
# device memory on 1 and 2 ranks (blocking and through futures), and DDP on
# a CUDA model with the ddl hooks against DDP's own allreduce: on the nccl
# backend where NCCL can run (1 rank per GPU), and on gloo.  Skips with the
# reason without the ddl package, torch, or a GPU torch can use.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
CHECK="$top_srcdir/tests/helpers/py-gpu-check.py"

t_find_python numpy torch ||
    t_skip_all "no ddl Python package in $top_builddir/python or no python3 with numpy and torch"
why=$("$PY" -c 'import torch; print("" if torch.cuda.is_available() else
    "torch %s sees no usable GPU (torch.cuda.is_available() is False)" % torch.__version__)' 2>&1)
[ -z "$why" ] || t_skip_all "$why"
gpus=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
t_diag "$PY: torch $("$PY" -c 'import torch; print(torch.__version__)'), $gpus GPU(s)"
unset MASTER_ADDR MASTER_PORT

# py_gpu N ARGS...: one TAP line for py-gpu-check.py ARGS on N ranks
py_gpu() {
    local n=$1
    shift
    t_run 300 "$DDLRUN" -n "$n" "$PY" -X "$T_TOKEN" "$CHECK" "$@"
    local rc=$?
    t_is "$rc:$(grep -c '^FAIL' "$T_TMP/out")" "0:0" \
        "py-gpu-check $* on $n rank(s) ($(grep -c '^PASS' "$T_TMP/out") checks passed)"
    if [ $rc -ne 0 ] || grep -q '^FAIL' "$T_TMP/out"; then
        grep '^FAIL' "$T_TMP/out" | head -20 | sed 's/^/# /'
        tail -n 20 "$T_TMP/err" | sed 's/^/# stderr: /'
    fi
}

py_gpu 1 colls
py_gpu 2 colls
py_gpu 1 ddp nccl
# NCCL refuses two ranks on one GPU: nccl against the hook only with a GPU each
if [ "$gpus" -ge 2 ]; then py_gpu 2 ddp nccl; else
    t_skip "DDP on the nccl backend on 2 ranks: $gpus GPU, and NCCL needs one per rank"
fi
py_gpu 2 ddp gloo
t_ok "$(t_wait_procs 0 10; echo $?)" "no Python process left"
t_done
