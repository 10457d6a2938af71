#!/bin/sh
# run-ckpt-levels.sh: the node-local checkpoint level with partner copies
# against the shared directory (libddl, DDL_CKPT_LOCAL_DIR): how long a
# checkpoint blocks the caller (synchronous shared write against async
# node-local + partner copy, with 2 s + 4x the synchronous write of
# "training" between checkpoints) and
# how long a restore takes after node 1 is lost (its directory deleted: its
# ranks get the partner copies over the transport) against a restore from
# the shared directory, the page cache of both dropped first.
#
#   bench/run-ckpt-levels.sh BUILDDIR [DIR [MIB...]]   (default /var/tmp, 16 64 256)
#
# 4 ranks on 2 emulated nodes (ddlrun --nodes 2), tests/helpers/ckpt-check
# levels (which also verifies every restored byte).  Both levels live under
# DIR here: on one machine the "shared directory" is the same local disk.
set -eu
build=$(cd "${1:?usage: run-ckpt-levels.sh BUILDDIR [DIR [MIB...]]}" && pwd)
base=${2:-/var/tmp}
[ $# -gt 2 ] && shift 2 || set -- 16 64 256
tmp=$(mktemp -d "$base/ddl-ckpt-levels.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(free -g | awk '/^Mem:/ {print $2}') GiB, checkpoints on $(df -h --output=source,fstype "$tmp" | tail -1 | tr -s ' ')"
for mib in "$@"; do
    "$build/launcher/ddlrun" -n 4 --nodes 2 "$build/tests/helpers/ckpt-check" levels "$tmp/c-$mib" "$mib" |
        grep -E 'blocked per checkpoint|restore \(|FAIL'
    rm -rf "$tmp/c-$mib"
done
