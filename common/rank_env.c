/* rank_env.c: a rank's DDL_* and PyTorch variables, built from a struct
 * and parsed back into one (see rank_env.h), with the ranges of
 * common/ddl_env.def. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "rank_env.h"

typedef struct {
    ddl_rank_env_vars_t *v;
    size_t used;
} out_t;

static int add(out_t *o, int weak, const char *name, const char *value, ddl_error_t *err)
{
    ddl_rank_env_vars_t *v = o->v;
    size_t room = sizeof v->pool - o->used;
    int n = snprintf(v->pool + o->used, room, "%s=%s", name, value);
    if (v->n >= DDL_RANK_ENV_MAX || n < 0 || (size_t)n >= room) {
        errno = ENAMETOOLONG;
        return ddl_errprintf(err, "%s: the rank's environment is too long", name);
    }
    v->set[v->n] = v->pool + o->used;
    v->weak[v->n++] = (unsigned char)weak;
    v->set[v->n] = NULL;
    o->used += (size_t)n + 1;
    return 0;
}

static int add_long(out_t *o, const char *name, long value, ddl_error_t *err)
{
    char t[24];
    snprintf(t, sizeof t, "%ld", value);
    return add(o, 0, name, t, err);
}

/* check: value in [min, max] (within the table's range), else the message
 * the parser would give. */
static int check(ddl_env_id_t id, long value, long min, long max, ddl_error_t *err)
{
    char t[24];
    long out;
    snprintf(t, sizeof t, "%ld", value);
    return ddl_env_parse(id, t, min, max, &out, err);
}

int ddl_rank_env_build(const ddl_rank_env_t *e, ddl_rank_env_vars_t *v, ddl_error_t *err)
{
    out_t o = {v, 0};
    memset(v, 0, sizeof *v);
    if (check(DDLENV_DDL_SIZE, e->size, 1, DDL_MAX_RANKS, err) < 0 ||
        check(DDLENV_DDL_RANK, e->rank, 0, e->size - 1, err) < 0 ||
        check(DDLENV_DDL_LOCAL_SIZE, e->local_size, 1, e->size, err) < 0 ||
        check(DDLENV_DDL_LOCAL_RANK, e->local_rank, 0, e->local_size - 1, err) < 0 ||
        check(DDLENV_DDL_NNODES, e->nnodes, 1, e->size, err) < 0 ||
        check(DDLENV_DDL_NODE_ID, e->node_id, 0, e->nnodes - 1, err) < 0 ||
        check(DDLENV_DDL_GENERATION, e->gen, 0, DDL_MAX_GENERATION, err) < 0 ||
        check(DDLENV_DDL_SPARES, e->spares, 0, DDL_MAX_NODES, err) < 0 ||
        check(DDLENV_DDL_MIN_NODES, e->min_nodes, 0, DDL_MAX_NODES, err) < 0 ||
        (e->hang_ms && check(DDLENV_DDL_HANG_TIMEOUT_MS, e->hang_ms, 0, LONG_MAX, err) < 0) ||
        (e->grace_ms != -1 && check(DDLENV_DDL_GRACE_MS, e->grace_ms, 0, LONG_MAX, err) < 0))
        return -1;
    if (add_long(&o, "DDL_RANK", e->rank, err) < 0 || add_long(&o, "DDL_SIZE", e->size, err) < 0 ||
        add_long(&o, "DDL_LOCAL_RANK", e->local_rank, err) < 0 ||
        add_long(&o, "DDL_LOCAL_SIZE", e->local_size, err) < 0 ||
        add_long(&o, "DDL_NODE_ID", e->node_id, err) < 0 ||
        add_long(&o, "DDL_NNODES", e->nnodes, err) < 0 ||
        add_long(&o, "DDL_GENERATION", e->gen, err) < 0 ||
        add_long(&o, "DDL_RESTART_COUNT", e->gen, err) < 0 ||
        add_long(&o, "RANK", e->rank, err) < 0 || add_long(&o, "WORLD_SIZE", e->size, err) < 0 ||
        add_long(&o, "LOCAL_RANK", e->local_rank, err) < 0 ||
        add_long(&o, "LOCAL_WORLD_SIZE", e->local_size, err) < 0 ||
        add_long(&o, "NODE_RANK", e->node_id, err) < 0 ||
        (e->step && add(&o, 0, "DDL_STEP_ID", e->step, err) < 0) ||
        (e->agent_sock && add(&o, 0, "DDL_AGENT_SOCK", e->agent_sock, err) < 0) ||
        /* always, 0 included: a value in the user's environment must not
         * reach ddl-launch --node as the step's */
        add_long(&o, "DDL_SPARES", e->spares, err) < 0 ||
        add_long(&o, "DDL_MIN_NODES", e->min_nodes, err) < 0 ||
        (e->ckpt_dir && add(&o, 0, "DDL_CHECKPOINT_DIR", e->ckpt_dir, err) < 0) ||
        (e->hang_ms && add_long(&o, "DDL_HANG_TIMEOUT_MS", e->hang_ms, err) < 0) ||
        (e->grace_ms != -1 && add_long(&o, "DDL_GRACE_MS", e->grace_ms, err) < 0) ||
        (e->heartbeat_path && add(&o, 0, "DDL_HEARTBEAT_PATH", e->heartbeat_path, err) < 0) ||
        (e->master_addr && add(&o, 1, "MASTER_ADDR", e->master_addr, err) < 0) ||
        (e->master_port && add(&o, 1, "MASTER_PORT", e->master_port, err) < 0))
        return -1;
    return 0;
}

int ddl_rank_env_apply(const ddl_rank_env_vars_t *v, ddl_error_t *err)
{
    for (int i = 0; i < v->n; i++) {
        const char *eq = strchr(v->set[i], '=');
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(eq - v->set[i]), v->set[i]);
        if (setenv(name, eq + 1, !v->weak[i]) < 0)
            return ddl_errprintf(err, "setenv %s: %s", name, strerror(errno));
    }
    return 0;
}

int ddl_rank_env_write(const ddl_rank_env_vars_t *v, FILE *f)
{
    for (int i = 0; i < v->n; i++) {
        if (v->weak[i]) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)strcspn(v->set[i], "="), v->set[i]);
            if (getenv(name))
                continue;
        }
        if (fprintf(f, "%s\n", v->set[i]) < 0)
            return -1;
    }
    return 0;
}

static const char *get_env(const char *name, void *ctx)
{
    (void)ctx;
    return getenv(name);
}

/* num: the variable id through get, in [min, max]; def when unset. */
static int num(ddl_rank_env_get_t get, void *ctx, int required, ddl_env_id_t id, long min, long max,
               long def, long *out, ddl_error_t *err)
{
    const char *name = ddl_env_table[id].name, *v = get(name, ctx);
    if (!v || !*v) {
        if (required) {
            errno = EINVAL;
            return ddl_errprintf(err, "%s is not set", name);
        }
        *out = def;
        return 0;
    }
    return ddl_env_parse(id, v, min, max, out, err);
}

static const char *str(ddl_rank_env_get_t get, void *ctx, const char *name)
{
    const char *v = get(name, ctx);
    return v && *v ? v : NULL;
}

int ddl_rank_env_parse(ddl_rank_env_get_t get, void *ctx, int required, ddl_rank_env_t *e,
                       ddl_error_t *err)
{
    if (!get)
        get = get_env;
    *e = DDL_RANK_ENV_INIT;
    int q = required;
    if (num(get, ctx, q, DDLENV_DDL_SIZE, 1, DDL_MAX_RANKS, 1, &e->size, err) < 0 ||
        num(get, ctx, q, DDLENV_DDL_RANK, 0, e->size - 1, 0, &e->rank, err) < 0 ||
        num(get, ctx, q, DDLENV_DDL_NNODES, 1, e->size, 1, &e->nnodes, err) < 0 ||
        num(get, ctx, q, DDLENV_DDL_NODE_ID, 0, e->nnodes - 1, 0, &e->node_id, err) < 0 ||
        num(get, ctx, q, DDLENV_DDL_LOCAL_SIZE, 1, e->size, e->size, &e->local_size, err) < 0 ||
        num(get, ctx, q, DDLENV_DDL_LOCAL_RANK, 0, e->local_size - 1, e->rank % e->local_size,
            &e->local_rank, err) < 0 ||
        num(get, ctx, 0, DDLENV_DDL_GENERATION, 0, DDL_MAX_GENERATION, 0, &e->gen, err) < 0 ||
        num(get, ctx, 0, DDLENV_DDL_SPARES, 0, DDL_MAX_NODES, 0, &e->spares, err) < 0 ||
        num(get, ctx, 0, DDLENV_DDL_MIN_NODES, 0, DDL_MAX_NODES, 0, &e->min_nodes, err) < 0 ||
        num(get, ctx, 0, DDLENV_DDL_HANG_TIMEOUT_MS, 0, LONG_MAX, 0, &e->hang_ms, err) < 0 ||
        num(get, ctx, 0, DDLENV_DDL_GRACE_MS, 0, LONG_MAX, -1, &e->grace_ms, err) < 0)
        return -1;
    e->step = str(get, ctx, "DDL_STEP_ID");
    e->agent_sock = str(get, ctx, "DDL_AGENT_SOCK");
    e->ckpt_dir = str(get, ctx, "DDL_CHECKPOINT_DIR");
    e->heartbeat_path = str(get, ctx, "DDL_HEARTBEAT_PATH");
    e->master_addr = str(get, ctx, "MASTER_ADDR");
    e->master_port = str(get, ctx, "MASTER_PORT");
    if (required && (!e->step || !e->agent_sock)) {
        errno = EINVAL;
        return ddl_errprintf(err, "%s is not set", e->step ? "DDL_AGENT_SOCK" : "DDL_STEP_ID");
    }
    return 0;
}
