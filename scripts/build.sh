#!/bin/sh
# build.sh: configure and build ddl in ./build (out of the source tree).
# Re-running only rebuilds what changed.  Extra arguments go to configure
# on the first run (e.g. --enable-sanitizers).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ -x configure ] || ./autogen.sh >/dev/null
mkdir -p build
cd build
[ -f Makefile ] || ../configure --enable-werror "$@"
make -j"$(nproc)"
