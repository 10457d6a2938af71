/* topo.c: the node's topology from hwloc (I/O devices kept) and, on the live
 * machine, NVML loaded at run time; the placement of local ranks on GPUs,
 * NICs and cores; and the CPU mask and environment that apply one rank's
 * placement.  The policy is described in topo.h and docs/topology.md.
 *
 * About 1600 lines in one file on purpose: discovery, the NVML fallback,
 * placement and its application all walk the same private hwloc object
 * model (struct ddl_topo and its per-GPU/NIC records), which no other file
 * should see; splitting it would export that model.
 */
#include "config.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hwloc.h>

#include "log.h"
#include "topo.h"

struct ddl_topo {
    hwloc_topology_t h;
    ddl_topo_info_t info;
    hwloc_obj_type_t core_type; /* HWLOC_OBJ_CORE, or HWLOC_OBJ_PU when there are no cores */
    int ngpus, nnics, nnuma;
    ddl_topo_gpu_t *gpus;
    ddl_topo_nic_t *nics;
    ddl_topo_numa_t *numa;
    hwloc_obj_t *gpu_obj, *nic_obj, *numa_obj;
    char **pool; /* strings the public structures point to */
    int npool, cappool;
    int oom;
    char nvml[320];
};

#define VENDOR_NVIDIA 0x10de
#define VENDOR_AMD 0x1002

/* ---------------------------------------------------------------- string pool */

/* pool_add: keep s (malloc'd, ownership taken) until ddl_topo_free; NULL or
 * a full pool marks the topology out of memory and yields "". */
static const char *pool_add(ddl_topo_t *t, char *s)
{
    if (!s) {
        t->oom = 1;
        return "";
    }
    if (t->npool == t->cappool) {
        int cap = t->cappool ? t->cappool * 2 : 64;
        char **np = realloc(t->pool, (size_t)cap * sizeof *np);
        if (!np) {
            free(s);
            t->oom = 1;
            return "";
        }
        t->pool = np;
        t->cappool = cap;
    }
    t->pool[t->npool++] = s;
    return s;
}

static const char *pool_dup(ddl_topo_t *t, const char *s)
{
    return pool_add(t, strdup(s ? s : ""));
}

static char *list_of(hwloc_const_bitmap_t b)
{
    char *s = NULL;
    if (hwloc_bitmap_list_asprintf(&s, b) < 0)
        return NULL;
    return s;
}

static const char *pool_list(ddl_topo_t *t, hwloc_const_bitmap_t b)
{
    return pool_add(t, list_of(b));
}

/* ---------------------------------------------------------------- hwloc helpers */

static int package_of(hwloc_obj_t o)
{
    for (; o; o = o->parent)
        if (o->type == HWLOC_OBJ_PACKAGE)
            return (int)o->logical_index;
    return -1;
}

static hwloc_obj_t package_obj(hwloc_obj_t o)
{
    for (; o; o = o->parent)
        if (o->type == HWLOC_OBJ_PACKAGE)
            return o;
    return NULL;
}

/* cores_of: logical indexes of the cores inside set (partial: that
 * intersect set).  Returns a new bitmap or NULL. */
static hwloc_bitmap_t cores_of(const ddl_topo_t *t, hwloc_const_cpuset_t set, int partial)
{
    hwloc_bitmap_t b = hwloc_bitmap_alloc();
    hwloc_obj_t c = NULL;
    if (!b)
        return NULL;
    while ((c = hwloc_get_next_obj_by_type(t->h, t->core_type, c)))
        if (c->cpuset && (partial ? hwloc_bitmap_intersects(c->cpuset, set)
                                  : hwloc_bitmap_isincluded(c->cpuset, set)))
            hwloc_bitmap_set(b, c->logical_index);
    return b;
}

static const char *pool_cores(ddl_topo_t *t, hwloc_const_cpuset_t set)
{
    hwloc_bitmap_t b = cores_of(t, set, 0);
    if (!b)
        return pool_add(t, NULL);
    const char *s = pool_list(t, b);
    hwloc_bitmap_free(b);
    return s;
}

/* common_ancestor: hwloc_get_common_ancestor_obj() compares depths, which
 * I/O objects do not have; walk parents instead. */
static hwloc_obj_t common_ancestor(hwloc_obj_t a, hwloc_obj_t b)
{
    for (hwloc_obj_t x = a; x; x = x->parent)
        for (hwloc_obj_t y = b; y; y = y->parent)
            if (x == y)
                return x;
    return NULL;
}

static void format_busid(hwloc_obj_t o, char *buf, size_t len)
{
    snprintf(buf, len, "%04x:%02x:%02x.%x", (unsigned)o->attr->pcidev.domain,
             (unsigned)o->attr->pcidev.bus, (unsigned)o->attr->pcidev.dev,
             (unsigned)o->attr->pcidev.func);
}

static int cmp_pci(const void *pa, const void *pb)
{
    const struct hwloc_pcidev_attr_s *a = &(*(const hwloc_obj_t *)pa)->attr->pcidev;
    const struct hwloc_pcidev_attr_s *b = &(*(const hwloc_obj_t *)pb)->attr->pcidev;
    unsigned ka[4] = {a->domain, a->bus, a->dev, a->func};
    unsigned kb[4] = {b->domain, b->bus, b->dev, b->func};
    for (int i = 0; i < 4; i++)
        if (ka[i] != kb[i])
            return ka[i] < kb[i] ? -1 : 1;
    return 0;
}

static int is_gpu(hwloc_obj_t o)
{
    unsigned v = o->attr->pcidev.vendor_id, c = o->attr->pcidev.class_id;
    return (v == VENDOR_NVIDIA || v == VENDOR_AMD) &&
           (c == 0x0300 || c == 0x0302 || c == 0x0380 || c == 0x1200);
}

static int is_nic(hwloc_obj_t o)
{
    return (o->attr->pcidev.class_id >> 8) == 0x02;
}

static void locality_name(ddl_topo_t *t, hwloc_obj_t anc, const char **out)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s L#%u", hwloc_obj_type_string(anc->type), anc->logical_index);
    *out = pool_dup(t, buf);
}

static int first_numa(hwloc_obj_t anc)
{
    return anc->nodeset ? hwloc_bitmap_first(anc->nodeset) : -1;
}

/* ---------------------------------------------------------------- devices */

static void fill_gpu(ddl_topo_t *t, int i, hwloc_obj_t o)
{
    ddl_topo_gpu_t *g = &t->gpus[i];
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t->h, o);
    const char *model = NULL, *uuid = NULL;
    char devs[256] = "";

    g->index = i;
    format_busid(o, g->busid, sizeof g->busid);
    g->vendor_id = o->attr->pcidev.vendor_id;
    g->device_id = o->attr->pcidev.device_id;
    g->class_id = o->attr->pcidev.class_id;
    g->nvml_index = -1;
    for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) {
        if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name)
            continue;
        size_t l = strlen(devs);
        snprintf(devs + l, sizeof devs - l, "%s%s", l ? "," : "", c->name);
        if (!model)
            model = hwloc_obj_get_info_by_name(c, "GPUModel");
        if (!uuid)
            uuid = hwloc_obj_get_info_by_name(c, "NVIDIAUUID");
    }
    if (!model)
        model = hwloc_obj_get_info_by_name(o, "PCIDevice");
    g->model = pool_dup(t, model);
    g->uuid = pool_dup(t, uuid);
    g->osdevs = pool_dup(t, devs);
    locality_name(t, anc, &g->locality);
    g->numa = first_numa(anc);
    g->package = package_of(anc);
    g->cores = pool_cores(t, anc->cpuset);
    g->pus = pool_list(t, anc->cpuset);
}

static int nic_is_hca(const ddl_topo_nic_t *n)
{
    if (n->class_id == 0x0207 || n->ofdev[0])
        return 1; /* InfiniBand, or anything with a verbs device (RoCE, EFA) */
    if (n->vendor_id == 0x17db)
        return 1; /* HPE Cray Slingshot */
    if (n->vendor_id == 0x1d0f && (n->device_id & 0xfff0) == 0xefa0)
        return 1; /* AWS EFA without its verbs driver */
    return strncmp(n->netdev, "ib", 2) == 0 || strncmp(n->netdev, "hsi", 3) == 0 ||
           strncmp(n->netdev, "hsn", 3) == 0;
}

/* verbs_port: the first port whose state is 4 (active), else the first
 * port listed, else 1. */
static void verbs_port(hwloc_obj_t of, int *port, int *active)
{
    *port = 0;
    *active = -1;
    for (int p = 1; p <= 16; p++) {
        char key[32];
        snprintf(key, sizeof key, "Port%dState", p);
        const char *v = hwloc_obj_get_info_by_name(of, key);
        if (!v)
            continue;
        if (strcmp(v, "4") == 0) {
            *port = p;
            *active = 1;
            return;
        }
        if (*port == 0) {
            *port = p;
            *active = 0;
        }
    }
    if (*port == 0)
        *port = 1;
}

static void fill_nic(ddl_topo_t *t, int i, hwloc_obj_t o)
{
    ddl_topo_nic_t *n = &t->nics[i];
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t->h, o), of = NULL;
    const char *netdev = NULL;

    n->index = i;
    format_busid(o, n->busid, sizeof n->busid);
    n->vendor_id = o->attr->pcidev.vendor_id;
    n->device_id = o->attr->pcidev.device_id;
    n->class_id = o->attr->pcidev.class_id;
    for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) {
        if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name)
            continue;
        if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && !of)
            of = c;
        else if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK && !netdev)
            netdev = c->name;
    }
    n->ofdev = pool_dup(t, of ? of->name : NULL);
    n->netdev = pool_dup(t, netdev);
    n->name = of ? n->ofdev : n->netdev;
    if (of)
        verbs_port(of, &n->port, &n->port_active);
    else
        n->port_active = -1;
    n->hca = nic_is_hca(n);
    locality_name(t, anc, &n->locality);
    n->numa = first_numa(anc);
    n->package = package_of(anc);
}

/* ---------------------------------------------------------------- NVML */

typedef int nvml_ret_t;
typedef struct nvml_device *nvml_device_t;
typedef struct { /* nvmlPciInfo_t, as used by nvmlDeviceGetPciInfo_v2 and _v3 */
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} nvml_pci_t;

/* nvml_probe: with libnvidia-ml.so.1 loadable, match NVML's devices to the
 * PCI GPUs by bus id and record their NVML index, name and UUID.  Never
 * fails: t->nvml says what happened. */
static void nvml_probe(ddl_topo_t *t)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(t->nvml, sizeof t->nvml, "not available (%s)",
                 e ? e : "libnvidia-ml.so.1 cannot be loaded");
        return;
    }
    nvml_ret_t (*init)(void) = (nvml_ret_t(*)(void))dlsym(lib, "nvmlInit_v2");
    nvml_ret_t (*fini)(void) = (nvml_ret_t(*)(void))dlsym(lib, "nvmlShutdown");
    nvml_ret_t (*count)(unsigned *) =
        (nvml_ret_t(*)(unsigned *))dlsym(lib, "nvmlDeviceGetCount_v2");
    nvml_ret_t (*by_index)(unsigned, nvml_device_t *) =
        (nvml_ret_t(*)(unsigned, nvml_device_t *))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    nvml_ret_t (*pci)(nvml_device_t, nvml_pci_t *) =
        (nvml_ret_t(*)(nvml_device_t, nvml_pci_t *))dlsym(lib, "nvmlDeviceGetPciInfo_v3");
    if (!pci)
        pci = (nvml_ret_t(*)(nvml_device_t, nvml_pci_t *))dlsym(lib, "nvmlDeviceGetPciInfo_v2");
    nvml_ret_t (*name)(nvml_device_t, char *, unsigned) =
        (nvml_ret_t(*)(nvml_device_t, char *, unsigned))dlsym(lib, "nvmlDeviceGetName");
    nvml_ret_t (*uuid)(nvml_device_t, char *, unsigned) =
        (nvml_ret_t(*)(nvml_device_t, char *, unsigned))dlsym(lib, "nvmlDeviceGetUUID");
    const char *(*errstr)(nvml_ret_t) = (const char *(*)(nvml_ret_t))dlsym(lib, "nvmlErrorString");
    if (!init || !fini || !count || !by_index || !pci) {
        snprintf(t->nvml, sizeof t->nvml,
                 "not usable (libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlDeviceGetCount_v2, "
                 "nvmlDeviceGetHandleByIndex_v2 or nvmlDeviceGetPciInfo_v2/_v3)");
        dlclose(lib);
        return;
    }
    nvml_ret_t rc = init();
    if (rc != 0) {
        snprintf(t->nvml, sizeof t->nvml, "not usable (nvmlInit: %s)",
                 errstr ? errstr(rc) : "error");
        dlclose(lib);
        return;
    }
    unsigned n = 0;
    int matched = 0, reordered = 0;
    if (count(&n) != 0)
        n = 0;
    for (unsigned i = 0; i < n; i++) {
        nvml_device_t d;
        nvml_pci_t p;
        unsigned dom, bus, dev, fn;
        memset(&p, 0, sizeof p);
        if (by_index(i, &d) != 0 || pci(d, &p) != 0)
            continue;
        p.bus_id[sizeof p.bus_id - 1] = '\0';
        if (sscanf(p.bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) {
            dom = p.domain;
            bus = p.bus;
            dev = p.device;
            fn = 0;
        }
        for (int g = 0; g < t->ngpus; g++) {
            const struct hwloc_pcidev_attr_s *a = &t->gpu_obj[g]->attr->pcidev;
            if (a->domain != dom || a->bus != bus || a->dev != dev || a->func != fn)
                continue;
            char buf[128];
            t->gpus[g].nvml_index = (int)i;
            if (name && name(d, buf, sizeof buf) == 0) {
                buf[sizeof buf - 1] = '\0';
                t->gpus[g].model = pool_dup(t, buf);
            }
            if (uuid && uuid(d, buf, sizeof buf) == 0) {
                buf[sizeof buf - 1] = '\0';
                t->gpus[g].uuid = pool_dup(t, buf);
            }
            if ((int)i != t->gpus[g].vendor_index)
                reordered = 1;
            matched++;
        }
    }
    fini();
    dlclose(lib);
    snprintf(t->nvml, sizeof t->nvml, "loaded: %u device%s, %d matched to PCI GPUs%s", n,
             n == 1 ? "" : "s", matched,
             reordered ? "; NVML numbers them differently from PCI bus-id order" : "");
}

/* ---------------------------------------------------------------- loading */

static int fill(ddl_topo_t *t)
{
    hwloc_obj_t o = NULL;
    int np = 0, cap = 0, nvendor_nv = 0, nvendor_amd = 0;
    hwloc_obj_t *pcis = NULL;

    t->core_type =
        hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    while ((o = hwloc_get_next_pcidev(t->h, o))) {
        if (!is_gpu(o) && !is_nic(o))
            continue;
        if (np == cap) {
            cap = cap ? cap * 2 : 32;
            hwloc_obj_t *n = realloc(pcis, (size_t)cap * sizeof *n);
            if (!n) {
                free(pcis);
                return -1;
            }
            pcis = n;
        }
        pcis[np++] = o;
    }
    if (np)
        qsort(pcis, (size_t)np, sizeof *pcis, cmp_pci);
    for (int i = 0; i < np; i++) {
        if (is_gpu(pcis[i]))
            t->ngpus++;
        else
            t->nnics++;
    }
    t->nnuma = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_NUMANODE);
    t->gpus = calloc((size_t)t->ngpus + 1, sizeof *t->gpus);
    t->gpu_obj = calloc((size_t)t->ngpus + 1, sizeof *t->gpu_obj);
    t->nics = calloc((size_t)t->nnics + 1, sizeof *t->nics);
    t->nic_obj = calloc((size_t)t->nnics + 1, sizeof *t->nic_obj);
    t->numa = calloc((size_t)t->nnuma + 1, sizeof *t->numa);
    t->numa_obj = calloc((size_t)t->nnuma + 1, sizeof *t->numa_obj);
    if (!t->gpus || !t->gpu_obj || !t->nics || !t->nic_obj || !t->numa || !t->numa_obj) {
        free(pcis);
        return -1;
    }
    int ng = 0, nn = 0;
    for (int i = 0; i < np; i++) {
        if (is_gpu(pcis[i])) {
            t->gpu_obj[ng] = pcis[i];
            fill_gpu(t, ng, pcis[i]);
            t->gpus[ng].vendor_index =
                t->gpus[ng].vendor_id == VENDOR_AMD ? nvendor_amd++ : nvendor_nv++;
            ng++;
        } else {
            t->nic_obj[nn] = pcis[i];
            fill_nic(t, nn++, pcis[i]);
        }
    }
    free(pcis);
    for (int i = 0; i < t->nnuma; i++) {
        hwloc_obj_t n = hwloc_get_obj_by_type(t->h, HWLOC_OBJ_NUMANODE, (unsigned)i);
        t->numa_obj[i] = n;
        t->numa[i].os_index = (int)n->os_index;
        t->numa[i].package = package_of(n);
        t->numa[i].cores = pool_cores(t, n->cpuset);
        t->numa[i].pus = pool_list(t, n->cpuset);
        t->numa[i].memory_mib = n->attr->numanode.local_memory >> 20;
    }
    t->info.npackages = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_PACKAGE);
    t->info.nnuma = t->nnuma;
    t->info.ncores = hwloc_get_nbobjs_by_type(t->h, t->core_type);
    t->info.npus = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_PU);
    t->info.allowed = pool_list(t, hwloc_topology_get_allowed_cpuset(t->h));
    t->info.hwloc_version = HWLOC_VERSION;
    if (t->info.live)
        nvml_probe(t);
    else
        snprintf(t->nvml, sizeof t->nvml, "not used (XML input)");
    t->info.nvml = t->nvml;
    return t->oom ? -1 : 0;
}

static ddl_topo_t *load(const char *path, const char *buf, size_t len, const char *source,
                        ddl_error_t *err)
{
    ddl_topo_t *t = calloc(1, sizeof *t);
    int rc;
    if (!t) {
        errno = ENOMEM;
        ddl_errprintf(err, "out of memory while reading the topology");
        return NULL;
    }
    if (path && access(path, R_OK) < 0) {
        int e = errno;
        ddl_errprintf(err, "cannot read the hwloc XML file %s: %s", path, strerror(e));
        free(t);
        errno = e;
        return NULL;
    }
    if (buf && len > INT_MAX) {
        free(t);
        errno = EINVAL;
        ddl_errprintf(err, "the hwloc XML text %s is too large (%zu bytes)", source, len);
        return NULL;
    }
    if (hwloc_topology_init(&t->h) < 0) {
        int e = errno;
        ddl_errprintf(err, "hwloc cannot start: %s", strerror(e));
        free(t);
        errno = e;
        return NULL;
    }
    hwloc_topology_set_io_types_filter(t->h, HWLOC_TYPE_FILTER_KEEP_ALL);
    errno = 0;
    rc = 0;
    if (path)
        rc = hwloc_topology_set_xml(t->h, path);
    else if (buf)
        rc = hwloc_topology_set_xmlbuffer(t->h, buf, (int)len);
    if (rc == 0)
        rc = hwloc_topology_load(t->h);
    if (rc < 0) {
        int e = errno ? errno : EINVAL;
        if (path || buf)
            ddl_errprintf(err,
                          "cannot load the hwloc XML %s: %s (hwloc %s reads XML formats 1.x "
                          "and 2.x; export one with `lstopo --of xml FILE`)",
                          path ? path : source, strerror(e), HWLOC_VERSION);
        else
            ddl_errprintf(err, "hwloc cannot detect this machine's topology: %s", strerror(e));
        hwloc_topology_destroy(t->h);
        free(t);
        errno = e;
        return NULL;
    }
    t->info.live = !path && !buf;
    t->info.source = pool_dup(t, path ? path : buf ? source : "this machine");
    if (fill(t) < 0) {
        ddl_topo_free(t);
        errno = ENOMEM;
        ddl_errprintf(err, "out of memory while reading the topology");
        return NULL;
    }
    return t;
}

ddl_topo_t *ddl_topo_load(const char *xml_path, ddl_error_t *err)
{
    return load(xml_path, NULL, 0, NULL, err);
}

ddl_topo_t *ddl_topo_load_xml_buffer(const char *buf, size_t len, const char *source,
                                     ddl_error_t *err)
{
    if (!buf) {
        errno = EINVAL;
        ddl_errprintf(err, "no hwloc XML text given");
        return NULL;
    }
    return load(NULL, buf, len, source ? source : "(XML text)", err);
}

void ddl_topo_free(ddl_topo_t *t)
{
    if (!t)
        return;
    if (t->h)
        hwloc_topology_destroy(t->h);
    for (int i = 0; i < t->npool; i++)
        free(t->pool[i]);
    free(t->pool);
    free(t->gpus);
    free(t->gpu_obj);
    free(t->nics);
    free(t->nic_obj);
    free(t->numa);
    free(t->numa_obj);
    free(t);
}

/* ---------------------------------------------------------------- accessors */

const ddl_topo_info_t *ddl_topo_info(const ddl_topo_t *t)
{
    return &t->info;
}

int ddl_topo_gpu_count(const ddl_topo_t *t)
{
    return t->ngpus;
}

const ddl_topo_gpu_t *ddl_topo_gpu(const ddl_topo_t *t, int i)
{
    if (i < 0 || i >= t->ngpus) {
        errno = ERANGE;
        return NULL;
    }
    return &t->gpus[i];
}

int ddl_topo_nic_count(const ddl_topo_t *t)
{
    return t->nnics;
}

const ddl_topo_nic_t *ddl_topo_nic(const ddl_topo_t *t, int i)
{
    if (i < 0 || i >= t->nnics) {
        errno = ERANGE;
        return NULL;
    }
    return &t->nics[i];
}

int ddl_topo_numa_count(const ddl_topo_t *t)
{
    return t->nnuma;
}

const ddl_topo_numa_t *ddl_topo_numa(const ddl_topo_t *t, int i)
{
    if (i < 0 || i >= t->nnuma) {
        errno = ERANGE;
        return NULL;
    }
    return &t->numa[i];
}

const char *ddl_topo_rel_str(ddl_topo_rel_t rel)
{
    switch (rel) {
    case DDL_TOPO_REL_SWITCH:
        return "switch";
    case DDL_TOPO_REL_HOSTBRIDGE:
        return "host-bridge";
    case DDL_TOPO_REL_NUMA:
        return "numa";
    case DDL_TOPO_REL_PACKAGE:
        return "package";
    case DDL_TOPO_REL_MACHINE:
        return "machine";
    }
    return "?";
}

/* ---------------------------------------------------------------- nearness */

/* rel_local: nearness of a NIC to a place given by its nodeset and package,
 * once they share no PCI bridge. */
static ddl_topo_rel_t rel_local(hwloc_const_nodeset_t nodes, int package, hwloc_obj_t nic_anc)
{
    if (nodes && nic_anc->nodeset && hwloc_bitmap_intersects(nodes, nic_anc->nodeset))
        return DDL_TOPO_REL_NUMA;
    if (package >= 0 && package == package_of(nic_anc))
        return DDL_TOPO_REL_PACKAGE;
    return DDL_TOPO_REL_MACHINE;
}

ddl_topo_rel_t ddl_topo_gpu_nic_rel(const ddl_topo_t *t, int gpu, int nic)
{
    if (gpu < 0 || gpu >= t->ngpus || nic < 0 || nic >= t->nnics)
        return DDL_TOPO_REL_MACHINE;
    hwloc_obj_t a = t->gpu_obj[gpu], b = t->nic_obj[nic];
    hwloc_obj_t c = common_ancestor(a, b);
    if (c && c->type == HWLOC_OBJ_BRIDGE)
        return c->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI ? DDL_TOPO_REL_SWITCH
                                                                     : DDL_TOPO_REL_HOSTBRIDGE;
    if (c && c->type == HWLOC_OBJ_PCI_DEVICE)
        return DDL_TOPO_REL_SWITCH;
    hwloc_obj_t ga = hwloc_get_non_io_ancestor_obj(t->h, a);
    return rel_local(ga->nodeset, package_of(ga), hwloc_get_non_io_ancestor_obj(t->h, b));
}

/* rel_numa_nic: nearness of a NIC to NUMA node os_index (CPU-only ranks). */
static ddl_topo_rel_t rel_numa_nic(const ddl_topo_t *t, int os_index, int nic)
{
    hwloc_obj_t nanc = hwloc_get_non_io_ancestor_obj(t->h, t->nic_obj[nic]);
    for (int i = 0; i < t->nnuma; i++)
        if (t->numa[i].os_index == os_index)
            return rel_local(t->numa_obj[i]->nodeset, t->numa[i].package, nanc);
    return DDL_TOPO_REL_MACHINE;
}

/* ---------------------------------------------------------------- CPU lists */

static void bitmap_add(void *ctx, unsigned lo, unsigned hi)
{
    hwloc_bitmap_set_range(ctx, lo, (int)hi);
}

/* cpulist_parse: a CPU list (ddl_cpulist_parse's syntax) into out. */
static int cpulist_parse(const char *text, hwloc_bitmap_t out, ddl_error_t *err)
{
    hwloc_bitmap_zero(out);
    return ddl_cpulist_parse(text, bitmap_add, out, err);
}

int ddl_topo_cpulist_check(const char *text, ddl_error_t *err)
{
    return ddl_cpulist_parse(text, NULL, NULL, err);
}

/* allowed_set: the PUs ranks may use (see ddl_topo_assign). */
static hwloc_bitmap_t allowed_set(const ddl_topo_t *t, const char *list, ddl_error_t *err)
{
    hwloc_const_cpuset_t top = hwloc_topology_get_allowed_cpuset(t->h);
    hwloc_bitmap_t b = hwloc_bitmap_alloc();
    if (!b) {
        errno = ENOMEM;
        ddl_errprintf(err, "out of memory");
        return NULL;
    }
    if (list) {
        if (cpulist_parse(list, b, err) < 0) {
            hwloc_bitmap_free(b);
            errno = EINVAL;
            return NULL;
        }
        if (!hwloc_bitmap_isincluded(b, top)) {
            hwloc_bitmap_andnot(b, b, top);
            char *bad = list_of(b);
            ddl_errprintf(err,
                          "allowed CPU list %s names PUs %s that %s does not have or allow "
                          "(it allows %s)",
                          list, bad ? bad : "?", t->info.source, t->info.allowed);
            free(bad);
            hwloc_bitmap_free(b);
            errno = EINVAL;
            return NULL;
        }
    } else if (t->info.live) {
        if (hwloc_get_cpubind(t->h, b, HWLOC_CPUBIND_THREAD) < 0)
            hwloc_bitmap_copy(b, top);
        hwloc_bitmap_and(b, b, top);
    } else {
        hwloc_bitmap_copy(b, top);
    }
    if (hwloc_bitmap_iszero(b)) {
        ddl_errprintf(err, "no PU is allowed to the ranks (topology allows %s)", t->info.allowed);
        hwloc_bitmap_free(b);
        errno = EINVAL;
        return NULL;
    }
    return b;
}

/* ---------------------------------------------------------------- grants */

void ddl_topo_grant_all(const ddl_topo_t *t, ddl_topo_grant_t *g)
{
    memset(g, 0, sizeof *g);
    g->n = t->ngpus < DDL_TOPO_MAX_GRANT ? t->ngpus : DDL_TOPO_MAX_GRANT;
    for (int i = 0; i < g->n; i++) {
        g->gpu[i] = i;
        snprintf(g->token[i], sizeof g->token[i], "%d", t->gpus[i].vendor_index);
    }
    snprintf(g->source, sizeof g->source, t->ngpus ? "every GPU" : "none on this machine");
}

/* split: the comma-separated entries of s into out (at most max, each
 * shorter than width); returns their count, -1 if too many or too long, or
 * an empty entry. */
static int split(const char *s, char (*out)[64], int max)
{
    int n = 0;
    if (!*s)
        return 0;
    for (;;) {
        const char *c = strchr(s, ',');
        size_t l = c ? (size_t)(c - s) : strlen(s);
        if (l == 0 || l >= 64 || n == max)
            return -1;
        memcpy(out[n], s, l);
        out[n][l] = '\0';
        n++;
        if (!c)
            return n;
        s = c + 1;
    }
}

static int all_digits(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return 0;
    return 1;
}

int ddl_topo_grant_parse(const ddl_topo_t *t, const char *name, const char *list,
                         const char *visible, ddl_topo_grant_t *g, ddl_error_t *err)
{
    char entries[DDL_TOPO_MAX_GRANT][64], vis[DDL_TOPO_MAX_GRANT][64], have[96];
    memset(g, 0, sizeof *g);
    if (!list)
        list = "";
    snprintf(g->source, sizeof g->source, "%s=%s", name, list);
    if (t->ngpus)
        snprintf(have, sizeof have, "this node has %d GPU%s, 0-%d in PCI bus-id order", t->ngpus,
                 t->ngpus == 1 ? "" : "s", t->ngpus - 1);
    else
        snprintf(have, sizeof have, "this node has no GPU");
    int n = split(list, entries, DDL_TOPO_MAX_GRANT);
    if (n < 0) {
        errno = EINVAL;
        return ddl_errprintf(err,
                             "%s=%s is not a list of GPUs (expected indexes or UUIDs "
                             "separated by commas, at most %d)",
                             name, list, DDL_TOPO_MAX_GRANT);
    }
    for (int i = 0; i < n; i++) {
        const char *e = entries[i];
        int idx = -1;
        if (all_digits(e)) {
            long v = strtol(e, NULL, 10);
            if (strlen(e) > 6 || v >= t->ngpus) {
                errno = ERANGE;
                return ddl_errprintf(err, "%s=%s: GPU %s does not exist (%s)", name, list, e, have);
            }
            idx = (int)v;
            snprintf(g->token[i], sizeof g->token[i], "%d", t->gpus[idx].vendor_index);
        } else if (strncmp(e, "GPU-", 4) == 0) {
            int known = 0;
            for (int k = 0; k < t->ngpus; k++) {
                known |= t->gpus[k].uuid[0] != '\0';
                if (strcasecmp(t->gpus[k].uuid, e) == 0)
                    idx = k;
            }
            if (idx < 0) {
                errno = EINVAL;
                return ddl_errprintf(err, "%s=%s: no GPU of this node has UUID %s%s", name, list, e,
                                     known ? ""
                                           : " (no UUID is known: they come from NVML, "
                                             "libnvidia-ml.so.1; use GPU indexes)");
            }
            snprintf(g->token[i], sizeof g->token[i], "%s", e);
        } else {
            errno = EINVAL;
            return ddl_errprintf(err,
                                 "%s=%s: '%s' is neither a GPU index nor a GPU UUID "
                                 "(MIG instances are not placed by ddl: use --bind none)",
                                 name, list, e);
        }
        for (int k = 0; k < i; k++)
            if (g->gpu[k] == idx) {
                errno = EINVAL;
                return ddl_errprintf(err, "%s=%s names GPU %d twice", name, list, idx);
            }
        g->gpu[i] = idx;
    }
    g->n = n;
    if (visible && visible != list) {
        if (split(visible, vis, DDL_TOPO_MAX_GRANT) == n)
            for (int i = 0; i < n; i++)
                memcpy(g->token[i], vis[i], sizeof g->token[i]);
    } else if (visible == list) {
        for (int i = 0; i < n; i++)
            memcpy(g->token[i], entries[i], sizeof g->token[i]);
    }
    return 0;
}

int ddl_topo_grant_from_env(const ddl_topo_t *t, ddl_topo_grant_t *g, ddl_error_t *err)
{
    int amd = t->ngpus > 0 && t->gpus[0].vendor_id == VENDOR_AMD;
    const char *visname = amd ? "ROCR_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES";
    const char *step = getenv("SLURM_STEP_GPUS");
    const char *vis = getenv(visname);
    const char *ord = getenv("GPU_DEVICE_ORDINAL");
    if (step && *step)
        return ddl_topo_grant_parse(t, "SLURM_STEP_GPUS", step, vis, g, err);
    if (vis)
        return ddl_topo_grant_parse(t, visname, vis, vis, g, err);
    if (ord)
        return ddl_topo_grant_parse(t, "GPU_DEVICE_ORDINAL", ord, NULL, g, err);
    ddl_topo_grant_all(t, g);
    return 0;
}

/* ---------------------------------------------------------------- placement */

static int add_note(ddl_topo_map_t *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int add_note(ddl_topo_map_t *m, const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    char **nn = realloc(m->notes, (size_t)(m->nnotes + 1) * sizeof *nn);
    if (!nn) {
        free(s);
        return -1;
    }
    m->notes = nn;
    m->notes[m->nnotes++] = s;
    return 0;
}

/* Per-rank working state of ddl_topo_assign. */
typedef struct {
    hwloc_bitmap_t want; /* where its cores should come from: NUMA node(s) & allowed */
    hwloc_bitmap_t near; /* its GPU's own locality & allowed: orders ranks in a split */
    hwloc_bitmap_t pus;  /* the result */
} slot_t;

typedef struct {
    const ddl_topo_map_t *m;
    slot_t *s;
} sort_ctx_t;

/* Order of groups: small domains first (nested domains keep their cores),
 * then by first PU; equal domains end up next to each other. */
static int cmp_domain(const void *pa, const void *pb, void *arg)
{
    const sort_ctx_t *c = arg;
    int a = *(const int *)pa, b = *(const int *)pb;
    int wa = hwloc_bitmap_weight(c->s[a].want), wb = hwloc_bitmap_weight(c->s[b].want);
    if (wa != wb)
        return wa < wb ? -1 : 1;
    int fa = hwloc_bitmap_first(c->s[a].want), fb = hwloc_bitmap_first(c->s[b].want);
    if (fa != fb)
        return fa < fb ? -1 : 1;
    int k = hwloc_bitmap_compare(c->s[a].want, c->s[b].want);
    if (k)
        return k;
    return a < b ? -1 : a > b;
}

/* Order inside a group: by where the GPU's locality starts, then GPU, then rank. */
static int cmp_near(const void *pa, const void *pb, void *arg)
{
    const sort_ctx_t *c = arg;
    int a = *(const int *)pa, b = *(const int *)pb;
    int fa = hwloc_bitmap_first(c->s[a].near), fb = hwloc_bitmap_first(c->s[b].near);
    if (fa < 0)
        fa = INT_MAX;
    if (fb < 0)
        fb = INT_MAX;
    if (fa != fb)
        return fa < fb ? -1 : 1;
    int ga = c->m->ranks[a].gpu, gb = c->m->ranks[b].gpu;
    if (ga != gb)
        return ga < gb ? -1 : 1;
    return a < b ? -1 : a > b;
}

static int numa_of_set(const ddl_topo_t *t, hwloc_const_cpuset_t set)
{
    for (int i = 0; i < t->nnuma; i++)
        if (hwloc_bitmap_intersects(t->numa_obj[i]->cpuset, set))
            return t->numa[i].os_index;
    return -1;
}

/* rank_list: "0-3,8" for the ranks set in b (freed by the caller). */
static char *rank_list(hwloc_const_bitmap_t b)
{
    return list_of(b);
}

/* place_gpus: each rank's GPU and token from the grant. */
static void place_gpus(const ddl_topo_t *t, ddl_topo_map_t *m, const ddl_topo_grant_t *g)
{
    int *per = calloc((size_t)t->ngpus + 1, sizeof *per);
    for (int r = 0; r < m->nranks; r++) {
        ddl_topo_rank_t *rk = &m->ranks[r];
        rk->gpu = -1;
        if (g->n > 0) {
            int gi = (int)((int64_t)r * g->n / m->nranks);
            rk->gpu = g->gpu[gi];
            snprintf(rk->gpu_token, sizeof rk->gpu_token, "%s", g->token[gi]);
            if (per)
                per[rk->gpu]++;
        }
    }
    for (int r = 0; r < m->nranks; r++)
        m->ranks[r].gpu_ranks = m->ranks[r].gpu >= 0 && per ? per[m->ranks[r].gpu] : 0;
    free(per);
}

/* place_domains: each rank's want and near sets.  Returns -1 on ENOMEM. */
static int place_domains(const ddl_topo_t *t, ddl_topo_map_t *m, slot_t *s, hwloc_const_cpuset_t al)
{
    hwloc_bitmap_t fb_pkg = hwloc_bitmap_alloc(), fb_any = hwloc_bitmap_alloc();
    int *numas = calloc((size_t)t->nnuma + 1, sizeof *numas), nu = 0;
    if (!fb_pkg || !fb_any || !numas)
        goto oom;
    for (int i = 0; i < t->nnuma; i++)
        if (hwloc_bitmap_intersects(t->numa_obj[i]->cpuset, al))
            numas[nu++] = i;
    for (int r = 0; r < m->nranks; r++) {
        ddl_topo_rank_t *rk = &m->ranks[r];
        if (rk->gpu >= 0) {
            hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t->h, t->gpu_obj[rk->gpu]);
            if (anc->nodeset && !hwloc_bitmap_iszero(anc->nodeset))
                hwloc_cpuset_from_nodeset(t->h, s[r].want, anc->nodeset);
            else
                hwloc_bitmap_copy(s[r].want, anc->cpuset);
            hwloc_bitmap_and(s[r].want, s[r].want, al);
            hwloc_bitmap_and(s[r].near, anc->cpuset, al);
            if (hwloc_bitmap_iszero(s[r].want)) {
                hwloc_obj_t pkg = package_obj(anc);
                if (pkg)
                    hwloc_bitmap_and(s[r].want, pkg->cpuset, al);
                if (!hwloc_bitmap_iszero(s[r].want)) {
                    hwloc_bitmap_set(fb_pkg, (unsigned)r);
                } else {
                    hwloc_bitmap_copy(s[r].want, al);
                    hwloc_bitmap_set(fb_any, (unsigned)r);
                }
            }
        } else {
            int i = numas[(int)((int64_t)r * nu / m->nranks)];
            hwloc_bitmap_and(s[r].want, t->numa_obj[i]->cpuset, al);
            hwloc_bitmap_copy(s[r].near, s[r].want);
        }
        rk->numa = numa_of_set(t, s[r].want);
    }
    if (!hwloc_bitmap_iszero(fb_pkg)) {
        char *l = rank_list(fb_pkg);
        add_note(m,
                 "rank%s %s: no allowed PU in the GPU's NUMA node (allowed: %s): cores come "
                 "from the GPU's package instead",
                 hwloc_bitmap_weight(fb_pkg) > 1 ? "s" : "", l ? l : "?", m->allowed);
        free(l);
    }
    if (!hwloc_bitmap_iszero(fb_any)) {
        char *l = rank_list(fb_any);
        add_note(m,
                 "rank%s %s: no allowed PU in the GPU's package (allowed: %s): cores come "
                 "from anywhere allowed, far from the GPU",
                 hwloc_bitmap_weight(fb_any) > 1 ? "s" : "", l ? l : "?", m->allowed);
        free(l);
    }
    hwloc_bitmap_free(fb_pkg);
    hwloc_bitmap_free(fb_any);
    free(numas);
    return 0;
oom:
    hwloc_bitmap_free(fb_pkg);
    hwloc_bitmap_free(fb_any);
    free(numas);
    return -1;
}

/* place_cores: split each group's domain among its ranks, whole cores each;
 * share when there are fewer cores than ranks.  Returns -1 on ENOMEM. */
static int place_cores(const ddl_topo_t *t, ddl_topo_map_t *m, slot_t *s)
{
    int nr = m->nranks, ncore = hwloc_get_nbobjs_by_type(t->h, t->core_type);
    int *ord = malloc((size_t)nr * sizeof *ord);
    hwloc_obj_t *cores = malloc(((size_t)ncore + 1) * sizeof *cores);
    hwloc_bitmap_t taken = hwloc_bitmap_alloc(), avail = hwloc_bitmap_alloc();
    hwloc_bitmap_t tmp = hwloc_bitmap_alloc(), grp = hwloc_bitmap_alloc();
    sort_ctx_t ctx = {m, s};
    int rc = -1;
    if (!ord || !cores || !taken || !avail || !tmp || !grp)
        goto out;
    for (int r = 0; r < nr; r++)
        ord[r] = r;
    qsort_r(ord, (size_t)nr, sizeof *ord, cmp_domain, &ctx);
    for (int a = 0, b; a < nr; a = b) {
        for (b = a + 1; b < nr && hwloc_bitmap_isequal(s[ord[a]].want, s[ord[b]].want); b++)
            ;
        int k = b - a, n = 0;
        hwloc_bitmap_andnot(avail, s[ord[a]].want, taken);
        hwloc_obj_t c = NULL;
        while ((c = hwloc_get_next_obj_by_type(t->h, t->core_type, c)))
            if (c->cpuset && hwloc_bitmap_intersects(c->cpuset, avail))
                cores[n++] = c;
        if (n >= k) {
            for (int j = a; j < b; j++)
                hwloc_bitmap_and(s[ord[j]].near, s[ord[j]].near, avail);
            qsort_r(ord + a, (size_t)k, sizeof *ord, cmp_near, &ctx);
            for (int j = 0; j < k; j++) {
                slot_t *sl = &s[ord[a + j]];
                hwloc_bitmap_zero(sl->pus);
                for (int q = (int)((int64_t)j * n / k); q < (int)((int64_t)(j + 1) * n / k); q++) {
                    hwloc_bitmap_and(tmp, cores[q]->cpuset, avail);
                    hwloc_bitmap_or(sl->pus, sl->pus, tmp);
                }
                hwloc_bitmap_or(taken, taken, sl->pus);
            }
        } else {
            hwloc_const_bitmap_t share = n > 0 ? avail : s[ord[a]].want;
            hwloc_bitmap_zero(grp);
            for (int j = a; j < b; j++) {
                hwloc_bitmap_copy(s[ord[j]].pus, share);
                m->ranks[ord[j]].shared = 1;
                hwloc_bitmap_set(grp, (unsigned)ord[j]);
            }
            hwloc_bitmap_or(taken, taken, share);
            char *rl = rank_list(grp), *pl = list_of(share);
            hwloc_bitmap_t cs = cores_of(t, share, 1);
            add_note(m, "ranks %s share PUs %s: %d ranks on %d core%s%s (oversubscribed)",
                     rl ? rl : "?", pl ? pl : "?", k, cs ? hwloc_bitmap_weight(cs) : 0,
                     cs && hwloc_bitmap_weight(cs) == 1 ? "" : "s",
                     n > 0 ? "" : " already given to other ranks");
            hwloc_bitmap_free(cs);
            free(rl);
            free(pl);
        }
    }
    for (int r = 0; r < nr; r++) {
        ddl_topo_rank_t *rk = &m->ranks[r];
        hwloc_bitmap_t cs = cores_of(t, s[r].pus, 1);
        if (!cs)
            goto out;
        rk->pus = list_of(s[r].pus);
        rk->cores = list_of(cs);
        rk->ncores = hwloc_bitmap_weight(cs);
        hwloc_bitmap_free(cs);
        if (!rk->pus || !rk->cores)
            goto out;
        if (!rk->shared)
            rk->numa = numa_of_set(t, s[r].pus);
    }
    rc = 0;
out:
    free(ord);
    free(cores);
    hwloc_bitmap_free(taken);
    hwloc_bitmap_free(avail);
    hwloc_bitmap_free(tmp);
    hwloc_bitmap_free(grp);
    return rc;
}

static ddl_topo_rel_t rank_nic_rel(const ddl_topo_t *t, const ddl_topo_rank_t *rk, int nic)
{
    return rk->gpu >= 0 ? ddl_topo_gpu_nic_rel(t, rk->gpu, nic) : rel_numa_nic(t, rk->numa, nic);
}

typedef struct {
    const int *best;
} nic_ctx_t;

static int cmp_best(const void *pa, const void *pb, void *arg)
{
    const nic_ctx_t *c = arg;
    int a = *(const int *)pa, b = *(const int *)pb;
    if (c->best[a] != c->best[b])
        return c->best[a] < c->best[b] ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* place_nics: nearest usable NIC (HCAs only, when the node has any), the
 * most constrained ranks first, an active port and the least used one
 * among equals.  Returns -1 on ENOMEM. */
static int place_nics(const ddl_topo_t *t, ddl_topo_map_t *m)
{
    int nr = m->nranks, have_hca = 0, have_nic = 0;
    for (int n = 0; n < t->nnics; n++)
        if (t->nics[n].name[0]) {
            have_nic = 1;
            have_hca |= t->nics[n].hca;
        }
    for (int r = 0; r < nr; r++)
        m->ranks[r].nic = -1;
    if (!have_nic) {
        add_note(m, "no usable network adapter (a PCI NIC with a network or verbs device): "
                    "UCX and NCCL choose their own devices");
        return 0;
    }
    int *best = malloc((size_t)nr * sizeof *best), *ord = malloc((size_t)nr * sizeof *ord);
    int *use = calloc((size_t)t->nnics, sizeof *use);
    hwloc_bitmap_t far = hwloc_bitmap_alloc();
    if (!best || !ord || !use || !far) {
        free(best);
        free(ord);
        free(use);
        hwloc_bitmap_free(far);
        return -1;
    }
#define CANDIDATE(n) (t->nics[n].name[0] && (!have_hca || t->nics[n].hca))
    for (int r = 0; r < nr; r++) {
        best[r] = DDL_TOPO_REL_MACHINE;
        for (int n = 0; n < t->nnics; n++)
            if (CANDIDATE(n)) {
                int rel = (int)rank_nic_rel(t, &m->ranks[r], n);
                if (rel < best[r])
                    best[r] = rel;
            }
        ord[r] = r;
    }
    nic_ctx_t ctx = {best};
    qsort_r(ord, (size_t)nr, sizeof *ord, cmp_best, &ctx);
    for (int i = 0; i < nr; i++) {
        int r = ord[i], pick = -1, pick_state = 0;
        for (int n = 0; n < t->nnics; n++) {
            if (!CANDIDATE(n) || (int)rank_nic_rel(t, &m->ranks[r], n) != best[r])
                continue;
            /* active port first, then unknown state, then a port known to be down */
            int state = t->nics[n].port_active == 1 ? 0 : t->nics[n].port_active < 0 ? 1 : 2;
            if (pick < 0 || state < pick_state || (state == pick_state && use[n] < use[pick])) {
                pick = n;
                pick_state = state;
            }
        }
        m->ranks[r].nic = pick;
        m->ranks[r].nic_rel = (ddl_topo_rel_t)best[r];
        if (pick >= 0)
            use[pick]++;
        if (best[r] == DDL_TOPO_REL_MACHINE && t->info.npackages > 1)
            hwloc_bitmap_set(far, (unsigned)r);
    }
#undef CANDIDATE
    if (!have_hca)
        add_note(m, "no high-speed adapter (InfiniBand, RoCE, Slingshot, EFA): ranks use "
                    "Ethernet");
    if (!hwloc_bitmap_iszero(far)) {
        char *l = rank_list(far);
        add_note(m,
                 "rank%s %s: no %snetwork adapter in the package of %s; the nearest is on "
                 "another package",
                 hwloc_bitmap_weight(far) > 1 ? "s" : "", l ? l : "?",
                 have_hca ? "high-speed " : "",
                 m->ranks[hwloc_bitmap_first(far)].gpu >= 0 ? "their GPU" : "their cores");
        free(l);
    }
    free(best);
    free(ord);
    free(use);
    hwloc_bitmap_free(far);
    return 0;
}

static void grant_notes(const ddl_topo_t *t, ddl_topo_map_t *m, const ddl_topo_grant_t *g)
{
    int nr = m->nranks;
    if (t->ngpus == 0) {
        add_note(m, "no GPU on this machine: ranks are spread over the NUMA nodes");
        return;
    }
    if (g->n == 0) {
        add_note(m, "%s grants no GPU: ranks are placed on CPUs only", g->source);
        return;
    }
    if (nr > g->n) {
        int most = 0;
        for (int r = 0; r < nr; r++)
            if (m->ranks[r].gpu_ranks > most)
                most = m->ranks[r].gpu_ranks;
        add_note(m, "%d ranks on %d GPU%s: up to %d ranks share a GPU", nr, g->n,
                 g->n == 1 ? "" : "s", most);
    } else if (nr < g->n) {
        hwloc_bitmap_t idle = hwloc_bitmap_alloc();
        if (!idle)
            return;
        for (int i = 0; i < g->n; i++)
            hwloc_bitmap_set(idle, (unsigned)g->gpu[i]);
        for (int r = 0; r < nr; r++)
            hwloc_bitmap_clr(idle, (unsigned)m->ranks[r].gpu);
        char *l = list_of(idle);
        add_note(m, "%d rank%s on %d GPUs: GPU%s %s stay%s unused", nr, nr == 1 ? "" : "s", g->n,
                 g->n - nr > 1 ? "s" : "", l ? l : "?", g->n - nr > 1 ? "" : "s");
        free(l);
        hwloc_bitmap_free(idle);
    }
}

ddl_topo_map_t *ddl_topo_assign(const ddl_topo_t *t, int nranks, const char *allowed,
                                const ddl_topo_grant_t *grant, ddl_error_t *err)
{
    ddl_topo_grant_t *every = NULL;
    slot_t *s = NULL;
    ddl_topo_map_t *m = NULL;
    hwloc_bitmap_t al;

    if (nranks < 1 || nranks > 65536) {
        errno = EINVAL;
        ddl_errprintf(err, "cannot place %d ranks: the count must be 1-65536", nranks);
        return NULL;
    }
    if (!grant) {
        every = malloc(sizeof *every);
        if (!every) {
            errno = ENOMEM;
            ddl_errprintf(err, "out of memory placing %d ranks", nranks);
            return NULL;
        }
        ddl_topo_grant_all(t, every);
        grant = every;
    }
    for (int i = 0; i < grant->n; i++)
        if (grant->gpu[i] < 0 || grant->gpu[i] >= t->ngpus) {
            errno = EINVAL;
            ddl_errprintf(err, "the GPU grant %s names GPU %d, which %s does not have",
                          grant->source, grant->gpu[i], t->info.source);
            free(every);
            return NULL;
        }
    al = allowed_set(t, allowed, err);
    if (!al) {
        free(every);
        return NULL;
    }
    m = calloc(1, sizeof *m);
    s = calloc((size_t)nranks, sizeof *s);
    if (!m || !s)
        goto oom;
    m->nranks = nranks;
    m->ranks = calloc((size_t)nranks, sizeof *m->ranks);
    m->allowed = list_of(al);
    if (!m->ranks || !m->allowed)
        goto oom;
    snprintf(m->grant_source, sizeof m->grant_source, "%s", grant->source);
    m->ngranted = grant->n;
    for (int r = 0; r < nranks; r++) {
        m->ranks[r].rank = r;
        s[r].want = hwloc_bitmap_alloc();
        s[r].near = hwloc_bitmap_alloc();
        s[r].pus = hwloc_bitmap_alloc();
        if (!s[r].want || !s[r].near || !s[r].pus)
            goto oom;
    }
    place_gpus(t, m, grant);
    grant_notes(t, m, grant);
    if (place_domains(t, m, s, al) < 0 || place_cores(t, m, s) < 0 || place_nics(t, m) < 0)
        goto oom;
    for (int r = 0; r < nranks; r++) {
        hwloc_bitmap_free(s[r].want);
        hwloc_bitmap_free(s[r].near);
        hwloc_bitmap_free(s[r].pus);
    }
    free(s);
    free(every);
    hwloc_bitmap_free(al);
    return m;
oom:
    if (s)
        for (int r = 0; r < nranks; r++) {
            hwloc_bitmap_free(s[r].want);
            hwloc_bitmap_free(s[r].near);
            hwloc_bitmap_free(s[r].pus);
        }
    free(s);
    free(every);
    hwloc_bitmap_free(al);
    ddl_topo_map_free(m);
    errno = ENOMEM;
    ddl_errprintf(err, "out of memory placing %d ranks", nranks);
    return NULL;
}

int ddl_topo_map_set_cpus(const ddl_topo_t *t, ddl_topo_map_t *m, int rank, const char *pus,
                          ddl_error_t *err)
{
    hwloc_bitmap_t b = hwloc_bitmap_alloc(), al = hwloc_bitmap_alloc(), cs = NULL;
    char *p = NULL, *c = NULL;
    int rc = -1, e = ENOMEM;
    if (!b || !al)
        goto out;
    if (rank < 0 || rank >= m->nranks) {
        e = ERANGE;
        ddl_errprintf(err, "rank %d does not exist (0-%d)", rank, m->nranks - 1);
        goto out;
    }
    if (cpulist_parse(pus, b, err) < 0) {
        e = EINVAL;
        goto out;
    }
    hwloc_bitmap_list_sscanf(al, m->allowed);
    if (!hwloc_bitmap_isincluded(b, al)) {
        hwloc_bitmap_andnot(b, b, al);
        char *bad = list_of(b);
        ddl_errprintf(err, "rank %d: CPU list %s: PUs %s are not allowed here (allowed: %s)", rank,
                      pus, bad ? bad : "?", m->allowed);
        free(bad);
        e = EINVAL;
        goto out;
    }
    cs = cores_of(t, b, 1);
    p = list_of(b);
    c = cs ? list_of(cs) : NULL;
    if (!p || !c) {
        ddl_errprintf(err, "out of memory");
        goto out;
    }
    ddl_topo_rank_t *rk = &m->ranks[rank];
    free(rk->pus);
    free(rk->cores);
    rk->pus = p;
    rk->cores = c;
    p = c = NULL;
    rk->ncores = hwloc_bitmap_weight(cs);
    rk->shared = 0;
    rk->numa = numa_of_set(t, b);
    rc = 0;
out:
    free(p);
    free(c);
    hwloc_bitmap_free(b);
    hwloc_bitmap_free(al);
    hwloc_bitmap_free(cs);
    if (rc < 0)
        errno = e;
    return rc;
}

void ddl_topo_map_free(ddl_topo_map_t *m)
{
    if (!m)
        return;
    if (m->ranks)
        for (int r = 0; r < m->nranks; r++) {
            free(m->ranks[r].cores);
            free(m->ranks[r].pus);
        }
    free(m->ranks);
    for (int i = 0; i < m->nnotes; i++)
        free(m->notes[i]);
    free(m->notes);
    free(m->allowed);
    free(m);
}

/* ---------------------------------------------------------------- environment */

static void env_add(ddl_topo_env_t *e, const char *name, const char *value, int user_wins)
{
    if (e->nvars == DDL_TOPO_ENV_MAX)
        return;
    ddl_topo_var_t *v = &e->vars[e->nvars++];
    snprintf(v->name, sizeof v->name, "%s", name);
    snprintf(v->value, sizeof v->value, "%s", value);
    v->kept = user_wins && getenv(name) != NULL;
}

int ddl_topo_rank_env(const ddl_topo_t *t, const ddl_topo_map_t *m, int rank, ddl_topo_env_t *env,
                      ddl_error_t *err)
{
    char buf[128];
    memset(env, 0, sizeof *env);
    if (!m || rank < 0 || rank >= m->nranks) {
        errno = ERANGE;
        return ddl_errprintf(err, "rank %d is not in the placement", rank);
    }
    const ddl_topo_rank_t *r = &m->ranks[rank];
    env->pus = strdup(r->pus);
    if (!env->pus) {
        errno = ENOMEM;
        return ddl_errprintf(err, "out of memory");
    }
    if (r->gpu >= 0) {
        const ddl_topo_gpu_t *g = &t->gpus[r->gpu];
        if (g->vendor_id == VENDOR_AMD) {
            env_add(env, "ROCR_VISIBLE_DEVICES", r->gpu_token, 0);
        } else {
            env_add(env, "CUDA_VISIBLE_DEVICES", r->gpu_token, 0);
            env_add(env, "CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
        }
        env_add(env, "DDL_BIND_GPU", g->busid, 0);
    }
    if (r->nic >= 0) {
        const ddl_topo_nic_t *n = &t->nics[r->nic];
        if (n->ofdev[0]) {
            snprintf(buf, sizeof buf, "%s:%d", n->ofdev, n->port);
            env_add(env, "UCX_NET_DEVICES", buf, 1);
            snprintf(buf, sizeof buf, "=%s:%d", n->ofdev, n->port);
            env_add(env, "NCCL_IB_HCA", buf, 1);
        } else if (!t->info.live || if_nametoindex(n->netdev) > 0) {
            env_add(env, "UCX_NET_DEVICES", n->netdev, 1);
            snprintf(buf, sizeof buf, "=%s", n->netdev);
            env_add(env, "NCCL_SOCKET_IFNAME", buf, 1);
        } else {
            snprintf(env->note, sizeof env->note,
                     "rank %d: network interface %s (%s) is not in this network namespace: "
                     "UCX_NET_DEVICES and NCCL_SOCKET_IFNAME are left unset",
                     rank, n->netdev, n->busid);
        }
        env_add(env, "DDL_BIND_NIC", n->name, 0);
    }
    snprintf(buf, sizeof buf, "%d", r->ncores > 0 ? r->ncores : 1);
    env_add(env, "OMP_NUM_THREADS", buf, 1);
    return 0;
}

int ddl_topo_bind_pid(pid_t pid, const char *pus, ddl_error_t *err)
{
    int rc = 0, e = 0;
    hwloc_bitmap_t b = hwloc_bitmap_alloc();
    if (!b || cpulist_parse(pus, b, NULL) < 0 || hwloc_bitmap_iszero(b)) {
        e = b ? EINVAL : ENOMEM;
        rc = ddl_errprintf(err, "cannot bind to PUs '%s': %s", pus, strerror(e));
        hwloc_bitmap_free(b);
        errno = e;
        return rc;
    }
    int last = hwloc_bitmap_last(b);
    cpu_set_t *cs = CPU_ALLOC((size_t)last + 1);
    size_t size = CPU_ALLOC_SIZE((size_t)last + 1);
    if (!cs) {
        hwloc_bitmap_free(b);
        errno = ENOMEM;
        return ddl_errprintf(err, "cannot bind to PUs %s: out of memory", pus);
    }
    CPU_ZERO_S(size, cs);
    for (int i = hwloc_bitmap_first(b); i >= 0; i = hwloc_bitmap_next(b, i))
        CPU_SET_S((size_t)i, size, cs);
    if (sched_setaffinity(pid, size, cs) < 0) {
        e = errno;
        rc = ddl_errprintf(err,
                           "cannot bind to PUs %s: %s (check the allowed CPUs: "
                           "Cpus_allowed_list in /proc/self/status)",
                           pus, strerror(e));
    }
    CPU_FREE(cs);
    hwloc_bitmap_free(b);
    if (rc < 0)
        errno = e;
    return rc;
}

int ddl_topo_env_apply(const ddl_topo_env_t *env, ddl_error_t *err)
{
    int rc = 0, e = 0;
    for (int i = 0; i < env->nvars; i++) {
        const ddl_topo_var_t *v = &env->vars[i];
        if (!v->kept && setenv(v->name, v->value, 1) < 0) {
            e = errno;
            rc = ddl_errprintf(err, "cannot set %s=%s: %s", v->name, v->value, strerror(e));
        }
    }
    if (!env->pus)
        goto out;
    if (setenv("DDL_BIND_CPUS", env->pus, 1) < 0) {
        e = errno;
        rc = ddl_errprintf(err, "cannot set DDL_BIND_CPUS=%s: %s", env->pus, strerror(e));
    }
    if (ddl_topo_bind_pid(0, env->pus, err) < 0) {
        e = errno;
        rc = -1;
    }
out:
    if (rc < 0)
        errno = e;
    return rc;
}

void ddl_topo_env_clear(ddl_topo_env_t *env)
{
    if (!env)
        return;
    free(env->pus);
    env->pus = NULL;
    env->nvars = 0;
}

/* plan_list: --bind LIST: the CPU lists, one per rank, round robin. */
static int plan_list(ddl_topo_t *t, ddl_topo_map_t *m, int np, const char *list,
                     ddl_error_t *err)
{
    int n = 1, rc = 0;
    char *copy = strdup(list), *save = NULL;
    for (const char *p = list; (p = strchr(p, ':')); p++)
        n++;
    char **entries = calloc((size_t)n, sizeof *entries);
    if (!copy || !entries) {
        free(copy);
        free(entries);
        errno = ENOMEM;
        return ddl_errprintf(err, "out of memory");
    }
    int k = 0;
    for (char *e = strtok_r(copy, ":", &save); e && k < n; e = strtok_r(NULL, ":", &save))
        entries[k++] = e;
    for (int i = 0; i < np && rc == 0 && k > 0; i++)
        rc = ddl_topo_map_set_cpus(t, m, i, entries[i % k], err);
    free(entries);
    free(copy);
    return rc;
}

ddl_topo_env_t *ddl_topo_plan(int np, const char *list, int *fatal, ddl_error_t *err)
{
    ddl_topo_grant_t *grant = calloc(1, sizeof *grant);
    ddl_topo_map_t *m = NULL;
    ddl_topo_env_t *envs = NULL;
    ddl_error_t gerr;
    *fatal = 0;
    ddl_topo_t *t = ddl_topo_load(NULL, err);
    if (!t || !grant) {
        if (t)
            ddl_errprintf(err, "out of memory");
        goto out;
    }
    if (ddl_topo_grant_from_env(t, grant, &gerr) < 0) {
        ddl_warn("%s; ranks are bound to cores only and keep the GPU variables", gerr.text);
        snprintf(grant->source, sizeof grant->source, "no usable GPU grant");
        grant->n = 0;
    }
    if (!(m = ddl_topo_assign(t, np, NULL, grant, err)))
        goto out;
    if (list && plan_list(t, m, np, list, err) < 0) {
        *fatal = 1;
        goto out;
    }
    for (int i = 0; i < m->nnotes; i++)
        ddl_debug("placement: %s", m->notes[i]);
    if (!(envs = calloc((size_t)np, sizeof *envs))) {
        ddl_errprintf(err, "out of memory for the placement of %d ranks", np);
        goto out;
    }
    for (int i = 0; i < np; i++) {
        const ddl_topo_rank_t *rk = &m->ranks[i];
        if (ddl_topo_rank_env(t, m, i, &envs[i], err) < 0) {
            for (int j = 0; j <= i; j++)
                ddl_topo_env_clear(&envs[j]);
            free(envs);
            envs = NULL;
            goto out;
        }
        if (envs[i].note[0])
            ddl_debug("placement: %s", envs[i].note);
        ddl_debug("local rank %d: GPU %s, NIC %s (%s), NUMA node %d, cores %s%s, PUs %s", i,
                  rk->gpu >= 0 ? ddl_topo_gpu(t, rk->gpu)->busid : "none",
                  rk->nic >= 0 ? ddl_topo_nic(t, rk->nic)->name : "none",
                  rk->nic >= 0 ? ddl_topo_rel_str(rk->nic_rel) : "-", rk->numa, rk->cores,
                  rk->shared ? " (shared)" : "", rk->pus);
    }
out:
    free(grant);
    ddl_topo_map_free(m);
    ddl_topo_free(t);
    return envs;
}
