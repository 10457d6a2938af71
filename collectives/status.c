/* status.c: names for libddl's status codes and the per-thread detail text
 * returned by ddl_last_error(). */
#include "config.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#include "ddl_int.h"
#include "log.h"

static __thread char last_error[512];
static _Atomic(ddl_status_t (*)(ddl_status_t)) fail_remap; /* warm.c, once opted in */

void ddl_fail_set_remap(ddl_status_t (*remap)(ddl_status_t))
{
    atomic_store(&fail_remap, remap);
}

const char *ddl_status_str(ddl_status_t status)
{
    switch (status) {
    case DDL_OK: return "DDL_OK: success";
    case DDL_INPROGRESS: return "DDL_INPROGRESS: operation in progress";
    case DDL_STOP: return "DDL_STOP: the job is being stopped: checkpoint and exit";
    case DDL_RESTART: return "DDL_RESTART: a new generation: call ddl_rejoin()";
    case DDL_ERR_INVALID: return "DDL_ERR_INVALID: invalid argument";
    case DDL_ERR_NOMEM: return "DDL_ERR_NOMEM: out of memory";
    case DDL_ERR_NOT_INITIALIZED: return "DDL_ERR_NOT_INITIALIZED: ddl_init() has not succeeded";
    case DDL_ERR_ALREADY: return "DDL_ERR_ALREADY: already initialised";
    case DDL_ERR_UNSUPPORTED: return "DDL_ERR_UNSUPPORTED: type/operation not supported";
    case DDL_ERR_BOOTSTRAP: return "DDL_ERR_BOOTSTRAP: bootstrap through the agent failed";
    case DDL_ERR_TRANSPORT: return "DDL_ERR_TRANSPORT: transport (UCX) error";
    case DDL_ERR_PEER: return "DDL_ERR_PEER: a peer rank failed";
    case DDL_ERR_TIMEOUT: return "DDL_ERR_TIMEOUT: timed out";
    case DDL_ERR_ABORTED: return "DDL_ERR_ABORTED: communicator aborted";
    case DDL_ERR_INTERNAL: return "DDL_ERR_INTERNAL: internal error (a bug in ddl)";
    case DDL_ERR_IO: return "DDL_ERR_IO: file input/output error";
    case DDL_ERR_CUDA: return "DDL_ERR_CUDA: a CUDA call failed";
    }
    return "DDL_ERR_UNKNOWN: unknown status code";
}

const char *ddl_last_error(void)
{
    return last_error;
}

void ddl_clear_error(void)
{
    last_error[0] = '\0';
}

ddl_status_t ddl_fail(ddl_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    ddl_debug("%s", last_error);
    ddl_status_t (*remap)(ddl_status_t) = atomic_load(&fail_remap);
    return remap ? remap(st) : st;
}
