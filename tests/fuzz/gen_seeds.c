/* gen_seeds.c: writes the seed corpus of fuzz_proto (one frame of each
 * message type, and a stream of three, made by the real encoder) into DIR.
 * Not built by make; to regenerate, from the top of the source tree, with
 * a configured build in build/:
 *   cc -Ibuild -Icommon tests/fuzz/gen_seeds.c common/proto.c common/util.c \
 *      common/log.c common/safefile.c common/failure.c -o /tmp/gen_seeds && \
 *      /tmp/gen_seeds tests/fuzz/corpus/proto */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

static void put(const char *dir, const char *name, const ddl_msg_t *const *m, int n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    for (int i = 0; i < n; i++) {
        uint8_t *frame;
        size_t len;
        if (ddl_proto_encode(m[i], &frame, &len) < 0 || fwrite(frame, 1, len, f) != len) {
            perror(name);
            exit(1);
        }
        free(frame);
    }
    fclose(f);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_seeds DIR\n");
        return 2;
    }
    const char *d = argv[1];
    uint8_t blob[] = "abcdefgh";
    uint32_t lens[] = {3, 5}, ranks[] = {1, 0}, node_rank[] = {0, DDL_NODE_IDLE, 1};
    char *addr[] = {"10.0.0.1:7000", "", "10.0.0.3:7000"};
    ddl_rank_info_t ri[2] = {{.rank = 0,
                              .state = DDL_RANK_RUNNING,
                              .pid = 10,
                              .wpid = 11,
                              .cpus = "0-3",
                              .gpu = "0000:17:00.0",
                              .nic = "mlx5_0"},
                             {.rank = 1, .state = DDL_RANK_FAILED, .pid = 12, .wstatus = 256}};
    ddl_peer_info_t pi[1] = {
        {.node_id = 1, .state = 1, .heard_ms = 500, .host = "n2", .addr = "10.0.0.2:7000"}};
    ddl_msg_t m[] = {
        {.type = DDL_MSG_ERROR, .u.error = {.code = 13, .text = "permission denied"}},
        {.type = DDL_MSG_REGISTER,
         .u.reg =
             {.rank = 3, .pid = 1234, .cpus = "0-7", .gpu = "0", .nic = "eth0", .restarts = 1}},
        {.type = DDL_MSG_RANK_STATE,
         .u.rank_state = {.rank = 3, .state = DDL_RANK_EXITED, .pid = 1234, .gen = 2}},
        {.type = DDL_MSG_ALLGATHER,
         .u.allgather = {.gen = 1, .seq = 7, .rank = 1, .size = 2, .len = 8, .data = blob}},
        {.type = DDL_MSG_ALLGATHER_RESULT,
         .u.allgather_result = {.gen = 1, .seq = 7, .count = 2, .lens = lens, .data = blob}},
        {.type = DDL_MSG_STATUS_REQ},
        {.type = DDL_MSG_STATUS,
         .u.status = {.step = "42.0",
                      .size = 2,
                      .gen = 1,
                      .agent_pid = 99,
                      .nranks = 2,
                      .ranks = ri,
                      .node_id = 0,
                      .nnodes = 2,
                      .host = "n1",
                      .leader = 1,
                      .npeers = 1,
                      .peers = pi,
                      .ckpt_dir = "/scratch/ck",
                      .ckpt_step = 5,
                      .ckpt_age_ms = 1000,
                      .last_failure = "rank 1 exited 1: restart"}},
        {.type = DDL_MSG_ACK},
        {.type = DDL_MSG_PEER_HELLO,
         .u.peer_hello = {.step = "42.0",
                          .node_id = 1,
                          .secret_len = 8,
                          .secret = blob,
                          .host = "n2",
                          .listen = "10.0.0.2:7000"}},
        {.type = DDL_MSG_NODE_GATHER,
         .u.node_gather = {.gen = 1,
                           .seq = 2,
                           .size = 4,
                           .count = 2,
                           .ranks = ranks,
                           .lens = lens,
                           .data = blob}},
        {.type = DDL_MSG_PEER_BEAT, .u.peer_beat = {.node_id = 1, .gen = 3, .host = "n2"}},
        {.type = DDL_MSG_FAILURE,
         .u.failure = {.gen = 1,
                       .rank = 2,
                       .node_id = 1,
                       .cls = DDL_FAIL_WORKER_SIGNAL,
                       .wstatus = 9,
                       .host = "n2",
                       .text = "killed by signal 9"}},
        {.type = DDL_MSG_GENERATION,
         .u.generation = {.gen = 2,
                          .action = DDL_GEN_RESTART,
                          .code = -1,
                          .delay_ms = 500,
                          .cause = "node n2 lost",
                          .nnodes = 3,
                          .node_rank = node_rank,
                          .master = "10.0.0.1"}},
        {.type = DDL_MSG_ROSTER, .u.roster = {.nnodes = 3, .addr = addr}},
        {.type = DDL_MSG_PEER_AUTH,
         .u.peer_auth = {.step = "42.0", .node_id = 1, .host = "n2", .listen = "10.0.0.2:7001",
                         .nonce = {1, 2, 3}, .mac = {4, 5, 6}}},
        {.type = DDL_MSG_PEER_WELCOME, .u.peer_welcome = {.node_id = 0, .nonce = {7}, .mac = {8}}},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        char name[64];
        const ddl_msg_t *one = &m[i];
        snprintf(name, sizeof name, "%s", ddl_msg_type_str(m[i].type));
        put(d, name, &one, 1);
    }
    const ddl_msg_t *stream[] = {&m[1], &m[2], &m[5]};
    put(d, "stream", stream, 3);
    return 0;
}
