/* spank_opts.h: the values of srun's --ddl* options and their checks, as
 * the SPANK plugin (spank_ddl.c) takes them, without Slurm, so that the
 * fuzz target tests/fuzz/fuzz_args.c runs the very same code.
 *
 * Not thread-safe (the caller owns the ddl_spank_opts_t); no I/O.
 */
#ifndef DDL_SPANK_OPTS_H
#define DDL_SPANK_OPTS_H

#include <limits.h>
#include <stddef.h>

/* The option ids given to Slurm (spank_option.val). */
enum {
    OPT_DDL = 1,
    OPT_CHECKPOINT_DIR,
    OPT_RESTARTS,
    OPT_SPARES,
    OPT_MIN_NODES,
    OPT_HEARTBEAT,
    OPT_HANG_TIMEOUT,
    OPT_BIND,
    OPT_VERBOSE,
    OPT_CKPT_LOCAL,
    OPT_CKPT_SHARED_EVERY,
};

/* The user's options; -1 or "": not given. */
typedef struct {
    int enabled;
    int verbose;
    long restarts, spares, min_nodes, heartbeat_ms, hang_timeout_s;
    char checkpoint_dir[PATH_MAX];
    char checkpoint_local[PATH_MAX]; /* --ddl-checkpoint-local */
    long shared_every;               /* --ddl-checkpoint-shared-every */
    char bind[256];
} ddl_spank_opts_t;

#define DDL_SPANK_OPTS_INIT                                                                    \
    {                                                                                          \
        .restarts = -1, .spares = -1, .min_nodes = -1, .heartbeat_ms = -1, .hang_timeout_s = -1, \
        .shared_every = -1 \
    }

/* The size of a message buffer that holds any message below. */
#define DDL_SPANK_MSG_LEN (PATH_MAX + 1024)

/* ddl_spank_opt_parse: check arg (NULL for a flag, or when Slurm gives
 * none) for option val and store it in o.  0, or -1 with a message for the
 * user in msg (msglen bytes, "" for an unknown val), o unchanged. */
int ddl_spank_opt_parse(ddl_spank_opts_t *o, int val, const char *arg, char *msg, size_t msglen);

#endif
