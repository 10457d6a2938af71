#!/bin/sh
# t0006-topo: topology and affinity end to end.  `ddl-agent topo` on this
# machine (a CPU-only placement when it has no GPU, within this process's
# CPUs) and on a real machine's XML export (table and --json); `ddlrun`
# binds its ranks: with --bind auto the two workers of `ddlrun -n 2` run on
# different cores (read from /proc/PID/status of the workers, found through
# `ddl-agent status`), --bind none changes nothing, --bind LIST follows the
# list, a user's OMP_NUM_THREADS wins and is reported once; bad usage.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

XML="$top_srcdir/tests/data/topologies/g4dnmetal.xml"
unset OMP_NUM_THREADS UCX_NET_DEVICES NCCL_IB_HCA NCCL_SOCKET_IFNAME CUDA_DEVICE_ORDER \
    SLURM_STEP_GPUS CUDA_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES GPU_DEVICE_ORDINAL DDL_BIND_CPUS

# expand LIST: "0-2,5" -> "0 1 2 5"
expand() {
    echo "$1" | tr ',' '\n' |
        awk -F- 'NF { hi = (NF > 1) ? $2 : $1; for (i = $1; i <= hi; i++) printf "%d ", i }'
}
# within A B: every CPU of list A is in list B
within() {
    for c in $(expand "$1"); do
        case " $(expand "$2")" in *" $c "*) ;; *) return 1 ;; esac
    done
    return 0
}
cpus_of() { awk '/^Cpus_allowed_list:/ {print $2}' "/proc/$1/status" 2>/dev/null; }
env_of() { tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n "s/^$2=//p"; }

MINE=$(cpus_of $$)
NCPU=$(expand "$MINE" | wc -w)
NGPU=0
for d in /sys/bus/pci/devices/*; do
    [ -r "$d/class" ] || continue
    v=$(cat "$d/vendor") c=$(cut -c1-6 "$d/class")
    case "$v:$c" in 0x10de:0x0300 | 0x10de:0x0302 | 0x10de:0x0380 | 0x10de:0x1200 | \
        0x1002:0x0300 | 0x1002:0x0302 | 0x1002:0x0380 | 0x1002:0x1200) NGPU=$((NGPU + 1)) ;;
    esac
done
t_diag "this machine: CPUs $MINE ($NCPU), $NGPU GPU(s)"

# ---------------------------------------------------------------- ddl-agent topo, live
if [ "$NGPU" -eq 0 ]; then
    t_run 30 "$DDL_AGENT" topo --ranks 2
    t_is $? 0 "ddl-agent topo --ranks 2 exits 0 on this GPU-less machine"
    t_like "$T_TMP/out" "^GPUs \(numbered in PCI bus-id order.*\): none$" "it lists no GPU"
    t_like "$T_TMP/out" "no GPU on this machine: ranks are spread over the NUMA nodes" \
        "it says the placement is CPU-only"
else
    t_run 30 "$DDL_AGENT" topo --ranks 2 --gpus ""
    t_is $? 0 "ddl-agent topo --ranks 2 --gpus '' exits 0 ($NGPU GPUs here, none granted)"
    t_like "$T_TMP/out" "^[0-9]+ +0000:" "it lists the GPUs"
    t_like "$T_TMP/out" "grants no GPU: ranks are placed on CPUs only" \
        "it says the placement is CPU-only"
fi
t_like "$T_TMP/out" "^source: this machine \(hwloc [0-9.]+\)$" "it names the source"
t_like "$T_TMP/out" "^nvml: " "it says what NVML gave"
t_is "$(grep -cE '^[01] +- +- ' "$T_TMP/out")" 2 "two rank rows without GPU"
r0=$(awk '$1 == "0" && $2 == "-" {print $NF}' "$T_TMP/out")
r1=$(awk '$1 == "1" && $2 == "-" {print $NF}' "$T_TMP/out")
t_ok $(within "$r0" "$MINE" && within "$r1" "$MINE"; echo $?) \
    "both ranks' PUs ($r0, $r1) are within this process's CPUs ($MINE)"
if [ "$NCPU" -ge 2 ]; then
    t_ok $(! within "$r0" "$r1" && ! within "$r1" "$r0"; echo $?) "... and different"
else
    t_skip "only $NCPU CPU allowed: two ranks cannot get different cores"
fi
t_like "$T_TMP/out" "^rank 0: cpus=$r0 .*OMP_NUM_THREADS=[0-9]+" \
    "the environment section gives rank 0 its CPUs and OMP_NUM_THREADS"

# ---------------------------------------------------------------- ddl-agent topo, XML
t_run 30 "$DDL_AGENT" topo --input "$XML" --ranks 8
t_is $? 0 "ddl-agent topo --input g4dnmetal.xml --ranks 8 exits 0"
t_like "$T_TMP/out" "^source: .*/g4dnmetal.xml " "it names the XML file"
t_like "$T_TMP/out" "^machine: 2 packages, 2 NUMA nodes, 48 cores, 96 PUs" "2 sockets, 48 cores"
t_is "$(grep -cE '^[0-7] +0000:[0-9a-f:.]+ +10de:1eb8 ' "$T_TMP/out")" 8 "8 Tesla T4 listed"
t_like "$T_TMP/out" "^0 +0000:c5:00\.0 +1d0f:efa0 +high-speed +rdmap197s0 " "EFA is high-speed"
t_like "$T_TMP/out" "^1 +0000:c6:00\.0 +1d0f:ec20 +ethernet +eth0 " "ENA is Ethernet"
t_is "$(grep -cE '^[0-7] +[0-7] +0000:[0-9a-f]{2}:00\.0 +rdmap197s0 ' "$T_TMP/out")" 8 \
    "8 rank rows, every rank on EFA"
t_like "$T_TMP/out" "^0 +0 +0000:18:00\.0 +rdmap197s0 +machine +0 " \
    "rank 0: GPU 0000:18:00.0, EFA on the other socket, NUMA 0"
t_like "$T_TMP/out" "^7 +7 +0000:f5:00\.0 +rdmap197s0 +numa +1 " \
    "rank 7: GPU 0000:f5:00.0, EFA in its NUMA node 1"
c4=$(awk '$1 == "4" && $3 == "0000:e7:00.0" {print $7}' "$T_TMP/out")
t_ok $([ -n "$c4" ] && within "$c4" "24-47"; echo $?) "rank 4's cores ($c4) are on socket 1 (24-47)"
env3="CUDA_VISIBLE_DEVICES=3 CUDA_DEVICE_ORDER=PCI_BUS_ID .*"
env3="${env3}UCX_NET_DEVICES=rdmap197s0:1 NCCL_IB_HCA==rdmap197s0:1 "
t_like "$T_TMP/out" "^rank 3: cpus=[0-9,-]+ $env3" \
    "rank 3's environment: its GPU and the EFA device"
t_like "$T_TMP/out" "ranks 0-3: no high-speed network adapter in the package of their GPU" \
    "the cross-socket NIC of ranks 0-3 is reported"

t_run 30 "$DDL_AGENT" topo --input "$XML" --ranks 8 --json
t_is $? 0 "... --json exits 0"
if command -v python3 >/dev/null; then
    python3 - "$T_TMP/out" >"$T_TMP/py" 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["placement"]["ranks"]
assert d["gpu_order"] == "pci_bus_id", d["gpu_order"]
assert [g["pci"] for g in d["gpus"]] == ["0000:18:00.0", "0000:19:00.0", "0000:35:00.0",
    "0000:36:00.0", "0000:e7:00.0", "0000:e8:00.0", "0000:f4:00.0", "0000:f5:00.0"]
assert len(r) == 8, len(r)
assert r[4]["gpu_pci"] == "0000:e7:00.0" and r[4]["nic"] == "rdmap197s0", r[4]
assert r[4]["nic_nearness"] == "numa" and r[0]["nic_nearness"] == "machine"
assert r[3]["env"]["CUDA_VISIBLE_DEVICES"] == "3", r[3]["env"]
assert all(x["ncores"] == 6 and not x["shared"] for x in r)
print("ok")
EOF
    t_is "$(cat "$T_TMP/py")" ok "the JSON parses: GPU order, ranks' GPU, NIC, nearness, env"
else
    t_skip "python3 is not installed: the JSON is not parsed"
fi

# ---------------------------------------------------------------- ddlrun --bind
# run_workers ARGS: start `ddlrun -n 2 ARGS sh -c 'sleep'`, wait for both
# workers, and write "RANK CPUS OMP DDL_BIND_CPUS" per worker to $T_TMP/w.
run_workers() {
    "$DDLRUN" -n 2 "$@" sh -c "sleep 1000 # $T_TOKEN" >/dev/null 2>"$T_TMP/run.err" &
    rpid=$!
    : >"$T_TMP/w"
    for _ in $(seq 100); do
        "$DDL_AGENT" status --socket "$DDL_RUNTIME_DIR/ddl-$(id -u)/local-$rpid.sock" \
            >"$T_TMP/st" 2>/dev/null
        [ "$(awk '$2 == "running" && $4 > 0' "$T_TMP/st" | wc -l)" -eq 2 ] && break
        sleep 0.1
    done
    awk '$2 == "running" {print $1, $4}' "$T_TMP/st" | while read -r rank w; do
        echo "$rank $(cpus_of "$w") $(env_of "$w" OMP_NUM_THREADS)" \
            "$(env_of "$w" DDL_BIND_CPUS)" >>"$T_TMP/w"
    done
    kill -TERM $rpid
    wait $rpid
}

run_workers
t_is "$(wc -l <"$T_TMP/w")" 2 "ddlrun -n 2: both workers found through ddl-agent status"
w0=$(awk '$1 == 0 {print $2}' "$T_TMP/w")
w1=$(awk '$1 == 1 {print $2}' "$T_TMP/w")
t_diag "workers' Cpus_allowed_list: rank 0 $w0, rank 1 $w1"
t_ok $([ -n "$w0" ] && [ -n "$w1" ] && within "$w0" "$MINE" && within "$w1" "$MINE"; echo $?) \
    "the workers run within ddlrun's CPUs"
if [ "$NCPU" -ge 2 ]; then
    t_ok $([ -n "$w0" ] && ! within "$w0" "$w1" && ! within "$w1" "$w0"; echo $?) \
        "... on different cores ($w0 and $w1)"
else
    t_skip "only $NCPU CPU allowed: two ranks cannot get different cores"
fi
t_is "$(awk '$2 != $4' "$T_TMP/w" | wc -l)" 0 "each worker's DDL_BIND_CPUS is its affinity"
t_is "$(awk '$3 !~ /^[0-9]+$/' "$T_TMP/w" | wc -l)" 0 "each worker has OMP_NUM_THREADS"
t_is "$(grep -v -e 'got SIGTERM: ' -e 'stopping the step: SIGTERM' -e ': stopped (SIGTERM' \
        "$T_TMP/run.err")" "" \
    "ddlrun prints nothing about the placement by default"

run_workers --bind none
t_is "$(awk -v m="$MINE" '$2 == m && $3 == "" && $4 == ""' "$T_TMP/w" | wc -l)" 2 \
    "--bind none: both workers keep ddlrun's CPUs ($MINE), no OMP_NUM_THREADS or DDL_BIND_CPUS"

if [ "$NCPU" -ge 2 ]; then
    a=$(expand "$MINE" | awk '{print $1}') b=$(expand "$MINE" | awk '{print $2}')
    run_workers --bind "$b:$a"
    t_is "$(sort "$T_TMP/w" | awk '{print $1, $2, $3}' | tr '\n' '|')" "0 $b 1|1 $a 1|" \
        "--bind $b:$a: rank 0 on CPU $b, rank 1 on CPU $a, one thread each"
else
    t_skip "only $NCPU CPU allowed: --bind LIST needs two"
fi

OMP_NUM_THREADS=3 t_run 30 "$DDLRUN" -n 2 sh -c 'echo $OMP_NUM_THREADS'
t_is "$(sort -u "$T_TMP/out")" 3 "a user's OMP_NUM_THREADS wins"
t_is "$(grep -c 'OMP_NUM_THREADS=3 is set: kept for every rank' "$T_TMP/err")" 1 \
    "... and is reported once"

# ---------------------------------------------------------------- bad usage
t_run 10 "$DDLRUN" --bind 0-x -n 1 true
t_is $? 2 "ddlrun --bind 0-x -> exit 2"
t_like "$T_TMP/err" "^ddlrun: --bind: '0-x' is not auto, none or CPU lists" "... with a message"
t_run 10 "$DDLRUN" --bind 4000 -n 1 true
t_is $? 2 "ddlrun --bind 4000 (a CPU this machine lacks) -> exit 2"
t_like "$T_TMP/err" "^ddlrun: --bind: rank 0: CPU list 4000: PUs 4000 are not allowed here" \
    "... naming the CPUs"
t_run 10 "$DDL_AGENT" topo --ranks 0
t_is $? 2 "ddl-agent topo --ranks 0 -> exit 2"
t_like "$T_TMP/err" "--ranks: '0' is not a number of ranks \(1-65536\)" "... with a message"
t_run 10 "$DDL_AGENT" topo --input "$T_TMP/none.xml"
t_is $? 1 "a missing --input file -> exit 1"
t_like "$T_TMP/err" "cannot read the hwloc XML file $T_TMP/none.xml: No such file" "... named"
t_run 10 "$DDL_AGENT" topo --input "$XML" --gpus 9
t_is $? 2 "--gpus 9 on an 8-GPU machine -> exit 2"
t_like "$T_TMP/err" "GPU 9 does not exist \(this node has 8 GPUs, 0-7 in PCI bus-id order\)" \
    "... with the GPUs it has"
t_done
