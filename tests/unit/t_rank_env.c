/* t_rank_env.c: a rank's environment (common/rank_env.c): what
 * ddl_rank_env_build writes, ddl_rank_env_parse reads back to the same
 * struct, for a world of one, ddlrun's ranks, a Slurm worker and a
 * restarted generation; bad values are refused by both with their range;
 * the typed readers of common/env.c report in one wording; apply and
 * write leave the user's MASTER_* alone. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "rank_env.h"
#include "../tap.h"

/* get: a variable from a NULL-terminated "NAME=VALUE" list. */
static const char *get(const char *name, void *ctx)
{
    char **set = ctx;
    size_t n = strlen(name);
    for (int i = 0; set[i]; i++)
        if (strncmp(set[i], name, n) == 0 && set[i][n] == '=')
            return set[i] + n + 1;
    return NULL;
}

static int str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int env_eq(const ddl_rank_env_t *x, const ddl_rank_env_t *y)
{
    return x->rank == y->rank && x->size == y->size && x->local_rank == y->local_rank &&
           x->local_size == y->local_size && x->node_id == y->node_id && x->nnodes == y->nnodes &&
           x->gen == y->gen && str_eq(x->step, y->step) && str_eq(x->agent_sock, y->agent_sock) &&
           x->spares == y->spares && x->min_nodes == y->min_nodes &&
           str_eq(x->ckpt_dir, y->ckpt_dir) && x->hang_ms == y->hang_ms &&
           x->grace_ms == y->grace_ms && str_eq(x->heartbeat_path, y->heartbeat_path) &&
           str_eq(x->master_addr, y->master_addr) && str_eq(x->master_port, y->master_port);
}

static void round_trip(const ddl_rank_env_t *e, int required, const char *name)
{
    ddl_rank_env_vars_t v;
    ddl_rank_env_t back;
    ddl_error_t err = {""};
    int built = ddl_rank_env_build(e, &v, &err) == 0;
    ok(built, "%s: built", name);
    if (!built) {
        diag("%s", err.text);
        return;
    }
    int parsed = ddl_rank_env_parse(get, v.set, required, &back, &err) == 0;
    ok(parsed, "%s: parsed back", name);
    if (!parsed)
        diag("%s", err.text);
    ok(parsed && env_eq(e, &back), "%s: the same", name);
    const char *r = get("RANK", v.set), *w = get("WORLD_SIZE", v.set);
    ok(r && w && atol(r) == e->rank && atol(w) == e->size, "%s: RANK and WORLD_SIZE for PyTorch",
       name);
}

static ddl_rank_env_t ddlrun_rank(void)
{
    ddl_rank_env_t e = DDL_RANK_ENV_INIT;
    e.rank = 5;
    e.size = 8;
    e.local_rank = 1;
    e.local_size = 4;
    e.node_id = 1;
    e.nnodes = 2;
    e.step = "local-42";
    e.agent_sock = "/tmp/ddl-1000/local-42.sock";
    e.ckpt_dir = "/scratch/ck";
    e.hang_ms = 5000;
    e.grace_ms = 0;
    e.master_addr = "127.0.0.1";
    e.master_port = "29500";
    return e;
}

static void build_refuses(ddl_rank_env_t e, const char *what, const char *text)
{
    ddl_rank_env_vars_t v;
    ddl_error_t err = {""};
    errno = 0;
    int rc = ddl_rank_env_build(&e, &v, &err);
    ok(rc == -1 && errno == EINVAL && strstr(err.text, text), "build refuses %s", what);
    if (rc == 0 || !strstr(err.text, text))
        diag("got: %s", rc == 0 ? "(built)" : err.text);
}

static void parse_refuses(char **set, int required, const char *what, const char *text)
{
    ddl_rank_env_t e;
    ddl_error_t err = {""};
    errno = 0;
    int rc = ddl_rank_env_parse(get, set, required, &e, &err);
    ok(rc == -1 && errno == EINVAL && strstr(err.text, text), "parse refuses %s", what);
    if (rc == 0 || !strstr(err.text, text))
        diag("got: %s", rc == 0 ? "(parsed)" : err.text);
}

int main(void)
{
    plan(NO_PLAN);
    ddl_rank_env_t e = DDL_RANK_ENV_INIT;
    round_trip(&e, 0, "a world of one");
    e = ddlrun_rank();
    round_trip(&e, 1, "a ddlrun rank");
    e.gen = 3;
    e.spares = 1;
    e.min_nodes = 1;
    round_trip(&e, 1, "a restarted rank with spares");
    e = ddlrun_rank();
    e.ckpt_dir = e.master_addr = e.master_port = NULL;
    e.hang_ms = 0;
    e.grace_ms = -1;
    e.heartbeat_path = "/run/ddl/1000/step-1.0.rank5.beat";
    round_trip(&e, 1, "a Slurm worker");

    /* nothing set: a world of one; required: named */
    char *none[] = {NULL};
    ddl_rank_env_t back;
    ddl_error_t err;
    ok(ddl_rank_env_parse(get, none, 0, &back, &err) == 0 && back.size == 1 && back.rank == 0 &&
           back.local_size == 1 && back.nnodes == 1 && back.grace_ms == -1,
       "no variables: a world of one");
    parse_refuses(none, 1, "a missing DDL_SIZE when required", "DDL_SIZE is not set");
    char *nostep[] = {"DDL_SIZE=2",       "DDL_RANK=1",       "DDL_NNODES=1",      "DDL_NODE_ID=0",
                      "DDL_LOCAL_SIZE=2", "DDL_LOCAL_RANK=1", "DDL_AGENT_SOCK=/s", NULL};
    parse_refuses(nostep, 1, "a missing DDL_STEP_ID when required", "DDL_STEP_ID is not set");
    char *lr[] = {"DDL_SIZE=8", "DDL_RANK=6", "DDL_LOCAL_SIZE=4", NULL};
    ok(ddl_rank_env_parse(get, lr, 0, &back, &err) == 0 && back.local_rank == 2,
       "DDL_LOCAL_RANK defaults to DDL_RANK mod DDL_LOCAL_SIZE");

    /* ranges, the same both ways */
    char *r1[] = {"DDL_SIZE=4", "DDL_RANK=4", NULL};
    parse_refuses(r1, 0, "DDL_RANK=4 of 4", "DDL_RANK='4' is not a number (0-3)");
    char *r2[] = {"DDL_SIZE=1048577", NULL};
    parse_refuses(r2, 0, "DDL_SIZE past DDL_MAX_RANKS",
                  "DDL_SIZE='1048577' is not a number (1-1048576)");
    char *r3[] = {"DDL_SIZE=4", "DDL_NNODES=2", "DDL_NODE_ID=2", NULL};
    parse_refuses(r3, 0, "DDL_NODE_ID=2 of 2", "DDL_NODE_ID='2' is not a number (0-1)");
    char *r4[] = {"DDL_GRACE_MS=600001", NULL};
    parse_refuses(r4, 0, "DDL_GRACE_MS past its limit",
                  "DDL_GRACE_MS='600001' is not a number of milliseconds (0-600000)");
    char *r5[] = {"DDL_SPARES=x", NULL};
    parse_refuses(r5, 0, "DDL_SPARES=x", "DDL_SPARES='x' is not a number (0-65536)");
    e = ddlrun_rank();
    e.rank = 8;
    build_refuses(e, "rank 8 of 8", "DDL_RANK='8' is not a number (0-7)");
    e = ddlrun_rank();
    e.local_rank = 4;
    build_refuses(e, "local rank 4 of 4", "DDL_LOCAL_RANK='4' is not a number (0-3)");
    e = ddlrun_rank();
    e.hang_ms = DDL_HANG_TIMEOUT_MAX_S * 1000L + 1;
    build_refuses(e, "a hang timeout past its limit", "(0-86400000)");
    e = ddlrun_rank();
    e.grace_ms = DDL_GRACE_MAX_MS + 1;
    build_refuses(e, "a grace past its limit", "(0-600000)");

    /* the typed readers */
    long v;
    int k;
    setenv("DDL_BOOTSTRAP_TIMEOUT", "0", 1);
    ok(ddl_env_long(DDLENV_DDL_BOOTSTRAP_TIMEOUT, &v, &err) == -1 &&
           strcmp(err.text, "DDL_BOOTSTRAP_TIMEOUT='0' is not a number of seconds (1-86400)") == 0,
       "ddl_env_long: the standard message (%s)", err.text);
    setenv("DDL_BOOTSTRAP_TIMEOUT", "", 1);
    ok(ddl_env_long(DDLENV_DDL_BOOTSTRAP_TIMEOUT, &v, &err) == 0 &&
           v == DDL_BOOTSTRAP_TIMEOUT_DEFAULT_S,
       "ddl_env_long: empty is the default");
    setenv("DDL_BOOTSTRAP_TIMEOUT", "86400", 1);
    ok(ddl_env_long(DDLENV_DDL_BOOTSTRAP_TIMEOUT, &v, &err) == 1 && v == 86400,
       "ddl_env_long: the limit is accepted");
    setenv("DDL_NCCL", "2", 1);
    ok(ddl_env_long(DDLENV_DDL_NCCL, &v, &err) == -1 && strstr(err.text, "'2' is not 0 or 1"),
       "a bool: 0 or 1");
    setenv("DDL_BCAST_ALGO", "chain", 1);
    ok(ddl_env_enum(DDLENV_DDL_BCAST_ALGO, &k, &err) == 1 && k == 2, "an enum: chain is 2");
    setenv("DDL_BCAST_ALGO", "tree", 1);
    ok(ddl_env_enum(DDLENV_DDL_BCAST_ALGO, &k, &err) == -1 &&
           strcmp(err.text, "DDL_BCAST_ALGO='tree' is not one of auto, binomial, chain") == 0,
       "an enum: the values named (%s)", err.text);
    ok(ddl_env_table[DDLENV_DDL_GRACE_MS].max == DDL_GRACE_MAX_MS &&
           ddl_env_table[DDLENV_DDL_SIZE].max == DDL_MAX_RANKS &&
           ddl_env_table[DDLENV_DDL_SPARES].max == DDL_MAX_NODES,
       "the table's limits are ddl_limits.h's");

    /* apply and write: the user's MASTER_PORT wins, the rest is set */
    ddl_rank_env_vars_t vars;
    e = ddlrun_rank();
    setenv("MASTER_PORT", "1234", 1);
    unsetenv("MASTER_ADDR");
    ok(ddl_rank_env_build(&e, &vars, &err) == 0 && ddl_rank_env_apply(&vars, &err) == 0 &&
           strcmp(getenv("DDL_RANK"), "5") == 0 && strcmp(getenv("MASTER_PORT"), "1234") == 0 &&
           strcmp(getenv("MASTER_ADDR"), "127.0.0.1") == 0,
       "apply: set, but the user's MASTER_PORT kept");
    char buf[4096] = "";
    FILE *f = fmemopen(buf, sizeof buf, "w");
    ok(f && ddl_rank_env_write(&vars, f) == 0 && fclose(f) == 0 && strstr(buf, "DDL_RANK=5\n") &&
           !strstr(buf, "MASTER_PORT") && !strstr(buf, "MASTER_ADDR"),
       "write: lines, without the MASTER_* this environment has");
    return done_testing();
}
