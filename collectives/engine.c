/* engine.c: libddl's progress engine for non-blocking collectives.
 *
 * The first ddl_i*() call starts one progress thread.  From then on every
 * collective is queued and run by that thread, one at a time in posting
 * order (which is also the order of the tags' sequence numbers, identical
 * on every rank), so only that thread touches the UCX worker.  Callers
 * overlap their computation with the transfer and collect the result with
 * ddl_test()/ddl_wait().  An abort needs no cooperation from the engine:
 * the transport's wait loop sees the communicator's flag and returns.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddl_int.h"
#include "log.h"

#define ENG ddl_ctx.eng

/* run_clock_us: the monotonic clock, for the requests' run times. */
static double run_clock_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void complete(ddl_request_t *r, ddl_status_t st)
{
    r->status = st;
    if (st != DDL_OK)
        snprintf(r->err, sizeof r->err, "%s", ddl_last_error());
    ddl_gpu_stream_done(&r->d); /* a CUDA stream waiting for it goes on */
    atomic_fetch_sub(&r->d.comm->pending, 1);
    atomic_store_explicit(&r->done, 1, memory_order_release);
}

static void *progress_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&ENG.mu);
    for (;;) {
        while (!ENG.head && !ENG.shutdown)
            pthread_cond_wait(&ENG.work, &ENG.mu);
        if (!ENG.head)
            break; /* shutdown with nothing left */
        ddl_request_t *r = ENG.head;
        pthread_mutex_unlock(&ENG.mu);

        ddl_clear_error();
        ddl_tl_t *tl = r->d.comm->tl;
        uint64_t b0 = tl ? atomic_load_explicit(&tl->bytes_sent, memory_order_relaxed) : 0;
        double t0 = run_clock_us();
        ddl_status_t st = ddl_execute(&r->d);
        r->run_us = run_clock_us() - t0;
        r->bytes_sent =
            tl ? atomic_load_explicit(&tl->bytes_sent, memory_order_relaxed) - b0 : 0;

        pthread_mutex_lock(&ENG.mu);
        ENG.head = r->next;
        if (!ENG.head)
            ENG.tail = NULL;
        complete(r, st);
        if (r->detached)
            free(r);
        pthread_cond_broadcast(&ENG.done);
    }
    pthread_mutex_unlock(&ENG.mu);
    ddl_scratch_free(); /* this thread's own (else freed at its end anyway) */
    return NULL;
}

static ddl_status_t engine_start(void)
{
    int rc;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&ENG.mu, NULL);
    pthread_cond_init(&ENG.work, NULL);
    pthread_cond_init(&ENG.done, &ca);
    pthread_condattr_destroy(&ca);
    ENG.shutdown = 0;
    if ((rc = pthread_create(&ENG.thread, NULL, progress_main, NULL)) != 0) {
        pthread_cond_destroy(&ENG.done);
        pthread_cond_destroy(&ENG.work);
        pthread_mutex_destroy(&ENG.mu);
        return ddl_fail(DDL_ERR_NOMEM, "cannot start the progress thread: %s", strerror(rc));
    }
    ENG.started = 1;
    return DDL_OK;
}

void ddl_engine_abort_queued(ddl_comm_t *comm)
{
    if (!ENG.started)
        return;
    int all = comm == &ddl_ctx.world;
    pthread_mutex_lock(&ENG.mu);
    /* the head is running: its wait loop sees the flag; unlink the rest */
    for (ddl_request_t *prev = ENG.head, *r = prev ? prev->next : NULL; r;) {
        ddl_request_t *next = r->next;
        if (all || r->d.comm == comm) {
            prev->next = next;
            if (ENG.tail == r)
                ENG.tail = prev;
            ddl_comm_check_abort(r->d.comm); /* sets this thread's error text */
            complete(r, ddl_restart_pending() ? DDL_RESTART : DDL_ERR_ABORTED);
            if (r->detached)
                free(r);
        } else {
            prev = r;
        }
        r = next;
    }
    pthread_cond_broadcast(&ENG.done);
    pthread_mutex_unlock(&ENG.mu);
}

int ddl_engine_in_progress_thread(void)
{
    return ENG.started && pthread_equal(pthread_self(), ENG.thread);
}

ddl_status_t ddl_engine_post(const ddl_opdesc_t *d, ddl_request_t **req)
{
    ddl_status_t st;
    ddl_request_t *r = calloc(1, sizeof *r);
    if (!r)
        return ddl_fail(DDL_ERR_NOMEM, "out of memory for a request");
    if (!ENG.started && (st = engine_start()) != DDL_OK) {
        free(r);
        return st;
    }
    r->d = *d;
    atomic_init(&r->done, 0);
    atomic_fetch_add(&d->comm->pending, 1);
    pthread_mutex_lock(&ENG.mu);
    if (ENG.tail)
        ENG.tail->next = r;
    else
        ENG.head = r;
    ENG.tail = r;
    pthread_cond_signal(&ENG.work);
    pthread_mutex_unlock(&ENG.mu);
    *req = r;
    return DDL_OK;
}

void ddl_engine_stop(void)
{
    if (!ENG.started)
        return;
    pthread_mutex_lock(&ENG.mu);
    ENG.shutdown = 1;
    pthread_cond_signal(&ENG.work);
    pthread_mutex_unlock(&ENG.mu);
    pthread_join(ENG.thread, NULL);
    pthread_cond_destroy(&ENG.done);
    pthread_cond_destroy(&ENG.work);
    pthread_mutex_destroy(&ENG.mu);
    memset(&ENG, 0, sizeof ENG);
}

/* finish: the caller's view of a completed request. */
static ddl_status_t finish(ddl_request_t *r)
{
    if (r->status != DDL_OK)
        return ddl_fail(r->status, "%s", r->err);
    return DDL_OK;
}

ddl_status_t ddl_test(ddl_request_t *req)
{
    if (!req)
        return ddl_fail(DDL_ERR_INVALID, "request is NULL");
    if (!atomic_load_explicit(&req->done, memory_order_acquire))
        return DDL_INPROGRESS;
    return finish(req);
}

ddl_status_t ddl_wait(ddl_request_t *req, int timeout_ms)
{
    int64_t t0 = ddl_beat_clock_ns();
    ddl_status_t st = ddl_wait_uncounted(req, timeout_ms);
    ddl_beat_waited(t0);
    return st;
}

ddl_status_t ddl_wait_uncounted(ddl_request_t *req, int timeout_ms)
{
    struct timespec deadline;
    if (!req)
        return ddl_fail(DDL_ERR_INVALID, "request is NULL");
    if (atomic_load_explicit(&req->done, memory_order_acquire))
        return finish(req);
    if (timeout_ms == 0)
        return DDL_INPROGRESS;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    if (timeout_ms > 0) {
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&ENG.mu);
    while (!atomic_load_explicit(&req->done, memory_order_acquire)) {
        if (timeout_ms < 0)
            pthread_cond_wait(&ENG.done, &ENG.mu);
        else if (pthread_cond_timedwait(&ENG.done, &ENG.mu, &deadline) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&ENG.mu);
    if (!atomic_load_explicit(&req->done, memory_order_acquire))
        return ddl_fail(DDL_ERR_TIMEOUT, "operation still running after %d ms", timeout_ms);
    return finish(req);
}

void ddl_request_free(ddl_request_t *req)
{
    if (!req)
        return;
    if (!ENG.started) {
        free(req); /* cannot be pending without an engine */
        return;
    }
    pthread_mutex_lock(&ENG.mu);
    int done = atomic_load_explicit(&req->done, memory_order_acquire);
    if (!done)
        req->detached = 1;
    pthread_mutex_unlock(&ENG.mu);
    if (done)
        free(req);
}

/* ---- the gradient exchange's backend: this engine and select.c's model ---- */

static ddl_status_t gx_post(const ddl_opdesc_t *d, void **h)
{
    ddl_request_t *r = NULL;
    ddl_status_t st;
    if (d->kind == DDL_OPK_ALLGATHER)
        st = ddl_iallgather(d->comm, d->sendbuf, d->recvbuf, d->count, d->dtype, &r);
    else
        st = ddl_iallreduce(d->comm, d->sendbuf, d->recvbuf, d->count, d->dtype, d->op, &r);
    *h = r;
    return st;
}

static ddl_status_t gx_wait(void *h, double *run_us, uint64_t *bytes)
{
    ddl_request_t *r = h;
    ddl_status_t st = ddl_wait(r, -1);
    if (run_us)
        *run_us = r->run_us;
    if (bytes)
        *bytes = r->bytes_sent;
    ddl_request_free(r);
    return st;
}

static void gx_release(void *h)
{
    ddl_request_free(h);
}

ddl_status_t ddl_gradx_create(ddl_comm_t *comm, ddl_op_t op, ddl_gradx_t **gx)
{
    static const ddl_gradx_backend_t be = {gx_post, gx_wait, gx_release, ddl_model_allreduce_us,
                                           ddl_model_allgather_us};
    if (gx)
        *gx = NULL;
    if (!ddl_ctx.initialized)
        return ddl_fail(DDL_ERR_NOT_INITIALIZED, "ddl_gradx_create: call ddl_init() first");
    return ddl_gradx_create_with(comm, op, &be, gx);
}
