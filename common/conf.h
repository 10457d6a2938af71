/* conf.h: the administrator's configuration, /etc/slurm/ddl.conf.
 *
 * The file is read with libconfuse, strictly: an unknown key, a value of the
 * wrong type or out of range, or a malformed line is an error whose message
 * names the file and line.  So that the file means the same to every process
 * that reads it (srun as the user, slurmstepd as root), these are errors
 * too: "${" outside a comment (libconfuse would substitute the reader's
 * environment), a key set twice in one section (the second would silently
 * win), an unterminated comment or string.  Top-level keys set the site's defaults and
 * limits; `partition NAME { ... }` sections override any of them for the
 * jobs of one Slurm partition.  The keys, their defaults and ranges are
 * listed once, in the option table of conf.c, and in etc/ddl.conf.
 *
 * Convention (util.h): -1 with errno and a message in a ddl_error_t on
 * failure, no side effects on failure; ddl_conf_free accepts NULL.
 */
#ifndef DDL_CONF_H
#define DDL_CONF_H

#include <stddef.h>
#include <stdio.h>

#include "util.h"

/* The default place of the file. */
#define DDL_CONF_DEFAULT_PATH "/etc/slurm/ddl.conf"

/* The effective values for one partition (or the site defaults).  Strings
 * point into the ddl_conf_t they come from; NULL means unset. */
typedef struct {
    long heartbeat_interval_ms; /* ms between heartbeats (given in seconds, 0.05-60) */
    long node_timeout;       /* seconds without heartbeat before a node is lost, 1-600 */
    long hang_timeout_min;   /* bounds of a user's --ddl-hang-timeout, seconds */
    long hang_timeout_max;
    long max_restarts;                   /* upper bound of --ddl-restarts, 0-100 */
    const char *const *checkpoint_roots; /* allowed checkpoint roots; none: any */
    size_t n_checkpoint_roots;
    const char *checkpoint_local_dir; /* node-local checkpoint level's directory, or NULL */
    long checkpoint_shared_every;     /* with it: every K-th checkpoint shared, 0 never */
    const char *bind;      /* "auto" or "none" */
    const char *ucx_tls;   /* UCX_TLS for the workers, or NULL */
    const char *log_level; /* "error", "warn", "info" or "debug" */
    const char *log_dir;   /* absolute directory for ddl's per-step logs, or NULL */
    const char *metrics_dir; /* absolute directory for the agents' metrics files, or NULL */
} ddl_conf_values_t;

typedef struct ddl_conf ddl_conf_t;

/* ddl_conf_load: read and check the file at path.  Returns the loaded
 * configuration (free with ddl_conf_free) or NULL with errno (ENOENT,
 * EACCES... for an unreadable file, EINVAL for an invalid one, ENOMEM) and
 * a message "PATH:LINE: ..." (or "PATH: ...") in err. */
ddl_conf_t *ddl_conf_load(const char *path, ddl_error_t *err);

/* ddl_conf_parse: the same from len bytes of text (not necessarily
 * NUL-terminated, not kept), path naming it in messages and for
 * ddl_conf_path.  NULL with errno EINVAL or ENOMEM and err. */
ddl_conf_t *ddl_conf_parse(const char *path, const char *text, size_t len, ddl_error_t *err);

/* ddl_conf_free: release conf (NULL is fine); preserves errno. */
void ddl_conf_free(ddl_conf_t *conf);

/* ddl_conf_path: the path the configuration was read from. */
const char *ddl_conf_path(const ddl_conf_t *conf);

/* ddl_conf_get: the effective values for partition (the site defaults for
 * NULL or a partition without a section).  The pointer stays valid until
 * ddl_conf_free. */
const ddl_conf_values_t *ddl_conf_get(const ddl_conf_t *conf, const char *partition);

/* ddl_conf_has_partition: 1 if the file has a section for partition. */
int ddl_conf_has_partition(const ddl_conf_t *conf, const char *partition);

/* ddl_conf_print: write v to f as "key = value" lines, in the file's own
 * syntax (unset strings print as comments). */
void ddl_conf_print(const ddl_conf_values_t *v, FILE *f);

/* ddl_conf_checkpoint_allowed: 1 if dir (absolute, without "." or ".."
 * components) lies in one of v's checkpoint_roots, or v has none; 0 if not. */
int ddl_conf_checkpoint_allowed(const ddl_conf_values_t *v, const char *dir);

#endif
