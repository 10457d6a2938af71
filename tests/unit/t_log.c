/* t_log.c: the step log written by a thread of its own (common/log.c
 * ddl_log_step_async, ddl_log_flush): with the writer held up (a slow file
 * system, ddl_log_write_delay_ms) the callers go on at once, lines that do
 * not fit are counted and said in the file, and what was kept reaches the
 * file whole and in order.
 */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tap.h"
#include "log.h"
#include "util.h"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

int main(void)
{
    char dir[] = "/tmp/t_log.XXXXXX", path[600];
    ddl_error_t err;
    if (!mkdtemp(dir))
        BAIL_OUT("mkdtemp: cannot make a scratch directory");
    ddl_log_init("t_log", DDL_LOG_INFO);
    ok(ddl_log_flush(100) == 0, "no step log: flush has nothing to do");
    ok(ddl_log_open_step(dir, "1.0", "n1", &err) == 0, "the step log opens");
    snprintf(path, sizeof path, "%s/step-1.0.n1.log", dir);
    ok(ddl_log_step_async() == 0, "its writes move to a thread of their own");

    /* the lines also go to stderr: not into the TAP stream */
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    ddl_log_write_delay_ms = 1500; /* a file system that answers in 1.5 s */
    int64_t t0 = ddl_now_ms();
    for (int i = 0; i < 100; i++)
        ddl_info("line %d", i);
    int64_t took = ddl_now_ms() - t0;
    char pad[200];
    memset(pad, 'x', sizeof pad - 1);
    pad[sizeof pad - 1] = '\0';
    for (int i = 0; i < 3000; i++) /* about 700 KiB: more than the buffer holds */
        ddl_info("filler %d %s", i, pad);
    dup2(saved, 2);
    close(null), close(saved);
    ok(took < 1000, "100 lines logged in %lld ms while the file takes 1.5 s a write",
       (long long)took);
    ok(ddl_log_flush(20000) == 0, "flush: everything kept is written");

    char *text = slurp(path);
    ok(text != NULL, "the step log reads back");
    if (!text)
        text = "";
    int in_order = 1;
    const char *at = text;
    for (int i = 0; i < 100 && in_order; i++) {
        char want[32];
        snprintf(want, sizeof want, "t_log: line %d\n", i);
        const char *p = strstr(at, want);
        in_order = p != NULL;
        at = p ? p + strlen(want) : at;
    }
    ok(in_order, "the 100 lines are all there, in order");
    int whole = 1, lines = 0;
    for (const char *l = text; *l; lines++) {
        const char *nl = strchr(l, '\n');
        if (!nl || l[0] != '[' || !strstr(l, "] [") || !strstr(l, "t_log: ")) {
            whole = 0;
            break;
        }
        l = nl + 1;
    }
    ok(whole && lines > 100, "every line is whole, with the time and the pid (%d lines)", lines);
    /* one note per write that found lines dropped: a slow loop (a loaded
     * machine) can fill the buffer during more than one write */
    unsigned long dropped = 0;
    int notes = 0, counted = 1;
    for (const char *note = strstr(text, " log lines not written here: this file did not keep up");
         note; note = strstr(note + 1, " log lines not written here: this file did not keep up")) {
        const char *w = note;
        while (w > text && strncmp(w, "warning: ", 9) != 0 && w[-1] != '\n')
            w--;
        unsigned long n = 0;
        counted = counted && sscanf(w, "warning: %lu", &n) == 1;
        dropped += n;
        notes++;
    }
    ok(counted && notes > 0 && dropped > 0 && lines - 100 - notes + (int)dropped == 3000,
       "the lines that did not fit are counted in the file (%lu of 3000 fillers, %d note%s)",
       dropped, notes, notes == 1 ? "" : "s");

    ddl_log_write_delay_ms = 0;
    dup2(null = open("/dev/null", O_WRONLY), 2);
    ddl_warn("after the flood");
    ok(ddl_log_flush(5000) == 0, "a later line is written");
    text = slurp(path);
    ok(text && strstr(text, "t_log: warning: after the flood\n"), "... and in the file");

    unlink(path);
    rmdir(dir);
    return done_testing();
}
