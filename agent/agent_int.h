/* agent_int.h: the internals of ddl-agent's daemon, shared by its files:
 *
 *   agent.c     the start-up, the event loop (common/evloop.h: fd watchers
 *               for the sockets and connections, timers for beats, silence,
 *               the failure window, takeover and accept pauses), the message
 *               dispatch table, status replies and the supervisors'
 *               registrations
 *   conn.c      connections: non-blocking buffers, framing (tags on
 *               authenticated links), accepting with limits, dropping
 *   links.c     links between agents: authentication (auth.h), beats,
 *               silence, the roster and leader takeover
 *   exchange.c  the bootstrap allgather through the agents
 *   recovery.c  failures to decisions (policy.h) and their application
 *   drain.c     stopping on request (Slurm's SIGTERM, --signal): every rank
 *               checkpoints at one step boundary
 *   world.c     the world map (world.h), policy.c the policy (policy.h):
 *               pure functions, unit-tested
 *
 * One agent_t per daemon, used by one thread; nothing here blocks except
 * where a function says so.  Functions that return int return 0 or -1.
 */
#ifndef DDL_AGENT_INT_H
#define DDL_AGENT_INT_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/signalfd.h>
#include <sys/types.h>
#include <arpa/inet.h>

#include "agent.h"
#include "auth.h"
#include "detector.h"
#include "evloop.h"
#include "policy.h"
#include "proto.h"
#include "world.h"

enum { CONN_UNIX, CONN_TCP_NEW, CONN_PEER, CONN_LEADER };

#define HELLO_TIMEOUT_MS 5000  /* a TCP connection that has not authenticated is dropped */
#define MAX_UNAUTHED 64        /* TCP connections not authenticated yet: the oldest goes */
#define CLOSE_FLUSH_MS 1000    /* a refused client that does not read its error is dropped */
#define ACCEPT_PAUSE_MS 100    /* out of descriptors: stop accepting for this long */
#define LINK_CLOSED "closed its link" /* link_lost's `how` for a link whose peer closed it */

typedef struct agent agent_t;

typedef struct {
    agent_t *a;       /* the agent it belongs to */
    int fd;
    ddl_ev_fd_t *ev;  /* its watcher in the agent's loop */
    ddl_ev_timer_t *deadline; /* authenticating, or writing a refused client's error */
    int kind;         /* CONN_*: local client, TCP before authentication, a node's link, the link to the leader */
    uint32_t node_id; /* CONN_PEER, CONN_LEADER: the node it speaks for (UINT32_MAX: unknown) */
    uid_t uid;
    pid_t pid;
    int rank; /* rank whose supervisor this is, -1 otherwise */
    int lib;  /* a worker's libddl (it asked for an exchange): told when its generation ends */
    int64_t opened_ms; /* CONN_TCP_NEW: must authenticate within HELLO_TIMEOUT_MS */
    int64_t heard_ms;  /* CONN_PEER, CONN_LEADER: last message on the link */
    ddl_det_t det;     /* CONN_PEER, CONN_LEADER: when its silence is a loss (detector.h) */
    uint8_t *in;
    size_t in_len, in_cap;
    uint8_t *out;
    size_t out_len, out_off;
    int close_after_flush;
    int64_t closing_ms; /* when close_after_flush was set (0: not yet) */
    int authed;         /* CONN_PEER, CONN_LEADER: every frame carries a tag (auth.h) */
    int dead;           /* drop at once, without a reply */
    char ip[INET_ADDRSTRLEN]; /* TCP: the peer's address, for logs */
    ddl_auth_link_t link;
} conn_t;

/* What this agent knows of another node's agent. */
typedef struct {
    uint8_t state;     /* ddl_peer_state_t */
    int64_t heard_at;  /* ddl_now_ms() of the last message, 0: never */
    char host[DDL_PLACE_LEN];
    char addr[64];
} peer_t;

/* A rank's progress, from its supervisor's PROGRESS (telemetry.c). */
typedef struct {
    uint32_t gen;         /* the worker's generation */
    int64_t step;         /* its last step, -1: none */
    uint64_t collectives; /* collectives it started */
    int64_t last_ms;      /* ddl_now_ms() of the last PROGRESS, 0: none */
    int64_t ref_step, ref_ms; /* the start of the rate's window */
    uint32_t rate_milli;  /* steps per second x 1000 */
    int rate_known;
} rank_prog_t;

/* A stop on request (drain.c). */
typedef struct {
    int active;        /* a stop of generation gen is under way */
    int asked;         /* not the leader: the request went to the leader */
    uint32_t gen;
    int64_t at;        /* the agreed boundary, -1: not yet */
    char why[300];     /* what asked for it ("SIGTERM on node 1 (n2)") */
    int signo;
    /* leader: */
    uint8_t *reported; /* per slot: its rank answered STOP_AT */
    uint32_t nreported;
    int64_t max, max_step; /* the largest boundary answered, and the step there */
    uint8_t *ended;    /* per slot: its rank ended during the stop */
    uint32_t nended, nstopped, nother; /* ended; with 94; otherwise (not 0, not below) */
    uint32_t nsignalled;               /* killed by SIGTERM, SIGUSR1 or SIGUSR2 */
} drain_t;

/* A failure as the leader compares them. */
typedef struct {
    uint32_t gen;
    int64_t rank; /* the failed task (slot), -1: the whole node */
    uint32_t node;
    uint8_t cls;
    int32_t wstatus;
    char host[DDL_PLACE_LEN];
    char text[512];
} failure_t;

struct agent {
    const ddl_agent_opts_t *opts;
    ddl_evloop_t *loop;       /* the one loop (evloop.h): connections, sockets, deadlines */
    ddl_ev_fd_t *sfd_ev, *lfd_ev, *tfd_ev; /* signals, the Unix socket, TCP (leader) */
    ddl_ev_timer_t *beat_t;   /* PEER_BEAT every beat_ms (several nodes) */
    ddl_ev_timer_t *silence_t, *decide_t, *takeover_t; /* supervised: the next link silence,
                               * the end of the failure window, of a takeover's wait */
    ddl_ev_timer_t *pause_t;  /* the end of an accept pause */
    ddl_ev_timer_t *tick_t;   /* exit_when_done: look once a second */
    ddl_ev_timer_t *metrics_t; /* the next metrics file (telemetry.c) */
    ddl_ev_timer_t *revive_t; /* the next look at a lost node's srun (revive.c) */
    int status;               /* ddl_agent_serve's return */
    char host[DDL_PLACE_LEN]; /* this node's hostname */
    const char *ckpt_dir;     /* DDL_CHECKPOINT_DIR, or NULL */
    int64_t *heard_at;        /* per world rank: last message from it, 0: never */
    peer_t *peers;            /* per node (nnodes entries) */
    int64_t beat_ms;
    int lfd, sfd, tfd;
    uint8_t *is_local;  /* per world rank: served by this agent */
    uint32_t nlocal;    /* how many */
    int leader;         /* this agent serves the world-wide exchanges */
    conn_t *up;         /* others: the link to the leader (NULL once lost) */
    int64_t started_ms;
    conn_t **conns;
    size_t nconns, cap;
    ddl_rank_info_t *ranks;
    /* the bootstrap allgather in progress */
    int ag_active;
    uint32_t ag_gen, ag_seq, ag_got; /* leader: ranks in; others: local ranks in */
    uint8_t **ag_blob;
    uint32_t *ag_len;
    conn_t **ag_waiter;
    int shutting_down;
    /* recovery (opts->supervise) */
    uint32_t gen;          /* the step's generation */
    int final;             /* stop or finish decided: no generation follows */
    int node_timeout_ms;
    uint8_t *exited;       /* leader: per rank, exited 0 in this generation */
    uint32_t nexited;
    ddl_policy_cfg_t pcfg;  /* the recovery policy (policy.h) */
    ddl_policy_state_t pol; /* leader: restarts used, checkpoint progress */
    int64_t decide_at;     /* leader: end of the failure window, 0: none open */
    failure_t cause;       /* leader: the likeliest root cause in the window */
    char last_failure[1100]; /* the last failure and its decision, for status; "" none */
    /* the world of this generation (world.h): with spares or shrinking
     * allowed, whole nodes move; otherwise rank = slot */
    ddl_world_t w;
    uint32_t nlocal_active; /* ranks of the world on this node */
    uint8_t *lost;          /* per node: lost */
    /* leader takeover (supervised, several nodes): every agent listens, the
     * leader tells all where (ROSTER); when the leader is lost, the lowest
     * live node leads */
    char (*roster)[64];     /* per node: where its agent listens, "" unknown */
    int listen_fd;          /* not leading: the socket it would lead on, -1: none */
    uint32_t leader_node;   /* the node of the leader agent */
    char leader_addr[64];   /* where the leader listens */
    int64_t takeover_until; /* new leader: wait for the others to link until then, 0: not */
    int need_takeover;      /* the leader was lost: choose another (main loop) */
    char takeover_why[300]; /* "lost the leader agent (node N, ADDR): HOW" */
    char takeover_how[160];
    uint32_t old_leader;    /* the leader that was lost */
    /* nodes that come back (a frozen node that resumed): */
    uint32_t *retaken;      /* per node, times its agent came back after a loss: the
                             * leader counts, ROSTER tells the others */
    uint8_t *member;        /* per node, 1: one of the step's nodes as of the leader's
                             * last decision (or since taken back); a world formed
                             * after a loss needs a majority of them (majority()) */
    int64_t round_ms;       /* when the loop last went to wait: a callback long after it
                             * means this agent itself was stopped (frozen, not scheduled) */
    int ask_old_leader;     /* the leader's link ended while this agent was stopped, or
                             * closed: ask the same leader again before a takeover */
    int64_t rejoin_at;      /* follower: ask the old leader again then (it was deciding) */
    int64_t roster_at;      /* leader: nodes joined since the last ROSTER: send it then */
    uint32_t rejoin_tries;
    int refused;            /* connect_to: the leader's ERROR code, 0: none */
    int64_t cut_until;      /* cut off by a partition (alone, a minority): asking the
                             * other nodes to take this one back until then; 0: not */
    int ask_quiet;          /* connect_to: a failure is logged at debug level */
    int gen_local;          /* gen is this node's own (cut off), not the step's */
    int64_t grow_ck;        /* leader: a shrunk world grows at the first checkpoint after
                             * this step (-2: no growth pending) */
    int64_t grow_at;        /* leader: the next look at DIR/latest for it, 0: none */
    ddl_ev_timer_t *grow_t; /* grow_at, rejoin_at */
    /* a lost node that restarted (revive.c) */
    struct revive *rv;      /* leader under Slurm: per node, its srun; NULL: off */
    char **revive_argv;     /* the step's command, NULL-terminated */
    char revive_launch[PATH_MAX]; /* ddl-launch */
    char revive_job[32];    /* SLURM_JOB_ID */
    int64_t revive_scan_at; /* the next look at the lost nodes */
    int64_t revive_wake;    /* what that look needs a wake-up for, 0: nothing */
    int64_t final_at;       /* when the stop or finish was decided */
    int64_t release_at;     /* --rejoin: cancel the step this node was lost from then */
    int released;           /* ... done */
    /* what an authenticated peer may speak for */
    uint32_t *owner;        /* per slot: the node that reported it (no map: first claim) */
    uint8_t (*nonces)[DDL_AUTH_NONCE]; /* the last NONCE_MEMORY nonces seen in PEER_AUTH */
    uint32_t nonce_next;
    int64_t accept_paused_until; /* out of descriptors: no accept() until then */
    /* telemetry (telemetry.c) */
    uint32_t failures[DDL_FAIL_CLASS_MAX + 1]; /* per class: detected here or reported by
                                                * this node's supervisors */
    rank_prog_t *prog;      /* per world rank, NULL until the first PROGRESS */
    struct telemetry *mx;   /* the metrics file, NULL until the loop's first call */
    struct ddl_strag *strag; /* leader: the straggler detector (straggler.h), NULL until
                              * the first timed PROGRESS */
    int strag_off;          /* detection off (DDL_STRAGGLER_PCT=0 or a bad setting) */
    drain_t drain;          /* a stop on request (drain.c) */
};

#define NONCE_MEMORY 256 /* a replayed PEER_AUTH among the last this many is refused */

#define NO_RANK DDL_NODE_IDLE

/* slot_of: the slot (Slurm task) that holds world rank r. */
static inline uint32_t slot_of(const agent_t *a, uint32_t r)
{
    return ddl_world_slot(&a->w, r);
}

/* rank_of: the world rank slot s holds now (-1: none, it is idle). */
static inline int64_t rank_of(const agent_t *a, int64_t s)
{
    return ddl_world_rank(&a->w, s);
}

/* agent.c */
void remap(agent_t *a);                                  /* world and nlocal_active */
void heard_rank(agent_t *a, uint32_t rank);
void handle_msg(agent_t *a, conn_t *c, ddl_msg_t *m);    /* one decoded message */

/* conn.c */
void conn_free(conn_t *c);
int conn_queue(conn_t *c, const ddl_msg_t *msg);         /* -1: not queued (logged) */
void reply_error(conn_t *c, int code, const char *text); /* an ERROR, whatever c is */
void conn_error(conn_t *c, int code, const char *text);  /* none to unauthenticated TCP */
void fio_report(void); /* log the background file writes' errors (fileio.h) */
int limited(void);                                       /* may a stranger's warning be logged */
int conn_read(agent_t *a, conn_t *c);                    /* -1: drop c */
int conn_flush(conn_t *c);                               /* -1: drop c */
int conn_add(agent_t *a, conn_t *c);                     /* c->fd set: watched from now on */
void conn_drop(agent_t *a, size_t idx);                  /* a->conns[idx] goes, the last moves in */
void conn_drop_c(agent_t *a, conn_t *c);                 /* c goes */
void conns_prepare(agent_t *a);                          /* each round: flush, drop closed, events */
void do_accept(agent_t *a);
void do_accept_tcp(agent_t *a);

/* links.c */
int hostport_ok(const char *s);                          /* "" or IPv4:port */
void send_beats(agent_t *a);
void handle_beat(agent_t *a, conn_t *c, const ddl_msg_t *m);
void handle_auth(agent_t *a, conn_t *c, const ddl_msg_t *m);
int connect_to(agent_t *a, const char *addr, int timeout_ms, int retry); /* blocks up to 2 x timeout_ms */
void link_lost(agent_t *a, conn_t *c, const char *how);
void check_silence(agent_t *a);
int silence_due(agent_t *a);                             /* ms, -1: no link */
void send_roster(agent_t *a);
void handle_roster(agent_t *a, const ddl_msg_t *m);
void takeover(agent_t *a); /* may block: about 2 x (node timeout + 1 s) per round */
void finish_takeover(agent_t *a);
int restarted(agent_t *a);                               /* --rejoin: ask to be taken back */
void rejoin(agent_t *a);                                 /* ask the old leader again */
/* revive.c */
void revive_init(agent_t *a);      /* under Slurm: the step's command, for lost nodes */
void revive_free(agent_t *a);
int64_t revive_check(agent_t *a);  /* srun for lost nodes; when to look again (0: no need) */
int revive_release(agent_t *a);    /* at the end: 1 once this agent may exit */
int retired(const agent_t *a, uint32_t node);            /* back too often: never given ranks */

/* exchange.c */
void ag_reset(agent_t *a);
void ag_fail(agent_t *a, int code, const char *why);
int owns(agent_t *a, uint32_t node, uint32_t slot);
void handle_allgather(agent_t *a, conn_t *c, ddl_msg_t *m);
void handle_node_gather(agent_t *a, conn_t *c, ddl_msg_t *m);
void handle_result(agent_t *a, ddl_msg_t *m);

/* recovery.c */
int ckpt_latest(const char *dir, int64_t *step, uint32_t *age_ms); /* blocking file I/O */
void to_peers(agent_t *a, const ddl_msg_t *m);
void apply_generation(agent_t *a, const ddl_msg_t *m);
int generation_ok(const agent_t *a, const ddl_msg_t *m, char *why, size_t len);
void decide(agent_t *a);                                 /* the window has passed */
void leader_failure(agent_t *a, const failure_t *f);
void report_failure(agent_t *a, const failure_t *f);
void rank_exited(agent_t *a, uint32_t rank, uint32_t gen);
void stop_here(agent_t *a, const char *why);
void handle_failure(agent_t *a, conn_t *c, const ddl_msg_t *m);
void retake(agent_t *a, conn_t *c);                      /* a lost node's agent came back */
int majority(const agent_t *a, char *why, size_t len);   /* the nodes left may go on */
void members_now(agent_t *a);                             /* the nodes left are the members */
void step_down(agent_t *a);                               /* a leader cut off leads no more */
void grow_arm(agent_t *a);                               /* growth possible: wait for a checkpoint */
void grow_check(agent_t *a);                             /* grow a shrunk world when due */

/* telemetry.c */
int status_fill(agent_t *a, ddl_msg_t *m);   /* this agent's STATUS; -1 ENOMEM */
void status_release(ddl_msg_t *m);           /* what status_fill allocated */
void failure_count(agent_t *a, int cls);     /* one more failure of class cls */
void progress_note(agent_t *a, uint32_t rank, const ddl_msg_t *m); /* a PROGRESS */
/* straggler_note: the leader's straggler detection takes slot's PROGRESS
 * (from node), and logs a straggler named or recovered (telemetry.c). */
void straggler_note(agent_t *a, uint32_t slot, uint32_t node, const ddl_msg_t *m);
/* straggler_info: the leader's straggler now (rank DDL_STRAGGLER_NONE: none,
 * or not the leader), ranks as world ranks. */
void straggler_info(const agent_t *a, ddl_straggler_info_t *out);
int metrics_wait(agent_t *a, int wait);      /* a poll timeout (ms, -1: none) cut to the
                                              * next metrics write */
void metrics_tick(agent_t *a);               /* write the metrics file when due (file I/O) */
void metrics_end(agent_t *a);                /* the last write (ddl_step_active 0); frees */

/* drain.c */
int drain_signal(agent_t *a, const struct signalfd_siginfo *si); /* 1: exit now */
void drain_request(agent_t *a, int signo, const char *why);
void drain_stop_msg(agent_t *a, conn_t *c, const ddl_msg_t *m);  /* STOP from the leader */
void drain_stop_at(agent_t *a, conn_t *c, const ddl_msg_t *m);   /* STOP_AT */
void drain_joined(agent_t *a, conn_t *c);      /* a worker's bootstrap result went out */
int drain_failure(agent_t *a, const failure_t *f);              /* 1: taken (stopping) */
int drain_exited(agent_t *a, uint32_t slot, uint32_t gen);      /* 1: taken (stopping) */
void drain_no_restart(agent_t *a, ddl_decision_t *d);
void drain_free(agent_t *a);

#endif
