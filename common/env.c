/* env.c: the table of ddl's DDL_* environment variables (ddl_env.def) and
 * its typed readers (see env.h). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"

const ddl_env_info_t ddl_env_table[DDLENV_COUNT] = {
#define DDL_ENV(name, type, min, max, def, text, set_by, read_by, doc) \
    {#name, DDL_ENV_##type, (long)(min), (long)(max), (long)(def), text, set_by, read_by, doc},
#include "ddl_env.def"
#undef DDL_ENV
};

const char *ddl_env_type_word(ddl_env_type_t type)
{
    switch (type) {
    case DDL_ENV_MS:
        return "a number of milliseconds";
    case DDL_ENV_SECONDS:
        return "a number of seconds";
    case DDL_ENV_BYTES:
        return "a number of bytes";
    case DDL_ENV_BOOL:
        return "0 or 1";
    case DDL_ENV_FD:
        return "a file descriptor";
    case DDL_ENV_STRING:
        return "a string";
    case DDL_ENV_PATH:
        return "a path";
    case DDL_ENV_ENUM:
        return "one of";
    default:
        return "a number";
    }
}

const char *ddl_env_str(ddl_env_id_t id)
{
    const char *v = (unsigned)id < DDLENV_COUNT ? getenv(ddl_env_table[id].name) : NULL;
    return v && *v ? v : NULL;
}

int ddl_env_parse(ddl_env_id_t id, const char *v, long min, long max, long *out, ddl_error_t *err)
{
    if ((unsigned)id >= DDLENV_COUNT) {
        errno = EINVAL;
        return ddl_errprintf(err, "no such DDL_* variable (%d)", (int)id);
    }
    const ddl_env_info_t *e = &ddl_env_table[id];
    if (min < e->min)
        min = e->min;
    if (max > e->max)
        max = e->max;
    if (!v || ddl_parse_long(v, min, max, out) < 0) {
        errno = EINVAL;
        if (e->type == DDL_ENV_BOOL)
            return ddl_errprintf(err, "%s='%s' is not 0 or 1", e->name, v ? v : "");
        return ddl_errprintf(err, "%s='%s' is not %s (%ld-%ld)", e->name, v ? v : "",
                             ddl_env_type_word(e->type), min, max);
    }
    return 0;
}

int ddl_env_long_in(ddl_env_id_t id, long min, long max, long def, long *out, ddl_error_t *err)
{
    const char *v = ddl_env_str(id);
    if (!v && (unsigned)id < DDLENV_COUNT) {
        *out = def;
        return 0;
    }
    return ddl_env_parse(id, v, min, max, out, err) < 0 ? -1 : 1;
}

int ddl_env_long(ddl_env_id_t id, long *out, ddl_error_t *err)
{
    if ((unsigned)id >= DDLENV_COUNT) {
        errno = EINVAL;
        return ddl_errprintf(err, "no such DDL_* variable (%d)", (int)id);
    }
    const ddl_env_info_t *e = &ddl_env_table[id];
    return ddl_env_long_in(id, e->min, e->max, e->def, out, err);
}

int ddl_env_enum(ddl_env_id_t id, int *out, ddl_error_t *err)
{
    if ((unsigned)id >= DDLENV_COUNT || ddl_env_table[id].type != DDL_ENV_ENUM) {
        errno = EINVAL;
        return ddl_errprintf(err, "no such DDL_* list variable (%d)", (int)id);
    }
    const ddl_env_info_t *e = &ddl_env_table[id];
    const char *v = ddl_env_str(id);
    *out = 0;
    if (!v)
        return 0;
    size_t n = strlen(v);
    int i = 0;
    for (const char *w = e->text; *w; i++) {
        size_t k = strcspn(w, " ");
        if (k == n && strncmp(w, v, n) == 0) {
            *out = i;
            return 1;
        }
        w += k;
        w += *w == ' ';
    }
    char list[256];
    size_t used = 0;
    for (const char *w = e->text; *w && used + 3 < sizeof list; w++) {
        if (*w == ' ')
            list[used++] = ',';
        list[used++] = *w;
    }
    list[used] = '\0';
    errno = EINVAL;
    return ddl_errprintf(err, "%s='%s' is not one of %s", e->name, v, list);
}

char *ddl_env_format_long(ddl_env_id_t id, long value, char *buf, size_t len)
{
    snprintf(buf, len, "%s=%ld", (unsigned)id < DDLENV_COUNT ? ddl_env_table[id].name : "?", value);
    return buf;
}
