/* fmnist_cuda.h: the device side of `fmnist-train --device cuda` (C API of
 * fmnist_cuda.cu, compiled by nvcc).  Built only when configure finds the
 * CUDA runtime, cuBLAS and nvcc (FMNIST_CUDA).
 *
 * The model is the CPU path's: an MLP n_in-n_hid-n_out with one flat float
 * buffer of parameters W1 [n_in x n_hid], b1 [n_hid], W2 [n_hid x n_out],
 * b2 [n_out], each matrix row-major, and the gradient in the same layout.
 * Parameters, momentum, gradient, activations and both data sets live on
 * the device; matrix products are cuBLAS SGEMMs, the rest small kernels.
 * Everything runs on the legacy default stream, in a fixed order with no
 * atomics, so the same inputs give the same bits every time: libddl's
 * collectives on device memory are ordered after that stream's work.
 *
 * Functions returning int give 0 on success and -1 on a CUDA or cuBLAS
 * failure, described by fmnist_cuda_error().
 */
#ifndef FMNIST_CUDA_H
#define FMNIST_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fmnist_gpu fmnist_gpu_t;

/* fmnist_cuda_error: what the last failed call of this API met. */
const char *fmnist_cuda_error(void);

/* fmnist_cuda_select: before ddl_init(), make device local_rank % count
 * current (libddl takes the current device as this rank's).  Returns 0 with
 * *dev, *ndev and the device's name filled; 1 when there is no usable GPU
 * (no driver, no device: fmnist_cuda_error() says why); -1 on another
 * failure. */
int fmnist_cuda_select(int local_rank, int *dev, int *ndev, char *name, size_t name_len);

/* fmnist_gpu_create: device buffers for chunks of at most rows samples and
 * copies of both data sets (images of n_in bytes each, labels < n_out).
 * Inputs are standardised as ((pixel / 255) - mean) / std.  NULL on
 * failure. */
fmnist_gpu_t *fmnist_gpu_create(int n_in, int n_hid, int n_out, size_t rows,
                                const uint8_t *train_images, const uint8_t *train_labels,
                                size_t ntrain, const uint8_t *test_images,
                                const uint8_t *test_labels, size_t ntest, float mean,
                                float std);
void fmnist_gpu_destroy(fmnist_gpu_t *g);

/* fmnist_gpu_version: cuBLAS version (e.g. 130100 for 13.1.0). */
int fmnist_gpu_cublas_version(fmnist_gpu_t *g);

/* fmnist_gpu_grads: the device gradient buffer (n_params floats), for the
 * allreduce. */
float *fmnist_gpu_grads(fmnist_gpu_t *g);

/* Copies between host and device of the parameters and the momentum
 * (n_params floats each; NULL: not copied), and of the epoch's training
 * statistics (2 doubles: loss sum, correct predictions). */
int fmnist_gpu_put_state(fmnist_gpu_t *g, const float *params, const float *velocity);
int fmnist_gpu_get_state(fmnist_gpu_t *g, float *params, float *velocity);
int fmnist_gpu_put_stats(fmnist_gpu_t *g, const double *stats);
int fmnist_gpu_get_stats(fmnist_gpu_t *g, double *stats);

/* fmnist_gpu_set_order: the epoch's order of the training samples (n ids). */
int fmnist_gpu_set_order(fmnist_gpu_t *g, const uint32_t *order, size_t n);

/* fmnist_gpu_shard_grad: the gradient of the m samples at positions
 * [lo, lo+m) of the order, each sample's gradient scaled by scale (1/B for a
 * global batch of B), summed into the gradient buffer (overwritten; zeros
 * when m is 0); their loss and hits are added to the statistics.  Queued
 * on the legacy default stream. */
int fmnist_gpu_shard_grad(fmnist_gpu_t *g, size_t lo, int m, float scale);

/* fmnist_gpu_update: v = mu * v + grad; w -= lr * v (queued). */
int fmnist_gpu_update(fmnist_gpu_t *g, float lr, float mu);

/* fmnist_gpu_evaluate: correct predictions on test samples [lo, hi). */
int fmnist_gpu_evaluate(fmnist_gpu_t *g, size_t lo, size_t hi, double *correct);

/* fmnist_gpu_sync: wait for the work queued so far. */
int fmnist_gpu_sync(fmnist_gpu_t *g);

#ifdef __cplusplus
}
#endif

#endif /* FMNIST_CUDA_H */
