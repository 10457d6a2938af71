/* t_topo.c: topology detection and rank placement (common/topo.c).
 *
 * For each real machine's hwloc XML export (tests/data/topologies, and the
 * five non-redistributable ones from $DDL_TOPOLOGIES_DIR or
 * $top_srcdir/../shared/topologies when present), with one rank per GPU:
 * the GPU count and PCI order, each GPU's locality, each rank's NIC and how
 * near it is, and each rank's cores; the expected values are typed in from
 * the tables of the topologies README, not taken from ddl.  Then the corner
 * cases (management Ethernet nearer than the HCA, a GPU with no NIC on its
 * socket, GPUs sharing a NIC, more and fewer ranks than GPUs, an allowed
 * cpuset smaller than the NUMA node, Slurm-restricted GPU lists), the
 * environment of a placement, input errors, and the live machine (checked
 * against /sys and sched_getaffinity, with the binding applied in a child).
 */
#include "config.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hwloc.h>

#include "topo.h"
#include "../tap.h"

#ifndef DDL_TOP_SRCDIR
#define DDL_TOP_SRCDIR "."
#endif

/* ---------------------------------------------------------------- helpers */

static char data_dir[4096], shared_dir[4096];

static void find_dirs(void)
{
    const char *top = getenv("top_srcdir");
    const char *sh = getenv("DDL_TOPOLOGIES_DIR");
    if (!top || !*top)
        top = DDL_TOP_SRCDIR;
    snprintf(data_dir, sizeof data_dir, "%s/tests/data/topologies", top);
    if (sh && *sh)
        snprintf(shared_dir, sizeof shared_dir, "%s", sh);
    else
        snprintf(shared_dir, sizeof shared_dir, "%s/../shared/topologies", top);
}

/* set_of: a CPU list as a bitmap (caller frees). */
static hwloc_bitmap_t set_of(const char *list)
{
    hwloc_bitmap_t b = hwloc_bitmap_alloc();
    if (list && *list && strcmp(list, "-") != 0)
        hwloc_bitmap_list_sscanf(b, list);
    return b;
}

static int set_eq(const char *a, const char *b)
{
    hwloc_bitmap_t x = set_of(a), y = set_of(b);
    int eq = hwloc_bitmap_isequal(x, y);
    hwloc_bitmap_free(x);
    hwloc_bitmap_free(y);
    return eq;
}

static int set_sub(const char *a, const char *b)
{
    hwloc_bitmap_t x = set_of(a), y = set_of(b);
    int r = !hwloc_bitmap_iszero(x) && hwloc_bitmap_isincluded(x, y);
    hwloc_bitmap_free(x);
    hwloc_bitmap_free(y);
    return r;
}

static int word_in(const char *word, const char *words)
{
    size_t l = strlen(word);
    for (const char *p = words; (p = strstr(p, word)); p += l)
        if ((p == words || p[-1] == ' ') && (p[l] == ' ' || p[l] == '\0'))
            return 1;
    return 0;
}

static int has_note(const ddl_topo_map_t *m, const char *needle)
{
    for (int i = 0; i < m->nnotes; i++)
        if (strstr(m->notes[i], needle))
            return 1;
    return 0;
}

static const ddl_topo_var_t *var(const ddl_topo_env_t *e, const char *name)
{
    for (int i = 0; i < e->nvars; i++)
        if (strcmp(e->vars[i].name, name) == 0)
            return &e->vars[i];
    return NULL;
}

static const char *var_value(const ddl_topo_env_t *e, const char *name)
{
    const ddl_topo_var_t *v = var(e, name);
    return v ? v->value : NULL;
}

static const char *nic_name(const ddl_topo_t *t, const ddl_topo_map_t *m, int r)
{
    return m->ranks[r].nic >= 0 ? ddl_topo_nic(t, m->ranks[r].nic)->name : "-";
}

static ddl_topo_t *load_data(const char *name)
{
    char path[4200];
    ddl_error_t err;
    snprintf(path, sizeof path, "%s/%s", data_dir, name);
    ddl_topo_t *t = ddl_topo_load(path, &err);
    if (!t)
        BAIL_OUT("cannot load %s: %s", path, err.text);
    return t;
}

static ddl_topo_map_t *assign(const ddl_topo_t *t, int n, const char *allowed,
                              const ddl_topo_grant_t *g)
{
    ddl_error_t err;
    ddl_topo_map_t *m = ddl_topo_assign(t, n, allowed, g, &err);
    if (!m)
        BAIL_OUT("placing %d ranks failed: %s", n, err.text);
    return m;
}

static void unset_gpu_env(void)
{
    unsetenv("SLURM_STEP_GPUS");
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("ROCR_VISIBLE_DEVICES");
    unsetenv("GPU_DEVICE_ORDINAL");
}

/* ---------------------------------------------------------------- machines */

typedef struct {
    const char *busid;
    int numa;          /* NUMA P# */
    const char *cores; /* local cores (L#) */
    const char *pus;   /* local PUs (OS P#) */
    const char *nics;  /* the NIC(s) a rank on this GPU may get; "-" none */
    const char *rel;   /* the README column they are in */
} exp_gpu_t;

typedef struct {
    const char *file;
    int shared; /* only in the shared folder (not redistributable) */
    int npackages, nnuma, ncores, npus, ngpus, nnics;
    const char *not_gpu; /* a display-class PCI function that must not be a GPU, or NULL */
    exp_gpu_t gpu[16];
} machine_t;

/* From the topologies README: "Expected affinity per GPU" (NIC: the leftmost
 * non-empty column, high-speed adapters rather than Ethernet) and the
 * counts of each file. */
/* clang-format off */
static const machine_t machines[] = {
    {"coral-lassen.xml", 0, 2, 2, 40, 160, 4, 6, "0002:02:00.0",
     {{"0004:04:00.0", 0, "0-19", "8-87", "mlx5_0 mlx5_1", "numa"},
      {"0004:05:00.0", 0, "0-19", "8-87", "mlx5_0 mlx5_1", "numa"},
      {"0035:03:00.0", 8, "20-39", "96-175", "mlx5_2 mlx5_3", "numa"},
      {"0035:04:00.0", 8, "20-39", "96-175", "mlx5_2 mlx5_3", "numa"}}},
    {"eas-tioga.xml", 0, 1, 4, 64, 128, 8, 5, NULL,
     {{"0000:c1:00.0", 3, "48-55", "48-55,112-119", "hsi0", "numa"},
      {"0000:c6:00.0", 3, "56-63", "56-63,120-127", "hsi0", "host-bridge"},
      {"0000:c9:00.0", 1, "16-23", "16-23,80-87", "hsi1", "numa"},
      {"0000:ce:00.0", 1, "24-31", "24-31,88-95", "hsi1", "host-bridge"},
      {"0000:d1:00.0", 0, "0-7", "0-7,64-71", "hsi2", "numa"},
      {"0000:d6:00.0", 0, "8-15", "8-15,72-79", "hsi2", "host-bridge"},
      {"0000:d9:00.0", 2, "32-39", "32-39,96-103", "hsi3", "numa"},
      {"0000:de:00.0", 2, "40-47", "40-47,104-111", "hsi3", "host-bridge"}}},
    {"g4dnmetal.xml", 0, 2, 2, 48, 96, 8, 2, NULL,
     {{"0000:18:00.0", 0, "0-23", "0-23,48-71", "rdmap197s0", "machine"},
      {"0000:19:00.0", 0, "0-23", "0-23,48-71", "rdmap197s0", "machine"},
      {"0000:35:00.0", 0, "0-23", "0-23,48-71", "rdmap197s0", "machine"},
      {"0000:36:00.0", 0, "0-23", "0-23,48-71", "rdmap197s0", "machine"},
      {"0000:e7:00.0", 1, "24-47", "24-47,72-95", "rdmap197s0", "numa"},
      {"0000:e8:00.0", 1, "24-47", "24-47,72-95", "rdmap197s0", "numa"},
      {"0000:f4:00.0", 1, "24-47", "24-47,72-95", "rdmap197s0", "numa"},
      {"0000:f5:00.0", 1, "24-47", "24-47,72-95", "rdmap197s0", "numa"}}},
    {"epyc-corona-p2.xml", 0, 2, 2, 48, 96, 8, 3, "0000:65:00.0",
     {{"0000:03:00.0", 0, "0-23", "0-23,48-71", "mlx5_0", "machine"},
      {"0000:27:00.0", 0, "0-23", "0-23,48-71", "mlx5_0", "machine"},
      {"0000:43:00.0", 0, "0-23", "0-23,48-71", "mlx5_0", "machine"},
      {"0000:63:00.0", 0, "0-23", "0-23,48-71", "mlx5_0", "machine"},
      {"0000:83:00.0", 1, "24-47", "24-47,72-95", "mlx5_0", "numa"},
      {"0000:a3:00.0", 1, "24-47", "24-47,72-95", "mlx5_0", "numa"},
      {"0000:c3:00.0", 1, "24-47", "24-47,72-95", "mlx5_0", "host-bridge"},
      /* only I350 Ethernet on its host bridge: the HCA of its NUMA node wins */
      {"0000:e3:00.0", 1, "24-47", "24-47,72-95", "mlx5_0", "numa"}}},
    {"nvidiaDGX2.xml", 0, 2, 2, 4, 4, 16, 0, NULL,
     {{"0000:34:00.0", 0, "0-1", "0-1", "-", "-"},
      {"0000:36:00.0", 0, "0-1", "0-1", "-", "-"},
      {"0000:39:00.0", 0, "0-1", "0-1", "-", "-"},
      {"0000:3b:00.0", 0, "0-1", "0-1", "-", "-"},
      {"0000:57:00.0", 0, "0-1", "0-1", "-", "-"},
      {"0000:59:00.0", 0, "0-1", "0-1", "-", "-"},
      {"0000:5c:00.0", 0, "0-1", "0-1", "-", "-"},
      {"0000:5e:00.0", 0, "0-1", "0-1", "-", "-"},
      {"0000:b7:00.0", 1, "2-3", "24-25", "-", "-"},
      {"0000:b9:00.0", 1, "2-3", "24-25", "-", "-"},
      {"0000:bc:00.0", 1, "2-3", "24-25", "-", "-"},
      {"0000:be:00.0", 1, "2-3", "24-25", "-", "-"},
      {"0000:e0:00.0", 1, "2-3", "24-25", "-", "-"},
      {"0000:e2:00.0", 1, "2-3", "24-25", "-", "-"},
      {"0000:e5:00.0", 1, "2-3", "24-25", "-", "-"},
      {"0000:e7:00.0", 1, "2-3", "24-25", "-", "-"}}},
    {"ipa20.xml", 1, 2, 8, 112, 224, 4, 6, "0000:03:00.0",
     {{"0000:4e:00.0", 3, "42-55", "42-55,154-167", "mlx5_0 mlx5_1", "switch"},
      {"0000:5f:00.0", 1, "14-27", "14-27,126-139", "mlx5_2", "switch"},
      {"0000:cb:00.0", 7, "98-111", "98-111,210-223", "mlx5_3", "package"},
      {"0000:db:00.0", 5, "70-83", "70-83,182-195", "mlx5_3", "switch"}}},
    {"topo.jrc0386.xml", 1, 2, 8, 128, 256, 4, 6, "0000:62:00.0",
     {{"0000:03:00.0", 3, "48-63", "48-63,176-191", "mlx5_1", "switch"},
      {"0000:44:00.0", 1, "16-31", "16-31,144-159", "mlx5_0", "switch"},
      {"0000:84:00.0", 7, "112-127", "112-127,240-255", "mlx5_3", "switch"},
      {"0000:c4:00.0", 5, "80-95", "80-95,208-223", "mlx5_2", "switch"}}},
    {"topo.jwc09n003.xml", 1, 2, 2, 40, 80, 4, 6, "0000:02:00.0",
     {{"0000:5d:00.0", 0, "0-19", "0-19,40-59", "mlx5_0", "switch"},
      {"0000:5e:00.0", 0, "0-19", "0-19,40-59", "mlx5_0", "switch"},
      {"0000:88:00.0", 1, "20-39", "20-39,60-79", "mlx5_1", "switch"},
      {"0000:89:00.0", 1, "20-39", "20-39,60-79", "mlx5_1", "switch"}}},
    {"topo.mel2001.xml", 1, 2, 8, 64, 128, 4, 4, "0000:62:00.0",
     {{"0000:03:00.0", 3, "24-31", "24-31,88-95", "mlx5_0", "package"},
      {"0000:44:00.0", 1, "8-15", "8-15,72-79", "mlx5_0", "switch"},
      {"0000:84:00.0", 7, "56-63", "56-63,120-127", "mlx5_1", "switch"},
      {"0000:c3:00.0", 5, "40-47", "40-47,104-111", "mlx5_1", "package"}}},
    {"tuo.SPX.xml", 1, 4, 4, 96, 192, 4, 5, NULL,
     {{"0000:02:00.0", 0, "0-23", "0-23,96-119", "hsi0", "host-bridge"},
      {"0001:02:00.0", 1, "24-47", "24-47,120-143", "hsi1", "host-bridge"},
      {"0002:02:00.0", 2, "48-71", "48-71,144-167", "hsi2", "host-bridge"},
      {"0003:02:00.0", 3, "72-95", "72-95,168-191", "hsi3", "host-bridge"}}},
};
/* clang-format on */

/* check_cores: ranks on GPUs of one locality split its cores among them
 * (disjoint, together all of it), or all share it when there are more ranks
 * than cores. */
static void check_cores(const machine_t *mc, const ddl_topo_map_t *m)
{
    for (int g = 0; g < mc->ngpus; g++) {
        const char *loc = mc->gpu[g].cores;
        int first = 1, nr = 0, ncores;
        for (int k = 0; k < g; k++)
            if (strcmp(mc->gpu[k].cores, loc) == 0)
                first = 0;
        if (!first)
            continue;
        hwloc_bitmap_t all = set_of(loc), uni = hwloc_bitmap_alloc();
        int disjoint = 1, within = 1;
        ncores = hwloc_bitmap_weight(all);
        for (int r = 0; r < m->nranks; r++) {
            if (strcmp(mc->gpu[m->ranks[r].gpu].cores, loc) != 0)
                continue;
            hwloc_bitmap_t c = set_of(m->ranks[r].cores);
            nr++;
            if (hwloc_bitmap_intersects(c, uni))
                disjoint = 0;
            if (!set_sub(m->ranks[r].cores, loc) || !set_sub(m->ranks[r].pus, mc->gpu[g].pus))
                within = 0;
            hwloc_bitmap_or(uni, uni, c);
            hwloc_bitmap_free(c);
        }
        ok(within, "%s: ranks on GPUs local to cores %s get cores and PUs inside them", mc->file,
           loc);
        ok(hwloc_bitmap_isequal(uni, all), "%s: ... and use all of them", mc->file);
        if (nr <= ncores)
            ok(disjoint, "%s: ... without sharing (%d ranks, %d cores)", mc->file, nr, ncores);
        else
            ok(!disjoint, "%s: ... shared, %d ranks on %d cores", mc->file, nr, ncores);
        hwloc_bitmap_free(all);
        hwloc_bitmap_free(uni);
    }
}

static void check_machine(const machine_t *mc, const char *dir)
{
    char path[4200];
    ddl_error_t err;
    snprintf(path, sizeof path, "%s/%s", dir, mc->file);
    if (mc->shared && access(path, R_OK) != 0) {
        skip(1, "%s not found (set DDL_TOPOLOGIES_DIR to the shared topologies folder)", path);
        return;
    }
    ddl_topo_t *t = ddl_topo_load(path, &err);
    ok(t != NULL, "%s loads", mc->file);
    if (!t) {
        diag("%s", err.text);
        return;
    }
    const ddl_topo_info_t *in = ddl_topo_info(t);
    ok(!in->live && in->npackages == mc->npackages && in->nnuma == mc->nnuma &&
           in->ncores == mc->ncores && in->npus == mc->npus,
       "%s: %d packages, %d NUMA nodes, %d cores, %d PUs", mc->file, mc->npackages, mc->nnuma,
       mc->ncores, mc->npus);
    is(ddl_topo_gpu_count(t), mc->ngpus, "%s: %d GPUs (NVIDIA/AMD, class 0300/0302/0380/1200)",
       mc->file, mc->ngpus);
    is(ddl_topo_nic_count(t), mc->nnics, "%s: %d NICs (class 02xx)", mc->file, mc->nnics);
    if (ddl_topo_gpu_count(t) != mc->ngpus) {
        ddl_topo_free(t);
        return;
    }
    int order = 1, local = 1;
    for (int g = 0; g < mc->ngpus; g++) {
        const ddl_topo_gpu_t *gp = ddl_topo_gpu(t, g);
        if (strcmp(gp->busid, mc->gpu[g].busid) != 0) {
            order = 0;
            diag("GPU %d is %s, expected %s", g, gp->busid, mc->gpu[g].busid);
        }
        if (gp->numa != mc->gpu[g].numa || !set_eq(gp->cores, mc->gpu[g].cores) ||
            !set_eq(gp->pus, mc->gpu[g].pus)) {
            local = 0;
            diag("GPU %d: NUMA %d cores %s PUs %s, expected NUMA %d cores %s PUs %s", g, gp->numa,
                 gp->cores, gp->pus, mc->gpu[g].numa, mc->gpu[g].cores, mc->gpu[g].pus);
        }
        if (mc->not_gpu && strcmp(gp->busid, mc->not_gpu) == 0)
            order = 0;
    }
    ok(order, "%s: GPUs in PCI bus-id order%s%s", mc->file,
       mc->not_gpu ? ", without the BMC VGA " : "", mc->not_gpu ? mc->not_gpu : "");
    ok(local, "%s: each GPU's NUMA node, local cores and PUs", mc->file);

    unset_gpu_env();
    ddl_topo_map_t *m = assign(t, mc->ngpus, NULL, NULL);
    int gpus = 1, nics = 1, rels = 1, numas = 1;
    for (int r = 0; r < m->nranks; r++) {
        const ddl_topo_rank_t *rk = &m->ranks[r];
        const char *nic = nic_name(t, m, r);
        const char *rel = rk->nic >= 0 ? ddl_topo_rel_str(rk->nic_rel) : "-";
        if (rk->gpu != r || rk->gpu_ranks != 1)
            gpus = 0;
        if (!word_in(nic, mc->gpu[r].nics)) {
            nics = 0;
            diag("rank %d (GPU %s) got NIC %s, expected one of: %s", r, mc->gpu[r].busid, nic,
                 mc->gpu[r].nics);
        }
        if (strcmp(rel, mc->gpu[r].rel) != 0) {
            rels = 0;
            diag("rank %d: NIC nearness %s, expected %s", r, rel, mc->gpu[r].rel);
        }
        if (rk->numa != mc->gpu[r].numa)
            numas = 0;
    }
    ok(gpus, "%s: rank r gets GPU r, alone", mc->file);
    ok(nics, "%s: each rank's NIC is the expected nearest one", mc->file);
    ok(rels, "%s: ... at the expected nearness", mc->file);
    ok(numas, "%s: each rank's cores come from its GPU's NUMA node", mc->file);
    check_cores(mc, m);
    ddl_topo_map_free(m);
    ddl_topo_free(t);
}

/* ---------------------------------------------------------------- corner cases */

static int nic_index(const ddl_topo_t *t, const char *name)
{
    for (int i = 0; i < ddl_topo_nic_count(t); i++)
        if (strcmp(ddl_topo_nic(t, i)->name, name) == 0 ||
            strcmp(ddl_topo_nic(t, i)->netdev, name) == 0)
            return i;
    return -1;
}

static void test_no_nic_nearby(void)
{
    ddl_topo_t *t = load_data("epyc-corona-p2.xml");
    int eno1 = nic_index(t, "eno1"), hca = nic_index(t, "mlx5_0");
    ok(eno1 >= 0 && hca >= 0 && !ddl_topo_nic(t, eno1)->hca && ddl_topo_nic(t, hca)->hca,
       "corona: eno1 is Ethernet, mlx5_0 high-speed");
    is(ddl_topo_gpu_nic_rel(t, 7, eno1), DDL_TOPO_REL_HOSTBRIDGE,
       "corona GPU 7 shares its host bridge with management Ethernet eno1");
    is(ddl_topo_gpu_nic_rel(t, 7, hca), DDL_TOPO_REL_NUMA,
       "... and only its NUMA node with mlx5_0");
    unset_gpu_env();
    ddl_topo_map_t *m = assign(t, 8, NULL, NULL);
    is_str(nic_name(t, m, 7), "mlx5_0", "GPU 7's rank gets the HCA, not the nearer Ethernet");
    is_str(nic_name(t, m, 0), "mlx5_0", "GPU 0 (no NIC on its socket) gets the cross-socket HCA");
    is(m->ranks[0].nic_rel, DDL_TOPO_REL_MACHINE, "... reported as on another package");
    ok(has_note(m, "ranks 0-3: no high-speed network adapter in the package of their GPU"),
       "a note names the ranks without a NIC on their socket");
    ddl_topo_map_free(m);
    ddl_topo_free(t);

    t = load_data("eas-tioga.xml");
    int ens2 = nic_index(t, "ens2"), hsi2 = nic_index(t, "hsi2");
    is(ddl_topo_gpu_nic_rel(t, 4, ens2), DDL_TOPO_REL_NUMA, "tioga GPU 4: ens2 in its NUMA node");
    is(ddl_topo_gpu_nic_rel(t, 4, hsi2), DDL_TOPO_REL_NUMA, "tioga GPU 4: hsi2 in its NUMA node");
    m = assign(t, 8, NULL, NULL);
    is_str(nic_name(t, m, 4), "hsi2", "tioga GPU 4 gets Slingshot hsi2, not Ethernet ens2");
    ddl_topo_map_free(m);
    ddl_topo_free(t);
}

static void test_shared_nic(void)
{
    ddl_topo_t *t = load_data("eas-tioga.xml");
    ddl_topo_env_t e0, e1;
    ddl_error_t err;
    unset_gpu_env();
    unsetenv("UCX_NET_DEVICES");
    unsetenv("NCCL_SOCKET_IFNAME");
    ddl_topo_map_t *m = assign(t, 8, NULL, NULL);
    ok(m->ranks[0].nic == m->ranks[1].nic && strcmp(nic_name(t, m, 0), "hsi0") == 0,
       "tioga: GPUs 0 and 1 share NIC hsi0");
    ok(ddl_topo_rank_env(t, m, 0, &e0, &err) == 0 && ddl_topo_rank_env(t, m, 1, &e1, &err) == 0,
       "environment of ranks 0 and 1");
    is_str(var_value(&e0, "UCX_NET_DEVICES"), "hsi0", "rank 0: UCX_NET_DEVICES=hsi0");
    is_str(var_value(&e1, "UCX_NET_DEVICES"), "hsi0", "rank 1: UCX_NET_DEVICES=hsi0");
    is_str(var_value(&e1, "NCCL_SOCKET_IFNAME"), "=hsi0",
           "a NIC without verbs device: NCCL_SOCKET_IFNAME==hsi0");
    ok(var(&e1, "NCCL_IB_HCA") == NULL, "... and no NCCL_IB_HCA");
    is_str(var_value(&e1, "ROCR_VISIBLE_DEVICES"), "1", "AMD GPU 1: ROCR_VISIBLE_DEVICES=1");
    ok(var(&e1, "CUDA_VISIBLE_DEVICES") == NULL && var(&e1, "CUDA_DEVICE_ORDER") == NULL,
       "... and no CUDA variables");
    is_str(var_value(&e1, "OMP_NUM_THREADS"), "8", "OMP_NUM_THREADS=8 (one L3 of 8 cores)");
    ok(e1.pus && set_eq(e1.pus, "56-63,120-127"), "rank 1's CPU mask is 56-63,120-127");
    ddl_topo_env_clear(&e0);
    ddl_topo_env_clear(&e1);
    ddl_topo_map_free(m);
    ddl_topo_free(t);
}

static void test_more_ranks_than_gpus(void)
{
    ddl_topo_t *t = load_data("g4dnmetal.xml");
    unset_gpu_env();
    ddl_topo_map_t *m = assign(t, 16, NULL, NULL);
    int blocks = 1, three = 1;
    hwloc_bitmap_t uni = hwloc_bitmap_alloc();
    int disjoint = 1;
    for (int r = 0; r < 16; r++) {
        if (m->ranks[r].gpu != r / 2 || m->ranks[r].gpu_ranks != 2 ||
            strcmp(m->ranks[r].gpu_token, (char[]){(char)('0' + r / 2), 0}) != 0)
            blocks = 0;
        if (m->ranks[r].ncores != 3 || m->ranks[r].shared)
            three = 0;
        hwloc_bitmap_t c = set_of(m->ranks[r].cores);
        if (hwloc_bitmap_intersects(c, uni))
            disjoint = 0;
        hwloc_bitmap_or(uni, uni, c);
        hwloc_bitmap_free(c);
    }
    ok(blocks, "g4dn, 16 ranks: ranks 2g and 2g+1 share GPU g (CUDA_VISIBLE_DEVICES=g)");
    ok(three && disjoint, "... each has 3 cores of its own (24 per socket / 8 ranks)");
    ok(set_eq(m->ranks[0].cores, "0-2") && set_eq(m->ranks[15].cores, "45-47"),
       "... rank 0 on cores 0-2, rank 15 on 45-47");
    ok(has_note(m, "16 ranks on 8 GPUs: up to 2 ranks share a GPU"), "the sharing is reported");
    hwloc_bitmap_free(uni);
    ddl_topo_map_free(m);

    m = assign(t, 2, NULL, NULL);
    ok(m->ranks[0].gpu == 0 && m->ranks[1].gpu == 4, "g4dn, 2 ranks: GPUs 0 and 4 (spread)");
    ok(set_eq(m->ranks[0].cores, "0-23") && set_eq(m->ranks[1].pus, "24-47,72-95"),
       "... each with its whole socket");
    ok(has_note(m, "GPUs 1-3,5-7 stay unused"), "the unused GPUs are reported");
    ddl_topo_map_free(m);
    ddl_topo_free(t);

    t = load_data("nvidiaDGX2.xml");
    m = assign(t, 32, NULL, NULL);
    int shared = 1;
    for (int r = 0; r < 32; r++)
        if (!m->ranks[r].shared || !set_eq(m->ranks[r].pus, r < 16 ? "0-1" : "24-25"))
            shared = 0;
    ok(shared, "DGX-2, 32 ranks on 4 cores: ranks share their socket's PUs, marked shared");
    is(m->ranks[31].gpu, 15, "... rank 31 on GPU 15");
    ok(has_note(m, "ranks 0-15 share PUs 0-1: 16 ranks on 2 cores (oversubscribed)"),
       "the oversubscription is reported");
    ok(m->ranks[0].nic == -1 && has_note(m, "no usable network adapter"),
       "no NIC at all: none assigned, and reported");
    ddl_topo_env_t e;
    ddl_error_t err;
    unsetenv("UCX_NET_DEVICES");
    ok(ddl_topo_rank_env(t, m, 3, &e, &err) == 0 && var(&e, "UCX_NET_DEVICES") == NULL &&
           var(&e, "NCCL_IB_HCA") == NULL && var(&e, "NCCL_SOCKET_IFNAME") == NULL,
       "... and no UCX/NCCL device variables");
    ddl_topo_env_clear(&e);
    ddl_topo_map_free(m);
    ddl_topo_free(t);
}

static void test_allowed(void)
{
    ddl_topo_t *t = load_data("g4dnmetal.xml");
    ddl_topo_grant_t g;
    ddl_error_t err;
    ok(ddl_topo_grant_parse(t, "--gpus", "0,1", NULL, &g, &err) == 0 && g.n == 2, "grant GPUs 0,1");
    ddl_topo_map_t *m = assign(t, 2, "0-3,48-51", &g);
    ok(set_eq(m->ranks[0].pus, "0-1,48-49") && set_eq(m->ranks[1].pus, "2-3,50-51"),
       "allowed 0-3,48-51 (4 of NUMA 0's 24 cores): 2 cores each");
    ok(m->ranks[0].ncores == 2 && set_eq(m->ranks[1].cores, "2-3"), "... cores 0-1 and 2-3");
    is_str(m->allowed, "0-3,48-51", "the map records the allowed PUs");
    ddl_topo_map_free(m);

    ok(ddl_topo_grant_parse(t, "--gpus", "0", NULL, &g, &err) == 0, "grant GPU 0");
    m = assign(t, 1, "24-47,72-95", &g);
    ok(set_eq(m->ranks[0].pus, "24-47,72-95") && m->ranks[0].gpu == 0,
       "GPU 0 with only the other socket allowed: rank keeps GPU 0, gets the allowed PUs");
    ok(has_note(m, "no allowed PU in the GPU's package"), "... and the fall-back is reported");
    ddl_topo_map_free(m);
    ddl_topo_free(t);

    t = load_data("eas-tioga.xml");
    ok(ddl_topo_grant_parse(t, "--gpus", "0,1", NULL, &g, &err) == 0, "tioga: grant GPUs 0,1");
    m = assign(t, 2, "48-49,112-113", &g);
    ok(set_eq(m->ranks[0].pus, "48,112") && set_eq(m->ranks[1].pus, "49,113"),
       "tioga, 2 cores of NUMA 3 allowed: one core (2 PUs) each");
    ddl_topo_map_free(m);
    m = assign(t, 2, "48,112", &g);
    ok(m->ranks[0].shared && m->ranks[1].shared && set_eq(m->ranks[1].pus, "48,112"),
       "one allowed core for two ranks: shared");
    ddl_topo_map_free(m);

    errno = 0;
    ok(ddl_topo_assign(t, 2, "0-3,x", &g, &err) == NULL && errno == EINVAL &&
           strstr(err.text, "'0-3,x' is not a CPU list"),
       "a bad allowed list is refused");
    errno = 0;
    ok(ddl_topo_assign(t, 2, "120-130", &g, &err) == NULL && errno == EINVAL &&
           strstr(err.text, "names PUs 128-130"),
       "PUs the machine lacks are refused, named");
    errno = 0;
    ok(ddl_topo_assign(t, 0, NULL, &g, &err) == NULL && errno == EINVAL, "0 ranks is refused");
    ddl_topo_free(t);
}

static void test_grant(void)
{
    ddl_topo_t *t = load_data("g4dnmetal.xml");
    ddl_topo_grant_t g;
    ddl_error_t err;
    ddl_topo_env_t e;

    unset_gpu_env();
    setenv("SLURM_STEP_GPUS", "5,6", 1);
    setenv("CUDA_VISIBLE_DEVICES", "0,1", 1); /* Slurm with device cgroups */
    ok(ddl_topo_grant_from_env(t, &g, &err) == 0 && g.n == 2 && g.gpu[0] == 5 && g.gpu[1] == 6,
       "SLURM_STEP_GPUS=5,6 grants GPUs 5 and 6");
    ok(strcmp(g.token[0], "0") == 0 && strcmp(g.token[1], "1") == 0,
       "... seen by CUDA as 0 and 1 (CUDA_VISIBLE_DEVICES=0,1)");
    ok(strstr(g.source, "SLURM_STEP_GPUS=5,6") != NULL, "... and the source is named");
    ddl_topo_map_t *m = assign(t, 2, NULL, &g);
    ok(strcmp(ddl_topo_gpu(t, m->ranks[0].gpu)->busid, "0000:e8:00.0") == 0 &&
           strcmp(ddl_topo_gpu(t, m->ranks[1].gpu)->busid, "0000:f4:00.0") == 0,
       "ranks 0 and 1 on 0000:e8:00.0 and 0000:f4:00.0");
    ok(set_sub(m->ranks[0].cores, "24-47") && set_sub(m->ranks[1].cores, "24-47") &&
           m->ranks[0].ncores == 12,
       "... with 12 cores each of socket 1");
    ok(ddl_topo_rank_env(t, m, 1, &e, &err) == 0, "rank 1's environment");
    is_str(var_value(&e, "CUDA_VISIBLE_DEVICES"), "1", "rank 1: CUDA_VISIBLE_DEVICES=1");
    ok(var(&e, "CUDA_VISIBLE_DEVICES") && !var(&e, "CUDA_VISIBLE_DEVICES")->kept,
       "... narrowing the granted list, not kept");
    is_str(var_value(&e, "DDL_BIND_GPU"), "0000:f4:00.0", "DDL_BIND_GPU names its PCI bus id");
    ddl_topo_env_clear(&e);
    ddl_topo_map_free(m);

    unsetenv("SLURM_STEP_GPUS");
    setenv("CUDA_VISIBLE_DEVICES", "4,7", 1);
    ok(ddl_topo_grant_from_env(t, &g, &err) == 0 && g.n == 2 && g.gpu[1] == 7 &&
           strcmp(g.token[1], "7") == 0,
       "CUDA_VISIBLE_DEVICES=4,7 alone grants GPUs 4 and 7");
    setenv("CUDA_VISIBLE_DEVICES", "GPU-e5f1ef2b-71b8-2963-d316-108ad8712874", 1);
    ok(ddl_topo_grant_from_env(t, &g, &err) == 0 && g.n == 1 && g.gpu[0] == 1 &&
           strcmp(g.token[0], "GPU-e5f1ef2b-71b8-2963-d316-108ad8712874") == 0,
       "a UUID (from the XML's NVML device) selects GPU 1 and is kept as the token");
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    ok(ddl_topo_grant_from_env(t, &g, &err) == 0 && g.n == 0,
       "CUDA_VISIBLE_DEVICES='' grants none");
    m = assign(t, 4, NULL, &g);
    ok(m->ranks[0].gpu == -1 && m->ranks[3].gpu == -1 && has_note(m, "grants no GPU"),
       "... CPU-only placement, reported");
    ok(set_eq(m->ranks[0].cores, "0-11") && set_eq(m->ranks[1].cores, "12-23") &&
           set_eq(m->ranks[2].cores, "24-35") && set_eq(m->ranks[3].cores, "36-47"),
       "... 4 ranks spread over both NUMA nodes, 12 cores each");
    ok(strcmp(nic_name(t, m, 3), "rdmap197s0") == 0 && m->ranks[3].nic_rel == DDL_TOPO_REL_NUMA,
       "... rank 3 (NUMA 1) gets EFA in its NUMA node");
    ddl_topo_map_free(m);
    unsetenv("CUDA_VISIBLE_DEVICES");
    setenv("GPU_DEVICE_ORDINAL", "3", 1);
    ok(ddl_topo_grant_from_env(t, &g, &err) == 0 && g.n == 1 && g.gpu[0] == 3,
       "GPU_DEVICE_ORDINAL=3 grants GPU 3");
    unset_gpu_env();
    ok(ddl_topo_grant_from_env(t, &g, &err) == 0 && g.n == 8, "no variable: every GPU");

    static const struct {
        const char *list, *needle;
        int e;
    } bad[] = {
        {"9", "GPU 9 does not exist (this node has 8 GPUs, 0-7 in PCI bus-id order)", ERANGE},
        {"1,1", "names GPU 1 twice", EINVAL},
        {"1,,2", "is not a list of GPUs", EINVAL},
        {"MIG-1234", "'MIG-1234' is neither a GPU index nor a GPU UUID", EINVAL},
        {"GPU-00000000-0000-0000-0000-000000000000", "no GPU of this node has UUID", EINVAL},
        {"-1", "'-1' is neither", EINVAL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *list = bad[i].list, *needle = bad[i].needle;
        setenv("SLURM_STEP_GPUS", list, 1);
        errno = 0;
        err.text[0] = '\0';
        int rc = ddl_topo_grant_from_env(t, &g, &err);
        int code = errno, found = strstr(err.text, needle) != NULL;
        ok(rc == -1 && code == bad[i].e && found && strstr(err.text, "SLURM_STEP_GPUS"),
           "a bad SLURM_STEP_GPUS is refused: %s", needle);
        if (!found)
            diag("message: %s", err.text);
    }
    unset_gpu_env();
    ddl_topo_free(t);

    t = load_data("eas-tioga.xml");
    setenv("ROCR_VISIBLE_DEVICES", "2,3", 1);
    setenv("CUDA_VISIBLE_DEVICES", "0", 1); /* ignored on AMD GPUs */
    ok(ddl_topo_grant_from_env(t, &g, &err) == 0 && g.n == 2 && g.gpu[0] == 2 &&
           strstr(g.source, "ROCR_VISIBLE_DEVICES"),
       "AMD: ROCR_VISIBLE_DEVICES=2,3 is the grant");
    unset_gpu_env();
    ddl_topo_free(t);
}

static void test_env(void)
{
    ddl_topo_t *t = load_data("coral-lassen.xml");
    ddl_topo_env_t e;
    ddl_error_t err;
    unset_gpu_env();
    unsetenv("UCX_NET_DEVICES");
    unsetenv("NCCL_IB_HCA");
    unsetenv("OMP_NUM_THREADS");
    unsetenv("CUDA_DEVICE_ORDER");
    ddl_topo_map_t *m = assign(t, 4, NULL, NULL);
    ok(strcmp(nic_name(t, m, 0), nic_name(t, m, 1)) != 0 &&
           strcmp(nic_name(t, m, 2), nic_name(t, m, 3)) != 0,
       "lassen: the two GPUs of a socket get different HCAs (spread over equals)");
    ok(ddl_topo_rank_env(t, m, 0, &e, &err) == 0, "rank 0's environment");
    is_str(var_value(&e, "CUDA_VISIBLE_DEVICES"), "0", "CUDA_VISIBLE_DEVICES=0");
    is_str(var_value(&e, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID", "CUDA_DEVICE_ORDER=PCI_BUS_ID");
    is_str(var_value(&e, "UCX_NET_DEVICES"), "mlx5_0:1", "UCX_NET_DEVICES=mlx5_0:1");
    is_str(var_value(&e, "NCCL_IB_HCA"), "=mlx5_0:1", "NCCL_IB_HCA==mlx5_0:1 (exact match)");
    is_str(var_value(&e, "OMP_NUM_THREADS"), "10", "OMP_NUM_THREADS=10 (20 cores, 2 GPUs)");
    is_str(var_value(&e, "DDL_BIND_NIC"), "mlx5_0", "DDL_BIND_NIC=mlx5_0");
    ok(e.pus && set_eq(e.pus, "8-47"), "CPU mask 8-47 (cores 0-9, SMT4)");
    int none_kept = 1;
    for (int i = 0; i < e.nvars; i++)
        none_kept &= !e.vars[i].kept;
    ok(none_kept, "nothing is marked kept in a clean environment");
    ddl_topo_env_clear(&e);

    setenv("UCX_NET_DEVICES", "mlx5_3:1", 1);
    setenv("OMP_NUM_THREADS", "4", 1);
    setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3", 1);
    ok(ddl_topo_rank_env(t, m, 1, &e, &err) == 0, "rank 1's environment with user settings");
    ok(var(&e, "UCX_NET_DEVICES")->kept && var(&e, "OMP_NUM_THREADS")->kept,
       "the user's UCX_NET_DEVICES and OMP_NUM_THREADS win (kept)");
    ok(!var(&e, "NCCL_IB_HCA")->kept && !var(&e, "CUDA_VISIBLE_DEVICES")->kept,
       "NCCL_IB_HCA (not set) and CUDA_VISIBLE_DEVICES (narrowed) are not kept");
    ddl_topo_env_clear(&e);
    unsetenv("UCX_NET_DEVICES");
    unsetenv("OMP_NUM_THREADS");
    unsetenv("CUDA_VISIBLE_DEVICES");

    errno = 0;
    ok(ddl_topo_rank_env(t, m, 4, &e, &err) == -1 && errno == ERANGE, "rank 4 of 4 is refused");
    ddl_error_t err2;
    ok(ddl_topo_map_set_cpus(t, m, 2, "96-99", &err2) == 0 && set_eq(m->ranks[2].cores, "20") &&
           m->ranks[2].ncores == 1,
       "set_cpus: PUs 96-99 are core 20");
    errno = 0;
    ok(ddl_topo_map_set_cpus(t, m, 2, "0-7", &err2) == -1 && errno == EINVAL &&
           strstr(err2.text, "PUs 0-7 are not allowed") && set_eq(m->ranks[2].pus, "96-99"),
       "set_cpus: PUs outside the allowed set are refused, the map unchanged");
    ddl_topo_map_free(m);
    ddl_topo_free(t);

    t = load_data("g4dnmetal.xml");
    m = assign(t, 8, NULL, NULL);
    ok(ddl_topo_rank_env(t, m, 5, &e, &err) == 0 &&
           strcmp(var_value(&e, "UCX_NET_DEVICES"), "rdmap197s0:1") == 0,
       "g4dn: UCX_NET_DEVICES=rdmap197s0:1 (EFA verbs device, active port 1)");
    ok(var(&e, "NCCL_SOCKET_IFNAME") == NULL, "... not the ENA's eth0");
    ddl_topo_env_clear(&e);
    ddl_topo_map_free(m);
    ddl_topo_free(t);
}

static void test_errors(void)
{
    ddl_error_t err;
    char path[4200];
    snprintf(path, sizeof path, "%s/no-such-file.xml", data_dir);
    errno = 0;
    ok(ddl_topo_load(path, &err) == NULL && errno == ENOENT && strstr(err.text, path),
       "a missing XML file: ENOENT, named");
    static const char junk[] = "<topology version=\"2.0\"><object type=\"Bogus\"/>";
    errno = 0;
    ok(ddl_topo_load_xml_buffer(junk, sizeof junk - 1, "junk", &err) == NULL && errno != 0 &&
           strstr(err.text, "cannot load the hwloc XML junk"),
       "an invalid XML text is refused with a message");
    ok(ddl_topo_cpulist_check("0-3,8,10-11", &err) == 0, "0-3,8,10-11 is a CPU list");
    static const char *badlists[] = {"", "3-1", "a", "1,", ",1", "1-", "70000", "1 2", "0x3"};
    for (size_t i = 0; i < sizeof badlists / sizeof badlists[0]; i++) {
        errno = 0;
        ok(ddl_topo_cpulist_check(badlists[i], &err) == -1 && errno == EINVAL,
           "'%s' is not a CPU list", badlists[i]);
    }
    is_str(ddl_topo_rel_str(DDL_TOPO_REL_HOSTBRIDGE), "host-bridge", "nearness names");
}

/* ---------------------------------------------------------------- live machine */

static unsigned read_hex(const char *dir, const char *file)
{
    char p[600];
    unsigned v = 0;
    snprintf(p, sizeof p, "/sys/bus/pci/devices/%s/%s", dir, file);
    FILE *f = fopen(p, "r");
    if (f) {
        if (fscanf(f, "%x", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

static void test_live(void)
{
    ddl_error_t err;
    ddl_topo_t *t = ddl_topo_load(NULL, &err);
    ok(t != NULL, "this machine's topology loads");
    if (!t) {
        diag("%s", err.text);
        return;
    }
    const ddl_topo_info_t *in = ddl_topo_info(t);
    ok(in->live && strcmp(in->source, "this machine") == 0, "it is marked live");

    int gpus = 0, nics = 0;
    DIR *d = opendir("/sys/bus/pci/devices");
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.')
                continue;
            unsigned cls = read_hex(de->d_name, "class") >> 8, ven = read_hex(de->d_name, "vendor");
            if ((ven == 0x10de || ven == 0x1002) &&
                (cls == 0x0300 || cls == 0x0302 || cls == 0x0380 || cls == 0x1200))
                gpus++;
            if ((cls >> 8) == 0x02)
                nics++;
        }
        closedir(d);
        is(ddl_topo_gpu_count(t), gpus, "GPU count matches /sys/bus/pci (%d)", gpus);
        is(ddl_topo_nic_count(t), nics, "NIC count matches /sys/bus/pci (%d)", nics);
    } else {
        skip(2, "no /sys/bus/pci/devices to compare with");
    }

    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (nvml) {
        ok(strncmp(in->nvml, "loaded", 6) == 0, "NVML is loadable here and was used: %s", in->nvml);
        dlclose(nvml);
    } else {
        ok(strncmp(in->nvml, "not available", 13) == 0,
           "NVML is absent here and skipped cleanly: %s", in->nvml);
    }

    cpu_set_t mine;
    CPU_ZERO(&mine);
    sched_getaffinity(0, sizeof mine, &mine);
    int ncpu = CPU_COUNT(&mine);
    unset_gpu_env();
    unsetenv("OMP_NUM_THREADS");
    ddl_topo_map_t *m = assign(t, 2, NULL, NULL);
    int within = 1;
    for (int r = 0; r < 2; r++) {
        hwloc_bitmap_t b = set_of(m->ranks[r].pus);
        for (int i = hwloc_bitmap_first(b); i >= 0; i = hwloc_bitmap_next(b, i))
            if (i >= CPU_SETSIZE || !CPU_ISSET(i, &mine))
                within = 0;
        hwloc_bitmap_free(b);
    }
    ok(within, "2 live ranks stay within this process's affinity");
    if (ncpu >= 2) {
        hwloc_bitmap_t a = set_of(m->ranks[0].pus), b = set_of(m->ranks[1].pus);
        ok(!hwloc_bitmap_intersects(a, b), "... on different PUs (%s and %s)", m->ranks[0].pus,
           m->ranks[1].pus);
        hwloc_bitmap_free(a);
        hwloc_bitmap_free(b);
    } else {
        skip(1, "only %d CPU allowed: two ranks cannot get different cores", ncpu);
    }

    ddl_topo_env_t e;
    ok(ddl_topo_rank_env(t, m, 1, &e, &err) == 0, "rank 1's environment");
    pid_t pid = fork();
    if (pid == 0) {
        ddl_error_t cerr;
        cpu_set_t got;
        if (ddl_topo_env_apply(&e, &cerr) < 0)
            _exit(2);
        CPU_ZERO(&got);
        sched_getaffinity(0, sizeof got, &got);
        hwloc_bitmap_t want = set_of(e.pus);
        for (int i = 0; i < CPU_SETSIZE; i++)
            if (!!CPU_ISSET(i, &got) != hwloc_bitmap_isset(want, (unsigned)i))
                _exit(3);
        const char *omp = getenv("OMP_NUM_THREADS"), *cpus = getenv("DDL_BIND_CPUS");
        if (!omp || strcmp(omp, var_value(&e, "OMP_NUM_THREADS")) != 0)
            _exit(4);
        if (!cpus || strcmp(cpus, e.pus) != 0)
            _exit(5);
        _exit(0);
    }
    int st = -1;
    waitpid(pid, &st, 0);
    ok(WIFEXITED(st) && WEXITSTATUS(st) == 0,
       "applied in a child: its affinity is %s, OMP_NUM_THREADS and DDL_BIND_CPUS are set "
       "(child status %d)",
       e.pus, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    ddl_topo_env_clear(&e);
    ddl_topo_map_free(m);
    ddl_topo_free(t);
}

int main(void)
{
    plan(NO_PLAN);
    find_dirs();
    for (size_t i = 0; i < sizeof machines / sizeof machines[0]; i++)
        check_machine(&machines[i], machines[i].shared ? shared_dir : data_dir);
    test_no_nic_nearby();
    test_shared_nic();
    test_more_ranks_than_gpus();
    test_allowed();
    test_grant();
    test_env();
    test_errors();
    test_live();
    return done_testing();
}
