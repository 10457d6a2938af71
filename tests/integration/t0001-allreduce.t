#!/bin/sh
# t0001-allreduce: libddl's collectives under `ddlrun -n N` against locally
# computed references: allreduce (every op on f32, f64, i32, i64, f16, bf16
# and u8, in place and not), reduce_scatter, allgather, reduce, bcast,
# barrier, and split/node/cross communicators, at 0, 1, 2, 7, 1000, 4097 and
# 1 Mi + 3 elements, for world sizes 1-6 and 8, with each allreduce algorithm
# (ring, recursive doubling, Rabenseifner, and the automatic choice); the
# ring and the chain broadcast with many pipeline segments; the two-level
# (hier) algorithm, forced and chosen, on nodes emulated by ddlrun --nodes;
# one 64 Mi-element f32 sum (ring and hier) and one u8 sum of 2^31 + 5
# elements (skipped with less than 6 GiB of free memory); buffers from
# ddl_mem_alloc (read in place by node neighbours), also mixed with malloc'd
# ones and without shared memory; bad tuning variables.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

"$COLL_CHECK" >"$T_TMP/out" 2>"$T_TMP/err" --sizes 0,1,7,1000
t_ok $? "coll-check as a single process, without ddlrun or an agent"

check() { # check ALGO N NODES [ARGS...]: ddlrun -n N --nodes NODES coll-check ARGS
    algo=$1 n=$2 nodes=$3
    shift 3
    DDL_ALLREDUCE_ALGO=$algo t_run 300 "$DDLRUN" -n "$n" --nodes "$nodes" "$COLL_CHECK" "$@"
    rc=$?
    t_ok $rc "algo $algo, ddlrun -n $n --nodes $nodes coll-check $*: every case passes on every rank"
    if [ $rc -ne 0 ]; then
        t_diag "exit status $rc"
        grep -v '^pass' "$T_TMP/out" | sed 's/^/# /'
        sed 's/^/# /' "$T_TMP/err" | head -30
    fi
}

for n in 1 2 3 4 5 6 8; do
    check auto "$n" 1
    cases=$(grep -c '^pass' "$T_TMP/out")
    t_ok $([ "$cases" -ge 100 ]; echo $?) "ddlrun -n $n: $cases cases were checked"
done
for algo in ring rd rabenseifner; do
    for n in 2 3 5 8; do
        check "$algo" "$n" 1 --sizes 0,1,2,7,4097,1048579
    done
done
# the ring's pipeline with many small segments and each window size
# (and the pipelined chain broadcast, forced, with as many segments)
export DDL_SEGMENT_BYTES=4096 DDL_BCAST_ALGO=chain
for w in 1 3; do
    export DDL_RING_WINDOW=$w
    check ring 5 1 --sizes 7,4097,1048579
done
check rd 3 1 --sizes 0,1,4097,1048579
unset DDL_SEGMENT_BYTES DDL_RING_WINDOW DDL_BCAST_ALGO
# the two-level algorithm on emulated nodes (ddlrun --nodes), forced and
# chosen by the model
for spec in "4 2" "6 3" "8 2" "8 4"; do
    set -- $spec
    check hier "$1" "$2" --sizes 0,1,2,7,4097,1048579
    check auto "$1" "$2" --sizes 0,1,7,1000,4097,1048579
done
DDL_LOG_LEVEL=debug DDL_ALLREDUCE_ALGO=hier t_run 60 "$DDLRUN" -n 4 --nodes 2 "$COLL_CHECK" --sizes 4097
t_like "$T_TMP/err" "allreduce of 16388 bytes on 4 ranks: hier \(DDL_ALLREDUCE_ALGO\)" \
    "on 2 emulated nodes the world's allreduce runs hier (debug log)"
t_like "$T_TMP/err" "allreduce of [0-9]+ bytes on 2 ranks: ring \(DDL_ALLREDUCE_ALGO=hier needs" \
    "... and a node communicator's falls back to the ring, saying why"
for spec in "ring 4 1" "hier 4 2"; do
    set -- $spec
    check "$1" "$2" "$3" --big --sizes 1
    t_like "$T_TMP/out" "^pass allreduce f32 sum n=67108864 in-place" \
        "$1: the 64 Mi-element f32 sum was checked"
done
# buffers from ddl_mem_alloc: the ring reads a node neighbour's segments in
# place; mixed: only odd ranks use the allocation, so both kinds of link
# meet; across emulated nodes the links between nodes still transfer
for spec in "ring 2 1 mapped" "ring 5 1 mixed" "auto 4 1 mapped" "hier 4 2 mapped" \
    "hier 8 4 mixed" "rabenseifner 3 1 mapped"; do
    set -- $spec
    check "$1" "$2" "$3" --mem "$4" --sizes 0,7,4097,1048579
done
export DDL_SEGMENT_BYTES=4096 DDL_RING_WINDOW=1
check ring 3 1 --mem mixed --sizes 4097,1048579
unset DDL_SEGMENT_BYTES DDL_RING_WINDOW
DDL_LOG_LEVEL=debug DDL_ALLREDUCE_ALGO=ring t_run 60 "$DDLRUN" -n 2 "$COLL_CHECK" --mem mapped --sizes 1048579
t_like "$T_TMP/err" "ddl_mem_alloc #1: [0-9]+ bytes at .*, mapped by the node's ranks" \
    "ddl_mem_alloc memory is mapped by the node's ranks (debug log)"
t_like "$T_TMP/err" "ring: 4194316 bytes: reading rank [01]'s buffer in place" \
    "... and the ring reads the neighbour's buffer in place"
UCX_TLS=tcp,self DDL_LOG_LEVEL=debug DDL_ALLREDUCE_ALGO=ring t_run 60 "$DDLRUN" -n 2 "$COLL_CHECK" --mem mapped --sizes 4097,1048579
t_ok $? "UCX_TLS=tcp,self: coll-check --mem mapped passes without shared memory"
t_like "$T_TMP/err" "not mapped \(no shared-memory transport" "... where the allocation is not mapped"

# more than 2^31 elements: 2 GiB per rank, 2 ranks
avail_kb=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
if [ "${avail_kb:-0}" -ge $((6 * 1024 * 1024)) ]; then
    check auto 2 1 --huge --sizes 1
    t_like "$T_TMP/out" "^pass allreduce u8 sum n=2147483653" "the 2^31 + 5-element u8 sum was checked"
else
    t_skip "2^31 + 5 elements need 6 GiB of free memory; MemAvailable is ${avail_kb:-?} kB"
    t_skip "the 2^31 + 5-element u8 sum was checked"
fi

# DDL_WAIT=block: right on 3 ranks (more than this machine's cores here),
# over shared memory and over TCP ...
DDL_WAIT=block t_run 300 "$DDLRUN" -n 3 "$COLL_CHECK" --sizes 1,4097,1048579
t_ok $? "DDL_WAIT=block: coll-check on 3 ranks passes"
UCX_TLS=tcp,self DDL_WAIT=block t_run 300 "$DDLRUN" -n 3 "$COLL_CHECK" --sizes 1,4097,1048579
t_ok $? "DDL_WAIT=block, UCX_TLS=tcp,self: coll-check on 3 ranks passes"
# ... and a rank waiting 2 s for a late peer sleeps instead of spinning:
# its CPU time over the wait, with spin and with block
if t_find_python numpy; then
    for mode in spin block; do
        DDL_WAIT=$mode t_run 60 "$DDLRUN" -n 2 "$PY" -X "$T_TOKEN" -c '
import time, numpy as np, ddl
ddl.init()
x = np.ones(4, np.float32)
ddl.allreduce(x)
if ddl.rank() == 0:
    time.sleep(2)
c = time.process_time()
ddl.allreduce(x)
if ddl.rank() == 1:
    print("cpu %.2f" % (time.process_time() - c))
ddl.finalize()'
        cpu=$(sed -n 's/^cpu //p' "$T_TMP/out")
        eval "cpu_$mode=\${cpu:-9}"
    done
    t_ok "$(awk -v s="$cpu_spin" -v b="$cpu_block" 'BEGIN { exit !(b < 0.5 && b < s / 2) }'; echo $?)" \
        "waiting 2 s for a late peer took $cpu_block s of CPU with DDL_WAIT=block, $cpu_spin s with spin"
else
    t_skip "the CPU time of a wait: no python3 with numpy and the ddl package"
fi
DDL_WAIT=busy t_run 30 "$DDLRUN" -n 2 "$COLL_CHECK" --sizes 1
t_like "$T_TMP/err" "DDL_WAIT='busy' is not one of spin, block" \
    "an unknown DDL_WAIT fails ddl_init, listing the accepted values"
DDL_ALLREDUCE_ALGO=bogus t_run 30 "$DDLRUN" -n 2 "$COLL_CHECK" --sizes 1
t_ok $([ $? -ne 0 ]; echo $?) "an unknown DDL_ALLREDUCE_ALGO fails ddl_init"
t_like "$T_TMP/err" "DDL_ALLREDUCE_ALGO='bogus' is not one of auto, ring, rd, rabenseifner, hier" \
    "... with a message listing the accepted values"
DDL_BCAST_ALGO=tree t_run 30 "$DDLRUN" -n 2 "$COLL_CHECK" --sizes 1
t_ok $([ $? -ne 0 ]; echo $?) "an unknown DDL_BCAST_ALGO fails ddl_init"
t_like "$T_TMP/err" "DDL_BCAST_ALGO='tree' is not one of auto, binomial, chain" \
    "... with a message listing the accepted values"
DDL_SEGMENT_BYTES=12 t_run 30 "$DDLRUN" -n 2 "$COLL_CHECK" --sizes 1
t_like "$T_TMP/err" "DDL_SEGMENT_BYTES='12' is not a number of bytes \(4096-1073741824\)" \
    "DDL_SEGMENT_BYTES below 4096 fails ddl_init, saying the range"
t_done
