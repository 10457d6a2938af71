#!/bin/sh
# run-ckpt.sh: how long a training loop is blocked by a checkpoint, async
# against synchronous (the goal: async blocks <= 10 % of the
# synchronous write), with libddl's checkpoint API.
#
#   bench/run-ckpt.sh BUILDDIR [DIR [MIB...]]    (default /var/tmp, 64 256 1024)
#
# For each size (MiB per rank) and 2 and 4 ranks, tests/helpers/ckpt-check
# async (the API's own check, which also verifies what was written) runs 3
# synchronous and 3 async checkpoints of one buffer per rank and prints what
# the caller was blocked in write + commit: sync (the fsync'd write) and
# async (the copy into memory; the first async step, into fresh memory, is
# shown apart), and how long the next begin waited for the background
# write.  The checkpoints go to DIR (a real disk, not tmpfs, for honest
# fsyncs) and are removed afterwards.
set -eu
build=$(cd "${1:?usage: run-ckpt.sh BUILDDIR [DIR [MIB...]]}" && pwd)
base=${2:-/var/tmp}
[ $# -gt 2 ] && shift 2 || set -- 64 256 1024
tmp=$(mktemp -d "$base/ddl-ckpt-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(free -g | awk '/^Mem:/ {print $2}') GiB, checkpoints on $(df -h --output=source,fstype "$tmp" | tail -1 | tr -s ' ')"
for mib in "$@"; do
    for n in 2 4; do
        "$build/launcher/ddlrun" -n "$n" "$build/tests/helpers/ckpt-check" async "$tmp/c-$n-$mib" "$mib" |
            grep -E 'caller blocked|FAIL' | sed "s/^/$n ranks: /"
        rm -rf "$tmp/c-$n-$mib"
    done
done
