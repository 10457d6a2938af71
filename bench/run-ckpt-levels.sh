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
#   bench/run-ckpt-levels.sh [--shared SHARED] BUILDDIR [DIR [MIB...]]
#                                         (default /var/tmp, 16 64 256)
#
# 4 ranks on 2 emulated nodes (ddlrun --nodes 2), tests/helpers/ckpt-check
# levels (which also verifies every restored byte).  The node-local level
# lives under DIR; the shared one under SHARED, or under DIR too (then the
# "shared directory" is the same local disk).  For a shared file system on
# one machine: bench/glusterfs.sh start /mnt/ddl-shared, then
# --shared /mnt/ddl-shared.
set -eu
usage="usage: run-ckpt-levels.sh [--shared SHARED] BUILDDIR [DIR [MIB...]]"
shared=
if [ "${1:-}" = --shared ]; then
    shared=$(cd "${2:?$usage}" && pwd)
    shift 2
fi
build=$(cd "${1:?$usage}" && pwd)
base=${2:-/var/tmp}
if [ $# -gt 2 ]; then shift 2; else set -- 16 64 256; fi
tmp=$(mktemp -d "$base/ddl-ckpt-levels.XXXXXX")
stmp=
[ -z "$shared" ] || stmp=$(mktemp -d "$shared/ddl-ckpt-levels.XXXXXX")
trap 'rm -rf "$tmp" ${stmp:+"$stmp"}' EXIT
fs() { df -h --output=source,fstype "$1" | tail -1 | tr -s ' '; }
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(free -g | awk '/^Mem:/ {print $2}') GiB, node-local level on $(fs "$tmp"), shared directory on $(fs "${stmp:-$tmp}")"
for mib in "$@"; do
    "$build/launcher/ddlrun" -n 4 --nodes 2 "$build/tests/helpers/ckpt-check" levels "$tmp/c-$mib" "$mib" \
        ${stmp:+"$stmp/c-$mib"} | grep -E 'blocked per checkpoint|restore \(|FAIL'
    rm -rf "$tmp/c-$mib" ${stmp:+"$stmp/c-$mib"}
done
