/* t_api.c: libddl's public API in a single process without an agent: the
 * world of one, argument errors with their status codes and detail texts,
 * status strings, and init/finalize ordering.  Linked against the built
 * shared library, as a user program would be. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddl.h"
#include "../tap.h"

int main(void)
{
    plan(NO_PLAN);
    unsetenv("DDL_SIZE");
    unsetenv("DDL_RANK");
    unsetenv("DDL_AGENT_SOCK");

    float x[4] = {1, 2, 3, 4}, y[4];
    ddl_mem_t *early = NULL;
    is(ddl_mem_register(x, sizeof x, &early), DDL_ERR_NOT_INITIALIZED,
       "ddl_mem_register before ddl_init");
    void *early_ptr = NULL;
    is(ddl_mem_alloc(64, &early_ptr, &early), DDL_ERR_NOT_INITIALIZED,
       "ddl_mem_alloc before ddl_init");
    is(ddl_allreduce(ddl_comm_world(), x, y, 4, DDL_FLOAT32, DDL_SUM), DDL_ERR_NOT_INITIALIZED,
       "allreduce before ddl_init");
    is(ddl_finalize(), DDL_ERR_NOT_INITIALIZED, "finalize before ddl_init");
    ok(ddl_comm_world() == NULL, "no world before ddl_init");

    setenv("DDL_SIZE", "two", 1);
    is(ddl_init(), DDL_ERR_INVALID, "DDL_SIZE=two is refused");
    ok(strstr(ddl_last_error(), "DDL_SIZE='two'") != NULL, "... naming the value: %s", ddl_last_error());
    setenv("DDL_SIZE", "2", 1);
    setenv("DDL_RANK", "2", 1);
    is(ddl_init(), DDL_ERR_INVALID, "DDL_RANK=2 of 2 is refused");
    setenv("DDL_RANK", "0", 1);
    is(ddl_init(), DDL_ERR_BOOTSTRAP, "DDL_SIZE=2 without an agent socket");
    ok(strstr(ddl_last_error(), "DDL_AGENT_SOCK") != NULL, "... says what is missing: %s",
       ddl_last_error());
    setenv("DDL_AGENT_SOCK", "/nonexistent/agent.sock", 1);
    setenv("DDL_BOOTSTRAP_TIMEOUT", "1", 1);
    is(ddl_init(), DDL_ERR_BOOTSTRAP, "an agent socket that does not exist");
    ok(strstr(ddl_last_error(), "/nonexistent/agent.sock") != NULL, "... names the path: %s",
       ddl_last_error());
    unsetenv("DDL_SIZE");
    unsetenv("DDL_RANK");
    unsetenv("DDL_AGENT_SOCK");

    is(ddl_init(), DDL_OK, "ddl_init alone: a world of one");
    is(ddl_init(), DDL_ERR_ALREADY, "second ddl_init");
    is(ddl_warm_enable(), DDL_ERR_UNSUPPORTED, "ddl_warm_enable in a world of one (no agent)");
    ok(strstr(ddl_last_error(), "ddlrun") != NULL, "... says how to start the program: %s",
       ddl_last_error());
    is(ddl_rejoin(NULL), DDL_ERR_INVALID, "ddl_rejoin without ddl_warm_enable");
    is(ddl_restart_pending(), 0, "no restart pending");
    ok(ddl_rank() == 0 && ddl_size() == 1 && ddl_local_rank() == 0 && ddl_local_size() == 1 &&
           ddl_node_id() == 0 && ddl_num_nodes() == 1,
       "identity of a world of one");
    ddl_comm_t *w = ddl_comm_world();
    ok(w && ddl_comm_rank(w) == 0 && ddl_comm_size(w) == 1, "world communicator");
    is(ddl_comm_size(NULL), -1, "size of NULL comm");

    is(ddl_allreduce(w, x, y, 4, DDL_FLOAT32, DDL_SUM), DDL_OK, "allreduce of one rank");
    ok(memcmp(x, y, sizeof x) == 0, "... copies the input");
    is(ddl_allreduce(w, DDL_IN_PLACE, x, 4, DDL_FLOAT32, DDL_AVG), DDL_OK, "in-place avg");
    ok(x[3] == 4, "... of one rank is the value");
    is(ddl_allreduce(w, NULL, y, 4, DDL_FLOAT32, DDL_SUM), DDL_ERR_INVALID, "NULL send buffer");
    is(ddl_allreduce(w, x, NULL, 0, DDL_FLOAT32, DDL_SUM), DDL_OK, "count 0 with NULL is fine");
    is(ddl_allreduce(w, x, y, 4, DDL_INT32, DDL_AVG), DDL_ERR_UNSUPPORTED, "avg on integers");
    is(ddl_allreduce(w, x, y, 4, (ddl_dtype_t)77, DDL_SUM), DDL_ERR_INVALID, "unknown type");
    is(ddl_allreduce(NULL, x, y, 4, DDL_FLOAT32, DDL_SUM), DDL_ERR_INVALID, "NULL communicator");
    is(ddl_allreduce(w, x, y, SIZE_MAX / 2, DDL_FLOAT32, DDL_SUM), DDL_ERR_INVALID,
       "count whose byte size overflows");
    is(ddl_bcast(w, x, 4, DDL_FLOAT32, 1), DDL_ERR_INVALID, "bcast root 1 of 1 rank");
    ok(strstr(ddl_last_error(), "root 1") != NULL, "... names the root: %s", ddl_last_error());
    is(ddl_bcast(w, x, 4, DDL_FLOAT32, 0), DDL_OK, "bcast from root 0");
    is(ddl_barrier(w), DDL_OK, "barrier of one");
    /* the other collectives and communicators, in a world of one */
    float rs_in[3] = {1, 2, 3}, rs_out[3] = {0};
    is(ddl_reduce_scatter(w, rs_in, rs_out, 3, DDL_FLOAT32, DDL_SUM), DDL_OK, "reduce_scatter");
    ok(rs_out[2] == 3, "... of one rank copies the block");
    is(ddl_reduce_scatter(w, rs_in, rs_out, 3, DDL_UINT8, DDL_AVG), DDL_ERR_UNSUPPORTED,
       "avg on u8 is unsupported");
    is(ddl_allgather(w, rs_in, NULL, 3, DDL_FLOAT32), DDL_ERR_INVALID, "allgather into NULL");
    is(ddl_allgather(w, DDL_IN_PLACE, rs_out, 3, DDL_FLOAT32), DDL_OK, "allgather in place");
    is(ddl_reduce(w, rs_in, rs_out, 3, DDL_FLOAT32, DDL_MAX, 0), DDL_OK, "reduce to root 0");
    is(ddl_reduce(w, rs_in, rs_out, 3, DDL_FLOAT32, DDL_MAX, 3), DDL_ERR_INVALID, "reduce to root 3");
    ok(ddl_comm_node() && ddl_comm_size(ddl_comm_node()) == 1, "node communicator of one");
    ok(ddl_comm_cross() && ddl_comm_size(ddl_comm_cross()) == 1, "cross communicator of one");
    ddl_comm_t *sub = NULL;
    is(ddl_comm_split(w, 5, 0, &sub), DDL_OK, "comm_split");
    ok(sub && ddl_comm_size(sub) == 1 && ddl_comm_rank(sub) == 0, "... gives a communicator of one");
    is(ddl_allreduce(sub, x, y, 4, DDL_FLOAT32, DDL_SUM), DDL_OK, "allreduce on it");
    is(ddl_comm_free(sub), DDL_OK, "comm_free");
    is(ddl_comm_split(w, -7, 0, &sub), DDL_ERR_INVALID, "negative color is invalid");
    is(ddl_comm_free(w), DDL_OK, "freeing the world is ignored");
    uint16_t h[2] = {0x3c00, 0x4000}; /* 1.0 and 2.0 in binary16 */
    is(ddl_allreduce(w, DDL_IN_PLACE, h, 2, DDL_FLOAT16, DDL_AVG), DDL_OK, "f16 avg");
    ok(h[0] == 0x3c00 && h[1] == 0x4000, "... of one rank keeps the bits");
    is(ddl_dtype_size(DDL_BFLOAT16), 2, "bf16 is 2 bytes");
    is(ddl_dtype_size(DDL_UINT8), 1, "u8 is 1 byte");

    ddl_request_t *req = NULL;
    is(ddl_iallreduce(w, x, y, 4, DDL_FLOAT32, DDL_SUM, NULL), DDL_ERR_INVALID, "NULL request pointer");
    is(ddl_iallreduce(w, x, y, 4, DDL_INT32, DDL_AVG, &req), DDL_ERR_UNSUPPORTED,
       "a non-blocking call validates like the blocking one");
    ok(req == NULL, "... and returns no request");
    is(ddl_iallreduce(w, x, y, 4, DDL_FLOAT32, DDL_SUM, &req), DDL_OK, "iallreduce");
    is(ddl_wait(req, 5000), DDL_OK, "... completes");
    is(ddl_test(req), DDL_OK, "ddl_test after completion");
    ddl_request_free(req);
    is(ddl_test(NULL), DDL_ERR_INVALID, "ddl_test(NULL)");
    ddl_request_free(NULL);
    is(ddl_comm_abort(NULL, "x"), DDL_ERR_INVALID, "abort of NULL");

    /* registered buffers */
    ddl_mem_t *mem = NULL, *mem2 = NULL;
    is(ddl_mem_register(NULL, 16, &mem), DDL_ERR_INVALID, "ddl_mem_register of NULL");
    is(ddl_mem_register(x, 0, &mem), DDL_ERR_INVALID, "ddl_mem_register of 0 bytes");
    is(ddl_mem_register(x, sizeof x, NULL), DDL_ERR_INVALID, "ddl_mem_register without a handle");
    is(ddl_mem_register(x, sizeof x, &mem), DDL_OK, "ddl_mem_register of 16 bytes");
    is(ddl_mem_register(x, sizeof x, &mem2), DDL_OK, "... and again, overlapping");
    is(ddl_allreduce(ddl_comm_world(), DDL_IN_PLACE, x, 4, DDL_FLOAT32, DDL_SUM), DDL_OK,
       "allreduce on a registered buffer");
    is(ddl_mem_deregister(mem), DDL_OK, "ddl_mem_deregister");
    is(ddl_mem_deregister(mem), DDL_ERR_INVALID, "... twice is refused");
    ok(strstr(ddl_last_error(), "deregistered twice") != NULL, "... saying so: %s",
       ddl_last_error());
    is(ddl_mem_deregister(NULL), DDL_OK, "ddl_mem_deregister(NULL)");
    (void)mem2; /* left for ddl_finalize() to release */

    /* allocated (mappable) buffers; a world of one maps nothing */
    ddl_mem_t *am = NULL, *am2 = NULL;
    float *ap = NULL;
    void *ap2 = NULL;
    is(ddl_mem_alloc(0, (void **)&ap, &am), DDL_ERR_INVALID, "ddl_mem_alloc of 0 bytes");
    is(ddl_mem_alloc(64, NULL, &am), DDL_ERR_INVALID, "ddl_mem_alloc without a pointer");
    is(ddl_mem_alloc(64, (void **)&ap, NULL), DDL_ERR_INVALID, "ddl_mem_alloc without a handle");
    is(ddl_mem_alloc(1000 * sizeof *ap, (void **)&ap, &am), DDL_OK, "ddl_mem_alloc of 4000 bytes");
    ok(ap && ((uintptr_t)ap & 4095) == 0 && ap[0] == 0 && ap[999] == 0,
       "... page-aligned and zero-filled");
    for (int i = 0; ap && i < 1000; i++)
        ap[i] = (float)i;
    is(ddl_allreduce(ddl_comm_world(), DDL_IN_PLACE, ap, 1000, DDL_FLOAT32, DDL_SUM), DDL_OK,
       "allreduce on allocated memory");
    ok(ap && ap[999] == 999.0f, "... leaves a world of one's values");
    is(ddl_mem_deregister(am), DDL_ERR_INVALID, "ddl_mem_deregister of an allocation is refused");
    ok(strstr(ddl_last_error(), "use ddl_mem_free") != NULL, "... naming the right call: %s",
       ddl_last_error());
    is(ddl_mem_free(mem2), DDL_ERR_INVALID, "ddl_mem_free of a registration is refused");
    is(ddl_mem_free(am), DDL_OK, "ddl_mem_free");
    is(ddl_mem_free(am), DDL_ERR_INVALID, "... twice is refused");
    is(ddl_mem_free(NULL), DDL_OK, "ddl_mem_free(NULL)");
    is(ddl_mem_alloc(1 << 20, &ap2, &am2), DDL_OK, "ddl_mem_alloc of 1 MiB, left for finalize");

    is(ddl_finalize(), DDL_OK, "finalize");
    is(ddl_finalize(), DDL_ERR_NOT_INITIALIZED, "second finalize");
    is(ddl_init(), DDL_OK, "init again after finalize");
    is(ddl_finalize(), DDL_OK, "finalize again");

    /* heartbeats: a no-op without a supervisor; with DDL_HEARTBEAT_FD, a
     * record (collectives so far, last step) at ddl_init, on ddl_heartbeat,
     * and on a collective once 100 ms have passed */
    is(ddl_heartbeat(5), DDL_OK, "ddl_heartbeat without a supervisor");
    int hb[2];
    char fdtext[16];
    ok(pipe(hb) == 0, "a pipe for heartbeats");
    snprintf(fdtext, sizeof fdtext, "%d", hb[1]);
    setenv("DDL_HEARTBEAT_FD", fdtext, 1);
    is(ddl_init(), DDL_OK, "ddl_init with DDL_HEARTBEAT_FD");
    /* ddl_beat_rec_t: collectives, step, and at that step the clock and
     * the time waited in collectives */
    struct { uint64_t colls; int64_t step; int64_t at_ns; uint64_t wait_ns; } rec[8];
    ssize_t got = read(hb[0], rec, sizeof rec);
    ok(got == 32 && rec[0].step == -1, "ddl_init sent one record (%zd bytes, step %lld)", got,
       got >= 32 ? (long long)rec[0].step : 0LL);
    is(ddl_heartbeat(42), DDL_OK, "ddl_heartbeat(42)");
    got = read(hb[0], rec, sizeof rec);
    ok(got == 32 && rec[0].step == 42 && rec[0].at_ns > 0, "... sends step 42 at once, timed");
    int64_t at42 = rec[0].at_ns;
    uint64_t wait42 = rec[0].wait_ns;
    usleep(120000);
    is(ddl_barrier(ddl_comm_world()), DDL_OK, "a collective 120 ms later");
    got = read(hb[0], rec, sizeof rec);
    ok(got == 32 && rec[0].colls >= 1 && rec[0].step == 42 && rec[0].at_ns == at42,
       "... sends a record counting it (%llu collectives, step %lld, still step 42's time)",
       got >= 32 ? (unsigned long long)rec[0].colls : 0ULL,
       got >= 32 ? (long long)rec[0].step : 0LL);
    is(ddl_heartbeat(43), DDL_OK, "ddl_heartbeat(43)");
    got = read(hb[0], rec, sizeof rec);
    ok(got == 32 && rec[0].step == 43 && rec[0].at_ns - at42 >= 120000000 &&
           rec[0].at_ns - at42 < 60000000000LL && rec[0].wait_ns > wait42 &&
           rec[0].wait_ns - wait42 < (uint64_t)(rec[0].at_ns - at42),
       "... step 43: %.1f ms later, the barrier counted as %llu ns waited",
       got >= 32 ? (double)(rec[0].at_ns - at42) / 1e6 : 0.0,
       got >= 32 ? (unsigned long long)(rec[0].wait_ns - wait42) : 0ULL);
    is(ddl_barrier(ddl_comm_world()), DDL_OK, "another at once");
    int fl = fcntl(hb[0], F_GETFL);
    fcntl(hb[0], F_SETFL, fl | O_NONBLOCK);
    ok(read(hb[0], rec, sizeof rec) < 0, "... sends nothing (at most one record per 100 ms)");
    is(ddl_finalize(), DDL_OK, "finalize with heartbeats");
    unsetenv("DDL_HEARTBEAT_FD");
    close(hb[0]);
    close(hb[1]);

    ok(strncmp(ddl_status_str(DDL_ERR_PEER), "DDL_ERR_PEER", 12) == 0, "status string for PEER");
    ok(strncmp(ddl_status_str(DDL_ERR_CUDA), "DDL_ERR_CUDA", 12) == 0, "status string for CUDA");
    ok(strncmp(ddl_status_str(DDL_STOP), "DDL_STOP", 8) == 0, "status string for STOP");
    ok(ddl_should_stop(0) == DDL_ERR_NOT_INITIALIZED, "ddl_should_stop before ddl_init");
    ok(strncmp(ddl_status_str(DDL_RESTART), "DDL_RESTART", 11) == 0, "status string for RESTART");
    is(ddl_warm_enable(), DDL_ERR_NOT_INITIALIZED, "ddl_warm_enable before ddl_init");
    is(ddl_rejoin(NULL), DDL_ERR_NOT_INITIALIZED, "ddl_rejoin before ddl_init");
    ok(strncmp(ddl_status_str((ddl_status_t)-999), "DDL_ERR_UNKNOWN", 15) == 0,
       "status string for an unknown code");
    ok(strcmp(DDL_VERSION_STRING, "") != 0, "version string: %s", DDL_VERSION_STRING);
    return done_testing();
}
