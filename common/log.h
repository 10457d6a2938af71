/* log.h: ddl's one logger.
 *
 * Every line goes to stderr as "<component>: <message>" ("ddlrun: rank 2 was
 * killed by signal 9"), with "warning: " or "debug: " after the prefix for
 * those levels.  The level comes from ddl_log_init() or, if set, the
 * DDL_LOG_LEVEL environment variable (error, warn, info, debug, trace or
 * 0-4).  Messages are lower case, one line, and say what failed with the
 * value and the fix.  The plugin never uses this logger (slurm_* only).
 * Thread-safe: each line is written with one write(2).
 */
#ifndef DDL_LOG_H
#define DDL_LOG_H

#include <stdarg.h>

#include "util.h"

typedef enum {
    DDL_LOG_ERROR = 0,
    DDL_LOG_WARN = 1,
    DDL_LOG_INFO = 2,
    DDL_LOG_DEBUG = 3,
    DDL_LOG_TRACE = 4,
} ddl_log_level_t;

/* ddl_log_init: set the component prefix (copied) and the default level;
 * DDL_LOG_LEVEL, when valid, overrides the level; DDL_LOG_TIME set (not
 * "0") starts every line with the wall-clock time, "[1764000000.123] ", so
 * that events on several nodes can be put in order. */
void ddl_log_init(const char *component, ddl_log_level_t level);

/* ddl_log_set_level / ddl_log_get_level: change or read the level. */
void ddl_log_set_level(ddl_log_level_t level);
ddl_log_level_t ddl_log_get_level(void);

/* ddl_log_parse_level: "warn" or "1" -> DDL_LOG_WARN; -1 if not a level. */
int ddl_log_parse_level(const char *text);

/* ddl_log_open_step: also append every line that passes the level to
 * DIR/step-STEP.HOST.log (DDL_LOG_DIR: the per-step logs of the agents and
 * supervisors), each starting with the wall-clock time and the pid.  dir is
 * opened as safefile.h's ddl_dir_open does (created 0700 if missing, owned
 * by the caller and writable by nobody else, no link followed in a shared
 * directory); the file is opened with O_APPEND | O_NOFOLLOW, created 0600,
 * and must be a plain file of the caller with one link.  0, or -1 with
 * errno and err (the log goes on to stderr only).  Call it once, before
 * other threads log. */
int ddl_log_open_step(const char *dir, const char *step, const char *host, ddl_error_t *err);

/* ddl_log_step_async: from now on the step log's lines (above) are written
 * by a thread of their own, so that a slow or hung file system under
 * log_dir never holds up the caller (the agent's loop, whose beats keep
 * its node alive); stderr stays as it is.  Lines that find the buffer
 * (256 KiB) full are counted and a line in the file says how many.  Call
 * after ddl_log_open_step, in a process that does not fork afterwards.
 * 0 (also when there is no step log), or -1 with errno (no memory or no
 * thread: the writes stay in the callers). */
int ddl_log_step_async(void);

/* ddl_log_flush: wait up to timeout_ms for the step log's thread to write
 * what it holds (before exit).  0, or -1 if lines are still unwritten. */
int ddl_log_flush(int timeout_ms);

/* Tests only: the step log's thread sleeps this many ms before each write
 * (a slow file system); 0 otherwise. */
extern int ddl_log_write_delay_ms;

void ddl_log(ddl_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void ddl_vlog(ddl_log_level_t level, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

#define ddl_error(...) ddl_log(DDL_LOG_ERROR, __VA_ARGS__)
#define ddl_warn(...) ddl_log(DDL_LOG_WARN, __VA_ARGS__)
#define ddl_info(...) ddl_log(DDL_LOG_INFO, __VA_ARGS__)
#define ddl_debug(...)                                                       \
    do {                                                                     \
        if (ddl_log_get_level() >= DDL_LOG_DEBUG)                            \
            ddl_log(DDL_LOG_DEBUG, __VA_ARGS__);                             \
    } while (0)
#define ddl_trace(...)                                                       \
    do {                                                                     \
        if (ddl_log_get_level() >= DDL_LOG_TRACE)                            \
            ddl_log(DDL_LOG_TRACE, __VA_ARGS__);                             \
    } while (0)

#endif
