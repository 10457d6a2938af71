/* fuzz_args.c: libFuzzer target for the option parsers of the command
 * line: ddlrun's (launcher/ddlrun_args.c) and the SPANK plugin's --ddl*
 * value checks (plugins/spank_opts.c, the code spank_ddl.so runs in srun).
 *
 * Input: one byte choosing the parser, then NUL-separated pieces.  For
 * ddlrun the pieces are argv[1..]; for the plugin each piece is an option
 * id (its first byte) and its value (the rest; no value when the first
 * byte has its top bit set).  Besides ASan/UBSan's checks it asserts what
 * the callers rely on: an accepted ddlrun command line is within the
 * documented ranges and names a program; a refused one has a message; a
 * value the plugin accepts is stored as given. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddlrun.h"
#include "spank_opts.h"
#include "util.h"

#define MAX_PIECES 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_ddlrun(int argc, char **argv)
{
    ddlrun_opts_t o;
    ddl_error_t err;
    err.text[0] = '\0';
    ddlrun_args_result_t r = ddlrun_parse_args(argc, argv, &o, &err);
    if (r == DDLRUN_ARGS_ERROR && !err.text[0])
        abort();
    if (r != DDLRUN_ARGS_RUN)
        return;
    if (o.np < 1 || o.np > DDLRUN_MAX_RANKS || o.nodes < 1 || o.np % o.nodes != 0 ||
        o.prog_argc < 1 || !o.prog_argv[0] || !o.prog_argv[0][0] || o.grace_ms < 0 ||
        o.grace_ms > DDL_GRACE_MAX_MS || o.restarts < 0 || o.restarts > DDL_MAX_RESTARTS ||
        o.min_nodes > o.nodes ||
        (long)o.np + (long)o.spares * (o.np / o.nodes) > DDLRUN_MAX_RANKS ||
        (o.bind == DDLRUN_BIND_LIST && !o.bind_list))
        abort();
}

static void check_spank(char **pieces, int n)
{
    ddl_spank_opts_t o = DDL_SPANK_OPTS_INIT;
    char msg[DDL_SPANK_MSG_LEN];
    for (int i = 0; i < n; i++) {
        unsigned char id = (unsigned char)pieces[i][0];
        const char *arg = id & 0x80 ? NULL : pieces[i] + (id ? 1 : 0);
        int val = (id & 0x7f) % 11; /* 0 and 10: unknown ids */
        if (ddl_spank_opt_parse(&o, val, arg, msg, sizeof msg) < 0) {
            if (val >= OPT_DDL && val <= OPT_VERBOSE && !msg[0])
                abort();
            continue;
        }
        if ((val == OPT_CHECKPOINT_DIR &&
             (!arg || strcmp(o.checkpoint_dir, arg) != 0 || o.checkpoint_dir[0] != '/')) ||
            (val == OPT_BIND && (!arg || strcmp(o.bind, arg) != 0)) ||
            (val == OPT_RESTARTS && (o.restarts < 0 || o.restarts > 100)) ||
            (val == OPT_HEARTBEAT && (o.heartbeat_ms < 50 || o.heartbeat_ms > 60000)))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* a NUL-terminated copy, split in place */
    char *buf = malloc(size);
    char *pieces[MAX_PIECES + 2];
    int n = 0;
    if (!buf)
        return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    pieces[n++] = "ddlrun";
    for (char *p = buf; p < buf + size - 1 && n <= MAX_PIECES; p += strlen(p) + 1)
        pieces[n++] = p;
    pieces[n] = NULL;
    if (data[0] & 1)
        check_spank(pieces + 1, n - 1);
    else
        check_ddlrun(n, pieces);
    free(buf);
    return 0;
}
