/* main.c: the ddl-agent command line.
 *
 *   ddl-agent serve --socket PATH --step ID --size N [--ready-fd FD] [--parent PID]
 *   ddl-agent status [--socket PATH] [--json]
 *   ddl-agent topo [--input FILE.xml] [--ranks N] [--gpus LIST] [--cpus LIST] [--json]
 *   ddl-agent config --check FILE [--partition NAME]
 *
 * `serve` is started by ddlrun (and later by ddl-launch under Slurm), once
 * per node per step; `status` is for people and scripts on a compute node.
 */
#include "config.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "config_cmd.h"
#include "ddl_version.h"
#include "log.h"
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
            "       ddl-agent --version | --help\n"
            "\n"
            "status   show the ddl steps running on this node: each rank's state, supervisor\n"
            "         and worker pids, and exit status (--json for scripts)\n"
            "topo     show this node's GPUs, NICs and cores, and where ddl would place N\n"
            "         local ranks ('ddl-agent topo --help' for its options)\n"
            "config   check an administrator's ddl.conf and print its effective values\n"
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

static int cmd_serve(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"step", required_argument, NULL, 't'},
        {"size", required_argument, NULL, 'n'},
        {"ready-fd", required_argument, NULL, 'r'},
        {"parent", required_argument, NULL, 'p'},
        {NULL, 0, NULL, 0},
    };
    ddl_agent_opts_t o = {.ready_fd = -1};
    long v;
    int c;
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
            if (ddl_parse_long(optarg, 1, 1 << 20, &v) < 0)
                return bad("serve: --size: '%s' is not a number of ranks (1-1048576)", optarg);
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
        default:
            return bad("serve: unknown option or missing value '%s'", argv[optind - 1]);
        }
    }
    if (!o.socket_path || !o.step || o.size == 0)
        return bad("serve: --socket, --step and --size are required");
    return ddl_agent_serve(&o);
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
    fprintf(stderr, "ddl-agent: unknown command '%s' (expected status, topo, config or serve)\n"
                    "Try 'ddl-agent --help'.\n", cmd);
    return 2;
}
