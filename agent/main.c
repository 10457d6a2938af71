/* main.c: the ddl-agent command line.
 *
 *   ddl-agent serve --socket PATH --step ID --size N [--ready-fd FD] [--parent PID]
 *                   [--node-id K --nnodes M --local-ranks LIST --secret-fd FD
 *                    (--tcp-fd FD | --leader IP:PORT)] [--exit-when-done]
 *                   [--heartbeat MS] [--supervise [--restarts N] [--crash-loop K]
 *                    [--node-timeout MS] [--spares K] [--min-nodes M]] [--host NAME]
 *   ddl-agent status [--socket PATH] [--json]
 *   ddl-agent topo [--input FILE.xml] [--ranks N] [--gpus LIST] [--cpus LIST] [--json]
 *   ddl-agent config --check FILE [--partition NAME]
 *   ddl-agent heartbeat [STEP]
 *
 * `serve` is started by ddlrun (and by ddl-launch under Slurm), once
 * per node per step; `status` is for people and scripts on a compute node.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "beat.h"
#include "config_cmd.h"
#include "ddl_limits.h"
#include "ddl_version.h"
#include "log.h"
#include "proto.h"
#include "topo_cmd.h"
#include "util.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ddl-agent status [--socket PATH] [--json]\n"
            "%s"
            "%s"
            "       ddl-agent serve --socket PATH --step ID --size N [--ready-fd FD] "
            "[--parent PID]\n"
            "                       [--node-id K --nnodes M --local-ranks LIST --secret-fd FD\n"
            "                        (--tcp-fd FD | --leader IP:PORT)] [--exit-when-done]\n"
            "                       [--heartbeat MS] [--supervise [--restarts N] "
            "[--crash-loop K]\n"
            "                        [--node-timeout MS] [--spares K] [--min-nodes M]] "
            "[--host NAME]\n"
            "                       [--option-names srun|ddlrun]\n"
            "       ddl-agent heartbeat [STEP]\n"
            "       ddl-agent --version | --help\n"
            "\n"
            "status   show the ddl steps running on this node: each rank's state, pids,\n"
            "         placement, restarts, last contact and exit status, and the links to\n"
            "         the step's other nodes (--json for scripts)\n"
            "topo     show this node's GPUs, NICs and cores, and where ddl would place N\n"
            "         local ranks ('ddl-agent topo --help' for its options)\n"
            "config   check an administrator's ddl.conf and print its effective values\n"
            "heartbeat  tell the rank's supervisor that the program (one that does not use\n"
            "         libddl) is making progress, at training step STEP: run it more often\n"
            "         than the hang timeout\n"
            "serve    run the agent of one step (started by ddlrun or ddl-launch)\n",
            ddl_agent_topo_usage, ddl_agent_config_usage);
}

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "ddl-agent: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'ddl-agent --help'.\n");
    return 2;
}

static int cmd_status(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL;
    int json = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+s:jh", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            path = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return bad("status: unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return bad("status: unexpected argument '%s'", argv[optind]);
    return ddl_agent_status(path, json);
}

/* cmd_heartbeat: one progress record to the worker's supervisor, as
 * libddl's ddl_heartbeat() sends (DDL_HEARTBEAT_FD inherited from the
 * worker, else the FIFO DDL_HEARTBEAT_PATH).  Exit 0 when sent, 1 when
 * there is no supervisor to tell (not a hang-watched worker), 2 usage. */
static int cmd_heartbeat(int argc, char **argv)
{
    long step = -1;
    if (argc > 2 || (argc == 2 && (ddl_parse_long(argv[1], 0, 0x7fffffffffffffffL, &step) < 0)))
        return bad("heartbeat: '%s' is not a step number (0 or more)", argc > 1 ? argv[1] : "");
    int own, fd = ddl_beat_channel_open(&own); /* non-blocking: a full pipe drops the record */
    if (fd < 0) {
        fprintf(stderr, "ddl-agent: heartbeat: no supervisor to tell: neither DDL_HEARTBEAT_FD "
                        "nor DDL_HEARTBEAT_PATH is usable (run it from a worker of ddlrun "
                        "--hang-timeout or srun --ddl)\n");
        return 1;
    }
    ddl_beat_rec_t r = {.collectives = 0, .step = step};
    ssize_t n = write(fd, &r, sizeof r);
    if (own)
        close(fd);
    if (n != (ssize_t)sizeof r) {
        fprintf(stderr, "ddl-agent: heartbeat: cannot write to the supervisor: %s\n",
                n < 0 ? strerror(errno) : "short write");
        return 1;
    }
    return 0;
}

/* parse_ranks: "0,1,5" into a malloc'd array. */
static int parse_ranks(const char *text, uint32_t **out, uint32_t *n)
{
    char *copy = strdup(text), *save = NULL;
    uint32_t *r = calloc(strlen(text) / 2 + 1, sizeof *r);
    long v;
    *n = 0;
    if (!copy || !r)
        goto fail;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (ddl_parse_long(t, 0, DDL_MAX_RANKS - 1, &v) < 0)
            goto fail;
        r[(*n)++] = (uint32_t)v;
    }
    if (*n == 0)
        goto fail;
    free(copy);
    *out = r;
    return 0;
fail:
    free(copy);
    free(r);
    return -1;
}

/* read_secret: the step's secret from a pipe (never on the command line,
 * where every user could read it). */
static int read_secret(int fd, uint8_t *buf, uint32_t *len)
{
    size_t got = 0;
    ssize_t n;
    while (got < DDL_PROTO_MAX_SECRET && (n = read(fd, buf + got, DDL_PROTO_MAX_SECRET - got)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        got += (size_t)n;
    }
    close(fd);
    *len = (uint32_t)got;
    return got >= 16 ? 0 : -1;
}

static int cmd_serve(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"step", required_argument, NULL, 't'},
        {"size", required_argument, NULL, 'n'},
        {"ready-fd", required_argument, NULL, 'r'},
        {"parent", required_argument, NULL, 'p'},
        {"node-id", required_argument, NULL, 'N'},
        {"nnodes", required_argument, NULL, 'M'},
        {"local-ranks", required_argument, NULL, 'L'},
        {"secret-fd", required_argument, NULL, 'S'},
        {"tcp-fd", required_argument, NULL, 'T'},
        {"leader", required_argument, NULL, 'l'},
        {"exit-when-done", no_argument, NULL, 'x'},
        {"heartbeat", required_argument, NULL, 'H'},
        {"supervise", no_argument, NULL, 'V'},
        {"restarts", required_argument, NULL, 'R'},
        {"crash-loop", required_argument, NULL, 'C'},
        {"node-timeout", required_argument, NULL, 'O'},
        {"spares", required_argument, NULL, 'P'},
        {"min-nodes", required_argument, NULL, 'm'},
        {"host", required_argument, NULL, 'o'},
        {"option-names", required_argument, NULL, 'W'},
        {NULL, 0, NULL, 0},
    };
    ddl_agent_opts_t o = {.ready_fd = -1, .tcp_fd = -1, .nnodes = 1};
    static uint8_t secret[DDL_PROTO_MAX_SECRET];
    uint32_t *local = NULL;
    int secret_fd = -1, rc;
    long v;
    int c;
    /* the step's heartbeat interval (srun --ddl-heartbeat, ddl.conf) */
    const char *hb = getenv("DDL_HEARTBEAT_S");
    if (hb && *hb && ddl_parse_long(hb, DDL_HEARTBEAT_MIN_S, DDL_HEARTBEAT_MAX_S, &v) == 0)
        o.heartbeat_ms = (int)v * 1000;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+s:t:n:r:p:", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            o.socket_path = optarg;
            break;
        case 't':
            o.step = optarg;
            break;
        case 'n':
            if (ddl_parse_long(optarg, 1, DDL_MAX_RANKS, &v) < 0)
                return bad("serve: --size: '%s' is not a number of ranks (1-%d)", optarg,
                           DDL_MAX_RANKS);
            o.size = (uint32_t)v;
            break;
        case 'r':
            if (ddl_parse_long(optarg, 0, 1 << 20, &v) < 0)
                return bad("serve: --ready-fd: '%s' is not a file descriptor", optarg);
            o.ready_fd = (int)v;
            break;
        case 'p':
            if (ddl_parse_long(optarg, 1, 1L << 22, &v) < 0)
                return bad("serve: --parent: '%s' is not a process id", optarg);
            o.parent_pid = (int)v;
            break;
        case 'N':
            if (ddl_parse_long(optarg, 0, DDL_MAX_NODES - 1, &v) < 0)
                return bad("serve: --node-id: '%s' is not a node id (0-%d)", optarg,
                           DDL_MAX_NODES - 1);
            o.node_id = (uint32_t)v;
            break;
        case 'M':
            if (ddl_parse_long(optarg, 1, DDL_MAX_NODES, &v) < 0)
                return bad("serve: --nnodes: '%s' is not a number of nodes (1-%d)", optarg,
                           DDL_MAX_NODES);
            o.nnodes = (uint32_t)v;
            break;
        case 'L':
            free(local);
            if (parse_ranks(optarg, &local, &o.nlocal) < 0)
                return bad("serve: --local-ranks: '%s' is not a list of ranks like 0,1,2", optarg);
            o.local = local;
            break;
        case 'S':
        case 'T':
            if (ddl_parse_long(optarg, 0, 1 << 20, &v) < 0)
                return bad("serve: --%s: '%s' is not a file descriptor",
                           c == 'S' ? "secret-fd" : "tcp-fd", optarg);
            *(c == 'S' ? &secret_fd : &o.tcp_fd) = (int)v;
            break;
        case 'l':
            o.leader = optarg;
            break;
        case 'x':
            o.exit_when_done = 1;
            break;
        case 'H':
            if (ddl_parse_long(optarg, DDL_HEARTBEAT_MIN_MS, DDL_HEARTBEAT_MAX_S * 1000L, &v) < 0)
                return bad("serve: --heartbeat: '%s' is not a number of milliseconds (%d-%d)",
                           optarg, DDL_HEARTBEAT_MIN_MS, DDL_HEARTBEAT_MAX_S * 1000);
            o.heartbeat_ms = (int)v;
            break;
        case 'V':
            o.supervise = 1;
            break;
        case 'R':
        case 'C':
            if (ddl_parse_long(optarg, 0, DDL_MAX_RESTARTS, &v) < 0)
                return bad("serve: --%s: '%s' is not a number (0-%d)",
                           c == 'R' ? "restarts" : "crash-loop", optarg, DDL_MAX_RESTARTS);
            *(c == 'R' ? &o.restarts : &o.crash_loop) = (uint32_t)v;
            break;
        case 'P':
        case 'm':
            if (ddl_parse_long(optarg, 0, DDL_MAX_NODES, &v) < 0)
                return bad("serve: --%s: '%s' is not a number of nodes (0-%d)",
                           c == 'P' ? "spares" : "min-nodes", optarg, DDL_MAX_NODES);
            *(c == 'P' ? &o.spares : &o.min_nodes) = (uint32_t)v;
            break;
        case 'W':
            if (strcmp(optarg, "srun") != 0 && strcmp(optarg, "ddlrun") != 0) {
                free(local);
                return bad("serve: --option-names: '%s' is not srun or ddlrun (whose options "
                           "the reports name)", optarg);
            }
            o.ddlrun_names = optarg[0] == 'd';
            break;
        case 'o':
            if (!*optarg || strlen(optarg) > 63 || strpbrk(optarg, " \t\n\"\\")) {
                free(local);
                return bad("serve: --host: '%s' is not a node name (1-63 characters, no "
                           "blanks or quotes)", optarg);
            }
            o.host = optarg;
            break;
        case 'O':
            if (ddl_parse_long(optarg, DDL_NODE_TIMEOUT_MIN_MS, DDL_NODE_TIMEOUT_MAX_MS, &v) < 0)
                return bad("serve: --node-timeout: '%s' is not a number of milliseconds "
                           "(%d-%d)", optarg, DDL_NODE_TIMEOUT_MIN_MS, DDL_NODE_TIMEOUT_MAX_MS);
            o.node_timeout_ms = (int)v;
            break;
        default:
            free(local);
            return bad("serve: unknown option or missing value '%s'", argv[optind - 1]);
        }
    }
    if (!o.socket_path || !o.step || o.size == 0) {
        free(local);
        return bad("serve: --socket, --step and --size are required");
    }
    if (o.heartbeat_ms && o.node_timeout_ms && o.heartbeat_ms >= o.node_timeout_ms) {
        free(local);
        return bad("serve: --heartbeat %d must be less than --node-timeout %d", o.heartbeat_ms,
                   o.node_timeout_ms);
    }
    if (o.nnodes > 1 && (o.node_id >= o.nnodes || !o.local || secret_fd < 0 ||
                         (o.tcp_fd < 0) == !o.leader)) {
        free(local);
        return bad("serve: a step on %u nodes needs --node-id below it, --local-ranks, "
                   "--secret-fd and one of --tcp-fd (the leader) or --leader", o.nnodes);
    }
    if (secret_fd >= 0 && read_secret(secret_fd, secret, &o.secret_len) < 0) {
        free(local);
        return bad("serve: --secret-fd: no secret of 16-%u bytes on descriptor %d",
                   DDL_PROTO_MAX_SECRET, secret_fd);
    }
    o.secret = secret;
    rc = ddl_agent_serve(&o);
    free(local);
    return rc;
}

int main(int argc, char **argv)
{
    ddl_log_init("ddl-agent", DDL_LOG_WARN);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "status") == 0)
        return cmd_status(argc - 1, argv + 1);
    if (strcmp(cmd, "serve") == 0)
        return cmd_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "topo") == 0)
        return ddl_agent_topo_main(argc - 1, argv + 1);
    if (strcmp(cmd, "heartbeat") == 0)
        return cmd_heartbeat(argc - 1, argv + 1);
    if (strcmp(cmd, "config") == 0)
        return ddl_agent_config_main(argc - 1, argv + 1);
    if (strcmp(cmd, "--version") == 0) {
        printf("ddl-agent %s\n", DDL_VERSION_STRING);
        return 0;
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "ddl-agent: unknown command '%s' (expected status, topo, config, heartbeat or "
                    "serve)\n"
                    "Try 'ddl-agent --help'.\n", cmd);
    return 2;
}
