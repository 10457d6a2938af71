/* failure.h: how ddl names a failure and what it does about it, for
 * people and scripts: the failure classes, which failure of a window is the
 * likeliest root cause, the failure summary file, and the exit statuses of
 * a step that ddl stops.  Used by the agents, ddlrun and ddl-launch; the
 * wire protocol (proto.h) carries the classes.  Thread-compatible.
 */
#ifndef DDL_FAILURE_H
#define DDL_FAILURE_H

#include <stdint.h>

#include "util.h"

/* Failure classes, in DDL_MSG_FAILURE and the failure summary. */
typedef enum {
    DDL_FAIL_WORKER_EXIT = 1,   /* the worker exited with a non-zero status */
    DDL_FAIL_WORKER_SIGNAL = 2, /* the worker was killed by a signal */
    DDL_FAIL_WORKER_HANG = 3,   /* no heartbeat within the hang timeout; killed */
    DDL_FAIL_SUPERVISOR = 4,    /* a rank's ddl-launch vanished */
    DDL_FAIL_NODE = 5,          /* a node's agent went silent or its link closed */
    DDL_FAIL_WORKER_START = 6,  /* the worker ended before it ran the program (a failed
                                 * exec, TaskProlog): it cannot be started again */
} ddl_fail_class_t;
#define DDL_FAIL_CLASS_MAX DDL_FAIL_WORKER_START

/* ddl_fail_class_str: "worker-exit", "worker-signal", "worker-hang",
 * "supervisor-lost", "node-lost", "worker-start"; "unknown" otherwise.
 * Static string. */
const char *ddl_fail_class_str(int cls);

/* ddl_fail_score: how likely a failure is a root cause rather than a
 * consequence of another (a peer's death breaks transfers): node loss 5,
 * a lost supervisor 4, a hang 3, a signal other than those a broken
 * transfer or a stop request brings (SIGABRT from UCX, SIGTERM, SIGPIPE,
 * SIGHUP, SIGINT) 2, a non-zero exit or a failed start 1, anything else 0. */
int ddl_fail_score(int cls, int wstatus);

/* One failure, as the failure summary file DIR/failure-gen<G>.json says it
 * (written by ddlrun and by a step's leader agent). */
typedef struct {
    const char *step;
    uint32_t gen;
    int64_t rank;           /* -1: a whole node */
    int64_t node;           /* -1: unknown */
    const char *host;       /* may be NULL */
    int cls;                /* ddl_fail_class_t */
    int wstatus;            /* worker-exit, worker-signal: the waitpid() status */
    const char *text;       /* one line, may be NULL */
    const char *decision;   /* "restart", "stop" */
    int exit_code;          /* the step's exit status if it stops, -1 otherwise */
    int64_t ckpt_step;      /* checkpoint the next generation resumes from, -1 none */
    int restarts_left;
    int64_t detected_ms;    /* CLOCK_REALTIME ms when the failure was known */
} ddl_fail_summary_t;

/* ddl_fail_summary_write: DIR/failure-gen<G>.json (mode 0600), written to
 * an unpredictable temporary name and renamed, both relative to DIR opened
 * once by ddl_dir_open (safefile.h: created 0700 if missing, refused unless
 * owned by the user and writable by nobody else).  Blocking file I/O.
 * 0, or -1 with errno and err. */
int ddl_fail_summary_write(const char *dir, const ddl_fail_summary_t *s, ddl_error_t *err);

/* Exit statuses of ddlrun, and of every task of a `srun --ddl` step that the
 * agents stopped (documented in docs/user-guide.md): */
#define DDL_EXIT_RESTARTS_SPENT 90 /* a failure with no restart left */
#define DDL_EXIT_CRASH_LOOP 91     /* failures without checkpoint progress: do not requeue */
#define DDL_EXIT_HANG 92           /* ddl-launch: its worker hung and was killed */
#define DDL_EXIT_NODE_LOST 93      /* a node, agent or supervisor was lost and the world
                                    * cannot be formed again */
#define DDL_EXIT_STOPPED 94        /* stopped on request (Slurm's time limit or preemption
                                    * SIGTERM, --signal's SIGUSR1/SIGUSR2, ddlrun's SIGTERM)
                                    * after every rank committed a checkpoint at one step
                                    * boundary: requeue to resume; same value in ddl.h */
#define DDL_EXIT_NO_CHECKPOINT 95  /* a worker exited with it: no valid checkpoint at any
                                    * level where one must be; a restart cannot help, so
                                    * the step stops at once; same value in ddl.h */

#endif
