/* slurm_boot.h: ddl-launch's start under Slurm (the --slurm mode that the
 * SPANK plugin execs in place of each task of a --ddl step).
 *
 * One call does the whole bootstrap of a rank's supervisor: read the task's
 * identity from SLURM_* variables, one PMIx exchange (put, fence with data
 * collection, get, finalize: rank 0 publishes the leader agent's address,
 * the PyTorch rendezvous address and the step's secret), and, on the
 * node's first task, the start of the node's ddl-agent.  After it returns
 * the process is no longer a PMIx client, so the worker's or this
 * supervisor's death no longer makes Slurm's PMIx server kill the step.
 * Not thread-safe; call once.
 */
#ifndef DDL_SLURM_BOOT_H
#define DDL_SLURM_BOOT_H

#include <limits.h>
#include <sys/types.h>

#include "util.h"

typedef struct {
    long rank, size;             /* SLURM_PROCID, tasks in the step */
    long local_rank, local_size; /* on this node */
    long node_id, nnodes;        /* SLURM_NODEID, nodes in the step */
    char step[64];               /* "JOBID.STEPID" */
    char sock[PATH_MAX];         /* the node agent's Unix socket */
    char master_addr[64];        /* rank 0's node, for MASTER_ADDR */
    char master_port[16];
    pid_t agent; /* the node's first task: its ddl-agent child; 0 elsewhere */
    long spares;    /* DDL_SPARES: the last nodes wait idle (--ddl-spares) */
    long min_nodes; /* DDL_MIN_NODES: shrink down to this many nodes (--ddl-min-nodes) */
    long restarted; /* DDL_NODE_RESTARTED: the node was started again after a loss: its
                     * tasks wait as a spare's until the world grows onto it */
} ddl_slurm_boot_t;

/* ddl_slurm_boot: fill *b as described above.  Blocks until every task of
 * the step has done the same (the PMIx fence, bounded by
 * DDL_BOOTSTRAP_TIMEOUT seconds, default 120) and, on the first task of a
 * node, until its agent listens.  0 on success; -1 with the reason in err
 * (not a Slurm task, no PMIx in the step, ddl built without PMIx, fence
 * failed or timed out, agent did not start). */
int ddl_slurm_boot(ddl_slurm_boot_t *b, ddl_error_t *err);

/* ddl_node_boot: the same identity for a task of `ddlrun --emulate` (the
 * --node mode), read from the variables ddlrun sets: DDL_RANK (the task),
 * DDL_SIZE (tasks), DDL_NODE_ID, DDL_NNODES, DDL_LOCAL_RANK,
 * DDL_LOCAL_SIZE, DDL_STEP_ID, DDL_AGENT_SOCK (the emulated node's agent,
 * which ddlrun started), MASTER_ADDR, MASTER_PORT, DDL_SPARES,
 * DDL_MIN_NODES and DDL_NODE_RESTARTED.  No PMIx, no agent started.  0, or -1 with the reason in
 * err (a variable missing or out of range, spares or shrinking without
 * equal nodes). */
int ddl_node_boot(ddl_slurm_boot_t *b, ddl_error_t *err);

/* ddl_rejoin_boot: the identity of a task of the step that a leader agent
 * starts on a node restarted after a loss (ddl-launch --rejoin, see
 * agent/revive.c), from the variables the leader sets: DDL_STEP_ID (the
 * step the node was lost from), DDL_NODE_ID, DDL_NNODES, DDL_SIZE,
 * DDL_LOCAL_SIZE, DDL_SPARES, DDL_MIN_NODES, DDL_REJOIN (the agents'
 * addresses), and the task's SLURM_LOCALID.  It sets DDL_RANK,
 * DDL_LOCAL_RANK, DDL_AGENT_SOCK and DDL_NODE_RESTARTED for
 * ddl_node_boot, which reads them back.  The node's first task reads the
 * step's secret from standard input and starts the node's agent, which
 * asks the step's agents to take the node back (b->agent).  0, or -1 with
 * the reason in err. */
int ddl_rejoin_boot(ddl_slurm_boot_t *b, ddl_error_t *err);

#endif
