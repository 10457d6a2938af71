/* agent.h: ddl-agent internals: the per-node, per-step daemon and the
 * client side of its status command.
 *
 * The daemon is single-threaded: one poll() loop over its listening Unix
 * socket, its clients and a signal descriptor.  It is not a library: these
 * functions exist so that main.c stays a thin command-line front end.
 */
#ifndef DDL_AGENT_H
#define DDL_AGENT_H

#include <stdint.h>

#include "ddl_limits.h" /* the defaults of heartbeat_ms and node_timeout_ms */

/* A step on one node (ddlrun: the only node) or on several (Slurm): then
 * the agent of the node of rank 0 is the leader, listens on TCP and serves
 * the world-wide exchanges; the others connect to it and prove that they
 * belong to the step with its secret.
 *
 * With supervise set, the leader also decides what follows a failure: a
 * worker's (reported by its ddl-launch), a lost supervisor, or a lost node
 * (a linked agent silent for node_timeout_ms or its link closed).  It
 * compares the failures of a short window, names the likeliest root cause
 * in one line and in the failure summary (DDL_CHECKPOINT_DIR), and sends
 * every agent, which passes it to its supervisors, a DDL_MSG_GENERATION:
 * restart in the next generation (budget, backoff, crash-loop guard), or
 * stop with a DDL_EXIT_* status, or finish once every rank exited 0.  A
 * lost node's ranks move to a spare node (spares), or the world shrinks
 * (min_nodes); both need the same number of tasks on every node in block
 * order.  A lost node whose agent comes back (it froze, then resumed) is
 * taken back as a spare up to node_retakes times, and a world that shrank
 * grows back to its first size at the next committed checkpoint.  A
 * non-leader that loses the leader stops its own ranks
 * (DDL_EXIT_NODE_LOST) unless another node can take over.
 */
/* DDL_DETECTOR's values, in the order of ddl_env.def */
enum { AGENT_DET_AUTO, AGENT_DET_ADAPTIVE, AGENT_DET_FIXED };

typedef struct {
    const char *socket_path; /* where to listen (required) */
    const char *step;        /* step id shown by `status` (required) */
    uint32_t size;           /* ranks in the step's world (>= 1) */
    int ready_fd;            /* written "1\n" and closed once listening; -1: none */
    int parent_pid;          /* exit when this process dies (0: don't watch) */
    /* several nodes (all zero/NULL/-1 for a single node): */
    uint32_t node_id, nnodes;  /* this node, of nnodes (>= 1) */
    const uint32_t *local;     /* ranks on this node, nlocal of them; NULL: all */
    uint32_t nlocal;
    int tcp_fd;                /* leader: listening TCP socket; others: where they would
                                * lead after a takeover (-1: opened at the first link) */
    const char *leader;        /* others: the leader's "IPv4:port" */
    const char *rejoin;        /* a node restarted after a loss: nnodes comma-separated
                                * agent addresses ("IPv4:port" or empty) that it asks to
                                * take it back, instead of linking to a leader; NULL none */
    const uint8_t *secret;     /* the step's secret (when nnodes > 1) */
    uint32_t secret_len;
    int exit_when_done;        /* exit once every local rank has ended */
    int heartbeat_ms;          /* between PEER_BEATs to linked agents (0: default) */
    int detector;              /* DDL_DETECTOR: AGENT_DET_AUTO (adaptive while the step can
                                * recover from a lost node, fixed otherwise), _ADAPTIVE
                                * (detector.h) or _FIXED (a link is lost after
                                * node_timeout_ms of silence, never sooner) */
    /* recovery (srun --ddl, ddlrun --emulate): ranks' supervisors report failures
     * and wait for the leader's decision (a new generation, stop, finish). */
    int supervise;             /* 0: ranks end on their own (a bare agent) */
    uint32_t restarts;         /* restarts allowed (--ddl-restarts) */
    uint32_t crash_loop;       /* restarts in a row without checkpoint progress
                                * before giving up (0: off) */
    int node_timeout_ms;       /* silence after which a linked agent is lost (0: default) */
    uint32_t spares;           /* the last `spares` nodes wait idle to replace lost ones */
    uint32_t min_nodes;        /* without a spare, a lost node shrinks the world down to
                                * this many nodes (0: never shrink) */
    int cut_off_wait_s;        /* a node cut off by a partition waits this long to be taken
                                * back (DDL_CUT_OFF_WAIT_S) */
    uint32_t node_retakes;     /* a lost node whose agent comes back is taken back as a
                                * spare this many times (DDL_NODE_RETAKES); later returns
                                * are linked but never given ranks */
    int revive_wait_s;         /* under Slurm, the leader's srun for a lost node is stopped
                                * when the node is not back this long after its start
                                * (DDL_REVIVE_WAIT_S) */
    int revive_give_up_s;      /* ... and none is started this long after the loss
                                * (DDL_REVIVE_GIVE_UP_S; 0: never one) */
    int ddlrun_names;          /* reports name ddlrun's options (--restarts), not srun's
                                * (--ddl-restarts): --option-names ddlrun */
    const char *host;          /* this node's name in reports (NULL: the host name);
                                * ddlrun --emulate names its emulated nodes */
} ddl_agent_opts_t;

/* ddl_agent_serve: run the daemon until SIGTERM/SIGINT or the parent's
 * death; removes its socket file on the way out.  Returns the process exit
 * status (0 clean, 1 start-up failure, already logged). */
int ddl_agent_serve(const ddl_agent_opts_t *opts);

/* The forms of ddl_agent_status's output. */
enum { DDL_STATUS_TABLE, DDL_STATUS_JSON, DDL_STATUS_PROMETHEUS };

/* ddl_agent_status: query one agent socket (path) or, with path NULL, every
 * agent socket in the caller's runtime directory (all users' when run as
 * root), and print a table, JSON or Prometheus metrics (format, DDL_STATUS_*)
 * on stdout.  Returns the exit status: 0 (printed, including "no steps"),
 * 1 (an agent refused or failed; the metrics of the others are printed). */
int ddl_agent_status(const char *path, int format);

#endif
