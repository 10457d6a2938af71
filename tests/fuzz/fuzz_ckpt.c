/* fuzz_ckpt.c: libFuzzer target for libddl's checkpoint reader
 * (collectives/checkpoint.c): ddl_ckpt_latest and ddl_ckpt_read, which
 * parse DIR/latest, a step's MANIFEST and a rank's shard from disk (files
 * that a crash, a full disk or another program may have left in any state).
 *
 * Input: a flags byte, then DIR/latest, "\n--\n", the MANIFEST, "\n--\n",
 * the shard (the rest).  The files are written under a temporary directory
 * and read back by the real code.  Checksums would stop almost every
 * mutation at the first check, so the flags ask this harness to fix some
 * up first, so that the parsers behind them are reached too:
 *   bit 0: append the MANIFEST's right "crc32c 0x..." line
 *   bit 1: make the shard's header, record data CRCs and trailer (count and
 *          CRC) right where its record structure allows, and write a
 *          MANIFEST of world 1 or 2 that matches it (instead of the input's)
 *   bit 2: the shard is rank 1's (else rank 0's)
 * libddl's collectives are not linked: the reader needs none (stubs below
 * abort if called). */
#include "config.h"

#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "ddl_int.h"

#define SEP "\n--\n"
#define SHARD_HDR 32
#define REC_HDR 16
#define TRAILER 16

/* ---- what checkpoint.c uses from the rest of libddl, never on the read path */
ddl_ctx_t ddl_ctx;
ddl_status_t ddl_allgather(ddl_comm_t *comm, const void *sendbuf, void *recvbuf, size_t sendcount,
                           ddl_dtype_t dtype)
{
    (void)comm, (void)sendbuf, (void)recvbuf, (void)sendcount, (void)dtype;
    abort();
}
ddl_status_t ddl_bcast(ddl_comm_t *comm, void *buf, size_t count, ddl_dtype_t dtype, int root)
{
    (void)comm, (void)buf, (void)count, (void)dtype, (void)root;
    abort();
}
ddl_status_t ddl_barrier(ddl_comm_t *comm)
{
    (void)comm;
    abort();
}
ddl_status_t ddl_tl_waitall(ddl_comm_t *comm, void **reqs, int n)
{
    (void)comm, (void)reqs, (void)n;
    abort();
}
void ddl_tl_abandon(ddl_comm_t *comm, void **reqs, int n)
{
    (void)comm, (void)reqs, (void)n;
    abort();
}
ddl_status_t ddl_tl_waitall_bg(ddl_comm_t *comm, void **reqs, int n, atomic_int *cancel)
{
    (void)comm, (void)reqs, (void)n, (void)cancel;
    abort();
}
int ddl_is_aborted(ddl_comm_t *comm)
{
    (void)comm;
    abort();
}
int ddl_stop_returned;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[] = "/tmp/ddl-fuzz-ckpt.XXXXXX";
static char stepdir[PATH_MAX];

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p)
{
    return get32(p) | (uint64_t)get32(p + 4) << 32;
}
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        abort();
    if (n && fwrite(p, 1, n, f) != n)
        abort();
    if (fclose(f) != 0)
        abort();
}

static void clear_dir(void)
{
    char path[PATH_MAX + 32];
    static const char *const files[] = {"MANIFEST", "rank-0.shard", "rank-1.shard"};
    if (stepdir[0]) {
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            snprintf(path, sizeof path, "%s/%s", stepdir, files[i]);
            unlink(path);
        }
        rmdir(stepdir);
        stepdir[0] = '\0';
    }
    snprintf(path, sizeof path, "%s/latest", dir);
    unlink(path);
}

static void remove_dir(void)
{
    clear_dir();
    rmdir(dir);
}

/* fix_shard: the shard's CRCs and counts as the writer would make them;
 * returns its CRC. */
static uint32_t fix_shard(uint8_t *s, size_t n, int rank, int64_t step)
{
    if (n < SHARD_HDR + TRAILER)
        return 0;
    memcpy(s, "DDLSHRD1", 8);
    put32(s + 8, 1);
    put32(s + 12, (uint32_t)rank);
    put64(s + 16, (uint64_t)step);
    uint32_t crc = ddl_crc32c(0, s, SHARD_HDR), nrec = 0;
    uint64_t off = SHARD_HDR;
    while (off + TRAILER < n) {
        if (off + REC_HDR + TRAILER > n)
            break;
        uint32_t nlen = get32(s + off);
        uint64_t len = get64(s + off + 8);
        if (nlen == 0 || nlen > DDL_CKPT_NAME_MAX || off + REC_HDR + nlen + TRAILER > n ||
            len > n - off - REC_HDR - nlen - TRAILER)
            break;
        put32(s + off + 4, ddl_crc32c(0, s + off + REC_HDR + nlen, (size_t)len));
        crc = ddl_crc32c(crc, s + off, REC_HDR + nlen);
        off += REC_HDR + nlen + len;
        nrec++;
    }
    if (off + TRAILER == n) {
        memcpy(s + off, "DDLTRAIL", 8);
        put32(s + off + 8, nrec);
        crc = ddl_crc32c(crc, s + off, 12);
        put32(s + off + 12, crc);
    }
    return crc;
}

/* read_all: every way a program reads rank's buffer name back. */
static void read_all(int64_t step, int rank, const char *name)
{
    size_t got = 0;
    if (ddl_ckpt_read(dir, step, rank, name, NULL, 0, &got) != DDL_OK || got > (1u << 20)) {
        if (getenv("FUZZ_DEBUG"))
            fprintf(stderr, "%s\n", ddl_last_error());
        return;
    }
    char *buf = malloc(got ? got : 1);
    if (!buf)
        return;
    if (ddl_ckpt_read(dir, step, rank, name, buf, got, NULL) == DDL_OK)
        (void)ddl_crc32c(0, buf, got); /* reads every byte: uninitialised data shows */
    (void)ddl_ckpt_read(dir, step, rank, name, buf, got ? got - 1 : 0, NULL);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[PATH_MAX + 32];
    static int made;
    if (!made) {
        if (!mkdtemp(dir))
            abort();
        made = 1;
        atexit(remove_dir);
    }
    if (size < 1)
        return 0;
    unsigned flags = data[0];
    const char *in = (const char *)data + 1, *end = (const char *)data + size;
    const char *s1 = memmem(in, (size_t)(end - in), SEP, strlen(SEP));
    if (!s1)
        return 0;
    const char *man = s1 + strlen(SEP);
    const char *s2 = memmem(man, (size_t)(end - man), SEP, strlen(SEP));
    if (!s2)
        return 0;
    const char *shard_in = s2 + strlen(SEP);
    size_t latest_len = (size_t)(s1 - in), man_len = (size_t)(s2 - man);
    size_t shard_len = (size_t)(end - shard_in);
    int rank = flags & 4 ? 1 : 0;

    clear_dir();
    /* the step directory named as the reader will look for it */
    char num[32];
    snprintf(num, sizeof num, "%.*s", (int)(latest_len < 31 ? latest_len : 31), in);
    long long step = strtoll(num, NULL, 10);
    if (step < 0 || step > 99999999999LL)
        step = 0;
    snprintf(stepdir, sizeof stepdir, "%s/step-%08lld", dir, step);
    if (mkdir(stepdir, 0700) < 0)
        abort();
    snprintf(path, sizeof path, "%s/latest", dir);
    write_file(path, in, latest_len);

    uint8_t *shard = malloc(shard_len ? shard_len : 1);
    char *mtext = malloc(man_len + 600);
    if (!shard || !mtext)
        abort();
    memcpy(shard, shard_in, shard_len);
    size_t mlen = man_len;
    memcpy(mtext, man, man_len);
    if (flags & 2) {
        uint32_t crc = fix_shard(shard, shard_len, rank, step);
        int world = rank + 1, n = 0;
        n += snprintf(mtext + n, 600 - (size_t)n, "ddl-checkpoint 1\nstep %lld\nworld %d\n", step,
                      world);
        for (int r = 0; r < world; r++)
            n += snprintf(mtext + n, 600 - (size_t)n, "shard %d %zu 0x%08x\n", r, shard_len, crc);
        mlen = (size_t)n;
    }
    if (flags & 3)
        mlen += (size_t)snprintf(mtext + mlen, 40, "crc32c 0x%08x\n", ddl_crc32c(0, mtext, mlen));
    snprintf(path, sizeof path, "%s/MANIFEST", stepdir);
    write_file(path, mtext, mlen);
    snprintf(path, sizeof path, "%s/rank-%d.shard", stepdir, rank);
    write_file(path, shard, shard_len);

    int64_t latest;
    (void)ddl_ckpt_latest(dir, &latest);
    /* each name the shard's records carry (up to 4), and one it lacks */
    uint64_t off = SHARD_HDR;
    for (int i = 0; i < 4 && off + REC_HDR <= shard_len; i++) {
        uint32_t nlen = get32(shard + off);
        uint64_t len = get64(shard + off + 8);
        if (nlen == 0 || nlen > DDL_CKPT_NAME_MAX || nlen > shard_len - off - REC_HDR)
            break;
        char name[DDL_CKPT_NAME_MAX + 1];
        memcpy(name, shard + off + REC_HDR, nlen);
        name[nlen] = '\0';
        read_all(step, rank, name);
        if (len > shard_len - off - REC_HDR - nlen)
            break;
        off += REC_HDR + nlen + len;
    }
    read_all(step, rank, "no such buffer");
    read_all(step, rank + 1, "x");
    free(shard);
    free(mtext);
    return 0;
}
