#!/bin/sh
# sanitize.sh: build ddl with AddressSanitizer and UndefinedBehaviorSanitizer
# in ./build-asan and run the whole test suite there.  UCX's own malloc and
# mmap hooks are turned off (they fight ASan's allocator); leaks inside
# third-party libraries are suppressed by tests/lsan.supp, ddl's are not.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ -x configure ] || ./autogen.sh >/dev/null
mkdir -p build-asan
cd build-asan
[ -f Makefile ] || ../configure --enable-werror --enable-sanitizers
make -j"$(nproc)"
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none
export LSAN_OPTIONS="suppressions=$top/tests/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# the slow unwinder sees through frames of unloaded hwloc plugins
export ASAN_OPTIONS="fast_unwind_on_malloc=0"
# the sanitizers slow programs down about 3x: tests with short time limits
# (a 2 s hang timeout that must not expire before the first collective)
# scale them by this factor
export DDL_TEST_TIME_SCALE=3
make check "$@"
