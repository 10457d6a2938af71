/* ddl_limits.h: the ranges and defaults of the settings that more than one part
 * of ddl reads, so that every reader accepts the same values: ddlrun's
 * options (launcher/ddlrun_args.c), srun's --ddl-* options (the SPANK
 * plugin), ddl.conf (common/conf.c), the DDL_* variables ddl-launch reads
 * (launcher/launch.c, launcher/slurm_boot.c), `ddl-agent serve`'s
 * options (common/agent_args.c) and every DDL_* variable's range
 * (common/ddl_env.def, which also generates the user guide's table of
 * them).  docs/user-guide.md, docs/slurm.md and the --help texts state the
 * same numbers.
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
 * heartbeat_interval and srun --ddl-heartbeat in seconds with decimals,
 * 0.05-60; ddl-agent serve --heartbeat and DDL_HEARTBEAT_MS in
 * milliseconds).  Always less than the node timeout.  The default, 0.1 s,
 * lets the agents' detector (agent/detector.h) know a silent node in
 * about 0.3 s; a beat is one small authenticated frame per link. */
#define DDL_HEARTBEAT_MIN_MS 50
#define DDL_HEARTBEAT_MAX_MS 60000
#define DDL_HEARTBEAT_DEFAULT_MS 100

/* A worker without a heartbeat this long is hung (ddlrun --hang-timeout
 * from 0.1 s, DDL_HANG_TIMEOUT_MS; srun --ddl-hang-timeout and ddl.conf's
 * hang_timeout_min/max in whole seconds from 1). */
#define DDL_HANG_TIMEOUT_MIN_MS 100
#define DDL_HANG_TIMEOUT_MAX_S 86400

/* Straggler detection (agent/straggler.h): how much slower than its peers'
 * median compute per step a rank must be, in percent (DDL_STRAGGLER_PCT, 0:
 * off), over a sliding window of this many steps (DDL_STRAGGLER_WINDOW),
 * in this many evaluations in a row (DDL_STRAGGLER_PERSIST). */
#define DDL_STRAGGLER_DEFAULT_PCT 15
#define DDL_STRAGGLER_MAX_PCT 1000
#define DDL_STRAGGLER_DEFAULT_WINDOW 8
#define DDL_STRAGGLER_MIN_WINDOW 2
#define DDL_STRAGGLER_MAX_WINDOW 10000
#define DDL_STRAGGLER_DEFAULT_PERSIST 3
#define DDL_STRAGGLER_MAX_PERSIST 100

/* Between two writes of an agent's metrics file (DDL_METRICS_INTERVAL_S). */
#define DDL_METRICS_INTERVAL_DEFAULT_S 5
#define DDL_METRICS_INTERVAL_MAX_S 3600

/* After SIGTERM, the wait before SIGKILL (ddlrun --grace, DDL_GRACE_MS). */
#define DDL_GRACE_MAX_MS 600000
#define DDL_GRACE_DEFAULT_MS 5000

/* How long libddl's ddl_init() and ddl-launch's PMIx fence under Slurm
 * wait for every rank (DDL_BOOTSTRAP_TIMEOUT, seconds). */
#define DDL_BOOTSTRAP_TIMEOUT_MAX_S 86400
#define DDL_BOOTSTRAP_TIMEOUT_DEFAULT_S 120

/* The generation of a world (DDL_GENERATION, DDL_RESTART_COUNT): a signed
 * 32-bit count. */
#define DDL_MAX_GENERATION 2147483647

/* libddl's pipelines: the segments of the ring and the chain broadcast
 * (DDL_SEGMENT_BYTES) and the chunks of the GPU allreduce across nodes
 * (DDL_GPU_CHUNK_BYTES), 4 KiB to 1 GiB; the receives the ring keeps
 * posted ahead (DDL_RING_WINDOW). */
#define DDL_PIPELINE_MIN_BYTES 4096
#define DDL_PIPELINE_MAX_BYTES 1073741824
#define DDL_SEGMENT_BYTES_DEFAULT 131072
#define DDL_GPU_CHUNK_BYTES_DEFAULT 4194304
/* The gradient exchange's fusion buckets (DDL_FUSION_BYTES, 0 to 1 GiB;
 * the default measured, see docs/benchmarks.md). */
#define DDL_FUSION_BYTES_DEFAULT 1048576
#define DDL_RING_WINDOW_MAX 16
#define DDL_RING_WINDOW_DEFAULT 4

#endif
