/* checkpoint.c: libddl's checkpoints (ddl.h, "checkpoints").  Every rank
 * writes its named buffers to DIR/step-NNNNNNNN/rank-R.shard and fsyncs it;
 * the commit exchanges every rank's result, and only when all succeeded
 * rank 0 writes MANIFEST and moves DIR/latest, each through a temporary
 * name, fsync, rename and a directory fsync.  Async mode writes the shard
 * in a background thread and commits at the next wait/begin/finalize.
 *
 * Shard file (integers little-endian):
 *   header  "DDLSHRD1", u32 version (1), u32 rank, u64 step, u64 0
 *   records u32 name length, u32 CRC-32C of the data, u64 data length,
 *           name bytes, data bytes
 *   trailer "DDLTRAIL", u32 record count, u32 shard CRC-32C over the header,
 *           every record header and name, and the trailer's first 12 bytes
 * MANIFEST (text): "ddl-checkpoint 1", "step S", "world N", one
 * "shard R SIZE 0xCRC" line per rank, and "crc32c 0xC" over the lines
 * before it.  latest (text): the step number and a newline.
 *
 * Every rank opens DIR once (ddl_dir_open: owned by the user, writable by
 * nobody else) and works relative to that descriptor with O_NOFOLLOW:
 * directories are made 0700, files 0600, temporary files get unpredictable
 * names, and cleanup never follows a symbolic link.
 *
 * Over 1000 lines in one file on purpose: the writer, the commit protocol,
 * the async thread, the reader and the cleanup share the shard format and
 * the directory descriptors; one file keeps the format in one place.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "ddl_int.h"
#include "log.h"
#include "safefile.h"

#define SHARD_MAGIC "DDLSHRD1"
#define TRAIL_MAGIC "DDLTRAIL"
#define SHARD_VERSION 1
#define HDR_BYTES 32
#define REC_BYTES 16
#define TRAIL_BYTES 16
#define MANIFEST_MAGIC "ddl-checkpoint 1"
#define ERR_TEXT 400
#define F_WRITE 1u
#define F_FSYNC 2u
#define F_RENAME 4u

typedef struct {
    char *name;
    void *data;
    size_t len, cap;
} rec_t;

struct ddl_ckpt {
    ddl_comm_t *comm;
    int rank, size;
    int64_t step;
    int keep;
    unsigned flags;
    char dir[PATH_MAX];
    char stepdir[PATH_MAX];
    char path[PATH_MAX]; /* this rank's shard */
    char stepname[32];   /* step-NNNNNNNN */
    char shardname[32];  /* rank-R.shard */
    int dirfd, stepfd;   /* DIR and DIR/step-NNNNNNNN, or -1 */
    int fd;
    uint64_t off;  /* bytes written to the shard */
    uint32_t crc;  /* running shard CRC */
    uint32_t nrec;
    char **names;  /* names written so far, for the duplicate check */
    rec_t *recs;   /* async: the copies to write */
    size_t n, cap;
    unsigned faults;  /* DDL_CKPT_FAULT for this rank, read at begin (F_*) */
    ddl_status_t err; /* first failure on this rank */
    char errtext[ERR_TEXT];
    pthread_t thread;
    int thread_started;
};

/* The async checkpoint whose commit is pending (one per process). */
static ddl_ckpt_t *pending;

/* The copy buffers of the last completed async checkpoint, kept for the
 * next one: touching fresh pages costs far more than the copy itself (a
 * 64 MiB copy measured 200-340 ms into new memory, 4-7 ms into reused
 * memory).  Only the collectives thread uses the pool. */
typedef struct {
    void *p;
    size_t cap;
} buf_t;
static buf_t *pool;
static size_t npool;

/* pool_take: the smallest pooled buffer of at least bytes, or a new one. */
static void *pool_take(size_t bytes, size_t *cap)
{
    size_t best = npool;
    for (size_t i = 0; i < npool; i++)
        if (pool[i].cap >= bytes && (best == npool || pool[i].cap < pool[best].cap))
            best = i;
    if (best < npool) {
        void *p = pool[best].p;
        *cap = pool[best].cap;
        pool[best] = pool[--npool];
        return p;
    }
    *cap = bytes ? bytes : 1;
    return malloc(*cap);
}

static void pool_clear(void)
{
    for (size_t i = 0; i < npool; i++)
        free(pool[i].p);
    free(pool);
    pool = NULL;
    npool = 0;
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* textf: snprintf into a fixed buffer where a cut text is acceptable (error
 * messages) or impossible (paths whose length was checked). */
static void textf(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void textf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

/* fault: DDL_CKPT_FAULT names this step (and this rank, or every rank). */
static int fault(const char *kind, int rank)
{
    const char *v = getenv("DDL_CKPT_FAULT");
    size_t k = strlen(kind);
    if (!v || strncmp(v, kind, k) != 0)
        return 0;
    if (v[k] == '\0')
        return 1;
    return v[k] == ':' && atoi(v + k + 1) == rank;
}

/* ck_fail: record the first failure of this rank's part of the checkpoint. */
static void ck_fail(ddl_ckpt_t *ck, ddl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void ck_fail(ddl_ckpt_t *ck, ddl_status_t st, const char *fmt, ...)
{
    va_list ap;
    if (ck->err != DDL_OK)
        return;
    ck->err = st;
    va_start(ap, fmt);
    vsnprintf(ck->errtext, sizeof ck->errtext, fmt, ap);
    va_end(ap);
}

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len > (1u << 30) ? (1u << 30) : len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* read_at: exactly len bytes at off; -1 with errno, or -2 at end of file. */
static int read_at(int fd, void *buf, size_t len, uint64_t off)
{
    char *p = buf;
    while (len > 0) {
        ssize_t r = pread(fd, p, len, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            return -2;
        p += r;
        len -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static int step_path(char *buf, size_t len, const char *dir, int64_t step, const char *file)
{
    if (strlen(dir) + (file ? strlen(file) : 0) + 32 > len)
        return -1;
    if (file)
        textf(buf, len, "%s/step-%08" PRId64 "/%s", dir, step, file);
    else
        textf(buf, len, "%s/step-%08" PRId64, dir, step);
    return 0;
}

/* write_file_atomic: a fresh NAME.tmp.XXXXXXXXXXXX in dfd (mode 0600, no
 * link followed), fsync, renamed to name, fsync of dfd.  errors: -1 with
 * errno, *what naming the failing step and tmp the temporary name. */
static int write_file_atomic(int dfd, const char *name, const char *text, int rename_fault,
                             const char **what, char *tmp, size_t tmplen)
{
    char prefix[64];
    textf(prefix, sizeof prefix, "%s.tmp", name);
    textf(tmp, tmplen, "%s", prefix);
    *what = "create";
    int fd = ddl_tmp_openat(dfd, prefix, tmp, tmplen);
    if (fd < 0)
        return -1;
    *what = "write";
    if (write_all(fd, text, strlen(text)) < 0)
        goto fail;
    *what = "fsync";
    if (fsync(fd) < 0)
        goto fail;
    close(fd);
    fd = -1;
    *what = "rename";
    if (rename_fault) {
        errno = EIO;
        goto fail;
    }
    if (renameat(dfd, tmp, dfd, name) < 0)
        goto fail;
    *what = "fsync the directory of";
    return fsync(dfd);
fail:;
    int e = errno;
    if (fd >= 0)
        close(fd);
    unlinkat(dfd, tmp, 0);
    errno = e;
    return -1;
}

/* ---- reading the latest pointer and manifests ---- */

/* read_small: a whole small file into a NUL-terminated malloc'd buffer. */
static char *read_small(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 == cap) {
            char *nb = cap < (64u << 20) ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                free(buf);
                buf = NULL;
                errno = EFBIG;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            buf = NULL;
            errno = e;
            break;
        }
        if (r == 0) {
            buf[n] = '\0';
            *len = n;
            break;
        }
        n += (size_t)r;
    }
    int e = errno;
    close(fd);
    errno = e;
    return buf;
}

/* latest_step: *step from dir/latest, -1 if there is none.  With a failure,
 * the detail is set with ddl_fail(). */
static ddl_status_t latest_step(const char *dir, int64_t *step)
{
    char path[PATH_MAX], *end;
    size_t len;
    *step = -1;
    if (snprintf(path, sizeof path, "%s/latest", dir) >= (int)sizeof path)
        return ddl_fail(DDL_ERR_INVALID, "checkpoint directory path '%s' is too long", dir);
    char *text = read_small(path, &len);
    if (!text) {
        if (errno == ENOENT || errno == ENOTDIR)
            return DDL_OK;
        return ddl_fail(DDL_ERR_IO, "cannot read %s: %s (errno %d): fix its permissions",
                        path, strerror(errno), errno);
    }
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || v < 0 || strcmp(end, "\n") != 0) {
        ddl_status_t st = ddl_fail(DDL_ERR_IO, "%s holds '%.40s', not a step number: it was not "
                                   "written by ddl; remove it", path, text);
        free(text);
        return st;
    }
    free(text);
    *step = v;
    return DDL_OK;
}

typedef struct {
    int64_t step;
    int world;
    uint64_t *size;
    uint32_t *crc;
} manifest_t;

/* read_manifest: parse and check step's MANIFEST.  DDL_ERR_INVALID when
 * the step is not committed, DDL_ERR_IO when the manifest is damaged. */
static ddl_status_t read_manifest(const char *dir, int64_t step, manifest_t *m)
{
    char path[PATH_MAX];
    size_t len;
    memset(m, 0, sizeof *m);
    if (step_path(path, sizeof path, dir, step, "MANIFEST") < 0)
        return ddl_fail(DDL_ERR_INVALID, "checkpoint directory path '%s' is too long", dir);
    char *text = read_small(path, &len);
    if (!text) {
        if (errno == ENOENT || errno == ENOTDIR)
            return ddl_fail(DDL_ERR_INVALID, "step %" PRId64 " is not a committed checkpoint in "
                            "%s (no %s): use ddl_ckpt_latest()", step, dir, path);
        return ddl_fail(DDL_ERR_IO, "cannot read %s: %s (errno %d)", path, strerror(errno),
                        errno);
    }
    ddl_status_t st = DDL_ERR_IO;
    char *last = len > 1 ? memrchr(text, '\n', len - 1) : NULL;
    unsigned crc;
    long long s;
    int world, pos;
    if (!last || sscanf(last + 1, "crc32c 0x%x", &crc) != 1 ||
        ddl_crc32c(0, text, (size_t)(last + 1 - text)) != crc) {
        st = ddl_fail(DDL_ERR_IO, "%s fails its checksum: the checkpoint of step %" PRId64
                      " is damaged; restart from an earlier step", path, step);
        goto out;
    }
    if (sscanf(text, MANIFEST_MAGIC "\nstep %lld\nworld %d\n%n", &s, &world, &pos) != 2 ||
        s != step || world < 1 || world > 0xffffff) {
        st = ddl_fail(DDL_ERR_IO, "%s is not a ddl manifest of step %" PRId64, path, step);
        goto out;
    }
    m->step = step;
    m->world = world;
    m->size = calloc((size_t)world, sizeof *m->size);
    m->crc = calloc((size_t)world, sizeof *m->crc);
    if (!m->size || !m->crc) {
        st = ddl_fail(DDL_ERR_NOMEM, "out of memory for a manifest of %d ranks", world);
        goto out;
    }
    char *p = text + pos;
    for (int r = 0; r < world; r++) {
        int rr, n;
        unsigned long long sz;
        unsigned c;
        if (sscanf(p, "shard %d %llu 0x%x\n%n", &rr, &sz, &c, &n) != 3 || rr != r) {
            st = ddl_fail(DDL_ERR_IO, "%s: bad line for rank %d", path, r);
            goto out;
        }
        m->size[r] = sz;
        m->crc[r] = c;
        p += n;
    }
    st = DDL_OK;
out:
    free(text);
    if (st != DDL_OK) {
        free(m->size);
        free(m->crc);
        m->size = NULL;
        m->crc = NULL;
    }
    return st;
}

static void manifest_free(manifest_t *m)
{
    free(m->size);
    free(m->crc);
}

/* ---- cleanup ---- */

/* rm_step_at: remove name in dfd and, if it is a directory, the files in
 * it; a symbolic link (or a stray file) is removed itself, never followed. */
static int rm_step_at(int dfd, const char *name)
{
    struct stat sb;
    if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode))
        return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -1 : 0;
    int sfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sfd < 0)
        return errno == ENOENT ? 0 : -1;
    DIR *d = fdopendir(sfd);
    if (!d) {
        int e = errno;
        close(sfd);
        errno = e;
        return -1;
    }
    struct dirent *e;
    int rc = 0, err = 0;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (unlinkat(sfd, e->d_name, 0) < 0 && errno != ENOENT) {
            rc = -1;
            err = errno;
        }
    }
    closedir(d);
    if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT) {
        rc = -1;
        err = errno;
    }
    errno = err;
    return rc;
}

static int cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* parse_step_name: "step-<digits>" -> step, or -1. */
static int64_t parse_step_name(const char *name)
{
    if (strncmp(name, "step-", 5) != 0 || !name[5])
        return -1;
    int64_t v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

/* cleanup_at: ddl_ckpt_cleanup() in the checked directory dfd (named dir in
 * messages); never follows a symbolic link. */
static ddl_status_t cleanup_at(int dfd, const char *dir, int keep)
{
    int64_t latest, *kept = NULL;
    size_t nkept = 0, cap = 0;
    ddl_status_t st;
    char path[PATH_MAX + 300], name[300], firsterr[ERR_TEXT] = "";

    if (keep == 0)
        keep = DDL_CKPT_KEEP_DEFAULT;
    if ((st = latest_step(dir, &latest)) != DDL_OK)
        return st;
    int lfd = dup(dfd);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        int e = errno;
        if (lfd >= 0)
            close(lfd);
        return ddl_fail(DDL_ERR_IO, "cannot list checkpoint directory %s: %s (errno %d): fix "
                        "its permissions", dir, strerror(e), e);
    }
    rewinddir(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t s = parse_step_name(e->d_name);
        struct stat sb;
        if (s < 0) {
            /* a temporary name of an interrupted commit */
            if (strncmp(e->d_name, "latest.tmp", 10) == 0)
                unlinkat(dfd, e->d_name, 0);
            continue;
        }
        textf(name, sizeof name, "%s/MANIFEST", e->d_name);
        int committed = fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && s <= latest;
        if (committed) {
            if (nkept == cap) {
                size_t nc = cap ? cap * 2 : 16;
                int64_t *nk = realloc(kept, nc * sizeof *nk);
                if (!nk) {
                    closedir(d);
                    free(kept);
                    return ddl_fail(DDL_ERR_NOMEM, "out of memory listing %s", dir);
                }
                kept = nk;
                cap = nc;
            }
            kept[nkept++] = s;
            continue;
        }
        /* partial (no MANIFEST), or never made latest: not a checkpoint */
        if (rm_step_at(dfd, e->d_name) < 0 && !firsterr[0])
            textf(firsterr, sizeof firsterr, "cannot remove partial checkpoint %s/%s: %s "
                     "(errno %d): fix its permissions", dir, e->d_name, strerror(errno), errno);
    }
    closedir(d);
    if (keep > 0 && nkept > (size_t)keep) {
        qsort(kept, nkept, sizeof *kept, cmp_desc);
        for (size_t i = (size_t)keep; i < nkept; i++) {
            textf(name, sizeof name, "step-%08" PRId64, kept[i]);
            if (rm_step_at(dfd, name) < 0 && !firsterr[0]) {
                step_path(path, sizeof path, dir, kept[i], NULL);
                textf(firsterr, sizeof firsterr, "cannot remove old checkpoint %s: %s "
                         "(errno %d): fix its permissions", path, strerror(errno), errno);
            }
        }
    }
    free(kept);
    if (firsterr[0])
        return ddl_fail(DDL_ERR_IO, "%s", firsterr);
    return DDL_OK;
}

ddl_status_t ddl_ckpt_cleanup(const char *dir, int keep)
{
    ddl_error_t err;
    ddl_clear_error();
    if (!dir || !*dir)
        return ddl_fail(DDL_ERR_INVALID, "checkpoint directory is NULL or empty");
    int dfd = ddl_dir_open(dir, 0, "checkpoint directory", &err);
    if (dfd < 0) {
        if (errno == ENOENT)
            return DDL_OK;
        return ddl_fail(DDL_ERR_IO, "%s", err.text);
    }
    ddl_status_t st = cleanup_at(dfd, dir, keep);
    close(dfd);
    return st;
}

/* ---- writing a shard ---- */

static void shard_open(ddl_ckpt_t *ck)
{
    unsigned char h[HDR_BYTES] = {0};
    ddl_error_t err;
    if (ck->err != DDL_OK)
        return; /* the directory could not be opened */
    if ((mkdirat(ck->dirfd, ck->stepname, 0700) < 0 && errno != EEXIST) ||
        (ck->stepfd = openat(ck->dirfd, ck->stepname,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        ck_fail(ck, DDL_ERR_IO, "cannot create %s: %s (errno %d): fix the permissions or the "
                "path of the checkpoint directory%s", ck->stepdir, strerror(errno), errno,
                errno == ELOOP || errno == ENOTDIR ? " (a symbolic link or a file is in the "
                "way: remove it)" : "");
        return;
    }
    if (ddl_dir_check(ck->stepfd, ck->stepdir, geteuid(), "checkpoint step directory",
                      &err) < 0) {
        ck_fail(ck, DDL_ERR_IO, "%s", err.text);
        return;
    }
    ck->fd = openat(ck->stepfd, ck->shardname,
                    O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (ck->fd < 0) {
        ck_fail(ck, DDL_ERR_IO, "cannot create %s: %s (errno %d): fix the permissions of the "
                "checkpoint directory", ck->path, strerror(errno), errno);
        return;
    }
    memcpy(h, SHARD_MAGIC, 8);
    put32(h + 8, SHARD_VERSION);
    put32(h + 12, (uint32_t)ck->rank);
    put64(h + 16, (uint64_t)ck->step);
    if (write_all(ck->fd, h, sizeof h) < 0) {
        ck_fail(ck, DDL_ERR_IO, "cannot write %s: %s (errno %d)", ck->path, strerror(errno),
                errno);
        return;
    }
    ck->crc = ddl_crc32c(0, h, sizeof h);
    ck->off = sizeof h;
}

static void io_fail(ddl_ckpt_t *ck, const char *what)
{
    int e = errno;
    ck_fail(ck, DDL_ERR_IO, "cannot %s %s: %s (errno %d): %s", what, ck->path, strerror(e), e,
            e == ENOSPC || e == EDQUOT ? "free space in the checkpoint file system"
            : e == EACCES || e == EPERM || e == EROFS ? "fix the checkpoint directory's "
                                                         "permissions"
                                                       : "check the storage");
}

static void shard_record(ddl_ckpt_t *ck, const char *name, const void *buf, size_t bytes)
{
    size_t nlen = strlen(name);
    unsigned char h[REC_BYTES];
    if (ck->err != DDL_OK)
        return;
    put32(h, (uint32_t)nlen);
    put32(h + 4, ddl_crc32c(0, buf, bytes));
    put64(h + 8, bytes);
    ck->crc = ddl_crc32c(ck->crc, h, sizeof h);
    ck->crc = ddl_crc32c(ck->crc, name, nlen);
    if (write_all(ck->fd, h, sizeof h) < 0 || write_all(ck->fd, name, nlen) < 0)
        return io_fail(ck, "write");
    if (ck->faults & F_WRITE) {
        errno = ENOSPC;
        return io_fail(ck, "write");
    }
    if (bytes && write_all(ck->fd, buf, bytes) < 0)
        return io_fail(ck, "write");
    ck->off += sizeof h + nlen + bytes;
    ck->nrec++;
}

/* shard_close: trailer, fsync, close, fsync of the step directory. */
static void shard_close(ddl_ckpt_t *ck)
{
    unsigned char t[TRAIL_BYTES];
    if (ck->err == DDL_OK) {
        memcpy(t, TRAIL_MAGIC, 8);
        put32(t + 8, ck->nrec);
        ck->crc = ddl_crc32c(ck->crc, t, 12);
        put32(t + 12, ck->crc);
        if (write_all(ck->fd, t, sizeof t) < 0)
            io_fail(ck, "write");
        else
            ck->off += sizeof t;
    }
    if (ck->err == DDL_OK) {
        int injected = (ck->faults & F_FSYNC) != 0;
        if (injected)
            errno = EIO;
        if (injected || fsync(ck->fd) < 0)
            io_fail(ck, "fsync");
    }
    if (ck->fd >= 0 && close(ck->fd) < 0)
        io_fail(ck, "close");
    ck->fd = -1;
    if (ck->err == DDL_OK && fsync(ck->stepfd) < 0)
        ck_fail(ck, DDL_ERR_IO, "cannot fsync directory %s: %s (errno %d)", ck->stepdir,
                strerror(errno), errno);
}

static void *async_writer(void *arg)
{
    ddl_ckpt_t *ck = arg;
    shard_open(ck);
    for (size_t i = 0; i < ck->n; i++) {
        shard_record(ck, ck->recs[i].name, ck->recs[i].data, ck->recs[i].len);
    }
    shard_close(ck);
    return NULL;
}

/* ck_free: release ck; an async one's copies replace the pool. */
static void ck_free(ddl_ckpt_t *ck)
{
    if (!ck)
        return;
    if (ck->fd >= 0)
        close(ck->fd);
    if (ck->stepfd >= 0)
        close(ck->stepfd);
    if (ck->dirfd >= 0)
        close(ck->dirfd);
    if (ck->recs) {
        pool_clear(); /* buffers this checkpoint did not reuse */
        pool = calloc(ck->n ? ck->n : 1, sizeof *pool);
    }
    for (size_t i = 0; i < ck->n; i++) {
        free(ck->names[i]);
        if (ck->recs && pool)
            pool[npool++] = (buf_t){ck->recs[i].data, ck->recs[i].cap};
        else if (ck->recs)
            free(ck->recs[i].data);
    }
    free(ck->names);
    free(ck->recs);
    free(ck);
}

/* ---- the collective parts ---- */

typedef struct {
    int32_t status;
    char text[ERR_TEXT];
} verdict_t;

/* publish: rank 0 writes MANIFEST and moves latest (all shards are good). */
static ddl_status_t publish(ddl_ckpt_t *ck, const int64_t *all, char *err, size_t errlen)
{
    size_t cap = 128 + (size_t)ck->size * 48, n;
    char *text = malloc(cap), path[PATH_MAX + 16], val[32], tmp[96];
    const char *what;
    if (!text) {
        snprintf(err, errlen, "out of memory for the manifest of %d ranks", ck->size);
        return DDL_ERR_NOMEM;
    }
    n = (size_t)snprintf(text, cap, MANIFEST_MAGIC "\nstep %" PRId64 "\nworld %d\n", ck->step,
                         ck->size);
    for (int r = 0; r < ck->size; r++)
        n += (size_t)snprintf(text + n, cap - n, "shard %d %" PRIu64 " 0x%08" PRIx32 "\n", r,
                              (uint64_t)all[3 * r + 1], (uint32_t)all[3 * r + 2]);
    snprintf(text + n, cap - n, "crc32c 0x%08" PRIx32 "\n", ddl_crc32c(0, text, n));
    step_path(path, sizeof path, ck->dir, ck->step, "MANIFEST");
    int rc = write_file_atomic(ck->stepfd, "MANIFEST", text, (ck->faults & F_RENAME) != 0,
                               &what, tmp, sizeof tmp);
    free(text);
    if (rc < 0) {
        textf(err, errlen, "cannot %s %s/%s (for %s): %s (errno %d)", what, ck->stepdir, tmp,
              path, strerror(errno), errno);
        rm_step_at(ck->dirfd, ck->stepname);
        return DDL_ERR_IO;
    }
    snprintf(path, sizeof path, "%s/latest", ck->dir);
    snprintf(val, sizeof val, "%" PRId64 "\n", ck->step);
    if (write_file_atomic(ck->dirfd, "latest", val, 0, &what, tmp, sizeof tmp) < 0) {
        textf(err, errlen, "cannot %s %s/%s (for %s): %s (errno %d)", what, ck->dir, tmp, path,
              strerror(errno), errno);
        /* latest still names the previous step; this one is not kept */
        rm_step_at(ck->dirfd, ck->stepname);
        return DDL_ERR_IO;
    }
    if (cleanup_at(ck->dirfd, ck->dir, ck->keep) != DDL_OK)
        ddl_warn("checkpoint step %" PRId64 " committed, but %s", ck->step, ddl_last_error());
    return DDL_OK;
}

/* decide: every rank's shard result -> one status on every rank. */
static ddl_status_t decide(ddl_ckpt_t *ck)
{
    int64_t mine[3] = {ck->err == DDL_OK, (int64_t)ck->off, (int64_t)ck->crc};
    int64_t *all = malloc(sizeof mine * (size_t)ck->size);
    verdict_t v = {0};
    ddl_status_t st;
    if (!all)
        return ddl_fail(DDL_ERR_NOMEM, "out of memory committing checkpoint step %" PRId64,
                        ck->step);
    if ((st = ddl_allgather(ck->comm, mine, all, 3, DDL_INT64)) != DDL_OK) {
        free(all);
        return st;
    }
    int bad = -1;
    for (int r = 0; r < ck->size && bad < 0; r++)
        if (!all[3 * r])
            bad = r;
    if (bad >= 0) {
        if (ck->rank == bad)
            snprintf(v.text, sizeof v.text, "%s", ck->errtext);
        st = ddl_bcast(ck->comm, v.text, sizeof v.text, DDL_UINT8, bad);
        free(all);
        if (st != DDL_OK)
            return st;
        if (ck->rank == 0 && ck->dirfd >= 0)
            rm_step_at(ck->dirfd, ck->stepname);
        return ddl_fail(DDL_ERR_IO, "checkpoint step %" PRId64 " not committed (the previous "
                        "one stays latest): rank %d: %.*s", ck->step, bad, ERR_TEXT - 100,
                        v.text);
    }
    if (ck->rank == 0)
        v.status = publish(ck, all, v.text, sizeof v.text);
    free(all);
    if ((st = ddl_bcast(ck->comm, &v, sizeof v, DDL_UINT8, 0)) != DDL_OK)
        return st;
    if (v.status != DDL_OK)
        return ddl_fail((ddl_status_t)v.status, "checkpoint step %" PRId64 " not committed (the "
                        "previous one stays latest): rank 0: %.*s", ck->step, ERR_TEXT - 100,
                        v.text);
    ddl_debug("checkpoint step %" PRId64 " committed in %s", ck->step, ck->dir);
    return DDL_OK;
}

ddl_status_t ddl_ckpt_wait(int64_t *step)
{
    ddl_ckpt_t *ck = pending;
    ddl_clear_error();
    if (step)
        *step = ck ? ck->step : -1;
    if (!ck)
        return DDL_OK;
    pending = NULL;
    if (ck->thread_started)
        pthread_join(ck->thread, NULL);
    ddl_status_t st = decide(ck);
    ck_free(ck);
    return st;
}

/* ddl_ckpt_finish_pending: ddl_finalize()'s hook (ddl_int.h). */
ddl_status_t ddl_ckpt_finish_pending(void)
{
    int64_t step;
    ddl_status_t st = DDL_OK;
    if (pending && (st = ddl_ckpt_wait(&step)) != DDL_OK)
        ddl_warn("async checkpoint step %" PRId64 " failed at ddl_finalize(): %s", step,
                 ddl_last_error());
    pool_clear();
    return st;
}

ddl_status_t ddl_ckpt_begin(ddl_comm_t *comm, const char *dir, int64_t step, int keep,
                            unsigned flags, ddl_ckpt_t **ckp)
{
    ddl_status_t st;
    verdict_t v = {0};
    int64_t latest;
    int dfd = -1;
    ddl_error_t err;

    ddl_clear_error();
    if (!ckp)
        return ddl_fail(DDL_ERR_INVALID, "ddl_ckpt_begin: ck is NULL");
    *ckp = NULL;
    if (!ddl_ctx.initialized)
        return ddl_fail(DDL_ERR_NOT_INITIALIZED, "call ddl_init() before ddl_ckpt_begin()");
    if (!comm || !dir || !*dir)
        return ddl_fail(DDL_ERR_INVALID, "ddl_ckpt_begin: communicator or directory is NULL or "
                        "empty");
    if (step < 0)
        return ddl_fail(DDL_ERR_INVALID, "checkpoint step %" PRId64 " is negative: use 0 or "
                        "more", step);
    if (flags & ~DDL_CKPT_ASYNC)
        return ddl_fail(DDL_ERR_INVALID, "unknown checkpoint flags 0x%x: only DDL_CKPT_ASYNC "
                        "is defined", flags);
    if (strlen(dir) > PATH_MAX - 64)
        return ddl_fail(DDL_ERR_INVALID, "checkpoint directory path '%.60s...' is longer than "
                        "%d bytes", dir, PATH_MAX - 64);
    if ((st = ddl_ckpt_wait(NULL)) != DDL_OK)
        return st;

    if (comm->rank == 0) {
        if ((dfd = ddl_dir_open(dir, 1, "checkpoint directory", &err)) < 0) {
            v.status = DDL_ERR_IO;
            textf(v.text, sizeof v.text, "%s", err.text);
        } else if ((st = latest_step(dir, &latest)) != DDL_OK) {
            v.status = st;
            snprintf(v.text, sizeof v.text, "%s", ddl_last_error());
        } else if (step <= latest) {
            v.status = DDL_ERR_INVALID;
            snprintf(v.text, sizeof v.text, "checkpoint step %" PRId64 " is not after the latest "
                     "one (%" PRId64 ") in %s: use a larger step", step, latest, dir);
        } else if ((st = cleanup_at(dfd, dir, keep)) != DDL_OK) {
            v.status = st;
            snprintf(v.text, sizeof v.text, "%s", ddl_last_error());
        }
    }
    if ((st = ddl_bcast(comm, &v, sizeof v, DDL_UINT8, 0)) != DDL_OK ||
        (v.status != DDL_OK && (st = (ddl_status_t)v.status) != DDL_OK)) {
        if (dfd >= 0)
            close(dfd);
        return v.status != DDL_OK ? ddl_fail(st, "%s", v.text) : st;
    }

    ddl_ckpt_t *ck = calloc(1, sizeof *ck);
    if (!ck) {
        if (dfd >= 0)
            close(dfd);
        return ddl_fail(DDL_ERR_NOMEM, "out of memory for a checkpoint");
    }
    ck->comm = comm;
    ck->rank = comm->rank;
    ck->size = comm->size;
    ck->step = step;
    ck->keep = keep;
    ck->flags = flags;
    ck->fd = -1;
    ck->stepfd = -1;
    ck->dirfd = dfd; /* rank 0 opened it above; the others now */
    if (ck->dirfd < 0 && (ck->dirfd = ddl_dir_open(dir, 1, "checkpoint directory", &err)) < 0)
        ck_fail(ck, DDL_ERR_IO, "%s", err.text); /* reported by write and commit */
    ck->faults = (fault("write", ck->rank) ? F_WRITE : 0) |
                 (fault("fsync", ck->rank) ? F_FSYNC : 0) |
                 (fault("rename", ck->rank) ? F_RENAME : 0);
    textf(ck->dir, sizeof ck->dir, "%s", dir);
    step_path(ck->stepdir, sizeof ck->stepdir, dir, step, NULL);
    textf(ck->path, sizeof ck->path, "%s/rank-%d.shard", ck->stepdir, ck->rank);
    textf(ck->stepname, sizeof ck->stepname, "step-%08" PRId64, step);
    textf(ck->shardname, sizeof ck->shardname, "rank-%d.shard", ck->rank);
    if (!(flags & DDL_CKPT_ASYNC))
        shard_open(ck); /* a failure is reported by write and commit */
    *ckp = ck;
    return DDL_OK;
}

ddl_status_t ddl_ckpt_write(ddl_ckpt_t *ck, const char *name, const void *buf, size_t bytes)
{
    ddl_clear_error();
    if (!ck || !name || (!buf && bytes))
        return ddl_fail(DDL_ERR_INVALID, "ddl_ckpt_write: NULL checkpoint, name or buffer");
    size_t nlen = strlen(name);
    if (nlen == 0 || nlen > DDL_CKPT_NAME_MAX)
        return ddl_fail(DDL_ERR_INVALID, "checkpoint buffer name '%.40s' has %zu bytes: use 1 to "
                        "%d", name, nlen, DDL_CKPT_NAME_MAX);
    for (size_t i = 0; i < ck->n; i++)
        if (!strcmp(ck->names[i], name))
            return ddl_fail(DDL_ERR_INVALID, "checkpoint step %" PRId64 " already has a buffer "
                            "named '%s' on this rank: use distinct names", ck->step, name);
    if (ck->err != DDL_OK)
        return ddl_fail(ck->err, "%s", ck->errtext);
    if (ck->n == ck->cap) {
        size_t nc = ck->cap ? ck->cap * 2 : 8;
        char **nn = realloc(ck->names, nc * sizeof *nn);
        if (nn)
            ck->names = nn;
        rec_t *nr = nn && (ck->flags & DDL_CKPT_ASYNC) ? realloc(ck->recs, nc * sizeof *nr)
                                                       : NULL;
        if (nr)
            ck->recs = nr;
        if (!nn || ((ck->flags & DDL_CKPT_ASYNC) && !nr))
            return ddl_fail(DDL_ERR_NOMEM, "out of memory for checkpoint buffer '%s'", name);
        ck->cap = nc;
    }
    char *ncopy = strdup(name);
    if (!ncopy)
        return ddl_fail(DDL_ERR_NOMEM, "out of memory for checkpoint buffer '%s'", name);
    if (ck->flags & DDL_CKPT_ASYNC) {
        size_t cap;
        void *copy = pool_take(bytes, &cap);
        if (!copy) {
            free(ncopy);
            return ddl_fail(DDL_ERR_NOMEM, "out of memory copying %zu bytes of checkpoint "
                            "buffer '%s': use synchronous mode or free memory", bytes, name);
        }
        if (bytes)
            memcpy(copy, buf, bytes);
        ck->recs[ck->n] = (rec_t){.name = ncopy, .data = copy, .len = bytes, .cap = cap};
        ck->names[ck->n++] = ncopy;
        return DDL_OK;
    }
    ck->names[ck->n++] = ncopy;
    shard_record(ck, name, buf, bytes);
    if (ck->err != DDL_OK)
        return ddl_fail(ck->err, "%s", ck->errtext);
    return DDL_OK;
}

ddl_status_t ddl_ckpt_commit(ddl_ckpt_t *ck)
{
    ddl_clear_error();
    if (!ck)
        return ddl_fail(DDL_ERR_INVALID, "ddl_ckpt_commit: checkpoint is NULL");
    if (ck->flags & DDL_CKPT_ASYNC) {
        if (pending) {
            int64_t other = pending->step;
            ck_free(ck);
            return ddl_fail(DDL_ERR_INVALID, "async checkpoint step %" PRId64 " is still "
                            "pending: begin and commit one checkpoint at a time", other);
        }
        pending = ck;
        if (pthread_create(&ck->thread, NULL, async_writer, ck) == 0)
            ck->thread_started = 1;
        else
            async_writer(ck); /* no thread to be had: write now */
        return DDL_OK;
    }
    shard_close(ck);
    ddl_status_t st = decide(ck);
    ck_free(ck);
    return st;
}

void ddl_ckpt_abort(ddl_ckpt_t *ck)
{
    if (!ck)
        return;
    if (ck->fd >= 0) {
        close(ck->fd);
        ck->fd = -1;
        unlinkat(ck->stepfd, ck->shardname, 0);
    }
    ck_free(ck);
}

ddl_status_t ddl_ckpt_latest(const char *dir, int64_t *step)
{
    ddl_status_t st;
    char path[PATH_MAX];
    struct stat sb;
    ddl_clear_error();
    if (!dir || !*dir || !step)
        return ddl_fail(DDL_ERR_INVALID, "ddl_ckpt_latest: NULL or empty argument");
    if ((st = latest_step(dir, step)) != DDL_OK || *step < 0)
        return st;
    if (step_path(path, sizeof path, dir, *step, "MANIFEST") < 0 || stat(path, &sb) < 0) {
        int64_t s = *step;
        *step = -1;
        return ddl_fail(DDL_ERR_IO, "%s/latest names step %" PRId64 " but %s is missing: the "
                        "checkpoint was removed by hand; restore it or remove %s/latest", dir, s,
                        path, dir);
    }
    return DDL_OK;
}

ddl_status_t ddl_ckpt_read(const char *dir, int64_t step, int rank, const char *name, void *buf,
                           size_t bytes, size_t *got)
{
    manifest_t m;
    ddl_status_t st;
    char path[PATH_MAX];
    unsigned char h[HDR_BYTES > REC_BYTES ? HDR_BYTES : REC_BYTES];
    char rname[DDL_CKPT_NAME_MAX + 1];
    int fd = -1, rc;

    ddl_clear_error();
    if (!dir || !*dir || !name || (!buf && bytes) || rank < 0)
        return ddl_fail(DDL_ERR_INVALID, "ddl_ckpt_read: NULL or empty argument, or rank < 0");
    if (step < 0)
        return ddl_fail(DDL_ERR_INVALID, "checkpoint step %" PRId64 " is negative", step);
    if ((st = read_manifest(dir, step, &m)) != DDL_OK)
        return st;
    if (rank >= m.world) {
        st = ddl_fail(DDL_ERR_INVALID, "checkpoint step %" PRId64 " has %d shards; there is no "
                      "rank %d", step, m.world, rank);
        goto out;
    }
    textf(path, sizeof path, "%s/step-%08" PRId64 "/rank-%d.shard", dir, step, rank);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) < 0) {
        st = ddl_fail(DDL_ERR_IO, "cannot open %s: %s (errno %d)", path, strerror(errno), errno);
        goto out;
    }
    if ((uint64_t)sb.st_size != m.size[rank]) {
        st = ddl_fail(DDL_ERR_IO, "%s has %lld bytes but the manifest says %" PRIu64 ": the shard "
                      "is %s; restart from an earlier checkpoint", path, (long long)sb.st_size,
                      m.size[rank], (uint64_t)sb.st_size < m.size[rank] ? "truncated" : "damaged");
        goto out;
    }
    uint64_t size = m.size[rank], off = HDR_BYTES, found = 0, dlen = 0;
    uint32_t dcrc = 0;
    if (size < HDR_BYTES + TRAIL_BYTES || read_at(fd, h, HDR_BYTES, 0) != 0 ||
        memcmp(h, SHARD_MAGIC, 8) != 0 || get32(h + 8) != SHARD_VERSION ||
        get32(h + 12) != (uint32_t)rank || get64(h + 16) != (uint64_t)step) {
        st = ddl_fail(DDL_ERR_IO, "%s does not start with a ddl shard header for rank %d, step "
                      "%" PRId64 ": the checkpoint is damaged", path, rank, step);
        goto out;
    }
    uint32_t crc = ddl_crc32c(0, h, HDR_BYTES);
    uint32_t nrec = 0;
    while (off + TRAIL_BYTES < size) {
        if (off + REC_BYTES + TRAIL_BYTES > size || read_at(fd, h, REC_BYTES, off) != 0)
            break;
        uint32_t nlen = get32(h);
        uint64_t len = get64(h + 8);
        if (nlen == 0 || nlen > DDL_CKPT_NAME_MAX || off + REC_BYTES + nlen + TRAIL_BYTES > size ||
            len > size - off - REC_BYTES - nlen - TRAIL_BYTES ||
            read_at(fd, rname, nlen, off + REC_BYTES) != 0)
            break;
        rname[nlen] = '\0';
        crc = ddl_crc32c(crc, h, REC_BYTES);
        crc = ddl_crc32c(crc, rname, nlen);
        if (!found && strlen(rname) == nlen && !strcmp(rname, name)) {
            found = off + REC_BYTES + nlen;
            dlen = len;
            dcrc = get32(h + 4);
        }
        off += REC_BYTES + nlen + len;
        nrec++;
    }
    unsigned char t[TRAIL_BYTES];
    if (off + TRAIL_BYTES != size || read_at(fd, t, TRAIL_BYTES, off) != 0 ||
        memcmp(t, TRAIL_MAGIC, 8) != 0 || get32(t + 8) != nrec ||
        (crc = ddl_crc32c(crc, t, 12)) != get32(t + 12) || crc != m.crc[rank]) {
        st = ddl_fail(DDL_ERR_IO, "%s fails its checksum (CRC-32C) or structure check: the "
                      "checkpoint is damaged; restart from an earlier one", path);
        goto out;
    }
    if (!found) {
        st = ddl_fail(DDL_ERR_INVALID, "rank %d's shard of checkpoint step %" PRId64 " has no "
                      "buffer named '%s'", rank, step, name);
        goto out;
    }
    if (got)
        *got = (size_t)dlen;
    if (!buf && !bytes && got) {
        st = DDL_OK;
        goto out;
    }
    if (got ? bytes < dlen : bytes != dlen) {
        st = ddl_fail(DDL_ERR_INVALID, "checkpoint buffer '%s' (rank %d, step %" PRId64 ") has "
                      "%" PRIu64 " bytes, the destination %zu: pass a buffer of that size", name,
                      rank, step, dlen, bytes);
        goto out;
    }
    rc = dlen ? read_at(fd, buf, (size_t)dlen, found) : 0;
    if (rc != 0) {
        st = ddl_fail(DDL_ERR_IO, "cannot read %s: %s", path, rc == -2 ? "unexpected end of file"
                      : strerror(errno));
        goto out;
    }
    if (ddl_crc32c(0, buf, (size_t)dlen) != dcrc) {
        st = ddl_fail(DDL_ERR_IO, "buffer '%s' in %s fails its checksum (CRC-32C): the checkpoint "
                      "is damaged; restart from an earlier one", name, path);
        goto out;
    }
    st = DDL_OK;
out:
    if (fd >= 0)
        close(fd);
    manifest_free(&m);
    return st;
}
