/* agent_args.c: the `ddl-agent serve` command line, built by the launchers
 * and parsed by the agent with the same table of options and ranges (see
 * agent_args.h).
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_args.h"
#include "ddl_limits.h"
#include "sock.h"

#define FD_MAX (1L << 20)
#define PID_MAX (1L << 22)

/* The numeric options: name, getopt letter, range, unit for the message. */
typedef struct {
    const char *name;
    int letter;
    long min, max;
    const char *what; /* "a number of ranks" */
} num_opt_t;

static const num_opt_t nums[] = {
    {"size", 'n', 1, DDL_MAX_RANKS, "a number of ranks"},
    {"ready-fd", 'r', 0, FD_MAX, "a file descriptor"},
    {"parent", 'p', 1, PID_MAX, "a process id"},
    {"node-id", 'N', 0, DDL_MAX_NODES - 1, "a node id"},
    {"nnodes", 'M', 1, DDL_MAX_NODES, "a number of nodes"},
    {"secret-fd", 'S', 0, FD_MAX, "a file descriptor"},
    {"tcp-fd", 'T', 0, FD_MAX, "a file descriptor"},
    {"heartbeat", 'H', DDL_HEARTBEAT_MIN_MS, DDL_HEARTBEAT_MAX_MS,
     "a number of milliseconds"},
    {"restarts", 'R', 0, DDL_MAX_RESTARTS, "a number of restarts"},
    {"crash-loop", 'C', 0, DDL_MAX_RESTARTS, "a number of restarts"},
    {"node-timeout", 'O', DDL_NODE_TIMEOUT_MIN_MS, DDL_NODE_TIMEOUT_MAX_MS,
     "a number of milliseconds"},
    {"spares", 'P', 0, DDL_MAX_NODES, "a number of nodes"},
    {"min-nodes", 'm', 0, DDL_MAX_NODES, "a number of nodes"},
};
#define NNUMS (sizeof nums / sizeof nums[0])

static const num_opt_t *num_opt(int letter)
{
    for (size_t i = 0; i < NNUMS; i++)
        if (nums[i].letter == letter)
            return &nums[i];
    return NULL;
}

/* slot: where a numeric option lives in the struct. */
static void num_get(const ddl_agent_args_t *a, int letter, long *v)
{
    switch (letter) {
    case 'n':
        *v = a->size;
        break;
    case 'r':
        *v = a->ready_fd;
        break;
    case 'p':
        *v = a->parent;
        break;
    case 'N':
        *v = a->node_id;
        break;
    case 'M':
        *v = a->nnodes;
        break;
    case 'S':
        *v = a->secret_fd;
        break;
    case 'T':
        *v = a->tcp_fd;
        break;
    case 'H':
        *v = a->heartbeat_ms;
        break;
    case 'R':
        *v = a->restarts;
        break;
    case 'C':
        *v = a->crash_loop;
        break;
    case 'O':
        *v = a->node_timeout_ms;
        break;
    case 'P':
        *v = a->spares;
        break;
    default:
        *v = a->min_nodes;
        break;
    }
}

static void num_set(ddl_agent_args_t *a, int letter, long v)
{
    switch (letter) {
    case 'n':
        a->size = (uint32_t)v;
        break;
    case 'r':
        a->ready_fd = (int)v;
        break;
    case 'p':
        a->parent = (int)v;
        break;
    case 'N':
        a->node_id = (uint32_t)v;
        break;
    case 'M':
        a->nnodes = (uint32_t)v;
        break;
    case 'S':
        a->secret_fd = (int)v;
        break;
    case 'T':
        a->tcp_fd = (int)v;
        break;
    case 'H':
        a->heartbeat_ms = (int)v;
        break;
    case 'R':
        a->restarts = (uint32_t)v;
        break;
    case 'C':
        a->crash_loop = (uint32_t)v;
        break;
    case 'O':
        a->node_timeout_ms = (int)v;
        break;
    case 'P':
        a->spares = (uint32_t)v;
        break;
    default:
        a->min_nodes = (uint32_t)v;
        break;
    }
}

/* given: whether a numeric option's value is to be checked: not at its
 * "not given" value (-1 for descriptors, 0 for size, parent, heartbeat and
 * node timeout; the others are always in effect). */
static int given(int letter, long v)
{
    switch (letter) {
    case 'r':
    case 'S':
    case 'T':
        return v != -1;
    case 'n':
    case 'p':
    case 'H':
    case 'O':
        return v != 0;
    default:
        return 1;
    }
}

static int bad_num(const num_opt_t *o, const char *text, ddl_error_t *err)
{
    errno = EINVAL;
    return ddl_errprintf(err, "--%s: '%s' is not %s (%ld-%ld)", o->name, text, o->what, o->min,
                         o->max);
}

/* inval: err's message, errno EINVAL, -1. */
static int inval(ddl_error_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int inval(ddl_error_t *err, const char *fmt, ...)
{
    va_list ap;
    char text[sizeof err->text];
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    errno = EINVAL;
    return ddl_errprintf(err, "%s", text);
}

int ddl_agent_host_ok(const char *h)
{
    return *h && strlen(h) <= 63 && !strpbrk(h, " \t\n\"\\");
}

int ddl_agent_rejoin_addr(const char *list, uint32_t n, char *out, size_t len)
{
    const char *p = list;
    for (uint32_t i = 0; i < n && p; i++) {
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    size_t k = p ? strcspn(p, ",") : 0;
    if (!p || k >= len) {
        errno = EINVAL;
        return -1;
    }
    memcpy(out, p, k);
    out[k] = '\0';
    return 0;
}

/* rejoin_ok: a --rejoin list of exactly nnodes entries, each "" or
 * IPv4:port, at least one of them given. */
static int rejoin_ok(const char *list, uint32_t nnodes)
{
    char addr[64];
    struct sockaddr_in sa;
    uint32_t n = 0, given = 0;
    for (const char *p = list; p; p = strchr(p, ','), p = p ? p + 1 : NULL)
        n++;
    for (uint32_t i = 0; i < n; i++) {
        if (ddl_agent_rejoin_addr(list, i, addr, sizeof addr) < 0 ||
            (*addr && ddl_hostport_parse(addr, &sa) < 0))
            return 0;
        given += *addr != '\0';
    }
    return n == nnodes && given > 0;
}

static int ranks_ok(const char *text)
{
    uint32_t *r, n;
    if (ddl_rank_list_parse(text, &r, &n) < 0)
        return 0;
    free(r);
    return 1;
}

int ddl_agent_args_check(const ddl_agent_args_t *a, ddl_error_t *err)
{
    char text[24];
    for (size_t i = 0; i < NNUMS; i++) {
        long v;
        num_get(a, nums[i].letter, &v);
        if (given(nums[i].letter, v) && (v < nums[i].min || v > nums[i].max)) {
            snprintf(text, sizeof text, "%ld", v);
            return bad_num(&nums[i], text, err);
        }
    }
    if (!a->socket || !*a->socket || !a->step || !*a->step || a->size == 0)
        return inval(err, "--socket, --step and --size are required");
    if (a->local_ranks && !ranks_ok(a->local_ranks))
        return inval(err,
                     "--local-ranks: '%s' is not a list of ranks like 0,1,2 (each "
                     "0-%d)",
                     a->local_ranks, DDL_MAX_RANKS - 1);
    if (a->host && !ddl_agent_host_ok(a->host))
        return inval(err,
                     "--host: '%s' is not a node name (1-63 characters, no blanks "
                     "or quotes)",
                     a->host);
    if (a->leader && !*a->leader)
        return inval(err, "--leader: '' is not an IP:PORT address");
    if (a->heartbeat_ms && a->node_timeout_ms && a->heartbeat_ms >= a->node_timeout_ms)
        return inval(err, "--heartbeat %d must be less than --node-timeout %d", a->heartbeat_ms,
                     a->node_timeout_ms);
    if (a->nnodes > 1 && (a->node_id >= a->nnodes || !a->local_ranks || a->secret_fd < 0 ||
                          (a->leader && a->rejoin) ||
                          (a->tcp_fd < 0 && !a->leader && !a->rejoin)))
        return inval(err,
                     "a step on %u nodes needs --node-id below it, --local-ranks, "
                     "--secret-fd and one of --tcp-fd (the leader), --leader or --rejoin",
                     a->nnodes);
    if (a->rejoin && (a->nnodes < 2 || !a->supervise || (!a->spares && !a->min_nodes)))
        return inval(err, "--rejoin: a restarted node is taken back only by a supervised step "
                     "of several nodes with --spares or --min-nodes");
    if (a->rejoin && !rejoin_ok(a->rejoin, a->nnodes))
        return inval(err, "--rejoin: '%.200s' is not %u addresses (IPv4:port or empty, one per "
                     "node, comma-separated, at least one given)", a->rejoin, a->nnodes);
    return 0;
}

int ddl_agent_argv_build(const ddl_agent_args_t *a, ddl_agent_argv_t *out, ddl_error_t *err)
{
    if (ddl_agent_args_check(a, err) < 0)
        return -1;
    int k = 0, nn = 0;
    memset(out, 0, sizeof *out);
#define ARG(s) (out->argv[k++] = (char *)(s))
#define NUM(name, v)                                                   \
    do {                                                               \
        snprintf(out->num[nn], sizeof out->num[nn], "%ld", (long)(v)); \
        ARG("--" name);                                                \
        ARG(out->num[nn++]);                                           \
    } while (0)
    ARG("ddl-agent");
    ARG("serve");
    ARG("--socket");
    ARG(a->socket);
    ARG("--step");
    ARG(a->step);
    NUM("size", a->size);
    if (a->ready_fd >= 0)
        NUM("ready-fd", a->ready_fd);
    if (a->parent)
        NUM("parent", a->parent);
    if (a->nnodes != 1 || a->node_id) {
        NUM("node-id", a->node_id);
        NUM("nnodes", a->nnodes);
    }
    if (a->local_ranks) {
        ARG("--local-ranks");
        ARG(a->local_ranks);
    }
    if (a->secret_fd >= 0)
        NUM("secret-fd", a->secret_fd);
    if (a->tcp_fd >= 0)
        NUM("tcp-fd", a->tcp_fd);
    if (a->leader) {
        ARG("--leader");
        ARG(a->leader);
    }
    if (a->rejoin) {
        ARG("--rejoin");
        ARG(a->rejoin);
    }
    if (a->exit_when_done)
        ARG("--exit-when-done");
    if (a->heartbeat_ms)
        NUM("heartbeat", a->heartbeat_ms);
    if (a->supervise) {
        ARG("--supervise");
        NUM("restarts", a->restarts);
        NUM("crash-loop", a->crash_loop);
    } else {
        if (a->restarts)
            NUM("restarts", a->restarts);
        if (a->crash_loop)
            NUM("crash-loop", a->crash_loop);
    }
    if (a->node_timeout_ms)
        NUM("node-timeout", a->node_timeout_ms);
    if (a->supervise || a->spares)
        NUM("spares", a->spares);
    if (a->supervise || a->min_nodes)
        NUM("min-nodes", a->min_nodes);
    if (a->host) {
        ARG("--host");
        ARG(a->host);
    }
    if (a->ddlrun_names) {
        ARG("--option-names");
        ARG("ddlrun");
    }
#undef NUM
#undef ARG
    out->argv[k] = NULL;
    out->argc = k;
    return 0;
}

int ddl_agent_argv_parse(int argc, char **argv, ddl_agent_args_t *a, ddl_error_t *err)
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
        {"rejoin", required_argument, NULL, 'J'},
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
    int c;
    *a = DDL_AGENT_ARGS_INIT;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:s:t:n:r:p:", opts, NULL)) != -1) {
        const num_opt_t *o = num_opt(c);
        long v;
        if (o) {
            if (ddl_parse_long(optarg, o->min, o->max, &v) < 0)
                return bad_num(o, optarg, err);
            num_set(a, c, v);
            continue;
        }
        switch (c) {
        case 's':
            a->socket = optarg;
            break;
        case 't':
            a->step = optarg;
            break;
        case 'L':
            if (!ranks_ok(optarg)) {
                errno = EINVAL;
                return ddl_errprintf(err,
                                     "--local-ranks: '%s' is not a list of ranks like "
                                     "0,1,2 (each 0-%d)",
                                     optarg, DDL_MAX_RANKS - 1);
            }
            a->local_ranks = optarg;
            break;
        case 'l':
            a->leader = optarg;
            break;
        case 'J':
            a->rejoin = optarg;
            break;
        case 'x':
            a->exit_when_done = 1;
            break;
        case 'V':
            a->supervise = 1;
            break;
        case 'o':
            a->host = optarg;
            break;
        case 'W':
            if (strcmp(optarg, "srun") != 0 && strcmp(optarg, "ddlrun") != 0) {
                errno = EINVAL;
                return ddl_errprintf(err, "--option-names: '%s' is not srun or ddlrun (whose "
                                     "options the reports name)", optarg);
            }
            a->ddlrun_names = optarg[0] == 'd';
            break;
        case ':':
            errno = EINVAL;
            return ddl_errprintf(err, "option '%s' needs a value", argv[optind - 1]);
        default:
            errno = EINVAL;
            return ddl_errprintf(err, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) {
        errno = EINVAL;
        return ddl_errprintf(err, "unexpected argument '%s'", argv[optind]);
    }
    return ddl_agent_args_check(a, err);
}

int ddl_rank_list_parse(const char *text, uint32_t **out, uint32_t *n)
{
    char *copy = strdup(text), *save = NULL;
    uint32_t *r = calloc(strlen(text) / 2 + 1, sizeof *r);
    long v;
    *n = 0;
    if (!copy || !r) {
        free(copy);
        free(r);
        errno = ENOMEM;
        return -1;
    }
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (ddl_parse_long(t, 0, DDL_MAX_RANKS - 1, &v) < 0)
            goto fail;
        r[(*n)++] = (uint32_t)v;
    }
    if (*n == 0 || text[0] == ',' || text[strlen(text) - 1] == ',' || strstr(text, ",,"))
        goto fail;
    free(copy);
    *out = r;
    return 0;
fail:
    free(copy);
    free(r);
    *n = 0;
    errno = EINVAL;
    return -1;
}
