/* ddlrun.h: ddlrun's options and their parser (separate from main so the
 * unit tests can drive the parser). */
#ifndef DDL_DDLRUN_H
#define DDL_DDLRUN_H

#include "ddl_limits.h"
#include "util.h"

/* Ranks (and tasks, with --spares) on this machine. */
#define DDLRUN_MAX_RANKS 4096
/* --reboot-after: a node starts again at most this often (the agents take
 * it back DDL_NODE_RETAKES times at most). */
#define DDLRUN_MAX_REBOOTS 100
/* Failures within this long of the first are compared for the root cause. */
#define DDLRUN_FAILURE_WINDOW_MS 30
/* The other limits and defaults (restarts, crash loop, grace, node and hang
 * timeouts, spares) are ddl's, in common/ddl_limits.h. */
/* Exit statuses of a step that restarts could not save: DDL_EXIT_* in
 * common/proto.h (documented in the usage text and docs/user-guide.md). */

typedef enum {
    DDLRUN_BIND_AUTO = 0, /* GPU, NIC and cores from the topology (the default) */
    DDLRUN_BIND_NONE = 1, /* leave affinity and environment alone */
    DDLRUN_BIND_LIST = 2, /* explicit CPU lists, one per rank; GPU and NIC as auto */
} ddlrun_bind_t;

typedef struct {
    int np;          /* -n: number of ranks */
    int nodes;       /* --nodes: emulated nodes (np / nodes ranks each) */
    int label;       /* --label: prefix output lines with "[rank] " */
    long grace_ms;   /* --grace: SIGTERM -> SIGKILL delay */
    int verbose;     /* -v: debug logging */
    ddlrun_bind_t bind;    /* --bind */
    const char *bind_list; /* --bind LIST: "0-3:4-7", rank i takes entry i mod count */
    int restarts;    /* --restarts: new generations after a failure */
    int crash_loop;  /* --crash-loop: restarts without checkpoint progress allowed */
    const char *ckpt_dir; /* --checkpoint-dir: DDL_CHECKPOINT_DIR, progress, reports */
    const char *ckpt_local; /* --checkpoint-local: DDL_CKPT_LOCAL_DIR (per emulated node) */
    int ckpt_shared_every;  /* --checkpoint-shared-every: DDL_CKPT_SHARED_EVERY, -1 unset */
    long hang_ms;    /* --hang-timeout: DDL_HANG_TIMEOUT_MS for ddl-launch, 0 off */
    int emulate;     /* --emulate: one agent per emulated node, supervising as under Slurm */
    int spares;      /* --spares: more emulated nodes whose tasks wait (--emulate) */
    int min_nodes;   /* --min-nodes: shrink down to this many nodes (--emulate) */
    long node_timeout_ms; /* --node-timeout: a silent node is lost after this (--emulate) */
    long reboot_ms;  /* --reboot-after: a killed node starts again this long after (--emulate),
                      * 0 never */
    int prog_argc;   /* the program and its arguments */
    char **prog_argv; /* points into the argv given to the parser */
} ddlrun_opts_t;

typedef enum {
    DDLRUN_ARGS_RUN = 0,     /* options valid: run the program */
    DDLRUN_ARGS_HELP = 1,    /* --help was asked for */
    DDLRUN_ARGS_VERSION = 2, /* --version was asked for */
    DDLRUN_ARGS_ERROR = -1,  /* bad usage; the message is in err */
} ddlrun_args_result_t;

/* ddlrun_parse_args: parse argv (argv[0] is the program name).  Options end
 * at "--" or at the first argument that is not an option, which is PROG.
 * Never prints and never exits; on DDLRUN_ARGS_ERROR err holds one line
 * naming the option, the value and the allowed range.  Not thread-safe
 * (getopt state). */
ddlrun_args_result_t ddlrun_parse_args(int argc, char **argv, ddlrun_opts_t *opts,
                                       ddl_error_t *err);

/* ddlrun_usage: the --help text. */
extern const char ddlrun_usage[];

#endif
