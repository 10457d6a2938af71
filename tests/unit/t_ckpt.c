/* t_ckpt.c: the checkpoint API in one process (a world of one rank, no
 * agent): CRC-32C vectors, write/commit/read round trip, damaged and
 * truncated shards, partial checkpoints ignored and cleaned, keep-K,
 * failed commits (DDL_CKPT_FAULT, an unusable directory) leaving the
 * previous checkpoint latest, and async mode including its completion by
 * ddl_finalize(); links planted in the checkpoint directory are not
 * followed, files are 0600 and directories 0700. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "ddl.h"
#include "../tap.h"

static char root[256];

static void path_of(char *buf, size_t len, const char *dir, long step, const char *file)
{
    if (snprintf(buf, len, "%s/step-%08ld%s%s", dir, step, file ? "/" : "", file ? file : "") >=
        (int)len)
        BAIL_OUT("path in %s is too long", dir);
}

static int exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)((i * 2654435761u + seed) >> 13);
}

/* commit_one: a checkpoint of step holding "w" = n bytes made with seed. */
static ddl_status_t commit_one(const char *dir, long step, int keep, unsigned flags, size_t n,
                               unsigned seed)
{
    ddl_ckpt_t *ck;
    unsigned char *b = malloc(n ? n : 1);
    fill(b, n, seed);
    ddl_status_t st = ddl_ckpt_begin(ddl_comm_world(), dir, step, keep, flags, &ck);
    if (st == DDL_OK) {
        ddl_status_t wst = ddl_ckpt_write(ck, "w", b, n);
        st = ddl_ckpt_commit(ck);
        if (st == DDL_OK && wst != DDL_OK)
            st = DDL_ERR_INTERNAL; /* a failed write must fail the commit */
    }
    free(b);
    return st;
}

/* read_ok: step's "w" holds n bytes made with seed. */
static int read_ok(const char *dir, long step, size_t n, unsigned seed)
{
    unsigned char *want = malloc(n + 1), *got = malloc(n + 1);
    fill(want, n, seed);
    ddl_status_t st = ddl_ckpt_read(dir, step, 0, "w", got, n, NULL);
    int good = st == DDL_OK && memcmp(want, got, n) == 0;
    if (st != DDL_OK)
        diag("read of step %ld: %s: %s", step, ddl_status_str(st), ddl_last_error());
    free(want);
    free(got);
    return good;
}

static long latest(const char *dir)
{
    int64_t s = -7;
    ddl_status_t st = ddl_ckpt_latest(dir, &s);
    if (st != DDL_OK)
        diag("ddl_ckpt_latest: %s", ddl_last_error());
    return st == DDL_OK ? (long)s : -100;
}

static void flip_byte(const char *path, off_t off)
{
    int fd = open(path, O_RDWR);
    unsigned char c = 0;
    if (fd < 0 || pread(fd, &c, 1, off) != 1)
        BAIL_OUT("cannot open %s to damage it", path);
    c ^= 0x40;
    if (pwrite(fd, &c, 1, off) != 1)
        BAIL_OUT("cannot damage %s", path);
    close(fd);
}

static void test_crc(void)
{
    const char *v = "123456789";
    is(ddl_crc32c(0, v, 9), 0xe3069283u, "crc32c of 123456789 (dispatched)");
    is(ddl_crc32c_sw(0, v, 9), 0xe3069283u, "crc32c of 123456789 (software)");
    unsigned char zeros[32] = {0};
    is(ddl_crc32c_sw(0, zeros, 32), 0x8a9136aau, "crc32c of 32 zero bytes (RFC 3720)");
    size_t n = (1 << 20) + 13;
    unsigned char *b = malloc(n);
    fill(b, n, 7);
    int same = 1;
    for (size_t off = 0; off < 9; off++)
        same &= ddl_crc32c(0, b + off, n - off - 3) == ddl_crc32c_sw(0, b + off, n - off - 3);
    ok(same, "hardware and software crc32c agree at every alignment");
    uint32_t part = ddl_crc32c(ddl_crc32c(0, b, 1000), b + 1000, n - 1000);
    is(part, ddl_crc32c(0, b, n), "crc32c extends incrementally");
    free(b);
}

static void test_round_trip(const char *dir)
{
    ddl_ckpt_t *ck = NULL;
    size_t na = 1000, nc = (3 << 20) + 5;
    unsigned char *a = malloc(na), *c = malloc(nc), *r = malloc(nc);
    fill(a, na, 1);
    fill(c, nc, 2);
    is(latest(dir), -1, "no checkpoint in a missing directory");
    is(ddl_ckpt_begin(ddl_comm_world(), dir, 1, 0, 0, &ck), DDL_OK, "begin step 1");
    is(ddl_ckpt_write(ck, "a", a, na), DDL_OK, "write a");
    is(ddl_ckpt_write(ck, "empty", NULL, 0), DDL_OK, "write an empty buffer");
    is(ddl_ckpt_write(ck, "c", c, nc), DDL_OK, "write c (3 MiB)");
    is(ddl_ckpt_write(ck, "a", a, na), DDL_ERR_INVALID, "a duplicate name is refused");
    is(ddl_ckpt_write(ck, "", a, na), DDL_ERR_INVALID, "an empty name is refused");
    char path[512];
    path_of(path, sizeof path, dir, 1, "MANIFEST");
    ok(!exists(path), "no MANIFEST before the commit");
    is(latest(dir), -1, "nothing is latest before the commit");
    is(ddl_ckpt_commit(ck), DDL_OK, "commit step 1");
    ok(exists(path), "MANIFEST after the commit");
    is(latest(dir), 1, "latest is step 1");

    size_t got = 0;
    is(ddl_ckpt_read(dir, 1, 0, "c", NULL, 0, &got), DDL_OK, "size query");
    is(got, nc, "size query gives c's size");
    memset(r, 0, nc);
    is(ddl_ckpt_read(dir, 1, 0, "c", r, nc, NULL), DDL_OK, "read c");
    ok(memcmp(r, c, nc) == 0, "c reads back identical");
    is(ddl_ckpt_read(dir, 1, 0, "a", r, nc, &got), DDL_OK, "read a into a larger buffer");
    ok(got == na && memcmp(r, a, na) == 0, "a reads back identical, size %zu", got);
    is(ddl_ckpt_read(dir, 1, 0, "empty", NULL, 0, NULL), DDL_OK, "read the empty buffer");
    is(ddl_ckpt_read(dir, 1, 0, "a", r, na - 1, NULL), DDL_ERR_INVALID, "a size mismatch");
    ok(strstr(ddl_last_error(), "1000 bytes") != NULL, "the error gives the stored size: %s",
       ddl_last_error());
    is(ddl_ckpt_read(dir, 1, 0, "nope", r, 1, NULL), DDL_ERR_INVALID, "an unknown name");
    is(ddl_ckpt_read(dir, 1, 1, "a", r, na, NULL), DDL_ERR_INVALID, "a rank beyond the world");
    is(ddl_ckpt_read(dir, 2, 0, "a", r, na, NULL), DDL_ERR_INVALID, "an uncommitted step");
    is(ddl_ckpt_begin(ddl_comm_world(), dir, 1, 0, 0, &ck), DDL_ERR_INVALID,
       "begin of a step not after latest is refused");
    ok(ck == NULL, "and gives no checkpoint");
    is(ddl_ckpt_begin(ddl_comm_world(), dir, 5, 0, 0x80, &ck), DDL_ERR_INVALID,
       "unknown flags are refused");
    free(a);
    free(c);
    free(r);
}

static void test_damage(const char *dir)
{
    char shard[512];
    size_t n = 4096;
    is(commit_one(dir, 2, -1, 0, n, 3), DDL_OK, "commit step 2");
    ok(read_ok(dir, 2, n, 3), "step 2 reads back");
    path_of(shard, sizeof shard, dir, 2, "rank-0.shard");
    /* header 32 + record header 16 + name "w" 1: data starts at 49 */
    flip_byte(shard, 49 + 100);
    unsigned char *b = malloc(n);
    is(ddl_ckpt_read(dir, 2, 0, "w", b, n, NULL), DDL_ERR_IO, "a flipped data byte is detected");
    ok(strstr(ddl_last_error(), "checksum") && strstr(ddl_last_error(), shard),
       "the error names the checksum and the file: %s", ddl_last_error());
    flip_byte(shard, 49 + 100);
    ok(read_ok(dir, 2, n, 3), "restored, it reads again");
    flip_byte(shard, 33); /* the record's name length */
    is(ddl_ckpt_read(dir, 2, 0, "w", b, n, NULL), DDL_ERR_IO, "a damaged record header");
    flip_byte(shard, 33);

    is(commit_one(dir, 3, -1, 0, n, 4), DDL_OK, "commit step 3");
    path_of(shard, sizeof shard, dir, 3, "rank-0.shard");
    struct stat sb;
    stat(shard, &sb);
    if (truncate(shard, sb.st_size - 10) < 0)
        BAIL_OUT("cannot truncate %s", shard);
    is(ddl_ckpt_read(dir, 3, 0, "w", b, n, NULL), DDL_ERR_IO, "a truncated shard is detected");
    ok(strstr(ddl_last_error(), "truncated") != NULL, "the error says truncated: %s",
       ddl_last_error());
    char man[512];
    path_of(man, sizeof man, dir, 3, "MANIFEST");
    flip_byte(man, 20);
    is(ddl_ckpt_read(dir, 3, 0, "w", b, n, NULL), DDL_ERR_IO, "a damaged MANIFEST is detected");
    free(b);
}

static void test_partial(const char *dir)
{
    char p[512], f[512];
    /* a commit killed before MANIFEST, after latest (3), and junk below it */
    path_of(p, sizeof p, dir, 9, NULL);
    mkdir(p, 0777);
    path_of(f, sizeof f, dir, 9, "rank-0.shard");
    FILE *fp = fopen(f, "w");
    fputs("half a shard", fp);
    fclose(fp);
    path_of(p, sizeof p, dir, 0, NULL);
    mkdir(p, 0777);
    is(latest(dir), 3, "a partial checkpoint is not latest");
    unsigned char b[1];
    is(ddl_ckpt_read(dir, 9, 0, "w", b, 1, NULL), DDL_ERR_INVALID,
       "a partial checkpoint cannot be read");
    is(commit_one(dir, 4, -1, 0, 100, 5), DDL_OK, "commit step 4 (begin cleans up)");
    path_of(p, sizeof p, dir, 9, NULL);
    ok(!exists(p), "the partial step 9 was removed");
    path_of(p, sizeof p, dir, 0, NULL);
    ok(!exists(p), "the partial step 0 was removed");
    path_of(p, sizeof p, dir, 1, "MANIFEST");
    ok(exists(p), "committed step 1 is kept (keep -1)");
}

static void test_keep(const char *dir)
{
    char p[512];
    for (long s = 1; s <= 5; s++)
        is(commit_one(dir, s, 2, 0, 64, (unsigned)s), DDL_OK, "keep 2: commit step %ld", s);
    int present = 0;
    for (long s = 1; s <= 5; s++) {
        path_of(p, sizeof p, dir, s, NULL);
        present |= exists(p) << s;
    }
    is(present, (1 << 4) | (1 << 5), "only steps 4 and 5 remain");
    ok(read_ok(dir, 5, 64, 5) && read_ok(dir, 4, 64, 4), "both read back");
    is(commit_one(dir, 6, 0, 0, 64, 6), DDL_OK, "commit step 6 with the default keep");
    path_of(p, sizeof p, dir, 4, NULL);
    ok(exists(p), "default keep (3) keeps step 4");
    is(ddl_ckpt_cleanup(dir, 1), DDL_OK, "ddl_ckpt_cleanup keep 1");
    ok(!exists(p), "and removes step 4");
    is(latest(dir), 6, "latest stays 6");
}

static void test_faults(const char *dir)
{
    static const char *const kinds[] = {"write", "fsync", "rename"};
    long step = 10;
    is(commit_one(dir, step, 0, 0, 256, 10), DDL_OK, "commit step 10");
    for (int k = 0; k < 3; k++) {
        char p[512];
        setenv("DDL_CKPT_FAULT", kinds[k], 1);
        ddl_status_t st = commit_one(dir, step + 1 + k, 0, 0, 256, 99);
        unsetenv("DDL_CKPT_FAULT");
        is(st, DDL_ERR_IO, "DDL_CKPT_FAULT=%s fails the commit with DDL_ERR_IO", kinds[k]);
        ok(strstr(ddl_last_error(), "errno") && strstr(ddl_last_error(), dir),
           "the error names the file and errno: %s", ddl_last_error());
        is(latest(dir), step, "latest still names step %ld", step);
        path_of(p, sizeof p, dir, step + 1 + k, NULL);
        ok(!exists(p), "the failed step directory is removed");
        ok(read_ok(dir, step, 256, 10), "step %ld still reads back", step);
    }
    setenv("DDL_CKPT_FAULT", "write:3", 1);
    is(commit_one(dir, 20, 0, 0, 256, 20), DDL_OK, "a fault aimed at another rank changes nothing");
    unsetenv("DDL_CKPT_FAULT");
    is(latest(dir), 20, "and step 20 is latest");

    /* an unusable directory: a path below a regular file */
    char bad[512];
    snprintf(bad, sizeof bad, "%s/plainfile", root);
    FILE *fp = fopen(bad, "w");
    fclose(fp);
    snprintf(bad, sizeof bad, "%s/plainfile/ckpt", root);
    ddl_ckpt_t *ck = NULL;
    is(ddl_ckpt_begin(ddl_comm_world(), bad, 1, 0, 0, &ck), DDL_ERR_IO,
       "begin in a directory below a regular file fails");
    ok(strstr(ddl_last_error(), bad) && strstr(ddl_last_error(), "errno"),
       "the error names the path and errno: %s", ddl_last_error());

    /* a stray file where a step directory belongs is replaced */
    char p[512];
    path_of(p, sizeof p, dir, 21, NULL);
    fp = fopen(p, "w");
    fclose(fp);
    is(commit_one(dir, 21, 0, 0, 256, 21), DDL_OK, "a stray file named like a step is cleaned");

    if (geteuid() == 0) {
        skip(4, "running as root: permissions do not stop root (DDL_CKPT_FAULT covers this)");
        return;
    }
    char ro[512];
    snprintf(ro, sizeof ro, "%s/readonly", root);
    is(commit_one(ro, 1, 0, 0, 64, 1), DDL_OK, "commit step 1 in a writable directory");
    chmod(ro, 0500);
    is(commit_one(ro, 2, 0, 0, 64, 2), DDL_ERR_IO, "a read-only directory fails the commit");
    ok(strstr(ddl_last_error(), "Permission denied") != NULL, "with EACCES: %s",
       ddl_last_error());
    chmod(ro, 0700);
    is(latest(ro), 1, "latest still names step 1");
}

/* mode_of: the permission bits of p, -1 if it is missing. */
static int mode_of(const char *p)
{
    struct stat sb;
    return lstat(p, &sb) == 0 ? (int)(sb.st_mode & 07777) : -1;
}

/* slurp: the first bytes of p as a string ("" if unreadable). */
static const char *slurp(const char *p, char *buf, size_t len)
{
    FILE *f = fopen(p, "r");
    size_t n = f ? fread(buf, 1, len - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    return buf;
}

/* Links and modes: nothing outside the checkpoint directory is written or
 * removed through a symbolic link planted in it, files are 0600 and
 * directories 0700, and a directory others can write is refused.
 * (tests/integration/t0022-file-safety.t plays the same with two users.) */
static void test_links(void)
{
    char dir[512], outside[512], secret[600], p[600], q[700], buf[256];
    snprintf(dir, sizeof dir, "%s/links/ck", root);
    snprintf(outside, sizeof outside, "%s/outside", root);
    snprintf(secret, sizeof secret, "%s/secret", outside);
    if (mkdir(outside, 0700) < 0)
        BAIL_OUT("mkdir %s: %s", outside, strerror(errno));
    FILE *f = fopen(secret, "w");
    if (!f)
        BAIL_OUT("cannot create %s", secret);
    fputs("precious\n", f);
    fclose(f);
    chmod(secret, 0600);

    is(commit_one(dir, 1, 0, 0, 64, 1), DDL_OK, "commit step 1 in a new directory");
    is(mode_of(dir), 0700, "the checkpoint directory is made 0700");
    path_of(p, sizeof p, dir, 1, NULL);
    is(mode_of(p), 0700, "the step directory is 0700");
    path_of(p, sizeof p, dir, 1, "rank-0.shard");
    is(mode_of(p), 0600, "the shard is 0600");
    path_of(p, sizeof p, dir, 1, "MANIFEST");
    is(mode_of(p), 0600, "MANIFEST is 0600");
    snprintf(p, sizeof p, "%s/latest", dir);
    is(mode_of(p), 0600, "latest is 0600");

    /* links where the temporary files of the commit used to go, planted
     * between begin and commit (begin's cleanup would remove them) */
    ddl_ckpt_t *ck = NULL;
    unsigned char b[64];
    fill(b, sizeof b, 3);
    is(ddl_ckpt_begin(ddl_comm_world(), dir, 3, 0, 0, &ck), DDL_OK, "begin step 3");
    is(ddl_ckpt_write(ck, "w", b, sizeof b), DDL_OK, "write step 3");
    snprintf(p, sizeof p, "%s/latest.tmp", dir);
    path_of(q, sizeof q, dir, 3, "MANIFEST.tmp");
    if (symlink(secret, p) < 0 || symlink(secret, q) < 0)
        BAIL_OUT("symlink: %s", strerror(errno));
    is(ddl_ckpt_commit(ck), DDL_OK, "commit step 3 with latest.tmp and MANIFEST.tmp links");
    is_str(slurp(secret, buf, sizeof buf), "precious\n", "the links' target is not overwritten");
    is(mode_of(secret), 0600, "... nor its mode changed");
    is(latest(dir), 3, "latest is step 3");
    ok(read_ok(dir, 3, 64, 3), "step 3 reads back");

    /* a link named like a step: cleanup removes the link, not its target */
    path_of(p, sizeof p, dir, 7, NULL);
    if (symlink(outside, p) < 0)
        BAIL_OUT("symlink: %s", strerror(errno));
    is(ddl_ckpt_cleanup(dir, 0), DDL_OK, "cleanup with a step directory that is a link");
    ok(exists(secret), "the file in the link's target is still there");
    ok(mode_of(p) < 0, "the link itself is gone");
    path_of(p, sizeof p, dir, 8, NULL);
    if (symlink(outside, p) < 0)
        BAIL_OUT("symlink: %s", strerror(errno));
    is(commit_one(dir, 8, 0, 0, 64, 8), DDL_OK, "commit step 8 where step-00000008 was a link");
    ok(exists(secret), "the link's target kept its file");
    path_of(p, sizeof p, dir, 8, "rank-0.shard");
    snprintf(q, sizeof q, "%s/rank-0.shard", outside);
    ok(exists(p) && !exists(q), "the shard is in the real step directory, none in the target");

    /* a checkpoint directory others can write is refused */
    chmod(dir, 0777);
    is(commit_one(dir, 9, 0, 0, 64, 9), DDL_ERR_IO, "a directory others can write is refused");
    ok(strstr(ddl_last_error(), dir) && strstr(ddl_last_error(), "mode 0777") &&
           strstr(ddl_last_error(), "chmod go-w"),
       "the error names the path, the mode and the fix: %s", ddl_last_error());
    is(ddl_ckpt_cleanup(dir, 1), DDL_ERR_IO, "... by cleanup too");
    is(latest(dir), 8, "latest still names step 8");
    chmod(dir, 0700);

    /* in a directory like /tmp (writable by all, sticky) a link is not followed */
    char shared[512];
    snprintf(shared, sizeof shared, "%s/links/shared", root);
    mkdir(shared, 0700);
    chmod(shared, 01777);
    snprintf(p, sizeof p, "%s/ck", shared);
    if (symlink(outside, p) < 0)
        BAIL_OUT("symlink: %s", strerror(errno));
    snprintf(q, sizeof q, "%s/ck/sub", shared);
    is(commit_one(q, 1, 0, 0, 64, 1), DDL_ERR_IO, "a link inside a sticky shared directory is "
       "refused");
    ok(strstr(ddl_last_error(), "symbolic link") != NULL, "... saying so: %s", ddl_last_error());
    snprintf(q, sizeof q, "%s/sub", outside);
    ok(!exists(q), "nothing was made in the link's target");
}

/* test_local_begin: the node-local level's begin checks on one rank: a
 * step not after the shared directory's latest (a checkpoint that also goes
 * there) is refused naming that directory; one not after the node
 * directory's latest names the rank and the node-local directory. */
static void test_local_begin(const char *dir)
{
    char local[600];
    ddl_ckpt_t *ck = NULL;
    int64_t s = -1;
    snprintf(local, sizeof local, "%s/local", dir);
    setenv("DDL_CKPT_LOCAL_DIR", local, 1);
    setenv("DDL_CKPT_SHARED_EVERY", "1", 1);
    is(ddl_ckpt_begin(ddl_comm_world(), dir, 5, 0, DDL_CKPT_ASYNC, &ck), DDL_OK,
       "node-local level: step 5 begins");
    is(ddl_ckpt_write(ck, "x", "abc", 3), DDL_OK, "... its buffer copied");
    is(ddl_ckpt_commit(ck), DDL_OK, "... committed in the background");
    is(ddl_ckpt_wait(&s), DDL_OK, "... and waited for");
    is(s, 5, "... it was step 5");
    is(ddl_ckpt_begin(ddl_comm_world(), dir, 4, 0, DDL_CKPT_ASYNC, &ck), DDL_ERR_INVALID,
       "step 4, also for the shared directory: refused");
    ok(strncmp(ddl_last_error(), "checkpoint step 4 is not after the latest one (5) in ", 53) == 0 &&
       strstr(ddl_last_error(), "node-local") == NULL, "... naming the shared directory: %s",
       ddl_last_error());
    setenv("DDL_CKPT_SHARED_EVERY", "0", 1);
    is(ddl_ckpt_begin(ddl_comm_world(), dir, 4, 0, DDL_CKPT_ASYNC, &ck), DDL_ERR_INVALID,
       "step 4, node-local only: refused");
    ok(strncmp(ddl_last_error(), "rank 0: checkpoint step 4 is not after the latest one (5) "
               "in the node-local directory ", 86) == 0,
       "... naming the rank and the node-local directory: %s", ddl_last_error());
    ok(ck == NULL, "... and gives no checkpoint");
    unsetenv("DDL_CKPT_LOCAL_DIR");
    unsetenv("DDL_CKPT_SHARED_EVERY");
}

static void test_async(const char *dir)
{
    ddl_ckpt_t *ck;
    size_t n = (8 << 20) + 3;
    unsigned char *b = malloc(n);
    int64_t s = -5;
    fill(b, n, 30);
    is(ddl_ckpt_wait(&s), DDL_OK, "wait with nothing pending");
    is(s, -1, "reports no step");
    ddl_ckpt_t *ck2;
    is(ddl_ckpt_begin(ddl_comm_world(), dir, 28, 0, DDL_CKPT_ASYNC, &ck), DDL_OK, "begin 28");
    is(ddl_ckpt_begin(ddl_comm_world(), dir, 29, 0, DDL_CKPT_ASYNC, &ck2), DDL_OK, "begin 29");
    is(ddl_ckpt_commit(ck), DDL_OK, "async commit 28");
    is(ddl_ckpt_commit(ck2), DDL_ERR_INVALID, "a second pending async commit is refused");
    is(ddl_ckpt_wait(&s), DDL_OK, "wait for 28");
    is(latest(dir), 28, "step 28 is latest");
    is(ddl_ckpt_begin(ddl_comm_world(), dir, 30, 0, DDL_CKPT_ASYNC, &ck), DDL_OK,
       "async begin step 30");
    is(ddl_ckpt_write(ck, "w", b, n), DDL_OK, "async write");
    memset(b, 0xee, n); /* the caller may reuse its buffer at once */
    is(ddl_ckpt_commit(ck), DDL_OK, "async commit returns");
    ok(latest(dir) < 30, "step 30 is not latest before the wait");
    is(ddl_ckpt_wait(&s), DDL_OK, "wait commits it");
    is(s, 30, "for step 30");
    is(latest(dir), 30, "latest is step 30");
    ok(read_ok(dir, 30, n, 30), "step 30 holds the data as it was at the write");

    /* an async failure surfaces at the next begin, which can then be retried */
    setenv("DDL_CKPT_FAULT", "fsync", 1);
    is(commit_one(dir, 31, 0, DDL_CKPT_ASYNC, 1000, 31), DDL_OK, "async commit with a fault");
    unsetenv("DDL_CKPT_FAULT");
    ck = NULL;
    is(ddl_ckpt_begin(ddl_comm_world(), dir, 32, 0, DDL_CKPT_ASYNC, &ck), DDL_ERR_IO,
       "the next begin reports the failed async commit");
    ok(ck == NULL && strstr(ddl_last_error(), "step 31"), "naming step 31: %s",
       ddl_last_error());
    is(latest(dir), 30, "latest stays step 30");
    is(commit_one(dir, 32, 0, DDL_CKPT_ASYNC, 1000, 32), DDL_OK, "begin again: async step 32");
    is(commit_one(dir, 33, 0, DDL_CKPT_ASYNC, 1000, 33), DDL_OK,
       "async step 33 (begin waits for 32)");
    is(latest(dir), 32, "step 32 was committed by that begin");
    is(ddl_finalize(), DDL_OK, "ddl_finalize with step 33 pending");
    is(latest(dir), 33, "ddl_finalize committed step 33");
    ok(read_ok(dir, 33, 1000, 33) && read_ok(dir, 32, 1000, 32), "steps 32 and 33 read back");
    free(b);
}

int main(void)
{
    char dir[512];
    ddl_ckpt_t *ck = NULL;
    plan(NO_PLAN);
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/t_ckpt.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root))
        BAIL_OUT("cannot create a temporary directory in %s", tmp ? tmp : "/tmp");

    test_crc();
    is(strncmp(ddl_status_str(DDL_ERR_IO), "DDL_ERR_IO", 10), 0, "status string for DDL_ERR_IO");
    is(ddl_ckpt_begin(NULL, root, 1, 0, 0, &ck), DDL_ERR_NOT_INITIALIZED,
       "begin before ddl_init");
    if (ddl_init() != DDL_OK)
        BAIL_OUT("ddl_init: %s", ddl_last_error());
    snprintf(dir, sizeof dir, "%s/a/b", root);
    test_round_trip(dir);
    test_damage(dir);
    test_partial(dir);
    snprintf(dir, sizeof dir, "%s/keep", root);
    test_keep(dir);
    snprintf(dir, sizeof dir, "%s/faults", root);
    test_faults(dir);
    snprintf(dir, sizeof dir, "%s/async", root);
    test_links();
    snprintf(dir, sizeof dir, "%s/levels", root);
    test_local_begin(dir);
    snprintf(dir, sizeof dir, "%s/async", root);
    test_async(dir);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        diag("could not remove %s", root);
    return done_testing();
}
