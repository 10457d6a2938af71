/* nb-check.c: non-blocking collectives and abort, run under `ddlrun -n N`
 * by tests/integration/t0007-nonblocking.t.  One scenario per run:
 *
 *   nb-check overlap          several iallreduce/ibcast/ibarrier in flight
 *                             while the rank computes; results checked;
 *                             blocking calls after them keep the order;
 *                             ddl_wait with a timeout on a delayed peer
 *   nb-check abort-pending    rank 0 never joins; the other ranks' pending
 *                             operations are aborted from another thread and
 *                             must fail with DDL_ERR_ABORTED within 1 s
 *   nb-check abort-blocking   a blocking allreduce that cannot complete is
 *                             aborted by a timer thread on every rank
 *   nb-check abort-queued     an operation queued on communicator B behind a
 *                             blocked one on the world fails at once when B
 *                             is aborted; ddl_comm_free refuses B while it
 *                             has pending operations; aborting the world
 *                             aborts every communicator
 *   nb-check warm-due         (ddlrun --restarts 1, DDL_BOOTSTRAP_TIMEOUT=2)
 *                             every rank opts in to warm restarts; in
 *                             generation 0 the last rank sees a failure
 *                             before the agents decided anything (it aborts
 *                             the world itself): its collective returns
 *                             DDL_RESTART and ddl_restart_pending() says 1
 *                             at once; no decision comes, so its
 *                             ddl_rejoin() fails with DDL_ERR_TIMEOUT and
 *                             it exits 3, to be restarted cold; the others
 *                             rejoin generation 1 warm, with its new worker
 *
 * Prints "PASS"/"FAIL" lines and exits non-zero on any failure.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "ddl.h"

static int rank, size;

static void overlap(void)
{
    enum { NOPS = 6, N = 100003 };
    float *buf[NOPS];
    ddl_request_t *req[NOPS];
    ddl_comm_t *w = ddl_comm_world();
    for (int k = 0; k < NOPS; k++) {
        buf[k] = malloc(N * sizeof(float));
        for (int i = 0; i < N; i++)
            buf[k][i] = (float)(rank + k + (i % 13));
        expect(ddl_iallreduce(w, DDL_IN_PLACE, buf[k], N, DDL_FLOAT32, DDL_SUM, &req[k]), DDL_OK,
               "iallreduce posted");
    }
    /* compute while the transfers run */
    volatile double x = 0;
    for (int i = 0; i < 2000000; i++)
        x += i * 1e-9;
    int64_t bval[3] = {rank == 1 % size ? 77 : 0, rank == 1 % size ? 88 : 0, 0};
    ddl_request_t *breq, *bar;
    expect(ddl_ibcast(w, bval, 2, DDL_INT64, 1 % size, &breq), DDL_OK, "ibcast posted");
    expect(ddl_ibarrier(w, &bar), DDL_OK, "ibarrier posted");
    int polls = 0;
    ddl_status_t st;
    while ((st = ddl_test(req[0])) == DDL_INPROGRESS)
        polls++;
    expect(st, DDL_OK, "ddl_test reaches DDL_OK");
    for (int k = 0; k < NOPS; k++) {
        expect(ddl_wait(req[k], -1), DDL_OK, "ddl_wait of an iallreduce");
        int wrong = 0;
        for (int i = 0; i < N; i++) {
            float want = 0;
            for (int r = 0; r < size; r++)
                want += (float)(r + k + (i % 13));
            wrong += buf[k][i] != want;
        }
        check(wrong == 0, "iallreduce result is exact");
        ddl_request_free(req[k]);
        free(buf[k]);
    }
    expect(ddl_wait(breq, 10000), DDL_OK, "ddl_wait of the ibcast");
    check(bval[0] == 77 && bval[1] == 88 && bval[2] == 0, "ibcast result");
    expect(ddl_wait(bar, 10000), DDL_OK, "ddl_wait of the ibarrier");
    ddl_request_free(breq);
    ddl_request_free(bar);

    /* a blocking call after non-blocking ones runs after them */
    double v = rank + 1, s = 0;
    ddl_request_t *r1;
    expect(ddl_iallreduce(w, &v, &s, 1, DDL_FLOAT64, DDL_SUM, &r1), DDL_OK, "iallreduce posted");
    double v2 = 1, s2 = 0;
    expect(ddl_allreduce(w, &v2, &s2, 1, DDL_FLOAT64, DDL_MAX), DDL_OK, "blocking allreduce");
    expect(ddl_wait(r1, -1), DDL_OK, "the earlier request is complete");
    check(s == size * (size + 1) / 2.0 && s2 == 1, "both results are right");
    ddl_request_free(r1);

    /* ddl_wait with a timeout while a peer is late */
    if (size > 1) {
        ddl_request_t *late;
        double t = 0;
        if (rank == 1)
            usleep(700 * 1000);
        expect(ddl_iallreduce(w, DDL_IN_PLACE, &t, 1, DDL_FLOAT64, DDL_SUM, &late), DDL_OK,
               "iallreduce with a late peer posted");
        if (rank == 0)
            expect(ddl_wait(late, 100), DDL_ERR_TIMEOUT, "ddl_wait(100 ms) times out");
        expect(ddl_wait(late, -1), DDL_OK, "ddl_wait(-1) then completes");
        ddl_request_free(late);
    }
    /* a request freed while running completes in the background */
    double z = 1;
    ddl_request_t *orphan;
    expect(ddl_iallreduce(w, DDL_IN_PLACE, &z, 1, DDL_FLOAT64, DDL_SUM, &orphan), DDL_OK,
           "iallreduce to be freed early");
    ddl_request_free(orphan);
    expect(ddl_barrier(w), DDL_OK, "barrier after a freed request");
    check(z == size, "the freed request still completed");
    (void)polls;
}

static void *abort_later(void *arg)
{
    usleep((useconds_t)(*(int *)arg) * 1000);
    ddl_comm_abort(ddl_comm_world(), "test abort from a second thread");
    return NULL;
}

static void abort_pending(void)
{
    enum { NOPS = 4 };
    ddl_comm_t *w = ddl_comm_world();
    double buf[NOPS][1000];
    ddl_request_t *req[NOPS];
    int delay_ms = 300;
    pthread_t th;
    if (rank == 0) {
        /* never joins: the others' operations stay pending until aborted */
        usleep(delay_ms * 1000);
        expect(ddl_comm_abort(w, "rank 0 gives up"), DDL_OK, "abort on rank 0");
        usleep(1500 * 1000); /* stay alive: exiting would be a peer failure, not an abort */
    } else {
        for (int k = 0; k < NOPS; k++) {
            memset(buf[k], 0, sizeof buf[k]);
            expect(ddl_iallreduce(w, DDL_IN_PLACE, buf[k], 1000, DDL_FLOAT64, DDL_SUM, &req[k]),
                   DDL_OK, "iallreduce posted");
        }
        check(ddl_test(req[0]) == DDL_INPROGRESS, "operations are pending");
        pthread_create(&th, NULL, abort_later, &delay_ms);
        double t0 = now_ms();
        for (int k = 0; k < NOPS; k++)
            expect(ddl_wait(req[k], 5000), DDL_ERR_ABORTED, "pending operation fails with ABORTED");
        double latency = now_ms() - t0 - delay_ms;
        printf("rank %d: abort latency %.1f ms\n", rank, latency);
        check(latency < 1000, "every pending operation failed within 1 s of the abort");
        check(strstr(ddl_last_error(), "test abort from a second thread") != NULL,
              "the error text carries the reason");
        pthread_join(th, NULL);
        for (int k = 0; k < NOPS; k++)
            ddl_request_free(req[k]);
    }
    ddl_request_t *r;
    expect(ddl_iallreduce(w, DDL_IN_PLACE, buf[0], 10, DDL_FLOAT64, DDL_SUM, &r),
           DDL_ERR_ABORTED, "posting on an aborted communicator fails at once");
    check(r == NULL, "... without a request");
    expect(ddl_barrier(w), DDL_ERR_ABORTED, "blocking call on an aborted communicator");
    usleep(1000 * 1000); /* exiting at once would be a peer failure for slower ranks */
}

static void abort_blocking(void)
{
    ddl_comm_t *w = ddl_comm_world();
    int delay_ms = 400;
    pthread_t th;
    double v[4096] = {0};
    pthread_create(&th, NULL, abort_later, &delay_ms);
    double t0 = now_ms();
    ddl_status_t st = DDL_OK;
    if (rank != 0 || size == 1) /* rank 0 never joins */
        st = ddl_allreduce(w, DDL_IN_PLACE, v, 4096, DDL_FLOAT64, DDL_SUM);
    else
        usleep((delay_ms + 1500) * 1000); /* alive until the others have been aborted */
    double latency = now_ms() - t0 - delay_ms;
    pthread_join(th, NULL);
    if (rank != 0 || size == 1) {
        expect(st, size == 1 ? DDL_OK : DDL_ERR_ABORTED, "blocking allreduce is aborted");
        printf("rank %d: abort latency %.1f ms\n", rank, latency);
        check(size == 1 || latency < 1000, "it returned within 1 s of the abort");
    }
    usleep(1000 * 1000); /* exiting at once would be a peer failure for slower ranks */
}

static void abort_queued(void)
{
    ddl_comm_t *w = ddl_comm_world(), *b = NULL, *c = NULL;
    ddl_status_t st;
    expect(ddl_comm_split(w, 0, rank, &b), DDL_OK, "split B");
    expect(ddl_comm_split(w, 0, rank, &c), DDL_OK, "split C");
    if (rank == 0 && size > 1) {
        usleep(800 * 1000); /* never joins the world operation */
        ddl_comm_abort(w, "rank 0 aborts the world");
        usleep(1500 * 1000);
    } else if (size > 1) {
        double x = 1, y = 2;
        ddl_request_t *rw, *rb;
        expect(ddl_iallreduce(w, DDL_IN_PLACE, &x, 1, DDL_FLOAT64, DDL_SUM, &rw), DDL_OK,
               "world operation posted (it cannot complete)");
        expect(ddl_iallreduce(b, DDL_IN_PLACE, &y, 1, DDL_FLOAT64, DDL_SUM, &rb), DDL_OK,
               "operation on B queued behind it");
        expect(ddl_comm_free(b), DDL_ERR_INVALID, "ddl_comm_free(B) refuses while B has work");
        usleep(100 * 1000);
        double t0 = now_ms();
        ddl_comm_abort(b, "abort B only");
        st = ddl_wait(rb, 2000);
        double latency = now_ms() - t0;
        expect(st, DDL_ERR_ABORTED, "the queued operation on B fails with ABORTED");
        printf("rank %d: abort latency %.1f ms\n", rank, latency);
        check(latency < 100, "... at once, although the world operation still blocks");
        check(ddl_test(rw) == DDL_INPROGRESS, "the world operation is still running");
        ddl_request_free(rb);
        expect(ddl_comm_free(b), DDL_OK, "ddl_comm_free(B) once its work is done");
        b = NULL;
        ddl_comm_abort(w, "abort the world");
        expect(ddl_wait(rw, 2000), DDL_ERR_ABORTED, "the world operation fails with ABORTED");
        ddl_request_free(rw);
        expect(ddl_allreduce(c, DDL_IN_PLACE, &y, 1, DDL_FLOAT64, DDL_SUM), DDL_ERR_ABORTED,
               "after a world abort, communicator C is aborted too");
        usleep(1000 * 1000);
    }
    ddl_comm_free(b);
    ddl_comm_free(c);
}

static void warm_due(void)
{
    const char *g = getenv("DDL_GENERATION");
    const int gen = g ? atoi(g) : 0;
    ddl_comm_t *w = ddl_comm_world();
    double x = 1;
    expect(ddl_warm_enable(), DDL_OK, "ddl_warm_enable");
    if (gen == 0) { /* a new worker of generation 1 goes on where the kept ones do */
        expect(ddl_allreduce(w, DDL_IN_PLACE, &x, 1, DDL_FLOAT64, DDL_SUM), DDL_OK,
               "a first allreduce");
        check(x == size, "... sums to the world size");
    }
    if (gen == 0 && rank == size - 1) {
        check(!ddl_restart_pending(), "no restart pending before the failure");
        ddl_comm_abort(w, "a failure seen here before any decision (nb-check warm-due)");
        expect(ddl_allreduce(w, DDL_IN_PLACE, &x, 1, DDL_FLOAT64, DDL_SUM), DDL_RESTART,
               "the failure before any decision: the collective returns DDL_RESTART");
        check(ddl_restart_pending(), "... and ddl_restart_pending() says 1 at once");
        double t0 = now_ms();
        expect(ddl_rejoin(NULL), DDL_ERR_TIMEOUT,
               "no decision comes: ddl_rejoin() gives up with DDL_ERR_TIMEOUT");
        double took = now_ms() - t0;
        printf("rank %d: ddl_rejoin gave up after %.0f ms\n", rank, took);
        check(took >= 1500 && took < 10000, "... after DDL_BOOTSTRAP_TIMEOUT (2 s)");
        check(!ddl_restart_pending(), "... and no restart is pending any more");
        fflush(stdout);
        exit(check_failures ? 1 : 3); /* withdrawn: to be restarted cold */
    }
    if (gen == 0) {
        expect(ddl_allreduce(w, DDL_IN_PLACE, &x, 1, DDL_FLOAT64, DDL_SUM), DDL_RESTART,
               "the peer's exit ended generation 0: DDL_RESTART");
        check(ddl_restart_pending(), "... and ddl_restart_pending() says 1");
        expect(ddl_rejoin(&w), DDL_OK, "ddl_rejoin() joins generation 1 warm");
        check(w == ddl_comm_world() && ddl_size() == size && ddl_rank() == rank,
              "... same size, same rank");
        check(!ddl_restart_pending(), "... and no restart is pending any more");
    }
    x = 1;
    expect(ddl_allreduce(w, DDL_IN_PLACE, &x, 1, DDL_FLOAT64, DDL_SUM), DDL_OK,
           "an allreduce in generation 1");
    check(x == size, "... sums to the world size");
    printf("rank %d: generation %s, done\n", rank, gen ? "1 (cold)" : "1 (warm)");
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    ddl_status_t st = ddl_init();
    if (st != DDL_OK) {
        fprintf(stderr, "nb-check: ddl_init: %s: %s\n", ddl_status_str(st), ddl_last_error());
        return 1;
    }
    rank = ddl_rank();
    check_rank = rank;
    size = ddl_size();
    if (strcmp(mode, "overlap") == 0)
        overlap();
    else if (strcmp(mode, "abort-pending") == 0)
        abort_pending();
    else if (strcmp(mode, "abort-blocking") == 0)
        abort_blocking();
    else if (strcmp(mode, "abort-queued") == 0)
        abort_queued();
    else if (strcmp(mode, "warm-due") == 0)
        warm_due();
    else {
        fprintf(stderr, "usage: nb-check overlap|abort-pending|abort-blocking|abort-queued|"
                "warm-due\n");
        return 2;
    }
    st = ddl_finalize();
    expect(st, DDL_OK, "ddl_finalize returns");
    return check_failures ? 1 : 0;
}
