/* fmnist_cuda.cu: the device side of `fmnist-train --device cuda`: the same
 * MLP as the CPU path, with cuBLAS SGEMMs for the matrix products and small
 * kernels for the rest (input standardisation, bias, ReLU, softmax
 * cross-entropy, column sums, SGD with momentum).  C API in fmnist_cuda.h.
 *
 * cuBLAS is column-major: a row-major matrix A (r x c) is, to cuBLAS, its
 * transpose (c x r, leading dimension c).  So the row-major product
 * C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T,
 * operands swapped; each call below spells out the row-major product.
 *
 * Determinism: every kernel computes each output from a fixed sequence of
 * operations (reductions run over rows in order, one thread per output;
 * no atomics), cuBLAS is used on one stream with atomics off (its default),
 * and the update uses explicitly rounded multiplies and adds (no FMA
 * contraction), the arithmetic of the CPU path.  Given the same allreduced
 * gradient, every rank therefore computes the same new weights.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmnist_cuda.h"

#define THREADS 256
#define MAX_OUT 32 /* classes a row of softmax handles */

struct fmnist_gpu {
    int n_in, n_hid, n_out;
    size_t n_params, off_w1, off_b1, off_w2, off_b2;
    size_t rows; /* samples per chunk, at most */
    size_t ntrain, ntest;
    cublasHandle_t blas;
    int blas_ok;
    float *params, *vel, *grad;
    float *x, *h, *z, *dh; /* rows x n_in, n_hid, n_out, n_hid */
    float *scale;          /* 256: standardised value of each pixel byte */
    uint8_t *train_img, *train_lab, *test_img, *test_lab;
    uint32_t *order; /* ntrain: the epoch's order */
    double *row_loss, *row_hit; /* rows: per-sample loss and hit */
    double *stats;              /* [0] loss sum, [1] hits (training), [2] hits (test) */
};

/* ------------------------------------------------------------------ errors */

static char err_text[512];

extern "C" const char *fmnist_cuda_error(void)
{
    return err_text;
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_text, sizeof err_text, fmt, ap);
    va_end(ap);
    return -1;
}

#define CK(call)                                                                   \
    do {                                                                           \
        cudaError_t e_ = (call);                                                   \
        if (e_ != cudaSuccess)                                                     \
            return fail("%s: %s", #call, cudaGetErrorString(e_));                  \
    } while (0)

/* after a kernel launch: a bad configuration shows here */
#define CK_LAUNCH(name)                                                            \
    do {                                                                           \
        cudaError_t e_ = cudaGetLastError();                                       \
        if (e_ != cudaSuccess)                                                     \
            return fail("kernel %s: %s", name, cudaGetErrorString(e_));            \
    } while (0)

#define CK_BLAS(call)                                                              \
    do {                                                                           \
        cublasStatus_t s_ = (call);                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                           \
            return fail("%s: %s", #call, cublasGetStatusString(s_));               \
    } while (0)

static unsigned blocks_for(size_t n)
{
    return (unsigned)((n + THREADS - 1) / THREADS);
}

/* ----------------------------------------------------------------- kernels */

/* x[r][j] = scale[image of sample r, pixel j]; the sample is ids[r], or
 * base + r when ids is NULL. */
__global__ void k_gather(const uint8_t *images, const uint32_t *ids, size_t base, size_t m,
                         int n_in, const float *scale, float *x)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m * (size_t)n_in)
        return;
    size_t r = i / (size_t)n_in, j = i % (size_t)n_in;
    size_t id = ids ? ids[r] : base + r;
    x[i] = scale[images[id * (size_t)n_in + j]];
}

/* h = max(h + b, 0), b broadcast over the m rows of n columns */
__global__ void k_bias_relu(float *h, const float *b, size_t m, int n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m * (size_t)n)
        return;
    float v = h[i] + b[i % (size_t)n];
    h[i] = v > 0.0f ? v : 0.0f;
}

/* z += b, b broadcast over the m rows of n columns */
__global__ void k_bias_add(float *z, const float *b, size_t m, int n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m * (size_t)n)
        return;
    z[i] += b[i % (size_t)n];
}

__device__ int row_argmax(const float *z, int n)
{
    int best = 0;
    for (int k = 1; k < n; k++)
        if (z[k] > z[best])
            best = k;
    return best;
}

/* One thread per row: the row's cross-entropy and hit, and the logits
 * replaced by (softmax - onehot) * scale; the label of row r is
 * labels[ids[r]]. */
__global__ void k_softmax_xent(float *z, const uint8_t *labels, const uint32_t *ids, int m,
                               int n, float scale, double *row_loss, double *row_hit)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= m)
        return;
    float *zr = z + (size_t)r * n;
    int y = labels[ids[r]];
    int best = row_argmax(zr, n);
    float max = zr[best];
    double sum = 0.0;
    float e[MAX_OUT];
    for (int k = 0; k < n; k++) {
        e[k] = expf(zr[k] - max);
        sum += e[k];
    }
    row_loss[r] = log(sum) - (double)(zr[y] - max);
    row_hit[r] = best == y ? 1.0 : 0.0;
    float inv = (float)(1.0 / sum);
    for (int k = 0; k < n; k++)
        zr[k] = (e[k] * inv - (k == y ? 1.0f : 0.0f)) * scale;
}

/* One thread per row: 1 if the row's prediction is labels[base + r]. */
__global__ void k_hits(const float *z, const uint8_t *labels, size_t base, int m, int n,
                       double *row_hit)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= m)
        return;
    row_hit[r] = row_argmax(z + (size_t)r * n, n) == labels[base + r] ? 1.0 : 0.0;
}

/* acc[t] += a_t[0] + a_t[1] + ... in row order (thread t of 2 sums one
 * array; b may be NULL): the CPU path's order of additions. */
__global__ void k_accumulate(const double *a, const double *b, int m, double *acc_a,
                             double *acc_b)
{
    const double *v = threadIdx.x == 0 ? a : b;
    double *acc = threadIdx.x == 0 ? acc_a : acc_b;
    if (threadIdx.x > 1 || !v)
        return;
    double s = *acc;
    for (int r = 0; r < m; r++)
        s += v[r];
    *acc = s;
}

/* out[j] = sum over the m rows of a[r][j], in row order (one thread per
 * column: reads are coalesced across the threads of a row). */
__global__ void k_colsum(const float *a, int m, int n, float *out)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n)
        return;
    float s = 0.0f;
    for (int r = 0; r < m; r++)
        s += a[(size_t)r * n + j];
    out[j] = s;
}

/* dh = 0 where the ReLU did not pass (h <= 0) */
__global__ void k_relu_back(float *dh, const float *h, size_t count)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count && h[i] <= 0.0f)
        dh[i] = 0.0f;
}

/* v = mu * v + g; w -= lr * v, each operation rounded on its own */
__global__ void k_sgd(float *w, float *v, const float *g, size_t n, float lr, float mu)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float vi = __fadd_rn(__fmul_rn(mu, v[i]), g[i]);
    v[i] = vi;
    w[i] = __fsub_rn(w[i], __fmul_rn(lr, vi));
}

/* ------------------------------------------------------------------ device */

extern "C" int fmnist_cuda_select(int local_rank, int *dev, int *ndev, char *name,
                                  size_t name_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        fail("cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return 1;
    }
    if (n == 0) {
        fail("the CUDA runtime sees no device");
        return 1;
    }
    int d = (local_rank < 0 ? 0 : local_rank) % n;
    if ((e = cudaSetDevice(d)) != cudaSuccess)
        return fail("cudaSetDevice(%d): %s", d, cudaGetErrorString(e));
    if ((e = cudaFree(0)) != cudaSuccess) { /* creates the context: fails early */
        (void)cudaGetLastError();
        fail("device %d of %d cannot be used: %s", d, n, cudaGetErrorString(e));
        return 1;
    }
    struct cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, d)) != cudaSuccess)
        return fail("cudaGetDeviceProperties(%d): %s", d, cudaGetErrorString(e));
    snprintf(name, name_len, "%s", prop.name);
    *dev = d;
    *ndev = n;
    return 0;
}

extern "C" void fmnist_gpu_destroy(fmnist_gpu_t *g)
{
    if (!g)
        return;
    if (g->blas_ok)
        cublasDestroy(g->blas);
    void *bufs[] = {g->params,   g->vel,       g->grad,     g->x,        g->h,
                    g->z,        g->dh,        g->scale,    g->train_img, g->train_lab,
                    g->test_img, g->test_lab,  g->order,    g->row_loss, g->row_hit,
                    g->stats};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            cudaFree(bufs[i]);
    free(g);
}

template <typename T> static int dev_alloc(T **p, size_t n, const char *what)
{
    cudaError_t e = cudaMalloc((void **)p, (n ? n : 1) * sizeof **p);
    if (e != cudaSuccess) {
        *p = NULL;
        return fail("cudaMalloc of %zu bytes (%s): %s", n * sizeof **p, what,
                    cudaGetErrorString(e));
    }
    return 0;
}

static int create(fmnist_gpu_t *g, const uint8_t *train_images, const uint8_t *train_labels,
                  const uint8_t *test_images, const uint8_t *test_labels, float mean, float std)
{
    size_t rows = g->rows;
    if (dev_alloc(&g->params, g->n_params, "parameters") ||
        dev_alloc(&g->vel, g->n_params, "momentum") ||
        dev_alloc(&g->grad, g->n_params, "gradient") ||
        dev_alloc(&g->x, rows * g->n_in, "inputs") ||
        dev_alloc(&g->h, rows * g->n_hid, "hidden activations") ||
        dev_alloc(&g->z, rows * g->n_out, "logits") ||
        dev_alloc(&g->dh, rows * g->n_hid, "hidden gradient") ||
        dev_alloc(&g->scale, 256, "pixel table") ||
        dev_alloc(&g->train_img, g->ntrain * g->n_in, "training images") ||
        dev_alloc(&g->train_lab, g->ntrain, "training labels") ||
        dev_alloc(&g->test_img, g->ntest * g->n_in, "test images") ||
        dev_alloc(&g->test_lab, g->ntest, "test labels") ||
        dev_alloc(&g->order, g->ntrain, "order") ||
        dev_alloc(&g->row_loss, rows, "row losses") ||
        dev_alloc(&g->row_hit, rows, "row hits") || dev_alloc(&g->stats, 3, "statistics"))
        return -1;
    CK_BLAS(cublasCreate(&g->blas));
    g->blas_ok = 1;
    /* plain FP32 (no TF32, no reduced-precision reductions); the default
     * stream; atomics stay off (cuBLAS's default) */
    CK_BLAS(cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH));
    CK_BLAS(cublasSetStream(g->blas, 0));
    CK_BLAS(cublasSetAtomicsMode(g->blas, CUBLAS_ATOMICS_NOT_ALLOWED));

    float scale[256];
    for (int v = 0; v < 256; v++)
        scale[v] = ((float)v / 255.0f - mean) / std;
    CK(cudaMemcpy(g->scale, scale, sizeof scale, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(g->train_img, train_images, g->ntrain * g->n_in, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(g->train_lab, train_labels, g->ntrain, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(g->test_img, test_images, g->ntest * g->n_in, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(g->test_lab, test_labels, g->ntest, cudaMemcpyHostToDevice));
    CK(cudaMemset(g->params, 0, g->n_params * sizeof *g->params));
    CK(cudaMemset(g->vel, 0, g->n_params * sizeof *g->vel));
    CK(cudaMemset(g->grad, 0, g->n_params * sizeof *g->grad));
    CK(cudaMemset(g->stats, 0, 3 * sizeof *g->stats));
    return 0;
}

extern "C" fmnist_gpu_t *fmnist_gpu_create(int n_in, int n_hid, int n_out, size_t rows,
                                           const uint8_t *train_images,
                                           const uint8_t *train_labels, size_t ntrain,
                                           const uint8_t *test_images,
                                           const uint8_t *test_labels, size_t ntest,
                                           float mean, float std)
{
    if (n_in <= 0 || n_hid <= 0 || n_out <= 0 || n_out > MAX_OUT || rows == 0 ||
        rows > (size_t)1 << 30) {
        fail("fmnist_gpu_create: unsupported shape %d-%d-%d, %zu rows", n_in, n_hid, n_out,
             rows);
        return NULL;
    }
    fmnist_gpu_t *g = (fmnist_gpu_t *)calloc(1, sizeof *g);
    if (!g) {
        fail("out of memory");
        return NULL;
    }
    g->n_in = n_in;
    g->n_hid = n_hid;
    g->n_out = n_out;
    g->off_w1 = 0;
    g->off_b1 = g->off_w1 + (size_t)n_in * n_hid;
    g->off_w2 = g->off_b1 + (size_t)n_hid;
    g->off_b2 = g->off_w2 + (size_t)n_hid * n_out;
    g->n_params = g->off_b2 + (size_t)n_out;
    g->rows = rows;
    g->ntrain = ntrain;
    g->ntest = ntest;
    if (create(g, train_images, train_labels, test_images, test_labels, mean, std) != 0) {
        fmnist_gpu_destroy(g);
        return NULL;
    }
    return g;
}

extern "C" int fmnist_gpu_cublas_version(fmnist_gpu_t *g)
{
    int v = 0;
    if (cublasGetVersion(g->blas, &v) != CUBLAS_STATUS_SUCCESS)
        return 0;
    return v;
}

extern "C" float *fmnist_gpu_grads(fmnist_gpu_t *g)
{
    return g->grad;
}

extern "C" int fmnist_gpu_put_state(fmnist_gpu_t *g, const float *params,
                                    const float *velocity)
{
    size_t bytes = g->n_params * sizeof(float);
    if (params)
        CK(cudaMemcpy(g->params, params, bytes, cudaMemcpyHostToDevice));
    if (velocity)
        CK(cudaMemcpy(g->vel, velocity, bytes, cudaMemcpyHostToDevice));
    return 0;
}

extern "C" int fmnist_gpu_get_state(fmnist_gpu_t *g, float *params, float *velocity)
{
    size_t bytes = g->n_params * sizeof(float);
    if (params)
        CK(cudaMemcpy(params, g->params, bytes, cudaMemcpyDeviceToHost));
    if (velocity)
        CK(cudaMemcpy(velocity, g->vel, bytes, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int fmnist_gpu_put_stats(fmnist_gpu_t *g, const double *stats)
{
    CK(cudaMemcpy(g->stats, stats, 2 * sizeof *stats, cudaMemcpyHostToDevice));
    return 0;
}

extern "C" int fmnist_gpu_get_stats(fmnist_gpu_t *g, double *stats)
{
    CK(cudaMemcpy(stats, g->stats, 2 * sizeof *stats, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int fmnist_gpu_set_order(fmnist_gpu_t *g, const uint32_t *order, size_t n)
{
    if (n > g->ntrain)
        return fail("fmnist_gpu_set_order: %zu ids for %zu samples", n, g->ntrain);
    CK(cudaMemcpy(g->order, order, n * sizeof *order, cudaMemcpyHostToDevice));
    return 0;
}

/* C = op(A) op(B), all row-major: C is m x n, the inner dimension k; lda,
 * ldb, ldc are the row lengths of A, B, C as stored.  Computed as the
 * column-major C^T = op(B)^T op(A)^T. */
static int gemm_rm(fmnist_gpu_t *g, int trans_a, int trans_b, int m, int n, int k,
                   const float *a, int lda, const float *b, int ldb, float *c, int ldc)
{
    const float one = 1.0f, zero = 0.0f;
    CK_BLAS(cublasSgemm(g->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                        trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, b, ldb, a, lda,
                        &zero, c, ldc));
    return 0;
}

/* forward: logits of the m rows of g->x into g->z, keeping g->h */
static int forward(fmnist_gpu_t *g, int m)
{
    const float *p = g->params;
    size_t nh = (size_t)m * g->n_hid, nz = (size_t)m * g->n_out;
    /* H = X W1 */
    if (gemm_rm(g, 0, 0, m, g->n_hid, g->n_in, g->x, g->n_in, p + g->off_w1, g->n_hid, g->h,
                g->n_hid))
        return -1;
    k_bias_relu<<<blocks_for(nh), THREADS>>>(g->h, p + g->off_b1, (size_t)m, g->n_hid);
    CK_LAUNCH("bias_relu");
    /* Z = H W2 */
    if (gemm_rm(g, 0, 0, m, g->n_out, g->n_hid, g->h, g->n_hid, p + g->off_w2, g->n_out, g->z,
                g->n_out))
        return -1;
    k_bias_add<<<blocks_for(nz), THREADS>>>(g->z, p + g->off_b2, (size_t)m, g->n_out);
    CK_LAUNCH("bias_add");
    return 0;
}

extern "C" int fmnist_gpu_shard_grad(fmnist_gpu_t *g, size_t lo, int m, float scale)
{
    if (m <= 0) {
        CK(cudaMemsetAsync(g->grad, 0, g->n_params * sizeof *g->grad, 0));
        return 0;
    }
    if ((size_t)m > g->rows || lo + (size_t)m > g->ntrain)
        return fail("fmnist_gpu_shard_grad: rows [%zu, %zu) out of range", lo, lo + (size_t)m);
    const float *p = g->params;
    float *gr = g->grad;
    const uint32_t *ids = g->order + lo;

    k_gather<<<blocks_for((size_t)m * g->n_in), THREADS>>>(g->train_img, ids, 0, (size_t)m,
                                                           g->n_in, g->scale, g->x);
    CK_LAUNCH("gather");
    if (forward(g, m))
        return -1;
    k_softmax_xent<<<blocks_for((size_t)m), THREADS>>>(g->z, g->train_lab, ids, m, g->n_out,
                                                       scale, g->row_loss, g->row_hit);
    CK_LAUNCH("softmax_xent");
    k_accumulate<<<1, 2>>>(g->row_loss, g->row_hit, m, g->stats, g->stats + 1);
    CK_LAUNCH("accumulate");

    /* dW2 = H^T dZ, db2 = column sums of dZ */
    if (gemm_rm(g, 1, 0, g->n_hid, g->n_out, m, g->h, g->n_hid, g->z, g->n_out, gr + g->off_w2,
                g->n_out))
        return -1;
    k_colsum<<<blocks_for((size_t)g->n_out), THREADS>>>(g->z, m, g->n_out, gr + g->off_b2);
    CK_LAUNCH("colsum");
    /* dH = dZ W2^T, through the ReLU */
    if (gemm_rm(g, 0, 1, m, g->n_hid, g->n_out, g->z, g->n_out, p + g->off_w2, g->n_out, g->dh,
                g->n_hid))
        return -1;
    k_relu_back<<<blocks_for((size_t)m * g->n_hid), THREADS>>>(g->dh, g->h,
                                                                (size_t)m * g->n_hid);
    CK_LAUNCH("relu_back");
    /* dW1 = X^T dH, db1 = column sums of dH */
    if (gemm_rm(g, 1, 0, g->n_in, g->n_hid, m, g->x, g->n_in, g->dh, g->n_hid, gr + g->off_w1,
                g->n_hid))
        return -1;
    k_colsum<<<blocks_for((size_t)g->n_hid), THREADS>>>(g->dh, m, g->n_hid, gr + g->off_b1);
    CK_LAUNCH("colsum");
    return 0;
}

extern "C" int fmnist_gpu_update(fmnist_gpu_t *g, float lr, float mu)
{
    k_sgd<<<blocks_for(g->n_params), THREADS>>>(g->params, g->vel, g->grad, g->n_params, lr,
                                                 mu);
    CK_LAUNCH("sgd");
    return 0;
}

extern "C" int fmnist_gpu_evaluate(fmnist_gpu_t *g, size_t lo, size_t hi, double *correct)
{
    if (hi > g->ntest || lo > hi)
        return fail("fmnist_gpu_evaluate: samples [%zu, %zu) out of range", lo, hi);
    CK(cudaMemsetAsync(g->stats + 2, 0, sizeof *g->stats, 0));
    for (size_t start = lo; start < hi; start += g->rows) {
        int m = (int)(hi - start < g->rows ? hi - start : g->rows);
        k_gather<<<blocks_for((size_t)m * g->n_in), THREADS>>>(g->test_img, NULL, start,
                                                               (size_t)m, g->n_in, g->scale,
                                                               g->x);
        CK_LAUNCH("gather");
        if (forward(g, m))
            return -1;
        k_hits<<<blocks_for((size_t)m), THREADS>>>(g->z, g->test_lab, start, m, g->n_out,
                                                   g->row_hit);
        CK_LAUNCH("hits");
        k_accumulate<<<1, 2>>>(g->row_hit, NULL, m, g->stats + 2, NULL);
        CK_LAUNCH("accumulate");
    }
    CK(cudaMemcpy(correct, g->stats + 2, sizeof *correct, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int fmnist_gpu_sync(fmnist_gpu_t *g)
{
    (void)g;
    CK(cudaDeviceSynchronize());
    return 0;
}
