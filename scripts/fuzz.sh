#!/bin/sh
# fuzz.sh [SECONDS]: run every libFuzzer target of tests/fuzz for SECONDS
# each (default 300), two at a time, from the build directory ./build
# (configured with clang: configure's "fuzz targets" line).  Each target
# grows its own corpus in build/tests/fuzz/corpus-TARGET (kept between
# runs; seeded from tests/fuzz/corpus/TARGET) and its log in
# build/tests/fuzz/TARGET.log; crashing inputs land in build/tests/fuzz as
# crash-TARGET-*.  Prints per target: executions, corpus size, crashes.
# Exit status 1 if any target crashed.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-300}
b="$top/build"
targets="proto conf args ckpt"
make -C "$b" -s $(for t in $targets; do echo "tests/fuzz/fuzz_$t"; done) || exit 1

run() { # run TARGET
    mkdir -p "$b/tests/fuzz/corpus-$1"
    "$b/tests/fuzz/fuzz_$1" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$b/tests/fuzz/crash-$1-" \
        "$b/tests/fuzz/corpus-$1" "$top/tests/fuzz/corpus/$1" >"$b/tests/fuzz/$1.log" 2>&1
    echo $? >"$b/tests/fuzz/$1.rc"
}

set -- $targets
while [ $# -gt 0 ]; do
    run "$1" &
    [ $# -gt 1 ] && { run "$2" & }
    wait
    shift
    [ $# -gt 0 ] && shift
done

bad=0
printf '%-8s %8s %12s %10s %8s %s\n' target seconds executions exec/s corpus crashes
for t in $targets; do
    log="$b/tests/fuzz/$t.log"
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    corpus=$(ls "$b/tests/fuzz/corpus-$t" | wc -l)
    crashes=$(ls "$b/tests/fuzz" | grep -c "^crash-$t-")
    rc=$(cat "$b/tests/fuzz/$t.rc")
    [ "$rc" -eq 0 ] || bad=1
    printf '%-8s %8s %12s %10s %8s %s\n' "$t" "$secs" "${runs:-?}" "${rate:-?}" "$corpus" \
        "$crashes$([ "$rc" -eq 0 ] || echo " (exit $rc: see $log)")"
done
exit $bad
