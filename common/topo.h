/* topo.h: the node's topology and the placement of its local ranks.
 *
 * Detection uses hwloc with every I/O object kept (packages, NUMA nodes,
 * cores, PUs and the PCI tree), from the live machine or from an hwloc XML
 * export.  GPUs are PCI functions of vendor NVIDIA (0x10de) or AMD (0x1002)
 * with class 0300, 0302, 0380 or 1200, numbered in PCI bus-id order (what
 * CUDA_DEVICE_ORDER=PCI_BUS_ID gives); BMC VGA controllers and NVSwitches
 * are not GPUs.  On the live machine, NVML (libnvidia-ml.so.1, loaded at run
 * time when present) adds device indexes, names and UUIDs.  NICs are PCI
 * functions of class 02xx; high-speed adapters (InfiniBand, RoCE, Slingshot,
 * EFA) are preferred over plain Ethernet.
 *
 * The placement (ddl_topo_assign) gives each local rank a GPU among those
 * granted to the step, the nearest NIC (same PCIe switch > same host bridge
 * > same NUMA node > same package > anywhere; spread over equals), and cores
 * of its GPU's NUMA node split among the ranks that share it, within the
 * allowed cpuset.  ddl_topo_rank_env turns one rank's placement into the
 * CPU mask and environment variables that apply it.
 *
 * Convention (as in util.h): 0 or a valid pointer on success; -1 or NULL with
 * errno set on failure, and a message for people in the ddl_error_t.  Not
 * thread-safe: one thread per ddl_topo_t.
 */
#ifndef DDL_TOPO_H
#define DDL_TOPO_H

#include <stdint.h>
#include <sys/types.h>

#include "util.h"

/* The most GPUs a grant may list. */
#define DDL_TOPO_MAX_GRANT 256

/* The most variables ddl_topo_rank_env produces for one rank. */
#define DDL_TOPO_ENV_MAX 12

typedef struct ddl_topo ddl_topo_t;

/* How near a NIC is to a GPU (or to a CPU-only rank's NUMA node), nearest
 * first. */
typedef enum {
    DDL_TOPO_REL_SWITCH = 0,     /* behind the same PCIe switch (a common PCI bridge) */
    DDL_TOPO_REL_HOSTBRIDGE = 1, /* on the same PCI host bridge only */
    DDL_TOPO_REL_NUMA = 2,       /* in the same NUMA node */
    DDL_TOPO_REL_PACKAGE = 3,    /* in the same package, another NUMA node */
    DDL_TOPO_REL_MACHINE = 4,    /* anywhere else: another package */
} ddl_topo_rel_t;

/* Strings in these structures belong to the topology and stay valid until
 * ddl_topo_free(); they are never NULL ("" when unknown).  CPU sets are in
 * list format ("0-13,112-125"): cores as hwloc logical indexes, PUs as OS
 * indexes (the numbers sched_setaffinity and Cpus_allowed_list use). */
typedef struct {
    int index;        /* position in PCI bus-id order among all GPUs, from 0 */
    int vendor_index; /* position among GPUs of the same vendor (CUDA/ROCm index) */
    char busid[24];   /* "0000:4e:00.0" */
    unsigned vendor_id, device_id, class_id;
    const char *model;    /* NVML name, else the GPU OS device's model, else PCI name */
    const char *osdevs;   /* OS devices, comma-separated ("cuda0,nvml0") */
    const char *uuid;     /* "GPU-..." from NVML or the XML's NVML device */
    int nvml_index;       /* NVML device index; -1 when NVML was not used */
    const char *locality; /* first non-I/O ancestor, "Group L#3" */
    int numa;             /* OS index of the first NUMA node of that ancestor, -1 none */
    int package;          /* logical index of its package, -1 when not in one */
    const char *cores;    /* the ancestor's cores */
    const char *pus;      /* the ancestor's PUs */
} ddl_topo_gpu_t;

typedef struct {
    int index; /* position in PCI bus-id order among all NICs, from 0 */
    char busid[24];
    unsigned vendor_id, device_id, class_id;
    const char *name;   /* the name ddl reports: ofdev if any, else netdev, else "" */
    const char *netdev; /* Linux network interface ("ib0", "hsi0", "eth0") */
    const char *ofdev;  /* OpenFabrics (verbs) device ("mlx5_0", "rdmap197s0") */
    int port;           /* verbs port: the first active one, else the first; 0 without ofdev */
    int port_active;    /* 1 that port is active, 0 it is not, -1 unknown */
    int hca;            /* 1 high-speed (InfiniBand, RoCE, Slingshot, EFA), 0 Ethernet */
    int numa;           /* as for GPUs */
    int package;
    const char *locality;
} ddl_topo_nic_t;

typedef struct {
    int os_index; /* NUMA node P# */
    int package;  /* logical index of its package, -1 when not in one */
    const char *cores;
    const char *pus;
    uint64_t memory_mib;
} ddl_topo_numa_t;

typedef struct {
    const char *source;        /* "this machine" or the XML file's path */
    int live;                  /* 1: the live machine (binding applies here) */
    const char *hwloc_version; /* of the library in use, "2.9.0" */
    const char *nvml;          /* what NVML gave: "not used (XML input)", "not available (...)" */
    int npackages, nnuma, ncores, npus;
    const char *allowed; /* PUs the topology allows (its cgroup, for the live machine) */
} ddl_topo_info_t;

/* ddl_topo_load: detect the topology of this machine (xml_path NULL; NVML
 * is tried) or read an hwloc XML export (format 1.x or 2.x).  Returns a
 * topology to release with ddl_topo_free(); NULL with errno (ENOENT, EINVAL,
 * ENOMEM...) and a message naming the file on failure. */
ddl_topo_t *ddl_topo_load(const char *xml_path, ddl_error_t *err);

/* ddl_topo_load_xml_buffer: like ddl_topo_load from an XML text in memory
 * (len bytes, NUL terminator not required).  source names it in messages. */
ddl_topo_t *ddl_topo_load_xml_buffer(const char *buf, size_t len, const char *source,
                                     ddl_error_t *err);

/* ddl_topo_free: release a topology (NULL is allowed). */
void ddl_topo_free(ddl_topo_t *t);

/* Accessors: counts, and the i-th object (NULL with errno ERANGE when i is
 * out of range).  The pointers belong to t. */
const ddl_topo_info_t *ddl_topo_info(const ddl_topo_t *t);
int ddl_topo_gpu_count(const ddl_topo_t *t);
const ddl_topo_gpu_t *ddl_topo_gpu(const ddl_topo_t *t, int i);
int ddl_topo_nic_count(const ddl_topo_t *t);
const ddl_topo_nic_t *ddl_topo_nic(const ddl_topo_t *t, int i);
int ddl_topo_numa_count(const ddl_topo_t *t);
const ddl_topo_numa_t *ddl_topo_numa(const ddl_topo_t *t, int i);

/* ddl_topo_gpu_nic_rel: how near NIC nic is to GPU gpu (indexes). */
ddl_topo_rel_t ddl_topo_gpu_nic_rel(const ddl_topo_t *t, int gpu, int nic);

/* ddl_topo_rel_str: "switch", "host-bridge", "numa", "package", "machine". */
const char *ddl_topo_rel_str(ddl_topo_rel_t rel);

/* The GPUs a step may use, in the order ranks take them. */
typedef struct {
    int n;                              /* number of GPUs granted (0: none) */
    int gpu[DDL_TOPO_MAX_GRANT];        /* GPU indexes (PCI bus-id order) */
    char token[DDL_TOPO_MAX_GRANT][64]; /* each one's value for *_VISIBLE_DEVICES */
    char source[64];                    /* where the grant came from, for messages */
} ddl_topo_grant_t;

/* ddl_topo_grant_all: every GPU of t, each token its vendor index. */
void ddl_topo_grant_all(const ddl_topo_t *t, ddl_topo_grant_t *g);

/* ddl_topo_grant_parse: the GPUs named by list, a comma-separated list of
 * GPU indexes in PCI bus-id order or of NVIDIA UUIDs ("GPU-..."; needs NVML
 * or an XML with NVML devices); "" grants none.  name is the variable or
 * option the list came from, used in messages and g->source.  visible, when
 * not NULL and with as many entries as list, gives the tokens a rank's
 * *_VISIBLE_DEVICES gets (under Slurm with device cgroups, CUDA_VISIBLE_DEVICES
 * numbers the granted GPUs from 0 while SLURM_STEP_GPUS names them);
 * otherwise a GPU's token is its vendor index (or its UUID when named so).
 * -1 with errno EINVAL (not an index or UUID, duplicate, unknown UUID) or
 * ERANGE (no such GPU), and a message naming name, the entry and the GPUs
 * this node has. */
int ddl_topo_grant_parse(const ddl_topo_t *t, const char *name, const char *list,
                         const char *visible, ddl_topo_grant_t *g, ddl_error_t *err);

/* ddl_topo_grant_from_env: the grant Slurm or the user gave this process:
 * SLURM_STEP_GPUS if set, else CUDA_VISIBLE_DEVICES (ROCR_VISIBLE_DEVICES on
 * AMD GPUs), else GPU_DEVICE_ORDINAL, else every GPU.  Errors as
 * ddl_topo_grant_parse. */
int ddl_topo_grant_from_env(const ddl_topo_t *t, ddl_topo_grant_t *g, ddl_error_t *err);

/* One local rank's placement. */
typedef struct {
    int rank;               /* local rank, 0.. */
    int gpu;                /* GPU index, -1 none */
    int gpu_ranks;          /* ranks placed on that GPU (1: it has it alone) */
    char gpu_token[64];     /* its *_VISIBLE_DEVICES value, "" without GPU */
    int nic;                /* NIC index, -1 none */
    ddl_topo_rel_t nic_rel; /* how near the NIC is */
    int numa;               /* OS index of the NUMA node its cores come from, -1 */
    char *cores;            /* its cores (list of logical indexes) */
    char *pus;              /* its PUs (list of OS indexes): the CPU mask */
    int ncores;             /* number of cores (OMP_NUM_THREADS) */
    int shared;             /* 1: its cores are shared with other ranks (oversubscribed) */
} ddl_topo_rank_t;

typedef struct {
    int nranks;
    ddl_topo_rank_t *ranks; /* nranks entries */
    char *allowed;          /* the allowed PUs the placement stayed within */
    char grant_source[64];  /* where the GPU grant came from */
    int ngranted;           /* GPUs granted */
    int nnotes;
    char **notes; /* lines for people: sharing, fall-backs, missing devices */
} ddl_topo_map_t;

/* ddl_topo_assign: place nranks (1-65536) local ranks.  allowed is a PU
 * list the ranks must stay in; NULL means the topology's allowed PUs, and on
 * the live machine also the caller's sched_getaffinity() mask.  grant NULL
 * means every GPU.  Ranks take granted GPUs in order (rank r gets grant entry
 * r * n / nranks: one each, several ranks per GPU when there are more ranks,
 * spread out when fewer).  Without GPUs ranks are spread over the NUMA
 * nodes that have allowed PUs.  Never fails for lack of GPUs, NICs or cores:
 * it shares and says so in notes.  Returns a map to release with
 * ddl_topo_map_free(); NULL with errno EINVAL (bad nranks or allowed list,
 * allowed list outside the machine) or ENOMEM and a message. */
ddl_topo_map_t *ddl_topo_assign(const ddl_topo_t *t, int nranks, const char *allowed,
                                const ddl_topo_grant_t *grant, ddl_error_t *err);

/* ddl_topo_map_set_cpus: replace rank's PUs by an explicit list (ddlrun
 * --bind LIST), which must lie within m->allowed.  -1 with errno EINVAL or
 * ERANGE (bad rank) and a message; the map is unchanged then. */
int ddl_topo_map_set_cpus(const ddl_topo_t *t, ddl_topo_map_t *m, int rank, const char *pus,
                          ddl_error_t *err);

/* ddl_topo_map_free: release a map (NULL is allowed). */
void ddl_topo_map_free(ddl_topo_map_t *m);

/* ddl_topo_cpulist_check: 0 if text is a CPU list ("0-3,8,10-11": decimal
 * numbers below 65536, ranges low-high); -1 with errno EINVAL and a message
 * naming the bad part otherwise. */
int ddl_topo_cpulist_check(const char *text, ddl_error_t *err);

/* One environment variable of a rank's placement. */
typedef struct {
    char name[32];
    char value[128];
    int kept; /* 1: already set in this process's environment: the user's value wins */
} ddl_topo_var_t;

/* What applies one rank's placement. */
typedef struct {
    char *pus; /* CPU mask (PU list); owned; NULL: leave it */
    int nvars;
    ddl_topo_var_t vars[DDL_TOPO_ENV_MAX];
    char note[256]; /* a variable left out and why, or "" */
} ddl_topo_env_t;

/* ddl_topo_rank_env: the CPU mask and variables for rank: DDL_BIND_CPUS,
 * CUDA_VISIBLE_DEVICES + CUDA_DEVICE_ORDER=PCI_BUS_ID (NVIDIA) or
 * ROCR_VISIBLE_DEVICES (AMD) and DDL_BIND_GPU; for the NIC DDL_BIND_NIC and
 * either UCX_NET_DEVICES=<ofdev>:<port> + NCCL_IB_HCA==<ofdev>:<port> or,
 * for an adapter without verbs device, UCX_NET_DEVICES=<netdev> +
 * NCCL_SOCKET_IFNAME==<netdev>; OMP_NUM_THREADS=<cores>.  A variable already
 * in the environment is marked kept (the user's wins), except DDL_BIND_* and
 * the *_VISIBLE_DEVICES one, which narrows the grant it was read from to the
 * rank's GPU.  On the live machine an Ethernet interface missing from this
 * network namespace is left out (see env->note).  Release with
 * ddl_topo_env_clear().  -1 with errno ERANGE (bad rank) or ENOMEM. */
int ddl_topo_rank_env(const ddl_topo_t *t, const ddl_topo_map_t *m, int rank, ddl_topo_env_t *env,
                      ddl_error_t *err);

/* ddl_topo_env_apply: set the variables not kept (setenv) and bind the
 * calling thread, and so what it executes, to env->pus (sched_setaffinity).
 * For a child between fork() and exec().  -1 with errno and a message if a
 * variable or the mask could not be set (the rest is still applied). */
int ddl_topo_env_apply(const ddl_topo_env_t *env, ddl_error_t *err);

/* ddl_topo_env_clear: release what ddl_topo_rank_env allocated. */
void ddl_topo_env_clear(ddl_topo_env_t *env);

/* ddl_topo_bind_pid: bind process pid (0: the calling thread) to the PUs
 * of the CPU list pus (sched_setaffinity).  -1 with errno and a message. */
int ddl_topo_bind_pid(pid_t pid, const char *pus, ddl_error_t *err);

/* ddl_topo_plan: the whole placement of np local ranks on this machine, as
 * ddlrun --bind and ddl-launch under Slurm use it: each rank's GPU (from the
 * grant in the environment), nearest NIC and cores, or with list the CPU
 * lists "0-3:4-7" (one per rank, reused round robin), as np entries for
 * ddl_topo_env_apply / ddl_topo_bind_pid (release each with
 * ddl_topo_env_clear, then free the array).  Placement notes go to the
 * debug log.  NULL when it cannot be done: *fatal 1 when list does not fit
 * this machine (an error), 0 when the topology cannot be used (the ranks
 * should run unbound, with a warning); the reason is in err. */
ddl_topo_env_t *ddl_topo_plan(int np, const char *list, int *fatal, ddl_error_t *err);

#endif
