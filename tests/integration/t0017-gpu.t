#!/bin/sh
# t0017-gpu: CUDA device memory in libddl.  Here (no GPU) it checks what can
# be checked: libddl links the CUDA runtime when configure found it, ddl_init
# works and the host collectives are right with it, and ddl-bench -m cuda
# says plainly that there is no usable GPU (exit status 77).  With a GPU it
# runs ddl-bench -m cuda (allreduce with several types and ops, and bcast,
# every element checked) on 2 ranks sharing the device(s).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
DDLBENCH="$top_builddir/bench/ddl-bench"
LIBDDL="$top_builddir/collectives/.libs/libddl.so"

if grep -q '^#define HAVE_CUDA 1' "$top_builddir/config.h"; then
    ldd "$LIBDDL" >"$T_TMP/ldd" 2>&1
    t_like "$T_TMP/ldd" "libcudart\.so" "configure found CUDA: libddl links the CUDA runtime"
else
    t_skip "built without CUDA (configure found no CUDA runtime): nothing links it"
fi

DDL_LOG_LEVEL=debug t_run 120 "$DDLRUN" -n 2 "$COLL_CHECK" --sizes 7,4097
t_is $? 0 "host collectives with this build: coll-check on 2 ranks passes"
why=$(sed -n 's/.*CUDA: no usable GPU (\(.*\)): every buffer is host memory.*/\1/p' "$T_TMP/err" | head -1)

t_run 60 "$DDLRUN" -n 2 "$DDLBENCH" allreduce -m cuda -b 8 -e 4M -f 16 -n 3 -w 1 -c 1
rc=$?
if [ $rc -eq 77 ]; then
    t_like "$T_TMP/err" "ddl-bench: -m cuda: (no usable GPU here|built without CUDA)" \
        "without a usable GPU, ddl-bench -m cuda says so and exits 77"
    t_skip "CUDA device buffers: no usable GPU here (${why:-built without CUDA})"
else
    t_is $rc 0 "ddl-bench -m cuda allreduce f32 sum on 2 ranks: every element right"
    for spec in "f64 max" "i32 sum" "f32 avg"; do
        set -- $spec
        t_run 120 "$DDLRUN" -n 2 "$DDLBENCH" allreduce -m cuda -t "$1" -o "$2" -b 8 -e 1M -f 32 -n 2 -w 1 -c 1
        t_is $? 0 "ddl-bench -m cuda allreduce $1 $2: every element right"
    done
    t_run 120 "$DDLRUN" -n 3 "$DDLBENCH" bcast -m cuda -t i32 -b 4 -e 1M -f 64 -n 2 -w 1 -c 1
    t_is $? 0 "ddl-bench -m cuda bcast on 3 ranks: every element right"
fi
t_done
