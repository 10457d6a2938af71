/* config_cmd.c: `ddl-agent config --check FILE [--partition P]`: load the
 * administrator's configuration with the same code as the Slurm plugin
 * (common/conf.c) and print the effective values, the site defaults or
 * those of one partition, in the file's own syntax.
 */
#include "config.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "conf.h"
#include "config_cmd.h"
#include "util.h"

const char ddl_agent_config_usage[] = "       ddl-agent config --check FILE [--partition NAME]\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "ddl-agent: config: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'ddl-agent --help'.\n");
    return 2;
}

int ddl_agent_config_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"check", required_argument, NULL, 'c'},
        {"partition", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL, *part = NULL;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+c:p:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            path = optarg;
            break;
        case 'p':
            part = optarg;
            break;
        case 'h':
            printf("usage: ddl-agent config --check FILE [--partition NAME]\n"
                   "\n"
                   "Check FILE (the administrator's ddl.conf, normally %s) and print\n"
                   "the effective values: the site defaults, or those of partition NAME.\n"
                   "Exit status: 0 valid, 1 invalid (the message names the file and line),\n"
                   "2 bad usage.\n",
                   DDL_CONF_DEFAULT_PATH);
            return 0;
        default:
            return usage_error("unknown option or missing value '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (!path)
        return usage_error("--check FILE is required");

    ddl_error_t err;
    ddl_conf_t *conf = ddl_conf_load(path, &err);
    if (!conf) {
        fprintf(stderr, "ddl-agent: %s\n", err.text);
        return 1;
    }
    printf("# %s: valid", path);
    if (part)
        printf("; partition %s%s", part,
               ddl_conf_has_partition(conf, part) ? "" : " (no section: site defaults)");
    printf("\n");
    ddl_conf_print(ddl_conf_get(conf, part), stdout);
    ddl_conf_free(conf);
    return 0;
}
