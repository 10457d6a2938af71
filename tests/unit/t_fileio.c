/* t_fileio: the agent's file I/O off its loop (agent/fileio.c): DIR/latest
 * read and answered; a slow read (ddl_fio_read_delay_ms) gives the last
 * answer after at most DDL_FILEIO_WAIT_MS, marked stale, and a stuck read
 * is not waited for again; failure summaries written in the background,
 * complete once ddl_fio_drain returns, their errors reported.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "util.h"
#include "../tap.h"

static char dir[256];
static int nlogged;
static char logged[512];

static void put_latest(long long step)
{
    char path[300], tmp[300];
    snprintf(path, sizeof path, "%s/latest", dir);
    snprintf(tmp, sizeof tmp, "%s/latest.new", dir);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%lld\n", step) < 0 || fclose(f) != 0 || rename(tmp, path) != 0)
        BAIL_OUT("cannot write %s: %s", path, strerror(errno));
}

static void on_error(const char *text)
{
    nlogged++;
    snprintf(logged, sizeof logged, "%s", text);
}

int main(void)
{
    plan(NO_PLAN);
    snprintf(dir, sizeof dir, "/tmp/t_fileio.%d", (int)getpid());
    if (mkdir(dir, 0700) != 0)
        BAIL_OUT("mkdir %s: %s", dir, strerror(errno));
    int64_t step = -7;
    uint32_t age = 0;
    int stale = -1, rc;

    ok(ddl_fio_latest(dir, &step, &age, &stale) == -1 && stale == 0,
       "no DIR/latest: -1, not stale");
    put_latest(25);
    rc = ddl_fio_latest(dir, &step, &age, &stale);
    ok(rc == 0 && step == 25 && stale == 0 && age < 5000, "DIR/latest 25: read (step %lld, age %u ms)",
       (long long)step, age);

    /* a slow file system: the read takes 400 ms */
    ddl_fio_read_delay_ms = 400;
    put_latest(50);
    int64_t t0 = ddl_now_ms();
    rc = ddl_fio_latest(dir, &step, &age, &stale);
    int64_t took = ddl_now_ms() - t0;
    ok(rc == 0 && step == 25 && stale == 1, "a read of 400 ms: the last answer (step %lld), stale",
       (long long)step);
    ok(took >= DDL_FILEIO_WAIT_MS - 5 && took < 300, "... after %lld ms (the wait is %d ms)",
       (long long)took, DDL_FILEIO_WAIT_MS);
    t0 = ddl_now_ms();
    rc = ddl_fio_latest(dir, &step, &age, &stale);
    took = ddl_now_ms() - t0;
    ok(rc == 0 && step == 25 && stale == 1 && took < DDL_FILEIO_WAIT_MS - 5,
       "... asked again while it is stuck: the last answer at once (%lld ms)", (long long)took);
    usleep(500 * 1000);
    ddl_fio_read_delay_ms = 0;
    rc = ddl_fio_latest(dir, &step, &age, &stale);
    ok(rc == 0 && step == 50 && stale == 0, "once it has answered: the new step (%lld)",
       (long long)step);

    /* failure summaries */
    ddl_fail_summary_t s = {.step = "7.0", .gen = 3, .rank = 1, .node = 0, .host = "n1",
                            .cls = DDL_FAIL_NODE, .text = "its agent was silent",
                            .decision = "restart", .exit_code = -1, .ckpt_step = 50,
                            .restarts_left = 2, .detected_ms = ddl_realtime_ms()};
    char host[8] = "n1";
    s.host = host;
    ok(ddl_fio_summary(dir, &s) == 0, "a failure summary goes to the background");
    host[0] = 'X'; /* the caller's strings may change at once: copied */
    is(ddl_fio_drain(5000), 0, "... drained: nothing left running");
    char path[300], text[2048] = "";
    snprintf(path, sizeof path, "%s/failure-gen3.json", dir);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = '\0';
    if (f)
        fclose(f);
    ok(strstr(text, "\"generation\": 3") && strstr(text, "\"host\": \"n1\"") &&
           strstr(text, "its agent was silent"),
       "... and complete in %s", path);
    struct stat st;
    ok(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "... mode 0600");
    ddl_fio_errors(on_error);
    is(nlogged, 0, "... no error reported");

    put_latest(1);
    snprintf(path, sizeof path, "%s/latest", dir);
    s.gen = 4;
    ok(ddl_fio_summary(path, &s) == 0 && ddl_fio_drain(5000) == 0,
       "a summary into a path that is a file: written in the background");
    ddl_fio_errors(on_error);
    ok(nlogged == 1 && strstr(logged, "latest"), "... its error is reported: %s", logged);

    unlink(path);
    snprintf(path, sizeof path, "%s/failure-gen3.json", dir);
    unlink(path);
    rmdir(dir);
    return done_testing();
}
