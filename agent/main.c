/* main.c: the ddl-agent command line.
 *
 *   ddl-agent serve --socket PATH --step ID --size N [--ready-fd FD] [--parent PID]
 *                   [--node-id K --nnodes M --local-ranks LIST --secret-fd FD
 *                    (--tcp-fd FD | --leader IP:PORT | --rejoin LIST)]
 *                   [--exit-when-done]
 *                   [--heartbeat MS] [--supervise [--restarts N] [--crash-loop K]
 *                    [--node-timeout MS] [--spares K] [--min-nodes M]] [--host NAME]
 *   ddl-agent status [--socket PATH] [--json | --prometheus]
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
#include "agent_args.h"
#include "beat.h"
#include "config_cmd.h"
#include "env.h"
#include "ddl_limits.h"
#include "ddl_version.h"
#include "log.h"
#include "proto.h"
#include "topo_cmd.h"
#include "util.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ddl-agent status [--socket PATH] [--json | --prometheus]\n"
            "%s"
            "%s"
            "       ddl-agent serve --socket PATH --step ID --size N [--ready-fd FD] "
            "[--parent PID]\n"
            "                       [--node-id K --nnodes M --local-ranks LIST --secret-fd FD\n"
            "                        (--tcp-fd FD | --leader IP:PORT | --rejoin LIST)]\n"
            "                       [--exit-when-done]\n"
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
            "         the step's other nodes (--json for scripts, --prometheus for\n"
            "         Prometheus's text format)\n"
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
        {"prometheus", no_argument, NULL, 'P'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL;
    int format = DDL_STATUS_TABLE, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+s:jh", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            path = optarg;
            break;
        case 'j':
        case 'P':
            if (format != DDL_STATUS_TABLE && format != (c == 'j' ? DDL_STATUS_JSON
                                                                  : DDL_STATUS_PROMETHEUS))
                return bad("status: --json and --prometheus exclude each other");
            format = c == 'j' ? DDL_STATUS_JSON : DDL_STATUS_PROMETHEUS;
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
    return ddl_agent_status(path, format);
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

/* cmd_serve: the options (common/agent_args.c, shared with the launchers
 * that build them), then the secret from its pipe, then the daemon. */
static int cmd_serve(int argc, char **argv)
{
    ddl_agent_args_t a;
    ddl_error_t err;
    static uint8_t secret[DDL_PROTO_MAX_SECRET];
    uint32_t *local = NULL;
    long v;
    int rc;
    if (ddl_agent_argv_parse(argc, argv, &a, &err) < 0)
        return bad("serve: %s", err.text);
    ddl_agent_opts_t o = {
        .socket_path = a.socket, .step = a.step, .size = a.size, .ready_fd = a.ready_fd,
        .parent_pid = a.parent, .node_id = a.node_id, .nnodes = a.nnodes, .tcp_fd = a.tcp_fd,
        .leader = a.leader, .rejoin = a.rejoin, .exit_when_done = a.exit_when_done, .heartbeat_ms = a.heartbeat_ms,
        .supervise = a.supervise, .restarts = a.restarts, .crash_loop = a.crash_loop,
        .node_timeout_ms = a.node_timeout_ms, .spares = a.spares, .min_nodes = a.min_nodes,
        .host = a.host, .ddlrun_names = a.ddlrun_names,
    };
    /* the step's heartbeat interval (srun --ddl-heartbeat, ddl.conf); --heartbeat wins */
    if (!o.heartbeat_ms) {
        if (ddl_env_long(DDLENV_DDL_HEARTBEAT_MS, &v, &err) < 0)
            return bad("serve: %s", err.text);
        if (ddl_env_str(DDLENV_DDL_HEARTBEAT_MS))
            o.heartbeat_ms = (int)v;
        if (o.heartbeat_ms && o.node_timeout_ms && o.heartbeat_ms >= o.node_timeout_ms)
            return bad("serve: DDL_HEARTBEAT_MS=%ld must be less than --node-timeout %d ms", v,
                       o.node_timeout_ms);
    }
    int det;
    if (ddl_env_enum(DDLENV_DDL_DETECTOR, &det, &err) < 0)
        return bad("serve: %s", err.text);
    o.detector = det;
    if (ddl_env_long(DDLENV_DDL_NODE_RETAKES, &v, &err) < 0)
        return bad("serve: %s", err.text);
    o.node_retakes = (uint32_t)v;
    if (ddl_env_long(DDLENV_DDL_REVIVE_WAIT_S, &v, &err) < 0)
        return bad("serve: %s", err.text);
    o.revive_wait_s = (int)v;
    if (ddl_env_long(DDLENV_DDL_REVIVE_GIVE_UP_S, &v, &err) < 0)
        return bad("serve: %s", err.text);
    o.revive_give_up_s = (int)v;
    if (ddl_env_long(DDLENV_DDL_CUT_OFF_WAIT_S, &v, &err) < 0)
        return bad("serve: %s", err.text);
    o.cut_off_wait_s = (int)v;
    if (a.local_ranks && ddl_rank_list_parse(a.local_ranks, &local, &o.nlocal) < 0)
        return bad("serve: --local-ranks: '%s': %s", a.local_ranks, strerror(errno));
    o.local = local;
    if (a.secret_fd >= 0 && read_secret(a.secret_fd, secret, &o.secret_len) < 0) {
        free(local);
        return bad("serve: --secret-fd: no secret of 16-%u bytes on descriptor %d",
                   DDL_PROTO_MAX_SECRET, a.secret_fd);
    }
    o.secret = secret;
    const char *log_dir = ddl_env_str(DDLENV_DDL_LOG_DIR); /* ddl.conf's log_dir, under Slurm */
    if (log_dir) {
        char host[DDL_PLACE_LEN] = "?";
        if (a.host)
            snprintf(host, sizeof host, "%s", a.host);
        else
            gethostname(host, sizeof host - 1);
        if (ddl_log_open_step(log_dir, a.step, host, &err) < 0)
            ddl_warn("step %s: no log file: %s", a.step, err.text);
        else if (ddl_log_step_async() < 0) /* a hung file system never stops the beats */
            ddl_warn("step %s: the log file is written from the agent's loop: %m", a.step);
    }
    rc = ddl_agent_serve(&o);
    if (ddl_log_flush(2000) < 0)
        ddl_warn("step %s: the last lines of its log file were not written within 2 s",
                 a.step);
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
