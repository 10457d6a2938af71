#!/bin/sh
# check.sh: the README's second command: the whole test suite.  Installs
# the dependencies if needed, builds with -Werror, runs `make check` (unit and
# integration tests; those that need root, Slurm or a GPU skip with the
# reason).  With DDL_DISTCHECK=1 (CI sets it) also runs `make distcheck`.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/install-deps.sh"
"$top/scripts/build.sh"
cd "$top/build"
status=0
make check || status=$?
if [ $status -ne 0 ]; then
    echo "check.sh: failures; details in build/test-suite.log:" >&2
    grep -E '^(FAIL|ERROR|not ok)' test-suite.log >&2 || true
    exit $status
fi
if [ "${DDL_DISTCHECK:-0}" = 1 ]; then
    make distcheck DISTCHECK_CONFIGURE_FLAGS=--enable-werror
fi
