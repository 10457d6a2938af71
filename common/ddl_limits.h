/* ddl_limits.h: the ranges and defaults of the settings that more than one part
 * of ddl reads, so that every reader accepts the same values: ddlrun's
 * options (launcher/ddlrun_args.c), srun's --ddl-* options (the SPANK
 * plugin), ddl.conf (common/conf.c), the DDL_* variables ddl-launch reads
 * (launcher/launch.c, launcher/slurm_boot.c) and `ddl-agent serve`'s
 * options (agent/main.c).  docs/user-guide.md, docs/slurm.md and the --help
 * texts state the same numbers.
 *
 * Every value is a plain decimal number, so that DDL_XSTR() can put it into
 * a string constant (help texts).  Header only; no functions.
 */
#ifndef DDL_DDL_LIMITS_H
#define DDL_DDL_LIMITS_H

/* DDL_XSTR(DDL_MAX_RESTARTS): "100", for help texts. */
#define DDL_STR_(x) #x
#define DDL_XSTR(x) DDL_STR_(x)

/* Nodes of one step, and so the most spare nodes (--spares, --ddl-spares)
 * and the smallest world a step may shrink to (--min-nodes,
 * --ddl-min-nodes; 0: never shrink).  Far above a 1000-node job; the real
 * bound is the step's own node count, checked where it is known. */
#define DDL_MAX_NODES 65536

/* Ranks of one step (ddl-agent serve --size, --local-ranks): 65536 nodes of
 * 16 ranks. */
#define DDL_MAX_RANKS 1048576

/* Restarts after a failure (--restarts, --ddl-restarts, ddl.conf's
 * max_restarts): 0 to this. */
#define DDL_MAX_RESTARTS 100

/* --crash-loop: give up after this many restarts in a row without
 * checkpoint progress (1 to DDL_MAX_RESTARTS; 0 for ddl-agent serve: no
 * such check). */
#define DDL_DEFAULT_CRASH_LOOP 3

/* A node whose agent is silent this long is lost (ddlrun --node-timeout,
 * ddl.conf's node_timeout, ddl-agent serve --node-timeout).  ddl.conf
 * counts whole seconds, 1 to 600. */
#define DDL_NODE_TIMEOUT_MIN_MS 200
#define DDL_NODE_TIMEOUT_MAX_MS 600000
#define DDL_NODE_TIMEOUT_DEFAULT_MS 2000

/* Between two heartbeats of an agent to the others (ddl.conf's
 * heartbeat_interval and srun --ddl-heartbeat in seconds, 1-60; ddl-agent
 * serve --heartbeat in milliseconds, down to half the smallest node
 * timeout).  Always less than the node timeout. */
#define DDL_HEARTBEAT_MIN_S 1
#define DDL_HEARTBEAT_MAX_S 60
#define DDL_HEARTBEAT_MIN_MS 100
#define DDL_HEARTBEAT_DEFAULT_MS 1000

/* A worker without a heartbeat this long is hung (ddlrun --hang-timeout
 * from 0.1 s, DDL_HANG_TIMEOUT_MS; srun --ddl-hang-timeout and ddl.conf's
 * hang_timeout_min/max in whole seconds from 1). */
#define DDL_HANG_TIMEOUT_MIN_MS 100
#define DDL_HANG_TIMEOUT_MAX_S 86400

/* After SIGTERM, the wait before SIGKILL (ddlrun --grace, DDL_GRACE_MS). */
#define DDL_GRACE_MAX_MS 600000
#define DDL_GRACE_DEFAULT_MS 5000

#endif
