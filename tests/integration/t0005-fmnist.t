#!/bin/sh
# t0005-fmnist: the main job: fmnist-train under ddlrun: replicas agree
# (identical weight checksums), runs are deterministic for a seed, world
# size and allreduce model (DDL_TUNE_FILE), the full 3-epoch run on 4 ranks
# reaches >= 85 % test accuracy, and a missing dataset is reported with the package to install.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

[ -x "$FMNIST" ] || t_skip_all "fmnist-train not built (configure found no OpenBLAS: apt-get install libopenblas-dev)"
data=${DDL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -r "$data/train-images-idx3-ubyte.gz" ] || t_skip_all "Fashion-MNIST missing in $data (apt-get install dataset-fashion-mnist)"

crc_of() { sed -n 's/^checksums: all [0-9]* ranks agree (\(0x[0-9a-f]*\))$/\1/p' "$T_TMP/out"; }

# The automatic allreduce choice rests on link speeds measured at start-up;
# a cache file (DDL_TUNE_FILE) makes the second run choose as the first.
DDL_TUNE_FILE="$T_TMP/tune" t_run 120 "$DDLRUN" -n 3 "$FMNIST" --epochs 1 --limit 6000
t_is $? 0 "3 ranks, 1 short epoch"
t_like "$T_TMP/tune" "^beta_inter_us [0-9]" "rank 0 wrote the measured model to DDL_TUNE_FILE"
t_like "$T_TMP/out" "^checksums: all 3 ranks agree \(0x[0-9a-f]{8}\)$" "the 3 replicas hold identical weights"
t_is "$(grep -c '^rank [0-2]: weights crc32 ' "$T_TMP/out")" 3 "every rank printed its checksum"
first=$(crc_of)
DDL_LOG_LEVEL=debug DDL_TUNE_FILE="$T_TMP/tune" t_run 120 "$DDLRUN" -n 3 "$FMNIST" --epochs 1 --limit 6000
t_like "$T_TMP/err" "allreduce model \(cache\)" "the second run loaded the model from DDL_TUNE_FILE"
t_is "$(crc_of)" "$first" "a second run with the same seed and world size gives the same weights"

t_run 300 "$DDLRUN" -n 4 "$FMNIST" --epochs 3
t_is $? 0 "ddlrun -n 4 fmnist-train --epochs 3"
sed 's/^/# /' "$T_TMP/out"
acc=$(sed -n 's/^final test accuracy: \([0-9.]*\)%$/\1/p' "$T_TMP/out")
t_ok $(awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 85.0) }'; echo $?) "test accuracy ${acc:-?}% >= 85%"
t_is "$(grep -c '^epoch [1-3]/3 ' "$T_TMP/out")" 3 "one line per epoch"
t_like "$T_TMP/out" "^checksums: all 4 ranks agree" "the 4 replicas agree"

DDL_FMNIST_DIR="$T_TMP/nodata" t_run 60 "$DDLRUN" -n 2 "$FMNIST" --epochs 1
t_is $? 1 "a missing dataset -> exit 1"
t_like "$T_TMP/err" "dataset-fashion-mnist" "... and the message names the Debian package"

t_run 60 "$DDLRUN" -n 1 "$FMNIST" --epochs zero
t_is $? 2 "a bad option -> exit 2"
t_done
