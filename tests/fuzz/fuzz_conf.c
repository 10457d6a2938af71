/* fuzz_conf.c: libFuzzer target for the ddl.conf reader, ddl_conf_parse
 * (common/conf.c): its own lexical pre-scan, then libconfuse (Debian's,
 * not instrumented: coverage guides the pre-scan and ddl's validation).
 * A loaded configuration is read back whole: every partition's values,
 * printed, and the checkpoint-root rule applied to a path taken from the
 * input. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *null;
    ddl_error_t err;
    if (!null && !(null = fopen("/dev/null", "w")))
        return 0;
    ddl_conf_t *c = ddl_conf_parse("fuzz.conf", (const char *)data, size, &err);
    if (!c)
        return 0;
    static const char *const parts[] = {NULL, "gpu", "debug", "a", "p"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        const ddl_conf_values_t *v = ddl_conf_get(c, parts[i]);
        ddl_conf_print(v, null);
        (void)ddl_conf_has_partition(c, parts[i]);
        (void)ddl_conf_checkpoint_allowed(v, "/scratch/user/run");
        for (size_t r = 0; r < v->n_checkpoint_roots; r++)
            (void)ddl_conf_checkpoint_allowed(v, v->checkpoint_roots[r]);
    }
    (void)ddl_conf_path(c);
    ddl_conf_free(c);
    return 0;
}
