#!/bin/sh
# run-join.sh: what the leader agent sends while a step of N nodes starts:
# the bytes its agent has written (/proc/PID/io wchar: links to the other
# agents, its Unix sockets, its log) and the write calls, from its start to
# 1 s after the first step, under `ddlrun -n N --nodes N --emulate
# --spares 1` of ft-probe (one rank per node, a spare so that the agents
# keep a roster for a takeover).  Several builds alternate per N: a change
# and the build before it, measured in the same run.
#
#   bench/run-join.sh BUILDDIR[,BUILDDIR...] [N...]   (default 16 32 48)
#
# Linux, no root, no Slurm; N emulated nodes are N agents and N workers on
# this machine.
set -eu
builds=${1:?usage: run-join.sh BUILDDIR[,BUILDDIR...] [N...]}
shift
[ $# -gt 0 ] || set -- 16 32 48
tmp=$(mktemp -d /tmp/ddl-join.XXXXXX)
run=""
trap '[ -n "$run" ] && kill -KILL "$run" 2>/dev/null; rm -rf "$tmp"' EXIT
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(free -g | awk '/^Mem:/ {print $2}') GiB"
echo "| build | nodes | leader agent: bytes written | write calls |"
echo "| --- | ---: | ---: | ---: |"
for n in "$@"; do
    for b in $(echo "$builds" | tr ',' ' '); do
        build=$(cd "$b" && pwd)
        log="$tmp/log"
        : >"$log"
        mkdir -p "$tmp/rt"
        DDL_RUNTIME_DIR="$tmp/rt" UCX_TLS=tcp,self timeout -k 5 180 "$build/launcher/ddlrun" \
            -n "$n" --nodes "$n" --emulate --spares 1 --restarts 1 "$build/bench/ft-probe" \
            >"$log" 2>&1 &
        run=$!
        i=0
        while ! grep -q "first-step gen 0" "$log" && [ $i -lt 1200 ] && kill -0 "$run" 2>/dev/null; do
            sleep 0.1
            i=$((i + 1))
        done
        sleep 1
        p=$(pgrep -f "ddl-agent serve --socket $tmp/rt/.*-node0" | head -1 || true)
        if [ -n "$p" ] && [ -r "/proc/$p/io" ]; then
            echo "| $b | $n | $(sed -n 's/^wchar: //p' "/proc/$p/io") | $(sed -n 's/^syscw: //p' "/proc/$p/io") |"
        else
            echo "| $b | $n | (the step did not start: $(tail -1 "$log")) | |"
        fi
        kill -INT "$run" 2>/dev/null || true
        wait "$run" 2>/dev/null || true
        run=""
        rm -rf "$tmp/rt"
    done
done
