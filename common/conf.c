/* conf.c: read and check the administrator's configuration (conf.h) with
 * libconfuse: one option table (a row per key, its default and a one-line
 * doc), ranges and enumerations checked by validate callbacks as each value
 * is parsed (so messages carry the file and line), libconfuse's messages
 * captured into a ddl_error_t, and the effective values resolved once per
 * `partition NAME { ... }` section at load time.
 */
#include "config.h"

#include <confuse.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "ddl_limits.h"

/* The keys, valid at top level and inside partition sections.  F is the
 * flags: none at top level (defaults apply), CFGF_NODEFAULT in sections (a
 * key that is absent there inherits the top-level value). */
// clang-format off
#define DDL_CONF_KEYS(F)                                                                           \
    /* seconds between two heartbeats of an agent, 0.05-60 */                                     \
    CFG_FLOAT("heartbeat_interval", DDL_HEARTBEAT_DEFAULT_MS / 1000.0, F),                         \
    /* seconds without a heartbeat before a node counts as lost, 1-600 */                          \
    CFG_INT("node_timeout", DDL_NODE_TIMEOUT_DEFAULT_MS / 1000, F),                                \
    /* smallest --ddl-hang-timeout a user may ask for, seconds, 1-86400 */                         \
    CFG_INT("hang_timeout_min", 10, F),                                                            \
    /* largest --ddl-hang-timeout a user may ask for (and the default), seconds, 1-86400 */        \
    CFG_INT("hang_timeout_max", 3600, F),                                                          \
    /* most restarts a step may ask for with --ddl-restarts (and the default), 0-100 */            \
    CFG_INT("max_restarts", 10, F),                                                                \
    /* absolute directories under which checkpoints may be written; empty: anywhere */             \
    CFG_STR_LIST("checkpoint_roots", "{}", F),                                                     \
    /* absolute node-local checkpoint directory (%n: node id, %h: host name; unset: none) */       \
    CFG_STR("checkpoint_local_dir", NULL, F),                                                      \
    /* with it: every K-th checkpoint also to the shared directory, 0 (never)-1000000 */           \
    CFG_INT("checkpoint_shared_every", 1, F),                                                      \
    /* default placement of ranks on GPUs, NICs and cores: auto or none */                         \
    CFG_STR("bind", "auto", F),                                                                    \
    /* UCX_TLS given to the workers (unset: UCX's own choice) */                                   \
    CFG_STR("ucx_tls", NULL, F),                                                                   \
    /* verbosity of ddl's own messages: error, warn, info or debug */                              \
    CFG_STR("log_level", "warn", F),                                                               \
    /* absolute directory for ddl's per-step logs (unset: the job's stderr only) */                \
    CFG_STR("log_dir", NULL, F),                                                                   \
    /* absolute directory for the agents' Prometheus metrics files (unset: none) */                \
    CFG_STR("metrics_dir", NULL, F)
// clang-format on

typedef struct {
    const char *name;
    long min, max;
} conf_range_t;

/* whole seconds; the limits are ddl's (ddl_limits.h), shared with ddlrun, the
 * plugin's options and ddl-agent */
static const conf_range_t conf_ranges[] = {
    {"node_timeout", 1, DDL_NODE_TIMEOUT_MAX_MS / 1000},
    {"hang_timeout_min", 1, DDL_HANG_TIMEOUT_MAX_S},
    {"hang_timeout_max", 1, DDL_HANG_TIMEOUT_MAX_S},
    {"max_restarts", 0, DDL_MAX_RESTARTS},
    {"checkpoint_shared_every", 0, 1000000},
};

static const char *const conf_bind_values[] = {"auto", "none", NULL};
static const char *const conf_level_values[] = {"error", "warn", "info", "debug", NULL};

typedef struct {
    char *name;
    ddl_conf_values_t v;
} conf_partition_t;

struct ddl_conf {
    cfg_t *cfg;
    char *path;
    ddl_conf_values_t global;
    conf_partition_t *parts;
    size_t n_parts;
};

/* The message of the load in progress (libconfuse's callbacks carry no
 * user pointer); only the first message is kept, later ones are follow-ups
 * such as "parse error". */
static _Thread_local ddl_error_t *conf_err;
static _Thread_local int conf_err_set;

static void conf_errfunc(cfg_t *cfg, const char *fmt, va_list ap)
{
    if (conf_err_set)
        return;
    conf_err_set = 1;
    if (!conf_err)
        return;
    char *t = conf_err->text;
    size_t len = sizeof conf_err->text;
    int n = 0;
    if (cfg && cfg->filename && cfg->line)
        n = snprintf(t, len, "%s:%d: ", cfg->filename, cfg->line);
    else if (cfg && cfg->filename)
        n = snprintf(t, len, "%s: ", cfg->filename);
    if (n < 0 || (size_t)n >= len)
        n = 0;
    vsnprintf(t + n, len - (size_t)n, fmt, ap);
}

static int validate_int(cfg_t *cfg, cfg_opt_t *opt)
{
    long v = cfg_opt_getnint(opt, cfg_opt_size(opt) - 1);
    for (size_t i = 0; i < sizeof conf_ranges / sizeof conf_ranges[0]; i++) {
        if (strcmp(conf_ranges[i].name, opt->name) != 0)
            continue;
        if (v < conf_ranges[i].min || v > conf_ranges[i].max) {
            cfg_error(cfg, "%s: %ld is out of range (%ld-%ld)", opt->name, v, conf_ranges[i].min,
                      conf_ranges[i].max);
            return -1;
        }
    }
    return 0;
}

/* validate_float: heartbeat_interval, seconds with decimals, in whole
 * milliseconds from DDL_HEARTBEAT_MIN_MS to DDL_HEARTBEAT_MAX_MS. */
static int validate_float(cfg_t *cfg, cfg_opt_t *opt)
{
    double v = cfg_opt_getnfloat(opt, cfg_opt_size(opt) - 1);
    if (!(v * 1000.0 >= DDL_HEARTBEAT_MIN_MS - 0.5 && v * 1000.0 <= DDL_HEARTBEAT_MAX_MS + 0.5)) {
        cfg_error(cfg, "%s: %g is out of range (%g-%g seconds)", opt->name, v,
                  DDL_HEARTBEAT_MIN_MS / 1000.0, DDL_HEARTBEAT_MAX_MS / 1000.0);
        return -1;
    }
    return 0;
}

static int one_of(const char *s, const char *const *values)
{
    for (size_t i = 0; values[i]; i++)
        if (strcmp(s, values[i]) == 0)
            return 1;
    return 0;
}

/* clean_abs_path: absolute, and no empty-meaning "." or ".." component. */
static int clean_abs_path(const char *s)
{
    if (s[0] != '/')
        return 0;
    for (const char *p = s; *p;) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/");
        if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return 0;
        p += n;
    }
    return 1;
}

static int validate_str(cfg_t *cfg, cfg_opt_t *opt)
{
    unsigned int n = cfg_opt_size(opt);
    for (unsigned int i = 0; i < n; i++) {
        const char *s = cfg_opt_getnstr(opt, i);
        if (!s)
            continue;
        if (strcmp(opt->name, "bind") == 0 && !one_of(s, conf_bind_values)) {
            cfg_error(cfg, "bind: '%s' is not auto or none", s);
            return -1;
        }
        if (strcmp(opt->name, "log_level") == 0 && !one_of(s, conf_level_values)) {
            cfg_error(cfg, "log_level: '%s' is not error, warn, info or debug", s);
            return -1;
        }
        if ((strcmp(opt->name, "checkpoint_roots") == 0 || strcmp(opt->name, "log_dir") == 0 ||
             strcmp(opt->name, "checkpoint_local_dir") == 0 ||
             strcmp(opt->name, "metrics_dir") == 0) &&
            !clean_abs_path(s)) {
            cfg_error(cfg, "%s: '%s' is not an absolute path without '.' or '..'", opt->name, s);
            return -1;
        }
        if (strcmp(opt->name, "ucx_tls") == 0 && (s[0] == '\0' || strpbrk(s, " \t\n"))) {
            cfg_error(cfg, "ucx_tls: '%s' is not a comma-separated list of transports", s);
            return -1;
        }
    }
    return 0;
}

static void set_validators(cfg_t *cfg)
{
    static const char *const ints[] = {"node_timeout", "hang_timeout_min",
                                       "hang_timeout_max", "max_restarts",
                                       "checkpoint_shared_every"};
    static const char *const strs[] = {"checkpoint_roots", "bind",    "ucx_tls",
                                       "log_level",        "log_dir", "metrics_dir",
                                       "checkpoint_local_dir"};
    char name[64];
    cfg_set_validate_func(cfg, "heartbeat_interval", validate_float);
    cfg_set_validate_func(cfg, "partition|heartbeat_interval", validate_float);
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        cfg_set_validate_func(cfg, ints[i], validate_int);
        snprintf(name, sizeof name, "partition|%s", ints[i]);
        cfg_set_validate_func(cfg, name, validate_int);
    }
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        cfg_set_validate_func(cfg, strs[i], validate_str);
        snprintf(name, sizeof name, "partition|%s", strs[i]);
        cfg_set_validate_func(cfg, name, validate_str);
    }
}

/* resolve: the values set in sec (a partition section, or the top level)
 * over base (NULL at top level).  The roots array is allocated. */
static int resolve(cfg_t *sec, const ddl_conf_values_t *base, ddl_conf_values_t *v)
{
    if (base)
        *v = *base;
#define TAKE_INT(key, field)             \
    if (!base || cfg_size(sec, key) > 0) \
        v->field = cfg_getint(sec, key);
#define TAKE_STR(key, field)             \
    if (!base || cfg_size(sec, key) > 0) \
        v->field = cfg_getstr(sec, key);
    if (!base || cfg_size(sec, "heartbeat_interval") > 0)
        v->heartbeat_interval_ms = (long)(cfg_getfloat(sec, "heartbeat_interval") * 1000.0 + 0.5);
    TAKE_INT("node_timeout", node_timeout)
    TAKE_INT("hang_timeout_min", hang_timeout_min)
    TAKE_INT("hang_timeout_max", hang_timeout_max)
    TAKE_INT("max_restarts", max_restarts)
    TAKE_INT("checkpoint_shared_every", checkpoint_shared_every)
    TAKE_STR("checkpoint_local_dir", checkpoint_local_dir)
    TAKE_STR("bind", bind)
    TAKE_STR("ucx_tls", ucx_tls)
    TAKE_STR("log_level", log_level)
    TAKE_STR("log_dir", log_dir)
    TAKE_STR("metrics_dir", metrics_dir)
#undef TAKE_INT
#undef TAKE_STR
    if (!base || cfg_size(sec, "checkpoint_roots") > 0) {
        size_t n = cfg_size(sec, "checkpoint_roots");
        const char **roots = calloc(n ? n : 1, sizeof *roots);
        if (!roots)
            return -1;
        for (size_t i = 0; i < n; i++)
            roots[i] = cfg_getnstr(sec, "checkpoint_roots", (unsigned int)i);
        v->checkpoint_roots = roots;
        v->n_checkpoint_roots = n;
    } else {
        v->checkpoint_roots = NULL; /* shares base's: see owns_roots */
    }
    return 0;
}

/* check_values: the rules that involve two keys. */
static int check_values(const char *path, const char *part, const ddl_conf_values_t *v,
                        ddl_error_t *err)
{
    char where[128] = "";
    if (part)
        snprintf(where, sizeof where, "partition '%s': ", part);
    if (v->hang_timeout_min > v->hang_timeout_max)
        return ddl_errprintf(err,
                             "%s: %shang_timeout_min (%ld) is greater than "
                             "hang_timeout_max (%ld)",
                             path, where, v->hang_timeout_min, v->hang_timeout_max);
    if (v->heartbeat_interval_ms >= v->node_timeout * 1000)
        return ddl_errprintf(err,
                             "%s: %sheartbeat_interval (%g) must be less than "
                             "node_timeout (%ld)",
                             path, where, v->heartbeat_interval_ms / 1000.0, v->node_timeout);
    return 0;
}

/* ---------------------------------------------------------------- pre-scan
 *
 * libconfuse (3.3, as in Debian 12) expands ${VAR} (and ${VAR:-default}) from the
 * environment of the process that parses (under srun, the user's), lets a
 * repeated key silently replace the first, and takes an unterminated C
 * comment as running to the end of the file.  The same file must mean the
 * same to srun and slurmstepd, so the text is scanned first with the same
 * lexical rules as libconfuse's lexer (comments, the three kinds of strings
 * and their escapes, the punctuation) and refused, with file and line, for:
 * "${" outside a comment; a key set twice in one section (top level or one
 * partition block) or written with a backslash escape (it would escape the
 * check); an unterminated comment or string; a NUL byte; a stray '*' or '+'
 * (libconfuse drops them).  The statement structure (key = value, key = {list},
 * key += ..., partition NAME { ... }) is followed only to find the keys;
 * at anything else (an unknown key, a syntax error) that stops and
 * libconfuse reports the error. */

static const char *const conf_keys[] = {
    "heartbeat_interval", "node_timeout", "hang_timeout_min", "hang_timeout_max", "max_restarts",
    "checkpoint_roots",   "bind",         "ucx_tls",          "log_level",        "log_dir",
    "metrics_dir",        "checkpoint_local_dir", "checkpoint_shared_every"};
#define N_KEYS (sizeof conf_keys / sizeof conf_keys[0])

enum { T_EOF, T_ERR, T_STR, T_LBRACE, T_RBRACE, T_PUNCT, T_EQ, T_COMMA };

typedef struct {
    const char *name, *s;
    char *out; /* a copy of s with the comments blanked, or NULL */
    size_t len, i;
    int line;
    ddl_error_t *err;
    char tok[32]; /* a T_STR's text, if it is short enough to be a key */
    int tok_line;
    int escaped; /* the T_STR had a backslash escape */
} scan_t;

static int scan_fail(scan_t *sc, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int scan_fail(scan_t *sc, int line, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ddl_errprintf(sc->err, "%s:%d: %s", sc->name, line, msg);
    return T_ERR;
}

/* blank: replace s[from, to) in the copy with spaces, keeping newlines. */
static void blank(scan_t *sc, size_t from, size_t to)
{
    for (size_t j = from; sc->out && j < to; j++)
        if (sc->out[j] != '\n')
            sc->out[j] = ' ';
}

static int scan_env(scan_t *sc)
{
    return scan_fail(sc, sc->line,
                     "'${' here would be replaced from the environment of whichever process "
                     "reads the file (srun runs as the user): ddl.conf does not expand variables; "
                     "write the value itself");
}

/* scan_quoted: a string from its opening quote q; escapes as libconfuse
 * reads them (a backslash takes the next character along). */
static int scan_quoted(scan_t *sc, char q)
{
    int start = sc->line;
    size_t n = 0;
    sc->escaped = 0;
    for (sc->i++; sc->i < sc->len; sc->i++) {
        char c = sc->s[sc->i];
        if (c == q) {
            sc->i++;
            sc->tok[n < sizeof sc->tok ? n : 0] = '\0';
            return T_STR;
        }
        if (c == '\\' && sc->i + 1 < sc->len) {
            if (sc->s[++sc->i] == '\n')
                sc->line++;
            sc->escaped = 1;
            continue;
        }
        if (c == '\n')
            sc->line++;
        else if (c == '$' && sc->i + 1 < sc->len && sc->s[sc->i + 1] == '{')
            return scan_env(sc);
        if (n < sizeof sc->tok - 1)
            sc->tok[n++] = c;
        else
            n = sizeof sc->tok;
    }
    return scan_fail(sc, start, "unterminated string: the %c opened here is never closed", q);
}

/* scan_next: the next token, T_EOF at the end, T_ERR with sc->err set. */
static int scan_next(scan_t *sc)
{
    while (sc->i < sc->len) {
        const char *s = sc->s;
        char c = s[sc->i];
        char c1 = sc->i + 1 < sc->len ? s[sc->i + 1] : '\0';
        sc->tok_line = sc->line;
        if (c == ' ' || c == '\t' || c == '\r') {
            sc->i++;
        } else if (c == '\n') {
            sc->line++;
            sc->i++;
        } else if (c == '#' || (c == '/' && c1 == '/')) {
            size_t from = sc->i;
            while (sc->i < sc->len && s[sc->i] != '\n')
                sc->i++;
            blank(sc, from, sc->i);
        } else if (c == '/' && c1 == '*') {
            int start = sc->line;
            size_t from = sc->i;
            for (sc->i += 2;; sc->i++) {
                if (sc->i + 1 >= sc->len)
                    return scan_fail(sc, start,
                                     "unterminated comment: the '/*' opened here has "
                                     "no '*/'");
                if (s[sc->i] == '\n')
                    sc->line++;
                else if (s[sc->i] == '*' && s[sc->i + 1] == '/')
                    break;
            }
            sc->i += 2;
            blank(sc, from, sc->i);
        } else if (c == '"' || c == '\'') {
            return scan_quoted(sc, c);
        } else if (c == '{' || c == '}' || c == '(' || c == ')' || c == '=' || c == ',') {
            sc->i++;
            return c == '{'   ? T_LBRACE
                   : c == '}' ? T_RBRACE
                   : c == '=' ? T_EQ
                   : c == ',' ? T_COMMA
                              : T_PUNCT;
        } else if (c == '+' && c1 == '=') {
            sc->i += 2;
            return T_EQ;
        } else if (c == '\0') {
            return scan_fail(sc, sc->line, "a NUL byte: this is not a text file");
        } else if (c == '*' || c == '+') {
            return scan_fail(sc, sc->line, "unexpected '%c'", c);
        } else {
            /* an unquoted string: up to a blank or punctuation */
            size_t n = 0;
            sc->escaped = 0;
            for (; sc->i < sc->len && !strchr(" #\"'\t\n\r={}()+,*", s[sc->i]); sc->i++) {
                if (s[sc->i] == '\0')
                    return scan_fail(sc, sc->line, "a NUL byte: this is not a text file");
                if (s[sc->i] == '$' && sc->i + 1 < sc->len && s[sc->i + 1] == '{')
                    return scan_env(sc);
                if (n < sizeof sc->tok - 1)
                    sc->tok[n++] = s[sc->i];
                else
                    n = sizeof sc->tok;
            }
            sc->tok[n < sizeof sc->tok ? n : 0] = '\0';
            return T_STR;
        }
    }
    return T_EOF;
}

static int key_index(const char *k)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(k, conf_keys[i]) == 0)
            return (int)i;
    return -1;
}

/* conf_prescan: 0 if text passes the checks above, else -1 with err.
 * Also writes to out (len bytes) the text with its comments blanked:
 * libconfuse 3.3 counts one line too many at the end of each comment
 * (two for a '#' comment), which made its line numbers wrong after the
 * first comment; without comments it counts right. */
static int conf_prescan(const char *name, const char *text, size_t len, char *out, ddl_error_t *err)
{
    enum { S_KEY, S_TITLE, S_OPEN, S_ASSIGN, S_VALUE, S_LIST, S_SEP, S_DONE } st = S_KEY;
    scan_t sc = {.name = name, .s = text, .out = out, .len = len, .line = 1, .err = err};
    memcpy(out, text, len);
    /* the line where each key was set, 0: not yet; at the top level, in the section */
    int top[N_KEYS] = {0}, sect[N_KEYS] = {0};
    int depth = 0, k, t;
    while ((t = scan_next(&sc)) != T_EOF) {
        if (t == T_ERR)
            return -1;
        switch (st) {
        case S_KEY:
            if (t == T_RBRACE && depth > 0) {
                depth = 0;
            } else if (t == T_STR && sc.escaped) {
                ddl_errprintf(err, "%s:%d: a key written with a backslash escape: write it plainly",
                              name, sc.tok_line);
                return -1;
            } else if (t == T_STR && depth == 0 && strcmp(sc.tok, "partition") == 0) {
                st = S_TITLE;
            } else if (t == T_STR && (k = key_index(sc.tok)) >= 0) {
                int *seen = depth ? sect : top;
                if (seen[k]) {
                    ddl_errprintf(err,
                                  "%s:%d: %s is set a second time (first on line %d): each key "
                                  "may be set once at the top level and once in each partition "
                                  "section",
                                  name, sc.tok_line, conf_keys[k], seen[k]);
                    return -1;
                }
                seen[k] = sc.tok_line;
                st = S_ASSIGN;
            } else {
                st = S_DONE; /* libconfuse's error */
            }
            break;
        case S_TITLE:
            st = t == T_STR ? S_OPEN : S_DONE;
            break;
        case S_OPEN:
            st = t == T_LBRACE ? S_KEY : S_DONE;
            if (t == T_LBRACE) {
                depth = 1;
                memset(sect, 0, sizeof sect);
            }
            break;
        case S_ASSIGN:
            st = t == T_EQ ? S_VALUE : S_DONE;
            break;
        case S_VALUE:
            st = t == T_LBRACE ? S_LIST : t == T_STR ? S_KEY : S_DONE;
            break;
        case S_LIST:
            st = t == T_RBRACE ? S_KEY : t == T_STR ? S_SEP : S_DONE;
            break;
        case S_SEP:
            st = t == T_COMMA ? S_LIST : t == T_RBRACE ? S_KEY : S_DONE;
            break;
        case S_DONE:
            break;
        }
    }
    return 0;
}

void ddl_conf_free(ddl_conf_t *conf)
{
    if (!conf)
        return;
    int saved = errno;
    for (size_t i = 0; i < conf->n_parts; i++) {
        if (conf->parts[i].v.checkpoint_roots != conf->global.checkpoint_roots)
            free((void *)conf->parts[i].v.checkpoint_roots);
        free(conf->parts[i].name);
    }
    free(conf->parts);
    free((void *)conf->global.checkpoint_roots);
    if (conf->cfg)
        cfg_free(conf->cfg);
    free(conf->path);
    free(conf);
    errno = saved;
}

ddl_conf_t *ddl_conf_parse(const char *path, const char *text, size_t len, ddl_error_t *err)
{
    cfg_opt_t part_opts[] = {DDL_CONF_KEYS(CFGF_NODEFAULT), CFG_END()};
    cfg_opt_t opts[] = {
        DDL_CONF_KEYS(CFGF_NONE),
        /* partition NAME { ... }: any of the keys above, for one Slurm partition */
        CFG_SEC("partition", part_opts, CFGF_MULTI | CFGF_TITLE | CFGF_NO_TITLE_DUPES),
        CFG_END(),
    };
    ddl_error_t local;
    char *clean = malloc(len ? len : 1);
    if (!clean) {
        errno = ENOMEM;
        ddl_errprintf(err, "%s: out of memory", path);
        return NULL;
    }
    if (conf_prescan(path, text, len, clean, err) < 0) {
        free(clean);
        errno = EINVAL;
        return NULL;
    }
    ddl_conf_t *conf = calloc(1, sizeof *conf);
    if (!conf || !(conf->path = strdup(path))) {
        free(conf);
        free(clean);
        errno = ENOMEM;
        ddl_errprintf(err, "%s: out of memory", path);
        return NULL;
    }
    conf->cfg = cfg_init(opts, CFGF_NONE);
    if (!conf->cfg)
        goto nomem;
    cfg_set_error_function(conf->cfg, conf_errfunc);
    set_validators(conf->cfg);
    /* the name in libconfuse's messages (cfg_parse would expand a '~' in it) */
    free(conf->cfg->filename);
    if (!(conf->cfg->filename = strdup(path)))
        goto nomem;

    if (len > 0) {
        FILE *f = fmemopen(clean, len, "r");
        if (!f)
            goto nomem;
        conf_err = err ? err : &local;
        conf_err_set = 0;
        conf_err->text[0] = '\0';
        int rc = cfg_parse_fp(conf->cfg, f);
        conf_err = NULL;
        fclose(f);
        free(clean);
        clean = NULL;
        if (rc != CFG_SUCCESS) {
            if (!conf_err_set || (err && err->text[0] == '\0'))
                ddl_errprintf(err, "%s: invalid configuration", path);
            goto invalid;
        }
    }

    if (resolve(conf->cfg, NULL, &conf->global) < 0)
        goto nomem;
    if (check_values(path, NULL, &conf->global, err) < 0)
        goto invalid;
    size_t n = cfg_size(conf->cfg, "partition");
    conf->parts = calloc(n ? n : 1, sizeof *conf->parts);
    if (!conf->parts)
        goto nomem;
    for (size_t i = 0; i < n; i++) {
        cfg_t *sec = cfg_getnsec(conf->cfg, "partition", (unsigned int)i);
        conf_partition_t *p = &conf->parts[conf->n_parts];
        if (!(p->name = strdup(cfg_title(sec))))
            goto nomem;
        conf->n_parts++;
        if (resolve(sec, &conf->global, &p->v) < 0)
            goto nomem;
        if (!p->v.checkpoint_roots)
            p->v.checkpoint_roots = conf->global.checkpoint_roots;
        if (check_values(path, p->name, &p->v, err) < 0)
            goto invalid;
    }
    free(clean);
    return conf;

nomem:
    free(clean);
    ddl_conf_free(conf);
    errno = ENOMEM;
    ddl_errprintf(err, "%s: out of memory", path);
    return NULL;
invalid:
    free(clean);
    ddl_conf_free(conf);
    errno = EINVAL;
    return NULL;
}

/* The largest file read: a ddl.conf is a few kilobytes. */
#define CONF_MAX_BYTES (1u << 20)

ddl_conf_t *ddl_conf_load(const char *path, ddl_error_t *err)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        int e = errno;
        ddl_errprintf(err, "%s: %s", path, strerror(e));
        errno = e;
        return NULL;
    }
    char *text = malloc(CONF_MAX_BYTES + 1);
    if (!text) {
        fclose(f);
        errno = ENOMEM;
        ddl_errprintf(err, "%s: out of memory", path);
        return NULL;
    }
    size_t len = fread(text, 1, CONF_MAX_BYTES + 1, f);
    int e = ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (e || len > CONF_MAX_BYTES) {
        if (e)
            ddl_errprintf(err, "%s: %s", path, strerror(e));
        else
            ddl_errprintf(err, "%s: larger than %u bytes: not a ddl.conf", path, CONF_MAX_BYTES);
        free(text);
        errno = e ? e : EFBIG;
        return NULL;
    }
    ddl_conf_t *conf = ddl_conf_parse(path, text, len, err);
    e = errno;
    free(text);
    errno = e;
    return conf;
}

const char *ddl_conf_path(const ddl_conf_t *conf)
{
    return conf->path;
}

const ddl_conf_values_t *ddl_conf_get(const ddl_conf_t *conf, const char *partition)
{
    if (partition)
        for (size_t i = 0; i < conf->n_parts; i++)
            if (strcmp(conf->parts[i].name, partition) == 0)
                return &conf->parts[i].v;
    return &conf->global;
}

int ddl_conf_has_partition(const ddl_conf_t *conf, const char *partition)
{
    return partition && ddl_conf_get(conf, partition) != &conf->global;
}

static void print_quoted(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void print_str(FILE *f, const char *key, const char *s)
{
    if (!s) {
        fprintf(f, "# %s is unset\n", key);
        return;
    }
    fprintf(f, "%s = ", key);
    print_quoted(f, s);
    fputc('\n', f);
}

void ddl_conf_print(const ddl_conf_values_t *v, FILE *f)
{
    fprintf(f, "heartbeat_interval = %g\n", v->heartbeat_interval_ms / 1000.0);
    fprintf(f, "node_timeout = %ld\n", v->node_timeout);
    fprintf(f, "hang_timeout_min = %ld\n", v->hang_timeout_min);
    fprintf(f, "hang_timeout_max = %ld\n", v->hang_timeout_max);
    fprintf(f, "max_restarts = %ld\n", v->max_restarts);
    fprintf(f, "checkpoint_roots = {");
    for (size_t i = 0; i < v->n_checkpoint_roots; i++) {
        if (i)
            fprintf(f, ", ");
        print_quoted(f, v->checkpoint_roots[i]);
    }
    fprintf(f, "}\n");
    print_str(f, "checkpoint_local_dir", v->checkpoint_local_dir);
    fprintf(f, "checkpoint_shared_every = %ld\n", v->checkpoint_shared_every);
    print_str(f, "bind", v->bind);
    print_str(f, "ucx_tls", v->ucx_tls);
    print_str(f, "log_level", v->log_level);
    print_str(f, "log_dir", v->log_dir);
    print_str(f, "metrics_dir", v->metrics_dir);
}

int ddl_conf_checkpoint_allowed(const ddl_conf_values_t *v, const char *dir)
{
    if (!clean_abs_path(dir))
        return 0;
    if (v->n_checkpoint_roots == 0)
        return 1;
    for (size_t i = 0; i < v->n_checkpoint_roots; i++) {
        const char *root = v->checkpoint_roots[i];
        size_t len = strlen(root);
        while (len > 0 && root[len - 1] == '/')
            len--;
        if (strncmp(dir, root, len) == 0 && (dir[len] == '/' || dir[len] == '\0'))
            return 1;
    }
    return 0;
}
