/* t_bgfile.c: a file replaced whole by a thread of its own (common/bgfile.c):
 * the content arrives with its mode and no temporary file is left; with the
 * writer held up (a hung file system, ddl_bgfile_test_hook) the caller's
 * puts return at once and only the newest content is written; a write that
 * fails is reported; a close that gives up on a stuck write leaves it to
 * the thread, which finishes and frees on its own.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tap.h"
#include "bgfile.h"

static int gate[2], entered[2], hook_calls;

/* hold: the writer tells it is about to write, then waits for a byte on the gate */
static void hold(void)
{
    char c = 'x';
    hook_calls++;
    if (write(entered[1], &c, 1) != 1 || read(gate[0], &c, 1) != 1)
        abort();
}

static void wait_entered(void)
{
    char c;
    if (read(entered[0], &c, 1) != 1)
        BAIL_OUT("the writer never reached its write");
}

static void open_gate(void)
{
    if (write(gate[1], "g", 1) != 1)
        BAIL_OUT("cannot open the gate");
}

static char *slurp(int dfd, const char *name)
{
    static char buf[256];
    int fd = openat(dfd, name, O_RDONLY);
    if (fd < 0)
        return NULL;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static int leftovers(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strncmp(e->d_name, ".m.", 3) == 0;
    if (d)
        closedir(d);
    return n;
}

int main(void)
{
    char dir[] = "/tmp/t_bgfile.XXXXXX", gone[] = "/tmp/t_bgfile.XXXXXX";
    struct stat st;
    alarm(60); /* a put that blocked would hang here */
    if (!mkdtemp(dir) || !mkdtemp(gone) || pipe(gate) < 0 || pipe(entered) < 0)
        BAIL_OUT("cannot make the scratch directories and pipes");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);

    ddl_bgfile_t *b = ddl_bgfile_new(dfd, "m", 0644);
    ok(b != NULL, "a bgfile for DIR/m starts");
    ok(ddl_bgfile_put(b, strdup("first\n"), 6) == 0, "content put");
    ok(ddl_bgfile_close(b, 5000) == 0, "close waits for it: 0");
    char *got = slurp(dfd, "m");
    ok(got && strcmp(got, "first\n") == 0, "the file holds it");
    ok(fstatat(dfd, "m", &st, 0) == 0 && (st.st_mode & 07777) == 0644, "with mode 0644");

    /* a hung file system: the writer stops before its write */
    ddl_bgfile_test_hook = hold;
    b = ddl_bgfile_new(dfd, "m", 0600);
    ddl_bgfile_put(b, strdup("second\n"), 7);
    wait_entered();
    ok(ddl_bgfile_put(b, strdup("third\n"), 6) == 0 && ddl_bgfile_put(b, strdup("fourth\n"), 7) == 0,
       "while the writer hangs, two more puts return at once");
    got = slurp(dfd, "m");
    ok(got && strcmp(got, "first\n") == 0, "... the file still holds the old content, whole");
    open_gate();
    wait_entered();
    open_gate();
    ok(ddl_bgfile_close(b, 5000) == 0, "the writer resumes: close returns 0");
    got = slurp(dfd, "m");
    ok(got && strcmp(got, "fourth\n") == 0, "... the file holds the newest content");
    is(hook_calls, 2, "... written twice: the content put while another waited was skipped");
    ok(fstatat(dfd, "m", &st, 0) == 0 && (st.st_mode & 07777) == 0600, "... with the new mode");
    is(leftovers(dir), 0, "no temporary file left");

    /* a close that gives up: the stuck write finishes later, on its own */
    hook_calls = 0;
    b = ddl_bgfile_new(dfd, "m", 0644);
    ddl_bgfile_put(b, strdup("fifth\n"), 6);
    wait_entered();
    errno = 0;
    ok(ddl_bgfile_close(b, 100) == -1 && errno == ETIMEDOUT,
       "close while the write hangs: -1 ETIMEDOUT after its timeout");
    open_gate();
    for (int i = 0; i < 500 && !((got = slurp(dfd, "m")) && strcmp(got, "fifth\n") == 0); i++)
        usleep(10000);
    ok(got && strcmp(got, "fifth\n") == 0, "... the write finishes after the close");
    usleep(100000); /* the thread frees the bgfile (valgrind, ASan: no leak) */
    ddl_bgfile_test_hook = NULL;

    /* a write that fails: the directory was removed */
    int gfd = open(gone, O_RDONLY | O_DIRECTORY);
    rmdir(gone);
    b = ddl_bgfile_new(gfd, "m", 0644);
    close(gfd); /* the bgfile keeps its own descriptor */
    ddl_bgfile_put(b, strdup("lost\n"), 5);
    for (int i = 0; i < 500 && ddl_bgfile_error(b) == 0; i++)
        usleep(10000);
    is(ddl_bgfile_error(b), ENOENT, "a write into a removed directory: ddl_bgfile_error says ENOENT");
    errno = 0;
    ok(ddl_bgfile_close(b, 1000) == -1 && errno == ENOENT, "... and close returns -1 ENOENT");

    /* refusals */
    char name[300];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    errno = 0;
    ok(ddl_bgfile_new(dfd, name, 0644) == NULL && errno == ENAMETOOLONG,
       "a 299-byte name: NULL, ENAMETOOLONG");
    errno = 0;
    ok(ddl_bgfile_new(-1, "m", 0644) == NULL && errno == EBADF, "a bad directory: NULL, EBADF");
    errno = 0;
    ok(ddl_bgfile_put(NULL, strdup("x"), 1) == -1 && errno == EINVAL, "put on no bgfile: EINVAL");
    ok(ddl_bgfile_close(NULL, 0) == 0, "close(NULL): 0");

    close(dfd);
    char path[64];
    snprintf(path, sizeof path, "%s/m", dir);
    unlink(path);
    rmdir(dir);
    return done_testing();
}
