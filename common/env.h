/* env.h: the DDL_* environment variables, from the one table of them
 * (common/ddl_env.def): their ids, their description, and typed readers
 * that check a value against the table's range and report a bad one in
 * one wording:
 *
 *   DDL_GRACE_MS='x' is not a number of milliseconds (0-600000)
 *
 * Readers take an unset or empty variable as its default.  They read the
 * process environment (getenv): thread-safe as long as nobody changes the
 * environment meanwhile.  They never print.
 */
#ifndef DDL_ENV_H
#define DDL_ENV_H

#include <stddef.h>

#include "ddl_limits.h"
#include "util.h"

typedef enum {
    DDL_ENV_INT,     /* a number */
    DDL_ENV_MS,      /* a number of milliseconds */
    DDL_ENV_SECONDS, /* a number of seconds */
    DDL_ENV_BYTES,   /* a number of bytes */
    DDL_ENV_BOOL,    /* 0 or 1 */
    DDL_ENV_FD,      /* a file descriptor */
    DDL_ENV_STRING,
    DDL_ENV_PATH,
    DDL_ENV_ENUM, /* one of a list of words */
} ddl_env_type_t;

/* DDLENV_DDL_RANK...: a variable's index in ddl_env_table. */
typedef enum {
#define DDL_ENV(name, ...) DDLENV_##name,
#include "ddl_env.def"
#undef DDL_ENV
    DDLENV_COUNT
} ddl_env_id_t;

typedef struct {
    const char *name; /* "DDL_RANK" */
    ddl_env_type_t type;
    long min, max, def; /* numeric types: range and default */
    const char *text;   /* ENUM: the values, space-separated, default first;
                             * others: the default in words, or "" */
    const char *set_by, *read_by, *doc;
} ddl_env_info_t;

/* The table, in ddl_env.def's order (DDLENV_COUNT entries). */
extern const ddl_env_info_t ddl_env_table[DDLENV_COUNT];

/* ddl_env_type_word: "a number of milliseconds" (for messages). */
const char *ddl_env_type_word(ddl_env_type_t type);

/* ddl_env_str: the variable's value; NULL when unset or empty. */
const char *ddl_env_str(ddl_env_id_t id);

/* ddl_env_long: a numeric variable (INT, MS, SECONDS, BYTES, BOOL, FD) in
 * its table's range into *out, the table's default when unset or empty.
 * Returns 1 (set), 0 (default), or -1 with errno EINVAL and err
 * "NAME='v' is not a number of seconds (1-86400)". */
int ddl_env_long(ddl_env_id_t id, long *out, ddl_error_t *err);

/* ddl_env_long_in: the same with a range [min, max] narrower than the
 * table's (clipped to it) and the default def (DDL_RANK: below DDL_SIZE).
 * The message names the narrower range. */
int ddl_env_long_in(ddl_env_id_t id, long min, long max, long def, long *out, ddl_error_t *err);

/* ddl_env_parse: v as the value of a numeric variable, in [min, max]
 * clipped to the table's range.  0, or -1 with errno EINVAL and err as
 * above (v NULL: "NAME='' is not ..."). */
int ddl_env_parse(ddl_env_id_t id, const char *v, long min, long max, long *out, ddl_error_t *err);

/* ddl_env_enum: an ENUM variable as the index of its value in the table's
 * list (0, the default, when unset or empty).  Returns 1, 0, or -1 with
 * errno EINVAL and err "NAME='v' is not one of auto, ring, ...". */
int ddl_env_enum(ddl_env_id_t id, int *out, ddl_error_t *err);

/* ddl_env_format_long: "NAME=VALUE" of a numeric variable into buf (for
 * environments built as strings).  Returns buf. */
char *ddl_env_format_long(ddl_env_id_t id, long value, char *buf, size_t len);

#endif
