/* t_spank_opts.c: the Slurm plugin's checks of srun's --ddl-* values, in
 * this process: plugins/spank_ddl.c is compiled into the test with
 * stand-ins for the few Slurm functions it calls, and its option callback
 * gets each option's boundary values from common/ddl_limits.h (the limits
 * ddlrun, ddl.conf and ddl-agent use too); the options' help texts state
 * the same ranges. */
#include "../../plugins/spank_ddl.c"

#include <stdarg.h>

#include "../tap.h"

/* ---- stand-ins for slurmd/srun's functions ---- */
static char last_error[1024];

void slurm_error(const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    vsnprintf(last_error, sizeof last_error, format, ap);
    va_end(ap);
}

void slurm_info(const char *format, ...)
{
    (void)format;
}

spank_context_t spank_context(void)
{
    return S_CTX_LOCAL;
}

spank_err_t spank_get_item(spank_t spank, spank_item_t item, ...)
{
    (void)spank;
    (void)item;
    return ESPANK_ERROR;
}

spank_err_t spank_getenv(spank_t spank, const char *var, char *buf, int len)
{
    (void)spank;
    (void)var;
    (void)buf;
    (void)len;
    return ESPANK_ENV_NOEXIST;
}

spank_err_t spank_setenv(spank_t spank, const char *var, const char *val, int overwrite)
{
    (void)spank;
    (void)var;
    (void)val;
    (void)overwrite;
    return ESPANK_SUCCESS;
}

spank_err_t spank_unsetenv(spank_t spank, const char *var)
{
    (void)spank;
    (void)var;
    return ESPANK_SUCCESS;
}

spank_err_t spank_option_register(spank_t spank, struct spank_option *opt)
{
    (void)spank;
    (void)opt;
    return ESPANK_SUCCESS;
}

const char *spank_strerror(spank_err_t err)
{
    (void)err;
    return "error";
}

/* ---- the test ---- */

/* check: OPTION (its callback value val) takes lo and hi into *field and
 * refuses lo - 1 and hi + 1 with a message naming the range. */
static void check(const char *option, int val, long lo, long hi, const long *field)
{
    char text[32], range[64];
    snprintf(range, sizeof range, "(%ld-%ld)", lo, hi);
    snprintf(text, sizeof text, "%ld", lo);
    ok(opt_cb(val, text, 0) == 0 && *field == lo, "--%s %s (the smallest) is accepted", option,
       text);
    snprintf(text, sizeof text, "%ld", hi);
    ok(opt_cb(val, text, 0) == 0 && *field == hi, "--%s %s (the largest) is accepted", option,
       text);
    last_error[0] = '\0';
    snprintf(text, sizeof text, "%ld", lo - 1);
    ok(opt_cb(val, text, 0) < 0 && strstr(last_error, range), "--%s %s is refused, naming %s",
       option, text, range);
    if (!strstr(last_error, range))
        diag("message: %s", last_error);
    last_error[0] = '\0';
    snprintf(text, sizeof text, "%ld", hi + 1);
    ok(opt_cb(val, text, 0) < 0 && strstr(last_error, range), "--%s %s is refused, naming %s",
       option, text, range);
    if (!strstr(last_error, range))
        diag("message: %s", last_error);
}

/* help: the option's help text in srun --help states range. */
static void help(const char *option, long lo, long hi)
{
    char range[64];
    snprintf(range, sizeof range, "(%ld-%ld", lo, hi);
    for (size_t i = 0; i < sizeof ddl_options / sizeof ddl_options[0]; i++) {
        if (strcmp(ddl_options[i].name, option) == 0) {
            ok(strstr(ddl_options[i].usage, range) != NULL, "--%s's help says %s...)", option,
               range);
            if (!strstr(ddl_options[i].usage, range))
                diag("help: %s", ddl_options[i].usage);
            return;
        }
    }
    ok(0, "--%s is an option", option);
}

int main(void)
{
    plan(NO_PLAN);
    check("ddl-restarts", OPT_RESTARTS, 0, DDL_MAX_RESTARTS, &ddl_opt.restarts);
    check("ddl-spares", OPT_SPARES, 0, DDL_MAX_NODES, &ddl_opt.spares);
    check("ddl-min-nodes", OPT_MIN_NODES, 0, DDL_MAX_NODES, &ddl_opt.min_nodes);
    ok(opt_cb(OPT_HEARTBEAT, "0.05", 0) == 0 && ddl_opt.heartbeat_ms == 50,
       "--ddl-heartbeat 0.05 (the smallest) is 50 ms");
    ok(opt_cb(OPT_HEARTBEAT, "60", 0) == 0 && ddl_opt.heartbeat_ms == 60000,
       "--ddl-heartbeat 60 (the largest) is 60000 ms");
    ok(opt_cb(OPT_HEARTBEAT, "0.25", 0) == 0 && ddl_opt.heartbeat_ms == 250,
       "--ddl-heartbeat 0.25 is 250 ms");
    const char *bad_beats[] = {"0.04", "60.001", "x", "", "1s", "-1"};
    for (size_t i = 0; i < sizeof bad_beats / sizeof bad_beats[0]; i++) {
        last_error[0] = '\0';
        ok(opt_cb(OPT_HEARTBEAT, bad_beats[i], 0) < 0 &&
               strstr(last_error, "is not a number of seconds (0.05-60)"),
           "--ddl-heartbeat '%s' is refused, naming (0.05-60)", bad_beats[i]);
        if (!strstr(last_error, "(0.05-60)"))
            diag("message: %s", last_error);
    }
    check("ddl-hang-timeout", OPT_HANG_TIMEOUT, 1, DDL_HANG_TIMEOUT_MAX_S,
          &ddl_opt.hang_timeout_s);
    check("ddl-checkpoint-shared-every", OPT_CKPT_SHARED_EVERY, 0, 1000000,
          &ddl_opt.shared_every);
    ok(opt_cb(OPT_CKPT_LOCAL, "/local/%n", 0) == 0 &&
           strcmp(ddl_opt.checkpoint_local, "/local/%n") == 0,
       "--ddl-checkpoint-local=/local/%%n is accepted");
    last_error[0] = '\0';
    ok(opt_cb(OPT_CKPT_LOCAL, "local", 0) < 0 &&
           strstr(last_error, "--ddl-checkpoint-local: 'local' is not an absolute path"),
       "--ddl-checkpoint-local=local is refused: %s", last_error);
    help("ddl-restarts", 0, DDL_MAX_RESTARTS);
    help("ddl-spares", 0, DDL_MAX_NODES);
    help("ddl-min-nodes", 0, DDL_MAX_NODES);
    for (size_t i = 0; i < sizeof ddl_options / sizeof ddl_options[0]; i++)
        if (strcmp(ddl_options[i].name, "ddl-heartbeat") == 0)
            ok(strstr(ddl_options[i].usage, "(0.05-60") != NULL,
               "--ddl-heartbeat's help says (0.05-60...)");
    help("ddl-hang-timeout", 1, DDL_HANG_TIMEOUT_MAX_S);
    help("ddl-checkpoint-shared-every", 0, 1000000);
    return done_testing();
}
