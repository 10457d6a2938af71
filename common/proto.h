/* proto.h: the wire protocol spoken on ddl-agent's Unix socket and, over
 * TCP, between the agents of a step's nodes (docs/protocol.md).
 *
 * Every frame is a 12-byte header followed by a body, all integers in
 * network byte order:
 *
 *     u32 magic 'DDLw' | u8 major | u8 minor | u16 type | u32 body length
 *
 * Bodies are sequences of u8/u32/i32 fields, strings and byte blobs (u32
 * length + bytes).  Compatibility: within a major version a newer minor may
 * append fields at the end of a body; decoders ignore trailing bytes.  A
 * frame of another major version, an unknown type, a body over
 * DDL_PROTO_MAX_BODY, a field running past the body, or a string holding a
 * NUL or a control character (below 0x20, or 0x7f) is malformed (EPROTO):
 * strings from a peer can reach logs, terminals and environment variables.
 * Message type numbers are never reused.
 */
#ifndef DDL_PROTO_H
#define DDL_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "failure.h" /* the failure classes FAILURE carries */
#include "util.h"

#define DDL_PROTO_MAGIC 0x44444c77u /* "DDLw" */
#define DDL_PROTO_MAJOR 1
#define DDL_PROTO_MINOR 10
#define DDL_PROTO_HDR_LEN 12
#define DDL_PROTO_MAX_BODY (64u << 20)
#define DDL_PROTO_MAX_STR 4096u
#define DDL_PROTO_MAX_SECRET 256u

typedef enum {
    DDL_MSG_ERROR = 1,            /* agent -> client: the request was refused */
    DDL_MSG_REGISTER = 2,         /* ddl-launch -> agent: a rank's supervisor */
    DDL_MSG_RANK_STATE = 3,       /* ddl-launch -> agent: worker started/ended */
    DDL_MSG_ALLGATHER = 4,        /* worker -> agent: one rank's contribution */
    DDL_MSG_ALLGATHER_RESULT = 5, /* agent -> worker: every rank's, in rank order */
    DDL_MSG_STATUS_REQ = 6,       /* client -> agent: describe the step */
    DDL_MSG_STATUS = 7,           /* agent -> client: the step and its ranks */
    DDL_MSG_ACK = 8,              /* agent -> client: request accepted */
    DDL_MSG_PEER_HELLO = 9,       /* before minor 5 (the secret in clear): refused */
    DDL_MSG_NODE_GATHER = 10,     /* agent -> leader agent: a node's contributions */
    DDL_MSG_PEER_BEAT = 11,       /* agent <-> agent (TCP), every heartbeat interval (minor 2) */
    DDL_MSG_FAILURE = 12,         /* ddl-launch -> agent -> leader agent: a rank failed (minor 3) */
    DDL_MSG_GENERATION = 13,      /* leader agent -> agents -> ddl-launch: what to do next (minor 3) */
    DDL_MSG_ROSTER = 14,          /* leader agent -> agents: where every agent listens (minor 3) */
    DDL_MSG_PEER_AUTH = 15,       /* agent -> listening agent (TCP): claims, nonce, MAC (minor 5) */
    DDL_MSG_PEER_WELCOME = 16,    /* listening agent -> agent: its nonce and MAC (minor 5) */
    DDL_MSG_PROGRESS = 17,        /* ddl-launch -> agent: the worker's last heartbeat (minor 6) */
    DDL_MSG_STOP_REQ = 18,        /* ddl-launch, libddl -> agent -> leader agent: a stop signal (minor 7) */
    DDL_MSG_STOP = 19,            /* leader agent -> agents -> libddl, ddl-launch: stop at a step boundary (minor 7) */
    DDL_MSG_STOP_AT = 20,         /* libddl -> agent -> leader agent: the first boundary it can stop at (minor 7) */
    /* 21-22: reserved (stragglers) */
    DDL_MSG_WARM = 23,            /* libddl -> agent -> ddl-launch, agent -> libddl: warm restart (minor 9) */
} ddl_msg_type_t;
#define DDL_MSG_TYPE_MAX DDL_MSG_WARM

/* PEER_AUTH and PEER_WELCOME: sizes of the nonces and MACs (agent/auth.h),
 * and the largest PEER_AUTH body a listening agent reads from a connection
 * that has not authenticated yet. */
#define DDL_PROTO_NONCE_LEN 32
#define DDL_PROTO_MAC_LEN 32
#define DDL_PROTO_MAX_AUTH_BODY 1024u


/* What the leader agent decided after a failure or when every rank ended
 * (DDL_MSG_GENERATION's action). */
#define DDL_NODE_IDLE UINT32_MAX /* a node without ranks in a generation (a spare) */

typedef enum {
    DDL_GEN_RESTART = 0, /* stop the worker, wait delay_ms, start it again in generation gen */
    DDL_GEN_STOP = 1,    /* stop the worker and exit with code (-1: like the worker ended) */
    DDL_GEN_FINISH = 2,  /* every rank exited 0: exit 0 */
} ddl_gen_action_t;

/* A rank's life cycle as the agent sees it. */
typedef enum {
    DDL_RANK_PENDING = 0,  /* not registered yet */
    DDL_RANK_STARTING = 1, /* supervisor registered, worker not started */
    DDL_RANK_RUNNING = 2,  /* worker running */
    DDL_RANK_EXITED = 3,   /* worker exited with status 0 */
    DDL_RANK_FAILED = 4,   /* worker exited non-zero, was signalled, or its
                            * supervisor vanished */
    DDL_RANK_SPARE = 5,    /* on a spare node: waits, idle, to take a lost node's place */
} ddl_rank_state_t;
#define DDL_RANK_STATE_MAX DDL_RANK_SPARE

/* ddl_rank_state_str: "running" etc.; "unknown" for other values. */
const char *ddl_rank_state_str(int state);

/* Placement strings as ddl-launch reports them (longer ones are cut). */
#define DDL_PLACE_LEN 128

/* "never heard of" in the *_heard_ms ages below. */
#define DDL_HEARD_NEVER UINT32_MAX

typedef struct {
    uint32_t rank;
    uint8_t state;   /* ddl_rank_state_t */
    int32_t pid;     /* supervisor (ddl-launch) pid, 0 if unknown */
    int32_t wpid;    /* worker pid, 0 if not started */
    int32_t wstatus; /* waitpid() status once EXITED/FAILED */
    /* minor 2 ("" and 0 from older peers): */
    char cpus[DDL_PLACE_LEN]; /* PU list the worker is bound to, "" unbound */
    char gpu[DDL_PLACE_LEN];  /* its GPU's PCI bus id, "" none */
    char nic[DDL_PLACE_LEN];  /* its NIC, "" none */
    uint32_t restarts;        /* times the worker was restarted */
    uint32_t heard_ms;        /* ms since the agent last heard from the rank (DDL_HEARD_NEVER) */
    /* minor 6 (-1, 0 and DDL_RATE_UNKNOWN from older agents): the worker's
     * progress, from its heartbeats (PROGRESS) */
    int64_t step;             /* its last ddl_heartbeat() step, -1: none */
    uint64_t collectives;     /* collectives it started (this generation's worker) */
    uint32_t rate_milli;      /* steps per second x 1000 over the last few seconds */
} ddl_rank_info_t;

/* A rank persistently slower than its peers, as the leader agent names it
 * (minor 8; agent/straggler.h). */
#define DDL_STRAGGLER_NONE UINT32_MAX
typedef struct {
    uint32_t rank;       /* the slow rank, DDL_STRAGGLER_NONE: none now */
    uint32_t node_id;    /* its node */
    uint32_t slower_pm;  /* its compute per step, per mille above its peers' median */
    uint32_t steps;      /* the steps its window covered */
    uint32_t compute_us; /* its compute per step (step time - time waited in collectives) */
    uint32_t peers_us;   /* its peers' median compute per step */
    uint32_t named;      /* stragglers named since the agent started */
} ddl_straggler_info_t;

/* "not known" in ddl_rank_info_t.rate_milli. */
#define DDL_RATE_UNKNOWN UINT32_MAX

/* An agent's view of its link to another node's agent (minor 2). */
typedef enum {
    DDL_PEER_NONE = 0, /* no link (yet): the leader links every node, others only the leader */
    DDL_PEER_UP = 1,   /* linked */
    DDL_PEER_LOST = 2, /* was linked, the link closed */
} ddl_peer_state_t;

/* ddl_peer_state_str: "up" etc.; "unknown" for other values. */
const char *ddl_peer_state_str(int state);

typedef struct {
    uint32_t node_id;
    uint8_t state;            /* ddl_peer_state_t */
    uint32_t heard_ms;        /* ms since the last message on the link (DDL_HEARD_NEVER) */
    char host[DDL_PLACE_LEN]; /* its hostname, "" unknown */
    char addr[64];            /* its address as "IPv4:port" or "IPv4", "" unknown */
} ddl_peer_info_t;

/* One decoded message.  Pointers are owned by the message: free them with
 * ddl_msg_clear().  For encoding, the caller fills the fields it owns and
 * the encoder only reads them. */
typedef struct {
    uint16_t type; /* ddl_msg_type_t */
    union {
        struct {
            int32_t code; /* an errno value */
            char *text;
        } error;
        struct {
            uint32_t rank;
            int32_t pid;
            /* minor 2 (empty and 0 from older supervisors): */
            char cpus[DDL_PLACE_LEN], gpu[DDL_PLACE_LEN], nic[DDL_PLACE_LEN];
            uint32_t restarts;
        } reg;
        struct {
            uint32_t rank;
            uint8_t state;
            int32_t pid;
            int32_t wstatus;
            uint32_t gen; /* minor 3: the worker's generation (0 from older supervisors) */
        } rank_state;
        struct {
            uint32_t gen, seq, rank, size;
            uint32_t len;
            uint8_t *data;
        } allgather;
        struct {
            uint32_t gen, seq, count;
            uint32_t *lens; /* count entries */
            uint8_t *data;  /* the blobs back to back, in rank order */
        } allgather_result;
        struct {
            char *step;
            uint32_t size, gen;
            int32_t agent_pid;
            uint32_t nranks;
            ddl_rank_info_t *ranks;
            uint32_t node_id, nnodes; /* minor 1; 0 and 1 from older agents */
            /* minor 2 (NULL, 0 from older agents); the per-rank placement,
             * restarts and ages travel here too, in rank order: */
            char *host;              /* the agent's hostname */
            uint8_t leader;          /* 1: this agent serves the step's exchanges */
            uint32_t npeers;
            ddl_peer_info_t *peers; /* npeers entries */
            char *ckpt_dir;         /* the step's checkpoint directory, NULL/"" none */
            int64_t ckpt_step;      /* its latest committed step, -1 none */
            uint32_t ckpt_age_ms;   /* since that commit (DDL_HEARD_NEVER: unknown) */
            /* minor 3 (NULL from older agents): */
            char *last_failure;     /* the step's last failure and its decision, NULL none */
            /* minor 6 (0 from older agents): failures this agent detected
             * or its supervisors reported, per class (index: ddl_fail_class_t;
             * the leader also counts the nodes it lost) */
            uint32_t failures[DDL_FAIL_CLASS_MAX + 1];
            /* minor 8 (rank DDL_STRAGGLER_NONE, named 0 from older agents): the
             * leader's straggler; other agents' is always none */
            ddl_straggler_info_t straggler;
        } status;
        struct {
            char *step;
            uint32_t node_id;
            uint32_t secret_len; /* at most DDL_PROTO_MAX_SECRET */
            uint8_t *secret;
            char *host; /* minor 2: the sender's hostname (NULL from older agents) */
            char *listen; /* minor 3: where it accepts agents if it must lead, "IPv4:port" */
        } peer_hello;
        struct {
            char *step;    /* the step it belongs to */
            uint32_t node_id;
            char *host;    /* its hostname */
            char *listen;  /* where it accepts agents if it must lead, "IPv4:port" or "" */
            uint8_t nonce[DDL_PROTO_NONCE_LEN];
            uint8_t mac[DDL_PROTO_MAC_LEN]; /* over the fields above, under the secret */
        } peer_auth;
        struct {
            uint32_t node_id; /* the listening agent's node */
            uint8_t nonce[DDL_PROTO_NONCE_LEN];
            uint8_t mac[DDL_PROTO_MAC_LEN]; /* over both nonces, under the secret */
        } peer_welcome;
        struct {
            uint32_t node_id; /* the sender's node */
            uint32_t gen;     /* its generation */
            char *host;       /* its hostname */
        } peer_beat;
        struct {
            uint32_t rank;        /* the supervisor's rank (as registered) */
            uint32_t gen;         /* the worker's generation */
            int64_t step;         /* its last ddl_heartbeat() step, -1: none */
            uint64_t collectives; /* collectives it started */
            /* minor 8 (0 from older supervisors and programs without ddl_heartbeat) */
            int64_t at_ns;    /* the worker's monotonic clock at that step */
            uint64_t wait_ns; /* ns it had waited in collectives by then */
        } progress;
        struct {
            uint32_t gen;     /* generation in which it failed */
            uint32_t rank;    /* UINT32_MAX for a whole node */
            uint32_t node_id; /* the rank's node (set by the agent) */
            uint8_t cls;      /* ddl_fail_class_t */
            int32_t wstatus;  /* the worker's waitpid() status (worker-exit/-signal) */
            char *host;       /* the node's hostname (set by the agent), may be NULL */
            char *text;       /* one line for people, may be NULL */
        } failure;
        struct {
            uint32_t nnodes;
            char **addr; /* per node: "IPv4:port" where its agent listens, "" unknown */
            /* minor 10: per node, the times its agent came back after a loss
             * (the leader's count, which a new leader takes over), and
             * whether the leader counts it lost; NULL when the sender is
             * older (decoded: all 0) */
            uint32_t *retaken;
            uint8_t *lost;
        } roster;
        struct {
            uint32_t gen;      /* the generation to run (RESTART), or the current one */
            uint8_t action;    /* ddl_gen_action_t */
            int32_t code;      /* STOP: exit status of every task, -1: the worker's own */
            uint32_t delay_ms; /* RESTART: backoff before starting the worker again */
            char *cause;       /* one line naming the failure, may be NULL */
            /* RESTART with a new world (a spare took a lost node's place, or the
             * world shrank): per node, its position in the world (its ranks are
             * position * tasks-per-node + local index), DDL_NODE_IDLE: no ranks.
             * nnodes 0: the world is unchanged. */
            uint32_t nnodes;
            uint32_t *node_rank;
            /* minor 4: RESTART with a new world: the IPv4 address of the node
             * that now holds world rank 0 (MASTER_ADDR), NULL or "": unchanged */
            char *master;
        } generation;
        struct {
            int32_t signo; /* the signal that asked for the stop, 0: none */
            char *why;     /* one line for people ("SIGTERM on node 1 (n2)"), may be NULL */
        } stop_req;
        struct {
            uint32_t gen; /* the generation that stops */
            int64_t at;   /* -1: report the first boundary you can stop at (STOP_AT);
                           * >= 0: stop at that boundary (ddl_should_stop() call index) */
            char *why;    /* what asked for the stop, may be NULL */
        } stop;
        struct {
            uint32_t gen;      /* the worker's generation */
            uint32_t rank;     /* its world rank */
            int64_t boundary;  /* the first ddl_should_stop() call index it can stop at */
            int64_t step;      /* the program's step at its last call, -1: none */
        } stop_at;
        struct {
            uint32_t gen;     /* the worker's generation */
            uint32_t rank;    /* its world rank */
            uint8_t on;       /* 1: keep the worker on a new generation; 0: withdrawn */
            uint32_t node_id; /* agent -> libddl: the agent's node (its index in a
                               * GENERATION's node_rank); 0 from libddl */
        } warm;
        struct {
            uint32_t gen, seq, size, count;
            uint32_t *ranks; /* count entries, each < size */
            uint32_t *lens;  /* count entries */
            uint8_t *data;   /* the blobs back to back, in the order of ranks */
        } node_gather;
    } u;
} ddl_msg_t;

/* ddl_msg_type_str: "ALLGATHER" etc.; "unknown" otherwise. */
const char *ddl_msg_type_str(int type);

/* ddl_msg_clear: free what a decoded message owns and zero it.  Accepts a
 * zeroed message.  Do not call on a message whose pointers the caller owns. */
void ddl_msg_clear(ddl_msg_t *msg);

/* ddl_proto_encode: build a whole frame (header + body) for msg.  On success
 * returns 0 and *frame (malloc'd, caller frees) and *len.  -1 with errno
 * EINVAL (unknown type, string over DDL_PROTO_MAX_STR, inconsistent
 * lengths), EMSGSIZE (body over DDL_PROTO_MAX_BODY) or ENOMEM. */
int ddl_proto_encode(const ddl_msg_t *msg, uint8_t **frame, size_t *len);

/* ddl_proto_decode: decode the frame at the start of buf[0..avail).
 * Returns the frame's length (> 0) and fills *msg; 0 if avail holds only part
 * of a frame (nothing filled); -1 with errno EPROTO and the reason in err for
 * a malformed frame, or ENOMEM.  Never reads past avail. */
ssize_t ddl_proto_decode(const uint8_t *buf, size_t avail, ddl_msg_t *msg, ddl_error_t *err);

/* ddl_proto_peek: check the header at the start of buf[0..avail) without
 * decoding the body: 1 and *type, *frame_len (header + body) when the
 * header is whole and valid (magic, major version, known type, body within
 * DDL_PROTO_MAX_BODY); 0 if fewer than DDL_PROTO_HDR_LEN bytes are there;
 * -1 with errno EPROTO and err for a bad header. */
int ddl_proto_peek(const uint8_t *buf, size_t avail, uint16_t *type, size_t *frame_len,
                   ddl_error_t *err);

/* ddl_proto_send: encode msg and write it whole to a blocking fd.  -1 with
 * errno on encode or write failure; a closed peer socket is EPIPE, never a
 * SIGPIPE. */
int ddl_proto_send(int fd, const ddl_msg_t *msg);

/* ddl_proto_recv: read one frame from fd, waiting at most timeout_ms
 * (negative: forever) for it to start and complete.  Returns 0; -1 with
 * errno ETIMEDOUT, ECONNRESET (peer closed), EPROTO (malformed; reason in
 * err) or another read error. */
int ddl_proto_recv(int fd, ddl_msg_t *msg, int timeout_ms, ddl_error_t *err);

#endif
