#!/bin/sh
# run-poseidon.sh: the gradient exchange's benchmark: fmnist-train on N
# ranks of this node (ddlrun), for the default model and a deep one, in
# three configurations: (a) --overlap 0 --comm full (one blocking allreduce
# after backward), (b) --overlap 1 --comm full (wait-free backpropagation
# with fusion), (c) --overlap 1 --comm auto (and sufficient factors where
# the cost model picks them).  Prints one Markdown table row per run:
# samples/s of the last epoch, bytes sent per iteration per rank (measured
# by the exchange; the ring model for (a)), the exchange model's bytes, the
# share of communication hidden, the final test accuracy.
#
#   [NRANKS=4] [EPOCHS=1] [LIMIT=12000] [REPEAT=1] [NODES=N] bench/run-poseidon.sh BUILDDIR
#
# NODES=N (1-8, as root): the same runs on N nodes of the namespace Slurm
# cluster (tests/slurm/cluster.sh, started and stopped here; one cluster at
# a time), one rank per node, under `srun --mpi=pmix --ddl` over TCP
# (UCX_TLS=tcp,self on the nodes' veths).
#
# One DDL_TUNE_FILE for every run, so that every run uses the same
# allreduce model.
set -eu
build=$(cd "${1:?usage: run-poseidon.sh BUILDDIR}" && pwd)
n=${NRANKS:-4}
epochs=${EPOCHS:-1}
limit=${LIMIT:-12000}
repeat=${REPEAT:-1}
fmnist="$build/examples/fmnist/fmnist-train"
ddlrun="$build/launcher/ddlrun"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DDL_TUNE_FILE="$tmp/tune"
nodes=${NODES:-}
run() { "$ddlrun" -n "$n" "$fmnist" "$@"; }
if [ -n "$nodes" ]; then
    case $nodes in [1-8]) ;; *) echo "run-poseidon: NODES='$nodes' is not 1-8" >&2; exit 2 ;; esac
    top=$(cd "$(dirname "$0")/.." && pwd)
    dir=/var/tmp/ddl-poseidon.$$
    mkdir -p "$dir"
    printf 'max_restarts = 5\n' >"$dir/ddl.conf"
    echo "required $build/plugins/.libs/spank_ddl.so config=$dir/ddl.conf launch=$build/launcher/ddl-launch" \
        >"$dir/plugstack.conf"
    DDL_CLUSTER_SHARE="$build $top $tmp" sh "$top/tests/slurm/cluster.sh" start "$dir" "$nodes" >/dev/null ||
        { st=$?; rm -rf "$dir" "$tmp"; exit $st; }
    # armed only now: `stop` removes every node namespace, even another cluster's
    trap 'sh "$top/tests/slurm/cluster.sh" stop "$dir" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
    trap 'exit 1' HUP INT TERM
    export SLURM_CONF="$dir/slurm.conf" UCX_TLS=tcp,self
    unset DDL_RUNTIME_DIR
    n=$nodes
    run() { timeout 900 srun --mpi=pmix -N "$nodes" -n "$nodes" --ddl "$fmnist" "$@"; }
fi

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $n ranks${nodes:+ on $nodes namespace nodes over TCP}"
echo "| model | config | samples/s | bytes/iter/rank | model bytes | hidden | test acc |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
for model in 256 1024,1024,512; do
    for cfg in "--overlap 0 --comm full" "--overlap 1 --comm full" "--overlap 1 --comm auto"; do
        r=0
        while [ $r -lt "$repeat" ]; do
            r=$((r + 1))
            # shellcheck disable=SC2086
            run --epochs "$epochs" --limit "$limit" --hidden "$model" \
                $cfg >"$tmp/out" 2>"$tmp/err" || { echo "| $model | $cfg | failed: $(tail -1 "$tmp/err") |"; continue; }
            sps=$(sed -n 's/^epoch .* \([0-9]*\) samples\/s .*/\1/p' "$tmp/out" | tail -1)
            bytes=$(sed -n 's/^exchange: \([0-9]*\) bytes sent.*/\1/p' "$tmp/out")
            mbytes=$(sed -n 's/^exchange model: \([0-9]*\) bytes.*/\1/p' "$tmp/out")
            hidden=$(sed -n 's/^exchange: .*, \([0-9.]*%\) of communication hidden.*/\1/p' "$tmp/out")
            acc=$(sed -n 's/^final test accuracy: \(.*\)$/\1/p' "$tmp/out")
            layers=$(sed -n 's/^fmnist-train: gradient exchange ([^)]*): \(.*\)$/\1/p' "$tmp/out")
            echo "| 784-$(echo "$model" | tr ',' '-')-10 | $cfg${layers:+ ($layers)} | $sps | $bytes | ${mbytes:--} | $hidden | $acc |"
        done
    done
done
