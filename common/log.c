/* log.c: the leveled, prefixed stderr logger shared by ddl's programs and
 * libddl (see log.h).  One write(2) per line keeps lines whole when several
 * ranks share a terminal. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

static char log_component[64] = "ddl";
static volatile ddl_log_level_t log_level = DDL_LOG_INFO;
static int log_time; /* DDL_LOG_TIME: lines start with [epoch seconds.ms] */

int ddl_log_parse_level(const char *text)
{
    static const char *const names[] = {"error", "warn", "info", "debug", "trace"};
    if (!text || !*text)
        return -1;
    if (text[0] >= '0' && text[0] <= '4' && text[1] == '\0')
        return text[0] - '0';
    for (int i = 0; i < 5; i++)
        if (strcasecmp(text, names[i]) == 0)
            return i;
    if (strcasecmp(text, "warning") == 0)
        return DDL_LOG_WARN;
    return -1;
}

void ddl_log_init(const char *component, ddl_log_level_t level)
{
    if (component)
        snprintf(log_component, sizeof log_component, "%s", component);
    int env = ddl_log_parse_level(getenv("DDL_LOG_LEVEL"));
    log_level = env >= 0 ? (ddl_log_level_t)env : level;
    const char *t = getenv("DDL_LOG_TIME");
    log_time = t && *t && strcmp(t, "0") != 0;
}

void ddl_log_set_level(ddl_log_level_t level)
{
    log_level = level;
}

ddl_log_level_t ddl_log_get_level(void)
{
    return log_level;
}

void ddl_vlog(ddl_log_level_t level, const char *fmt, va_list ap)
{
    static const char *const tags[] = {"", "warning: ", "", "debug: ", "trace: "};
    char line[2048];
    int saved = errno;
    if (level > log_level)
        return;
    char when[32] = "";
    if (log_time) {
        int64_t ms = ddl_realtime_ms();
        snprintf(when, sizeof when, "[%lld.%03d] ", (long long)(ms / 1000), (int)(ms % 1000));
    }
    int n = snprintf(line, sizeof line, "%s%s: %s", when, log_component,
                     tags[level <= DDL_LOG_TRACE ? level : DDL_LOG_TRACE]);
    if (n < 0)
        n = 0;
    if ((size_t)n < sizeof line) {
        errno = saved; /* keep %m meaningful */
        int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
        if (m > 0)
            n += m;
    }
    if ((size_t)n >= sizeof line - 1)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t rc = write(STDERR_FILENO, line, (size_t)n);
    (void)rc;
    errno = saved;
}

void ddl_log(ddl_log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ddl_vlog(level, fmt, ap);
    va_end(ap);
}
