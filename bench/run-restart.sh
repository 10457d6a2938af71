#!/bin/sh
# run-restart.sh: how fast a failure is detected and the job runs again
# ddlrun --restarts on this machine, then `srun --ddl` and
# Slurm's own detection on the namespace cluster (when run as root with
# Slurm).
#
#   bench/run-restart.sh BUILDDIR [RUNS]        (default 5)
#
# bench/ft-probe runs 8-byte allreduces every 10 ms; a rank's worker or a
# node is then failed from outside:
#   kill   SIGKILL of rank 1's worker;
#   hang   SIGSTOP of rank 1's worker, found by the hang timeout (1 s; the
#          timeout is part of the time);
#   crash  (srun --ddl -N3 --ntasks-per-node=1 --ddl-spares=1) node n2
#          crashed: `cluster.sh crash n2 silent` (link down, then every
#          process killed: no FIN leaves the node, only the heartbeats'
#          silence tells), or `crash n2` (killed first: the kernel closes
#          its connections); n3, the spare, takes n2's place.  And n1, the
#          leader's node, crashed silently: n2 takes over as the leader
#          ("detected" is then the new leader's decision).
#   ddlrun --emulate (-n 2 --nodes 2 --spares 1): node1's process group
#          killed (its links close) or stopped (SIGSTOP: its links go
#          silent), and node0's, the leader's, stopped.
# Columns: detected = from the failure to the line naming it (the leader
# agent's; DDL_LOG_TIME stamps agents' lines); every survivor = to
# the last agent's line saying it knows (DDL_LOG_LEVEL=info); first step =
# to the new generation's first allreduce (ft-probe's own clock), which
# includes stopping the other ranks and the new generation's start (no
# backoff before a first restart).
#   warm vs cold (ddlrun --emulate -n 2 --nodes 2 --spares 1, rank 1's
#          worker killed, or node1's process group): from the leader's
#          decision to the first step of generation 1, ft-probe restarted
#          (cold) or kept and rejoined (warm, FT_PROBE_WARM=1), alternating in
#          the same run.  RESTART_WARM_ONLY=1: only these rows.
#   torch warm vs cold (RESTART_TORCH=1, only with RESTART_WARM_ONLY=1 or in
#          the full run; needs /usr/bin/python3 with torch and Fashion-MNIST):
#          examples/torch/fmnist_ddp.py under ddlrun -n 4 --restarts 2, rank
#          1 killing itself 3 steps after the first checkpoint
#          (--die-after-checkpoint 1), without and with --warm-restart,
#          alternating; from the agent's decision to generation 1's first
#          step (--step-times).
#   detection (RESTART_DETECT_ONLY=1, only this): node1 or node0 (the
#          leader) of ddlrun --emulate stopped silently, RUNS times each,
#          under the conditions in RESTART_DETECT_ROWS (default all, in this
#          order): idle; congested (as root: the step in a network namespace
#          whose loopback is shaped to 8 Mbit/s and shared with 2 bulk TCP
#          flows, bench/congest.py: delay and jitter without netem; their
#          round trips are printed); jitter (as root: the step in a network
#          namespace whose loopback packets bench/link-delay holds for
#          RESTART_JITTER="DELAY_MS JITTER_MS", default "10 10": netem's
#          delay and jitter through a netfilter queue); saturated (4 busy
#          loops per CPU at the agents' priority); fixed (DDL_DETECTOR=fixed:
#          the node timeout, as before the adaptive detector).  p50, p99
#          (the ceil(0.99 N)-th value: the maximum below 100 runs) and max.  RESTART_SOAK_S=S
#          adds, with the CPUs saturated (and the links jittered where the
#          jitter rows can run), S seconds of ddlrun --emulate -n 3 --nodes 3
#          with nothing failed: every node-lost line is a false detection.
# srun --ddl rows also: the same worker kill and silent crash of n2 with
# FT_PROBE_WARM=1 (warm restart in place), and "decision to first step":
# from the leader's decision to generation 1's first step.  The silent
# crashes come 1.5 s after generation 0's first step (links past their
# first 16 beats).  RESTART_SRUN_ONLY=1: only the srun --ddl rows.
# Slurm: `srun -N2 -n2 sleep` with the task on n2 killed (SIGKILL), and n2
# crashed (tests/slurm/cluster.sh crash: every process killed, link down):
# from the kill to srun's first line about it.  Medians, minimum, maximum.
set -eu
build=$(cd "${1:?usage: run-restart.sh BUILDDIR [RUNS]}" && pwd)
runs=${2:-5}
top=$(cd "$(dirname "$0")/.." && pwd)
ddlrun="$build/launcher/ddlrun"
probe="$build/bench/ft-probe"
tmp=$(mktemp -d)
in_ns="" # a command prefix that runs ddlrun in another network namespace
trap 'hogs stop 2>/dev/null; [ -s "$tmp/delayer" ] && kill "$(cat "$tmp/delayer")" 2>/dev/null;
    [ -n "$in_ns" ] && ip netns del ddldetect; rm -rf "$tmp"' EXIT

now() { date +%s%N; }

# stamp: prefix each line of stdin with the time it was read (ns).
stamp() { while IFS= read -r l; do printf '%s %s\n' "$(now)" "$l"; done; }

# worker_pid RANK: the pid of ft-probe's worker with DDL_RANK=RANK.
worker_pid() {
    for p in $(pgrep -f "ft-probe 50"); do
        case "$(cat /proc/"$p"/comm 2>/dev/null)" in ddl-launch | ddlrun | timeout) continue ;; esac
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "DDL_RANK=$1" && { echo "$p"; return; }
    done
}

# wait_gen0: until ft-probe's generation 0 has run its first step (in
# $tmp/log), and half a second more.
wait_gen0() {
    k=0
    while ! grep -q 'first-step gen 0' "$tmp/log" 2>/dev/null && [ $k -lt 300 ]; do
        sleep 0.1
        k=$((k + 1))
    done
    sleep 0.5
}

# row NAME FILE: median, min, max of the numbers (ms) in FILE.
row() {
    sort -n "$2" | awk -v name="$1" '{ t[NR] = $1 }
        END { if (NR) printf "| %-52s | %7.0f | %7.0f | %7.0f | %d |\n", name, t[int((NR + 1) / 2)], t[1], t[NR], NR }'
}

# ddl_case NAME SIGNAL [DDLRUN-OPTIONS]
ddl_case() {
    name=$1 sig=$2
    shift 2
    : >"$tmp/det"
    : >"$tmp/first"
    i=0
    while [ $i -lt "$runs" ]; do
        : >"$tmp/log" # wait_gen0 must not find the last run's first step
        { timeout 120 "$ddlrun" -n 4 --restarts 1 "$@" "$probe" 50 2>&1 | stamp >"$tmp/log"; } &
        job=$!
        wait_gen0
        p=$(worker_pid 1)
        [ -n "$p" ] || { echo "run-restart: no worker for rank 1" >&2; exit 1; }
        t0=$(now)
        kill -s "$sig" "$p"
        wait $job || true
        td=$(awk '/generation 0: rank 1 / { print $1; exit }' "$tmp/log")
        tf=$(awk '/first-step gen 1 at/ { print $NF; exit }' "$tmp/log")
        [ -n "$td" ] && echo $(((td - t0) / 1000000)) >>"$tmp/det"
        [ -n "$tf" ] && echo $(((tf - t0) / 1000000)) >>"$tmp/first"
        i=$((i + 1))
    done
    row "ddlrun: $name, detected" "$tmp/det"
    row "ddlrun: $name, first step of generation 1" "$tmp/first"
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $runs runs each, ddlrun -n 4"
detect=${RESTART_DETECT_ONLY:-0}
if [ "$detect" != 1 ]; then
    echo "| failure | median ms | min ms | max ms | runs |"
    echo "| --- | ---: | ---: | ---: | ---: |"
fi
srun_only=${RESTART_SRUN_ONLY:-0}
if [ "${RESTART_WARM_ONLY:-0}" != 1 ] && [ "$detect" != 1 ] && [ "$srun_only" != 1 ]; then
    ddl_case "worker SIGKILL" KILL
    ddl_case "worker SIGSTOP, --hang-timeout 1" STOP --hang-timeout 1
fi

# agent_times WHO: from the agents' lines in $tmp/log (they carry their own
# time, DDL_LOG_TIME: [seconds.ms]), the ms from $t0 to the leader's
# decision naming WHO (a sed pattern), to the last agent's knowing it, and
# (ft-probe's clock) to generation 1's first step, appended to $tmp/det,
# $tmp/all and $tmp/first.
agent_times() {
    td=$(sed -n "s/^[0-9]* \\[\\([0-9]*\\)\\.\\([0-9]*\\)\\] ddl-agent: generation 0: .*$1.*/\\1\\2/p" "$tmp/log" | head -1)
    ta=$(sed -n 's/^[0-9]* \[\([0-9]*\)\.\([0-9]*\)\] ddl-agent: node [0-9]*: generation 0: .*/\1\2/p' "$tmp/log" | sort -n | tail -1)
    tf=$(awk '/first-step gen 1 at/ { print $NF; exit }' "$tmp/log")
    [ -n "$td" ] && echo $((td - t0 / 1000000)) >>"$tmp/det"
    [ -n "$ta" ] && [ -n "$td" ] && echo $((ta > td ? ta - t0 / 1000000 : td - t0 / 1000000)) >>"$tmp/all"
    [ -n "$tf" ] && echo $(((tf - t0) / 1000000)) >>"$tmp/first"
    [ -n "$tf" ] && [ -n "$td" ] && echo $((tf / 1000000 - td)) >>"$tmp/dec"
}

# ddl_emu_case NAME ACTION: ddlrun --emulate, 2 nodes of 1 rank and a spare;
# ACTION kill (SIGKILL to node1's process group: its links close), stop
# (SIGSTOP to it: its links go silent) or stop-leader (the same to node0).
ddl_emu_case() {
    name=$1 action=$2
    : >"$tmp/det"
    : >"$tmp/all"
    : >"$tmp/first"
    i=0
    while [ $i -lt "$runs" ]; do
        # shellcheck disable=SC2086 # in_ns: several words or none
        : >"$tmp/log" # wait_gen0 must not find the last run's first step
        { DDL_LOG_TIME=1 DDL_LOG_LEVEL=info UCX_TLS=tcp,self timeout 120 $in_ns "$ddlrun" -n 2 \
            --nodes 2 --emulate --spares 1 --restarts 1 "$probe" 50 2>&1 | stamp >"$tmp/log"; } &
        job=$!
        wait_gen0
        # detection rows: links past their first 16 beats (a young link allows 6)
        [ "$detect" = 1 ] && sleep 1.5
        k=$([ "$action" = stop-leader ] && echo 0 || echo 1)
        g=$(pgrep -f "ddl-agent serve --socket .*-node$k.sock" | head -1)
        [ -n "$g" ] || { echo "run-restart: no agent for node $k" >&2; exit 1; }
        t0=$(now)
        kill -s "$([ "$action" = kill ] && echo KILL || echo STOP)" -- "-$g"
        wait $job || true
        agent_times '\(node 1 (node1)\|node 0 (node0)\)'
        i=$((i + 1))
    done
    row "ddlrun --emulate: $name, detected by the leader" "$tmp/det"
    row "ddlrun --emulate: $name, known on every survivor" "$tmp/all"
    row "ddlrun --emulate: $name, first step of generation 1" "$tmp/first"
}
# dec_to_first FILE: the ms from the agent's decision ending generation 0
# (its DDL_LOG_TIME stamp, after stamp()'s if any) to generation 1's first
# step (the program's clock) in $tmp/log, appended to FILE.
dec_to_first() {
    td=$(sed -n 's/^\([0-9]* \)\{0,1\}\[\([0-9]*\)\.\([0-9]*\)\] ddl-agent: generation 0: .*/\2\3/p' "$tmp/log" | head -1)
    tf=$(awk '/first-step gen 1 at/ { print $NF; exit }' "$tmp/log")
    [ -n "$td" ] && [ -n "$tf" ] && echo $((tf / 1000000 - td)) >>"$1"
    return 0
}

# warm_case NAME ACTION: ddlrun --emulate -n 2 --nodes 2 --spares 1, cold
# (ft-probe as is) and warm (FT_PROBE_WARM=1: ddl_warm_enable, ddl_rejoin)
# in turn, the same runs; ACTION worker (SIGKILL to rank 1's worker) or node
# (SIGKILL to node1's process group, the spare takes its place).  Time from
# the leader's decision (its line, DDL_LOG_TIME) to the first step of
# generation 1 (ft-probe's clock).
warm_case() {
    name=$1 action=$2
    : >"$tmp/cold"
    : >"$tmp/warm"
    i=0
    while [ $i -lt "$runs" ]; do
        for mode in cold warm; do
            : >"$tmp/log" # wait_gen0 must not find the last run's first step
            { FT_PROBE_WARM=$([ $mode = warm ] && echo 1 || echo 0) DDL_LOG_TIME=1 \
                DDL_LOG_LEVEL=info UCX_TLS=tcp,self timeout 120 "$ddlrun" -n 2 --nodes 2 \
                --emulate --spares 1 --restarts 1 "$probe" 50 2>&1 | stamp >"$tmp/log"; } &
            job=$!
            wait_gen0
            if [ "$action" = worker ]; then
                p=$(worker_pid 1)
                [ -n "$p" ] && kill -s KILL "$p"
            else
                g=$(pgrep -f "ddl-agent serve --socket .*-node1.sock" | head -1)
                [ -n "$g" ] && kill -s KILL -- "-$g"
            fi
            wait $job || true
            dec_to_first "$tmp/$mode"
        done
        i=$((i + 1))
    done
    row "ddlrun --emulate: $name, cold: decision to first step" "$tmp/cold"
    row "ddlrun --emulate: $name, warm: decision to first step" "$tmp/warm"
}
if [ "$detect" != 1 ] && [ "$srun_only" != 1 ]; then
    warm_case "worker SIGKILL" worker
    warm_case "node1 killed, spare node2" node
fi

# torch_case: fmnist_ddp.py (DDP with ddl's hook) on 4 ranks, rank 1 killed
# after the first checkpoint, cold and --warm-restart in turn; from the
# agent's decision to generation 1's first step.
torch_case() {
    py=/usr/bin/python3 data=/usr/share/datasets/fashion-mnist
    if ! PYTHONPATH="$build/python" $py -c 'import torch, ddl' 2>/dev/null || [ ! -r "$data/train-images-idx3-ubyte.gz" ]; then
        echo "# torch rows skipped: no $py with torch and the ddl package, or no Fashion-MNIST"
        return 0
    fi
    : >"$tmp/cold"
    : >"$tmp/warm"
    i=0
    while [ $i -lt "$runs" ]; do
        for mode in cold warm; do
            rm -rf "$tmp/ck"
            PYTHONPATH="$build/python" DDL_ALLREDUCE_ALGO=rd DDL_LOG_TIME=1 DDL_LOG_LEVEL=info \
                timeout 300 "$ddlrun" -n 4 --restarts 2 --checkpoint-dir "$tmp/ck" $py \
                "$top/examples/torch/fmnist_ddp.py" --epochs 1 --train-samples 3840 --test-samples 1000 \
                --checkpoint-every 10 --die-after-checkpoint 1 --step-times --data "$data" \
                $([ $mode = warm ] && echo --warm-restart) >"$tmp/log" 2>&1 || true
            dec_to_first "$tmp/$mode"
        done
        i=$((i + 1))
    done
    row "ddlrun -n 4: fmnist_ddp.py rank 1 killed, cold: decision to first step" "$tmp/cold"
    row "ddlrun -n 4: fmnist_ddp.py rank 1 killed, warm: decision to first step" "$tmp/warm"
}
if [ "${RESTART_TORCH:-0}" = 1 ] && [ "$detect" != 1 ] && [ "$srun_only" != 1 ]; then
    torch_case
fi
[ "${RESTART_WARM_ONLY:-0}" = 1 ] && exit 0

# hogs start|stop: 4 busy loops per CPU, at the agents' priority
hogs() {
    [ "$1" = stop ] && [ ! -s "$tmp/hogs" ] && return 0
    if [ "$1" = start ]; then
        : >"$tmp/hogs"
        for _ in $(seq $(($(nproc) * 4))); do
            sh -c 'while :; do :; done' &
            echo $! >>"$tmp/hogs"
        done
    else
        kill $(cat "$tmp/hogs") 2>/dev/null || true
        for p in $(cat "$tmp/hogs"); do wait "$p" 2>/dev/null || true; done
        : >"$tmp/hogs"
    fi
}

# congest start|stop: network namespace ddldetect, its loopback shaped to
# 8 Mbit/s (MTU 1500) and shared with 2 bulk flows (bench/congest.py)
congest() {
    if [ "$1" = start ]; then
        ip netns add ddldetect
        ip netns exec ddldetect ip link set lo mtu 1500 up
        ip netns exec ddldetect tc qdisc add dev lo root handle 1: htb default 1
        ip netns exec ddldetect tc class add dev lo parent 1: classid 1:1 htb rate 8mbit burst 15k
        ip netns exec ddldetect python3 "$top/bench/congest.py" flood 2 32768 &
        echo $! >"$tmp/flood"
        sleep 2
        in_ns="ip netns exec ddldetect"
        echo "# congested: $(ip netns exec ddldetect python3 "$top/bench/congest.py" rtt 50)"
    else
        kill "$(cat "$tmp/flood")" 2>/dev/null || true
        wait "$(cat "$tmp/flood")" 2>/dev/null || true
        ip netns del ddldetect
        in_ns=""
    fi
}
# jitter start|stop: network namespace ddldetect whose loopback packets are
# held by bench/link-delay for RESTART_JITTER ("DELAY_MS JITTER_MS",
# default "10 10": 0-20 ms each way, uniform) through a netfilter queue,
# netem's "delay 10ms 10ms" where the kernel lacks netem.
jitter() {
    if [ "$1" = start ]; then
        # shellcheck disable=SC2086 # two numbers
        set -- $jitter_ms
        ip netns add ddldetect
        ip netns exec ddldetect ip link set lo up
        ip netns exec ddldetect iptables -A OUTPUT -o lo -j NFQUEUE --queue-num 17
        ip netns exec ddldetect "$build/bench/link-delay" 17 "$1" "$2" 2>"$tmp/link-delay" &
        echo $! >"$tmp/delayer"
        sleep 0.5
        in_ns="ip netns exec ddldetect"
        echo "# jittered links (delay $1 ms, jitter $2 ms each way): $(ip netns exec ddldetect python3 "$top/bench/congest.py" rtt 50)"
    else
        kill "$(cat "$tmp/delayer")" 2>/dev/null || true
        wait "$(cat "$tmp/delayer")" 2>/dev/null || true
        echo "# $(cat "$tmp/link-delay")"
        ip netns del ddldetect
        in_ns=""
    fi
}
jitter_ms=${RESTART_JITTER:-10 10}
rows=${RESTART_DETECT_ROWS:-idle congested jitter saturated fixed}
want() { case " $rows " in *" $1 "*) return 0 ;; esac; return 1; }

# pct NAME FILE: p50, p99 (ceil(0.99 N)-th), max of the numbers in FILE
pct() {
    sort -n "$2" | awk -v name="$1" '{ t[NR] = $1 }
        END { if (NR) { k = int(NR * 0.99); if (k < NR * 0.99) k++;
              printf "| %-64s | %7.0f | %7.0f | %7.0f | %d |\n", name, t[int((NR + 1) / 2)], t[k], t[NR], NR } }'
}

# soak SECONDS: ddlrun --emulate -n 3 --nodes 3 (ft-probe, allreduces every
# 10 ms) with nothing failed, run after run until SECONDS have passed;
# prints the runs and the node-lost lines (false detections).
soak() {
    end=$(($(date +%s) + $1))
    n=0 lost=0
    while [ "$(date +%s)" -lt "$end" ]; do
        left=$((end - $(date +%s)))
        # shellcheck disable=SC2086 # in_ns: several words or none
        { UCX_TLS=tcp,self DDL_DETECTOR=adaptive timeout -s TERM "$left" $in_ns "$ddlrun" -n 3 --nodes 3 --emulate --restarts 5 \
            "$probe" 50 >"$tmp/soak.log" 2>&1; } || true
        n=$((n + 1))
        lost=$((lost + $(grep -c 'node-lost' "$tmp/soak.log" || true)))
        grep 'node-lost' "$tmp/soak.log" | head -3 >&2 || true
    done
    echo "# soak: $1 s of ddlrun --emulate -n 3 --nodes 3 with the CPUs saturated${in_ns:+ and the links jittered}, $n run(s): $lost node-lost line(s) (false detections)"
}

if [ "$detect" = 1 ]; then
    echo "| silent node loss (ddlrun --emulate -n 2 --nodes 2 --spares 1) | p50 ms | p99 ms | max ms | runs |"
    echo "| --- | ---: | ---: | ---: | ---: |"
    row() { pct "$@"; }
    if want idle; then
        ddl_emu_case "node1 stopped, idle" stop
        ddl_emu_case "node0 (the leader) stopped, idle" stop-leader
    fi
    if want congested && [ "$(id -u)" = 0 ] && command -v tc >/dev/null; then
        congest start
        ddl_emu_case "node1 stopped, congested links" stop
        ddl_emu_case "node0 (the leader) stopped, congested links" stop-leader
        congest stop
    elif want congested; then
        echo "# congested rows skipped: they need root and tc (iproute2)"
    fi
    can_jitter=0
    [ "$(id -u)" = 0 ] && [ -x "$build/bench/link-delay" ] && command -v iptables >/dev/null && can_jitter=1
    if want jitter && [ $can_jitter = 1 ]; then
        jitter start
        ddl_emu_case "node1 stopped, jittered links" stop
        ddl_emu_case "node0 (the leader) stopped, jittered links" stop-leader
        jitter stop
    elif want jitter; then
        echo "# jitter rows skipped: they need root, iptables and bench/link-delay (libnetfilter-queue-dev)"
    fi
    if want saturated; then
        hogs start
        ddl_emu_case "node1 stopped, CPUs saturated" stop
        ddl_emu_case "node0 (the leader) stopped, CPUs saturated" stop-leader
        hogs stop
    fi
    if [ "${RESTART_SOAK_S:-0}" -gt 0 ]; then
        # the soak: CPUs saturated, and links jittered where they can be
        [ $can_jitter = 1 ] && jitter start
        hogs start
        soak "$RESTART_SOAK_S"
        hogs stop
        [ $can_jitter = 1 ] && jitter stop
    fi
    if want fixed; then
        export DDL_DETECTOR=fixed
        ddl_emu_case "node1 stopped, idle, DDL_DETECTOR=fixed" stop
    fi
    exit 0
fi

if [ "$srun_only" != 1 ]; then
    ddl_emu_case "node1 killed (FIN), spare node2" kill
    ddl_emu_case "node1 stopped (silent), spare node2" stop
    ddl_emu_case "node0 (the leader) stopped (silent), spare node2" stop-leader
fi

if [ "$(id -u)" != 0 ] || ! command -v srun >/dev/null; then
    echo "# Slurm rows skipped: needs root and Slurm (tests/slurm/cluster.sh)"
    exit 0
fi
dir=/var/tmp/ddl-restart.$$
mkdir -p "$dir"
if ! DDL_CLUSTER_SHARE="$build $top" sh "$top/tests/slurm/cluster.sh" start "$dir" 2 >/dev/null; then
    echo "# Slurm rows skipped: the namespace cluster did not start"
    exit 0
fi
trap 'sh "$top/tests/slurm/cluster.sh" stop "$dir" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
export SLURM_CONF="$dir/slurm.conf"

# slurm_case NAME ACTION: srun -N2 -n2 sleep, then ACTION on n2; time to srun's first line
slurm_case() {
    name=$1 action=$2
    : >"$tmp/det"
    i=0
    while [ $i -lt "$runs" ]; do
        [ "$action" = crash ] && { sh "$top/tests/slurm/cluster.sh" stop "$dir" >/dev/null 2>&1; mkdir -p "$dir";
            DDL_CLUSTER_SHARE="$build $top" sh "$top/tests/slurm/cluster.sh" start "$dir" 2 >/dev/null; }
        { timeout 120 srun -N2 -n2 --kill-on-bad-exit=1 sleep 300 2>&1 | stamp >"$tmp/log"; } &
        job=$!
        k=0 p=""
        while [ -z "$p" ] && [ $k -lt 300 ]; do
            sleep 0.1
            p=$(ip netns pids ddln2 2>/dev/null | while read -r q; do
                [ "$(cat /proc/"$q"/comm 2>/dev/null)" = sleep ] && echo "$q"; done | head -1)
            k=$((k + 1))
        done
        [ -n "$p" ] || { echo "run-restart: no task on n2" >&2; exit 1; }
        sleep 0.5
        t0=$(now)
        if [ "$action" = crash ]; then
            sh "$top/tests/slurm/cluster.sh" crash "$dir" n2 >/dev/null 2>&1
        else
            kill -KILL "$p"
        fi
        k=0
        while [ ! -s "$tmp/log" ] && [ $k -lt 1200 ]; do
            sleep 0.05
            k=$((k + 1))
        done
        td=$(awk 'NR == 1 { print $1 }' "$tmp/log")
        [ -n "$td" ] && echo $(((td - t0) / 1000000)) >>"$tmp/det"
        kill "$job" 2>/dev/null || true
        wait "$job" 2>/dev/null || true
        scancel --user=root >/dev/null 2>&1 || true
        i=$((i + 1))
    done
    row "Slurm: $name, srun's first line about it" "$tmp/det"
}
if [ "$srun_only" != 1 ]; then
    slurm_case "task SIGKILL (srun --kill-on-bad-exit)" kill
    slurm_case "node n2 crashed (SlurmdTimeout=10)" crash
fi

# srun --ddl on 3 nodes (one task each), n3 a spare; the plugin of this build.
sh "$top/tests/slurm/cluster.sh" stop "$dir" >/dev/null 2>&1
conf="$tmp/ddl.conf"
printf 'hang_timeout_min = 1\n' >"$conf"
restart_cluster() {
    sh "$top/tests/slurm/cluster.sh" stop "$dir" >/dev/null 2>&1
    mkdir -p "$dir"
    echo "required $build/plugins/.libs/spank_ddl.so config=$conf launch=$build/launcher/ddl-launch" \
        >"$dir/plugstack.conf"
    DDL_CLUSTER_SHARE="$build $top $tmp" sh "$top/tests/slurm/cluster.sh" start "$dir" 3 >/dev/null
}
restart_cluster || { echo "# srun --ddl rows skipped: the cluster did not start"; exit 0; }
crashed=0

# ddl_slurm_case NAME ACTION [SRUN-OPTIONS]: ACTION kill, hang, crash or crash-silent
ddl_slurm_case() {
    name=$1 action=$2
    shift 2
    : >"$tmp/det"
    : >"$tmp/all"
    : >"$tmp/first"
    : >"$tmp/dec"
    i=0
    while [ $i -lt "$runs" ]; do
        # a crash of an earlier run or case left a node down
        case $action:$crashed in crash*|*:1) restart_cluster; crashed=0 ;; esac
        : >"$tmp/log" # wait_gen0 must not find the last run's first step
        { UCX_TLS=tcp,self DDL_LOG_TIME=1 DDL_LOG_LEVEL=info timeout 120 srun --no-kill \
            --mpi=pmix -N3 --ntasks-per-node=1 --ddl --ddl-restarts=1 --ddl-spares=1 "$@" \
            "$probe" 50 2>&1 | stamp >"$tmp/log"; } &
        job=$!
        wait_gen0
        # the silent crashes time the detector: links past their first 16
        # beats (a young link allows 6), as in the detection rows
        case $action in crash-*) sleep 1.5 ;; esac
        t0=$(now)
        case $action in crash*) crashed=1 ;; esac
        case $action in
        crash) sh "$top/tests/slurm/cluster.sh" crash "$dir" n2 >/dev/null 2>&1 ;;
        crash-silent) sh "$top/tests/slurm/cluster.sh" crash "$dir" n2 silent >/dev/null 2>&1 ;;
        crash-leader) sh "$top/tests/slurm/cluster.sh" crash "$dir" n1 silent >/dev/null 2>&1 ;;
        *)
            p=$(ip netns pids ddln2 2>/dev/null | while read -r q; do
                case "$(cat /proc/"$q"/comm 2>/dev/null)" in ft-probe | lt-ft-probe) echo "$q" ;; esac
            done | head -1)
            [ -n "$p" ] || { echo "run-restart: no worker on n2" >&2; exit 1; }
            kill -s "$([ "$action" = hang ] && echo STOP || echo KILL)" "$p" ;;
        esac
        wait $job || true
        agent_times '\(rank 1 on\|node 1 (n2)\|node 0 (n1)\)'
        scancel --user=root >/dev/null 2>&1 || true
        i=$((i + 1))
    done
    row "srun --ddl: $name, detected by the leader" "$tmp/det"
    row "srun --ddl: $name, known on every survivor" "$tmp/all"
    row "srun --ddl: $name, first step of generation 1" "$tmp/first"
    row "srun --ddl: $name, decision to first step" "$tmp/dec"
}
ddl_slurm_case "worker SIGKILL" kill
ddl_slurm_case "worker SIGSTOP, --ddl-hang-timeout=1" hang --ddl-hang-timeout=1
ddl_slurm_case "node n2 crashed, killed first (FIN), spare n3" crash
ddl_slurm_case "node n2 crashed, link down first, spare n3" crash-silent
ddl_slurm_case "node n1 (the leader) crashed, link down first, spare n3" crash-leader
# warm restart in place (ft-probe's FT_PROBE_WARM=1: ddl_warm_enable, ddl_rejoin)
ddl_slurm_case "worker SIGKILL, warm" kill --export=ALL,FT_PROBE_WARM=1
ddl_slurm_case "node n2 crashed, link down first, spare n3, warm" crash-silent \
    --export=ALL,FT_PROBE_WARM=1
