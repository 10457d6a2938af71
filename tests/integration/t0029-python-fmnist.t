#!/bin/sh
# t0029-python-fmnist: examples/torch/fmnist_ddp.py (a CNN on Fashion-MNIST
# in DDP with ddl's allreduce hook and ddl.checkpoint) under ddlrun -n 4, on
# a 6000-sample subset for one epoch (the full 3-epoch run is measured in
# docs/python.md): it exits 0, prints its accuracy and one weights line per
# rank, all equal.  Fault: under `ddlrun --restarts 2`, rank 2 SIGKILLs
# itself 3 steps after the first checkpoint (step 10); generation 1 resumes
# from that checkpoint and ends with the same weights hash as the
# uninterrupted run.  DDL_ALLREDUCE_ALGO=rd: recursive doubling reduces
# every element in the same order wherever it lies in the buffer, so the
# result does not depend on DDP's bucket layout, which differs in the first
# step after a restart (DDP rebuilds its buckets after its first step); the
# ring's order depends on the element's position, and libddl's automatic
# choice depends on link speeds measured at start.  Skips without torch or
# the data set (dataset-fashion-mnist).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
SCRIPT="$top_srcdir/examples/torch/fmnist_ddp.py"
DATA=${DDL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}

t_find_python numpy torch ||
    t_skip_all "no ddl Python package in $top_builddir/python or no python3 with numpy and torch"
[ -f "$DATA/train-images-idx3-ubyte.gz" ] ||
    t_skip_all "no Fashion-MNIST in $DATA (apt-get install dataset-fashion-mnist)"
unset MASTER_ADDR MASTER_PORT
export DDL_ALLREDUCE_ALGO=rd
ARGS="--epochs 1 --train-samples 6000 --test-samples 2000 --checkpoint-every 10 --data $DATA"

hashes() { sed -n 's/^rank [0-9]*: weights sha256 \([0-9a-f]\{64\}\)$/\1/p' "$T_TMP/out" | sort -u; }

# shellcheck disable=SC2086
t_run 400 "$DDLRUN" -n 4 "$PY" -X "$T_TOKEN" "$SCRIPT" $ARGS --checkpoint-dir "$T_TMP/ck1"
t_status $? 0 "ddlrun -n 4 fmnist_ddp.py exits 0" "$T_TMP/err"
sed 's/^/# /' "$T_TMP/out"
t_like "$T_TMP/out" '^final test accuracy: [0-9.]+%$' "... prints its test accuracy"
acc=$(sed -n 's/^final test accuracy: \([0-9.]*\)%$/\1/p' "$T_TMP/out")
t_ok "$(awk -v a="${acc:-0}" 'BEGIN { exit !(a > 60) }'; echo $?)" \
    "... above 60% after one epoch on 6000 samples (${acc:-?}%)"
t_is "$(grep -c '^rank [0-3]: weights sha256 [0-9a-f]\{64\}$' "$T_TMP/out")" 4 "... one weights line per rank"
t_is "$(hashes | wc -l)" 1 "... all equal"
h1=$(hashes)
t_ok "$([ -f "$T_TMP/ck1/latest" ]; echo $?)" "... and it left checkpoints in its directory"

# shellcheck disable=SC2086
t_run 500 "$DDLRUN" -n 4 --restarts 2 --checkpoint-dir "$T_TMP/ck2" \
    "$PY" -X "$T_TOKEN" "$SCRIPT" $ARGS --die-after-checkpoint 2
t_status $? 0 "ddlrun --restarts 2: rank 2 killed after the first checkpoint, the job completes" "$T_TMP/err"
sed 's/^/# /' "$T_TMP/out"
t_like "$T_TMP/out" '^rank 2: killing myself at step 13 \(checkpoint at 10\)$' "... rank 2 killed itself at step 13"
t_like "$T_TMP/out" '^generation 1: resumed from the checkpoint of step 10$' "... generation 1 resumed from step 10"
t_is "$(hashes | tr '\n' ' ')" "$h1 " "... and ended with the uninterrupted run's weights on every rank"
t_ok "$(t_wait_procs 0 10; echo $?)" "no Python process left"
t_done
