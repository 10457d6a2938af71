/* t_policy: the recovery policy (agent/policy.c): budget, backoff, the
 * crash-loop guard, the exit status of a step that stops, which failure
 * of a window is the root cause, and the waits between the sruns that
 * start a lost node's part again. */
#include "config.h"

#include <string.h>
#include <sys/wait.h>

#include "policy.h"
#include "proto.h"
#include "../tap.h"

#define EXITED(c) ((c) << 8)
#define KILLED(s) (s)

static void test_budget(void)
{
    ddl_policy_cfg_t cfg = {.restarts = 3};
    ddl_policy_state_t st;
    ddl_decision_t d;
    ddl_policy_init(&st, 0, -1);
    uint32_t delays[3];
    for (int i = 0; i < 3; i++) {
        ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_EXIT, EXITED(1), -1, 0, &d);
        delays[i] = d.restart ? d.delay_ms : 0;
    }
    ok(delays[0] == 0 && delays[1] == 500 && delays[2] == 1000,
       "three restarts: the first at once, then backoff 500, 1000 ms (%u, %u, %u)", delays[0],
       delays[1], delays[2]);
    ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_EXIT, EXITED(1), -1, 0, &d);
    ok(!d.restart && d.code == DDL_EXIT_RESTARTS_SPENT && strstr(d.why, "spent"),
       "the fourth failure stops the step with %d", DDL_EXIT_RESTARTS_SPENT);
    cfg.restarts = 100;
    ddl_policy_init(&st, 20, -1);
    ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_SIGNAL, KILLED(9), -1, 0, &d);
    ok(d.restart && d.delay_ms == 8000, "the backoff stops doubling at 8 s");
    is(st.restarts_used, 21, "a step taken over in generation 20 has used 20 restarts");
}

static void test_no_restarts(void)
{
    ddl_policy_cfg_t cfg = {.restarts = 0};
    ddl_policy_state_t st;
    ddl_decision_t d;
    ddl_policy_init(&st, 0, -1);
    ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_EXIT, EXITED(3), -1, 0, &d);
    ok(!d.restart && d.code == 3, "no restarts: the step ends as the worker did (exit 3)");
    ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_SIGNAL, KILLED(11), -1, 0, &d);
    is(d.code, 128 + 11, "killed by SIGSEGV: 139");
    ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_HANG, KILLED(9), -1, 0, &d);
    is(d.code, DDL_EXIT_HANG, "a hang: 92");
    cfg.restarts = 5;
    ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_START, EXITED(127), -1, 0, &d);
    ok(!d.restart && d.code == 127 && strstr(d.why, "never ran"),
       "a worker that never ran is not restarted, even with restarts left");
    ddl_policy_decide(&cfg, &st, DDL_FAIL_SUPERVISOR, 0, -1, 0, &d);
    ok(!d.restart && d.code == DDL_EXIT_NODE_LOST, "a lost supervisor stops the step: 93");
    ddl_policy_init(&st, 0, -1);
    ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_EXIT, EXITED(DDL_EXIT_NO_CHECKPOINT), -1, 0, &d);
    ok(!d.restart && d.code == DDL_EXIT_NO_CHECKPOINT && strstr(d.why, "no valid checkpoint"),
       "a worker that found no valid checkpoint (exit 95) is not restarted, even with restarts "
       "left");
    ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_EXIT, EXITED(96), -1, 0, &d);
    ok(d.restart, "... another exit status still is");
}

static void test_nodes(void)
{
    ddl_policy_cfg_t cfg = {.restarts = 1, .have_map = 1};
    ddl_policy_state_t st;
    ddl_decision_t d;
    ddl_policy_init(&st, 0, -1);
    ok(ddl_policy_wants_world(&cfg, &st, DDL_FAIL_NODE), "a lost node with a map asks for a world");
    ok(!ddl_policy_wants_world(&cfg, &st, DDL_FAIL_WORKER_EXIT), "a worker's exit does not");
    ddl_policy_decide(&cfg, &st, DDL_FAIL_NODE, 0, -1, 0, &d);
    ok(!d.restart && d.code == DDL_EXIT_NODE_LOST && strstr(d.why, "no spare"),
       "no world formed: 93, no spare left");
    ddl_policy_decide(&cfg, &st, DDL_FAIL_NODE, 0, -1, 1, &d);
    ok(d.restart && d.delay_ms == 0, "a world formed: restart (the first: at once)");
    ok(!ddl_policy_wants_world(&cfg, &st, DDL_FAIL_NODE), "budget spent: no world asked for");
    ddl_policy_decide(&cfg, &st, DDL_FAIL_NODE, 0, -1, 1, &d);
    ok(!d.restart && strstr(d.why, "spent"), "then a lost node stops the step: restarts spent");
    cfg.have_map = 0;
    ddl_policy_init(&st, 0, -1);
    ddl_policy_decide(&cfg, &st, DDL_FAIL_NODE, 0, -1, 1, &d);
    ok(!d.restart && strstr(d.why, "--ddl-spares"), "without a map a lost node stops the step");
}

static void test_crash_loop(void)
{
    ddl_policy_cfg_t cfg = {.restarts = 10, .crash_loop = 2, .have_ckpt_dir = 1};
    ddl_policy_state_t st;
    ddl_decision_t d;
    ddl_policy_init(&st, 0, 4);
    ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_EXIT, EXITED(1), 4, 0, &d);
    ok(d.restart, "first failure without progress: restart");
    ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_EXIT, EXITED(1), 4, 0, &d);
    ok(d.restart, "second: restart");
    ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_EXIT, EXITED(1), 4, 0, &d);
    ok(!d.restart && d.code == DDL_EXIT_CRASH_LOOP, "third without a new checkpoint: 91");
    ddl_policy_init(&st, 0, 4);
    for (int i = 0; i < 5; i++)
        ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_EXIT, EXITED(1), 5 + i, 0, &d);
    ok(d.restart && st.stalled == 0, "failures with checkpoint progress are no crash loop");
    cfg.have_ckpt_dir = 0;
    ddl_policy_init(&st, 0, -1);
    for (int i = 0; i < 5; i++)
        ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_EXIT, EXITED(1), -1, 0, &d);
    ok(d.restart, "without a checkpoint directory the guard is off");
}

/* test_names: the reasons name srun's options, or ddlrun's, and say how
 * far the budget and the crash loop went. */
static void test_names(void)
{
    ddl_policy_cfg_t cfg = {.restarts = 2, .crash_loop = 1, .have_ckpt_dir = 1};
    ddl_policy_state_t st;
    ddl_decision_t d;
    ddl_policy_init(&st, 2, -1);
    ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_EXIT, EXITED(1), -1, 0, &d);
    is_str(d.why, "the restarts allowed (--ddl-restarts) are spent (2 of 2 used)",
           "srun's names: the budget spent, with how much of it");
    cfg.ddlrun_names = 1;
    ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_EXIT, EXITED(1), -1, 0, &d);
    is_str(d.why, "the restarts allowed (--restarts) are spent (2 of 2 used)", "ddlrun's names");
    cfg.restarts = 0;
    ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_EXIT, EXITED(1), -1, 0, &d);
    is_str(d.why, "no restart allowed (--restarts 0)", "ddlrun's names: no restart allowed");
    ddl_policy_decide(&cfg, &st, DDL_FAIL_NODE, 0, -1, 0, &d);
    ok(strstr(d.why, "(no spare node: --spares, --min-nodes)") != NULL,
       "ddlrun's names: a lost node without spares");
    cfg.restarts = 10;
    ddl_policy_init(&st, 0, 7);
    ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_EXIT, EXITED(1), 7, 0, &d);
    ddl_policy_decide(&cfg, &st, DDL_FAIL_WORKER_EXIT, EXITED(1), 7, 0, &d);
    is_str(d.why, "failures in a row without a new checkpoint: a crash loop (do not requeue): "
                  "2 failures in a row, the latest checkpoint: step 7",
           "a crash loop says how many failures in a row, and the latest checkpoint");
    is(d.code, DDL_EXIT_CRASH_LOOP, "... exit status %d", DDL_EXIT_CRASH_LOOP);
}

static void test_prefer(void)
{
    ok(ddl_policy_prefer(DDL_FAIL_NODE, 0, DDL_FAIL_WORKER_SIGNAL, KILLED(9)),
       "a lost node is a likelier cause than a killed worker");
    ok(ddl_policy_prefer(DDL_FAIL_WORKER_SIGNAL, KILLED(9), DDL_FAIL_WORKER_SIGNAL, KILLED(6)),
       "SIGKILL is a likelier cause than the SIGABRT a broken transfer brings");
    ok(!ddl_policy_prefer(DDL_FAIL_WORKER_EXIT, EXITED(1), DDL_FAIL_WORKER_HANG, KILLED(9)),
       "an exit does not replace a hang");
    ok(!ddl_policy_prefer(DDL_FAIL_WORKER_EXIT, EXITED(1), DDL_FAIL_WORKER_EXIT, EXITED(2)),
       "of equal causes the first stays");
}

static void test_revive_retry(void)
{
    uint32_t w[7];
    for (uint32_t t = 0; t < 7; t++)
        w[t] = ddl_policy_revive_retry_ms(t);
    ok(w[1] == 10000 && w[2] == 20000 && w[3] == 40000,
       "a lost node's next srun: 10 s after the first ended, then 20 s, 40 s (%u, %u, %u)", w[1],
       w[2], w[3]);
    ok(w[4] == 60000 && w[5] == 60000 && w[6] == 60000,
       "the wait stops doubling at 60 s (%u, %u, %u)", w[4], w[5], w[6]);
    is(w[0], 10000, "no try counted yet: the first wait");
    is(ddl_policy_revive_retry_ms(UINT32_MAX), 60000, "a try count that never fits: 60 s");
}

int main(void)
{
    plan(NO_PLAN);
    test_budget();
    test_no_restarts();
    test_nodes();
    test_crash_loop();
    test_names();
    test_prefer();
    test_revive_retry();
    return done_testing();
}
