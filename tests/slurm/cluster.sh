#!/bin/sh
# cluster.sh: a real multi-node Slurm 22.05 cluster on one host, for ddl's
# integration tests.  Each node is a network namespace on a
# private bridge, with its own hostname, /tmp and spool; slurmctld runs on the
# host; one munged is shared.  Debian's slurm-wlm packages, as root.
#
#   cluster.sh start DIR N    start nodes n1..nN (N <= 8); prints SLURM_CONF=...
#                             (DIR absolute and not under /tmp: nodes get their own /tmp)
#   cluster.sh stop DIR       stop everything started for DIR and remove it
#   cluster.sh crash DIR NODE [silent]
#                             kill every process of NODE and take its link down;
#                             silent: the link first, so that no FIN or RST
#                             leaves the node (a power loss, not a kernel panic)
#   cluster.sh reboot DIR NODE
#                             a crashed NODE boots again: link up, its /tmp
#                             emptied, slurmd started (the node's tasks are gone)
#   cluster.sh freeze|thaw DIR NODE
#                             SIGSTOP or SIGCONT to every process of NODE: a node
#                             that hangs, then resumes
#   cluster.sh cut|heal DIR NODE[,NODE...]
#                             a network partition: NODE (or the group) and the
#                             other nodes stop (cut) or start again (heal)
#                             reaching each other,
#                             both ways, silently (routes to nowhere); the host,
#                             and so slurmctld and srun, still reach every node
#
# DDL_CLUSTER_SHARE="PATH..." (at start): paths under the host's /tmp that the
# nodes must see (each node has a private /tmp), e.g. a build tree.
#
# Exit status 77 means a prerequisite is missing (not root, Slurm or munge not
# installed, no network namespaces): callers skip with the printed reason.
# Addresses: 192.168.213.0/24 on bridge ddlbr0, private to these namespaces.
set -eu

BR=ddlbr0
NET=192.168.213
log() { echo "cluster.sh: $*" >&2; }
skip() { echo "cluster.sh: skip: $*" >&2; exit 77; }

need() {
    [ "$(id -u)" = 0 ] || skip "needs root (network namespaces, slurmd)"
    for c in slurmctld slurmd srun sinfo munged ip nsenter unshare; do
        command -v "$c" >/dev/null 2>&1 || skip "'$c' not found (apt-get install slurm-wlm munge iproute2)"
    done
    ip netns add ddlprobe$$ 2>/dev/null || skip "cannot create network namespaces here"
    ip netns del ddlprobe$$
}

start_munge() {
    if [ -S /run/munge/munge.socket.2 ] && munge -n >/dev/null 2>&1; then
        return 0
    fi
    mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
    fi
    chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
    chmod 0700 /etc/munge /var/log/munge /var/lib/munge
    chmod 0755 /run/munge
    chmod 0400 /etc/munge/munge.key
    runuser -u munge -- munged --force
    echo started >"$DIR/munged-started"
    i=0
    until munge -n >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 50 ] || { log "munged did not start"; return 1; }
        sleep 0.1
    done
}

write_conf() {
    host=$(hostname -s)
    cat >"$DIR/slurm.conf" <<EOF
ClusterName=ddltest
SlurmctldHost=$host($NET.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout=10
KillWait=5
InactiveLimit=0
MinJobAge=10
StateSaveLocation=$DIR/state
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdSpoolDir=$DIR/nodes/%n/spool
SlurmdPidFile=$DIR/nodes/%n/slurmd.pid
SlurmdLogFile=$DIR/log/slurmd-%n.log
PlugStackConfig=$DIR/plugstack.conf
EOF
    for i in $(seq "$N"); do
        echo "NodeName=n$i NodeAddr=$NET.$((10 + i)) CPUs=2 RealMemory=1000 State=UNKNOWN" \
            >>"$DIR/slurm.conf"
    done
    echo "PartitionName=debug Nodes=n[1-$N] Default=YES MaxTime=INFINITE State=UP" \
        >>"$DIR/slurm.conf"
    [ -f "$DIR/plugstack.conf" ] || : >"$DIR/plugstack.conf"
}

start_nodes() {
    ip addr add "$NET.1/24" dev "$BR"
    ip link set "$BR" up
    for i in $(seq "$N"); do
        ns=ddln$i
        ip netns add "$ns"
        ip link add "vddl$i" type veth peer name eth0 netns "$ns"
        ip link set "vddl$i" master "$BR" up
        ip -n "$ns" addr add "$NET.$((10 + i))/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        ip -n "$ns" route add default via "$NET.1"
        mkdir -p "$DIR/nodes/n$i/spool" "$DIR/nodes/n$i/tmp"
        chmod 1777 "$DIR/nodes/n$i/tmp"
        mkdir -p "$DIR/nodes/n$i/hosttmp" "$DIR/nodes/n$i/run-ddl" /run/ddl
        chmod 755 "$DIR/nodes/n$i/run-ddl"
        boot_node "$i"
    done
}

# boot_node I: start node nI's slurmd in its namespace (at start, and when a
# crashed node reboots).  Each node gets its own /tmp (Slurm's PMIx plugin
# keeps per-step directories there); paths under the host's /tmp listed in
# DDL_CLUSTER_SHARE (a build tree, a test's scratch) are bound back.  Each
# node has its own /run/ddl too (the plugin's runtime directories).  Not
# `ip netns exec`: it remounts /sys and slurmd then misses cgroups.
boot_node() {
    nsenter --net="/run/netns/ddln$1" unshare --uts --mount --propagation private \
        sh -c "set -e; hostname n$1
               mount --bind /tmp '$DIR/nodes/n$1/hosttmp'
               mount --bind '$DIR/nodes/n$1/tmp' /tmp
               mount --bind '$DIR/nodes/n$1/run-ddl' /run/ddl
               for p in \$DDL_CLUSTER_SHARE; do
                   case \$p in /tmp/*) mkdir -p \$p; mount --bind '$DIR/nodes/n$1/hosttmp'/\${p#/tmp/} \$p ;; esac
               done
               exec slurmd -f '$DIR/slurm.conf'"
}

# do_reboot: a crashed node boots again: its link comes up, its /tmp is
# emptied (what a reboot loses), slurmd starts and registers
do_reboot() {
    i=${NODE#n}
    [ -n "$(ip netns pids "ddl$NODE" 2>/dev/null)" ] && { log "$NODE is running: crash it first"; exit 1; }
    find "$DIR/nodes/$NODE/tmp" -mindepth 1 -delete 2>/dev/null || true
    ip link set "vddl$i" up
    ip -n "ddl$NODE" link set eth0 up
    boot_node "$i"
}

wait_idle() {
    i=0
    while :; do
        idle=$(SLURM_CONF="$DIR/slurm.conf" sinfo -h -o '%T %D' 2>/dev/null | awk '$1 == "idle" {s += $2} END {print s + 0}')
        [ "$idle" = "$N" ] && return 0
        i=$((i + 1))
        if [ $i -ge 120 ]; then
            log "only $idle of $N nodes idle after 60 s; see $DIR/log"
            SLURM_CONF="$DIR/slurm.conf" sinfo >&2 || true
            return 1
        fi
        sleep 0.5
    done
}

do_start() {
    [ "$N" -ge 1 ] && [ "$N" -le 8 ] || { log "N must be 1-8, not '$N'"; exit 2; }
    case $DIR in
    /tmp | /tmp/*)
        log "DIR '$DIR' is under /tmp, which each node replaces with its own: use e.g. /var/tmp/..."
        exit 2 ;;
    /*) ;;
    *) log "DIR '$DIR' must be an absolute path"; exit 2 ;;
    esac
    need
    # Claim the bridge before arming the clean-up below: `stop` removes every
    # node namespace and the bridge, so a start that finds another cluster
    # running must fail without touching it.
    ip link add "$BR" type bridge 2>/dev/null || { log "bridge $BR exists: another cluster runs? (left alone)"; exit 1; }
    mkdir -p "$DIR/state" "$DIR/log" "$DIR/nodes"
    # whatever fails from here on, leave nothing behind
    trap 'st=$?; if [ $st -ne 0 ]; then log "start failed (status $st): cleaning up"; tail -n 5 "$DIR"/log/*.log >&2 2>/dev/null; do_stop; fi' EXIT
    start_munge
    write_conf
    start_nodes
    slurmctld -f "$DIR/slurm.conf" -i
    wait_idle
    trap - EXIT
    echo "SLURM_CONF=$DIR/slurm.conf"
}

do_stop() {
    [ -f "$DIR/slurm.conf" ] && SLURM_CONF="$DIR/slurm.conf" scancel --quiet -u root 2>/dev/null || true
    if [ -f "$DIR/slurmctld.pid" ]; then
        kill "$(cat "$DIR/slurmctld.pid")" 2>/dev/null || true
    fi
    for ns in $(ip netns list 2>/dev/null | awk '/^ddln[0-9]/ {print $1}'); do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    # The host end of a crashed node's veth (set down by `crash`) can outlive
    # its namespace: delete the host ends, or the next start cannot make them.
    for l in $(ip -o link show 2>/dev/null | sed -n 's/^[0-9]*: \(vddl[0-9]*\)@.*/\1/p'); do
        ip link del "$l" 2>/dev/null || true
    done
    ip link del "$BR" 2>/dev/null || true
    pkill -KILL -f "slurmctld -f $DIR/slurm.conf" 2>/dev/null || true
    pkill -KILL -f "slurmd -f $DIR/slurm.conf" 2>/dev/null || true
    pkill -KILL -f "slurmstepd.*$DIR" 2>/dev/null || true
    if [ -f "$DIR/munged-started" ]; then
        pkill -u munge munged 2>/dev/null || true
    fi
    rm -rf "$DIR"
}

do_crash() {
    ns=ddl$NODE
    [ "$HOW" = silent ] && ip -n "$ns" link set eth0 down
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
    if [ "$HOW" != silent ]; then
        # a crash whose link closes: let the dying processes close their
        # sockets (FIN/RST) before the link goes down, or under load the
        # packets are dropped and the crash looks silent (at most 5 s)
        i=0
        while [ $i -lt 50 ] && [ -n "$(ip netns pids "$ns" 2>/dev/null)" ]; do
            sleep 0.1
            i=$((i + 1))
        done
        sleep 0.2
    fi
    ip link set "vddl${NODE#n}" down
}

# do_signal SIG: every process of node NODE (slurmd, slurmstepd, the
# step's tasks): STOP freezes the node as a hung kernel would, CONT resumes it
do_signal() {
    pids=$(ip netns pids "ddl$NODE" 2>/dev/null || true)
    [ -n "$pids" ] && kill -s "$1" $pids 2>/dev/null || true
}

# do_route add|del: blackhole routes between node NODE and every other node,
# in both nodes' namespaces
# do_route add|del: NODE is one node (n3) or a group (n3,n4): routes to
# nowhere between each node of the group and each node outside it.
do_route() {
    for node in $(echo "$NODE" | tr ',' ' '); do
        k=${node#n}
        for ns in $(ip netns list | sed -n 's/^\(ddln[0-9]*\).*/\1/p'); do
            case ",$NODE," in *",n${ns#ddln},"*) continue ;; esac
            i=${ns#ddln}
            ip -n "$ns" route "$1" blackhole "$NET.$((10 + k))/32"
            ip -n "ddl$node" route "$1" blackhole "$NET.$((10 + i))/32"
        done
    done
}

cmd=${1:-}
DIR=${2:-}
[ -n "$cmd" ] && [ -n "$DIR" ] || { echo "usage: cluster.sh start|stop|crash|reboot|freeze|thaw|cut|heal DIR [N|NODE]" >&2; exit 2; }
case $cmd in
start) N=${3:-2}; do_start ;;
stop) do_stop ;;
crash) NODE=${3:?node name, e.g. n2}; HOW=${4:-}; do_crash ;;
reboot) NODE=${3:?node name, e.g. n2}; do_reboot ;;
freeze) NODE=${3:?node name, e.g. n2}; do_signal STOP ;;
thaw) NODE=${3:?node name, e.g. n2}; do_signal CONT ;;
cut) NODE=${3:?node name or group, e.g. n2 or n3,n4}; do_route add ;;
heal) NODE=${3:?node name or group, e.g. n2 or n3,n4}; do_route del ;;
*) echo "cluster.sh: unknown command '$cmd'" >&2; exit 2 ;;
esac
