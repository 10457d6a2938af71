/* spank_opts.c: the checks of srun's --ddl* option values (spank_opts.h),
 * shared by the SPANK plugin and its fuzz target. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "conf.h"
#include "ddl_limits.h"
#include "spank_opts.h"
#include "util.h"

static int opt_number(const char *name, const char *arg, long min, long max, const char *what,
                      long *out, char *msg, size_t msglen)
{
    if (!arg || ddl_parse_long(arg, min, max, out) < 0) {
        snprintf(msg, msglen, "--%s: '%s' is not a %s (%ld-%ld)", name, arg ? arg : "", what, min,
                 max);
        return -1;
    }
    return 0;
}

int ddl_spank_opt_parse(ddl_spank_opts_t *o, int val, const char *arg, char *msg, size_t msglen)
{
    static const ddl_conf_values_t any_root; /* no roots: only the path's form is checked */
    ddl_error_t bind_err = {""};
    msg[0] = '\0';
    switch (val) {
    case OPT_DDL:
        o->enabled = 1;
        return 0;
    case OPT_VERBOSE:
        o->verbose = 1;
        return 0;
    case OPT_RESTARTS:
        return opt_number("ddl-restarts", arg, 0, DDL_MAX_RESTARTS, "number", &o->restarts, msg, msglen);
    case OPT_SPARES:
        return opt_number("ddl-spares", arg, 0, DDL_MAX_NODES, "number of nodes", &o->spares, msg, msglen);
    case OPT_MIN_NODES:
        return opt_number("ddl-min-nodes", arg, 0, DDL_MAX_NODES, "number of nodes", &o->min_nodes, msg,
                          msglen);
    case OPT_HEARTBEAT:
        if (!arg || ddl_parse_seconds_ms(arg, DDL_HEARTBEAT_MIN_MS, DDL_HEARTBEAT_MAX_MS,
                                         &o->heartbeat_ms) < 0) {
            snprintf(msg, msglen, "--ddl-heartbeat: '%s' is not a number of seconds (%g-%g)",
                     arg ? arg : "", DDL_HEARTBEAT_MIN_MS / 1000.0, DDL_HEARTBEAT_MAX_MS / 1000.0);
            return -1;
        }
        return 0;
    case OPT_HANG_TIMEOUT:
        return opt_number("ddl-hang-timeout", arg, 1, DDL_HANG_TIMEOUT_MAX_S, "number of seconds",
                          &o->hang_timeout_s, msg, msglen);
    case OPT_CHECKPOINT_DIR:
        if (!arg || strlen(arg) >= sizeof o->checkpoint_dir ||
            !ddl_conf_checkpoint_allowed(&any_root, arg)) {
            snprintf(msg, msglen,
                     "--ddl-checkpoint-dir: '%s' is not an absolute path without '.' or '..'",
                     arg ? arg : "");
            return -1;
        }
        snprintf(o->checkpoint_dir, sizeof o->checkpoint_dir, "%s", arg);
        return 0;
    case OPT_CKPT_LOCAL:
        if (!arg || strlen(arg) >= sizeof o->checkpoint_local ||
            !ddl_conf_checkpoint_allowed(&any_root, arg)) {
            snprintf(msg, msglen,
                     "--ddl-checkpoint-local: '%s' is not an absolute path without '.' or '..'",
                     arg ? arg : "");
            return -1;
        }
        snprintf(o->checkpoint_local, sizeof o->checkpoint_local, "%s", arg);
        return 0;
    case OPT_CKPT_SHARED_EVERY:
        return opt_number("ddl-checkpoint-shared-every", arg, 0, 1000000, "number",
                          &o->shared_every, msg, msglen);
    case OPT_BIND:
        if (!arg || strlen(arg) >= sizeof o->bind || ddl_bind_check(arg, &bind_err) < 0) {
            snprintf(msg, msglen,
                     "--ddl-bind: '%s' is not auto, none or CPU lists separated by ':' "
                     "(like 0-3:4-7)%s%s",
                     arg ? arg : "", arg && strlen(arg) < sizeof o->bind ? ": " : "",
                     arg && strlen(arg) < sizeof o->bind ? bind_err.text : "");
            return -1;
        }
        snprintf(o->bind, sizeof o->bind, "%s", arg);
        return 0;
    default:
        return -1;
    }
}
