/* rank_env.h: a rank's environment, written and read in one place.
 * ddlrun writes it for each ddl-launch task, ddl-launch for each worker
 * (under Slurm and ddlrun --emulate, where the world can change between
 * generations); ddl-launch --node and libddl read it back.  The variables
 * and their ranges are those of common/ddl_env.def; PyTorch's (RANK,
 * WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR,
 * MASTER_PORT) follow from the same fields.
 */
#ifndef DDL_RANK_ENV_H
#define DDL_RANK_ENV_H

#include <stdio.h>

#include "util.h"

/* Where a rank is and what it runs under.  Strings are borrowed. */
typedef struct {
    long rank, size;             /* DDL_RANK, DDL_SIZE; also RANK, WORLD_SIZE */
    long local_rank, local_size; /* DDL_LOCAL_*; also LOCAL_RANK, LOCAL_WORLD_SIZE */
    long node_id, nnodes;        /* DDL_NODE_ID (also NODE_RANK), DDL_NNODES */
    long gen;                    /* DDL_GENERATION and DDL_RESTART_COUNT */
    const char *step;            /* DDL_STEP_ID; NULL: not written */
    const char *agent_sock;      /* DDL_AGENT_SOCK; NULL: not written */
    long spares, min_nodes;      /* DDL_SPARES, DDL_MIN_NODES; 0: not written */
    const char *ckpt_dir;        /* DDL_CHECKPOINT_DIR; NULL: not written */
    long hang_ms;                /* DDL_HANG_TIMEOUT_MS; 0: not written */
    long grace_ms;               /* DDL_GRACE_MS; -1: not written */
    const char *heartbeat_path;  /* DDL_HEARTBEAT_PATH; NULL: not written */
    const char *master_addr;     /* MASTER_ADDR; NULL: not written; the user's own wins */
    const char *master_port;     /* MASTER_PORT; likewise */
} ddl_rank_env_t;

/* DDL_RANK_ENV_INIT: a world of one, nothing else written. */
#define DDL_RANK_ENV_INIT \
    ((ddl_rank_env_t){.size = 1, .local_size = 1, .nnodes = 1, .grace_ms = -1})

#define DDL_RANK_ENV_MAX 24
/* The variables of a rank, as "NAME=VALUE" strings (into pool). */
typedef struct {
    char *set[DDL_RANK_ENV_MAX + 1];      /* NULL-terminated */
    unsigned char weak[DDL_RANK_ENV_MAX]; /* 1: not when the environment has its own */
    int n;
    char pool[3 * 4096 + 1024];
} ddl_rank_env_vars_t;

/* ddl_rank_env_build: e's variables into v, each checked against its
 * range (rank below size and the like).  0, or -1 with errno (EINVAL: a
 * value out of range; ENAMETOOLONG: the strings do not fit) and err.
 * Thread-safe. */
int ddl_rank_env_build(const ddl_rank_env_t *e, ddl_rank_env_vars_t *v, ddl_error_t *err);

/* ddl_rank_env_apply: setenv each variable of v into this process (a weak
 * one only where unset).  0, or -1 with errno and err.  Not thread-safe
 * (the environment). */
int ddl_rank_env_apply(const ddl_rank_env_vars_t *v, ddl_error_t *err);

/* ddl_rank_env_write: v as NAME=VALUE lines on f, leaving out a weak one
 * that this process's environment sets.  0, or -1 (a write failed). */
int ddl_rank_env_write(const ddl_rank_env_vars_t *v, FILE *f);

/* ddl_rank_env_get_t: a variable's value, NULL when unset (getenv). */
typedef const char *(*ddl_rank_env_get_t)(const char *name, void *ctx);

/* ddl_rank_env_parse: read a rank's variables back through get (NULL:
 * getenv) into *e, with the ranges ddl_rank_env_build checks; unset or
 * empty ones take DDL_RANK_ENV_INIT's values (a world of one), except that
 * with required DDL_SIZE, DDL_RANK, DDL_NNODES, DDL_NODE_ID, DDL_LOCAL_SIZE,
 * DDL_LOCAL_RANK, DDL_STEP_ID and DDL_AGENT_SOCK must be set.  e's strings
 * point to get's.  0, or -1 with errno EINVAL and err
 * ("DDL_RANK='4' is not a number (0-3)", "DDL_SIZE is not set"). */
int ddl_rank_env_parse(ddl_rank_env_get_t get, void *ctx, int required, ddl_rank_env_t *e,
                       ddl_error_t *err);

#endif
