#!/bin/sh
# run-takeover.sh: the leader's node and the next one lost together:
# `ddlrun -n 5 --nodes 5 --emulate --min-nodes 3` of ft-probe, node0's and
# node1's process groups SIGKILLed 2 s after the first step; the time from
# the kill to node2's "takes over" line, to both other nodes following it,
# and to the first step of generation 1 (polled every 20 ms).  Several
# builds alternate, ROUNDS times (default 3): a change and the build before
# it, in the same run.
#
#   bench/run-takeover.sh BUILDDIR[,BUILDDIR...] [ROUNDS]
#
# Linux, no root, no Slurm.
set -eu
builds=${1:?usage: run-takeover.sh BUILDDIR[,BUILDDIR...] [ROUNDS]}
rounds=${2:-3}
tmp=$(mktemp -d /tmp/ddl-takeover.XXXXXX)
run=""
trap '[ -n "$run" ] && kill -KILL "$run" 2>/dev/null; rm -rf "$tmp"' EXIT
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(free -g | awk '/^Mem:/ {print $2}') GiB"
echo "| build | takes over | both follow | first step of generation 1 |"
echo "| --- | ---: | ---: | ---: |"
r=0
while [ $r -lt "$rounds" ]; do
    r=$((r + 1))
    for b in $(echo "$builds" | tr ',' ' '); do
        build=$(cd "$b" && pwd)
        log="$tmp/log"
        : >"$log"
        mkdir -p "$tmp/rt"
        DDL_RUNTIME_DIR="$tmp/rt" UCX_TLS=tcp,self timeout -k 5 60 "$build/launcher/ddlrun" -n 5 \
            --nodes 5 --emulate --min-nodes 3 --restarts 1 "$build/bench/ft-probe" >"$log" 2>&1 &
        run=$!
        i=0
        while ! grep -q "first-step gen 0" "$log" && [ $i -lt 600 ]; do
            sleep 0.05
            i=$((i + 1))
        done
        sleep 2
        g0=$(pgrep -f "ddl-agent serve --socket $tmp/rt/.*-node0" | head -1 || true)
        g1=$(pgrep -f "ddl-agent serve --socket $tmp/rt/.*-node1" | head -1 || true)
        t0=$(date +%s%N)
        [ -n "$g0" ] && [ -n "$g1" ] && kill -s KILL -- "-$g0" "-$g1"
        lead="" fol="" first=""
        while kill -0 "$run" 2>/dev/null && [ "$(ms "$t0")" -lt 30000 ]; do
            [ -z "$lead" ] && grep -q "node 2 (node2) takes over" "$log" && lead=$(ms "$t0")
            [ -z "$fol" ] && [ "$(grep -c "follows node 2" "$log")" -ge 2 ] && fol=$(ms "$t0")
            if grep -q "first-step gen 1" "$log"; then
                first=$(ms "$t0")
                break
            fi
            sleep 0.02
        done
        echo "| $b | ${lead:-?} ms | ${fol:-?} ms | ${first:-?} ms |"
        kill -INT "$run" 2>/dev/null || true
        wait "$run" 2>/dev/null || true
        run=""
        rm -rf "$tmp/rt"
    done
done
