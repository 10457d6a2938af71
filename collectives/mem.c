/* mem.c: registered buffers (ddl_mem_register): one ucp_mem_map per buffer,
 * kept in a list that the transport searches for every send and receive,
 * so that repeated large transfers from the same buffers hand UCX their
 * registration (UCP_OP_ATTR_FIELD_MEMH) instead of costing a lookup in its
 * registration cache or a new registration.  A world of one has no UCX
 * context: its registrations are recorded but map nothing. */
#include "config.h"

#include <stdlib.h>

#include "ddl_int.h"

struct ddl_mem {
    char *base;
    size_t len;
    ucp_mem_h memh; /* NULL in a world of one */
    struct ddl_mem *next;
};

static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static ddl_mem_t *mem_head;
static atomic_int mem_count; /* lets the transport skip the lock when none */

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
    if (ddl_ctx.ucp) {
        ucp_mem_map_params_t p = {
            .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
            .address = buf,
            .length = len,
        };
        ucs_status_t us = ucp_mem_map(ddl_ctx.ucp, &p, &m->memh);
        if (us != UCS_OK) {
            free(m);
            return ddl_fail(DDL_ERR_TRANSPORT, "cannot register %zu bytes at %p: %s", len, buf,
                            ucs_status_string(us));
        }
    }
    pthread_mutex_lock(&mem_mu);
    m->next = mem_head;
    mem_head = m;
    atomic_fetch_add(&mem_count, 1);
    pthread_mutex_unlock(&mem_mu);
    *mem = m;
    return DDL_OK;
}

ddl_status_t ddl_mem_deregister(ddl_mem_t *mem)
{
    ddl_clear_error();
    if (!mem)
        return DDL_OK;
    pthread_mutex_lock(&mem_mu);
    ddl_mem_t **pp = &mem_head;
    while (*pp && *pp != mem)
        pp = &(*pp)->next;
    int found = *pp != NULL;
    if (found) {
        *pp = mem->next;
        atomic_fetch_sub(&mem_count, 1);
    }
    pthread_mutex_unlock(&mem_mu);
    if (!found)
        return ddl_fail(DDL_ERR_INVALID, "ddl_mem_deregister: %p is not a registration of this "
                        "process (deregistered twice, or after ddl_finalize())", (void *)mem);
    if (mem->memh && ddl_ctx.ucp)
        ucp_mem_unmap(ddl_ctx.ucp, mem->memh);
    free(mem);
    return DDL_OK;
}

void *ddl_mem_lookup(const void *buf, size_t len)
{
    void *memh = NULL;
    if (atomic_load_explicit(&mem_count, memory_order_relaxed) == 0)
        return NULL;
    pthread_mutex_lock(&mem_mu);
    for (ddl_mem_t *m = mem_head; m; m = m->next)
        if ((const char *)buf >= m->base && (const char *)buf + len <= m->base + m->len) {
            memh = m->memh;
            break;
        }
    pthread_mutex_unlock(&mem_mu);
    return memh;
}

void ddl_mem_release_all(void)
{
    pthread_mutex_lock(&mem_mu);
    ddl_mem_t *m = mem_head;
    mem_head = NULL;
    atomic_store(&mem_count, 0);
    pthread_mutex_unlock(&mem_mu);
    while (m) {
        ddl_mem_t *next = m->next;
        if (m->memh && ddl_ctx.ucp)
            ucp_mem_unmap(ddl_ctx.ucp, m->memh);
        free(m);
        m = next;
    }
}
