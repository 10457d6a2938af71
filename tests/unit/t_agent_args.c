/* t_agent_args.c: the `ddl-agent serve` command line: what the launchers
 * build (ddl_agent_argv_build) the agent parses back to the same options
 * (ddl_agent_argv_parse), for each kind of agent; every value out of range
 * is refused by both, with the range in the message. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "agent_args.h"
#include "ddl_limits.h"
#include "../tap.h"

static int str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int args_eq(const ddl_agent_args_t *x, const ddl_agent_args_t *y)
{
    return str_eq(x->socket, y->socket) && str_eq(x->step, y->step) && x->size == y->size &&
           x->ready_fd == y->ready_fd && x->parent == y->parent && x->node_id == y->node_id &&
           x->nnodes == y->nnodes && str_eq(x->local_ranks, y->local_ranks) &&
           x->secret_fd == y->secret_fd && x->tcp_fd == y->tcp_fd && str_eq(x->leader, y->leader) &&
           str_eq(x->rejoin, y->rejoin) &&
           x->exit_when_done == y->exit_when_done && x->heartbeat_ms == y->heartbeat_ms &&
           x->supervise == y->supervise && x->restarts == y->restarts &&
           x->crash_loop == y->crash_loop && x->node_timeout_ms == y->node_timeout_ms &&
           x->spares == y->spares && x->min_nodes == y->min_nodes && str_eq(x->host, y->host) &&
           x->ddlrun_names == y->ddlrun_names;
}

/* round_trip: build, parse (after "ddl-agent"), compare. */
static void round_trip(const ddl_agent_args_t *a, const char *name)
{
    ddl_agent_argv_t av;
    ddl_agent_args_t back;
    ddl_error_t err = {""};
    int built = ddl_agent_argv_build(a, &av, &err) == 0;
    ok(built, "%s: built", name);
    if (!built) {
        diag("%s", err.text);
        return;
    }
    ok(strcmp(av.argv[0], "ddl-agent") == 0 && strcmp(av.argv[1], "serve") == 0 &&
           av.argv[av.argc] == NULL,
       "%s: ddl-agent serve ..., NULL-terminated", name);
    int parsed = ddl_agent_argv_parse(av.argc - 1, av.argv + 1, &back, &err) == 0;
    ok(parsed, "%s: parsed back", name);
    if (!parsed)
        diag("%s", err.text);
    ok(parsed && args_eq(a, &back), "%s: the same options", name);
}

static ddl_agent_args_t single(void)
{
    ddl_agent_args_t a = DDL_AGENT_ARGS_INIT;
    a.socket = "/tmp/ddl-0/local-1.sock";
    a.step = "local-1";
    a.size = 4;
    a.parent = 1234;
    return a;
}

static ddl_agent_args_t leader(void)
{
    ddl_agent_args_t a = single();
    a.size = 8;
    a.nnodes = 2;
    a.node_id = 0;
    a.local_ranks = "0,1,2,3";
    a.secret_fd = 5;
    a.tcp_fd = 6;
    a.exit_when_done = 1;
    a.heartbeat_ms = 500;
    a.node_timeout_ms = 2000;
    a.host = "node0";
    return a;
}

static ddl_agent_args_t follower(void)
{
    ddl_agent_args_t a = leader();
    a.node_id = 1;
    a.local_ranks = "4,5,6,7";
    a.tcp_fd = -1;
    a.leader = "127.0.0.1:4242";
    a.host = "node1";
    return a;
}

static ddl_agent_args_t supervised(void)
{
    ddl_agent_args_t a = follower();
    a.size = 12;
    a.nnodes = 3;
    a.local_ranks = "4,5,6,7";
    a.supervise = 1;
    a.restarts = 3;
    a.crash_loop = 2;
    a.spares = 1;
    a.min_nodes = 1;
    return a;
}

/* refused: parse of `serve ... --OPT VALUE` fails naming the range, and so
 * does build of the same struct value where it can hold it. */
static void refused(const char *opt, const char *value, const char *range)
{
    ddl_agent_args_t a = supervised(), back;
    ddl_agent_argv_t av;
    ddl_error_t err = {""};
    int ok_build = ddl_agent_argv_build(&a, &av, &err) == 0;
    /* append --OPT VALUE to a valid command line: the last one counts */
    char *argv[DDL_AGENT_ARGV_MAX + 2];
    int n = 0;
    for (int i = 1; ok_build && i < av.argc; i++)
        argv[n++] = av.argv[i];
    char o[64];
    snprintf(o, sizeof o, "--%s", opt);
    argv[n++] = o;
    argv[n++] = (char *)value;
    argv[n] = NULL;
    errno = 0;
    int rc = ddl_agent_argv_parse(n, argv, &back, &err);
    ok(ok_build && rc == -1 && errno == EINVAL && strstr(err.text, o) && strstr(err.text, value) &&
           strstr(err.text, range),
       "--%s %s refused with %s", opt, value, range);
    if (rc == 0 || !strstr(err.text, range))
        diag("got: %s", rc == 0 ? "(accepted)" : err.text);
}

/* build_refuses: a struct with a value out of range is not built. */
static void build_refuses(ddl_agent_args_t a, const char *what, const char *range)
{
    ddl_agent_argv_t av;
    ddl_error_t err = {""};
    errno = 0;
    int rc = ddl_agent_argv_build(&a, &av, &err);
    ok(rc == -1 && errno == EINVAL && strstr(err.text, range), "build refuses %s (%s)", what,
       range);
    if (rc == 0 || !strstr(err.text, range))
        diag("got: %s", rc == 0 ? "(built)" : err.text);
}

int main(void)
{
    plan(NO_PLAN);
    ddl_agent_args_t a = single();
    round_trip(&a, "single node");
    a.ready_fd = 9;
    round_trip(&a, "single node with --ready-fd");
    a = leader();
    round_trip(&a, "leader");
    a = follower();
    round_trip(&a, "follower");
    a.tcp_fd = 7;
    round_trip(&a, "follower with its own listening socket (--tcp-fd and --leader)");
    a = supervised();
    round_trip(&a, "supervised with spares and min-nodes");
    a.leader = NULL;
    a.rejoin = "127.0.0.1:4242,,10.0.0.3:7";
    round_trip(&a, "a restarted node (--rejoin)");
    a = supervised();
    a.crash_loop = 0;
    a.restarts = 0;
    a.spares = 0;
    a.min_nodes = 0;
    round_trip(&a, "supervised, no restarts");
    a.ddlrun_names = 1;
    round_trip(&a, "supervised, reports naming ddlrun's options (--option-names ddlrun)");
    a = single();
    a.restarts = DDL_MAX_RESTARTS;
    a.node_timeout_ms = DDL_NODE_TIMEOUT_MAX_MS;
    a.heartbeat_ms = DDL_HEARTBEAT_MAX_MS;
    round_trip(&a, "limits' upper ends");

    /* every bad value, with its range */
    char r[64];
    snprintf(r, sizeof r, "(1-%d)", DDL_MAX_RANKS);
    refused("size", "0", r);
    refused("size", "1048577", r);
    refused("size", "x", r);
    refused("ready-fd", "-2", "(0-1048576)");
    refused("parent", "0", "(1-4194304)");
    snprintf(r, sizeof r, "(0-%d)", DDL_MAX_NODES - 1);
    refused("node-id", "65536", r);
    snprintf(r, sizeof r, "(1-%d)", DDL_MAX_NODES);
    refused("nnodes", "0", r);
    refused("secret-fd", "-1", "(0-1048576)");
    refused("tcp-fd", "1048577", "(0-1048576)");
    snprintf(r, sizeof r, "(%d-%d)", DDL_HEARTBEAT_MIN_MS, DDL_HEARTBEAT_MAX_MS);
    refused("heartbeat", "49", r);
    refused("heartbeat", "60001", r);
    snprintf(r, sizeof r, "(0-%d)", DDL_MAX_RESTARTS);
    refused("restarts", "101", r);
    refused("crash-loop", "-1", r);
    snprintf(r, sizeof r, "(%d-%d)", DDL_NODE_TIMEOUT_MIN_MS, DDL_NODE_TIMEOUT_MAX_MS);
    refused("node-timeout", "199", r);
    refused("node-timeout", "600001", r);
    snprintf(r, sizeof r, "(0-%d)", DDL_MAX_NODES);
    refused("spares", "65537", r);
    refused("min-nodes", "1e3", r);
    refused("local-ranks", "1,,2", "0,1,2");
    refused("local-ranks", "1048576", "0,1,2");
    refused("host", "a b", "1-63 characters");
    refused("host", "", "1-63 characters");

    /* the builder refuses what the agent would */
    a = supervised();
    a.restarts = DDL_MAX_RESTARTS + 1;
    build_refuses(a, "restarts 101", "--restarts: '101' is not a number of restarts (0-100)");
    a = supervised();
    a.node_timeout_ms = 100;
    build_refuses(a, "node timeout 100", "(200-600000)");
    a = supervised();
    a.heartbeat_ms = 2000;
    build_refuses(a, "heartbeat not below the node timeout", "must be less than --node-timeout");
    a = supervised();
    a.spares = DDL_MAX_NODES + 1;
    build_refuses(a, "spares 65537", "(0-65536)");
    a = single();
    a.size = 0;
    build_refuses(a, "no size", "--size are required");
    a = follower();
    a.node_id = 2;
    build_refuses(a, "node id beyond nnodes", "--node-id below it");
    a = supervised();
    a.rejoin = "127.0.0.1:4242,,";
    build_refuses(a, "both --leader and --rejoin", "one of --tcp-fd (the leader), --leader or --rejoin");
    a = follower();
    a.leader = NULL;
    build_refuses(a, "a follower without --leader or --rejoin", "one of --tcp-fd");
    a = supervised();
    a.leader = NULL;
    a.rejoin = "127.0.0.1:4242,";
    build_refuses(a, "--rejoin with 2 addresses for 3 nodes", "is not 3 addresses");
    a.rejoin = "127.0.0.1:4242,,,";
    build_refuses(a, "--rejoin with 4 addresses for 3 nodes", "is not 3 addresses");
    a.rejoin = ",,";
    build_refuses(a, "--rejoin without any address", "at least one given");
    a.rejoin = "127.0.0.1:4242,host:1,";
    build_refuses(a, "--rejoin with a host name", "IPv4:port or empty");
    a.rejoin = "127.0.0.1:0,,";
    build_refuses(a, "--rejoin with port 0", "IPv4:port or empty");
    a.rejoin = "127.0.0.1:4242,,";
    a.spares = a.min_nodes = 0;
    build_refuses(a, "--rejoin without spares or shrinking", "--spares or --min-nodes");
    a = supervised();
    a.leader = NULL;
    a.rejoin = "127.0.0.1:4242,,";
    a.supervise = 0;
    build_refuses(a, "--rejoin without --supervise", "a supervised step");

    /* ddl_agent_rejoin_addr: entry n of the list */
    char addr[32];
    const char *list = "127.0.0.1:1,,10.0.0.3:7";
    ok(ddl_agent_rejoin_addr(list, 0, addr, sizeof addr) == 0 && !strcmp(addr, "127.0.0.1:1"),
       "rejoin list: entry 0");
    ok(ddl_agent_rejoin_addr(list, 1, addr, sizeof addr) == 0 && !strcmp(addr, ""),
       "rejoin list: entry 1 empty");
    ok(ddl_agent_rejoin_addr(list, 2, addr, sizeof addr) == 0 && !strcmp(addr, "10.0.0.3:7"),
       "rejoin list: the last entry");
    ok(ddl_agent_rejoin_addr(list, 3, addr, sizeof addr) == -1 && errno == EINVAL,
       "rejoin list: no entry 3 (EINVAL)");
    ok(ddl_agent_rejoin_addr(list, 0, addr, 8) == -1 && errno == EINVAL,
       "rejoin list: an entry too long for the buffer (EINVAL)");
    a = follower();
    a.secret_fd = -1;
    build_refuses(a, "several nodes without a secret", "--secret-fd");

    /* usage errors */
    ddl_error_t err;
    ddl_agent_args_t back;
    char *u1[] = {"serve", "--bogus", NULL};
    ok(ddl_agent_argv_parse(2, u1, &back, &err) == -1 && strstr(err.text, "--bogus"),
       "unknown option named");
    char *u2[] = {"serve", "--socket", "/s", "--step", "x", "--size", NULL};
    ok(ddl_agent_argv_parse(6, u2, &back, &err) == -1 && strstr(err.text, "needs a value"),
       "missing value");
    char *u3[] = {"serve", "--socket", "/s", "--step", "x", "--size", "2", "extra", NULL};
    ok(ddl_agent_argv_parse(8, u3, &back, &err) == -1 && strstr(err.text, "extra"),
       "extra argument refused");

    uint32_t *ranks, n;
    ok(ddl_rank_list_parse("0,1,5", &ranks, &n) == 0 && n == 3 && ranks[2] == 5, "rank list 0,1,5");
    if (n == 3)
        free(ranks);
    ok(ddl_rank_list_parse("", &ranks, &n) == -1 && errno == EINVAL, "empty rank list refused");
    return done_testing();
}
