/* agent_args.h: the command line of `ddl-agent serve`, written and read in
 * one place.  ddlrun (one agent, or one per emulated node), ddl-launch under
 * Slurm (the node's first task) build it with ddl_agent_argv_build; the
 * agent reads it with ddl_agent_argv_parse.  Both check the same ranges
 * (common/ddl_limits.h), so a launcher can never start an agent that would
 * refuse its own options.
 *
 *   ddl-agent serve --socket PATH --step ID --size N [--ready-fd FD] [--parent PID]
 *                   [--node-id K --nnodes M --local-ranks LIST --secret-fd FD
 *                    (--tcp-fd FD | --leader IP:PORT | --rejoin LIST)] [--exit-when-done]
 *                   [--heartbeat MS] [--supervise [--restarts N] [--crash-loop K]
 *                    [--node-timeout MS] [--spares K] [--min-nodes M]] [--host NAME]
 *                   [--option-names srun|ddlrun]
 */
#ifndef DDL_AGENT_ARGS_H
#define DDL_AGENT_ARGS_H

#include <stdint.h>

#include "util.h"

/* The options of `ddl-agent serve`.  Strings are borrowed (the caller's, or
 * the parsed argv's); numbers at 0 (descriptors at -1) are "not given". */
typedef struct {
    const char *socket;      /* --socket: the Unix socket to listen on (required) */
    const char *step;        /* --step: the step id (required) */
    uint32_t size;           /* --size: ranks of the step, 1-DDL_MAX_RANKS (required) */
    int ready_fd;            /* --ready-fd: write "1" here once listening; -1 none */
    int parent;              /* --parent: exit when this process is gone; 0 none */
    uint32_t node_id;        /* --node-id: this node, 0 to nnodes-1 */
    uint32_t nnodes;         /* --nnodes: nodes of the step, 1 (default) to DDL_MAX_NODES */
    const char *local_ranks; /* --local-ranks: "0,1,2", the ranks on this node; NULL none */
    int secret_fd;           /* --secret-fd: the step's secret comes on this pipe; -1 none */
    int tcp_fd;              /* --tcp-fd: the leader's listening TCP socket; with --leader
                              * or --rejoin, where this agent would lead after a takeover
                              * (else it opens one itself); -1 none */
    const char *leader;      /* --leader IP:PORT: a follower's leader; NULL none */
    const char *rejoin;      /* --rejoin ADDR,ADDR,...: a node restarted after a loss (its
                              * processes died) asks these agents, node 0 first (nnodes
                              * entries, each IPv4:port or empty), to take it back;
                              * NULL none */
    int exit_when_done;      /* --exit-when-done */
    int heartbeat_ms;        /* --heartbeat: ms (ddl_limits.h); 0 default */
    int supervise;           /* --supervise: the agents decide restarts (as under Slurm) */
    uint32_t restarts;       /* --restarts: 0-DDL_MAX_RESTARTS */
    uint32_t crash_loop;     /* --crash-loop: 0 (no check)-DDL_MAX_RESTARTS */
    int node_timeout_ms;     /* --node-timeout: DDL_NODE_TIMEOUT_MIN_MS-MAX_MS; 0 default */
    uint32_t spares;         /* --spares: 0-DDL_MAX_NODES */
    uint32_t min_nodes;      /* --min-nodes: 0-DDL_MAX_NODES */
    const char *host;        /* --host: the node's name in reports; NULL: gethostname */
    int ddlrun_names;        /* --option-names ddlrun: reports name ddlrun's options
                              * (--restarts), not srun's (--ddl-restarts, the default) */
} ddl_agent_args_t;

/* DDL_AGENT_ARGS_INIT: nothing given (descriptors -1, one node). */
#define DDL_AGENT_ARGS_INIT \
    ((ddl_agent_args_t){.ready_fd = -1, .secret_fd = -1, .tcp_fd = -1, .nnodes = 1})

/* Room for a built command line: its strings point into the caller's
 * ddl_agent_args_t and into num[]. */
#define DDL_AGENT_ARGV_MAX 48
typedef struct {
    char *argv[DDL_AGENT_ARGV_MAX]; /* "ddl-agent", "serve", ..., NULL */
    int argc;
    char num[20][24];
} ddl_agent_argv_t;

/* ddl_agent_args_check: the checks that ddl_agent_argv_parse makes, on a
 * filled struct: every number in its range, --socket, --step and --size
 * given, --heartbeat below --node-timeout, and on more than one node
 * --node-id below --nnodes, --local-ranks, --secret-fd and --tcp-fd
 * (the leader), --leader or --rejoin (nnodes addresses; with --supervise
 * and --spares or --min-nodes; not with --leader).  0, or -1 with errno EINVAL and err naming the
 * option, its value and the range.  Thread-safe. */
int ddl_agent_args_check(const ddl_agent_args_t *a, ddl_error_t *err);

/* ddl_agent_argv_build: `ddl-agent serve` with a's options into out
 * (out->argv[0] "ddl-agent", argv[1] "serve", NULL-terminated; pointers into
 * a's strings and out).  Options at their "not given" value are left out,
 * except that --supervise brings --restarts, --crash-loop, --spares and
 * --min-nodes.  Refuses (ddl_agent_args_check) what the agent would refuse:
 * 0, or -1 with errno and err.  Thread-safe. */
int ddl_agent_argv_build(const ddl_agent_args_t *a, ddl_agent_argv_t *out, ddl_error_t *err);

/* ddl_agent_host_ok: h is a node name --host takes (1-63 characters, no
 * blanks or quotes).  Thread-safe. */
int ddl_agent_host_ok(const char *h);

/* ddl_agent_rejoin_addr: entry n (from 0) of a --rejoin list into out, ""
 * when empty.  0, or -1 with errno EINVAL (the list has no entry n, or it
 * does not fit len).  Thread-safe. */
int ddl_agent_rejoin_addr(const char *list, uint32_t n, char *out, size_t len);

/* ddl_agent_argv_parse: read `serve`'s options: argv[0] is "serve" (the
 * argv after "ddl-agent"), every option checked as ddl_agent_args_check
 * does.  a's strings point into argv.  0, or -1 with errno EINVAL and err
 * ("--size: 'x' is not a number of ranks (1-1048576)").  Uses getopt: not
 * thread-safe; prints nothing. */
int ddl_agent_argv_parse(int argc, char **argv, ddl_agent_args_t *a, ddl_error_t *err);

/* ddl_rank_list_parse: "0,1,5" (ranks 0 to DDL_MAX_RANKS-1) into a malloc'd
 * array (the caller frees it) of *n entries.  0, or -1 with errno EINVAL
 * (empty, not a list of numbers) or ENOMEM. */
int ddl_rank_list_parse(const char *text, uint32_t **out, uint32_t *n);

#endif
