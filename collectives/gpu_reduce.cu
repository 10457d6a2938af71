/* gpu_reduce.cu: libddl's element-wise reductions on device memory, for the
 * GPU-direct inter-node rings (compiled by nvcc when configure finds it).
 * The same arithmetic as reduce.c: integer sums and products wrap
 * (computed unsigned), 16-bit floats are reduced in float and rounded to
 * nearest even, and the operand order is fixed (incoming op local).  No
 * fused multiply-add: every operation is rounded on its own, as on the
 * host.  C API in gpu_int.h. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* the values of ddl_dtype_t and ddl_op_t (ddl.h is C, included in C files) */
enum { T_F32, T_F64, T_I32, T_I64, T_F16, T_BF16, T_U8 };
enum { O_SUM, O_PROD, O_MIN, O_MAX, O_AVG };

#define THREADS 256

template <typename T> struct arith {
    static __device__ T add(T a, T b) { return a + b; }
    static __device__ T mul(T a, T b) { return a * b; }
};
template <> struct arith<float> {
    static __device__ float add(float a, float b) { return __fadd_rn(a, b); }
    static __device__ float mul(float a, float b) { return __fmul_rn(a, b); }
};
template <> struct arith<double> {
    static __device__ double add(double a, double b) { return __dadd_rn(a, b); }
    static __device__ double mul(double a, double b) { return __dmul_rn(a, b); }
};

template <typename T> __device__ T apply(int op, T a, T b)
{
    switch (op) {
    case O_PROD: return arith<T>::mul(a, b);
    case O_MIN: return a < b ? a : b;
    case O_MAX: return a > b ? a : b;
    default: return arith<T>::add(a, b);
    }
}

/* inout[i] = in[i] op inout[i]; U is the type computed in */
template <typename T, typename U>
__global__ void k_reduce(T *inout, const T *in, size_t n, int op)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        inout[i] = (T)apply<U>(op, (U)in[i], (U)inout[i]);
}

__global__ void k_reduce_f16(__half *inout, const __half *in, size_t n, int op)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        inout[i] = __float2half_rn(apply<float>(op, __half2float(in[i]), __half2float(inout[i])));
}

__global__ void k_reduce_bf16(__nv_bfloat16 *inout, const __nv_bfloat16 *in, size_t n, int op)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        inout[i] = __float2bfloat16_rn(
            apply<float>(op, __bfloat162float(in[i]), __bfloat162float(inout[i])));
}

/* DDL_AVG's division, as reduce.c's ddl_scale_local: in float (16-bit
 * types through float) or double, correctly rounded */
__global__ void k_scale_f32(float *buf, size_t n, float d)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        buf[i] = __fdiv_rn(buf[i], d);
}

__global__ void k_scale_f64(double *buf, size_t n, double d)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        buf[i] = __ddiv_rn(buf[i], d);
}

__global__ void k_scale_f16(__half *buf, size_t n, float d)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        buf[i] = __float2half_rn(__fdiv_rn(__half2float(buf[i]), d));
}

__global__ void k_scale_bf16(__nv_bfloat16 *buf, size_t n, float d)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        buf[i] = __float2bfloat16_rn(__fdiv_rn(__bfloat162float(buf[i]), d));
}

static unsigned blocks(size_t n)
{
    return (unsigned)((n + THREADS - 1) / THREADS);
}

extern "C" cudaError_t ddl_gpu_reduce_launch(void *inout, const void *in, size_t n, int dtype,
                                             int op, cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    const unsigned b = blocks(n);
    switch (dtype) {
    case T_F32: k_reduce<float, float><<<b, THREADS, 0, s>>>((float *)inout, (const float *)in, n, op); break;
    case T_F64: k_reduce<double, double><<<b, THREADS, 0, s>>>((double *)inout, (const double *)in, n, op); break;
    case T_I32:
        if (op == O_MIN || op == O_MAX)
            k_reduce<int32_t, int32_t><<<b, THREADS, 0, s>>>((int32_t *)inout, (const int32_t *)in, n, op);
        else
            k_reduce<uint32_t, uint32_t><<<b, THREADS, 0, s>>>((uint32_t *)inout, (const uint32_t *)in, n, op);
        break;
    case T_I64:
        if (op == O_MIN || op == O_MAX)
            k_reduce<int64_t, int64_t><<<b, THREADS, 0, s>>>((int64_t *)inout, (const int64_t *)in, n, op);
        else
            k_reduce<uint64_t, uint64_t><<<b, THREADS, 0, s>>>((uint64_t *)inout, (const uint64_t *)in, n, op);
        break;
    case T_F16: k_reduce_f16<<<b, THREADS, 0, s>>>((__half *)inout, (const __half *)in, n, op); break;
    case T_BF16: k_reduce_bf16<<<b, THREADS, 0, s>>>((__nv_bfloat16 *)inout, (const __nv_bfloat16 *)in, n, op); break;
    case T_U8: k_reduce<uint8_t, uint32_t><<<b, THREADS, 0, s>>>((uint8_t *)inout, (const uint8_t *)in, n, op); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t ddl_gpu_scale_launch(void *buf, size_t n, int dtype, double divisor,
                                            cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    const unsigned b = blocks(n);
    switch (dtype) {
    case T_F32: k_scale_f32<<<b, THREADS, 0, s>>>((float *)buf, n, (float)divisor); break;
    case T_F64: k_scale_f64<<<b, THREADS, 0, s>>>((double *)buf, n, divisor); break;
    case T_F16: k_scale_f16<<<b, THREADS, 0, s>>>((__half *)buf, n, (float)divisor); break;
    case T_BF16: k_scale_bf16<<<b, THREADS, 0, s>>>((__nv_bfloat16 *)buf, n, (float)divisor); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ddl_gpu_kernels_check: whether this device can run the kernels (an
 * image or PTX for its architecture is in the library). */
extern "C" cudaError_t ddl_gpu_kernels_check(void)
{
    struct cudaFuncAttributes a;
    return cudaFuncGetAttributes(&a, k_reduce<float, float>);
}
