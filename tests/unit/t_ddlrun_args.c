/* t_ddlrun_args.c: ddlrun's command-line parser: valid forms, where the
 * program's own options begin, and every kind of bad usage with its message. */
#include "config.h"

#include <string.h>

#include "ddlrun.h"
#include "../tap.h"

#define ARGV(...) ((char *[]){"ddlrun", __VA_ARGS__, NULL})

/* parse: argc is counted up to the NULL that ARGV() appends. */
static ddlrun_args_result_t parse(char **argv, ddlrun_opts_t *o, ddl_error_t *err)
{
    int argc = 0;
    while (argv[argc])
        argc++;
    err->text[0] = '\0';
    return ddlrun_parse_args(argc, argv, o, err);
}

struct bad_case {
    char *args[6];
    const char *needle; /* must appear in the message */
};

/* try: ddlrun [--emulate --nodes 2] OPT VALUE -n 2 prog; the message in err. */
static ddlrun_args_result_t try(const char *opt, const char *value, int emulate,
                                ddlrun_opts_t *o, ddl_error_t *err)
{
    char *argv[10] = {"ddlrun"};
    int argc = 1;
    if (emulate) {
        argv[argc++] = "--emulate";
        argv[argc++] = "--nodes";
        argv[argc++] = "2";
    }
    argv[argc++] = (char *)opt;
    argv[argc++] = (char *)value;
    argv[argc++] = "-n";
    argv[argc++] = "2";
    argv[argc++] = "prog";
    err->text[0] = '\0';
    return ddlrun_parse_args(argc, argv, o, err);
}

/* boundary: OPT accepts lo and hi (giving the values want_lo and want_hi
 * in the field read by get) and refuses below and above, with a message
 * naming the range as ddl_limits.h gives it. */
static void boundary(const char *opt, int emulate, const char *below, const char *lo, long want_lo,
                     const char *hi, long want_hi, const char *above, const char *range,
                     long (*get)(const ddlrun_opts_t *))
{
    ddlrun_opts_t o;
    ddl_error_t err;
    ok(try(opt, lo, emulate, &o, &err) == DDLRUN_ARGS_RUN && get(&o) == want_lo,
       "%s %s (the smallest) is accepted", opt, lo);
    if (err.text[0])
        diag("message: %s", err.text);
    ok(try(opt, hi, emulate, &o, &err) == DDLRUN_ARGS_RUN && get(&o) == want_hi,
       "%s %s (the largest) is accepted", opt, hi);
    if (err.text[0])
        diag("message: %s", err.text);
    if (below) {
        ok(try(opt, below, emulate, &o, &err) == DDLRUN_ARGS_ERROR && strstr(err.text, range),
           "%s %s is refused, naming %s", opt, below, range);
        if (!strstr(err.text, range))
            diag("message: %s", err.text);
    }
    ok(try(opt, above, emulate, &o, &err) == DDLRUN_ARGS_ERROR && strstr(err.text, range),
       "%s %s is refused, naming %s", opt, above, range);
    if (!strstr(err.text, range))
        diag("message: %s", err.text);
}

static long get_restarts(const ddlrun_opts_t *o) { return o->restarts; }
static long get_crash_loop(const ddlrun_opts_t *o) { return o->crash_loop; }
static long get_grace(const ddlrun_opts_t *o) { return o->grace_ms; }
static long get_hang(const ddlrun_opts_t *o) { return o->hang_ms; }
static long get_node_timeout(const ddlrun_opts_t *o) { return o->node_timeout_ms; }
static long get_spares(const ddlrun_opts_t *o) { return o->spares; }
static long get_min_nodes(const ddlrun_opts_t *o) { return o->min_nodes; }

/* The limits of common/ddl_limits.h, in the parser and in --help. */
static void test_limits(void)
{
    char s1[32], s2[32], range[64], want[128];
    ddlrun_opts_t o;
    ddl_error_t err;

    snprintf(s1, sizeof s1, "%d", DDL_MAX_RESTARTS);
    snprintf(s2, sizeof s2, "%d", DDL_MAX_RESTARTS + 1);
    snprintf(range, sizeof range, "(0-%d)", DDL_MAX_RESTARTS);
    boundary("--restarts", 0, "-1", "0", 0, s1, DDL_MAX_RESTARTS, s2, range, get_restarts);
    snprintf(range, sizeof range, "(1-%d)", DDL_MAX_RESTARTS);
    boundary("--crash-loop", 0, "0", "1", 1, s1, DDL_MAX_RESTARTS, s2, range, get_crash_loop);

    snprintf(s1, sizeof s1, "%g", DDL_GRACE_MAX_MS / 1000.0);
    snprintf(s2, sizeof s2, "%.3f", DDL_GRACE_MAX_MS / 1000.0 + 0.001);
    snprintf(range, sizeof range, "(0-%g)", DDL_GRACE_MAX_MS / 1000.0);
    boundary("--grace", 0, NULL, "0", 0, s1, DDL_GRACE_MAX_MS, s2, range, get_grace);

    char lo[32], below[32];
    snprintf(lo, sizeof lo, "%g", DDL_HANG_TIMEOUT_MIN_MS / 1000.0);
    snprintf(below, sizeof below, "%.3f", (DDL_HANG_TIMEOUT_MIN_MS - 1) / 1000.0);
    snprintf(s1, sizeof s1, "%d", DDL_HANG_TIMEOUT_MAX_S);
    snprintf(s2, sizeof s2, "%d.001", DDL_HANG_TIMEOUT_MAX_S);
    snprintf(range, sizeof range, "(%g-%d)", DDL_HANG_TIMEOUT_MIN_MS / 1000.0,
             DDL_HANG_TIMEOUT_MAX_S);
    boundary("--hang-timeout", 0, below, lo, DDL_HANG_TIMEOUT_MIN_MS, s1,
             DDL_HANG_TIMEOUT_MAX_S * 1000L, s2, range, get_hang);

    snprintf(lo, sizeof lo, "%g", DDL_NODE_TIMEOUT_MIN_MS / 1000.0);
    snprintf(below, sizeof below, "%.3f", (DDL_NODE_TIMEOUT_MIN_MS - 1) / 1000.0);
    snprintf(s1, sizeof s1, "%g", DDL_NODE_TIMEOUT_MAX_MS / 1000.0);
    snprintf(s2, sizeof s2, "%.3f", (DDL_NODE_TIMEOUT_MAX_MS + 1) / 1000.0);
    snprintf(range, sizeof range, "(%g-%g)", DDL_NODE_TIMEOUT_MIN_MS / 1000.0,
             DDL_NODE_TIMEOUT_MAX_MS / 1000.0);
    boundary("--node-timeout", 1, below, lo, DDL_NODE_TIMEOUT_MIN_MS, s1, DDL_NODE_TIMEOUT_MAX_MS,
             s2, range, get_node_timeout);

    /* spares: as many waiting tasks as DDLRUN_MAX_RANKS leaves; the range
     * itself is ddl's node limit */
    snprintf(s1, sizeof s1, "%d", DDLRUN_MAX_RANKS - 2);
    snprintf(s2, sizeof s2, "%d", DDL_MAX_NODES + 1);
    snprintf(range, sizeof range, "(0-%d)", DDL_MAX_NODES);
    boundary("--spares", 1, "-1", "0", 0, s1, DDLRUN_MAX_RANKS - 2, s2, range, get_spares);
    snprintf(s1, sizeof s1, "%d", DDL_MAX_NODES);
    ok(try("--spares", s1, 1, &o, &err) == DDLRUN_ARGS_ERROR && strstr(err.text, "tasks"),
       "--spares %s is a number of nodes but more tasks than ddlrun starts", s1);
    boundary("--min-nodes", 1, "-1", "0", 0, "2", 2, s2, range, get_min_nodes);
    ok(try("--min-nodes", s1, 1, &o, &err) == DDLRUN_ARGS_ERROR &&
           strstr(err.text, "more than the 2 nodes"),
       "--min-nodes %s is a number of nodes but more than the step has", s1);

    /* --help states the same numbers */
    snprintf(want, sizeof want, "(0-%d, default 0)", DDL_MAX_RESTARTS);
    ok(strstr(ddlrun_usage, want) != NULL, "--help: --restarts %s", want);
    snprintf(want, sizeof want, "(1-%d, default %d)", DDL_MAX_RESTARTS, DDL_DEFAULT_CRASH_LOOP);
    ok(strstr(ddlrun_usage, want) != NULL, "--help: --crash-loop %s", want);
    snprintf(want, sizeof want, "(0-%g, default %g)", DDL_GRACE_MAX_MS / 1000.0,
             DDL_GRACE_DEFAULT_MS / 1000.0);
    ok(strstr(ddlrun_usage, want) != NULL, "--help: --grace %s", want);
    snprintf(want, sizeof want, "(%g-%d; default: off)", DDL_HANG_TIMEOUT_MIN_MS / 1000.0,
             DDL_HANG_TIMEOUT_MAX_S);
    ok(strstr(ddlrun_usage, want) != NULL, "--help: --hang-timeout %s", want);
    snprintf(want, sizeof want, "(%g-%g,\n                     default %g)",
             DDL_NODE_TIMEOUT_MIN_MS / 1000.0, DDL_NODE_TIMEOUT_MAX_MS / 1000.0,
             DDL_NODE_TIMEOUT_DEFAULT_MS / 1000.0);
    ok(strstr(ddlrun_usage, want) != NULL, "--help: --node-timeout's range and default");
    snprintf(want, sizeof want, "ranks (0-%d, default 0;", DDL_MAX_NODES);
    ok(strstr(ddlrun_usage, want) != NULL, "--help: --spares %s", want);
    snprintf(want, sizeof want, "down to M nodes (0-%d,", DDL_MAX_NODES);
    ok(strstr(ddlrun_usage, want) != NULL, "--help: --min-nodes %s", want);
    snprintf(want, sizeof want, "together at most %d)", DDLRUN_MAX_RANKS);
    ok(strstr(ddlrun_usage, want) != NULL, "--help: --spares %s", want);
}

int main(void)
{
    ddlrun_opts_t o;
    ddl_error_t err;
    plan(NO_PLAN);
    test_limits();

    char **v = ARGV("-n", "4", "./train", "--epochs", "3");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN, "-n 4 ./train --epochs 3 parses");
    is(o.np, 4, "np is 4");
    is(o.prog_argc, 3, "program gets 3 words");
    is_str(o.prog_argv[0], "./train", "program is ./train");
    is_str(o.prog_argv[1], "--epochs", "the program's own options are left alone");
    is(o.grace_ms, DDL_GRACE_DEFAULT_MS, "grace defaults to 5 s");
    ok(!o.label && !o.verbose, "label and verbose are off by default");
    ok(o.bind == DDLRUN_BIND_AUTO && o.bind_list == NULL, "--bind defaults to auto");
    ok(o.restarts == 0 && o.crash_loop == DDL_DEFAULT_CRASH_LOOP && o.ckpt_dir == NULL,
       "no restarts, crash loop after 3, no checkpoint directory by default");

    v = ARGV("--restarts", "100", "--crash-loop", "1", "--checkpoint-dir", "/ck", "-n", "2", "p");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN && o.restarts == 100 && o.crash_loop == 1 &&
           o.ckpt_dir && strcmp(o.ckpt_dir, "/ck") == 0,
       "--restarts 100 --crash-loop 1 --checkpoint-dir /ck");
    ok(o.ckpt_local == NULL && o.ckpt_shared_every == -1,
       "no node-local checkpoint level by default, DDL_CKPT_SHARED_EVERY left alone");
    v = ARGV("--checkpoint-local", "/l/%n", "--checkpoint-shared-every", "0", "-n", "2", "p");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN && o.ckpt_local && !strcmp(o.ckpt_local, "/l/%n") &&
           o.ckpt_shared_every == 0,
       "--checkpoint-local /l/%%n --checkpoint-shared-every 0");
    v = ARGV("--hang-timeout", "2.5", "-n", "2", "p");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN && o.hang_ms == 2500, "--hang-timeout 2.5 is 2500 ms");
    ok(!o.emulate && !o.spares && !o.min_nodes && !o.node_timeout_ms,
       "no emulation, spares, shrinking or node timeout by default");
    v = ARGV("--emulate", "--nodes", "2", "--spares", "1", "--min-nodes", "1", "--node-timeout",
             "0.5", "-n", "4", "p");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN && o.emulate && o.nodes == 2 && o.spares == 1 &&
           o.min_nodes == 1 && o.node_timeout_ms == 500,
       "--emulate --nodes 2 --spares 1 --min-nodes 1 --node-timeout 0.5");
    ok(o.reboot_ms == 0, "no node starts again by default");
    v = ARGV("--emulate", "--nodes", "2", "--min-nodes", "1", "--reboot-after", "0.1", "-n", "4",
             "p");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN && o.reboot_ms == 100, "--reboot-after 0.1: 100 ms");
    v = ARGV("--emulate", "--nodes", "2", "--spares", "1", "--reboot-after", "600", "-n", "4", "p");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN && o.reboot_ms == 600000,
       "--reboot-after 600 with --spares");
    v = ARGV("--emulate", "--nodes", "2", "--spares", "1", "--reboot-after", "0.09", "-n", "4",
             "p");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_ERROR &&
           strstr(err.text, "--reboot-after: '0.09' is not a number of seconds (0.1-600)"),
       "--reboot-after 0.09 refused, with the range");
    v = ARGV("--emulate", "--nodes", "2", "--reboot-after", "1", "-n", "4", "p");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_ERROR &&
           strstr(err.text, "--reboot-after needs --emulate and --spares or --min-nodes"),
       "--reboot-after without --spares or --min-nodes refused");
    v = ARGV("--nodes", "2", "--reboot-after", "1", "-n", "4", "p");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_ERROR && strstr(err.text, "needs --emulate"),
       "--reboot-after without --emulate refused");

    v = ARGV("--bind", "none", "-n", "2", "prog");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN && o.bind == DDLRUN_BIND_NONE, "--bind none");
    v = ARGV("--bind=none", "--bind", "auto", "-n", "2", "prog");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN && o.bind == DDLRUN_BIND_AUTO,
       "--bind auto after --bind=none: the last one wins");
    v = ARGV("--bind", "0-3,8:4-7,9", "-n", "2", "prog");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN && o.bind == DDLRUN_BIND_LIST &&
           strcmp(o.bind_list, "0-3,8:4-7,9") == 0, "--bind 0-3,8:4-7,9 is a list of CPU lists");
    v = ARGV("--bind", "5", "-n", "2", "prog");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN && o.bind == DDLRUN_BIND_LIST, "--bind 5: one list");
    ok(strstr(ddlrun_usage, "--bind HOW") != NULL, "usage text documents --bind");
    v = ARGV("-n", "6", "prog");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN && o.nodes == 1, "--nodes defaults to 1");
    v = ARGV("-n", "6", "--nodes", "3", "prog");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN && o.nodes == 3, "--nodes 3 with -n 6");
    ok(strstr(ddlrun_usage, "--nodes K") != NULL, "usage text documents --nodes");

    v = ARGV("--np=2", "--label", "--grace", "0.5", "-v", "--", "prog", "-n", "9");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN, "long options and -- parse");
    ok(o.np == 2 && o.label && o.verbose && o.grace_ms == 500, "values: np 2, label, verbose, grace 500 ms");
    ok(o.prog_argc == 3 && strcmp(o.prog_argv[1], "-n") == 0, "options after PROG belong to PROG");

    v = ARGV("-n1", "-l", "true");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN && o.np == 1 && o.label, "-n1 -l true");

    v = ARGV("-n", "4096", "true");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN && o.np == 4096, "4096 ranks is the maximum");

    v = ARGV("--grace", "0", "-n", "1", "true");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_RUN && o.grace_ms == 0, "--grace 0 is allowed");

    v = ARGV("--help");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_HELP, "--help");
    v = ARGV("-h", "-n", "x");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_HELP, "-h wins over later bad options");
    v = ARGV("--version");
    ok(parse(v, &o, &err) == DDLRUN_ARGS_VERSION, "--version");
    ok(strstr(ddlrun_usage, "-n, --np N") != NULL, "usage text documents -n");

    static const struct bad_case bad[] = {
        {{"-n", "x", "prog"}, "-n: 'x' is not a number of ranks (1-4096)"},
        {{"-n", "0", "prog"}, "-n: '0' is not a number of ranks (1-4096)"},
        {{"-n", "-3", "prog"}, "'-3' is not a number"},
        {{"-n", "4097", "prog"}, "(1-4096)"},
        {{"-n", "4 ", "prog"}, "'4 ' is not"},
        {{"-n", "", "prog"}, "'' is not"},
        {{"-n", "99999999999999999999", "prog"}, "is not a number"},
        {{"prog"}, "-n N is required"},
        {{"-n", "2"}, "no program given"},
        {{"-n", "2", "--"}, "no program given"},
        {{"-n"}, "-n: missing value"},
        {{"--grace", "soon", "-n", "1", "prog"}, "--grace: 'soon' is not a number of seconds (0-600)"},
        {{"--grace", "601", "-n", "1", "prog"}, "(0-600)"},
        {{"--grace", "-1", "-n", "1", "prog"}, "--grace"},
        {{"--restarts", "101", "-n", "1", "prog"}, "--restarts: '101' is not a number (0-100)"},
        {{"--restarts", "-1", "-n", "1", "prog"}, "--restarts: '-1'"},
        {{"--crash-loop", "0", "-n", "1", "prog"}, "--crash-loop: '0' is not a number of restarts (1-100)"},
        {{"--checkpoint-dir", "", "-n", "1", "prog"}, "--checkpoint-dir: empty path"},
        {{"--checkpoint-local", "l", "-n", "1", "prog"}, "--checkpoint-local: 'l' is not an absolute path (give one starting with '/')"},
        {{"--checkpoint-shared-every", "-1", "-n", "1", "prog"}, "--checkpoint-shared-every: '-1' is not a number (0-1000000; 0: never)"},
        {{"--hang-timeout", "0", "-n", "1", "prog"}, "--hang-timeout: '0' is not a number of seconds (0.1-86400)"},
        {{"--hang-timeout", "later", "-n", "1", "prog"}, "--hang-timeout: 'later'"},
        {{"-x", "-n", "1", "prog"}, "unknown option '-x'"},
        {{"--bogus", "-n", "1", "prog"}, "unknown option '--bogus'"},
        {{"-n", "2", ""}, "no program given"},
        {{"--bind", "some", "-n", "1", "prog"}, "--bind: 'some' is not auto, none or CPU lists"},
        {{"--nodes", "0", "-n", "2", "prog"}, "--nodes: '0' is not a number of nodes (1-4096)"},
        {{"--nodes", "x", "-n", "2", "prog"}, "--nodes: 'x' is not a number of nodes"},
        {{"--nodes", "4", "-n", "6", "prog"},
         "--nodes 4: 6 ranks cannot be split evenly over 4 nodes (use a divisor of -n)"},
        {{"--bind", "0-3:", "-n", "1", "prog"}, "--bind: '0-3:' is not"},
        {{"--bind", ":1", "-n", "1", "prog"}, "empty CPU list"},
        {{"--bind", "3-1", "-n", "1", "prog"}, "'3-1' is not a CPU list"},
        {{"--bind", "0,70000", "-n", "1", "prog"}, "numbers below 65536"},
        {{"-n", "1", "--bind"}, "--bind: missing value"},
        {{"--spares", "1", "-n", "2", "prog"}, "--spares needs --emulate"},
        {{"--min-nodes", "1", "-n", "2", "prog"}, "--min-nodes needs --emulate"},
        {{"--node-timeout", "1", "-n", "2", "prog"}, "--node-timeout needs --emulate"},
        {{"--spares", "65537", "-n", "2", "prog"},
         "--spares: '65537' is not a number of nodes (0-65536)"},
        {{"--node-timeout", "0.1", "-n", "2", "prog"},
         "--node-timeout: '0.1' is not a number of seconds (0.2-600)"},
        {{"--emulate", "--min-nodes", "2", "-n", "2", "prog"},
         "--min-nodes 2 is more than the 1 node that train"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[8] = {"ddlrun", NULL, NULL, NULL, NULL, NULL, NULL, NULL};
        int argc = 1;
        char desc[128] = "";
        for (int k = 0; k < 6 && bad[i].args[k]; k++) {
            argv[argc++] = bad[i].args[k];
            strncat(desc, bad[i].args[k], sizeof desc - strlen(desc) - 2);
            strcat(desc, " ");
        }
        ddlrun_args_result_t rc = parse(argv, &o, &err);
        ok(rc == DDLRUN_ARGS_ERROR, "bad usage [%s] is an error", desc);
        ok(strstr(err.text, bad[i].needle) != NULL, "... message names it: %s", bad[i].needle);
        if (!strstr(err.text, bad[i].needle))
            diag("message was: '%s'", err.text);
    }
    return done_testing();
}
