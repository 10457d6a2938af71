/* t_proto.c: the agent wire protocol: encode/decode round trips of every
 * message type, partial frames, and malformed input (bad magic, version,
 * type, lengths, truncated fields, oversized frames), plus blocking
 * send/recv over a socketpair with timeouts. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto.h"
#include "../tap.h"

static uint8_t *encode(const ddl_msg_t *m, size_t *len)
{
    uint8_t *f = NULL;
    if (ddl_proto_encode(m, &f, len) < 0)
        BAIL_OUT("encode of %s failed: %s", ddl_msg_type_str(m->type), strerror(errno));
    return f;
}

/* round: encode, decode, check the frame length was consumed exactly. */
static void round_trip(const ddl_msg_t *in, ddl_msg_t *out)
{
    size_t len;
    ddl_error_t err = {""};
    uint8_t *f = encode(in, &len);
    ssize_t used = ddl_proto_decode(f, len, out, &err);
    is(used, (long long)len, "%s: decode consumes the whole %zu-byte frame", ddl_msg_type_str(in->type), len);
    if (used < 0)
        diag("decode error: %s", err.text);
    /* every strict prefix is "need more", never an error or a message */
    int prefix_ok = 1;
    for (size_t k = 0; k < len; k++) {
        ddl_msg_t tmp;
        if (ddl_proto_decode(f, k, &tmp, &err) != 0)
            prefix_ok = 0;
    }
    ok(prefix_ok, "%s: every truncated prefix asks for more bytes", ddl_msg_type_str(in->type));
    free(f);
}

static void expect_malformed(const uint8_t *f, size_t len, const char *why, const char *needle);

static void set_u32(uint8_t *p, uint32_t v)
{
    v = htonl(v);
    memcpy(p, &v, 4);
}

static void test_round_trips(void)
{
    ddl_msg_t in, out;

    in = (ddl_msg_t){.type = DDL_MSG_ERROR};
    in.u.error.code = EACCES;
    in.u.error.text = "permission denied: uid 1000";
    round_trip(&in, &out);
    is(out.u.error.code, EACCES, "ERROR code survives");
    is_str(out.u.error.text, "permission denied: uid 1000", "ERROR text survives");
    ddl_msg_clear(&out);

    in = (ddl_msg_t){.type = DDL_MSG_REGISTER};
    in.u.reg.rank = 4095;
    in.u.reg.pid = 123456;
    round_trip(&in, &out);
    ok(out.u.reg.rank == 4095 && out.u.reg.pid == 123456, "REGISTER rank and pid survive");
    ddl_msg_clear(&out);

    /* minor 2: the placement and restarts; a too long string is cut */
    snprintf(in.u.reg.cpus, sizeof in.u.reg.cpus, "0-3,8-11");
    snprintf(in.u.reg.gpu, sizeof in.u.reg.gpu, "0000:3b:00.0");
    memset(in.u.reg.nic, 'x', sizeof in.u.reg.nic - 1);
    in.u.reg.restarts = 3;
    round_trip(&in, &out);
    is_str(out.u.reg.cpus, "0-3,8-11", "REGISTER CPUs survive");
    is_str(out.u.reg.gpu, "0000:3b:00.0", "REGISTER GPU survives");
    is(strlen(out.u.reg.nic), DDL_PLACE_LEN - 1, "REGISTER NIC of %d bytes survives",
       DDL_PLACE_LEN - 1);
    is(out.u.reg.restarts, 3, "REGISTER restarts survive");
    ddl_msg_clear(&out);
    {
        /* a minor-1 supervisor's REGISTER (rank and pid only) */
        size_t l;
        uint8_t *f = encode(&in, &l);
        size_t tail = 3 * 4 + strlen(in.u.reg.cpus) + strlen(in.u.reg.gpu) +
                      strlen(in.u.reg.nic) + 4;
        f[5] = 1;
        set_u32(f + 8, (uint32_t)(l - DDL_PROTO_HDR_LEN - tail));
        ddl_error_t err;
        ok(ddl_proto_decode(f, l - tail, &out, &err) == (ssize_t)(l - tail) &&
               out.u.reg.rank == 4095 && out.u.reg.cpus[0] == 0 && out.u.reg.nic[0] == 0 &&
               out.u.reg.restarts == 0,
           "REGISTER of minor version 1: no placement, no restarts");
        ddl_msg_clear(&out);
        free(f);
    }

    in = (ddl_msg_t){.type = DDL_MSG_RANK_STATE};
    in.u.rank_state.rank = 7;
    in.u.rank_state.state = DDL_RANK_FAILED;
    in.u.rank_state.pid = 99;
    in.u.rank_state.wstatus = 9; /* killed by SIGKILL */
    in.u.rank_state.gen = 3;
    round_trip(&in, &out);
    ok(out.u.rank_state.rank == 7 && out.u.rank_state.state == DDL_RANK_FAILED &&
           out.u.rank_state.pid == 99 && out.u.rank_state.wstatus == 9 &&
           out.u.rank_state.gen == 3,
       "RANK_STATE fields survive, generation included (minor 3)");
    ddl_msg_clear(&out);
    {
        /* a minor-2 RANK_STATE (no generation) reads as generation 0 */
        size_t len;
        uint8_t *f = encode(&in, &len);
        set_u32(f + 8, (uint32_t)(len - DDL_PROTO_HDR_LEN - 4));
        ddl_error_t err;
        ok(ddl_proto_decode(f, len - 4, &out, &err) == (ssize_t)(len - 4) &&
               out.u.rank_state.gen == 0 && out.u.rank_state.rank == 7,
           "RANK_STATE of minor 2: generation 0");
        ddl_msg_clear(&out);
        free(f);
    }

    in = (ddl_msg_t){.type = DDL_MSG_FAILURE};
    in.u.failure.gen = 2;
    in.u.failure.rank = 5;
    in.u.failure.node_id = 1;
    in.u.failure.cls = DDL_FAIL_WORKER_SIGNAL;
    in.u.failure.wstatus = 9;
    in.u.failure.host = "n2";
    in.u.failure.text = "worker 123 was killed by signal 9 (SIGKILL)";
    round_trip(&in, &out);
    ok(out.u.failure.gen == 2 && out.u.failure.rank == 5 && out.u.failure.node_id == 1 &&
           out.u.failure.cls == DDL_FAIL_WORKER_SIGNAL && out.u.failure.wstatus == 9 &&
           out.u.failure.host && strcmp(out.u.failure.host, "n2") == 0 && out.u.failure.text &&
           strcmp(out.u.failure.text, in.u.failure.text) == 0,
       "FAILURE fields survive");
    ddl_msg_clear(&out);
    {
        size_t len;
        uint8_t *f = encode(&in, &len);
        f[DDL_PROTO_HDR_LEN + 12] = DDL_FAIL_CLASS_MAX + 1;
        expect_malformed(f, len, "unknown failure class", "class");
        free(f);
    }

    in = (ddl_msg_t){.type = DDL_MSG_GENERATION};
    in.u.generation.gen = 4;
    in.u.generation.action = DDL_GEN_STOP;
    in.u.generation.code = DDL_EXIT_NODE_LOST;
    in.u.generation.delay_ms = 0;
    in.u.generation.cause = "node 2 (n3): its agent was silent for 2.0 s [node-lost]";
    round_trip(&in, &out);
    ok(out.u.generation.gen == 4 && out.u.generation.action == DDL_GEN_STOP &&
           out.u.generation.code == DDL_EXIT_NODE_LOST && out.u.generation.cause &&
           strcmp(out.u.generation.cause, in.u.generation.cause) == 0,
       "GENERATION fields survive");
    ddl_msg_clear(&out);
    in.u.generation.action = DDL_GEN_RESTART;
    in.u.generation.code = -1;
    in.u.generation.delay_ms = 4000;
    in.u.generation.cause = NULL;
    round_trip(&in, &out);
    ok(out.u.generation.action == DDL_GEN_RESTART && out.u.generation.code == -1 &&
           out.u.generation.delay_ms == 4000 && out.u.generation.nnodes == 0 &&
           !out.u.generation.node_rank,
       "GENERATION restart with a delay and no cause survives (world unchanged)");
    ddl_msg_clear(&out);
    uint32_t map[4] = {0, DDL_NODE_IDLE, 2, 1};
    in.u.generation.nnodes = 4;
    in.u.generation.node_rank = map;
    round_trip(&in, &out);
    ok(out.u.generation.nnodes == 4 && out.u.generation.node_rank &&
           memcmp(out.u.generation.node_rank, map, sizeof map) == 0 &&
           out.u.generation.master && out.u.generation.master[0] == '\0',
       "GENERATION restart with a new world (a spare in a lost node's place) survives");
    ddl_msg_clear(&out);
    in.u.generation.master = "192.168.213.13";
    round_trip(&in, &out);
    ok(out.u.generation.master && strcmp(out.u.generation.master, "192.168.213.13") == 0,
       "GENERATION's MASTER_ADDR (minor 4) survives");
    ddl_msg_clear(&out);
    in.u.generation.master = NULL;
    {
        size_t len;
        uint8_t *f = encode(&in, &len);
        ddl_error_t err;
        /* minor 3: no master address after the world */
        set_u32(f + 8, (uint32_t)(len - DDL_PROTO_HDR_LEN - 4));
        ok(ddl_proto_decode(f, len - 4, &out, &err) == (ssize_t)(len - 4) &&
               out.u.generation.nnodes == 4 && out.u.generation.master == NULL,
           "GENERATION of minor version 3: the world, no master address");
        ddl_msg_clear(&out);
        set_u32(f + 8, (uint32_t)(len - DDL_PROTO_HDR_LEN));
        set_u32(f + len - 24, 1000000); /* more nodes than the body holds */
        expect_malformed(f, len, "node count beyond the body", "node count");
        free(f);
    }
    in.u.generation.nnodes = 0;
    in.u.generation.node_rank = NULL;
    {
        size_t len;
        uint8_t *f = encode(&in, &len);
        f[DDL_PROTO_HDR_LEN + 4] = DDL_GEN_FINISH + 1;
        expect_malformed(f, len, "unknown generation action", "action");
        free(f);
        in.u.generation.code = 300;
        ok(ddl_proto_encode(&in, &f, &len) == 0, "a GENERATION with exit code 300 encodes");
        expect_malformed(f, len, "exit code out of range", "exit code");
        free(f);
    }
    ok(strcmp(ddl_fail_class_str(DDL_FAIL_NODE), "node-lost") == 0 &&
           strcmp(ddl_fail_class_str(DDL_FAIL_WORKER_HANG), "worker-hang") == 0 &&
           strcmp(ddl_fail_class_str(0), "unknown") == 0 &&
           strcmp(ddl_fail_class_str(99), "unknown") == 0,
       "failure class names");
    ok(ddl_fail_score(DDL_FAIL_NODE, 0) > ddl_fail_score(DDL_FAIL_WORKER_HANG, 0) &&
           ddl_fail_score(DDL_FAIL_WORKER_SIGNAL, 9) > ddl_fail_score(DDL_FAIL_WORKER_EXIT, 1 << 8) &&
           ddl_fail_score(DDL_FAIL_WORKER_EXIT, 1 << 8) > ddl_fail_score(DDL_FAIL_WORKER_SIGNAL, 6) &&
           ddl_fail_score(DDL_FAIL_WORKER_EXIT, 0) == 0,
       "failure scores: node > hang > SIGKILL > exit 1 > SIGABRT (a consequence)");

    uint8_t blob[300];
    for (int i = 0; i < 300; i++)
        blob[i] = (uint8_t)(i * 31);
    in = (ddl_msg_t){.type = DDL_MSG_ALLGATHER};
    in.u.allgather.gen = 3;
    in.u.allgather.seq = 1;
    in.u.allgather.rank = 2;
    in.u.allgather.size = 5;
    in.u.allgather.len = sizeof blob;
    in.u.allgather.data = blob;
    round_trip(&in, &out);
    ok(out.u.allgather.gen == 3 && out.u.allgather.seq == 1 && out.u.allgather.rank == 2 &&
           out.u.allgather.size == 5 && out.u.allgather.len == sizeof blob &&
           memcmp(out.u.allgather.data, blob, sizeof blob) == 0,
       "ALLGATHER header and 300-byte blob survive");
    ddl_msg_clear(&out);

    in.u.allgather.len = 0;
    in.u.allgather.data = NULL;
    round_trip(&in, &out);
    is(out.u.allgather.len, 0, "ALLGATHER with an empty blob");
    ddl_msg_clear(&out);

    uint32_t lens[4] = {3, 0, 5, 1};
    uint8_t data[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    in = (ddl_msg_t){.type = DDL_MSG_ALLGATHER_RESULT};
    in.u.allgather_result.gen = 1;
    in.u.allgather_result.seq = 0;
    in.u.allgather_result.count = 4;
    in.u.allgather_result.lens = lens;
    in.u.allgather_result.data = data;
    round_trip(&in, &out);
    ok(out.u.allgather_result.count == 4 && memcmp(out.u.allgather_result.lens, lens,
                                                   sizeof lens) == 0 &&
           memcmp(out.u.allgather_result.data, data, sizeof data) == 0,
       "ALLGATHER_RESULT blobs (including an empty one) survive in order");
    ddl_msg_clear(&out);

    ddl_rank_info_t ranks[2] = {
        {.rank = 0, .state = DDL_RANK_RUNNING, .pid = 10, .wpid = 11, .wstatus = 0},
        {.rank = 1, .state = DDL_RANK_EXITED, .pid = 12, .wpid = 13, .wstatus = 256}};
    in = (ddl_msg_t){.type = DDL_MSG_STATUS};
    in.u.status.straggler.rank = DDL_STRAGGLER_NONE;
    in.u.status.step = "local-42";
    in.u.status.size = 2;
    in.u.status.gen = 0;
    in.u.status.agent_pid = 77;
    in.u.status.nranks = 2;
    in.u.status.ranks = ranks;
    round_trip(&in, &out);
    ok(strcmp(out.u.status.step, "local-42") == 0 && out.u.status.nranks == 2 &&
           out.u.status.agent_pid == 77 && out.u.status.ranks[1].state == DDL_RANK_EXITED &&
           out.u.status.ranks[1].wstatus == 256 && out.u.status.ranks[0].wpid == 11,
       "STATUS step, agent pid and rank table survive");
    ddl_msg_clear(&out);

    in.u.status.node_id = 2;
    in.u.status.nnodes = 3;
    round_trip(&in, &out);
    ok(out.u.status.node_id == 2 && out.u.status.nnodes == 3, "STATUS node id and node count");
    ddl_msg_clear(&out);

    /* minor 2: host, leader, per-rank placement and ages, peers */
    snprintf(ranks[0].cpus, sizeof ranks[0].cpus, "0-1");
    snprintf(ranks[1].gpu, sizeof ranks[1].gpu, "0000:af:00.0");
    snprintf(ranks[1].nic, sizeof ranks[1].nic, "mlx5_1");
    ranks[0].heard_ms = 1500;
    ranks[1].heard_ms = DDL_HEARD_NEVER;
    ranks[1].restarts = 2;
    ddl_peer_info_t peers[2] = {{.node_id = 0, .state = DDL_PEER_UP, .heard_ms = 250},
                                {.node_id = 1, .state = DDL_PEER_LOST, .heard_ms = 9000}};
    snprintf(peers[0].host, sizeof peers[0].host, "n1");
    snprintf(peers[0].addr, sizeof peers[0].addr, "192.168.213.11:4000");
    in.u.status.host = "n3";
    in.u.status.leader = 0;
    in.u.status.npeers = 2;
    in.u.status.peers = peers;
    in.u.status.ckpt_dir = "/scratch/run7";
    in.u.status.ckpt_step = 5000000000LL;
    in.u.status.ckpt_age_ms = 42;
    round_trip(&in, &out);
    ok(out.u.status.ckpt_dir && strcmp(out.u.status.ckpt_dir, "/scratch/run7") == 0 &&
           out.u.status.ckpt_step == 5000000000LL && out.u.status.ckpt_age_ms == 42,
       "STATUS checkpoint directory, 64-bit step and age survive");
    ddl_msg_clear(&out);
    in.u.status.last_failure = "generation 0: rank 2 on node 1 (n2): worker 7 was killed";
    round_trip(&in, &out);
    ok(out.u.status.last_failure &&
           strcmp(out.u.status.last_failure, in.u.status.last_failure) == 0,
       "STATUS last failure survives (minor 3)");
    ddl_msg_clear(&out);
    in.u.status.last_failure = NULL;
    round_trip(&in, &out);
    ok(out.u.status.host && strcmp(out.u.status.host, "n3") == 0 && out.u.status.leader == 0 &&
           out.u.status.node_id == 2,
       "STATUS host and leader flag survive");
    ok(strcmp(out.u.status.ranks[0].cpus, "0-1") == 0 && out.u.status.ranks[0].heard_ms == 1500 &&
           strcmp(out.u.status.ranks[1].gpu, "0000:af:00.0") == 0 &&
           strcmp(out.u.status.ranks[1].nic, "mlx5_1") == 0 &&
           out.u.status.ranks[1].heard_ms == DDL_HEARD_NEVER && out.u.status.ranks[1].restarts == 2,
       "STATUS per-rank placement, restarts and ages survive");
    ok(out.u.status.npeers == 2 && strcmp(out.u.status.peers[0].host, "n1") == 0 &&
           strcmp(out.u.status.peers[0].addr, "192.168.213.11:4000") == 0 &&
           out.u.status.peers[0].state == DDL_PEER_UP && out.u.status.peers[0].heard_ms == 250 &&
           out.u.status.peers[1].state == DDL_PEER_LOST && out.u.status.peers[1].node_id == 1,
       "STATUS peers survive");
    ok(out.u.status.ranks[0].step == 0 && out.u.status.ranks[0].collectives == 0 &&
           out.u.status.ranks[0].rate_milli == 0 && out.u.status.failures[DDL_FAIL_NODE] == 0,
       "STATUS progress and failure counts at zero survive");
    ddl_msg_clear(&out);

    /* minor 6: each rank's progress, the failures per class */
    ranks[0].step = 123456789012LL;
    ranks[0].collectives = 5000000000ULL;
    ranks[0].rate_milli = 2500;
    ranks[1].step = -1;
    ranks[1].rate_milli = DDL_RATE_UNKNOWN;
    in.u.status.failures[DDL_FAIL_WORKER_SIGNAL] = 3;
    in.u.status.failures[DDL_FAIL_CLASS_MAX] = 1;
    round_trip(&in, &out);
    ok(out.u.status.ranks[0].step == 123456789012LL &&
           out.u.status.ranks[0].collectives == 5000000000ULL &&
           out.u.status.ranks[0].rate_milli == 2500 && out.u.status.ranks[1].step == -1 &&
           out.u.status.ranks[1].rate_milli == DDL_RATE_UNKNOWN,
       "STATUS per-rank step, collectives and rate survive (minor 6)");
    ok(out.u.status.failures[DDL_FAIL_WORKER_SIGNAL] == 3 &&
           out.u.status.failures[DDL_FAIL_CLASS_MAX] == 1 &&
           out.u.status.failures[DDL_FAIL_WORKER_EXIT] == 0,
       "STATUS failure counts per class survive (minor 6)");
    ok(out.u.status.straggler.rank == DDL_STRAGGLER_NONE && out.u.status.straggler.named == 0,
       "STATUS without a straggler survives (minor 8)");
    ddl_msg_clear(&out);
    in.u.status.straggler = (ddl_straggler_info_t){
        .rank = 5, .node_id = 2, .slower_pm = 213, .steps = 12, .compute_us = 121500,
        .peers_us = 100100, .named = 3};
    round_trip(&in, &out);
    ok(out.u.status.straggler.rank == 5 && out.u.status.straggler.node_id == 2 &&
           out.u.status.straggler.slower_pm == 213 && out.u.status.straggler.steps == 12 &&
           out.u.status.straggler.compute_us == 121500 &&
           out.u.status.straggler.peers_us == 100100 && out.u.status.straggler.named == 3,
       "STATUS straggler rank, node, slowness, window, compute and count survive (minor 8)");
    ddl_msg_clear(&out);

    /* older agents: minor 5 lacks the minor-6 tail, minor 1 also the minor-2
     * tail, minor 0 also the node fields */
    {
        size_t l;
        uint8_t *f = encode(&in, &l);
        size_t tail6 = 2 * (8 + 8 + 4) + 4 + 4 * DDL_FAIL_CLASS_MAX /* progress, failures */
                       + 7 * 4;                                       /* straggler (minor 8) */
        ddl_error_t err8;
        f[5] = 7;
        set_u32(f + 8, (uint32_t)(l - DDL_PROTO_HDR_LEN - 7 * 4));
        ok(ddl_proto_decode(f, l - 7 * 4, &out, &err8) == (ssize_t)(l - 7 * 4) &&
               out.u.status.straggler.rank == DDL_STRAGGLER_NONE &&
               out.u.status.straggler.named == 0 &&
               out.u.status.failures[DDL_FAIL_WORKER_SIGNAL] == 3,
           "STATUS of minor version 7: no straggler, failure counts kept");
        ddl_msg_clear(&out);
        ddl_error_t err6;
        f[5] = 5;
        set_u32(f + 8, (uint32_t)(l - DDL_PROTO_HDR_LEN - tail6));
        ok(ddl_proto_decode(f, l - tail6, &out, &err6) == (ssize_t)(l - tail6) &&
               out.u.status.ranks[0].step == -1 &&
               out.u.status.ranks[0].rate_milli == DDL_RATE_UNKNOWN &&
               out.u.status.ranks[0].collectives == 0 &&
               out.u.status.failures[DDL_FAIL_WORKER_SIGNAL] == 0 &&
               out.u.status.ckpt_step == 5000000000LL,
           "STATUS of minor version 5: no progress (step -1, rate unknown), no failure counts");
        ddl_msg_clear(&out);
        l -= tail6;
        size_t tail2 = 4 + 2 + 1 + 4; /* host, leader, peer count */
        for (int i = 0; i < 2; i++)
            tail2 += 3 * 4 + strlen(ranks[i].cpus) + strlen(ranks[i].gpu) +
                     strlen(ranks[i].nic) + 8;
        for (int i = 0; i < 2; i++)
            tail2 += 4 + 1 + 4 + 8 + strlen(peers[i].host) + strlen(peers[i].addr);
        tail2 += 4 + strlen(in.u.status.ckpt_dir) + 8 + 4; /* checkpoint */
        tail2 += 4;                                        /* last failure (minor 3), empty */
        ddl_error_t err;
        /* minor 2: no last failure */
        set_u32(f + 8, (uint32_t)(l - DDL_PROTO_HDR_LEN - 4));
        ok(ddl_proto_decode(f, l - 4, &out, &err) == (ssize_t)(l - 4) &&
               out.u.status.last_failure == NULL && out.u.status.ckpt_step == 5000000000LL,
           "STATUS of minor version 2: no last failure");
        ddl_msg_clear(&out);
        for (int minor = 1; minor >= 0; minor--) {
            size_t cut = tail2 + (minor == 0 ? 8 : 0);
            f[5] = (uint8_t)minor;
            set_u32(f + 8, (uint32_t)(l - DDL_PROTO_HDR_LEN - cut));
            ok(ddl_proto_decode(f, l - cut, &out, &err) == (ssize_t)(l - cut) &&
                   out.u.status.nranks == 2 && !out.u.status.host && out.u.status.npeers == 0 &&
                   out.u.status.ranks[0].cpus[0] == 0 && out.u.status.ckpt_step == -1 &&
                   out.u.status.node_id == (minor ? 2u : 0u) &&
                   out.u.status.nnodes == (minor ? 3u : 1u),
               "STATUS of minor version %d: %s, no host, placement or peers", minor,
               minor ? "node 2 of 3" : "node 0 of 1");
            ddl_msg_clear(&out);
        }
        free(f);
    }

    in = (ddl_msg_t){.type = DDL_MSG_PEER_BEAT};
    in.u.peer_beat.node_id = 4;
    in.u.peer_beat.gen = 1;
    in.u.peer_beat.host = "n5";
    round_trip(&in, &out);
    ok(out.u.peer_beat.node_id == 4 && out.u.peer_beat.gen == 1 && out.u.peer_beat.host &&
           strcmp(out.u.peer_beat.host, "n5") == 0,
       "PEER_BEAT node, generation and host survive");
    ddl_msg_clear(&out);

    in = (ddl_msg_t){.type = DDL_MSG_PROGRESS};
    in.u.progress.rank = 7;
    in.u.progress.gen = 2;
    in.u.progress.step = 9000000000LL;
    in.u.progress.collectives = 1ULL << 40;
    round_trip(&in, &out);
    ok(out.type == DDL_MSG_PROGRESS && out.u.progress.rank == 7 && out.u.progress.gen == 2 &&
           out.u.progress.step == 9000000000LL && out.u.progress.collectives == 1ULL << 40,
       "PROGRESS rank, generation, 64-bit step and collectives survive (minor 6)");
    ddl_msg_clear(&out);
    in.u.progress.at_ns = 123456789012345LL;
    in.u.progress.wait_ns = 987654321ULL;
    round_trip(&in, &out);
    ok(out.u.progress.at_ns == 123456789012345LL && out.u.progress.wait_ns == 987654321ULL,
       "PROGRESS step time and time waited survive (minor 8)");
    ddl_msg_clear(&out);
    in.u.progress.step = -1;
    round_trip(&in, &out);
    ok(out.u.progress.step == -1, "PROGRESS without a step (-1) survives");
    ddl_msg_clear(&out);
    {
        size_t len;
        uint8_t *f = encode(&in, &len);
        ddl_error_t err7;
        f[5] = 7; /* an older supervisor: no timing */
        set_u32(f + 8, (uint32_t)(len - DDL_PROTO_HDR_LEN - 16));
        ok(ddl_proto_decode(f, len - 16, &out, &err7) == (ssize_t)(len - 16) &&
               out.u.progress.at_ns == 0 && out.u.progress.wait_ns == 0 &&
               out.u.progress.collectives == 1ULL << 40,
           "PROGRESS of minor version 7: no timing (0)");
        ddl_msg_clear(&out);
        set_u32(f + 8, (uint32_t)(len - DDL_PROTO_HDR_LEN - 16 - 3));
        expect_malformed(f, len - 16 - 3, "a PROGRESS cut short", "collectives");
        set_u32(f + 8, (uint32_t)(len - DDL_PROTO_HDR_LEN - 3));
        expect_malformed(f, len - 3, "a PROGRESS cut in its timing", "time waited");
        free(f);
    }

    uint8_t secret[20] = "0123456789abcdefghi";
    in = (ddl_msg_t){.type = DDL_MSG_PEER_HELLO};
    in.u.peer_hello.step = "12.0";
    in.u.peer_hello.node_id = 5;
    in.u.peer_hello.secret = secret;
    in.u.peer_hello.secret_len = sizeof secret;
    round_trip(&in, &out);
    ok(strcmp(out.u.peer_hello.step, "12.0") == 0 && out.u.peer_hello.node_id == 5 &&
           out.u.peer_hello.secret_len == sizeof secret &&
           memcmp(out.u.peer_hello.secret, secret, sizeof secret) == 0,
       "PEER_HELLO step, node and secret survive");
    ok(!out.u.peer_hello.host || !out.u.peer_hello.host[0], "PEER_HELLO without a host");
    ddl_msg_clear(&out);
    in.u.peer_hello.host = "n6";
    round_trip(&in, &out);
    ok(out.u.peer_hello.host && strcmp(out.u.peer_hello.host, "n6") == 0,
       "PEER_HELLO host (minor 2) survives");
    ddl_msg_clear(&out);
    in.u.peer_hello.listen = "192.168.213.12:40001";
    round_trip(&in, &out);
    ok(out.u.peer_hello.listen && strcmp(out.u.peer_hello.listen, "192.168.213.12:40001") == 0 &&
           out.u.peer_hello.host && strcmp(out.u.peer_hello.host, "n6") == 0,
       "PEER_HELLO listen address (minor 3) survives");
    {
        /* minor 2: the hello ends after the host */
        size_t len;
        uint8_t *f = encode(&in, &len);
        size_t cut = 4 + strlen(in.u.peer_hello.listen);
        set_u32(f + 8, (uint32_t)(len - DDL_PROTO_HDR_LEN - cut));
        ddl_msg_t o2;
        ddl_error_t err;
        ok(ddl_proto_decode(f, len - cut, &o2, &err) == (ssize_t)(len - cut) &&
               o2.u.peer_hello.listen == NULL && o2.u.peer_hello.host,
           "PEER_HELLO of minor 2: no listen address");
        ddl_msg_clear(&o2);
        free(f);
    }
    in.u.peer_hello.listen = NULL;
    {
        char *addr[3] = {"192.168.213.11:4000", "", "192.168.213.13:4002"};
        ddl_msg_t r = {.type = DDL_MSG_ROSTER}, ro;
        r.u.roster.nnodes = 3;
        r.u.roster.addr = addr;
        round_trip(&r, &ro);
        ok(ro.u.roster.nnodes == 3 && strcmp(ro.u.roster.addr[0], addr[0]) == 0 &&
               strcmp(ro.u.roster.addr[1], "") == 0 && strcmp(ro.u.roster.addr[2], addr[2]) == 0,
           "ROSTER addresses survive, an unknown one empty");
        ddl_msg_clear(&ro);
        uint32_t back[3] = {0, 2, 7};
        uint8_t gone[3] = {0, 1, 0};
        r.u.roster.retaken = back;
        r.u.roster.lost = gone;
        round_trip(&r, &ro);
        ok(ro.u.roster.retaken && ro.u.roster.retaken[0] == 0 && ro.u.roster.retaken[1] == 2 &&
               ro.u.roster.retaken[2] == 7,
           "ROSTER retake counts survive (minor 10)");
        ok(ro.u.roster.lost && !ro.u.roster.lost[0] && ro.u.roster.lost[1] && !ro.u.roster.lost[2],
           "ROSTER lost flags survive (minor 10)");
        ddl_msg_clear(&ro);
        size_t len;
        uint8_t *f = encode(&r, &len);
        { /* a minor-9 sender: the body ends after the addresses */
            uint8_t *old = malloc(len);
            uint32_t body;
            ddl_error_t err = {""};
            memcpy(old, f, len);
            memcpy(&body, old + 8, 4);
            set_u32(old + 8, ntohl(body) - 15);
            ok(ddl_proto_decode(old, len - 15, &ro, &err) == (ssize_t)(len - 15) &&
                   ro.u.roster.nnodes == 3 && ro.u.roster.retaken && ro.u.roster.retaken[1] == 0 &&
                   ro.u.roster.lost && ro.u.roster.lost[1] == 0 &&
                   strcmp(ro.u.roster.addr[2], addr[2]) == 0,
               "ROSTER from a minor-9 agent: addresses read, retake counts 0, none lost");
            ddl_msg_clear(&ro);
            set_u32(old + 8, ntohl(body) - 9);
            expect_malformed(old, len - 9, "roster retake counts cut short", "retake count");
            set_u32(old + 8, ntohl(body) - 1);
            expect_malformed(old, len - 1, "roster lost flags cut short", "lost flag");
            free(old);
        }
        set_u32(f + DDL_PROTO_HDR_LEN, 1000000);
        expect_malformed(f, len, "roster count beyond the body", "node count");
        free(f);
    }
    ddl_msg_clear(&out);

    uint32_t granks[3] = {7, 2, 4}, glens[3] = {2, 0, 3};
    in = (ddl_msg_t){.type = DDL_MSG_NODE_GATHER};
    in.u.node_gather.gen = 3;
    in.u.node_gather.seq = 1;
    in.u.node_gather.size = 8;
    in.u.node_gather.count = 3;
    in.u.node_gather.ranks = granks;
    in.u.node_gather.lens = glens;
    in.u.node_gather.data = data;
    round_trip(&in, &out);
    ok(out.u.node_gather.count == 3 && out.u.node_gather.size == 8 &&
           out.u.node_gather.gen == 3 && out.u.node_gather.seq == 1 &&
           memcmp(out.u.node_gather.ranks, granks, sizeof granks) == 0 &&
           memcmp(out.u.node_gather.lens, glens, sizeof glens) == 0 &&
           memcmp(out.u.node_gather.data, data, 5) == 0,
       "NODE_GATHER ranks and blobs survive in order");
    ddl_msg_clear(&out);

    in = (ddl_msg_t){.type = DDL_MSG_STATUS_REQ};
    round_trip(&in, &out);
    is(out.type, DDL_MSG_STATUS_REQ, "STATUS_REQ (empty body)");
    in = (ddl_msg_t){.type = DDL_MSG_ACK};
    round_trip(&in, &out);
    is(out.type, DDL_MSG_ACK, "ACK (empty body)");
}

/* PEER_AUTH, PEER_WELCOME (minor 5), the header check, and strings with
 * control characters, which a peer could send to logs or environments. */
static void test_auth_and_strings(void)
{
    ddl_msg_t in = {.type = DDL_MSG_PEER_AUTH}, out;
    ddl_error_t err = {""};
    in.u.peer_auth.step = "123.0";
    in.u.peer_auth.node_id = 7;
    in.u.peer_auth.host = "n7";
    in.u.peer_auth.listen = "10.0.0.7:4242";
    for (int i = 0; i < DDL_PROTO_NONCE_LEN; i++)
        in.u.peer_auth.nonce[i] = (uint8_t)i, in.u.peer_auth.mac[i] = (uint8_t)(255 - i);
    round_trip(&in, &out);
    ok(out.type == DDL_MSG_PEER_AUTH && strcmp(out.u.peer_auth.step, "123.0") == 0 &&
           out.u.peer_auth.node_id == 7 && strcmp(out.u.peer_auth.host, "n7") == 0 &&
           strcmp(out.u.peer_auth.listen, "10.0.0.7:4242") == 0 &&
           memcmp(out.u.peer_auth.nonce, in.u.peer_auth.nonce, DDL_PROTO_NONCE_LEN) == 0 &&
           memcmp(out.u.peer_auth.mac, in.u.peer_auth.mac, DDL_PROTO_MAC_LEN) == 0,
       "PEER_AUTH claims, nonce and MAC survive");
    ddl_msg_clear(&out);
    size_t len;
    uint8_t *f = encode(&in, &len);
    ok(len <= DDL_PROTO_HDR_LEN + DDL_PROTO_MAX_AUTH_BODY,
       "a PEER_AUTH (%zu bytes) fits the limit for unauthenticated peers", len);
    uint16_t type = 0;
    size_t flen = 0;
    ok(ddl_proto_peek(f, len, &type, &flen, &err) == 1 && type == DDL_MSG_PEER_AUTH &&
           flen == len, "peek: type and length from the header alone");
    ok(ddl_proto_peek(f, DDL_PROTO_HDR_LEN - 1, &type, &flen, &err) == 0,
       "peek: a partial header asks for more");
    f[0] ^= 0xff;
    ok(ddl_proto_peek(f, len, &type, &flen, &err) == -1 && errno == EPROTO &&
           strstr(err.text, "magic"), "peek: a bad magic is refused (%s)", err.text);
    f[0] ^= 0xff;
    f[7] = 99;
    ok(ddl_proto_peek(f, len, &type, &flen, &err) == -1 && strstr(err.text, "type"),
       "peek: an unknown type is refused before its body is read");
    free(f);
    /* the same frame with a 32-byte nonce cut to 31 is malformed */
    in.u.peer_auth.listen = "";
    f = encode(&in, &len);
    set_u32(f + len - 2 * (4 + DDL_PROTO_NONCE_LEN), DDL_PROTO_NONCE_LEN - 1);
    expect_malformed(f, len, "PEER_AUTH nonce of 31 bytes", "nonce");
    free(f);

    in = (ddl_msg_t){.type = DDL_MSG_PEER_WELCOME};
    in.u.peer_welcome.node_id = 2;
    memset(in.u.peer_welcome.nonce, 0xab, DDL_PROTO_NONCE_LEN);
    memset(in.u.peer_welcome.mac, 0xcd, DDL_PROTO_MAC_LEN);
    round_trip(&in, &out);
    ok(out.u.peer_welcome.node_id == 2 && out.u.peer_welcome.nonce[31] == 0xab &&
           out.u.peer_welcome.mac[0] == 0xcd, "PEER_WELCOME node, nonce and MAC survive");

    static const char *const bad[] = {"x\nLD_PRELOAD=/tmp/evil.so", "\033[2J", "tab\there",
                                      "del\177"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        in = (ddl_msg_t){.type = DDL_MSG_PEER_BEAT};
        in.u.peer_beat.host = (char *)bad[i];
        f = encode(&in, &len);
        expect_malformed(f, len, "a string with a control character", "host");
        free(f);
    }
    in = (ddl_msg_t){.type = DDL_MSG_GENERATION};
    in.u.generation.code = -1;
    in.u.generation.master = "10.0.0.1\nLD_PRELOAD=x";
    f = encode(&in, &len);
    expect_malformed(f, len, "MASTER_ADDR with a newline", "master address");
    free(f);
    in = (ddl_msg_t){.type = DDL_MSG_REGISTER};
    snprintf(in.u.reg.cpus, sizeof in.u.reg.cpus, "0-3\r");
    f = encode(&in, &len);
    expect_malformed(f, len, "a placement string with a carriage return", "cpus");
    free(f);
}

static void test_two_frames(void)
{
    ddl_msg_t a = {.type = DDL_MSG_REGISTER}, b = {.type = DDL_MSG_ACK}, out;
    ddl_error_t err;
    size_t la, lb;
    a.u.reg.rank = 1;
    uint8_t *fa = encode(&a, &la), *fb = encode(&b, &lb);
    uint8_t *both = malloc(la + lb);
    memcpy(both, fa, la);
    memcpy(both + la, fb, lb);
    ssize_t u1 = ddl_proto_decode(both, la + lb, &out, &err);
    int t1 = out.type;
    ssize_t u2 = ddl_proto_decode(both + la, lb, &out, &err);
    ok(u1 == (ssize_t)la && t1 == DDL_MSG_REGISTER && u2 == (ssize_t)lb && out.type == DDL_MSG_ACK,
       "two frames back to back decode one at a time");
    free(fa);
    free(fb);
    free(both);
}

/* expect_malformed: decoding f must fail with EPROTO and a reason. */
static void expect_malformed(const uint8_t *f, size_t len, const char *why, const char *needle)
{
    ddl_msg_t out;
    ddl_error_t err = {""};
    errno = 0;
    ssize_t rc = ddl_proto_decode(f, len, &out, &err);
    ok(rc == -1 && errno == EPROTO, "malformed: %s -> EPROTO", why);
    ok(strstr(err.text, needle) != NULL, "malformed: %s -> message mentions '%s'", why, needle);
    if (!strstr(err.text, needle))
        diag("message was: '%s'", err.text);
    ok(out.type == 0, "malformed: %s -> nothing returned", why);
}


static void test_malformed(void)
{
    ddl_msg_t m = {.type = DDL_MSG_ALLGATHER};
    uint8_t blob[16] = {0};
    size_t len;
    m.u.allgather.size = 4;
    m.u.allgather.rank = 1;
    m.u.allgather.len = sizeof blob;
    m.u.allgather.data = blob;
    uint8_t *good = encode(&m, &len);
    uint8_t *f = malloc(len + 64);

    memcpy(f, good, len);
    f[0] ^= 0xff;
    expect_malformed(f, len, "bad magic", "magic");

    memcpy(f, good, len);
    f[4] = DDL_PROTO_MAJOR + 1;
    expect_malformed(f, len, "next major version", "major version");

    memcpy(f, good, len);
    f[6] = 0x7f;
    expect_malformed(f, len, "unknown type", "unknown message type");

    memcpy(f, good, len);
    set_u32(f + 8, DDL_PROTO_MAX_BODY + 1);
    expect_malformed(f, DDL_PROTO_HDR_LEN, "body over the limit", "limit");

    /* blob length larger than what remains of the body */
    memcpy(f, good, len);
    set_u32(f + DDL_PROTO_HDR_LEN + 16, 1000);
    expect_malformed(f, len, "blob longer than the body", "data");

    /* body length that cuts the last field short */
    memcpy(f, good, len);
    set_u32(f + 8, 10);
    expect_malformed(f, DDL_PROTO_HDR_LEN + 10, "truncated fields", "truncated");

    /* rank outside the world */
    memcpy(f, good, len);
    set_u32(f + DDL_PROTO_HDR_LEN + 8, 4);
    expect_malformed(f, len, "rank >= size", "rank/size");

    /* an ERROR whose text has a NUL inside */
    ddl_msg_t e = {.type = DDL_MSG_ERROR};
    e.u.error.text = "abc";
    size_t elen;
    uint8_t *ef = encode(&e, &elen);
    ef[elen - 2] = '\0';
    expect_malformed(ef, elen, "NUL inside a string", "error text");
    free(ef);

    /* STATUS claiming more ranks than the body holds */
    ddl_msg_t s = {.type = DDL_MSG_STATUS};
    s.u.status.step = "x";
    size_t slen;
    uint8_t *sf = encode(&s, &slen);
    /* after the step "x", size, generation and agent pid */
    set_u32(sf + DDL_PROTO_HDR_LEN + 5 + 12, 1u << 30);
    expect_malformed(sf, slen, "rank count larger than the body", "rank count");
    free(sf);

    /* ALLGATHER_RESULT with a huge count must not allocate wildly */
    ddl_msg_t r = {.type = DDL_MSG_ALLGATHER_RESULT};
    size_t rlen;
    uint8_t *rf = encode(&r, &rlen);
    set_u32(rf + rlen - 4, 0xffffffffu);
    expect_malformed(rf, rlen, "allgather count larger than the body", "count");
    free(rf);

    /* NODE_GATHER naming a rank outside the world */
    uint32_t one_rank = 1, one_len = 1;
    uint8_t one_byte = 9;
    ddl_msg_t g = {.type = DDL_MSG_NODE_GATHER};
    g.u.node_gather.size = 2;
    g.u.node_gather.count = 1;
    g.u.node_gather.ranks = &one_rank;
    g.u.node_gather.lens = &one_len;
    g.u.node_gather.data = &one_byte;
    size_t glen;
    uint8_t *gf = encode(&g, &glen);
    set_u32(gf + glen - 9, 2); /* the rank, before the 1-byte blob and its length */
    expect_malformed(gf, glen, "NODE_GATHER rank outside the world", "rank");
    set_u32(gf + glen - 9, 1);
    set_u32(gf + DDL_PROTO_HDR_LEN + 12, 0xffffffffu); /* count */
    expect_malformed(gf, glen, "NODE_GATHER count larger than the body", "count");
    free(gf);

    /* PEER_HELLO with a secret over the limit */
    uint8_t *big_secret = calloc(1, DDL_PROTO_MAX_SECRET + 1);
    ddl_msg_t h = {.type = DDL_MSG_PEER_HELLO};
    h.u.peer_hello.step = "1.0";
    h.u.peer_hello.secret = big_secret;
    h.u.peer_hello.secret_len = DDL_PROTO_MAX_SECRET + 1;
    uint8_t *hf;
    size_t hlen;
    errno = 0;
    ok(ddl_proto_encode(&h, &hf, &hlen) == -1 && errno == EINVAL,
       "encode: PEER_HELLO secret over %u bytes -> EINVAL", DDL_PROTO_MAX_SECRET);
    h.u.peer_hello.secret_len = 1;
    hf = encode(&h, &hlen);
    /* after the step "1.0" and the node id: claims a longer secret */
    set_u32(hf + DDL_PROTO_HDR_LEN + 7 + 4, DDL_PROTO_MAX_SECRET + 1);
    expect_malformed(hf, hlen, "PEER_HELLO secret length over the limit", "secret");
    free(hf);
    free(big_secret);

    /* trailing bytes from a newer minor version are ignored */
    memcpy(f, good, len);
    memset(f + len, 0xab, 8);
    set_u32(f + 8, (uint32_t)(len - DDL_PROTO_HDR_LEN + 8));
    ddl_msg_t out;
    ddl_error_t err;
    ok(ddl_proto_decode(f, len + 8, &out, &err) == (ssize_t)(len + 8) &&
           out.u.allgather.len == sizeof blob,
       "trailing fields of a newer minor version are skipped");
    ddl_msg_clear(&out);

    /* a state value out of range */
    ddl_msg_t st = {.type = DDL_MSG_RANK_STATE};
    size_t stlen;
    uint8_t *stf = encode(&st, &stlen);
    stf[DDL_PROTO_HDR_LEN + 4] = 200;
    expect_malformed(stf, stlen, "unknown rank state", "state");
    free(stf);

    free(f);
    free(good);
}

/* STOP_REQ, STOP, STOP_AT (minor 6): a stop on request at a step boundary */
static void test_stop(void)
{
    ddl_msg_t in, out;
    in = (ddl_msg_t){.type = DDL_MSG_STOP_REQ};
    in.u.stop_req.signo = 10;
    in.u.stop_req.why = "SIGUSR1 to task 3";
    round_trip(&in, &out);
    ok(out.type == DDL_MSG_STOP_REQ && out.u.stop_req.signo == 10 && out.u.stop_req.why &&
           strcmp(out.u.stop_req.why, "SIGUSR1 to task 3") == 0,
       "STOP_REQ fields survive");
    ddl_msg_clear(&out);

    in = (ddl_msg_t){.type = DDL_MSG_STOP};
    in.u.stop.gen = 2;
    in.u.stop.at = -1;
    in.u.stop.why = "SIGTERM on node 1 (n2)";
    round_trip(&in, &out);
    ok(out.u.stop.gen == 2 && out.u.stop.at == -1 && out.u.stop.why &&
           strcmp(out.u.stop.why, in.u.stop.why) == 0,
       "STOP asking for the ranks' boundaries survives");
    ddl_msg_clear(&out);
    in.u.stop.at = 5000000000LL;
    in.u.stop.why = NULL;
    round_trip(&in, &out);
    ok(out.u.stop.at == 5000000000LL && (!out.u.stop.why || !*out.u.stop.why),
       "STOP with a 64-bit boundary and no reason survives");
    ddl_msg_clear(&out);

    in = (ddl_msg_t){.type = DDL_MSG_STOP_AT};
    in.u.stop_at.gen = 1;
    in.u.stop_at.rank = 7;
    in.u.stop_at.boundary = 41;
    in.u.stop_at.step = -1;
    round_trip(&in, &out);
    ok(out.u.stop_at.gen == 1 && out.u.stop_at.rank == 7 && out.u.stop_at.boundary == 41 &&
           out.u.stop_at.step == -1,
       "STOP_AT fields survive");
    ddl_msg_clear(&out);

    uint8_t *f;
    size_t len;
    in.u.stop_at.boundary = -1;
    errno = 0;
    ok(ddl_proto_encode(&in, &f, &len) == -1 && errno == EINVAL,
       "STOP_AT with a negative boundary does not encode");
    in.u.stop_at.boundary = 3;
    f = encode(&in, &len);
    memset(f + DDL_PROTO_HDR_LEN + 8, 0xff, 8); /* boundary -1 on the wire */
    expect_malformed(f, len, "STOP_AT with a negative boundary", "boundary");
    free(f);
    in = (ddl_msg_t){.type = DDL_MSG_STOP};
    in.u.stop.at = 2;
    f = encode(&in, &len);
    memset(f + DDL_PROTO_HDR_LEN + 4, 0xfe, 8); /* boundary -2 */
    expect_malformed(f, len, "STOP with a boundary below -1", "boundary");
    free(f);
    in = (ddl_msg_t){.type = DDL_MSG_STOP_REQ};
    in.u.stop_req.signo = 200;
    f = encode(&in, &len);
    expect_malformed(f, len, "STOP_REQ with signal 200", "signal");
    free(f);
    is_str(ddl_msg_type_str(DDL_MSG_STOP_AT), "STOP_AT", "the new types have names");
}

/* WARM (minor 9): warm restart in place; types 21-22 are reserved */
static void test_warm(void)
{
    ddl_msg_t in = {.type = DDL_MSG_WARM}, out;
    in.u.warm.gen = 3;
    in.u.warm.rank = 9;
    in.u.warm.on = 1;
    in.u.warm.node_id = 4;
    round_trip(&in, &out);
    ok(out.type == DDL_MSG_WARM && out.u.warm.gen == 3 && out.u.warm.rank == 9 &&
           out.u.warm.on == 1 && out.u.warm.node_id == 4,
       "WARM fields survive");
    ddl_msg_clear(&out);
    uint8_t *f;
    size_t len;
    f = encode(&in, &len);
    set_u32(f + 8, (uint32_t)(len - DDL_PROTO_HDR_LEN - 2)); /* the node id cut short */
    expect_malformed(f, len - 2, "WARM cut short", "node");
    free(f);
    is_str(ddl_msg_type_str(DDL_MSG_WARM), "WARM", "WARM has a name");
    is_str(ddl_msg_type_str(21), "unknown", "type 21 (reserved) is unknown here");
    in = (ddl_msg_t){.type = 22};
    errno = 0;
    ok(ddl_proto_encode(&in, &f, &len) == -1 && errno == EINVAL, "type 22 does not encode");
}

static void test_encode_errors(void)
{
    uint8_t *f;
    size_t len;
    ddl_msg_t m = {.type = 999};
    errno = 0;
    ok(ddl_proto_encode(&m, &f, &len) == -1 && errno == EINVAL, "encode: unknown type -> EINVAL");

    char *big = malloc(DDL_PROTO_MAX_STR + 2);
    memset(big, 'x', DDL_PROTO_MAX_STR + 1);
    big[DDL_PROTO_MAX_STR + 1] = '\0';
    m = (ddl_msg_t){.type = DDL_MSG_ERROR};
    m.u.error.text = big;
    errno = 0;
    ok(ddl_proto_encode(&m, &f, &len) == -1 && errno == EINVAL,
       "encode: string over %u bytes -> EINVAL", DDL_PROTO_MAX_STR);
    free(big);

    m = (ddl_msg_t){.type = DDL_MSG_ALLGATHER};
    m.u.allgather.size = 1;
    m.u.allgather.len = DDL_PROTO_MAX_BODY + 1;
    m.u.allgather.data = calloc(1, (size_t)DDL_PROTO_MAX_BODY + 1);
    errno = 0;
    ok(ddl_proto_encode(&m, &f, &len) == -1 && errno == EMSGSIZE, "encode: body over the limit -> EMSGSIZE");
    free(m.u.allgather.data);

    m = (ddl_msg_t){.type = DDL_MSG_ALLGATHER};
    m.u.allgather.size = 1;
    m.u.allgather.len = 4;
    errno = 0;
    ok(ddl_proto_encode(&m, &f, &len) == -1 && errno == EINVAL, "encode: NULL blob with a length -> EINVAL");
}

static void test_socket_io(void)
{
    int sv[2];
    ddl_msg_t m = {.type = DDL_MSG_REGISTER}, out;
    ddl_error_t err;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        BAIL_OUT("socketpair: %s", strerror(errno));
    m.u.reg.rank = 3;
    ok(ddl_proto_send(sv[0], &m) == 0, "send over a socket");
    ok(ddl_proto_recv(sv[1], &out, 1000, &err) == 0 && out.type == DDL_MSG_REGISTER &&
           out.u.reg.rank == 3,
       "recv gets the same message");

    errno = 0;
    int64_t t0 = ddl_now_ms();
    ok(ddl_proto_recv(sv[1], &out, 100, &err) == -1 && errno == ETIMEDOUT,
       "recv with nothing sent times out with ETIMEDOUT");
    ok(ddl_now_ms() - t0 < 2000, "... after about the timeout");

    /* a header promising a body that never fully arrives */
    size_t len;
    uint8_t *f = encode(&m, &len);
    ddl_write_full(sv[0], f, len - 2);
    errno = 0;
    ok(ddl_proto_recv(sv[1], &out, 100, &err) == -1 && errno == ETIMEDOUT,
       "partial frame then silence -> ETIMEDOUT");
    free(f);

    /* garbage is EPROTO */
    ddl_write_full(sv[0], "GARBAGE-GARBAGE!", 16);
    int fresh[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, fresh);
    ddl_write_full(fresh[0], "GARBAGE-GARBAGE!", 16);
    errno = 0;
    ok(ddl_proto_recv(fresh[1], &out, 1000, &err) == -1 && errno == EPROTO,
       "garbage on the socket -> EPROTO");
    close(fresh[0]);
    close(fresh[1]);

    close(sv[0]);
    close(sv[1]);
    socketpair(AF_UNIX, SOCK_STREAM, 0, fresh);
    close(fresh[0]);
    errno = 0;
    ok(ddl_proto_recv(fresh[1], &out, 1000, &err) == -1 && errno == ECONNRESET,
       "peer closed -> ECONNRESET at once, not a hang");
    close(fresh[1]);
}

/* The failure summary file: its fields, JSON escaping, the temp name gone. */
static void test_fail_summary(void)
{
    char dir[] = "/tmp/t_proto.XXXXXX", path[128], buf[2048];
    ddl_error_t err = {""};
    if (!mkdtemp(dir))
        BAIL_OUT("mkdtemp: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/ck", dir);
    ddl_fail_summary_t s = {.step = "7.0", .gen = 2, .rank = -1, .node = 3, .host = "n\"4",
                            .cls = DDL_FAIL_NODE, .text = "its agent was silent\tfor 2.0 s",
                            .decision = "stop", .exit_code = DDL_EXIT_NODE_LOST,
                            .ckpt_step = 40, .restarts_left = 1, .detected_ms = 1234};
    ok(ddl_fail_summary_write(path, &s, &err) == 0, "failure summary written (directory made)");
    snprintf(buf, sizeof buf, "%s/failure-gen2.json", path);
    FILE *f = fopen(buf, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    ok(strstr(buf, "\"generation\": 2, \"rank\": -1, \"node\": 3, \"host\": \"n\\\"4\"") != NULL,
       "summary: generation, rank, node and an escaped host");
    ok(strstr(buf, "\"class\": \"node-lost\", \"exit_status\": -1, \"signal\": 0") != NULL,
       "summary: class node-lost, no exit status or signal");
    ok(strstr(buf, "silent\\u0009for") != NULL && strstr(buf, "\"exit_code\": 93") != NULL &&
           strstr(buf, "\"checkpoint_step\": 40") && strstr(buf, "\"detected_unix_ms\": 1234}"),
       "summary: escaped text, exit code, checkpoint step, detection time");
    if (!strstr(buf, "\"exit_code\": 93"))
        diag("%s", buf);
    is_str(buf,
           "{\"step\": \"7.0\", \"generation\": 2, \"rank\": -1, \"node\": 3, \"host\": \"n\\\"4\", "
           "\"class\": \"node-lost\", \"exit_status\": -1, \"signal\": 0, \"description\": "
           "\"its agent was silent\\u0009for 2.0 s\", \"decision\": \"stop\", \"exit_code\": 93, "
           "\"checkpoint_step\": 40, \"restarts_left\": 1, \"detected_unix_ms\": 1234}\n",
           "summary: the whole file, byte for byte");
    snprintf(buf, sizeof buf, "%s/failure-gen2.json.tmp", path);
    ok(access(buf, F_OK) != 0, "no temporary file left");
    struct stat sb;
    snprintf(buf, sizeof buf, "%s/failure-gen2.json", path);
    ok(stat(buf, &sb) == 0 && (sb.st_mode & 0777) == 0600, "the summary is 0600");
    ok(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0700, "the directory made is 0700");

    /* a link planted where the temporary file used to go is not followed */
    char secret[160], link[160];
    snprintf(secret, sizeof secret, "%s/secret", dir);
    FILE *sf = fopen(secret, "w");
    if (!sf)
        BAIL_OUT("cannot create %s", secret);
    fputs("precious\n", sf);
    fclose(sf);
    chmod(secret, 0600);
    snprintf(link, sizeof link, "%s/failure-gen3.json.tmp", path);
    if (symlink(secret, link) < 0)
        BAIL_OUT("symlink: %s", strerror(errno));
    s.gen = 3;
    ok(ddl_fail_summary_write(path, &s, &err) == 0, "summary written with a link at its .tmp");
    f = fopen(secret, "r");
    n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    is_str(buf, "precious\n", "the link's target is not overwritten");
    snprintf(buf, sizeof buf, "%s/failure-gen3.json", path);
    ok(lstat(buf, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0777) == 0600,
       "the summary is a regular file of mode 0600");

    /* a directory others can write is refused, with its mode and the fix */
    chmod(path, 0777);
    s.gen = 4;
    ok(ddl_fail_summary_write(path, &s, &err) < 0 && strstr(err.text, path) &&
           strstr(err.text, "mode 0777") && strstr(err.text, "chmod go-w"),
       "a directory others can write is refused: %s", err.text);
    snprintf(buf, sizeof buf, "%s/failure-gen4.json", path);
    ok(access(buf, F_OK) != 0, "... and nothing is written there");
    s.gen = 2;
    snprintf(buf, sizeof buf, "rm -rf '%s'", dir);
    if (system(buf) != 0)
        diag("cannot remove %s", dir);
    ok(ddl_fail_summary_write("/proc/no/such", &s, &err) < 0 && strstr(err.text, "/proc/no/such"),
       "an unwritable directory fails with its name");
}

int main(void)
{
    plan(NO_PLAN);
    test_fail_summary();
    test_round_trips();
    test_two_frames();
    test_auth_and_strings();
    test_malformed();
    test_encode_errors();
    test_stop();
    test_warm();
    test_socket_io();
    is_str(ddl_rank_state_str(DDL_RANK_RUNNING), "running", "state names");
    is_str(ddl_rank_state_str(99), "unknown", "unknown state name");
    is_str(ddl_peer_state_str(DDL_PEER_LOST), "lost", "peer link state names");
    is_str(ddl_peer_state_str(7), "unknown", "unknown peer link state name");
    return done_testing();
}
