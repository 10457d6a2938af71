/* policy.h: what follows a failure, as a pure function: restart into the
 * next generation (after a backoff) or stop the step with which exit
 * status.  No I/O: the caller reads the latest checkpoint, forms the next
 * world, writes the failure summary and tells the agents.  Not thread-safe
 * (the state is the caller's); every function is non-blocking.
 *
 * Failures that arrive within DDL_POLICY_WINDOW_MS of the first are
 * compared; the likeliest root cause (ddl_fail_score: a lost node before a
 * lost supervisor, a hang, a signal, an exit) is the one decided on.
 */
#ifndef DDL_AGENT_POLICY_H
#define DDL_AGENT_POLICY_H

#include <stdint.h>

#define DDL_POLICY_WINDOW_MS 30   /* failures this close to the first are compared */
#define DDL_POLICY_BACKOFF_MS 500 /* before the second restart; doubles, at most 16 times
                                   * (the first restart is at once: a failure after a
                                   * healthy run costs no wait; a crash loop backs off) */

/* Under Slurm the leader starts a lost node's part of the step again
 * (agent/revive.c): the first srun this long after the loss (a node that
 * froze or was cut off comes back by itself sooner), then, after each srun
 * that ended with the node still lost, DDL_REVIVE_RETRY_MS doubling up to
 * DDL_REVIVE_RETRY_MAX_MS (ddl_policy_revive_retry_ms). */
#define DDL_REVIVE_FIRST_MS 5000
#define DDL_REVIVE_RETRY_MS 10000
#define DDL_REVIVE_RETRY_MAX_MS 60000

typedef struct {
    uint32_t restarts;   /* restarts allowed (--ddl-restarts) */
    uint32_t crash_loop; /* failures in a row without checkpoint progress that stop the
                          * step (0: no limit) */
    int have_ckpt_dir;   /* checkpoints are known (the crash-loop guard needs them) */
    int have_map;        /* whole nodes can move: a lost node need not stop the step */
    int ddlrun_names;    /* the reasons name ddlrun's options (--restarts), not srun's */
} ddl_policy_cfg_t;

typedef struct {
    uint32_t restarts_used;
    int64_t ckpt_best;   /* newest checkpoint step seen at a failure, -1: none */
    uint32_t stalled;    /* failures in a row without checkpoint progress */
} ddl_policy_state_t;

typedef struct {
    int restart;       /* 1: restart into the next generation; 0: stop */
    uint32_t delay_ms; /* restart: the backoff */
    int code;          /* stop: every task's exit status (DDL_EXIT_* or the worker's) */
    const char *why;   /* stop: why no restart (in why_buf) */
    char why_buf[256];
} ddl_decision_t;

/* ddl_policy_init: the state of a step whose generation `gen` runs now
 * (restarts already used: one per generation) and whose latest checkpoint
 * is ckpt (-1: none). */
void ddl_policy_init(ddl_policy_state_t *st, uint32_t gen, int64_t ckpt);

/* ddl_policy_prefer: whether a failure (cls, wstatus) found in the window
 * replaces the current cause (cur_cls, cur_wstatus) as the likelier root. */
int ddl_policy_prefer(int cls, int wstatus, int cur_cls, int cur_wstatus);

/* ddl_policy_wants_world: whether a failure of class cls could restart in
 * a new world (a lost node, with a map and a restart left): then the caller
 * tries to form one and passes the outcome to ddl_policy_decide. */
int ddl_policy_wants_world(const ddl_policy_cfg_t *cfg, const ddl_policy_state_t *st, int cls);

/* ddl_policy_decide: the decision on the cause (cls, its waitpid status)
 * with the latest checkpoint step ckpt (-1: none); world_formed: a new
 * world exists for a lost node (see wants_world).  Updates st (restarts
 * used, checkpoint progress). */
void ddl_policy_decide(const ddl_policy_cfg_t *cfg, ddl_policy_state_t *st, int cls,
                       int wstatus, int64_t ckpt, int world_formed, ddl_decision_t *out);

/* ddl_policy_revive_retry_ms: the wait before the next srun that starts a
 * lost node's part again, after the srun of try `tries` (1, 2, ...) ended
 * with the node still lost: 10 s, 20 s, 40 s, then 60 s. */
uint32_t ddl_policy_revive_retry_ms(uint32_t tries);

#endif
