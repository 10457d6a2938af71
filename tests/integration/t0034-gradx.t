#!/bin/sh
# t0034-gradx: libddl's gradient exchange under ddlrun, through
# fmnist-train: --overlap 1 with the full matrix fused into one bucket
# gives the weights of the default run (one allreduce of the whole
# gradient) bit for bit; factors (--comm sfb), the cost model's choice
# (--comm auto, logged at debug level) and a deep model (--hidden) keep
# every replica identical on 3 and 4 ranks, and report bytes per iteration
# and the hidden share; DDL_FUSION_BYTES=0 and bad values; and a run with
# --comm auto --overlap 1 whose rank is killed after a checkpoint resumes
# under ddlrun --restarts to the weights of the run without failure, bit
# for bit.  The exchange's own cases (fusion, priority, abort, bad
# registrations) are tests/unit/t_gradx's.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

[ -x "$FMNIST" ] || t_skip_all "fmnist-train not built (configure found no OpenBLAS: apt-get install libopenblas-dev)"
data=${DDL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -r "$data/train-images-idx3-ubyte.gz" ] || t_skip_all "Fashion-MNIST missing in $data (apt-get install dataset-fashion-mnist)"

crc_of() { sed -n 's/^checksums: all [0-9]* ranks agree (\(0x[0-9a-f]*\))$/\1/p' "$T_TMP/out"; }
export DDL_TUNE_FILE="$T_TMP/tune"
short="--epochs 1 --limit 3000"

# shellcheck disable=SC2086
t_run 120 "$DDLRUN" -n 3 "$FMNIST" $short
t_is $? 0 "3 ranks, the default run"
base=$(crc_of)
t_like "$T_TMP/out" "^exchange: [0-9]+ bytes sent per iteration per rank \(ring model\), 0.0% of communication hidden" \
    "... reports the blocking allreduce's bytes, nothing hidden"
# shellcheck disable=SC2086
DDL_FUSION_BYTES=4194304 t_run 120 "$DDLRUN" -n 3 "$FMNIST" $short --overlap 1
t_is $? 0 "--overlap 1 --comm full, 4 MiB buckets"
t_is "$(crc_of)" "$base" "... one bucket laid out as the flat buffer: the default run's weights, bit for bit"
t_like "$T_TMP/out" "^exchange: [0-9]+ bytes sent per iteration per rank \(measured\), [0-9.]+% of communication hidden" \
    "... reports measured bytes and the hidden share"

for n in 3 4; do
    for comm in sfb auto; do
        # shellcheck disable=SC2086
        DDL_LOG_LEVEL=debug t_run 180 "$DDLRUN" -n $n "$FMNIST" $short --hidden 96,64,32 \
            --comm $comm --overlap 1
        t_is $? 0 "$n ranks, --hidden 96,64,32 --comm $comm --overlap 1"
        t_like "$T_TMP/out" "^checksums: all $n ranks agree" "... the replicas are identical"
        t_like "$T_TMP/out" "MLP 784-96-64-32-10 \(" "... the model has three hidden layers"
        acc=$(sed -n 's/^final test accuracy: \([0-9.]*\)%$/\1/p' "$T_TMP/out")
        t_ok $(awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 60.0) }'; echo $?) "... and learns (test accuracy ${acc:-?}% >= 60%)"
    done
    t_like "$T_TMP/err" "gradient exchange: layer 0 \(784 x 96, batch [0-9]+ per rank, $n ranks\): (factors|full matrix) \(cost model\)" \
        "... --comm auto: the cost model's choice per layer at debug level"
done
grep '^exchange' "$T_TMP/out" | sed 's/^/# /'

# shellcheck disable=SC2086
DDL_FUSION_BYTES=0 t_run 120 "$DDLRUN" -n 2 "$FMNIST" $short --overlap 1 --hidden 64,64
t_is $? 0 "DDL_FUSION_BYTES=0: one allreduce per layer"
t_like "$T_TMP/out" "^checksums: all 2 ranks agree" "... the replicas are identical"
# shellcheck disable=SC2086
DDL_FUSION_BYTES=lots t_run 60 "$DDLRUN" -n 2 "$FMNIST" $short --overlap 1
t_is $? 1 "DDL_FUSION_BYTES=lots: exit 1"
t_like "$T_TMP/err" "DDL_FUSION_BYTES" "... naming the variable"
# shellcheck disable=SC2086
DDL_SFB=maybe t_run 60 "$DDLRUN" -n 2 "$FMNIST" $short --comm auto
t_is $? 1 "DDL_SFB=maybe: exit 1"
t_like "$T_TMP/err" "DDL_SFB='maybe' is not one of auto, on, off" "... with the accepted values"
t_run 60 "$DDLRUN" -n 1 "$FMNIST" --hidden 10,0
t_is $? 2 "--hidden 10,0: exit 2"
t_run 60 "$DDLRUN" -n 1 "$FMNIST" --comm some
t_is $? 2 "--comm some: exit 2"

# Restarts: the same training with checkpoints, once without failure, once
# with rank 1 killed after the first checkpoint
args="--epochs 1 --limit 12000 --checkpoint-every 20 --hidden 128,64 --comm auto --overlap 1"
# shellcheck disable=SC2086
t_run 300 "$DDLRUN" -n 3 "$FMNIST" $args --checkpoint-dir "$T_TMP/base"
t_is $? 0 "baseline: --comm auto --overlap 1 with checkpoints"
want=$(crc_of)
ck="$T_TMP/ck-$T_TOKEN"
# --pace 200 (a sleep after each step; the weights do not change): the run
# lasts about 6 s, so that rank 1 is still running after the first
# checkpoint (step 20 of about 31) when the test looks for it
# shellcheck disable=SC2086
timeout -k 5 300 "$DDLRUN" -n 3 --restarts 2 "$FMNIST" $args --pace 200 --checkpoint-dir "$ck" \
    >"$T_TMP/out" 2>"$T_TMP/err" &
run=$!
t_wait_file "$ck/latest" 120
victim=""
for p in $(pgrep -f "fmnist-train .*$ck"); do
    case "$(cat /proc/"$p"/comm 2>/dev/null)" in ddl-launch | ddlrun | timeout) continue ;; esac
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "DDL_RANK=1"; then
        victim=$p
        break
    fi
done
t_ok $([ -n "$victim" ]; echo $?) "the first checkpoint is committed; rank 1's worker: pid ${victim:-?}"
[ -n "$victim" ] && kill -KILL "$victim"
wait $run
t_is $? 0 "rank 1 killed: ddlrun --restarts 2 finishes the training"
t_like "$T_TMP/out" "^fmnist-train: resuming from checkpoint step [0-9]+" "... the program resumed"
t_is "$(crc_of)" "$want" "... to the weights of the run without failure, bit for bit ($want)"
t_ok $(t_wait_procs 0 10; echo $?) "no process of the test is left"
t_done
