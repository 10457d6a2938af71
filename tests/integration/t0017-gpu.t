#!/bin/sh
# t0017-gpu: CUDA device memory, CUDA streams and NCCL in libddl.  Here (no
# GPU) it checks what can be checked: libddl links the CUDA runtime and
# NCCL when configure found them, ddl_init works and the host collectives
# are right with them, a CUDA stream gets DDL_ERR_CUDA, bad DDL_NCCL,
# DDL_GPU_CHUNK_BYTES and DDL_GPU_DIRECT values are refused, and ddl-bench -m cuda and
# gpu-check say plainly that there is no usable GPU (exit status 77).  With
# a GPU it runs gpu-check (every collective on device memory, the _stream
# calls, an abort) on 2 ranks of one node, on 2 emulated nodes of one rank
# (the hierarchical path, GPU-direct or not) and of two ranks, and with
# DDL_NCCL=0, then
# fmnist-train-cuda --device cuda on 2 ranks (replicas agree, accuracy)
# and ddl-bench -m cuda.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
DDLBENCH="$top_builddir/bench/ddl-bench"
LIBDDL="$top_builddir/collectives/.libs/libddl.so"

if grep -q '^#define HAVE_CUDA 1' "$top_builddir/config.h"; then
    ldd "$LIBDDL" >"$T_TMP/ldd" 2>&1
    t_like "$T_TMP/ldd" "libcudart\.so" "configure found CUDA: libddl links the CUDA runtime"
else
    t_skip "built without CUDA (configure found no CUDA runtime): nothing links it"
fi

GPUCHECK="$top_builddir/tests/helpers/gpu-check"
if grep -q '^#define HAVE_NCCL 1' "$top_builddir/config.h"; then
    t_like "$T_TMP/ldd" "libnccl\.so" "configure found NCCL: libddl links it"
else
    t_skip "built without NCCL (configure found none): nothing links it"
fi

DDL_LOG_LEVEL=debug t_run 120 "$DDLRUN" -n 2 "$COLL_CHECK" --sizes 7,4097
t_is $? 0 "host collectives with this build: coll-check on 2 ranks passes"
why=$(sed -n 's/.*CUDA: no usable GPU (\(.*\)): every buffer is host memory.*/\1/p' "$T_TMP/err" | head -1)

if [ -x "$GPUCHECK" ]; then
    for bad in "DDL_NCCL=2" "DDL_GPU_CHUNK_BYTES=12" "DDL_GPU_DIRECT=yes"; do
        env "$bad" "$DDLRUN" -n 1 "$COLL_CHECK" --quick >"$T_TMP/bad.out" 2>&1
        t_like "$T_TMP/bad.out" "${bad%%=*}='${bad#*=}' is not" "$bad: ddl_init refuses it, naming the variable"
    done
    t_run 120 "$DDLRUN" -n 2 "$GPUCHECK"
    rc=$?
    if [ $rc -eq 77 ]; then
        t_like "$T_TMP/out" "rank 1: PASS no GPU: a CUDA stream gets DDL_ERR_CUDA" \
            "without a GPU: a CUDA stream gets DDL_ERR_CUDA, nothing queued"
        t_like "$T_TMP/out" "rank 0: PASS no GPU: a NULL stream is the plain" \
            "... and a NULL stream is the plain non-blocking call"
        t_skip "gpu-check on device memory: no usable GPU here (${why:-?})"
    else
        t_status $rc 0 "gpu-check on 2 ranks of one node (NCCL with 2 GPUs, else staged)" "$T_TMP/err"
        DDL_LOG_LEVEL=debug DDL_GPU_CHUNK_BYTES=65536 t_run 180 "$DDLRUN" -n 2 --nodes 2 "$GPUCHECK"
        t_status $? 0 "gpu-check on 2 emulated nodes of 1 rank (64 KiB chunks)" "$T_TMP/err"
        t_like "$T_TMP/err" "allreduce of [0-9]+ bytes on device memory: hierarchical, 1 local rank\(s\), block [0-9]+ bytes (in 64 chunk\(s\)|GPU-direct) over 2 nodes" \
            "... the allreduces took the hierarchical path (GPU-direct if UCX moves CUDA memory)"
        DDL_LOG_LEVEL=debug DDL_GPU_DIRECT=0 t_run 180 "$DDLRUN" -n 2 --nodes 2 "$GPUCHECK"
        t_status $? 0 "gpu-check on 2 emulated nodes of 1 rank, DDL_GPU_DIRECT=0" "$T_TMP/err"
        t_like "$T_TMP/err" "hierarchical, 1 local rank\(s\), block [0-9]+ bytes in [0-9]+ chunk\(s\)" \
            "... the blocks went through pinned host memory in chunks"
        t_run 180 "$DDLRUN" -n 4 --nodes 2 "$GPUCHECK"
        t_status $? 0 "gpu-check on 2 emulated nodes of 2 ranks" "$T_TMP/err"
        DDL_NCCL=0 t_run 180 "$DDLRUN" -n 2 "$GPUCHECK"
        t_status $? 0 "gpu-check with DDL_NCCL=0 (staged)" "$T_TMP/err"
    fi
else
    t_skip "gpu-check is not built (no CUDA)"
fi

# the GPU training example: fmnist-train-cuda (with nvcc and cuBLAS)
FMNIST="$top_builddir/examples/fmnist/fmnist-train"
if [ -x "$FMNIST-cuda" ]; then
    t_run 300 "$DDLRUN" -n 2 "$FMNIST-cuda" --device cuda --epochs 2
    rc=$?
    if [ $rc -eq 77 ]; then
        t_like "$T_TMP/err" "fmnist-train: --device cuda: no usable GPU" \
            "fmnist-train-cuda --device cuda without a GPU: says so, exit 77"
        t_skip "GPU training: no usable GPU here (${why:-?})"
    else
        t_status $rc 0 "fmnist-train-cuda --device cuda, 2 ranks, 2 epochs" "$T_TMP/err"
        t_like "$T_TMP/out" "^checksums: all 2 ranks agree" "... the 2 replicas on the GPU agree"
        acc=$(sed -n 's/^final test accuracy: \([0-9]*\)\..*/\1/p' "$T_TMP/out")
        t_ok $([ "${acc:-0}" -ge 80 ]; echo $?) "... test accuracy ${acc:-?}% (at least 80%)"
    fi
elif [ -x "$FMNIST" ]; then
    "$FMNIST" --device cuda >"$T_TMP/out" 2>&1
    t_is $? 77 "fmnist-train (no CUDA code) --device cuda: exit 77"
    t_like "$T_TMP/out" "run fmnist-train-cuda" "... naming the program that has it"
    t_skip "fmnist-train-cuda is not built (needs nvcc and cuBLAS)"
else
    t_skip "fmnist-train is not built (no OpenBLAS)"
fi

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
