/* topo_cmd.c: `ddl-agent topo`, for sysadmins and users before any job
 * runs: the node's packages, NUMA nodes, GPUs (in PCI bus-id order) and
 * NICs as hwloc sees them, and the placement ddl would give N local ranks
 * (GPU, nearest NIC, cores) with the environment each rank would get; as
 * tables or JSON, from the live machine or an hwloc XML export.
 */
#include "config.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "topo.h"
#include "topo_cmd.h"
#include "util.h"

const char ddl_agent_topo_usage[] =
    "       ddl-agent topo [--input FILE.xml] [--ranks N] [--gpus LIST] [--cpus LIST] [--json]\n";

static const char topo_help[] =
    "usage: ddl-agent topo [--input FILE.xml] [--ranks N] [--gpus LIST] [--cpus LIST] [--json]\n"
    "\n"
    "Print this node's packages, NUMA nodes, GPUs and NICs, and the placement ddl gives N\n"
    "local ranks: each rank's GPU, nearest NIC and cores, and the environment it gets.\n"
    "\n"
    "  -i, --input FILE  read an hwloc XML export (lstopo --of xml) instead of this machine\n"
    "  -n, --ranks N     number of local ranks (1-65536; default: one per granted GPU, or\n"
    "                    one per NUMA node without GPUs)\n"
    "  -g, --gpus LIST   GPUs granted, as indexes in PCI bus-id order or UUIDs (default: from\n"
    "                    SLURM_STEP_GPUS, CUDA_VISIBLE_DEVICES or GPU_DEVICE_ORDINAL on this\n"
    "                    machine; every GPU with --input)\n"
    "  -c, --cpus LIST   PUs the ranks may use, e.g. 0-15,64-79 (default: this process's\n"
    "                    affinity; every PU with --input)\n"
    "  -j, --json        one JSON object instead of tables\n";

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "ddl-agent: topo: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'ddl-agent topo --help'.\n");
    return 2;
}

/* ---------------------------------------------------------------- tables */

#define TABLE_COLS 12

typedef struct {
    int ncols, nrows, cap;
    char **cells; /* nrows * ncols strings */
} table_t;

/* row: append one row of t->ncols cells, given as strings. */
static void row(table_t *t, ...)
{
    va_list ap;
    if (t->nrows == t->cap) {
        int cap = t->cap ? t->cap * 2 : 16;
        char **n = realloc(t->cells, (size_t)cap * (size_t)t->ncols * sizeof *n);
        if (!n)
            return;
        t->cells = n;
        t->cap = cap;
    }
    va_start(ap, t);
    for (int c = 0; c < t->ncols; c++) {
        const char *s = va_arg(ap, const char *);
        t->cells[t->nrows * t->ncols + c] = strdup(s && *s ? s : "-");
    }
    va_end(ap);
    t->nrows++;
}

static void print_table(table_t *t)
{
    int w[TABLE_COLS] = {0};
    for (int r = 0; r < t->nrows; r++)
        for (int c = 0; c < t->ncols; c++) {
            const char *s = t->cells[r * t->ncols + c];
            int l = s ? (int)strlen(s) : 1;
            if (l > w[c])
                w[c] = l;
        }
    for (int r = 0; r < t->nrows; r++) {
        for (int c = 0; c < t->ncols; c++) {
            const char *s = t->cells[r * t->ncols + c];
            if (c == t->ncols - 1)
                printf("%s\n", s ? s : "?");
            else
                printf("%-*s  ", w[c], s ? s : "?");
        }
        for (int c = 0; c < t->ncols; c++)
            free(t->cells[r * t->ncols + c]);
    }
    free(t->cells);
    *t = (table_t){0};
}

/* ---------------------------------------------------------------- JSON */

/* jkv: ", \"key\": \"value\"" (first: no leading comma). */
static void jkv(int first, const char *key, const char *value)
{
    printf("%s\"%s\": ", first ? "" : ", ", key);
    ddl_json_str(stdout, value);
}

static void jki(const char *key, long value)
{
    printf(", \"%s\": %ld", key, value);
}

/* jki_or_null: value, or null when it is negative (unknown). */
static void jki_or_null(const char *key, long value)
{
    if (value < 0)
        printf(", \"%s\": null", key);
    else
        jki(key, value);
}

static void print_json(const ddl_topo_t *t, const ddl_topo_map_t *m, const ddl_topo_env_t *envs)
{
    const ddl_topo_info_t *in = ddl_topo_info(t);
    printf("{");
    jkv(1, "source", in->source);
    printf(", \"live\": %s", in->live ? "true" : "false");
    jkv(0, "hwloc", in->hwloc_version);
    jkv(0, "nvml", in->nvml);
    jki("packages", in->npackages);
    jki("cores", in->ncores);
    jki("pus", in->npus);
    jkv(0, "allowed", in->allowed);
    printf(",\n \"numa_nodes\": [");
    for (int i = 0; i < ddl_topo_numa_count(t); i++) {
        const ddl_topo_numa_t *n = ddl_topo_numa(t, i);
        printf("%s{\"os_index\": %d", i ? ",\n   " : "", n->os_index);
        jki_or_null("package", n->package);
        jkv(0, "cores", n->cores);
        jkv(0, "pus", n->pus);
        jki("memory_mib", (long)n->memory_mib);
        printf("}");
    }
    printf("],\n \"gpu_order\": \"pci_bus_id\",\n \"gpus\": [");
    for (int i = 0; i < ddl_topo_gpu_count(t); i++) {
        const ddl_topo_gpu_t *g = ddl_topo_gpu(t, i);
        char id[16], cls[8];
        snprintf(id, sizeof id, "%04x:%04x", g->vendor_id, g->device_id);
        snprintf(cls, sizeof cls, "%04x", g->class_id);
        printf("%s{\"index\": %d", i ? ",\n   " : "", g->index);
        jkv(0, "pci", g->busid);
        jkv(0, "id", id);
        jkv(0, "class", cls);
        jkv(0, "model", g->model);
        jkv(0, "os_devices", g->osdevs);
        jkv(0, "uuid", g->uuid);
        jki_or_null("nvml_index", g->nvml_index);
        jkv(0, "locality", g->locality);
        jki_or_null("numa", g->numa);
        jki_or_null("package", g->package);
        jkv(0, "cores", g->cores);
        jkv(0, "pus", g->pus);
        printf("}");
    }
    printf("],\n \"nics\": [");
    for (int i = 0; i < ddl_topo_nic_count(t); i++) {
        const ddl_topo_nic_t *n = ddl_topo_nic(t, i);
        char id[16], cls[8];
        snprintf(id, sizeof id, "%04x:%04x", n->vendor_id, n->device_id);
        snprintf(cls, sizeof cls, "%04x", n->class_id);
        printf("%s{\"index\": %d", i ? ",\n   " : "", n->index);
        jkv(0, "pci", n->busid);
        jkv(0, "id", id);
        jkv(0, "class", cls);
        jkv(0, "kind", n->hca ? "high-speed" : "ethernet");
        jkv(0, "name", n->name);
        jkv(0, "netdev", n->netdev);
        jkv(0, "ofdev", n->ofdev);
        jki_or_null("port", n->ofdev[0] ? n->port : -1);
        printf(", \"port_active\": %s", n->port_active < 0 ? "null"
                                        : n->port_active   ? "true"
                                                           : "false");
        jkv(0, "locality", n->locality);
        jki_or_null("numa", n->numa);
        jki_or_null("package", n->package);
        printf("}");
    }
    printf("],\n \"placement\": {\"ranks\": %d", m->nranks);
    jkv(0, "allowed", m->allowed);
    jkv(0, "gpu_grant", m->grant_source);
    jki("gpus_granted", m->ngranted);
    printf(",\n  \"ranks\": [");
    for (int r = 0; r < m->nranks; r++) {
        const ddl_topo_rank_t *rk = &m->ranks[r];
        const ddl_topo_gpu_t *g = rk->gpu >= 0 ? ddl_topo_gpu(t, rk->gpu) : NULL;
        const ddl_topo_nic_t *n = rk->nic >= 0 ? ddl_topo_nic(t, rk->nic) : NULL;
        printf("%s{\"rank\": %d", r ? ",\n   " : "", r);
        jki_or_null("gpu", rk->gpu);
        if (g)
            jkv(0, "gpu_pci", g->busid);
        else
            printf(", \"gpu_pci\": null");
        jki("gpu_ranks", rk->gpu_ranks);
        if (n) {
            jkv(0, "nic", n->name);
            jkv(0, "nic_pci", n->busid);
            jkv(0, "nic_nearness", ddl_topo_rel_str(rk->nic_rel));
        } else {
            printf(", \"nic\": null, \"nic_pci\": null, \"nic_nearness\": null");
        }
        jki_or_null("numa", rk->numa);
        jkv(0, "cores", rk->cores);
        jkv(0, "pus", rk->pus);
        jki("ncores", rk->ncores);
        printf(", \"shared\": %s, \"env\": {", rk->shared ? "true" : "false");
        for (int v = 0; v < envs[r].nvars; v++)
            jkv(v == 0, envs[r].vars[v].name, envs[r].vars[v].value);
        printf("}, \"env_kept\": [");
        for (int v = 0, k = 0; v < envs[r].nvars; v++)
            if (envs[r].vars[v].kept) {
                printf("%s", k++ ? ", " : "");
                ddl_json_str(stdout, envs[r].vars[v].name);
            }
        printf("]}");
    }
    printf("]},\n \"notes\": [");
    int k = 0;
    for (int i = 0; i < m->nnotes; i++) {
        printf("%s", k++ ? ",\n   " : "");
        ddl_json_str(stdout, m->notes[i]);
    }
    for (int r = 0; r < m->nranks; r++)
        if (envs[r].note[0]) {
            printf("%s", k++ ? ",\n   " : "");
            ddl_json_str(stdout, envs[r].note);
        }
    printf("]}\n");
}

/* ---------------------------------------------------------------- text */

static void print_text(const ddl_topo_t *t, const ddl_topo_map_t *m, const ddl_topo_env_t *envs)
{
    const ddl_topo_info_t *in = ddl_topo_info(t);
    table_t tb = {0};
    char a[32], b[32], c[32];

    printf("source: %s (hwloc %s)\n", in->source, in->hwloc_version);
    printf("nvml: %s\n", in->nvml);
    printf("machine: %d package%s, %d NUMA node%s, %d cores, %d PUs; allowed PUs %s\n",
           in->npackages, in->npackages == 1 ? "" : "s", in->nnuma, in->nnuma == 1 ? "" : "s",
           in->ncores, in->npus, in->allowed);

    printf("\nNUMA nodes:\n");
    tb.ncols = 5;
    row(&tb, "NUMA", "package", "cores", "PUs", "memory");
    for (int i = 0; i < ddl_topo_numa_count(t); i++) {
        const ddl_topo_numa_t *n = ddl_topo_numa(t, i);
        snprintf(a, sizeof a, "%d", n->os_index);
        snprintf(b, sizeof b, "%d", n->package);
        snprintf(c, sizeof c, "%llu MiB", (unsigned long long)n->memory_mib);
        row(&tb, a, n->package >= 0 ? b : "-", n->cores, n->pus, c);
    }
    print_table(&tb);

    printf("\nGPUs (numbered in PCI bus-id order, as CUDA_DEVICE_ORDER=PCI_BUS_ID does):");
    if (ddl_topo_gpu_count(t) == 0) {
        printf(" none\n");
    } else {
        printf("\n");
        tb.ncols = 10;
        row(&tb, "#", "PCI", "id", "NUMA", "locality", "cores", "PUs", "nvml", "OS devices",
            "model");
        for (int i = 0; i < ddl_topo_gpu_count(t); i++) {
            const ddl_topo_gpu_t *g = ddl_topo_gpu(t, i);
            char id[16];
            snprintf(a, sizeof a, "%d", g->index);
            snprintf(id, sizeof id, "%04x:%04x", g->vendor_id, g->device_id);
            snprintf(b, sizeof b, "%d", g->numa);
            snprintf(c, sizeof c, "%d", g->nvml_index);
            row(&tb, a, g->busid, id, g->numa >= 0 ? b : "-", g->locality, g->cores, g->pus,
                g->nvml_index >= 0 ? c : "-", g->osdevs, g->model);
        }
        print_table(&tb);
    }

    printf("\nNICs (high-speed adapters are preferred over Ethernet):");
    if (ddl_topo_nic_count(t) == 0) {
        printf(" none\n");
    } else {
        printf("\n");
        tb.ncols = 9;
        row(&tb, "#", "PCI", "id", "kind", "name", "netdev", "port", "NUMA", "locality");
        for (int i = 0; i < ddl_topo_nic_count(t); i++) {
            const ddl_topo_nic_t *n = ddl_topo_nic(t, i);
            char id[16];
            snprintf(a, sizeof a, "%d", n->index);
            snprintf(id, sizeof id, "%04x:%04x", n->vendor_id, n->device_id);
            snprintf(b, sizeof b, "%d%s", n->port,
                     n->port_active == 1   ? " (active)"
                     : n->port_active == 0 ? " (down)"
                                           : "");
            snprintf(c, sizeof c, "%d", n->numa);
            row(&tb, a, n->busid, id, n->hca ? "high-speed" : "ethernet", n->name, n->netdev,
                n->ofdev[0] ? b : "-", n->numa >= 0 ? c : "-", n->locality);
        }
        print_table(&tb);
    }

    printf("\nplacement of %d local rank%s (GPUs: %s; allowed PUs %s):\n", m->nranks,
           m->nranks == 1 ? "" : "s", m->grant_source, m->allowed);
    tb.ncols = 8;
    row(&tb, "rank", "GPU", "GPU PCI", "NIC", "nearness", "NUMA", "cores", "PUs");
    for (int r = 0; r < m->nranks; r++) {
        const ddl_topo_rank_t *rk = &m->ranks[r];
        const ddl_topo_gpu_t *g = rk->gpu >= 0 ? ddl_topo_gpu(t, rk->gpu) : NULL;
        const ddl_topo_nic_t *n = rk->nic >= 0 ? ddl_topo_nic(t, rk->nic) : NULL;
        snprintf(a, sizeof a, "%d", r);
        snprintf(b, sizeof b, "%d", rk->gpu);
        snprintf(c, sizeof c, "%d", rk->numa);
        char *cores = NULL;
        if (asprintf(&cores, "%s%s", rk->cores, rk->shared ? " (shared)" : "") < 0)
            cores = NULL;
        row(&tb, a, g ? b : "-", g ? g->busid : "-", n ? n->name : "-",
            n ? ddl_topo_rel_str(rk->nic_rel) : "-", rk->numa >= 0 ? c : "-",
            cores ? cores : rk->cores, rk->pus);
        free(cores);
    }
    print_table(&tb);

    printf("\nenvironment per rank (variables marked 'kept' are already set here and win):\n");
    for (int r = 0; r < m->nranks; r++) {
        printf("rank %d: cpus=%s", r, envs[r].pus ? envs[r].pus : "-");
        for (int v = 0; v < envs[r].nvars; v++) {
            const ddl_topo_var_t *var = &envs[r].vars[v];
            printf(" %s=%s%s", var->name, var->value, var->kept ? " (kept)" : "");
        }
        printf("\n");
    }

    int k = 0;
    for (int i = 0; i < m->nnotes; i++)
        printf("%s- %s\n", k++ ? "" : "\nnotes:\n", m->notes[i]);
    for (int r = 0; r < m->nranks; r++)
        if (envs[r].note[0])
            printf("%s- %s\n", k++ ? "" : "\nnotes:\n", envs[r].note);
}

/* ---------------------------------------------------------------- command */

int ddl_agent_topo_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"input", required_argument, NULL, 'i'},
        {"ranks", required_argument, NULL, 'n'},
        {"gpus", required_argument, NULL, 'g'},
        {"cpus", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *input = NULL, *gpus = NULL, *cpus = NULL;
    int json = 0, c, nranks = 0;
    long v;
    ddl_error_t err;

    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:i:n:g:c:jh", opts, NULL)) != -1) {
        switch (c) {
        case 'i':
            input = optarg;
            break;
        case 'n':
            if (ddl_parse_long(optarg, 1, 65536, &v) < 0)
                return bad("--ranks: '%s' is not a number of ranks (1-65536)", optarg);
            nranks = (int)v;
            break;
        case 'g':
            gpus = optarg;
            break;
        case 'c':
            if (ddl_topo_cpulist_check(optarg, &err) < 0)
                return bad("--cpus: %s", err.text);
            cpus = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            fputs(topo_help, stdout);
            return 0;
        case ':':
            return bad("%s: missing value", argv[optind - 1]);
        default:
            return bad("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return bad("unexpected argument '%s'", argv[optind]);

    ddl_topo_t *t = ddl_topo_load(input, &err);
    if (!t) {
        ddl_error("%s", err.text);
        return 1;
    }
    ddl_topo_grant_t *grant = malloc(sizeof *grant);
    if (!grant) {
        ddl_error("out of memory");
        ddl_topo_free(t);
        return 1;
    }
    int rc = 0;
    if (gpus)
        rc = ddl_topo_grant_parse(t, "--gpus", gpus, NULL, grant, &err);
    else if (ddl_topo_info(t)->live)
        rc = ddl_topo_grant_from_env(t, grant, &err);
    else
        ddl_topo_grant_all(t, grant);
    if (rc < 0) {
        ddl_error("%s", err.text);
        free(grant);
        ddl_topo_free(t);
        return gpus ? 2 : 1;
    }
    if (nranks == 0) {
        nranks = grant->n;
        if (nranks == 0)
            nranks = ddl_topo_numa_count(t) > 0 ? ddl_topo_numa_count(t) : 1;
    }
    ddl_topo_map_t *m = ddl_topo_assign(t, nranks, cpus, grant, &err);
    free(grant);
    if (!m) {
        ddl_error("%s", err.text);
        ddl_topo_free(t);
        return cpus ? 2 : 1;
    }
    ddl_topo_env_t *envs = calloc((size_t)nranks, sizeof *envs);
    if (!envs) {
        ddl_error("out of memory for %d ranks", nranks);
        ddl_topo_map_free(m);
        ddl_topo_free(t);
        return 1;
    }
    for (int r = 0; r < nranks && rc == 0; r++)
        rc = ddl_topo_rank_env(t, m, r, &envs[r], &err);
    if (rc < 0)
        ddl_error("%s", err.text);
    else if (json)
        print_json(t, m, envs);
    else
        print_text(t, m, envs);
    for (int r = 0; r < nranks; r++)
        ddl_topo_env_clear(&envs[r]);
    free(envs);
    ddl_topo_map_free(m);
    ddl_topo_free(t);
    return rc < 0 ? 1 : 0;
}
