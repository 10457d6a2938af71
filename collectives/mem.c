/* mem.c: registered buffers (ddl_mem_register): one UCX mapping per buffer
 * (made by ucx.c), kept in a list that the transport searches for every
 * send and receive (through ddl_mem_lookup, which init.c hands to it), so
 * that repeated large transfers from the same buffers hand UCX their
 * registration (UCP_OP_ATTR_FIELD_MEMH) instead of costing a lookup in its
 * registration cache or a new registration.  A world of one has no UCX
 * context: its registrations are recorded but map nothing.
 *
 * Mapped allocations (ddl_mem_alloc) are the same list's other kind: UCX
 * allocates the memory (shared memory where the node's transports allow),
 * every rank packs its memory key, the world allgathers the keys, and each
 * rank maps the allocations of its node peers (ucp_rkey_ptr).  Only if every
 * rank mapped all of its node peers' (an allreduce) is the allocation
 * "mapped": then the ring algorithms read from it directly (through
 * ddl_mem_mapped_ops, the transport's mapped memory).  Allocations are
 * numbered in order (serial), the same on every rank. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "ddl_int.h"
#include "log.h"

struct ddl_mem {
    char *base;
    size_t len;
    void *memh;       /* the UCX mapping (ucx.c); NULL in a world of one */
    uint32_t serial;  /* ddl_mem_alloc: 1, 2, ...; 0 for a registration */
    int mapped;       /* every node peer of every rank mapped it */
    char **peer_base; /* world rank -> where its allocation is mapped here */
    void **peer_rkey; /* world rank -> its unpacked memory key */
    struct ddl_mem *next;
};

/* What each rank publishes about an allocation (allgathered as bytes). */
#define DDL_RKEY_MAX 240
typedef struct {
    uint64_t addr;
    uint32_t rkey_len; /* 0: no key (the node peers cannot map it) */
    uint32_t pad;
    uint8_t rkey[DDL_RKEY_MAX];
} mem_rec_t;

static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static ddl_mem_t *mem_head;
static atomic_int mem_count; /* lets the transport skip the lock when none */
static atomic_int mapped_count;
static uint32_t next_serial; /* only the thread making collectives */

static void list_add(ddl_mem_t *m)
{
    pthread_mutex_lock(&mem_mu);
    m->next = mem_head;
    mem_head = m;
    atomic_fetch_add(&mem_count, 1);
    if (m->mapped)
        atomic_fetch_add(&mapped_count, 1);
    pthread_mutex_unlock(&mem_mu);
}

/* list_take: remove m from the list if it is there and of the kind asked
 * for (allocated or registered): 1 if removed, 0 if not in the list (m is
 * not looked at: it may be freed), -1 if there but of the other kind. */
static int list_take(ddl_mem_t *m, int allocated)
{
    pthread_mutex_lock(&mem_mu);
    ddl_mem_t **pp = &mem_head;
    while (*pp && *pp != m)
        pp = &(*pp)->next;
    int r = *pp == NULL ? 0 : (m->serial != 0) == (allocated != 0) ? 1 : -1;
    if (r == 1) {
        *pp = m->next;
        atomic_fetch_sub(&mem_count, 1);
        if (m->mapped)
            atomic_fetch_sub(&mapped_count, 1);
    }
    pthread_mutex_unlock(&mem_mu);
    return r;
}

/* release: unmap what m maps (peers' keys first) and free it. */
static void release(ddl_mem_t *m)
{
    if (m->peer_rkey)
        for (int i = 0; i < ddl_ctx.size; i++)
            ddl_ucx_unmap_peer(m->peer_rkey[i]);
    if (m->memh)
        ddl_ucx_mem_unmap(m->memh);
    else if (m->serial)
        free(m->base); /* a world of one: posix_memalign */
    free(m->peer_base);
    free(m->peer_rkey);
    free(m);
}

ddl_status_t ddl_mem_register(void *buf, size_t len, ddl_mem_t **mem)
{
    ddl_clear_error();
    if (!ddl_ctx.initialized)
        return ddl_fail(DDL_ERR_NOT_INITIALIZED, "call ddl_init() before ddl_mem_register()");
    if (!buf || !mem || len == 0)
        return ddl_fail(DDL_ERR_INVALID, "ddl_mem_register: buffer %p, %zu bytes, handle %p: "
                        "all must be non-zero", buf, len, (void *)mem);
    ddl_mem_t *m = calloc(1, sizeof *m);
    if (!m)
        return ddl_fail(DDL_ERR_NOMEM, "out of memory for a registration");
    m->base = buf;
    m->len = len;
    if (ddl_ctx.tl) {
        ddl_status_t st = ddl_ucx_mem_register(buf, len, &m->memh);
        if (st != DDL_OK) {
            free(m);
            return st;
        }
    }
    list_add(m);
    *mem = m;
    return DDL_OK;
}

/* map_peers: allgather every rank's key for m (none if this rank does not
 * have its memory) and map the node peers'; *ok is 1 if this rank mapped
 * all of them. */
static ddl_status_t map_peers(ddl_mem_t *m, int have, int *ok)
{
    const int n = ddl_ctx.size, me = ddl_ctx.rank;
    mem_rec_t *recs = calloc((size_t)n, sizeof *recs);
    m->peer_base = calloc((size_t)n, sizeof *m->peer_base);
    m->peer_rkey = calloc((size_t)n, sizeof *m->peer_rkey);
    if (!recs || !m->peer_base || !m->peer_rkey) {
        free(recs);
        return ddl_fail(DDL_ERR_NOMEM, "out of memory for %d memory keys", n);
    }
    if (have) {
        recs[me].addr = (uintptr_t)m->base;
        recs[me].rkey_len = (uint32_t)ddl_ucx_rkey_pack(m->memh, recs[me].rkey, DDL_RKEY_MAX);
    }
    ddl_status_t st = ddl_allgather(&ddl_ctx.world, DDL_IN_PLACE, recs, sizeof *recs, DDL_UINT8);
    *ok = have;
    for (int i = 0; st == DDL_OK && i < n; i++) {
        if (i == me || ddl_ctx.node_of[i] != ddl_ctx.node_of[me])
            continue;
        if (recs[i].rkey_len)
            m->peer_base[i] = ddl_ucx_map_peer(i, recs[i].rkey, recs[i].addr, &m->peer_rkey[i]);
        if (!m->peer_base[i])
            *ok = 0;
    }
    free(recs);
    return st;
}

ddl_status_t ddl_mem_alloc(size_t len, void **ptr, ddl_mem_t **mem)
{
    ddl_clear_error();
    if (!ddl_ctx.initialized)
        return ddl_fail(DDL_ERR_NOT_INITIALIZED, "call ddl_init() before ddl_mem_alloc()");
    if (!ptr || !mem || len == 0)
        return ddl_fail(DDL_ERR_INVALID, "ddl_mem_alloc: %zu bytes, pointer %p, handle %p: "
                        "all must be non-zero", len, (void *)ptr, (void *)mem);
    ddl_mem_t *m = calloc(1, sizeof *m);
    if (!m)
        return ddl_fail(DDL_ERR_NOMEM, "out of memory for an allocation");
    m->len = len;
    m->serial = ++next_serial;
    ddl_status_t st = DDL_OK;
    if (ddl_ctx.tl) {
        void *base = NULL;
        st = ddl_ucx_mem_alloc(len, &base, &m->memh);
        m->base = base;
    } else if (posix_memalign((void **)&m->base, 4096, len) != 0) {
        m->base = NULL;
        st = ddl_fail(DDL_ERR_NOMEM, "cannot allocate %zu bytes", len);
    }
    /* every rank takes part in the collectives, even one that failed
     * above, so that no rank waits for it: it then offers no key */
    int ok = st == DDL_OK, ok_all = ok;
    if (ddl_ctx.size > 1) {
        ddl_status_t cst = map_peers(m, ok, &ok);
        if (cst == DDL_OK)
            cst = ddl_allreduce(&ddl_ctx.world, &ok, &ok_all, 1, DDL_INT32, DDL_MIN);
        if (st == DDL_OK)
            st = cst;
    }
    if (st != DDL_OK) {
        release(m);
        return st;
    }
    memset(m->base, 0, len);
    m->mapped = ddl_ctx.size > 1 && ok_all;
    if (!m->mapped && m->peer_rkey) {
        for (int i = 0; i < ddl_ctx.size; i++) {
            ddl_ucx_unmap_peer(m->peer_rkey[i]);
            m->peer_rkey[i] = NULL;
            m->peer_base[i] = NULL;
        }
    }
    ddl_debug("ddl_mem_alloc #%u: %zu bytes at %p, %s", m->serial, len, (void *)m->base,
              m->mapped ? "mapped by the node's ranks"
                        : "not mapped (no shared-memory transport, or a world of one)");
    list_add(m);
    *ptr = m->base;
    *mem = m;
    return DDL_OK;
}

ddl_status_t ddl_mem_free(ddl_mem_t *mem)
{
    ddl_clear_error();
    if (!mem)
        return DDL_OK;
    if (list_take(mem, 1) != 1)
        return ddl_fail(DDL_ERR_INVALID, "ddl_mem_free: %p is not an allocation of "
                        "ddl_mem_alloc() (freed twice, after ddl_finalize(), or a "
                        "registration: use ddl_mem_deregister())", (void *)mem);
    /* no rank may still read it: every rank stops using it first */
    ddl_status_t st = ddl_ctx.size > 1 ? ddl_barrier(&ddl_ctx.world) : DDL_OK;
    release(mem);
    return st;
}

int ddl_mem_mapped_count(void)
{
    return atomic_load_explicit(&mapped_count, memory_order_relaxed);
}

/* containing: the newest entry holding buf[0, len) (a mapped allocation
 * only, if mapped_only), or NULL.  Called with mem_mu held. */
static ddl_mem_t *containing(const void *buf, size_t len, int mapped_only)
{
    for (ddl_mem_t *m = mem_head; m; m = m->next)
        if ((m->mapped || !mapped_only) && (const char *)buf >= m->base &&
            (const char *)buf + len <= m->base + m->len)
            return m;
    return NULL;
}

int ddl_mem_mapped_at(const void *buf, size_t len, uint32_t *serial, uint64_t *off)
{
    if (ddl_mem_mapped_count() == 0)
        return 0;
    pthread_mutex_lock(&mem_mu);
    ddl_mem_t *m = containing(buf, len, 1);
    if (m) {
        *serial = m->serial;
        *off = (uint64_t)((const char *)buf - m->base);
    }
    pthread_mutex_unlock(&mem_mu);
    return m != NULL;
}

const char *ddl_mem_peer_view(uint32_t serial, int peer, uint64_t off)
{
    const char *p = NULL;
    pthread_mutex_lock(&mem_mu);
    for (ddl_mem_t *m = mem_head; m; m = m->next)
        if (m->serial == serial && m->mapped) {
            if (peer >= 0 && peer < ddl_ctx.size && m->peer_base[peer] && off <= m->len)
                p = m->peer_base[peer] + off;
            break;
        }
    pthread_mutex_unlock(&mem_mu);
    return p;
}

const ddl_mapped_ops_t ddl_mem_mapped_ops = {
    .count = ddl_mem_mapped_count,
    .at = ddl_mem_mapped_at,
    .peer_view = ddl_mem_peer_view,
};

ddl_status_t ddl_mem_deregister(ddl_mem_t *mem)
{
    ddl_clear_error();
    if (!mem)
        return DDL_OK;
    if (list_take(mem, 0) != 1)
        return ddl_fail(DDL_ERR_INVALID, "ddl_mem_deregister: %p is not a registration of this "
                        "process (deregistered twice, after ddl_finalize(), or memory from "
                        "ddl_mem_alloc(): use ddl_mem_free())", (void *)mem);
    release(mem);
    return DDL_OK;
}

void *ddl_mem_lookup(const void *buf, size_t len)
{
    if (atomic_load_explicit(&mem_count, memory_order_relaxed) == 0)
        return NULL;
    pthread_mutex_lock(&mem_mu);
    ddl_mem_t *m = containing(buf, len, 0);
    void *memh = m ? m->memh : NULL;
    pthread_mutex_unlock(&mem_mu);
    return memh;
}

void ddl_mem_release_all(void)
{
    pthread_mutex_lock(&mem_mu);
    ddl_mem_t *m = mem_head;
    mem_head = NULL;
    atomic_store(&mem_count, 0);
    atomic_store(&mapped_count, 0);
    pthread_mutex_unlock(&mem_mu);
    while (m) {
        ddl_mem_t *next = m->next;
        release(m);
        m = next;
    }
}
