/* policy.c: the recovery policy of a supervised step (policy.h): the
 * restart budget, the backoff, the crash-loop guard and the exit status of
 * a step that stops, from the failure's class and the checkpoints seen. */
#include "config.h"

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

static uint32_t backoff(uint32_t used)
{
    uint32_t shift = used - 1 < 4 ? used - 1 : 4;
    return DDL_POLICY_BACKOFF_MS << shift;
}

void ddl_policy_decide(const ddl_policy_cfg_t *cfg, ddl_policy_state_t *st, int cls,
                       int wstatus, int64_t ckpt, int world_formed, ddl_decision_t *out)
{
    *out = (ddl_decision_t){.restart = 0, .code = -1, .why = ""};
    if (world_formed && ddl_policy_wants_world(cfg, st, cls)) {
        out->restart = 1;
        out->delay_ms = backoff(++st->restarts_used);
        return;
    }
    if (cls == DDL_FAIL_NODE || cls == DDL_FAIL_SUPERVISOR) {
        out->code = DDL_EXIT_NODE_LOST;
        out->why = cfg->have_map && cls == DDL_FAIL_NODE
                       ? (st->restarts_used >= cfg->restarts
                              ? "the restarts allowed (--ddl-restarts) are spent"
                              : "no spare node is left and --ddl-min-nodes does not allow fewer "
                                "nodes")
                       : "the world cannot be formed again without it (no spare node: "
                         "--ddl-spares, --ddl-min-nodes)";
        return;
    }
    if (cls == DDL_FAIL_WORKER_START || st->restarts_used >= cfg->restarts) {
        /* without restarts, the step ends as the failed worker did */
        out->code = cfg->restarts && cls != DDL_FAIL_WORKER_START ? DDL_EXIT_RESTARTS_SPENT
                    : cls == DDL_FAIL_WORKER_HANG                  ? DDL_EXIT_HANG
                    : WIFSIGNALED(wstatus)                         ? 128 + WTERMSIG(wstatus)
                    : WIFEXITED(wstatus)                           ? WEXITSTATUS(wstatus)
                                                                   : 1;
        out->why = cls == DDL_FAIL_WORKER_START ? "a worker that never ran cannot be restarted"
                   : cfg->restarts ? "the restarts allowed (--ddl-restarts) are spent"
                                   : "no restart allowed (--ddl-restarts=0)";
        return;
    }
    st->stalled = ckpt > st->ckpt_best ? 0 : st->stalled + 1;
    st->ckpt_best = ckpt > st->ckpt_best ? ckpt : st->ckpt_best;
    if (cfg->have_ckpt_dir && cfg->crash_loop && st->stalled > cfg->crash_loop) {
        out->code = DDL_EXIT_CRASH_LOOP;
        out->why = "failures in a row without a new checkpoint: a crash loop (do not requeue)";
        return;
    }
    out->restart = 1;
    out->delay_ms = backoff(++st->restarts_used);
}
