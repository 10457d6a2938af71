/* policy.c: the recovery policy of a supervised step (policy.h): the
 * restart budget, the backoff, the crash-loop guard and the exit status of
 * a step that stops, from the failure's class and the checkpoints seen. */
#include "config.h"

#include <stdio.h>
#include <sys/wait.h>

#include "policy.h"
#include "proto.h"

void ddl_policy_init(ddl_policy_state_t *st, uint32_t gen, int64_t ckpt)
{
    st->restarts_used = gen;
    st->ckpt_best = ckpt;
    st->stalled = 0;
}

int ddl_policy_prefer(int cls, int wstatus, int cur_cls, int cur_wstatus)
{
    return ddl_fail_score(cls, wstatus) > ddl_fail_score(cur_cls, cur_wstatus);
}

int ddl_policy_wants_world(const ddl_policy_cfg_t *cfg, const ddl_policy_state_t *st, int cls)
{
    return cls == DDL_FAIL_NODE && cfg->have_map && st->restarts_used < cfg->restarts;
}

/* The options the reasons name: srun's, or ddlrun's. */
enum { OPT_RESTARTS, OPT_NO_RESTARTS, OPT_SPARES_MIN, OPT_MIN_NODES };
static const char *const opt_name[2][4] = {
    {"--ddl-restarts", "--ddl-restarts=0", "--ddl-spares, --ddl-min-nodes", "--ddl-min-nodes"},
    {"--restarts", "--restarts 0", "--spares, --min-nodes", "--min-nodes"},
};

/* backoff: before restart number `used` (1, 2, ...): none before the
 * first, then 0.5 s doubling up to 8 s. */
static uint32_t backoff(uint32_t used)
{
    if (used <= 1)
        return 0;
    uint32_t shift = used - 2 < 4 ? used - 2 : 4;
    return DDL_POLICY_BACKOFF_MS << shift;
}

uint32_t ddl_policy_revive_retry_ms(uint32_t tries)
{
    uint32_t wait = DDL_REVIVE_RETRY_MS;
    for (uint32_t t = 1; t < tries && wait < DDL_REVIVE_RETRY_MAX_MS; t++)
        wait *= 2;
    return wait < DDL_REVIVE_RETRY_MAX_MS ? wait : DDL_REVIVE_RETRY_MAX_MS;
}

void ddl_policy_decide(const ddl_policy_cfg_t *cfg, ddl_policy_state_t *st, int cls,
                       int wstatus, int64_t ckpt, int world_formed, ddl_decision_t *out)
{
    const char *const *on = opt_name[cfg->ddlrun_names ? 1 : 0];
    *out = (ddl_decision_t){.restart = 0, .code = -1, .why = ""};
    if (cls == DDL_FAIL_WORKER_EXIT && WIFEXITED(wstatus) &&
        WEXITSTATUS(wstatus) == DDL_EXIT_NO_CHECKPOINT) {
        out->code = DDL_EXIT_NO_CHECKPOINT;
        snprintf(out->why_buf, sizeof out->why_buf, "the worker found no valid checkpoint to "
                 "resume from (exit status %d): a restart would fail the same way",
                 DDL_EXIT_NO_CHECKPOINT);
        out->why = out->why_buf;
        return;
    }
    if (world_formed && ddl_policy_wants_world(cfg, st, cls)) {
        out->restart = 1;
        out->delay_ms = backoff(++st->restarts_used);
        return;
    }
    if (cls == DDL_FAIL_NODE || cls == DDL_FAIL_SUPERVISOR) {
        out->code = DDL_EXIT_NODE_LOST;
        if (!cfg->have_map || cls != DDL_FAIL_NODE)
            snprintf(out->why_buf, sizeof out->why_buf, "the world cannot be formed again "
                     "without it (no spare node: %s)", on[OPT_SPARES_MIN]);
        else if (st->restarts_used >= cfg->restarts)
            snprintf(out->why_buf, sizeof out->why_buf, "the restarts allowed (%s) are spent",
                     on[OPT_RESTARTS]);
        else
            snprintf(out->why_buf, sizeof out->why_buf, "no spare node is left and %s does "
                     "not allow fewer nodes", on[OPT_MIN_NODES]);
        out->why = out->why_buf;
        return;
    }
    if (cls == DDL_FAIL_WORKER_START || st->restarts_used >= cfg->restarts) {
        /* without restarts, the step ends as the failed worker did */
        out->code = cfg->restarts && cls != DDL_FAIL_WORKER_START ? DDL_EXIT_RESTARTS_SPENT
                    : cls == DDL_FAIL_WORKER_HANG                  ? DDL_EXIT_HANG
                    : WIFSIGNALED(wstatus)                         ? 128 + WTERMSIG(wstatus)
                    : WIFEXITED(wstatus)                           ? WEXITSTATUS(wstatus)
                                                                   : 1;
        if (cls == DDL_FAIL_WORKER_START)
            snprintf(out->why_buf, sizeof out->why_buf,
                     "a worker that never ran cannot be restarted");
        else if (cfg->restarts)
            snprintf(out->why_buf, sizeof out->why_buf, "the restarts allowed (%s) are spent "
                     "(%u of %u used)", on[OPT_RESTARTS], st->restarts_used, cfg->restarts);
        else
            snprintf(out->why_buf, sizeof out->why_buf, "no restart allowed (%s)",
                     on[OPT_NO_RESTARTS]);
        out->why = out->why_buf;
        return;
    }
    st->stalled = ckpt > st->ckpt_best ? 0 : st->stalled + 1;
    st->ckpt_best = ckpt > st->ckpt_best ? ckpt : st->ckpt_best;
    if (cfg->have_ckpt_dir && cfg->crash_loop && st->stalled > cfg->crash_loop) {
        out->code = DDL_EXIT_CRASH_LOOP;
        char latest[48] = "none";
        if (ckpt >= 0)
            snprintf(latest, sizeof latest, "step %lld", (long long)ckpt);
        snprintf(out->why_buf, sizeof out->why_buf, "failures in a row without a new "
                 "checkpoint: a crash loop (do not requeue): %u failures in a row, the latest "
                 "checkpoint: %s", st->stalled, latest);
        out->why = out->why_buf;
        return;
    }
    out->restart = 1;
    out->delay_ms = backoff(++st->restarts_used);
}
