/* ddlrun_args.c: command-line parsing for ddlrun, strict and silent (the
 * caller prints), so that every bad input is covered by unit tests. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "ddlrun.h"

const char ddlrun_usage[] =
    "usage: ddlrun -n N [options] [--] PROG [ARGS...]\n"
    "\n"
    "Start N ranks of PROG on this machine under a supervising ddl-agent (the policy\n"
    "of srun --ddl) and exit with the status of the first rank that failed.\n"
    "\n"
    "  -n, --np N         number of ranks (1-4096), required\n"
    "  -l, --label        prefix every output line with \"[RANK] \"\n"
    "      --nodes K      emulate K nodes of N/K ranks each (N must be a multiple of K):\n"
    "                     ranks get node ids and local ranks in blocks, so that libddl's\n"
    "                     node-aware algorithms run here; one agent serves them all\n"
    "      --emulate      with --nodes: each emulated node gets its own ddl-agent, linked\n"
    "                     to the others over loopback TCP, and the agents supervise as\n"
    "                     under srun --ddl: they decide restarts (--restarts, --crash-loop),\n"
    "                     detect a lost node (its agent killed, or silent: SIGSTOP) and\n"
    "                     take the leader's place when it is lost\n"
    "      --spares K     with --emulate: K more nodes of N/K ranks whose tasks wait, and\n"
    "                     take a lost node's ranks (0-" DDL_XSTR(DDL_MAX_NODES)
    ", default 0; the ranks and\n"
    "                     the waiting tasks together at most 4096)\n"
    "      --min-nodes M  with --emulate, without a spare left: a lost node's ranks are\n"
    "                     dropped and the world shrinks, down to M nodes (0-"
    DDL_XSTR(DDL_MAX_NODES) ",\n"
    "                     default 0: no)\n"
    "      --node-timeout SECS\n"
    "                     with --emulate: an agent silent this long is lost (0.2-600,\n"
    "                     default 2)\n"
    "      --reboot-after SECS\n"
    "                     with --emulate and --spares or --min-nodes: a node whose agent\n"
    "                     was killed starts again this long after (once its tasks have\n"
    "                     ended), as a machine that rebooted: its new agent asks to be\n"
    "                     taken back, as a spare (DDL_NODE_RETAKES times at most), and a\n"
    "                     world that shrank grows back onto it at the next checkpoint\n"
    "                     (0.1-600, default: never)\n"
    "      --grace SECS   after SIGTERM, wait this long before SIGKILL (0-600, default 5)\n"
    "      --bind HOW     auto (default): each rank gets its GPU, nearest NIC and cores;\n"
    "                     none: change nothing; LIST: CPU lists separated by ':', one per\n"
    "                     rank in turn (e.g. 0-3:4-7), GPU and NIC as with auto\n"
    "      --restarts R   after a rank fails, stop the others and start every worker again,\n"
    "                     up to R times (0-" DDL_XSTR(DDL_MAX_RESTARTS)
    ", default 0), with DDL_GENERATION and\n"
    "                     DDL_RESTART_COUNT counting the restarts; waits 0.5 s before\n"
    "                     the first restart, doubling up to 8 s\n"
    "      --checkpoint-dir DIR\n"
    "                     the program's checkpoint directory (DDL_CHECKPOINT_DIR): its\n"
    "                     'latest' step shows progress between restarts, and each\n"
    "                     failure is summarised in DIR/failure-gen<G>.json\n"
    "      --checkpoint-local DIR\n"
    "                     the node-local checkpoint level (DDL_CKPT_LOCAL_DIR): libddl\n"
    "                     writes each checkpoint there and copies it to a partner node;\n"
    "                     with --nodes each emulated node gets DIR/node-<id>\n"
    "      --checkpoint-shared-every K\n"
    "                     with --checkpoint-local: every K-th checkpoint also goes to the\n"
    "                     shared --checkpoint-dir (0-1000000, 0: never; default 1)\n"
    "      --crash-loop K with --checkpoint-dir: give up when K restarts in a row made no\n"
    "                     checkpoint progress (1-" DDL_XSTR(DDL_MAX_RESTARTS) ", default "
    DDL_XSTR(DDL_DEFAULT_CRASH_LOOP) ")\n"
    "      --hang-timeout SECS\n"
    "                     a rank from which libddl has sent no heartbeat for SECS (once\n"
    "                     it has sent one) is hung: reported and killed, which counts\n"
    "                     as its failure (0.1-86400; default: off)\n"
    "  -v, --verbose      debug messages from ddlrun, ddl-launch and the agent\n"
    "  -h, --help         this text\n"
    "  -V, --version      print the version\n"
    "\n"
    "Each rank gets DDL_RANK, DDL_SIZE, DDL_LOCAL_RANK, DDL_LOCAL_SIZE, DDL_NODE_ID,\n"
    "DDL_NNODES, DDL_GENERATION, DDL_GRACE_MS, DDL_AGENT_SOCK, DDL_STEP_ID and the\n"
    "PyTorch variables RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK,\n"
    "MASTER_ADDR and MASTER_PORT (a MASTER_ADDR or MASTER_PORT already set is kept).\n"
    "Ranks read /dev/null as standard input.  With --bind auto or LIST each rank is\n"
    "bound to its cores and gets CUDA_VISIBLE_DEVICES, UCX_NET_DEVICES, NCCL_IB_HCA or\n"
    "NCCL_SOCKET_IFNAME and OMP_NUM_THREADS; a variable already set is kept, except\n"
    "CUDA_VISIBLE_DEVICES, narrowed to the rank's GPU (see 'ddl-agent topo').\n"
    "\n"
    "Exit status: 0 if every rank exited 0; else the first failed rank's exit status,\n"
    "or 128+N if it was killed by signal N; 128+N if ddlrun was interrupted by\n"
    "signal N (SIGINT, SIGHUP, SIGQUIT); 2 for bad usage; 127 if PROG cannot be\n"
    "found; 1 if ddl itself failed.\n"
    "With --restarts: 90 if the ranks failed again after the last allowed restart;\n"
    "91 if --crash-loop stopped the restarts (no checkpoint progress: do not requeue).\n"
    "93 if the agent was lost (with --emulate: a node that could not be replaced).\n"
    "94 if SIGTERM, SIGUSR1 or SIGUSR2 stopped the job at a step boundary (every\n"
    "rank committed its checkpoint there: run again to resume).\n"
    "With --emulate, the highest exit status of the tasks on the nodes that were not\n"
    "lost (as srun reports).\n"
    "A rank killed by --hang-timeout ends with status 92.\n";

/* parse_bind: --bind auto|none|LIST, LIST being CPU lists separated by ':'. */
static int parse_bind(const char *arg, ddlrun_opts_t *o, ddl_error_t *err)
{
    ddl_error_t e2;
    if (strcmp(arg, "auto") == 0 || strcmp(arg, "none") == 0) {
        o->bind = arg[0] == 'a' ? DDLRUN_BIND_AUTO : DDLRUN_BIND_NONE;
        o->bind_list = NULL;
        return 0;
    }
    if (ddl_bind_check(arg, &e2) < 0)
        return ddl_errprintf(err, "--bind: '%s' is not auto, none or CPU lists separated by "
                             "':' (like 0-3:4-7): %s", arg, e2.text);
    o->bind = DDLRUN_BIND_LIST;
    o->bind_list = arg;
    return 0;
}

ddlrun_args_result_t ddlrun_parse_args(int argc, char **argv, ddlrun_opts_t *o,
                                       ddl_error_t *err)
{
    static const struct option longopts[] = {
        {"np", required_argument, NULL, 'n'},
        {"label", no_argument, NULL, 'l'},
        {"nodes", required_argument, NULL, 'N'},
        {"grace", required_argument, NULL, 'g'},
        {"bind", required_argument, NULL, 'b'},
        {"verbose", no_argument, NULL, 'v'},
        {"restarts", required_argument, NULL, 'R'},
        {"checkpoint-dir", required_argument, NULL, 'C'},
        {"crash-loop", required_argument, NULL, 'K'},
        {"checkpoint-local", required_argument, NULL, 'L'},
        {"checkpoint-shared-every", required_argument, NULL, 'e'},
        {"hang-timeout", required_argument, NULL, 'H'},
        {"emulate", no_argument, NULL, 'E'},
        {"spares", required_argument, NULL, 'S'},
        {"min-nodes", required_argument, NULL, 'M'},
        {"node-timeout", required_argument, NULL, 'T'},
        {"reboot-after", required_argument, NULL, 'B'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    long v;
    int c;

    *o = (ddlrun_opts_t){.np = 0, .nodes = 1, .grace_ms = DDL_GRACE_DEFAULT_MS,
                         .crash_loop = DDL_DEFAULT_CRASH_LOOP, .ckpt_shared_every = -1};
    optind = 0; /* full re-initialisation of getopt, for repeated calls */
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:n:lvhV", longopts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (ddl_parse_long(optarg, 1, DDLRUN_MAX_RANKS, &v) < 0)
                return ddl_errprintf(err, "-n: '%s' is not a number of ranks (1-%d)", optarg,
                                     DDLRUN_MAX_RANKS),
                       DDLRUN_ARGS_ERROR;
            o->np = (int)v;
            break;
        case 'l':
            o->label = 1;
            break;
        case 'N':
            if (ddl_parse_long(optarg, 1, DDLRUN_MAX_RANKS, &v) < 0)
                return ddl_errprintf(err, "--nodes: '%s' is not a number of nodes (1-%d)",
                                     optarg, DDLRUN_MAX_RANKS),
                       DDLRUN_ARGS_ERROR;
            o->nodes = (int)v;
            break;
        case 'g':
            if (ddl_parse_seconds_ms(optarg, 0, DDL_GRACE_MAX_MS, &v) < 0)
                return ddl_errprintf(err, "--grace: '%s' is not a number of seconds (0-%g)",
                                     optarg, DDL_GRACE_MAX_MS / 1000.0),
                       DDLRUN_ARGS_ERROR;
            o->grace_ms = v;
            break;
        case 'v':
            o->verbose = 1;
            break;
        case 'R':
            if (ddl_parse_long(optarg, 0, DDL_MAX_RESTARTS, &v) < 0)
                return ddl_errprintf(err, "--restarts: '%s' is not a number (0-%d)", optarg,
                                     DDL_MAX_RESTARTS),
                       DDLRUN_ARGS_ERROR;
            o->restarts = (int)v;
            break;
        case 'K':
            if (ddl_parse_long(optarg, 1, DDL_MAX_RESTARTS, &v) < 0)
                return ddl_errprintf(err, "--crash-loop: '%s' is not a number of restarts "
                                     "(1-%d)", optarg, DDL_MAX_RESTARTS),
                       DDLRUN_ARGS_ERROR;
            o->crash_loop = (int)v;
            break;
        case 'H':
            if (ddl_parse_seconds_ms(optarg, DDL_HANG_TIMEOUT_MIN_MS,
                                     DDL_HANG_TIMEOUT_MAX_S * 1000L, &v) < 0)
                return ddl_errprintf(err, "--hang-timeout: '%s' is not a number of seconds "
                                     "(%g-%d)", optarg, DDL_HANG_TIMEOUT_MIN_MS / 1000.0,
                                     DDL_HANG_TIMEOUT_MAX_S),
                       DDLRUN_ARGS_ERROR;
            o->hang_ms = v;
            break;
        case 'E':
            o->emulate = 1;
            break;
        case 'S':
            if (ddl_parse_long(optarg, 0, DDL_MAX_NODES, &v) < 0)
                return ddl_errprintf(err, "--spares: '%s' is not a number of nodes (0-%d)",
                                     optarg, DDL_MAX_NODES),
                       DDLRUN_ARGS_ERROR;
            o->spares = (int)v;
            break;
        case 'M':
            if (ddl_parse_long(optarg, 0, DDL_MAX_NODES, &v) < 0)
                return ddl_errprintf(err, "--min-nodes: '%s' is not a number of nodes (0-%d)",
                                     optarg, DDL_MAX_NODES),
                       DDLRUN_ARGS_ERROR;
            o->min_nodes = (int)v;
            break;
        case 'T':
            if (ddl_parse_seconds_ms(optarg, DDL_NODE_TIMEOUT_MIN_MS, DDL_NODE_TIMEOUT_MAX_MS,
                                     &v) < 0)
                return ddl_errprintf(err, "--node-timeout: '%s' is not a number of seconds "
                                     "(%g-%g)", optarg, DDL_NODE_TIMEOUT_MIN_MS / 1000.0,
                                     DDL_NODE_TIMEOUT_MAX_MS / 1000.0),
                       DDLRUN_ARGS_ERROR;
            o->node_timeout_ms = v;
            break;
        case 'B':
            if (ddl_parse_seconds_ms(optarg, 100, 600000, &v) < 0)
                return ddl_errprintf(err, "--reboot-after: '%s' is not a number of seconds "
                                     "(0.1-600)", optarg),
                       DDLRUN_ARGS_ERROR;
            o->reboot_ms = v;
            break;
        case 'C':
            if (optarg[0] == '\0')
                return ddl_errprintf(err, "--checkpoint-dir: empty path"), DDLRUN_ARGS_ERROR;
            o->ckpt_dir = optarg;
            break;
        case 'L':
            if (optarg[0] != '/')
                return ddl_errprintf(err, "--checkpoint-local: '%s' is not an absolute path "
                                     "(give one starting with '/')", optarg),
                       DDLRUN_ARGS_ERROR;
            o->ckpt_local = optarg;
            break;
        case 'e':
            if (ddl_parse_long(optarg, 0, 1000000, &v) < 0)
                return ddl_errprintf(err, "--checkpoint-shared-every: '%s' is not a number "
                                     "(0-1000000; 0: never)", optarg),
                       DDLRUN_ARGS_ERROR;
            o->ckpt_shared_every = (int)v;
            break;
        case 'b':
            if (parse_bind(optarg, o, err) < 0)
                return DDLRUN_ARGS_ERROR;
            break;
        case 'h':
            return DDLRUN_ARGS_HELP;
        case 'V':
            return DDLRUN_ARGS_VERSION;
        case ':':
            return ddl_errprintf(err, "%s: missing value", argv[optind - 1]), DDLRUN_ARGS_ERROR;
        default:
            if (optopt)
                ddl_errprintf(err, "unknown option '-%c'", optopt);
            else
                ddl_errprintf(err, "unknown option '%s'", argv[optind - 1]);
            return DDLRUN_ARGS_ERROR;
        }
    }
    if (o->np == 0)
        return ddl_errprintf(err, "-n N is required (the number of ranks, 1-%d)",
                             DDLRUN_MAX_RANKS),
               DDLRUN_ARGS_ERROR;
    if (o->np % o->nodes != 0)
        return ddl_errprintf(err, "--nodes %d: %d ranks cannot be split evenly over %d nodes "
                             "(use a divisor of -n)", o->nodes, o->np, o->nodes),
               DDLRUN_ARGS_ERROR;
    if (!o->emulate && (o->spares || o->min_nodes || o->node_timeout_ms))
        return ddl_errprintf(err, "--%s needs --emulate (one agent per emulated node)",
                             o->spares ? "spares" : o->min_nodes ? "min-nodes" : "node-timeout"),
               DDLRUN_ARGS_ERROR;
    if (o->reboot_ms && (!o->emulate || (!o->spares && !o->min_nodes)))
        return ddl_errprintf(err, "--reboot-after needs --emulate and --spares or --min-nodes "
                             "(a node that starts again is taken back as a spare)"),
               DDLRUN_ARGS_ERROR;
    if (o->min_nodes > o->nodes)
        return ddl_errprintf(err, "--min-nodes %d is more than the %d node%s that train "
                             "(--nodes)", o->min_nodes, o->nodes, o->nodes == 1 ? "" : "s"),
               DDLRUN_ARGS_ERROR;
    if ((long)o->np + (long)o->spares * (o->np / o->nodes) > DDLRUN_MAX_RANKS)
        return ddl_errprintf(err, "--spares %d: %d ranks and %d more waiting are more than %d "
                             "tasks", o->spares, o->np, o->spares * (o->np / o->nodes),
                             DDLRUN_MAX_RANKS),
               DDLRUN_ARGS_ERROR;
    if (optind >= argc || argv[optind][0] == '\0')
        return ddl_errprintf(err, "no program given: ddlrun -n N [--] PROG [ARGS...]"),
               DDLRUN_ARGS_ERROR;
    o->prog_argc = argc - optind;
    o->prog_argv = argv + optind;
    return DDLRUN_ARGS_RUN;
}
