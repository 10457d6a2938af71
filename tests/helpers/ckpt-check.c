/* ckpt-check.c: the checkpoint API under `ddlrun -n N`, driven by
 * tests/integration/t0008-checkpoint.t.  One scenario per run:
 *
 *   ckpt-check commit DIR        five commits with per-rank names and sizes,
 *                                each read back (own and a neighbour's
 *                                shard); a commit where only the last rank
 *                                fails (DDL_CKPT_FAULT) fails on every rank
 *                                with the same status, latest unchanged
 *   ckpt-check kill DIR K        commits steps 1..K-1, then at step K the
 *                                last rank writes its shard and kills itself
 *                                with SIGKILL before the commit
 *   ckpt-check verify DIR S      latest is S and every rank's shard of S
 *                                reads back; then step S+1 commits over the
 *                                partial leftovers
 *   ckpt-check async DIR MIB     MIB MiB per rank: the time the caller
 *                                blocks in sync and async mode (printed),
 *                                and the data committed by the next begin,
 *                                ddl_ckpt_wait() and ddl_finalize()
 *   ckpt-check levels DIR MIB [SHARED]
 *                                MIB MiB per rank, the node-local level
 *                                (DIR/local/node-%n, partner copies)
 *                                against the shared one (SHARED, by
 *                                default DIR/shared):
 *                                the time a checkpoint blocks the caller
 *                                (sync shared; async local + partner, with
 *                                2 s + 4x the sync write of "training"
 *                                between checkpoints), and
 *                                the restore time (ddl_ckpt_restore + read,
 *                                slowest rank, page cache dropped; 5 of
 *                                each, alternating: median, min-max) from
 *                                the shared directory and, with node 1's
 *                                directory deleted, from the partner copies;
 *                                run under ddlrun --nodes 2 (bench/run-ckpt-levels.sh)
 *   ckpt-check partner DIR       the async node-local level (DIR/local/
 *                                node-%n) under ddlrun --nodes 2: a rank's
 *                                ddl_ckpt_commit returns while its partner
 *                                has not committed (node 1 waits for a
 *                                marker file from every rank of node 0
 *                                before its own commit); each node's
 *                                directory then holds the other's shards;
 *                                the next checkpoint, whose partners never
 *                                commit and abort instead, fails on
 *                                ddl_ckpt_wait() (no hang) and the first
 *                                stays latest; between the two, node 1's
 *                                own shards removed, a restore (node 0's
 *                                from their node, node 1's from the partner
 *                                copies) whose ddl_ckpt_read() copies from
 *                                memory, the files removed, until every
 *                                buffer was read; then rank 0's own shard
 *                                written back damaged (one bit): a second
 *                                restore gives every rank a partner copy,
 *                                rank 0's in a second exchange
 *   ckpt-check storecrash DIR 1|2
 *                                the node-local level under ddlrun --nodes
 *                                2: (1) step 1 committed, node 1's own
 *                                shards removed, a restore; node 1's first
 *                                rank (DDL_CKPT_FAULT=store) exits halfway
 *                                through storing the partner copy it got;
 *                                (2) that rank's shard is not there under
 *                                its name (only the temporary file), and
 *                                the next restore takes the partner copy
 *                                again, with the right bytes; that rank
 *                                stores it 1 s late (DDL_CKPT_FAULT=
 *                                slowstore), after it read every buffer,
 *                                and a third restore finds it complete on
 *                                its own node
 *
 * Prints "PASS"/"FAIL" lines and exits non-zero on any failure (2: usage).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "ddl.h"

static int rank, size;

static void fill(unsigned char *b, size_t n, long step, int r)
{
    unsigned seed = (unsigned)(step * 131 + r * 7919);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)((i * 2654435761u + seed) >> 11);
}

static size_t data_size(long step, int r)
{
    return 1000 + (size_t)r * 337 + (size_t)step * 11;
}

/* save: step with "data" (rank-dependent size) and "meta" {step, rank}. */
static ddl_status_t save(const char *dir, long step, int keep, int die)
{
    ddl_ckpt_t *ck;
    size_t n = data_size(step, rank);
    unsigned char *b = malloc(n);
    long meta[2] = {step, rank};
    fill(b, n, step, rank);
    ddl_status_t st = ddl_ckpt_begin(ddl_comm_world(), dir, step, keep, 0, &ck);
    if (st == DDL_OK) {
        ddl_ckpt_write(ck, "data", b, n);
        ddl_ckpt_write(ck, rank % 2 ? "meta-odd" : "meta", meta, sizeof meta);
        if (die) {
            printf("rank %d: shard of step %ld written, killing myself\n", rank, step);
            fflush(stdout);
            raise(SIGKILL);
        }
        st = ddl_ckpt_commit(ck);
    }
    free(b);
    return st;
}

/* load_ok: r's shard of step reads back. */
static int load_ok(const char *dir, long step, int r)
{
    size_t n = data_size(step, r);
    unsigned char *want = malloc(n), *got = malloc(n);
    long meta[2] = {-1, -1};
    fill(want, n, step, r);
    ddl_status_t st = ddl_ckpt_read(dir, step, r, "data", got, n, NULL);
    if (st == DDL_OK)
        st = ddl_ckpt_read(dir, step, r, r % 2 ? "meta-odd" : "meta", meta, sizeof meta, NULL);
    if (st != DDL_OK)
        fprintf(stderr, "rank %d: read of rank %d step %ld: %s\n", rank, r, step,
                ddl_last_error());
    int good = st == DDL_OK && !memcmp(want, got, n) && meta[0] == step && meta[1] == r;
    free(want);
    free(got);
    return good;
}

static long latest(const char *dir)
{
    int64_t s;
    return ddl_ckpt_latest(dir, &s) == DDL_OK ? (long)s : -100;
}

static void commit_mode(const char *dir)
{
    char what[128];
    for (long s = 1; s <= 5; s++) {
        snprintf(what, sizeof what, "commit step %ld", s);
        expect(save(dir, s, 3, 0), DDL_OK, what);
        check(latest(dir) == s, "latest follows the commit");
        check(load_ok(dir, s, rank), "own shard reads back");
        check(load_ok(dir, s, (rank + 1) % size), "the next rank's shard reads back");
    }
    char fault[32];
    snprintf(fault, sizeof fault, "write:%d", size - 1);
    setenv("DDL_CKPT_FAULT", fault, 1);
    expect(save(dir, 6, 3, 0), DDL_ERR_IO, "a write failure on the last rank fails every rank");
    unsetenv("DDL_CKPT_FAULT");
    char want[64];
    snprintf(want, sizeof want, "rank %d: cannot write", size - 1);
    check(strstr(ddl_last_error(), want) != NULL, "the error names the failing rank");
    printf("rank %d: error text: %s\n", rank, ddl_last_error());
    check(latest(dir) == 5, "latest stays step 5");
    check(load_ok(dir, 5, rank), "step 5 still reads back");
    expect(save(dir, 6, 3, 0), DDL_OK, "step 6 commits once the fault is gone");
    check(latest(dir) == 6 && load_ok(dir, 6, rank), "step 6 is latest and reads back");
}

static void kill_mode(const char *dir, long k)
{
    char what[64];
    for (long s = 1; s < k; s++) {
        snprintf(what, sizeof what, "commit step %ld", s);
        expect(save(dir, s, 0, 0), DDL_OK, what);
    }
    save(dir, k, 0, rank == size - 1);
    check(0, "survived a commit whose last rank was killed");
}

static void verify_mode(const char *dir, long s)
{
    check(latest(dir) == s, "latest is the last complete step");
    for (int r = 0; r < size; r++)
        check(load_ok(dir, s, r), "every rank's shard of it reads back");
    expect(save(dir, s + 1, 0, 0), DDL_OK, "the next step commits over the leftovers");
    check(latest(dir) == s + 1 && load_ok(dir, s + 1, rank), "and reads back");
}

static void async_mode(const char *dir, long mib)
{
    size_t n = (size_t)mib << 20;
    unsigned char *b = malloc(n), *r = malloc(n);
    ddl_ckpt_t *ck;
    double block[2] = {0, 0}, first_async = 0, waited = 0;
    int reps = 3;
    if (!b || !r) {
        check(0, "allocate the buffers");
        return;
    }
    for (int mode = 0; mode < 2; mode++) {
        unsigned flags = mode ? DDL_CKPT_ASYNC : 0;
        for (int i = 0; i < reps; i++) {
            long step = 1 + mode * reps + i;
            fill(b, n, step, rank);
            double t0 = now_ms();
            ddl_status_t st = ddl_ckpt_begin(ddl_comm_world(), dir, step, 2, flags, &ck);
            double t1 = now_ms();
            if (st == DDL_OK)
                st = ddl_ckpt_write(ck, "model", b, n);
            if (st == DDL_OK)
                st = ddl_ckpt_commit(ck);
            double t2 = now_ms();
            expect(st, DDL_OK, mode ? "async checkpoint" : "sync checkpoint");
            memset(b, 0x5a, n); /* the training loop changes the model at once */
            if (mode && i == 0)
                first_async = t2 - t1; /* copies into fresh memory */
            else
                block[mode] += t2 - t1;
            if (mode && i > 0)
                waited += t1 - t0; /* begin completing the previous async commit */
        }
    }
    long last = 2 * reps;
    int64_t s = -1;
    check(latest(dir) == last - 1, "the last async step is not committed before the wait");
    expect(ddl_ckpt_wait(&s), DDL_OK, "ddl_ckpt_wait commits it");
    check(s == last && latest(dir) == last, "latest is the last async step");
    fill(b, n, last, rank);
    check(ddl_ckpt_read(dir, last, rank, "model", r, n, NULL) == DDL_OK && !memcmp(b, r, n),
          "the async data reads back as it was at the write");
    fill(b, n, last - 1, rank);
    check(ddl_ckpt_read(dir, last - 1, rank, "model", r, n, NULL) == DDL_OK && !memcmp(b, r, n),
          "the previous async step (committed by begin) reads back");
    double sync_ms = block[0] / reps, async_ms = block[1] / (reps - 1);
    printf("rank %d: %ld MiB per rank, caller blocked in write+commit: sync %.1f ms, async "
           "%.1f ms (%.1f%% of sync; first async step %.1f ms, into fresh memory); the next "
           "begin waited %.1f ms for the background write\n", rank, mib, sync_ms, async_ms,
           100.0 * async_ms / (sync_ms > 0 ? sync_ms : 1), first_async, waited / (reps - 1));

    /* one more async step, left for ddl_finalize() to commit */
    fill(b, n, last + 1, rank);
    expect(ddl_ckpt_begin(ddl_comm_world(), dir, last + 1, 2, DDL_CKPT_ASYNC, &ck), DDL_OK,
           "async begin before finalize");
    expect(ddl_ckpt_write(ck, "model", b, n), DDL_OK, "async write before finalize");
    expect(ddl_ckpt_commit(ck), DDL_OK, "async commit before finalize");
    expect(ddl_finalize(), DDL_OK, "ddl_finalize commits the pending step");
    check(latest(dir) == last + 1, "latest is the step ddl_finalize committed");
    check(ddl_ckpt_read(dir, last + 1, rank, "model", r, n, NULL) == DDL_OK && !memcmp(b, r, n),
          "it reads back after ddl_finalize");
    free(b);
    free(r);
}

/* drop: the page cache of every file under path and under also (if not
 * NULL; the user's own files:
 * posix_fadvise, no root needed; as root also /proc/sys/vm/drop_caches),
 * so that a restore reads the disk. */
static int drop_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb, (void)f;
    if (flag == FTW_F) {
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            fdatasync(fd);
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
    }
    return 0;
}

static void drop(const char *path, const char *also)
{
    if (rank == 0) {
        sync(); /* no write-back of an earlier step competes with the reads */
        nftw(path, drop_one, 16, FTW_PHYS);
        if (also)
            nftw(also, drop_one, 16, FTW_PHYS);
        FILE *f = geteuid() == 0 ? fopen("/proc/sys/vm/drop_caches", "w") : NULL;
        if (f) { /* as root: the whole clean page cache, to be sure */
            fputs("1\n", f);
            fclose(f);
        }
    }
    ddl_barrier(ddl_comm_world());
}

/* restore_ms: ddl_ckpt_restore + reading "model", the slowest rank's ms. */
static double restore_ms(const char *shared, unsigned char *r, size_t n, long want, int *lvl)
{
    char from[PATH_MAX];
    int64_t step = -1;
    ddl_barrier(ddl_comm_world());
    double t0 = now_ms();
    ddl_status_t st = ddl_ckpt_restore(ddl_comm_world(), shared, &step, from, sizeof from, lvl);
    if (st == DDL_OK)
        st = ddl_ckpt_read(from, step, rank, "model", r, n, NULL);
    double t = now_ms() - t0;
    expect(st, DDL_OK, "restore");
    check(step == want, "the restored step is the newest");
    unsigned char *b = malloc(n);
    fill(b, n, want, rank);
    check(b && !memcmp(b, r, n), "the restored data is what was written");
    free(b);
    double mx = 0;
    ddl_allreduce(ddl_comm_world(), &t, &mx, 1, DDL_FLOAT64, DDL_MAX);
    return mx;
}

#define RESTORES 5 /* restores of each level, alternating (levels) */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void levels_mode(const char *dir, long mib, const char *shared_dir)
{
    char shared[PATH_MAX], local[PATH_MAX], lost[PATH_MAX], cmd[PATH_MAX + 16];
    size_t n = (size_t)mib << 20;
    unsigned char *b = malloc(n), *r = malloc(n);
    ddl_ckpt_t *ck;
    int reps = 3, lvl = 0;
    double sync_ms = 0, local_ms = 0, begin_ms = 0;
    if (shared_dir)
        snprintf(shared, sizeof shared, "%s", shared_dir);
    else
        snprintf(shared, sizeof shared, "%s/shared", dir);
    snprintf(local, sizeof local, "%s/local/node-%%n", dir);
    snprintf(lost, sizeof lost, "%s/local/node-1", dir);
    if (!b || !r) {
        check(0, "allocate the buffers");
        return;
    }
    memset(r, 0, n); /* both restores read into touched memory, as training would */
    /* the shared level, synchronous: what the node-local level must beat */
    unsetenv("DDL_CKPT_LOCAL_DIR");
    for (int i = 0; i < reps; i++) {
        fill(b, n, 1 + i, rank);
        ddl_barrier(ddl_comm_world());
        double t0 = now_ms();
        ddl_status_t st = ddl_ckpt_begin(ddl_comm_world(), shared, 1 + i, 2, 0, &ck);
        if (st == DDL_OK)
            st = ddl_ckpt_write(ck, "model", b, n);
        if (st == DDL_OK)
            st = ddl_ckpt_commit(ck);
        sync_ms += now_ms() - t0;
        expect(st, DDL_OK, "sync shared checkpoint");
    }
    /* the node-local level with partner copies, async, never shared */
    setenv("DDL_CKPT_LOCAL_DIR", local, 1);
    setenv("DDL_CKPT_SHARED_EVERY", "0", 1);
    for (int i = 0; i <= reps; i++) {
        long step = 1 + reps + i;
        fill(b, n, step, rank);
        ddl_barrier(ddl_comm_world());
        double t0 = now_ms();
        ddl_status_t st = ddl_ckpt_begin(ddl_comm_world(), shared, step, 2, DDL_CKPT_ASYNC, &ck);
        double t1 = now_ms();
        if (st == DDL_OK)
            st = ddl_ckpt_write(ck, "model", b, n);
        if (st == DDL_OK)
            st = ddl_ckpt_commit(ck);
        double t2 = now_ms();
        expect(st, DDL_OK, "async node-local checkpoint");
        if (i > 0) { /* the first copies into fresh memory */
            local_ms += t2 - t0;
            begin_ms += t1 - t0;
        }
        memset(b, 0x5a, n);
        /* training: the background write goes on (here every "node" shares one
         * disk, and the level writes twice the bytes: a few times the
         * synchronous write's time) */
        usleep((useconds_t)(1000.0 * (2000.0 + 4.0 * sync_ms / reps)));
    }
    int64_t s = -1;
    expect(ddl_ckpt_wait(&s), DDL_OK, "the last node-local checkpoint commits");
    long last = 1 + 2 * reps;
    sync_ms /= reps;
    local_ms /= reps;
    begin_ms /= reps;
    printf("rank %d: %ld MiB per rank: blocked per checkpoint: shared sync %.1f ms, node-local "
           "+ partner async %.1f ms (%.1f%%; of which the begin, with the partner copy, %.1f "
           "ms)\n", rank, mib, sync_ms, local_ms, 100.0 * local_ms / (sync_ms > 0 ? sync_ms : 1),
           begin_ms);
    /* restores, alternating: after node 1 is lost (its directory deleted),
     * and from the shared directory (its newest step, without the
     * node-local level); each with the page cache dropped */
    double partner[RESTORES], shr[RESTORES], ratio[RESTORES];
    for (int k = 0; k < RESTORES; k++) {
        setenv("DDL_CKPT_LOCAL_DIR", local, 1);
        drop(dir, shared_dir);
        if (rank == 0) {
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", lost);
            check(system(cmd) == 0, "node 1's directory deleted");
        }
        partner[k] = restore_ms(shared, r, n, last, &lvl);
        unsetenv("DDL_CKPT_LOCAL_DIR");
        drop(dir, shared_dir);
        shr[k] = restore_ms(shared, r, n, reps, &lvl);
        ratio[k] = partner[k] > 0 ? shr[k] / partner[k] : 0;
    }
    qsort(partner, RESTORES, sizeof partner[0], cmp_double);
    qsort(shr, RESTORES, sizeof shr[0], cmp_double);
    qsort(ratio, RESTORES, sizeof ratio[0], cmp_double);
    if (rank == 0)
        printf("%ld MiB per rank: restore (slowest rank, cold cache, median of %d, min-max): "
               "node-local + partner copies %.1f ms (%.1f-%.1f), shared directory %.1f ms "
               "(%.1f-%.1f), ratio %.2fx (%.2f-%.2f)\n", mib, RESTORES, partner[RESTORES / 2],
               partner[0], partner[RESTORES - 1], shr[RESTORES / 2], shr[0],
               shr[RESTORES - 1], ratio[RESTORES / 2], ratio[0], ratio[RESTORES - 1]);
    free(b);
    free(r);
}

/* storecrash_mode: see the top.  Ranks [0, size/2) are node 0; rank size/2
 * is the first of node 1. */
static void storecrash_mode(const char *dir, long phase)
{
    char local[PATH_MAX], own[PATH_MAX + 64], from[PATH_MAX];
    const int half = size / 2;
    const size_t n = 4u << 20;
    unsigned char *b = malloc(n), *r = malloc(n);
    ddl_ckpt_t *ck;
    int64_t rs = -1;
    int lvl = -1;
    if (size < 2 || size % 2 || !b || !r) {
        check(0, "an even number of ranks on 2 nodes, and the buffers");
        goto out;
    }
    snprintf(local, sizeof local, "%s/local/node-%%n", dir);
    snprintf(own, sizeof own, "%s/local/node-%d/step-00000001/rank-%d.shard", dir,
             rank < half ? 0 : 1, rank);
    setenv("DDL_CKPT_LOCAL_DIR", local, 1);
    setenv("DDL_CKPT_SHARED_EVERY", "0", 1);
    fill(b, n, 1, rank);
    if (phase == 1) {
        ddl_status_t st = ddl_ckpt_begin(ddl_comm_world(), dir, 1, 2, DDL_CKPT_ASYNC, &ck);
        expect(st, DDL_OK, "step 1 begins");
        if (st != DDL_OK)
            goto out;
        expect(ddl_ckpt_write(ck, "model", b, n), DDL_OK, "step 1 copied");
        expect(ddl_ckpt_commit(ck), DDL_OK, "step 1 committed");
        int64_t s = -1;
        expect(ddl_ckpt_wait(&s), DDL_OK, "step 1 commits at ddl_ckpt_wait");
        if (rank >= half)
            check(unlink(own) == 0, "node 1: its own shard file of step 1 removed");
        if (rank == half) /* exits halfway through storing the copy it receives */
            setenv("DDL_CKPT_FAULT", "store", 1);
        ddl_barrier(ddl_comm_world());
        expect(ddl_ckpt_restore(ddl_comm_world(), dir, &rs, from, sizeof from, &lvl), DDL_OK,
               "step 1 restored");
        goto out; /* ddl_finalize() waits for the store: rank size/2 exits 1 there */
    }
    if (rank == half) {
        char tmpl[PATH_MAX + 80];
        glob_t g;
        snprintf(tmpl, sizeof tmpl, "%s.tmp.*", own);
        check(access(own, F_OK) != 0 && errno == ENOENT,
              "node 1: no shard of this rank under its name after the crash in its store");
        check(glob(tmpl, 0, NULL, &g) == 0 && g.gl_pathc == 1,
              "... only the temporary file the crash left");
        globfree(&g);
    }
    if (rank == half) /* the program reads every buffer before the store has begun */
        setenv("DDL_CKPT_FAULT", "slowstore", 1);
    ddl_barrier(ddl_comm_world());
    expect(ddl_ckpt_restore(ddl_comm_world(), dir, &rs, from, sizeof from, &lvl), DDL_OK,
           "step 1 restored again");
    if (rank == half)
        check(rs == 1 && lvl == DDL_CKPT_LEVEL_PARTNER, "node 1: from the partner copy again");
    memset(r, 0, n);
    expect(ddl_ckpt_read(from, 1, rank, "model", r, n, NULL), DDL_OK, "... and read");
    check(!memcmp(b, r, n), "... with this rank's bytes");
    /* the next restore waits for that store: the copy is then whole on node 1 */
    ddl_barrier(ddl_comm_world());
    expect(ddl_ckpt_restore(ddl_comm_world(), dir, &rs, from, sizeof from, &lvl), DDL_OK,
           "step 1 restored a third time");
    check(rs == 1 && lvl == DDL_CKPT_LEVEL_LOCAL, "... from this rank's own node");
    memset(r, 0, n);
    expect(ddl_ckpt_read(from, 1, rank, "model", r, n, NULL), DDL_OK, "... and read");
    check(!memcmp(b, r, n), "... with this rank's bytes");
out:
    free(b);
    free(r);
}

/* partner_mode: see the top.  Ranks [0, size/2) are node 0. */
static void partner_mode(const char *dir)
{
    char local[PATH_MAX], mine[PATH_MAX], mark[PATH_MAX + 32];
    const int half = size / 2, peer = (rank + half) % size;
    const size_t n = 20u << 20; /* 3 pieces of a partner copy on restore (8 MiB each, the last
                                   one short), each large enough for UCX's rendezvous */
    unsigned char *b = malloc(n), *r = malloc(n);
    ddl_ckpt_t *ck;
    if (size < 2 || size % 2 || !b || !r) {
        check(0, "an even number of ranks on 2 nodes, and the buffers");
        return;
    }
    snprintf(local, sizeof local, "%s/local/node-%%n", dir);
    snprintf(mine, sizeof mine, "%s/local/node-%d", dir, rank < half ? 0 : 1);
    setenv("DDL_CKPT_LOCAL_DIR", local, 1);
    setenv("DDL_CKPT_SHARED_EVERY", "0", 1);
    fill(b, n, 1, rank);
    ddl_status_t st = ddl_ckpt_begin(ddl_comm_world(), dir, 1, 2, DDL_CKPT_ASYNC, &ck);
    expect(st, DDL_OK, "step 1 begins");
    if (st != DDL_OK)
        return;
    expect(ddl_ckpt_write(ck, "model", b, n), DDL_OK, "step 1 copied");
    if (rank < half) {
        expect(ddl_ckpt_commit(ck), DDL_OK, "node 0: step 1's commit returns before the "
               "partner's");
        snprintf(mark, sizeof mark, "%s/committed-%d", dir, rank);
        FILE *f = fopen(mark, "w");
        check(f != NULL, "node 0: marker written");
        if (f)
            fclose(f);
    } else {
        int seen = 0;
        for (int i = 0; i < 600 && seen < half; i++) { /* at most 30 s */
            seen = 0;
            for (int q = 0; q < half; q++) {
                snprintf(mark, sizeof mark, "%s/committed-%d", dir, q);
                seen += access(mark, F_OK) == 0;
            }
            if (seen < half)
                usleep(50000);
        }
        check(seen == half, "node 1: every rank of node 0 returned from its commit first");
        expect(ddl_ckpt_commit(ck), DDL_OK, "node 1: step 1's commit");
    }
    int64_t s = -1;
    expect(ddl_ckpt_wait(&s), DDL_OK, "step 1 commits at ddl_ckpt_wait");
    memset(r, 0, n);
    fill(b, n, 1, peer);
    st = ddl_ckpt_read(mine, 1, peer, "model", r, n, NULL);
    expect(st, DDL_OK, "the partner's copy is in this node's directory");
    check(st == DDL_OK && !memcmp(b, r, n), "... with the partner's bytes");
    /* a restore after node 1 lost its own shards: node 0's ranks find
     * theirs, node 1's get the partner copies; each rank's shard was checked
     * in full and ddl_ckpt_read() copies it from memory (the file is removed
     * before the read), until every buffer was read once */
    char own[PATH_MAX + 64], from[PATH_MAX];
    int64_t rs = -1;
    int lvl = -1;
    snprintf(own, sizeof own, "%s/step-00000001/rank-%d.shard", mine, rank);
    if (rank >= half)
        check(unlink(own) == 0, "node 1: its own shard file of step 1 removed");
    ddl_barrier(ddl_comm_world());
    expect(ddl_ckpt_restore(ddl_comm_world(), dir, &rs, from, sizeof from, &lvl), DDL_OK,
           "step 1 restored");
    check(rs == 1 && lvl == (rank < half ? DDL_CKPT_LEVEL_LOCAL : DDL_CKPT_LEVEL_PARTNER),
          rank < half ? "... from this node's directory" : "... from the partner copy");
    if (rank >= half) { /* the received copy is stored in the background */
        char copy[PATH_MAX + 64];
        struct stat a, c;
        int stored = 0;
        snprintf(copy, sizeof copy, "%s/local/node-0/step-00000001/rank-%d.shard", dir, rank);
        for (int i = 0; i < 200 && !stored; i++) { /* at most 10 s */
            stored = stat(own, &a) == 0 && stat(copy, &c) == 0 && a.st_size == c.st_size;
            if (!stored)
                usleep(50000);
        }
        check(stored, "node 1: the partner copy is stored in its directory after the restore");
    }
    check(unlink(own) == 0, "... its shard file removed after the restore");
    size_t sz = 0;
    expect(ddl_ckpt_read(from, 1, rank, "model", NULL, 0, &sz), DDL_OK, "the size, from memory");
    check(sz == n, "... of the whole buffer");
    expect(ddl_ckpt_read(from, 1, rank, "nosuch", r, n, NULL), DDL_ERR_INVALID,
           "a name the shard does not hold");
    expect(ddl_ckpt_read(from, 1, rank, "model", r, n - 1, NULL), DDL_ERR_INVALID,
           "a destination of the wrong size");
    memset(r, 0, n);
    fill(b, n, 1, rank);
    expect(ddl_ckpt_read(from, 1, rank, "model", r, n, NULL), DDL_OK,
           "the buffer, from memory (its file is gone)");
    check(!memcmp(b, r, n), "... with this rank's bytes");
    expect(ddl_ckpt_read(from, 1, rank, "model", r, n, NULL), DDL_ERR_IO,
           "read again: every buffer was read, the memory is released, the file is gone");
    /* rank 0's own copy back, of the right size but damaged (found only when
     * it is read in full, after the first exchange): node 1's copy of it is
     * sent in a second one; the others' own files are gone (above): their
     * partners' copies */
    if (rank == 0) {
        char theirs[PATH_MAX + 64];
        snprintf(theirs, sizeof theirs, "%s/local/node-1/step-00000001/rank-0.shard", dir);
        struct stat sb;
        FILE *in = fopen(theirs, "rb"), *out = fopen(own, "wb");
        size_t len = in && fstat(fileno(in), &sb) == 0 ? (size_t)sb.st_size : 0;
        unsigned char *img = len > 64 ? malloc(len) : NULL;
        int ok = img && fread(img, 1, len, in) == len;
        if (ok)
            img[len / 2] ^= 0x40; /* a flipped bit in the data */
        check(ok && out && fwrite(img, 1, len, out) == len,
              "rank 0: its own shard of step 1 written again, one bit flipped");
        free(img);
        if (in)
            fclose(in);
        if (out)
            fclose(out);
    }
    ddl_barrier(ddl_comm_world());
    rs = -1, lvl = -1;
    expect(ddl_ckpt_restore(ddl_comm_world(), dir, &rs, from, sizeof from, &lvl), DDL_OK,
           "step 1 restored again");
    check(rs == 1 && lvl == DDL_CKPT_LEVEL_PARTNER, "... every rank from a partner copy (rank 0: "
          "its own copy is damaged)");
    memset(r, 0, n);
    expect(ddl_ckpt_read(from, 1, rank, "model", r, n, NULL), DDL_OK, "... and read");
    check(!memcmp(b, r, n), "... with this rank's bytes");
    /* step 2: node 1 never commits, every rank aborts the world */
    fill(b, n, 2, rank);
    st = ddl_ckpt_begin(ddl_comm_world(), dir, 2, 2, DDL_CKPT_ASYNC, &ck);
    expect(st, DDL_OK, "step 2 begins");
    if (st != DDL_OK)
        return;
    expect(ddl_ckpt_write(ck, "model", b, n), DDL_OK, "step 2 copied");
    if (rank < half) {
        expect(ddl_ckpt_commit(ck), DDL_OK, "node 0: step 2's commit returns");
        usleep(300000); /* its transfer waits for node 1 meanwhile */
    } else {
        ddl_ckpt_abort(ck);
    }
    ddl_comm_abort(ddl_comm_world(), "ckpt-check: node 1 gives up step 2");
    double t0 = now_ms();
    st = ddl_ckpt_wait(&s);
    if (rank < half) {
        check(st != DDL_OK, "node 0: step 2 fails at ddl_ckpt_wait: the transfer gave up");
        printf("rank %d: step 2: %s (%s), after %.0f ms\n", rank, ddl_status_str(st),
               ddl_last_error(), now_ms() - t0);
    }
    int64_t l = -1;
    check(ddl_ckpt_latest(mine, &l) == DDL_OK && l == 1, "step 1 stays latest on this node");
    free(b);
    free(r);
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "commit") != 0 && strcmp(argv[1], "partner") != 0 &&
                     argc < 4)) {
        fprintf(stderr, "usage: ckpt-check commit DIR | kill DIR K | verify DIR STEP | "
                "async DIR MIB | levels DIR MIB [SHARED] | partner DIR | storecrash DIR 1|2\n");
        return 2;
    }
    const char *mode = argv[1], *dir = argv[2];
    long arg = argc > 3 ? atol(argv[3]) : 0;
    if (strcmp(mode, "commit") && strcmp(mode, "kill") && strcmp(mode, "verify") &&
        strcmp(mode, "async") && strcmp(mode, "levels") && strcmp(mode, "partner") &&
        strcmp(mode, "storecrash")) {
        fprintf(stderr, "ckpt-check: unknown mode '%s'\n", mode);
        return 2;
    }
    if (ddl_init() != DDL_OK) {
        fprintf(stderr, "ddl_init: %s\n", ddl_last_error());
        return 1;
    }
    rank = ddl_rank();
    check_rank = rank;
    size = ddl_size();
    if (!strcmp(mode, "commit"))
        commit_mode(dir);
    else if (!strcmp(mode, "kill"))
        kill_mode(dir, arg);
    else if (!strcmp(mode, "verify"))
        verify_mode(dir, arg);
    else if (!strcmp(mode, "levels"))
        levels_mode(dir, arg, argc > 4 ? argv[4] : NULL);
    else if (!strcmp(mode, "partner"))
        partner_mode(dir);
    else if (!strcmp(mode, "storecrash"))
        storecrash_mode(dir, arg);
    else
        async_mode(dir, arg);
    if (strcmp(mode, "async") != 0)
        ddl_finalize();
    return check_failures ? 1 : 0;
}
