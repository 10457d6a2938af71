/* gpu.c: CUDA device memory in libddl's collectives (built only when
 * configure finds the CUDA runtime).  ddl_init() counts the devices; with
 * none (no GPU, or no driver) every buffer is host memory and nothing here
 * runs.  A collective with a buffer in device memory (cudaPointerGetAttributes)
 * is staged: its input is copied to pinned host memory, the host algorithm
 * runs there, and its output is copied back.  That is correct on any node
 * and any number of processes per GPU; the NCCL path inside a node and the
 * pipelined hierarchical allreduce are the faster paths still to come
 * (issue 7), and they will replace this one where they apply.
 */
#include "config.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "ddl_int.h"
#include "log.h"

static int gpu_count;        /* devices seen by ddl_init() */
static char gpu_none_why[160];

/* Pinned staging buffers, grown on demand; used by the executing thread
 * only (like ddl_scratch). */
static struct {
    void *p;
    size_t len;
} stage[2];

void ddl_gpu_init(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky error */
        snprintf(gpu_none_why, sizeof gpu_none_why, "cudaGetDeviceCount: %s",
                 cudaGetErrorString(e));
        n = 0;
    } else if (n == 0) {
        snprintf(gpu_none_why, sizeof gpu_none_why, "the CUDA runtime sees no device");
    }
    gpu_count = n;
    if (n > 0)
        ddl_debug("CUDA: %d device(s); device buffers are staged through pinned host memory", n);
    else
        ddl_debug("CUDA: no usable GPU (%s): every buffer is host memory", gpu_none_why);
}

void ddl_gpu_fini(void)
{
    for (int i = 0; i < 2; i++) {
        if (stage[i].p)
            cudaFreeHost(stage[i].p);
        stage[i].p = NULL;
        stage[i].len = 0;
    }
    gpu_count = 0;
}

int ddl_gpu_count(void)
{
    return gpu_count;
}

int ddl_gpu_on_device(const void *p)
{
    if (gpu_count <= 0 || p == NULL || p == DDL_IN_PLACE)
        return 0;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    /* managed memory is reachable from the host: no staging needed */
    return a.type == cudaMemoryTypeDevice;
}

static void *stage_get(int i, size_t len, ddl_status_t *st)
{
    if (len <= stage[i].len && stage[i].p)
        return stage[i].p;
    if (stage[i].p)
        cudaFreeHost(stage[i].p);
    stage[i].p = NULL;
    stage[i].len = 0;
    cudaError_t e = cudaMallocHost(&stage[i].p, len ? len : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        stage[i].p = NULL;
        *st = ddl_fail(DDL_ERR_CUDA, "cudaMallocHost of %zu bytes for staging: %s", len,
                       cudaGetErrorString(e));
        return NULL;
    }
    stage[i].len = len;
    return stage[i].p;
}

static ddl_status_t copy(void *dst, const void *src, size_t len, const char *what)
{
    if (len == 0)
        return DDL_OK;
    cudaError_t e = cudaMemcpy(dst, src, len, cudaMemcpyDefault);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return ddl_fail(DDL_ERR_CUDA, "cudaMemcpy of %zu bytes (%s): %s", len, what,
                        cudaGetErrorString(e));
    }
    return DDL_OK;
}

/* extents: the bytes a collective reads from sendbuf and the bytes of
 * recvbuf it reads (in place, or a broadcast) and writes on this rank. */
static void extents(const ddl_opdesc_t *d, size_t *send, size_t *recv, int *recv_is_input)
{
    const size_t es = ddl_dtype_size(d->dtype), n = (size_t)d->comm->size;
    const int in_place = d->sendbuf == DDL_IN_PLACE;
    *send = 0;
    *recv = d->count * es;
    *recv_is_input = in_place;
    switch (d->kind) {
    case DDL_OPK_ALLREDUCE:
        *send = in_place ? 0 : d->count * es;
        break;
    case DDL_OPK_BCAST:
        *recv_is_input = 1;
        break;
    case DDL_OPK_REDUCE_SCATTER:
        *send = in_place ? 0 : d->count * n * es;
        *recv = in_place ? d->count * n * es : d->count * es;
        break;
    case DDL_OPK_ALLGATHER:
        *send = in_place ? 0 : d->count * es;
        *recv = d->count * n * es;
        break;
    case DDL_OPK_REDUCE:
        *send = in_place ? 0 : d->count * es;
        if (!in_place && d->comm->rank != d->root)
            *recv = 0; /* in place, every rank's input is in recvbuf */
        break;
    case DDL_OPK_BARRIER:
        *recv = 0;
        break;
    }
    if (!d->recvbuf)
        *recv = 0;
}

int ddl_gpu_staged(const ddl_opdesc_t *d, ddl_status_t *st)
{
    if (gpu_count <= 0 || d->kind == DDL_OPK_BARRIER)
        return 0;
    const int send_dev = ddl_gpu_on_device(d->sendbuf), recv_dev = ddl_gpu_on_device(d->recvbuf);
    if (!send_dev && !recv_dev)
        return 0;
    size_t sbytes, rbytes;
    int recv_in;
    extents(d, &sbytes, &rbytes, &recv_in);
    ddl_opdesc_t h = *d;
    *st = DDL_OK;
    if (send_dev && sbytes) {
        void *hs = stage_get(0, sbytes, st);
        if (!hs || (*st = copy(hs, d->sendbuf, sbytes, "input to host")) != DDL_OK)
            return 1;
        h.sendbuf = hs;
    }
    if (recv_dev && rbytes) {
        void *hr = stage_get(1, rbytes, st);
        if (!hr)
            return 1;
        if (recv_in && (*st = copy(hr, d->recvbuf, rbytes, "input to host")) != DDL_OK)
            return 1;
        h.recvbuf = hr;
    }
    *st = ddl_execute_host(&h);
    if (*st == DDL_OK && recv_dev && rbytes)
        *st = copy(d->recvbuf, h.recvbuf, rbytes, "result to the device");
    return 1;
}
