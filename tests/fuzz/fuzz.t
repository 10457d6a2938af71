#!/bin/sh
# fuzz.t: run each libFuzzer target of tests/fuzz (README.md there) for
# DDL_FUZZ_SECONDS seconds (default 15; 0: only its seed corpus), from its
# seed corpus in tests/fuzz/corpus/TARGET; new inputs go to a scratch
# directory, never into the source tree.  One "ok" per target: no crash,
# leak, sanitizer report or time-out.  A crashing input is kept as
# tests/fuzz/crash-TARGET-* in the build directory.  Skips when configure
# found no clang that links -fsanitize=fuzzer.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

secs=${DDL_FUZZ_SECONDS:-15}
case $secs in '' | *[!0-9]*) secs=15 ;; esac
targets="proto conf args ckpt"
for t in $targets; do
    [ -x "$top_builddir/tests/fuzz/fuzz_$t" ] ||
        t_skip_all "fuzz targets not built: configure found no clang that links" \
            "-fsanitize=fuzzer (its 'fuzz targets' line; install clang or set FUZZ_CC)"
done

if [ "$secs" -gt 0 ]; then limit="-max_total_time=$secs"; else limit="-runs=0"; fi
for t in $targets; do
    mkdir -p "$T_TMP/corpus-$t"
    t_run $((secs + 300)) "$top_builddir/tests/fuzz/fuzz_$t" "$limit" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$T_TMP/crash-$t-" \
        "$T_TMP/corpus-$t" "$top_srcdir/tests/fuzz/corpus/$t"
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$T_TMP/err" | tail -n 1)
    found=$(ls "$T_TMP/corpus-$t" | wc -l)
    t_is $rc 0 "fuzz_$t: ${secs}s, ${runs:-?} inputs, $found new in the corpus, no crash"
    [ $rc -eq 0 ] || grep -m 20 -E '^(==[0-9]+==ERROR|SUMMARY|[^ ]*: runtime error|    #[0-9]+ |ALARM|MS: )' \
        "$T_TMP/err" | sed 's/^/#   /'
    for a in "$T_TMP"/crash-"$t"-*; do
        [ -f "$a" ] || continue
        cp "$a" "$top_builddir/tests/fuzz/" &&
            t_diag "kept the input as tests/fuzz/$(basename "$a") in the build directory"
    done
done
t_done
