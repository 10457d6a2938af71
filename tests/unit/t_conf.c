/* t_conf.c: the administrator's configuration reader (common/conf.c): every
 * default, a good file, per-partition overrides, and the messages (with
 * file and line) for an unknown key, a bad value, a value out of range,
 * rules across keys and a missing file; also the checkpoint-root rule, and
 * what makes the file mean the same to every reader: no environment
 * expansion, no key set twice, no unterminated comment or string. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "util.h"
#include "../tap.h"

static char dir[] = "/tmp/ddl-t_conf.XXXXXX";
static char path[256];

static void write_file(const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        BAIL_OUT("cannot write %s", path);
}

/* load_err: load text, expecting failure; returns the message. */
static const char *load_err(const char *text, int *err_no)
{
    static ddl_error_t err;
    write_file(text);
    errno = 0;
    ddl_conf_t *c = ddl_conf_load(path, &err);
    *err_no = errno;
    if (c) {
        ddl_conf_free(c);
        return "(loaded)";
    }
    return err.text;
}

static void test_defaults(void)
{
    ddl_error_t err;
    write_file("# nothing but a comment\n");
    ddl_conf_t *c = ddl_conf_load(path, &err);
    ok(c != NULL, "an empty file loads");
    if (!c)
        BAIL_OUT("%s", err.text);
    const ddl_conf_values_t *v = ddl_conf_get(c, NULL);
    is(v->heartbeat_interval_ms, 100, "default heartbeat_interval: 0.1 s");
    is(v->node_timeout, 2, "default node_timeout");
    is(v->hang_timeout_min, 10, "default hang_timeout_min");
    is(v->hang_timeout_max, 3600, "default hang_timeout_max");
    is(v->max_restarts, 10, "default max_restarts");
    is(v->n_checkpoint_roots, 0, "default checkpoint_roots: none (any directory)");
    is_str(v->bind, "auto", "default bind");
    ok(v->ucx_tls == NULL, "default ucx_tls: unset");
    is_str(v->log_level, "warn", "default log_level");
    ok(v->log_dir == NULL, "default log_dir: unset");
    ok(v->metrics_dir == NULL, "default metrics_dir: unset");
    ok(v->checkpoint_local_dir == NULL, "default checkpoint_local_dir: unset");
    is(v->checkpoint_shared_every, 1, "default checkpoint_shared_every: 1");
    ok(ddl_conf_get(c, "gpu") == v, "a partition without a section gets the site defaults");
    ok(!ddl_conf_has_partition(c, "gpu"), "... and has no section");
    is_str(ddl_conf_path(c), path, "the path is kept");
    ok(ddl_conf_checkpoint_allowed(v, "/anything/at/all"), "no roots: any absolute directory");
    ok(!ddl_conf_checkpoint_allowed(v, "relative"), "... but not a relative one");
    ok(!ddl_conf_checkpoint_allowed(v, "/a/../etc"), "... nor one with '..'");
    ddl_conf_free(c);
}

static void test_good(void)
{
    ddl_error_t err;
    write_file("heartbeat_interval = 2\n"
               "node_timeout = 10\n"
               "hang_timeout_min = 30\n"
               "hang_timeout_max = 600\n"
               "max_restarts = 4\n"
               "checkpoint_roots = {\"/scratch\", \"/var/tmp/\"}\n"
               "bind = \"none\"\n"
               "ucx_tls = \"rc,sm,self\"\n"
               "log_level = \"debug\"\n"
               "log_dir = \"/var/log/ddl\"\n"
               "metrics_dir = \"/var/lib/prometheus/node-exporter\"\n"
               "partition gpu {\n"
               "    max_restarts = 20\n"
               "    bind = \"auto\"\n"
               "    checkpoint_roots = {\"/gpfs\"}\n"
               "}\n"
               "partition debug {\n"
               "    node_timeout = 3\n"
               "}\n");
    ddl_conf_t *c = ddl_conf_load(path, &err);
    ok(c != NULL, "a file setting every key loads");
    if (!c)
        BAIL_OUT("%s", err.text);
    const ddl_conf_values_t *v = ddl_conf_get(c, NULL);
    ok(v->heartbeat_interval_ms == 2000 && v->node_timeout == 10 && v->hang_timeout_min == 30 &&
           v->hang_timeout_max == 600 && v->max_restarts == 4,
       "integers are read");
    ok(v->n_checkpoint_roots == 2 && strcmp(v->checkpoint_roots[0], "/scratch") == 0 &&
           strcmp(v->checkpoint_roots[1], "/var/tmp/") == 0,
       "the list of roots is read");
    ok(strcmp(v->bind, "none") == 0 && strcmp(v->ucx_tls, "rc,sm,self") == 0 &&
           strcmp(v->log_level, "debug") == 0 && strcmp(v->log_dir, "/var/log/ddl") == 0 &&
           strcmp(v->metrics_dir, "/var/lib/prometheus/node-exporter") == 0,
       "strings are read");
    ok(ddl_conf_checkpoint_allowed(v, "/scratch/u/run7"), "a directory under a root is allowed");
    ok(ddl_conf_checkpoint_allowed(v, "/var/tmp"), "... the root itself too");
    ok(!ddl_conf_checkpoint_allowed(v, "/scratchy/run"), "a sibling with the same prefix is not");
    ok(!ddl_conf_checkpoint_allowed(v, "/home/u"), "a directory elsewhere is not");

    const ddl_conf_values_t *g = ddl_conf_get(c, "gpu");
    ok(ddl_conf_has_partition(c, "gpu"), "partition gpu has a section");
    is(g->max_restarts, 20, "partition gpu overrides max_restarts");
    is_str(g->bind, "auto", "... and bind");
    ok(g->n_checkpoint_roots == 1 && strcmp(g->checkpoint_roots[0], "/gpfs") == 0,
       "... and checkpoint_roots");
    ok(g->heartbeat_interval_ms == 2000 && g->node_timeout == 10 && strcmp(g->log_level, "debug") == 0,
       "... and inherits the rest from the top level");
    const ddl_conf_values_t *d = ddl_conf_get(c, "debug");
    ok(d->node_timeout == 3 && d->max_restarts == 4 && d->n_checkpoint_roots == 2,
       "partition debug overrides node_timeout only");

    FILE *f = tmpfile();
    if (!f)
        BAIL_OUT("tmpfile: %s", strerror(errno));
    ddl_conf_print(g, f);
    char buf[1024];
    size_t n = (rewind(f), fread(buf, 1, sizeof buf - 1, f));
    buf[n] = '\0';
    fclose(f);
    ok(strstr(buf, "max_restarts = 20\n") && strstr(buf, "checkpoint_roots = {\"/gpfs\"}\n") &&
           strstr(buf, "ucx_tls = \"rc,sm,self\"\n"),
       "print shows the effective values");
    ddl_conf_free(c);
    ddl_conf_free(NULL);
}

static void test_errors(void)
{
    char want[600];
    int e;
    const char *m;

    m = load_err("max_restarts = 3\n\nheartbeat = 2\n", &e);
    snprintf(want, sizeof want, "%s:3: no such option 'heartbeat'", path);
    is_str(m, want, "an unknown key: file, line and key");
    is(e, EINVAL, "... errno EINVAL");

    m = load_err("partition gpu {\n  color = \"red\"\n}\n", &e);
    snprintf(want, sizeof want, "%s:2: no such option 'color'", path);
    is_str(m, want, "an unknown key in a partition section");

    m = load_err("max_restarts = lots\n", &e);
    ok(strncmp(m, path, strlen(path)) == 0 && strstr(m, ":1: ") && strstr(m, "max_restarts"),
       "a value that is not a number: file, line and key (%s)", m);

    m = load_err("node_timeout = 5\nmax_restarts = 101\n", &e);
    snprintf(want, sizeof want, "%s:2: max_restarts: 101 is out of range (0-100)", path);
    is_str(m, want, "a number out of range");

    m = load_err("heartbeat_interval = 0\n", &e);
    snprintf(want, sizeof want, "%s:1: heartbeat_interval: 0 is out of range (0.05-60 seconds)",
             path);
    is_str(m, want, "heartbeat_interval 0");
    m = load_err("heartbeat_interval = 0.04\n", &e);
    snprintf(want, sizeof want,
             "%s:1: heartbeat_interval: 0.04 is out of range (0.05-60 seconds)", path);
    is_str(m, want, "heartbeat_interval 0.04");
    m = load_err("\nheartbeat_interval = 61\n", &e);
    snprintf(want, sizeof want, "%s:2: heartbeat_interval: 61 is out of range (0.05-60 seconds)",
             path);
    is_str(m, want, "heartbeat_interval 61");
    m = load_err("heartbeat_interval = \"fast\"\n", &e);
    ok(m && strstr(m, ":1: ") && strstr(m, "heartbeat_interval"),
       "heartbeat_interval not a number: file, line and key (%s)", m ? m : "(accepted)");
    {
        write_file("heartbeat_interval = 0.25\npartition p {\n  heartbeat_interval = 1\n}\n");
        ddl_error_t ce;
        ddl_conf_t *c = ddl_conf_load(path, &ce);
        ok(c && ddl_conf_get(c, NULL)->heartbeat_interval_ms == 250 &&
               ddl_conf_get(c, "p")->heartbeat_interval_ms == 1000,
           "heartbeat_interval 0.25 is 250 ms, a partition's 1 is 1000 ms");
        ddl_conf_free(c);
    }

    m = load_err("partition p {\n\n  node_timeout = 601\n}\n", &e);
    snprintf(want, sizeof want, "%s:3: node_timeout: 601 is out of range (1-600)", path);
    is_str(m, want, "a number out of range in a partition section");

    m = load_err("bind = \"sometimes\"\n", &e);
    snprintf(want, sizeof want, "%s:1: bind: 'sometimes' is not auto or none", path);
    is_str(m, want, "bind not auto or none");

    m = load_err("log_level = \"chatty\"\n", &e);
    snprintf(want, sizeof want, "%s:1: log_level: 'chatty' is not error, warn, info or debug",
             path);
    is_str(m, want, "log_level not a level");

    m = load_err("checkpoint_roots = {\"/a\", \"b\"}\n", &e);
    snprintf(want, sizeof want,
             "%s:1: checkpoint_roots: 'b' is not an absolute path without '.' or '..'", path);
    is_str(m, want, "a relative checkpoint root");

    m = load_err("log_dir = \"/var/../log\"\n", &e);
    snprintf(want, sizeof want,
             "%s:1: log_dir: '/var/../log' is not an absolute path without '.' or '..'", path);
    is_str(m, want, "a log_dir with '..'");

    m = load_err("checkpoint_local_dir = \"local\"\n", &e);
    snprintf(want, sizeof want,
             "%s:1: checkpoint_local_dir: 'local' is not an absolute path without '.' or '..'",
             path);
    is_str(m, want, "a relative checkpoint_local_dir");
    m = load_err("checkpoint_shared_every = -1\n", &e);
    ok(m && strstr(m, "checkpoint_shared_every") != NULL, "checkpoint_shared_every -1: %s",
       m ? m : "(accepted)");
    m = load_err("\nmetrics_dir = \"metrics\"\n", &e);
    snprintf(want, sizeof want,
             "%s:2: metrics_dir: 'metrics' is not an absolute path without '.' or '..'", path);
    is_str(m, want, "a relative metrics_dir");

    m = load_err("hang_timeout_min = 100\nhang_timeout_max = 50\n", &e);
    snprintf(want, sizeof want, "%s: hang_timeout_min (100) is greater than hang_timeout_max (50)",
             path);
    is_str(m, want, "hang_timeout_min > hang_timeout_max");

    m = load_err("partition slow {\n  heartbeat_interval = 5\n}\n", &e);
    snprintf(want, sizeof want,
             "%s: partition 'slow': heartbeat_interval (5) must be less than node_timeout (2)",
             path);
    is_str(m, want, "a partition's heartbeat_interval not below its node_timeout");

    m = load_err("partition a {\n}\npartition a {\n}\n", &e);
    ok(strncmp(m, path, strlen(path)) == 0 && strstr(m, ":3: ") && strstr(m, "'a'"),
       "a partition defined twice (%s)", m);

    m = load_err("max_restarts = 3\nnode_timeout = {\n", &e);
    ok(strncmp(m, path, strlen(path)) == 0 && strstr(m, ":2: "), "a syntax error (%s)", m);

    ddl_error_t err;
    char missing[300];
    snprintf(missing, sizeof missing, "%s/none.conf", dir);
    errno = 0;
    ok(ddl_conf_load(missing, &err) == NULL && errno == ENOENT, "a missing file: ENOENT");
    snprintf(want, sizeof want, "%s: No such file or directory", missing);
    is_str(err.text, want, "... and its path in the message");
}

/* The checks that make the file mean the same in srun (the user's
 * environment) and in slurmstepd. */
static void test_same_for_all(void)
{
    char want[600];
    int e;
    const char *m;

    setenv("DDL_T_ROOT", "/", 1);
    m = load_err("max_restarts = 3\ncheckpoint_roots = {\"${DDL_T_ROOT}\"}\n", &e);
    ok(strncmp(m, path, strlen(path)) == 0 && strstr(m, ":2: '${' ") &&
           strstr(m, "does not expand"),
       "'${VAR}' in a string is refused, with file and line (%s)", m);
    is(e, EINVAL, "... errno EINVAL");
    m = load_err("log_dir = ${DDL_T_ROOT}\n", &e);
    ok(strstr(m, ":1: '${' ") != NULL, "... unquoted too (%s)", m);
    m = load_err("partition p {\n  log_dir = '/a/${DDL_T_ROOT}'\n}\n", &e);
    ok(strstr(m, ":2: '${' ") != NULL, "... single-quoted, in a section too (%s)", m);
    m = load_err("log_dir = \"/a/${DDL_T_ROOT:-/b}\"\n", &e);
    ok(strstr(m, ":1: '${' ") != NULL, "... with a default value too (%s)", m);
    m = load_err("# ${HOME} is not expanded\nlog_dir = \"/a/\\${b}$\"\n", &e);
    is_str(m, "(loaded)", "'${' in a comment, and an escaped '\\${', are fine");

    m = load_err("checkpoint_roots = {\"/scratch\"}\nmax_restarts = 3\ncheckpoint_roots = {}\n",
                 &e);
    snprintf(want, sizeof want,
             "%s:3: checkpoint_roots is set a second time (first on line 1): each key may be set "
             "once at the top level and once in each partition section",
             path);
    is_str(m, want, "a key set twice: refused, with both lines");
    is(e, EINVAL, "... errno EINVAL");
    m = load_err("checkpoint_roots = {\"/scratch\"}\ncheckpoint_roots += {\"/\"}\n", &e);
    ok(strstr(m, ":2: checkpoint_roots is set a second time (first on line 1)") != NULL,
       "... appending with += too (%s)", m);
    m = load_err("max_restarts = 3\n\"max_restarts\" = 4\n", &e);
    ok(strstr(m, ":2: max_restarts is set a second time") != NULL, "... a quoted key too (%s)",
       m);
    m = load_err("max_restarts = 3\n\"max_\\x72estarts\" = 4\n", &e);
    ok(strstr(m, ":2: a key written with a backslash escape") != NULL,
       "a key written with an escape is refused (%s)", m);
    m = load_err("partition gpu {\n  bind = \"auto\"\n\n  bind = \"none\"\n}\n", &e);
    ok(strstr(m, ":4: bind is set a second time (first on line 2)") != NULL,
       "... twice in one partition section (%s)", m);
    m = load_err("max_restarts = 3\npartition p {\n  max_restarts = 4\n}\nmax_restarts = 5\n", &e);
    ok(strstr(m, ":5: max_restarts is set a second time (first on line 1)") != NULL,
       "... at the top level, before and after a section (%s)", m);
    m = load_err("max_restarts = 3\npartition p {\n  max_restarts = 4\n}\n"
                 "partition q {\n  max_restarts = 5\n}\n",
                 &e);
    is_str(m, "(loaded)", "the same key at the top level and in two sections is fine");

    m = load_err("max_restarts = 3\n/* the rest\n   is a comment\ncheckpoint_roots = {\"/\"}\n", &e);
    snprintf(want, sizeof want, "%s:2: unterminated comment: the '/*' opened here has no '*/'",
             path);
    is_str(m, want, "an unterminated comment: refused, with the line it opens on");
    m = load_err("/* a\n * b */ max_restarts = 3 /**/\n/* c */\nheartbeat = 2\n", &e);
    snprintf(want, sizeof want, "%s:4: no such option 'heartbeat'", path);
    is_str(m, want, "closed comments are fine, and lines are counted through them");
    m = load_err("# one\n# two\n// three\n\nheartbeat = 2\n", &e);
    snprintf(want, sizeof want, "%s:5: no such option 'heartbeat'", path);
    is_str(m, want, "... and through one-line comments");
    m = load_err("max_restarts = 3\nlog_dir = \"/var/log\n", &e);
    ok(strstr(m, ":2: unterminated string") != NULL, "an unterminated string (%s)", m);
    m = load_err("max_restarts = 3 *\n", &e);
    ok(strstr(m, ":1: unexpected '*'") != NULL, "a stray '*' (%s)", m);

    ddl_error_t err;
    static const char text[] = "max_restarts = 7\nbind = none\0garbage";
    errno = 0;
    ddl_conf_t *c = ddl_conf_parse("mem.conf", text, sizeof text - 9, &err);
    ok(c && ddl_conf_get(c, NULL)->max_restarts == 7 &&
           strcmp(ddl_conf_get(c, NULL)->bind, "none") == 0 &&
           strcmp(ddl_conf_path(c), "mem.conf") == 0,
       "ddl_conf_parse reads len bytes of text (%s)", c ? "" : err.text);
    ddl_conf_free(c);
    c = ddl_conf_parse("mem.conf", text, sizeof text, &err);
    ok(!c && errno == EINVAL && strcmp(err.text, "mem.conf:2: a NUL byte: this is not a text file") == 0,
       "... a NUL byte is refused (%s)", err.text);
    c = ddl_conf_parse("mem.conf", "", 0, &err);
    ok(c && ddl_conf_get(c, NULL)->max_restarts == 10, "... empty text: the defaults");
    ddl_conf_free(c);
}

int main(void)
{
    plan(NO_PLAN);
    if (!mkdtemp(dir))
        BAIL_OUT("mkdtemp: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/ddl.conf", dir);
    test_defaults();
    test_good();
    test_errors();
    test_same_for_all();
    unlink(path);
    rmdir(dir);
    return done_testing();
}
