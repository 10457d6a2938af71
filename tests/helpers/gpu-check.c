/* gpu-check.c: libddl's collectives on CUDA device memory and CUDA streams,
 * run under `ddlrun -n N` by tests/integration/t0017-gpu.t.
 *
 * Without a usable GPU it checks what must then hold (a CUDA stream gets
 * DDL_ERR_CUDA and nothing is queued; a NULL stream is the plain call) and
 * exits 77.  With one, every rank picks device DDL_LOCAL_RANK % devices
 * before ddl_init() and checks, every element exact (small integers):
 * allreduce (f32 sum in place and out of place, f64 max, i32 sum, f32 avg,
 * bf16 sum) on counts that do not divide by the local ranks, bcast,
 * allgather and reduce-scatter (both in place and not), reduce; random
 * floats allreduced to the same bits on every rank; the _stream calls
 * ordered between copies on a non-blocking stream, and after a plain
 * non-blocking call on the legacy default stream; and, last, an abort
 * while a device allreduce waits for ranks that never come.  Which path ran
 * (NCCL, hierarchical, staged) is libddl's choice; DDL_LOG_LEVEL=debug
 * shows it.  Exit status 0 only if every check passed on every rank.
 */
#include "config.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"

#define SKIP 77

static int rank, size;

static void die(const char *what, const char *why)
{
    fprintf(stderr, "gpu-check: rank %d: %s: %s\n", rank, what, why);
    exit(1);
}

static void cu(cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        die(what, cudaGetErrorString(e));
}

static void *dev_alloc(size_t bytes)
{
    void *p;
    cu(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
    return p;
}

/* in_val: rank r's input element i, a small integer. */
static int in_val(int r, size_t i)
{
    return (r + 1) * (int)(i % 13) - 6;
}

static uint16_t f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16); /* exact for the small integers used */
}

static float bf2f(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* allreduce of one type/op on count elements; in_place or not. */
static void check_allreduce(ddl_dtype_t t, ddl_op_t op, size_t n, int in_place, const char *name)
{
    const size_t es = ddl_dtype_size(t);
    char *h = malloc(n * es + 1), *want = malloc(n * es + 1);
    for (size_t i = 0; i < n; i++) {
        double acc = op == DDL_MAX ? -1e300 : 0;
        for (int r = 0; r < size; r++) {
            double v = in_val(r, i);
            acc = op == DDL_MAX ? (v > acc ? v : acc) : acc + v;
        }
        if (op == DDL_AVG)
            acc /= size;
        double mine = in_val(rank, i);
        switch (t) {
        case DDL_FLOAT32: ((float *)h)[i] = (float)mine; ((float *)want)[i] = (float)acc; break;
        case DDL_FLOAT64: ((double *)h)[i] = mine; ((double *)want)[i] = acc; break;
        case DDL_INT32: ((int32_t *)h)[i] = (int32_t)mine; ((int32_t *)want)[i] = (int32_t)acc; break;
        case DDL_BFLOAT16:
            ((uint16_t *)h)[i] = f2bf((float)mine);
            ((uint16_t *)want)[i] = f2bf((float)acc);
            break;
        default: die("check_allreduce", "type not covered");
        }
    }
    char *d_in = dev_alloc(n * es), *d_out = in_place ? d_in : dev_alloc(n * es);
    cu(cudaMemcpy(d_in, h, n * es, cudaMemcpyHostToDevice), "cudaMemcpy in");
    ddl_status_t st = ddl_allreduce(ddl_comm_world(), in_place ? DDL_IN_PLACE : d_in, d_out, n,
                                    t, op);
    memset(h, 0x55, n * es);
    cu(cudaMemcpy(h, d_out, n * es, cudaMemcpyDeviceToHost), "cudaMemcpy out");
    int good = st == DDL_OK && memcmp(h, want, n * es) == 0;
    if (!good && st == DDL_OK)
        for (size_t i = 0; i < n; i++)
            if (memcmp(h + i * es, want + i * es, es)) {
                fprintf(stderr, "rank %d: %s: element %zu differs (bf16 %g)\n", rank, name, i,
                        t == DDL_BFLOAT16 ? bf2f(((uint16_t *)h)[i]) : 0.0);
                break;
            }
    char what[160];
    snprintf(what, sizeof what, "allreduce %s of %zu elements%s on device memory", name, n,
             in_place ? " in place" : "");
    if (st != DDL_OK)
        fprintf(stderr, "rank %d: %s: %s\n", rank, what, ddl_last_error());
    check(good, what);
    cudaFree(d_in);
    if (!in_place)
        cudaFree(d_out);
    free(h);
    free(want);
}

static void check_others(size_t n)
{
    ddl_comm_t *w = ddl_comm_world();
    const size_t all = n * (size_t)size;
    int32_t *h = malloc((all + 1) * 4), *d = dev_alloc((all + 1) * 4), *d2 = dev_alloc((n + 1) * 4);
    char what[160];
    int good;

    /* bcast from the last rank */
    for (size_t i = 0; i < n; i++)
        h[i] = rank == size - 1 ? (int32_t)(i * 7 + 1) : -1;
    cu(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    good = ddl_bcast(w, d, n, DDL_INT32, size - 1) == DDL_OK;
    cu(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
    for (size_t i = 0; i < n; i++)
        good &= h[i] == (int32_t)(i * 7 + 1);
    snprintf(what, sizeof what, "bcast of %zu int32 from rank %d on device memory", n, size - 1);
    check(good, what);

    /* allgather, out of place then in place */
    for (int ip = 0; ip < 2; ip++) {
        for (size_t i = 0; i < n; i++)
            h[i] = rank * 1000 + (int32_t)i;
        cu(cudaMemset(d, 0xff, all * 4), "cudaMemset");
        cu(cudaMemcpy(ip ? d + (size_t)rank * n : d2, h, n * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
        good = ddl_allgather(w, ip ? DDL_IN_PLACE : d2, d, n, DDL_INT32) == DDL_OK;
        cu(cudaMemcpy(h, d, all * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
        for (size_t i = 0; i < all; i++)
            good &= h[i] == (int32_t)(i / n) * 1000 + (int32_t)(i % n);
        snprintf(what, sizeof what, "allgather of %zu int32 per rank%s on device memory", n,
                 ip ? " in place" : "");
        check(good, what);
    }

    /* reduce-scatter, out of place then in place (the block lands first) */
    for (int ip = 0; ip < 2; ip++) {
        for (size_t i = 0; i < all; i++)
            h[i] = (rank + 1) * (int32_t)(i % 11);
        cu(cudaMemcpy(d, h, all * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
        good = ddl_reduce_scatter(w, ip ? DDL_IN_PLACE : d, ip ? d : d2, n, DDL_INT32, DDL_SUM) ==
               DDL_OK;
        cu(cudaMemcpy(h, ip ? d : d2, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
        const int32_t tri = size * (size + 1) / 2;
        for (size_t i = 0; i < n; i++)
            good &= h[i] == tri * (int32_t)(((size_t)rank * n + i) % 11);
        snprintf(what, sizeof what, "reduce-scatter of %zu int32 per rank%s on device memory", n,
                 ip ? " in place" : "");
        check(good, what);
    }

    /* reduce to rank 0: recvbuf NULL elsewhere, then a host buffer there
     * (not used on those ranks, so it must not change the path) */
    for (int hostrecv = 0; hostrecv < 2; hostrecv++) {
        for (size_t i = 0; i < n; i++)
            h[i] = (rank + 1) * (int32_t)(i % 5);
        cu(cudaMemcpy(d2, h, n * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
        good = ddl_reduce(w, d2, rank == 0 ? (void *)d : hostrecv ? (void *)h : NULL, n,
                          DDL_INT32, DDL_SUM, 0) == DDL_OK;
        if (rank == 0) {
            cu(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
            for (size_t i = 0; i < n; i++)
                good &= h[i] == size * (size + 1) / 2 * (int32_t)(i % 5);
        }
        snprintf(what, sizeof what, "reduce of %zu int32 to rank 0 on device memory (%s "
                 "elsewhere)", n, hostrecv ? "a host recvbuf" : "recvbuf NULL");
        check(good, what);
    }
    cudaFree(d);
    cudaFree(d2);
    free(h);
}

/* the same bits on every rank for random floats */
static void check_identical(size_t n)
{
    float *h = malloc(n * 4), *d = dev_alloc(n * 4);
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        h[i] = (float)(s >> 40) / (float)(1 << 24) - 0.5f;
    }
    cu(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    int good = ddl_allreduce(ddl_comm_world(), DDL_IN_PLACE, d, n, DDL_FLOAT32, DDL_SUM) == DDL_OK;
    cu(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
    uint32_t crc = (uint32_t)crc32(0, (const Bytef *)h, (uInt)(n * 4));
    uint32_t *all = malloc((size_t)size * 4);
    good &= ddl_allgather(ddl_comm_world(), &crc, all, 1, DDL_INT32) == DDL_OK;
    for (int r = 0; r < size; r++)
        good &= all[r] == crc;
    char what[120];
    snprintf(what, sizeof what, "random floats (%zu): the same bits on every rank (crc %08x)", n, crc);
    check(good, what);
    cudaFree(d);
    free(h);
    free(all);
}

/* the _stream calls between asynchronous copies on one stream */
static void check_stream(size_t n)
{
    cudaStream_t s;
    cu(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    float *h, *d = dev_alloc(n * 4), *g = dev_alloc((size_t)size * n * 4);
    cu(cudaMallocHost((void **)&h, (size_t)size * n * 4), "cudaMallocHost");
    for (size_t i = 0; i < n; i++)
        h[i] = (float)in_val(rank, i);
    ddl_request_t *r1, *r2;
    cu(cudaMemcpyAsync(d, h, n * 4, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    ddl_status_t st = ddl_iallreduce_stream(ddl_comm_world(), DDL_IN_PLACE, d, n, DDL_FLOAT32,
                                            DDL_SUM, s, &r1);
    ddl_status_t st2 = ddl_iallgather_stream(ddl_comm_world(), d, g, n, DDL_FLOAT32, s, &r2);
    cu(cudaMemcpyAsync(h, g, (size_t)size * n * 4, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
    cu(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    /* the stream went on only after both completed: the requests are done */
    int good = st == DDL_OK && st2 == DDL_OK && ddl_test(r1) == DDL_OK && ddl_test(r2) == DDL_OK;
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < n; i++) {
            int want = 0;
            for (int q = 0; q < size; q++)
                want += in_val(q, i);
            good &= h[(size_t)r * n + i] == (float)want;
        }
    ddl_request_free(r1);
    ddl_request_free(r2);
    char what[160];
    snprintf(what, sizeof what, "allreduce then allgather on a CUDA stream between async copies "
             "(%zu elements): the stream waited for both", n);
    check(good, what);
    cudaFree(d);
    cudaFree(g);
    cudaFreeHost(h);
    cudaStreamDestroy(s);
}

/* a plain non-blocking device allreduce, then one on the legacy default
 * stream: the first must not wait on the second's hold of that stream */
static void check_plain_then_stream(size_t n)
{
    float *h = malloc(n * 4), *d1 = dev_alloc(n * 4), *d2 = dev_alloc(n * 4);
    for (size_t i = 0; i < n; i++)
        h[i] = (float)in_val(rank, i);
    cu(cudaMemcpy(d1, h, n * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    cu(cudaMemcpy(d2, h, n * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    ddl_request_t *r1 = NULL, *r2 = NULL;
    ddl_status_t s1 = ddl_iallreduce(ddl_comm_world(), DDL_IN_PLACE, d1, n, DDL_FLOAT32, DDL_SUM, &r1);
    ddl_status_t s2 = ddl_iallreduce_stream(ddl_comm_world(), DDL_IN_PLACE, d2, n, DDL_FLOAT32,
                                            DDL_SUM, cudaStreamLegacy, &r2);
    int good = s1 == DDL_OK && s2 == DDL_OK && ddl_wait(r1, 60000) == DDL_OK &&
               ddl_wait(r2, 60000) == DDL_OK;
    cu(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");
    for (int k = 0; k < 2 && good; k++) {
        cu(cudaMemcpy(h, k ? d2 : d1, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
        for (size_t i = 0; i < n; i++) {
            int want = 0;
            for (int q = 0; q < size; q++)
                want += in_val(q, i);
            good &= h[i] == (float)want;
        }
    }
    ddl_request_free(r1);
    ddl_request_free(r2);
    check(good, "a plain ddl_iallreduce, then one on the legacy default stream: both complete, "
                "both right");
    cudaFree(d1);
    cudaFree(d2);
    free(h);
}

static void *aborter(void *arg)
{
    (void)arg;
    usleep(500 * 1000);
    ddl_comm_abort(ddl_comm_world(), "gpu-check: abort while waiting");
    return NULL;
}

/* rank 0 waits in a device allreduce that no other rank joins; a thread
 * aborts the world; the call must return DDL_ERR_ABORTED, not hang. */
static void check_abort(void)
{
    if (rank != 0) {
        sleep(2); /* alive while rank 0 waits: its wait ends by the abort, not a lost peer */
        ddl_comm_abort(ddl_comm_world(), "gpu-check: this rank leaves");
        return;
    }
    float *d = dev_alloc(1 << 20);
    pthread_t th;
    pthread_create(&th, NULL, aborter, NULL);
    double t0 = now_ms();
    ddl_status_t st = ddl_allreduce(ddl_comm_world(), DDL_IN_PLACE, d, 1 << 18, DDL_FLOAT32, DDL_SUM);
    double dt = now_ms() - t0;
    pthread_join(th, NULL);
    char what[160];
    snprintf(what, sizeof what, "a device allreduce no one joins, aborted after 0.5 s: "
             "DDL_ERR_ABORTED after %.2f s", dt / 1000);
    expect(st, DDL_ERR_ABORTED, what);
    cudaFree(d);
}

int main(void)
{
    int ndev = 0;
    const char *lr = getenv("DDL_LOCAL_RANK");
    if (cudaGetDeviceCount(&ndev) != cudaSuccess)
        ndev = 0;
    if (ndev > 0)
        cudaSetDevice((lr ? atoi(lr) : 0) % ndev);
    ddl_status_t st = ddl_init();
    if (st != DDL_OK)
        die("ddl_init", ddl_last_error());
    rank = check_rank = ddl_rank();
    size = ddl_size();
    if (ddl_gpu_count() == 0) {
        ddl_request_t *req = (ddl_request_t *)1;
        float x = 1;
        expect(ddl_iallreduce_stream(ddl_comm_world(), DDL_IN_PLACE, &x, 1, DDL_FLOAT32, DDL_SUM,
                                     (void *)0x1, &req),
               DDL_ERR_CUDA, "no GPU: a CUDA stream gets DDL_ERR_CUDA");
        check(req == NULL && strstr(ddl_last_error(), "no usable GPU") != NULL,
              "... no request, and the error says there is no usable GPU");
        st = ddl_iallreduce_stream(ddl_comm_world(), DDL_IN_PLACE, &x, 1, DDL_FLOAT32, DDL_SUM,
                                   NULL, &req);
        check(st == DDL_OK && ddl_wait(req, -1) == DDL_OK && x == (float)size,
              "no GPU: a NULL stream is the plain non-blocking call");
        ddl_request_free(req);
        ddl_finalize();
        if (rank == 0)
            fprintf(stderr, "gpu-check: no usable GPU here: device checks skipped\n");
        return check_failures ? 1 : SKIP;
    }
    const size_t counts[] = {1, 7, 4097, (1 << 20) + 3};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        check_allreduce(DDL_FLOAT32, DDL_SUM, counts[k], 0, "f32 sum");
        check_allreduce(DDL_FLOAT32, DDL_SUM, counts[k], 1, "f32 sum");
    }
    check_allreduce(DDL_FLOAT64, DDL_MAX, 4097, 0, "f64 max");
    check_allreduce(DDL_INT32, DDL_SUM, 100003, 1, "i32 sum");
    check_allreduce(DDL_FLOAT32, DDL_AVG, 4097, 1, "f32 avg");
    check_allreduce(DDL_BFLOAT16, DDL_SUM, 4097, 1, "bf16 sum");
    check_others(5);
    check_others(65537);
    check_identical((1 << 20) + 5);
    check_stream(4097);
    check_stream((1 << 20) + 1);
    check_plain_then_stream(65537);
    check_abort();
    ddl_finalize();
    return check_failures ? 1 : 0;
}
