#!/bin/sh
# run-before-after.sh BEFORE_BUILD AFTER_BUILD [RUNS]: the same measurements
# on two builds of ddl, alternating between them in one session, so that a
# restructuring can be shown to change nothing users pay for:
#   - start-up: `ddlrun -n 4 true` and `ddlrun -n 2 --nodes 2 --emulate true`
#     (two agents linked over loopback TCP: the link's handshake included),
#     wall time of RUNS starts each (default 20), min/median/max in ms;
#   - a 2-rank allreduce sweep, f32 sum, 8 B to 64 MiB (ddl-bench under
#     ddlrun -n 2; 2000 iterations up to 4 KiB, 20 above), best of RUNS/4
#     rounds (at least 3) per size, in us.
# Prints markdown tables for docs/benchmarks.md.  Run it on a quiet machine.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 BEFORE_BUILD AFTER_BUILD [RUNS]" >&2; exit 2; }
B=$(cd "$1" && pwd)
A=$(cd "$2" && pwd)
RUNS=${3:-20}
ROUNDS=$((RUNS / 4))
[ "$ROUNDS" -ge 3 ] || ROUNDS=3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export UCX_TLS=${UCX_TLS:-tcp,self,sm} DDL_ALLREDUCE_ALGO=${DDL_ALLREDUCE_ALGO:-auto}

ms() { echo $(($(date +%s%N) / 1000000)); }

startup() { # startup NAME ARGS...: RUNS starts of each build, alternating
    name=$1
    shift
    for i in $(seq "$RUNS"); do
        for side in before after; do
            d=$B
            [ $side = after ] && d=$A
            t0=$(ms)
            "$d/launcher/ddlrun" "$@" true >/dev/null 2>&1 || echo "# $side: ddlrun $* failed" >&2
            echo $(($(ms) - t0)) >>"$tmp/$name.$side"
        done
    done
}

stats() { # min median max of the numbers in a file
    sort -n "$1" | awk '{v[NR] = $1} END {printf "%d | %d | %d", v[1], v[int((NR + 1) / 2)], v[NR]}'
}

startup n4 -n 4
startup emu2 -n 2 --nodes 2 --emulate
echo "| command | build | min ms | median ms | max ms |"
echo "| --- | --- | ---: | ---: | ---: |"
for n in n4 emu2; do
    cmd="ddlrun -n 4 true"
    [ $n = emu2 ] && cmd="ddlrun -n 2 --nodes 2 --emulate true"
    for side in before after; do
        echo "| \`$cmd\` | $side | $(stats "$tmp/$n.$side") |"
    done
done

for r in $(seq "$ROUNDS"); do
    for side in before after; do
        d=$B
        [ $side = after ] && d=$A
        "$d/launcher/ddlrun" -n 2 "$d/bench/ddl-bench" allreduce -b 8 -e 4096 -f 8 -n 2000 \
            -w 200 -c 0 2>/dev/null | awk -v s=$side '$1 ~ /^[0-9]+$/ {print s, $1, $5}' >>"$tmp/sweep"
        "$d/launcher/ddlrun" -n 2 "$d/bench/ddl-bench" allreduce -b 32768 -e 67108864 -f 8 -n 20 \
            -w 3 -c 0 2>/dev/null | awk -v s=$side '$1 ~ /^[0-9]+$/ {print s, $1, $5}' >>"$tmp/sweep"
    done
done
echo
echo "| bytes | before best us | after best us | after/before |"
echo "| ---: | ---: | ---: | ---: |"
awk '{k = $2; if (!(($1, k) in best) || $3 < best[$1, k]) best[$1, k] = $3; sizes[k] = 1}
     END {for (k in sizes) printf "%d %s %s\n", k, best["before", k], best["after", k]}' \
    "$tmp/sweep" | sort -n |
    awk '{printf "| %d | %.2f | %.2f | %.2f |\n", $1, $2, $3, $3 / $2}'
