/* env-doc.c: prints the table of DDL_* environment variables
 * (common/ddl_env.def) as the Markdown table of docs/user-guide.md's
 * "Environment variables".  t0025-env-doc.t compares the two; `make
 * env-doc` puts its output into the guide. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "env.h"

/* words: "auto ring rd" as "`auto`, `ring`, `rd`". */
static void words(const char *list)
{
    int first = 1;
    while (*list) {
        size_t k = strcspn(list, " ");
        printf("%s`%.*s`", first ? "" : ", ", (int)k, list);
        first = 0;
        list += k;
        list += *list == ' ';
    }
}

int main(void)
{
    printf("| Variable | Value | Default | Set by | Read by | Meaning |\n"
           "| --- | --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < DDLENV_COUNT; i++) {
        const ddl_env_info_t *e = &ddl_env_table[i];
        printf("| `%s` | ", e->name);
        switch (e->type) {
        case DDL_ENV_INT:
            printf("%ld to %ld", e->min, e->max);
            break;
        case DDL_ENV_MS:
        case DDL_ENV_SECONDS:
        case DDL_ENV_BYTES:
            printf("%ld to %ld %s", e->min, e->max,
                   e->type == DDL_ENV_MS        ? "ms"
                   : e->type == DDL_ENV_SECONDS ? "s"
                                                : "bytes");
            break;
        case DDL_ENV_BOOL:
            printf("`0` or `1`");
            break;
        case DDL_ENV_FD:
            printf("file descriptor");
            break;
        case DDL_ENV_STRING:
            printf("text");
            break;
        case DDL_ENV_PATH:
            printf("path");
            break;
        case DDL_ENV_ENUM:
            words(e->text);
            break;
        }
        printf(" | ");
        if (e->type == DDL_ENV_ENUM)
            printf("`%.*s`", (int)strcspn(e->text, " "), e->text);
        else if (*e->text)
            printf("%s", e->text);
        else
            printf("%ld", e->def);
        printf(" | %s | %s | %s |\n", e->set_by, e->read_by, e->doc);
    }
    return 0;
}
