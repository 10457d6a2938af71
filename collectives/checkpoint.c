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
 * The node-local level (DDL_CKPT_LOCAL_DIR, ddl.h): the shard goes to the
 * node's own directory (same layout) and over the transport to the partner
 * rank (same place among its node's ranks, on the next node), which writes
 * it next to its own: in sync mode at the commit, in async mode from the
 * background thread (which shares the UCX worker, see ucx.c, and stops
 * when the world is aborted); each node's first rank
 * writes that directory's MANIFEST and latest.  Every K-th checkpoint
 * (DDL_CKPT_SHARED_EVERY) each rank also copies its shard to the shared
 * directory, where rank 0 publishes it as before.  ddl_ckpt_restore()
 * finds each rank's shard on its node, else on a partner (sent over the
 * transport), else in the shared directory, checking every CRC.
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
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"
#include "ddl_int.h"
#include "env.h"
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
#define F_EXIT 8u /* generation 0 only: _exit inside the commit, after its allgather */

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
    atomic_int done;      /* the background thread has finished */
    atomic_int cancel;    /* the world goes away: stop the partner transfer */
    uint32_t pseq;        /* async: the partner copies' 3 sequence numbers, from the commit */
    /* node-local level: dir above is this node's directory */
    int local;            /* the level is on; its files are not fsync'd: a node that
                           * crashes loses them whatever the disk holds (its
                           * partner's copies stand in), and a crashed process
                           * leaves them in the page cache */
    int leader;           /* this rank publishes its node's MANIFEST and latest */
    int shared;           /* this checkpoint also goes to the shared directory */
    char sdir[PATH_MAX];  /* the shared directory */
    int sdirfd, sstepfd;  /* it and its step directory, or -1 */
    /* async: the shards received from the ranks whose partner this is, each
     * a ddl_ckpt_t of that rank (recs only), written by the same thread */
    struct ddl_ckpt **pcopies;
    int npcopies;
};

/* Checkpoints begun with the node-local level in this process (for
 * DDL_CKPT_SHARED_EVERY), and that level's directory once used (removed by
 * ddl_finalize()). */
static long local_count;
static char local_used[PATH_MAX];

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

/* The shard of this rank that the last ddl_ckpt_restore() checked in full
 * on the node-local level (its own copy, or the partner's it received),
 * kept so that ddl_ckpt_read() copies its buffers from memory instead of
 * reading and checking the file again.  Released once every buffer was
 * read, and at the next ddl_ckpt_begin() or ddl_ckpt_restore() and when
 * the world is released.  ddl_ckpt_read() is thread-safe: held_mu. */
static struct {
    char dir[PATH_MAX];
    int64_t step;
    int rank;
    unsigned char *img; /* big_alloc()'d, len bytes */
    size_t len;
    uint32_t nrec, nread;
    uint8_t *seen; /* per record: read once */
} held;
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;

static void big_free(void *p, size_t len);

/* The store of a partner copy that a restore received: written into this
 * node's directory by a thread of its own once the restore succeeded, so
 * that neither the restore nor the training waits for it (a loss before
 * the next checkpoint finds it there; until then the partner still holds
 * its copy).  img is held's: whichever of held's release and the thread
 * comes last frees it (free_img, under held_mu).  store_wait() joins the
 * thread: at the next ddl_ckpt_begin() or ddl_ckpt_restore(), when the
 * world ends and at ddl_finalize(). */
static struct {
    pthread_t thread;
    int running; /* a thread to join (store_mu) */
    char dir[PATH_MAX + 48], name[32];
    const unsigned char *img; /* NULL once the thread is done with it */
    size_t len;
    int free_img; /* held released it meanwhile: the thread frees it */
    int die;      /* DDL_CKPT_FAULT=store for this rank */
    int slow;     /* DDL_CKPT_FAULT=slowstore for this rank */
} store;

static void held_release_locked(void)
{
    if (held.img && held.img == store.img)
        store.free_img = 1; /* still being stored */
    else
        big_free(held.img, held.len);
    free(held.seen);
    held.img = NULL;
    held.seen = NULL;
    held.len = 0;
    held.nrec = held.nread = 0;
}

static void held_release(void)
{
    pthread_mutex_lock(&held_mu);
    held_release_locked();
    pthread_mutex_unlock(&held_mu);
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

/* A shard is read in requests of at most this size: the kernel's
 * readahead then runs ahead of the reader.  Cold, on a virtio disk, four
 * 16 MiB files read in 128 KiB-1 MiB requests took 51-55 ms, in 4 MiB or
 * 16 MiB requests 90-98 ms (median of 5). */
#define READ_REQ ((size_t)1 << 20)

/* read_at: exactly len bytes at off; -1 with errno, or -2 at end of file. */
static int read_at(int fd, void *buf, size_t len, uint64_t off)
{
    char *p = buf;
    while (len > 0) {
        ssize_t r = pread(fd, p, len < READ_REQ ? len : READ_REQ, (off_t)off);
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

/* shard_path: where rank's shard of step is under dir (buf: PATH_MAX + 64
 * bytes is enough for a dir shorter than PATH_MAX). */
static void shard_path(char *buf, size_t len, const char *dir, int64_t step, int rank)
{
    textf(buf, len, "%s/step-%08" PRId64 "/rank-%d.shard", dir, step, rank);
}

/* Set around the node-local level's writes: no fsync there (see
 * ddl_ckpt_t.local).  Only the collectives thread writes manifests. */
static int atomic_nosync;

enum { W_RENAME = 1, W_DIE }; /* write_atomic's injected faults */

/* write_atomic: len bytes of buf as name in dfd, through a fresh
 * NAME.tmp.XXXXXXXXXXXX (mode 0600, no link followed) renamed to name, so
 * that a process that ends inside the write leaves no partial file under
 * name, only a temporary one; with sync, the file and then dfd fsync'd.
 * fault: W_RENAME fails the rename with EIO; W_DIE (DDL_CKPT_FAULT=store)
 * makes the process _exit(1) halfway through the write.  errors: -1 with
 * errno (the temporary file removed), *what naming the failing step and tmp
 * the temporary name. */
static int write_atomic(int dfd, const char *name, const void *buf, size_t len, int sync,
                        int fault, const char **what, char *tmp, size_t tmplen)
{
    char prefix[64];
    textf(prefix, sizeof prefix, "%s.tmp", name);
    textf(tmp, tmplen, "%s", prefix);
    *what = "create";
    int fd = ddl_tmp_openat(dfd, prefix, tmp, tmplen);
    if (fd < 0)
        return -1;
    if (fault == W_DIE) {
        ddl_warn("DDL_CKPT_FAULT=store: the process exits halfway through writing %s", tmp);
        write_all(fd, buf, len / 2);
        _exit(1);
    }
    *what = "write";
    if (write_all(fd, buf, len) < 0)
        goto fail;
    *what = "fsync";
    if (sync && fsync(fd) < 0)
        goto fail;
    *what = "close";
    int rc = close(fd);
    fd = -1;
    if (rc < 0)
        goto fail;
    *what = "rename";
    if (fault == W_RENAME) {
        errno = EIO;
        goto fail;
    }
    if (renameat(dfd, tmp, dfd, name) < 0)
        goto fail;
    *what = "fsync the directory of";
    return sync ? fsync(dfd) : 0;
fail:;
    int e = errno;
    if (fd >= 0)
        close(fd);
    unlinkat(dfd, tmp, 0);
    errno = e;
    return -1;
}

/* write_file_atomic: text as name in dfd (write_atomic), fsync'd unless
 * atomic_nosync. */
static int write_file_atomic(int dfd, const char *name, const char *text, int rename_fault,
                             const char **what, char *tmp, size_t tmplen)
{
    return write_atomic(dfd, name, text, strlen(text), !atomic_nosync,
                        rename_fault ? W_RENAME : 0, what, tmp, tmplen);
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

/* rm_step_all: remove every step directory in dfd. */
static int rm_step_all(int dfd)
{
    int lfd = dup(dfd), rc = 0;
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    struct dirent *e;
    if (!d) {
        if (lfd >= 0)
            close(lfd);
        return -1;
    }
    rewinddir(d);
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "step-", 5) == 0 && rm_step_at(dfd, e->d_name) < 0)
            rc = -1;
    closedir(d);
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
 * messages); never follows a symbolic link.  what: CLEAN_PARTIAL removes the
 * steps that are not checkpoints (no MANIFEST, or after latest), CLEAN_OLD
 * the committed ones beyond keep, CLEAN_ALL both. */
#define CLEAN_PARTIAL 1
#define CLEAN_OLD 2
#define CLEAN_ALL 3
static ddl_status_t cleanup_at(int dfd, const char *dir, int keep, int what)
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
        if ((what & CLEAN_PARTIAL) && rm_step_at(dfd, e->d_name) < 0 && !firsterr[0])
            textf(firsterr, sizeof firsterr, "cannot remove partial checkpoint %s/%s: %s "
                     "(errno %d): fix its permissions", dir, e->d_name, strerror(errno), errno);
    }
    closedir(d);
    if ((what & CLEAN_OLD) && keep > 0 && nkept > (size_t)keep) {
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
    ddl_status_t st = cleanup_at(dfd, dir, keep, CLEAN_ALL);
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
        if (injected || (!ck->local && fsync(ck->fd) < 0))
            io_fail(ck, "fsync");
    }
    if (ck->fd >= 0 && close(ck->fd) < 0)
        io_fail(ck, "close");
    ck->fd = -1;
    if (ck->err == DDL_OK && !ck->local && fsync(ck->stepfd) < 0)
        ck_fail(ck, DDL_ERR_IO, "cannot fsync directory %s: %s (errno %d)", ck->stepdir,
                strerror(errno), errno);
}

/* ---- the node-local level: the shared copy and the partner copies ---- */

/* local_dir_resolve: DDL_CKPT_LOCAL_DIR into out with %n (the node id), %h
 * (the host name) and %% expanded: 1; 0 when unset; -1 (ddl_fail) when the
 * result is too long or holds an unknown %-sequence. */
static int local_dir_resolve(char *out, size_t len)
{
    const char *v = ddl_env_str(DDLENV_DDL_CKPT_LOCAL_DIR);
    size_t n = 0;
    if (!v)
        return 0;
    for (const char *p = v; *p; p++) {
        char buf[300];
        if (*p != '%') {
            buf[0] = *p;
            buf[1] = '\0';
        } else if (p[1] == 'n') {
            snprintf(buf, sizeof buf, "%d", ddl_ctx.node_id);
            p++;
        } else if (p[1] == 'h') {
            if (gethostname(buf, sizeof buf - 1) < 0)
                snprintf(buf, sizeof buf, "unknown-host");
            buf[sizeof buf - 1] = '\0';
            p++;
        } else if (p[1] == '%') {
            buf[0] = '%';
            buf[1] = '\0';
            p++;
        } else {
            ddl_fail(DDL_ERR_INVALID, "DDL_CKPT_LOCAL_DIR='%.200s': '%%%c' is not %%n (node id), "
                     "%%h (host name) or %%%%: fix --checkpoint-local or checkpoint_local_dir", v,
                     p[1] ? p[1] : ' ');
            return -1;
        }
        size_t a = strlen(buf);
        if (n + a + 64 >= len) {
            ddl_fail(DDL_ERR_INVALID, "DDL_CKPT_LOCAL_DIR='%.200s' is longer than %zu bytes: use "
                     "a shorter path", v, len - 64);
            return -1;
        }
        memcpy(out + n, buf, a);
        n += a;
    }
    out[n] = '\0';
    if (out[0] != '/') {
        ddl_fail(DDL_ERR_INVALID, "DDL_CKPT_LOCAL_DIR='%.200s' is not an absolute path: give one "
                 "starting with '/'", v);
        return -1;
    }
    return 1;
}

/* copy_fd: the whole of src (size bytes) into dst; -1 with errno. */
static int copy_fd(int src, int dst, uint64_t size)
{
    static const size_t chunk = 8u << 20;
    char *buf = NULL;
    uint64_t off = 0;
    while (off < size) {
        ssize_t n = copy_file_range(src, NULL, dst, NULL, size - off, 0);
        if (n > 0) {
            off += (uint64_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        break; /* not supported here (or end of file): copy by hand */
    }
    while (off < size) {
        if (!buf && !(buf = malloc(chunk)))
            return -1;
        size_t want = size - off < chunk ? (size_t)(size - off) : chunk;
        int rc = read_at(src, buf, want, off);
        if (rc != 0) {
            if (rc == -2)
                errno = EIO;
            free(buf);
            return -1;
        }
        if (write_all(dst, buf, want) < 0) {
            free(buf);
            return -1;
        }
        off += want;
    }
    free(buf);
    return 0;
}

/* copy_shared: this rank's finished node-local shard to the shared
 * directory's step directory (created), fsync'd; a failure is the rank's. */
static void copy_shared(ddl_ckpt_t *ck)
{
    char path[PATH_MAX + 64];
    ddl_error_t err;
    if (ck->err != DDL_OK || !ck->local || !ck->shared)
        return;
    step_path(path, sizeof path, ck->sdir, ck->step, ck->shardname);
    if (ck->sdirfd < 0) {
        ck_fail(ck, DDL_ERR_IO, "the shared checkpoint directory %s is not open", ck->sdir);
        return;
    }
    if ((mkdirat(ck->sdirfd, ck->stepname, 0700) < 0 && errno != EEXIST) ||
        (ck->sstepfd = openat(ck->sdirfd, ck->stepname,
                              O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        ck_fail(ck, DDL_ERR_IO, "cannot create the step directory of %s: %s (errno %d): fix "
                "the permissions of the shared checkpoint directory", path, strerror(errno),
                errno);
        return;
    }
    if (ddl_dir_check(ck->sstepfd, path, geteuid(), "checkpoint step directory", &err) < 0) {
        ck_fail(ck, DDL_ERR_IO, "%s", err.text);
        return;
    }
    int src = openat(ck->stepfd, ck->shardname, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int dst = openat(ck->sstepfd, ck->shardname,
                     O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (src < 0 || dst < 0 || copy_fd(src, dst, ck->off) < 0 || fsync(dst) < 0 ||
        fsync(ck->sstepfd) < 0)
        ck_fail(ck, DDL_ERR_IO, "cannot copy %s to %s: %s (errno %d): %s", ck->path, path,
                strerror(errno), errno, errno == ENOSPC || errno == EDQUOT
                ? "free space in the shared checkpoint file system" : "check the storage");
    if (src >= 0)
        close(src);
    if (dst >= 0)
        close(dst);
}

/* node_of_rank: the node id of comm rank r. */
static int node_of_rank(const ddl_comm_t *comm, int r)
{
    return ddl_ctx.node_of ? ddl_ctx.node_of[ddl_world_of(comm, r)] : 0;
}

/* partners: partner[r] for every comm rank: the rank at the same place
 * among its node's ranks (modulo that node's count) on the next node, in
 * the order in which the nodes first appear; -1 with a single node.  So a
 * node's ranks copy to one other node, and no node holds its own copies.
 * 0, or -1 (out of memory). */
static int partners(const ddl_comm_t *comm, int *partner)
{
    int n = comm->size, nn = 0;
    int *nodes = malloc(sizeof(int) * (size_t)n), *idx = malloc(sizeof(int) * (size_t)n);
    int *place = malloc(sizeof(int) * (size_t)n), *count = calloc((size_t)n, sizeof(int));
    if (!nodes || !idx || !place || !count) {
        free(nodes), free(idx), free(place), free(count);
        return -1;
    }
    for (int r = 0; r < n; r++) {
        int nd = node_of_rank(comm, r), i;
        for (i = 0; i < nn && nodes[i] != nd; i++)
            ;
        if (i == nn)
            nodes[nn++] = nd;
        idx[r] = i;
        place[r] = count[i]++;
    }
    for (int r = 0; r < n; r++) {
        partner[r] = -1;
        if (nn < 2)
            continue;
        int next = (idx[r] + 1) % nn, want = place[r] % count[next];
        for (int q = 0; q < n; q++)
            if (idx[q] == next && place[q] == want) {
                partner[r] = q;
                break;
            }
    }
    free(nodes), free(idx), free(place), free(count);
    return 0;
}

/* node_leader: the lowest comm rank on this rank's node. */
static int node_leader(const ddl_comm_t *comm)
{
    int me = node_of_rank(comm, comm->rank);
    for (int r = 0; r < comm->size; r++)
        if (node_of_rank(comm, r) == me)
            return r;
    return comm->rank;
}

/* write_copy: a received shard image as name in the step directory, not
 * fsync'd (write_atomic: a process that ends inside the write, killed or
 * exiting without ddl_finalize() while the restore's copy is stored,
 * leaves no partial shard under its name, only a temporary file that goes
 * with the step directory).  die: DDL_CKPT_FAULT=store. */
static int write_copy(int stepfd, const char *name, const void *img, size_t len, int die)
{
    const char *what;
    char tmp[96];
    return write_atomic(stepfd, name, img, len, 0, die ? W_DIE : 0, &what, tmp, sizeof tmp);
}

static pthread_mutex_t store_mu = PTHREAD_MUTEX_INITIALIZER; /* running, the join */

static void *store_main(void *arg)
{
    (void)arg;
    if (store.slow) {
        ddl_warn("DDL_CKPT_FAULT=slowstore: the store of %s/%s starts 1 s late", store.dir,
                 store.name);
        sleep(1);
    }
    int sfd = open(store.dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sfd < 0 || write_copy(sfd, store.name, store.img, store.len, store.die) < 0)
        ddl_warn("cannot store the partner copy %s/%s: %s (a later restore takes it from the "
                 "partner again)", store.dir, store.name, strerror(errno));
    if (sfd >= 0)
        close(sfd);
    pthread_mutex_lock(&held_mu);
    if (store.slow)
        ddl_warn("DDL_CKPT_FAULT=slowstore: %s stored %s the program had read every buffer of "
                 "it", store.name, store.free_img ? "after" : "before");
    if (store.free_img)
        big_free((void *)store.img, store.len);
    store.img = NULL;
    store.free_img = 0;
    pthread_mutex_unlock(&held_mu);
    return NULL;
}

/* store_start: store img (len bytes, held's) as rank's shard of step sl in
 * ldir, in the background; in the caller's thread if no thread starts. */
static void store_start(const char *ldir, int64_t sl, int rank, const void *img, size_t len)
{
    pthread_mutex_lock(&held_mu);
    textf(store.dir, sizeof store.dir, "%s/step-%08" PRId64, ldir, sl);
    textf(store.name, sizeof store.name, "rank-%d.shard", rank);
    store.img = img;
    store.len = len;
    store.free_img = 0;
    store.die = fault("store", rank);
    store.slow = fault("slowstore", rank);
    pthread_mutex_unlock(&held_mu);
    pthread_mutex_lock(&store_mu);
    store.running = pthread_create(&store.thread, NULL, store_main, NULL) == 0;
    pthread_mutex_unlock(&store_mu);
    if (!store.running)
        store_main(NULL);
}

static void store_wait(void)
{
    pthread_mutex_lock(&store_mu);
    if (store.running)
        pthread_join(store.thread, NULL);
    store.running = 0;
    pthread_mutex_unlock(&store_mu);
}

/* partner_copies: send this rank's finished shard to its partner and write
 * the shards of the ranks whose partner it is beside its own.  Collective.
 * I/O failures are the rank's (ck_fail); returns a transport error. */
static ddl_status_t partner_copies(ddl_ckpt_t *ck)
{
    ddl_comm_t *comm = ck->comm;
    int n = ck->size, nin = 0;
    int *partner = malloc(sizeof(int) * (size_t)n);
    int64_t *len = malloc(sizeof(int64_t) * (size_t)n), mine = -1;
    void **bufs = calloc((size_t)n, sizeof *bufs), **reqs = calloc((size_t)n + 1, sizeof *reqs);
    void *img = MAP_FAILED;
    ddl_status_t st = DDL_OK;
    if (!partner || !len || !bufs || !reqs || partners(comm, partner) < 0) {
        st = ddl_fail(DDL_ERR_NOMEM, "out of memory for the partner copies of %d ranks", n);
        goto out;
    }
    if (partner[ck->rank] >= 0 && ck->err == DDL_OK && ck->off > 0) {
        int fd = openat(ck->stepfd, ck->shardname, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            img = mmap(NULL, (size_t)ck->off, PROT_READ, MAP_SHARED, fd, 0);
            close(fd);
        }
        if (img == MAP_FAILED)
            ck_fail(ck, DDL_ERR_IO, "cannot map %s to send it to rank %d: %s (errno %d)",
                    ck->path, partner[ck->rank], strerror(errno), errno);
        else
            mine = (int64_t)ck->off;
    }
    if ((st = ddl_allgather(comm, &mine, len, 1, DDL_INT64)) != DDL_OK)
        goto out;
    if (partner[ck->rank] < 0)
        goto out; /* one node: no partner */
    uint32_t seq = comm->seq++;
    for (int r = 0; r < n && st == DDL_OK; r++) {
        if (partner[r] != ck->rank || len[r] < 0)
            continue;
        if (!(bufs[r] = malloc(len[r] ? (size_t)len[r] : 1))) {
            st = ddl_fail(DDL_ERR_NOMEM, "out of memory for rank %d's partner copy (%" PRId64
                          " bytes)", r, len[r]);
            break;
        }
        st = ddl_tl_irecv(comm, bufs[r], (size_t)len[r], ddl_tag(comm, seq, r), &reqs[nin++]);
    }
    if (st == DDL_OK && mine >= 0)
        st = ddl_tl_isend(comm, partner[ck->rank], img, (size_t)mine,
                          ddl_tag(comm, seq, ck->rank), &reqs[nin++]);
    if (st == DDL_OK)
        st = ddl_tl_waitall(comm, reqs, nin);
    else
        ddl_tl_abandon(comm, reqs, nin);
    if (st != DDL_OK)
        goto out;
    for (int r = 0; r < n; r++) {
        char name[32];
        if (!bufs[r] || ck->err != DDL_OK)
            continue;
        textf(name, sizeof name, "rank-%d.shard", r);
        if (write_copy(ck->stepfd, name, bufs[r], (size_t)len[r], 0) < 0)
            ck_fail(ck, DDL_ERR_IO, "cannot write rank %d's partner copy %s/%s: %s (errno %d): "
                    "%s", r, ck->stepdir, name, strerror(errno), errno, errno == ENOSPC
                    ? "free space in the node-local checkpoint directory" : "check the storage");
    }
out:
    if (img != MAP_FAILED)
        munmap(img, (size_t)ck->off);
    for (int r = 0; bufs && r < n; r++)
        free(bufs[r]);
    free(bufs), free(reqs), free(partner), free(len);
    return st;
}

/* partner_transfer: async mode's partner copies, in the background thread:
 * the buffers already copied in memory go to the partner (the index's
 * length, an index of names and sizes, then each buffer, with the three
 * sequence numbers the commit reserved), and those of the ranks whose
 * partner this is arrive into pooled buffers, written next as their shards
 * (the same bytes as their own files).  No collective: each rank only talks
 * to its partner and to the ranks it is the partner of, so the caller's
 * collectives go on meanwhile.  A failure is this rank's (ck_fail), decided
 * at the next ddl_ckpt_wait like a write error. */
static void partner_transfer(ddl_ckpt_t *ck)
{
    ddl_comm_t *comm = ck->comm;
    int n = ck->size, nreq = 0, nlen = 0;
    int *partner = malloc(sizeof(int) * (size_t)n);
    int64_t *ilen = calloc((size_t)n, sizeof *ilen), mine = 0;
    unsigned char *index = NULL, **rindex = calloc((size_t)n, sizeof *rindex);
    size_t maxreq = 3 * (size_t)n + ck->n + 3, ix = 0;
    void **reqs = calloc(maxreq, sizeof *reqs);
    ddl_status_t st = DDL_OK;
    const uint32_t seq0 = ck->pseq, seq1 = ck->pseq + 1, seq2 = ck->pseq + 2;
    if (!partner || !ilen || !rindex || !reqs || partners(comm, partner) < 0) {
        ck_fail(ck, DDL_ERR_NOMEM, "out of memory for the partner copies of %d ranks", n);
        goto out;
    }
    if (partner[ck->rank] < 0)
        goto out; /* one node: no partner */
    if (ck->err == DDL_OK) { /* index: count, then per buffer name length, size, name */
        size_t need = 8;
        for (size_t i = 0; i < ck->n; i++)
            need += 12 + strlen(ck->recs[i].name);
        if ((index = malloc(need))) {
            put64(index, ck->n);
            ix = 8;
            for (size_t i = 0; i < ck->n; i++) {
                size_t nl = strlen(ck->recs[i].name);
                put32(index + ix, (uint32_t)nl);
                put64(index + ix + 4, ck->recs[i].len);
                memcpy(index + ix + 12, ck->recs[i].name, nl);
                ix += 12 + nl;
            }
            mine = (int64_t)ix;
        } else {
            ck_fail(ck, DDL_ERR_NOMEM, "out of memory for the index of the partner copy");
        }
    }
    /* the lengths first: 0 from a rank that has nothing to send */
    for (int r = 0; r < n && st == DDL_OK; r++)
        if (partner[r] == ck->rank) {
            st = ddl_tl_irecv(comm, &ilen[r], sizeof ilen[r], ddl_tag(comm, seq0, r),
                              &reqs[nreq++]);
            nlen++;
        }
    if (st == DDL_OK)
        st = ddl_tl_isend(comm, partner[ck->rank], &mine, sizeof mine,
                          ddl_tag(comm, seq0, ck->rank), &reqs[nreq++]);
    if (st == DDL_OK && mine > 0) {
        st = ddl_tl_isend(comm, partner[ck->rank], index, (size_t)mine,
                          ddl_tag(comm, seq1, ck->rank), &reqs[nreq++]);
        for (size_t i = 0; i < ck->n && st == DDL_OK; i++)
            st = ddl_tl_isend(comm, partner[ck->rank], ck->recs[i].data, ck->recs[i].len,
                              ddl_tag(comm, seq2, ck->rank), &reqs[nreq++]);
    }
    if (st == DDL_OK)
        st = ddl_tl_waitall_bg(comm, reqs, nlen, &ck->cancel); /* the sends go on meanwhile */
    int first_index = nreq;
    for (int r = 0; r < n && st == DDL_OK; r++) {
        if (partner[r] != ck->rank || ilen[r] <= 0)
            continue;
        if (ilen[r] > (int64_t)1 << 30 || !(rindex[r] = malloc((size_t)ilen[r]))) {
            st = ddl_fail(DDL_ERR_NOMEM, "out of memory for rank %d's partner index (%" PRId64
                          " bytes)", r, ilen[r]);
            break;
        }
        st = ddl_tl_irecv(comm, rindex[r], (size_t)ilen[r], ddl_tag(comm, seq1, r),
                          &reqs[nreq++]);
    }
    if (st == DDL_OK)
        st = ddl_tl_waitall_bg(comm, reqs + first_index, nreq - first_index, &ck->cancel);
    int nin = 0;
    for (int r = 0; r < n; r++)
        nin += rindex[r] != NULL;
    if (st == DDL_OK && nin && !(ck->pcopies = calloc((size_t)nin, sizeof *ck->pcopies)))
        st = ddl_fail(DDL_ERR_NOMEM, "out of memory for %d partner copies", nin);
    for (int r = 0; r < n && st == DDL_OK; r++) {
        if (!rindex[r])
            continue;
        const unsigned char *p = rindex[r];
        size_t len = (size_t)ilen[r], off = 8;
        uint64_t cnt = len >= 8 ? get64(p) : 0;
        ddl_ckpt_t *pc = calloc(1, sizeof *pc);
        if (!pc || cnt > (len - 8) / 12 ||
            !(pc->recs = calloc(cnt ? (size_t)cnt : 1, sizeof *pc->recs))) {
            free(pc);
            st = ddl_fail(DDL_ERR_NOMEM, "out of memory for rank %d's partner copy", r);
            break;
        }
        ck->pcopies[ck->npcopies++] = pc;
        pc->rank = r;
        pc->local = 1;
        pc->size = ck->size;
        pc->step = ck->step;
        pc->fd = pc->stepfd = pc->sdirfd = pc->sstepfd = -1;
        pc->dirfd = ck->dirfd >= 0 ? dup(ck->dirfd) : -1;
        textf(pc->dir, sizeof pc->dir, "%s", ck->dir);
        textf(pc->stepdir, sizeof pc->stepdir, "%s", ck->stepdir);
        textf(pc->stepname, sizeof pc->stepname, "%s", ck->stepname);
        textf(pc->shardname, sizeof pc->shardname, "rank-%d.shard", r);
        textf(pc->path, sizeof pc->path, "%s/%s", ck->stepdir, pc->shardname);
        if (pc->dirfd < 0)
            ck_fail(pc, DDL_ERR_IO, "cannot open the node-local directory %s for rank %d's "
                    "partner copy", ck->dir, r);
        for (uint64_t i = 0; i < cnt && st == DDL_OK; i++) {
            if (off + 12 > len)
                break;
            uint32_t nl = get32(p + off);
            uint64_t bl = get64(p + off + 4);
            size_t cap;
            if (nl == 0 || nl > DDL_CKPT_NAME_MAX || off + 12 + nl > len)
                break;
            char *name = malloc(nl + 1);
            void *buf = name ? pool_take((size_t)bl, &cap) : NULL;
            if (!buf) {
                free(name);
                st = ddl_fail(DDL_ERR_NOMEM, "out of memory for rank %d's partner copy (%"
                              PRIu64 " bytes)", r, bl);
                break;
            }
            memcpy(name, p + off + 12, nl);
            name[nl] = '\0';
            pc->recs[pc->n++] = (rec_t){.name = name, .data = buf, .len = (size_t)bl, .cap = cap};
            off += 12 + nl;
            if ((size_t)nreq >= maxreq) {
                void **nr = realloc(reqs, 2 * maxreq * sizeof *nr);
                if (!nr) {
                    st = ddl_fail(DDL_ERR_NOMEM, "out of memory for the partner transfers");
                    break;
                }
                memset(nr + maxreq, 0, maxreq * sizeof *nr);
                reqs = nr;
                maxreq *= 2;
            }
            st = ddl_tl_irecv(comm, buf, (size_t)bl, ddl_tag(comm, seq2, r), &reqs[nreq++]);
        }
        if (st == DDL_OK && pc->n != cnt)
            st = ddl_fail(DDL_ERR_IO, "rank %d's partner index is damaged", r);
    }
    if (st == DDL_OK)
        st = ddl_tl_waitall_bg(comm, reqs, nreq, &ck->cancel);
    else
        ddl_tl_abandon(comm, reqs, nreq);
    if (st != DDL_OK)
        ck_fail(ck, st, "the partner copies of checkpoint step %" PRId64 " (to rank %d, from "
                "the ranks it keeps copies for) failed: %s", ck->step, partner[ck->rank],
                ddl_last_error());
out:
    for (int r = 0; rindex && r < n; r++)
        free(rindex[r]);
    free(rindex), free(index), free(reqs), free(partner), free(ilen);
}

static void *async_writer(void *arg)
{
    ddl_ckpt_t *ck = arg;
    if (ck->local) {
        partner_transfer(ck);
        /* the committed steps beyond keep, which the caller no longer waits for */
        if (ck->leader && ck->dirfd >= 0 &&
            cleanup_at(ck->dirfd, ck->dir, ck->keep, CLEAN_OLD) != DDL_OK)
            ddl_debug("node-local checkpoints in %s: %s", ck->dir, ddl_last_error());
    }
    shard_open(ck);
    for (size_t i = 0; i < ck->n; i++) {
        shard_record(ck, ck->recs[i].name, ck->recs[i].data, ck->recs[i].len);
    }
    shard_close(ck);
    /* the partner copies beside it, once this rank's own step directory exists */
    for (int p = 0; p < ck->npcopies; p++) {
        ddl_ckpt_t *pc = ck->pcopies[p];
        shard_open(pc);
        for (size_t i = 0; i < pc->n; i++)
            shard_record(pc, pc->recs[i].name, pc->recs[i].data, pc->recs[i].len);
        shard_close(pc);
        if (pc->err != DDL_OK)
            ck_fail(ck, pc->err, "rank %d's partner copy: %s", pc->rank, pc->errtext);
    }
    copy_shared(ck);
    atomic_store(&ck->done, 1);
    return NULL;
}

/* ck_free_recs: ck's names and buffers (into the pool, if there is one),
 * and its partner copies' (async). */
static void ck_free_recs(ddl_ckpt_t *ck)
{
    for (size_t i = 0; i < ck->n; i++) {
        if (ck->names)
            free(ck->names[i]);
        if (ck->recs && pool)
            pool[npool++] = (buf_t){ck->recs[i].data, ck->recs[i].cap};
        else if (ck->recs)
            free(ck->recs[i].data);
    }
    free(ck->names);
    free(ck->recs);
    for (int p = 0; p < ck->npcopies; p++) {
        ddl_ckpt_t *pc = ck->pcopies[p];
        if (!pc)
            continue;
        if (pc->fd >= 0)
            close(pc->fd);
        if (pc->stepfd >= 0)
            close(pc->stepfd);
        if (pc->dirfd >= 0)
            close(pc->dirfd);
        for (size_t i = 0; i < pc->n; i++)
            free(pc->recs[i].name);
        for (size_t i = 0; i < pc->n; i++) {
            if (pool)
                pool[npool++] = (buf_t){pc->recs[i].data, pc->recs[i].cap};
            else
                free(pc->recs[i].data);
        }
        free(pc->recs);
        free(pc);
    }
    free(ck->pcopies);
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
    if (ck->sstepfd >= 0)
        close(ck->sstepfd);
    if (ck->sdirfd >= 0)
        close(ck->sdirfd);
    if (ck->recs) {
        size_t total = ck->n;
        for (int p = 0; p < ck->npcopies; p++)
            total += ck->pcopies[p] ? ck->pcopies[p]->n : 0;
        pool_clear(); /* buffers this checkpoint did not reuse */
        pool = calloc(total ? total : 1, sizeof *pool);
    }
    ck_free_recs(ck);
    free(ck);
}

/* ---- the collective parts ---- */

typedef struct {
    int32_t status;
    char text[ERR_TEXT];
} verdict_t;

/* publish: write MANIFEST in stepfd and move latest in dirfd (directory
 * dir, step directory stepdir): all shards are good. */
static ddl_status_t publish_at(ddl_ckpt_t *ck, const int64_t *all, char *err, size_t errlen,
                               const char *dir, int dirfd, int stepfd, const char *stepdir)
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
    step_path(path, sizeof path, dir, ck->step, "MANIFEST");
    int rc = stepfd < 0 ? (errno = EBADF, what = "open", -1)
                        : write_file_atomic(stepfd, "MANIFEST", text, (ck->faults & F_RENAME) != 0,
                                            &what, tmp, sizeof tmp);
    free(text);
    if (rc < 0) {
        textf(err, errlen, "cannot %s %s/%s (for %s): %s (errno %d)", what, stepdir, tmp,
              path, strerror(errno), errno);
        rm_step_at(dirfd, ck->stepname);
        return DDL_ERR_IO;
    }
    snprintf(path, sizeof path, "%s/latest", dir);
    snprintf(val, sizeof val, "%" PRId64 "\n", ck->step);
    if (write_file_atomic(dirfd, "latest", val, 0, &what, tmp, sizeof tmp) < 0) {
        textf(err, errlen, "cannot %s %s/%s (for %s): %s (errno %d)", what, dir, tmp, path,
              strerror(errno), errno);
        /* latest still names the previous step; this one is not kept */
        rm_step_at(dirfd, ck->stepname);
        return DDL_ERR_IO;
    }
    /* async node-local: the next checkpoint's thread removes the old steps */
    int clean = ck->local && (ck->flags & DDL_CKPT_ASYNC) && dirfd == ck->dirfd
                    ? CLEAN_PARTIAL : CLEAN_ALL;
    if (cleanup_at(dirfd, dir, ck->keep, clean) != DDL_OK)
        ddl_warn("checkpoint step %" PRId64 " committed, but %s", ck->step, ddl_last_error());
    return DDL_OK;
}

/* agree: every rank's status -> the first failed rank's on every rank,
 * with its text in text (ERR_TEXT bytes, in and out) and *from its rank;
 * a transport error is returned as it is, with *from -1.  With levels
 * (DDL_CKPT_LEVEL_SHARED + 1 ints, zeroed), the same exchange counts the
 * ranks at each level, lvl being this rank's (a restore's last exchange). */
static ddl_status_t agree(ddl_comm_t *comm, ddl_status_t mine, int lvl, int *levels, char *text,
                          int *from)
{
    int32_t m[2] = {(int32_t)mine, lvl}, *all = malloc(sizeof m * (size_t)comm->size);
    ddl_status_t st;
    *from = -1;
    if (!all)
        return ddl_fail(DDL_ERR_NOMEM, "out of memory for %d checkpoint results", comm->size);
    if ((st = ddl_allgather(comm, m, all, 2, DDL_INT32)) != DDL_OK) {
        free(all);
        return st;
    }
    int bad = -1;
    for (int r = 0; r < comm->size; r++) {
        if (all[2 * r] != DDL_OK && bad < 0)
            bad = r;
        if (levels && all[2 * r + 1] >= 0 && all[2 * r + 1] <= DDL_CKPT_LEVEL_SHARED)
            levels[all[2 * r + 1]]++;
    }
    st = bad >= 0 ? (ddl_status_t)all[2 * bad] : DDL_OK;
    free(all);
    if (bad < 0)
        return DDL_OK;
    ddl_status_t bst = ddl_bcast(comm, text, ERR_TEXT, DDL_UINT8, bad);
    if (bst != DDL_OK)
        return bst;
    text[ERR_TEXT - 1] = '\0';
    *from = bad;
    return st;
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
    if (ck->faults & F_EXIT) {
        /* the peers go on: rank 0 publishes, then their agreement fails */
        ddl_warn("DDL_CKPT_FAULT=exit: rank %d exits inside the commit of step %" PRId64,
                 ck->rank, ck->step);
        _exit(1);
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
        if ((ck->rank == 0 || (ck->local && ck->leader)) && ck->dirfd >= 0)
            rm_step_at(ck->dirfd, ck->stepname);
        if (ck->rank == 0 && ck->shared && ck->sdirfd >= 0)
            rm_step_at(ck->sdirfd, ck->stepname);
        return ddl_fail(DDL_ERR_IO, "checkpoint step %" PRId64 " not committed (the previous "
                        "one stays latest): rank %d: %.*s", ck->step, bad, ERR_TEXT - 100,
                        v.text);
    }
    if (!ck->local) {
        if (ck->rank == 0)
            v.status = publish_at(ck, all, v.text, sizeof v.text, ck->dir, ck->dirfd, ck->stepfd,
                                  ck->stepdir);
    } else {
        char sstepdir[PATH_MAX];
        if (ck->leader) {
            atomic_nosync = 1;
            v.status = publish_at(ck, all, v.text, sizeof v.text, ck->dir, ck->dirfd, ck->stepfd,
                                  ck->stepdir);
            atomic_nosync = 0;
        }
        if (ck->rank == 0 && ck->shared && v.status == DDL_OK) {
            step_path(sstepdir, sizeof sstepdir, ck->sdir, ck->step, NULL);
            v.status = publish_at(ck, all, v.text, sizeof v.text, ck->sdir, ck->sdirfd,
                                  ck->sstepfd, sstepdir);
        }
    }
    free(all);
    int from;
    st = agree(ck->comm, (ddl_status_t)v.status, 0, NULL, v.text, &from);
    if (st != DDL_OK && from < 0)
        return st; /* the transport's error */
    if (st != DDL_OK)
        return ddl_fail(st, "checkpoint step %" PRId64 " not committed (the previous one "
                        "stays latest): rank %d: %.*s", ck->step, from, ERR_TEXT - 100, v.text);
    ddl_debug("checkpoint step %" PRId64 " committed in %s%s%s", ck->step, ck->dir,
              ck->shared ? " and " : "", ck->shared ? ck->sdir : "");
    return DDL_OK;
}

/* join_writer: wait for ck's background thread.  While it transfers the
 * partner copies, this thread keeps doing what a waiting collective does
 * (heartbeats, the agent's notices: the idle hook), so that an abort
 * decided meanwhile reaches the transfer, which then gives up. */
static void join_writer(ddl_ckpt_t *ck)
{
    if (!ck->thread_started)
        return;
    ddl_tl_t *tl = ck->comm->tl;
    while (!atomic_load(&ck->done)) { /* the transfer's wait sees the abort itself */
        if (tl && tl->idle)
            tl->idle();
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    pthread_join(ck->thread, NULL);
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
    join_writer(ck);
    ddl_status_t st = decide(ck);
    ck_free(ck);
    return st;
}

void ddl_ckpt_drop_pending(void)
{
    ddl_ckpt_t *ck = pending;
    held_release();
    store_wait();
    if (!ck)
        return;
    pending = NULL;
    atomic_store(&ck->cancel, 1);
    if (ck->thread_started)
        pthread_join(ck->thread, NULL);
    ddl_debug("async checkpoint step %" PRId64 " dropped uncommitted: the world it was taken in "
              "ended", ck->step);
    ck_free(ck);
}

/* ddl_ckpt_finish_pending: ddl_finalize()'s hook (ddl_int.h); with the
 * node-local level in use and no stop requested, the training ended: each
 * node's first rank removes that level's checkpoints once all are done. */
ddl_status_t ddl_ckpt_finish_pending(void)
{
    int64_t step;
    ddl_status_t st = DDL_OK;
    if (pending && (st = ddl_ckpt_wait(&step)) != DDL_OK)
        ddl_warn("async checkpoint step %" PRId64 " failed at ddl_finalize(): %s", step,
                 ddl_last_error());
    store_wait();
    pool_clear();
    if (local_used[0] && !ddl_stop_returned && st == DDL_OK &&
        ddl_barrier(&ddl_ctx.world) == DDL_OK && node_leader(&ddl_ctx.world) == ddl_ctx.rank) {
        ddl_error_t err;
        int dfd = ddl_dir_open(local_used, 0, "node-local checkpoint directory", &err);
        if (dfd >= 0) {
            if (cleanup_at(dfd, local_used, 1, CLEAN_ALL) != DDL_OK || rm_step_all(dfd) < 0 ||
                unlinkat(dfd, "latest", 0) < 0)
                ddl_debug("node-local checkpoints in %s: %s", local_used, ddl_last_error());
            close(dfd);
            if (rmdir(local_used) < 0 && errno != ENOTEMPTY && errno != EEXIST)
                ddl_debug("cannot remove %s: %s", local_used, strerror(errno));
        }
    }
    local_used[0] = '\0';
    return st;
}

/* ---- restoring ---- */

/* check_image: a whole shard in memory against its rank, step and the
 * manifest's CRC, each buffer's CRC-32C included.  0, or -1 with why. */
static int check_image(const unsigned char *b, uint64_t size, int rank, int64_t step,
                       uint32_t mcrc, char *why, size_t wlen)
{
    if (size < HDR_BYTES + TRAIL_BYTES || memcmp(b, SHARD_MAGIC, 8) != 0 ||
        get32(b + 8) != SHARD_VERSION || get32(b + 12) != (uint32_t)rank ||
        get64(b + 16) != (uint64_t)step) {
        textf(why, wlen, "no ddl shard header for rank %d, step %" PRId64, rank, step);
        return -1;
    }
    uint32_t crc = ddl_crc32c(0, b, HDR_BYTES), nrec = 0;
    uint64_t off = HDR_BYTES;
    while (off + TRAIL_BYTES < size) {
        if (off + REC_BYTES + TRAIL_BYTES > size)
            break;
        uint32_t nlen = get32(b + off);
        uint64_t len = get64(b + off + 8);
        if (nlen == 0 || nlen > DDL_CKPT_NAME_MAX || off + REC_BYTES + nlen + TRAIL_BYTES > size ||
            len > size - off - REC_BYTES - nlen - TRAIL_BYTES)
            break;
        crc = ddl_crc32c(crc, b + off, REC_BYTES + nlen);
        if (ddl_crc32c(0, b + off + REC_BYTES + nlen, (size_t)len) != get32(b + off + 4)) {
            textf(why, wlen, "buffer %u fails its checksum (CRC-32C)", nrec);
            return -1;
        }
        off += REC_BYTES + nlen + len;
        nrec++;
    }
    const unsigned char *t = b + off;
    if (off + TRAIL_BYTES != size || memcmp(t, TRAIL_MAGIC, 8) != 0 || get32(t + 8) != nrec ||
        (crc = ddl_crc32c(crc, t, 12)) != get32(t + 12) || crc != mcrc) {
        textf(why, wlen, "fails its checksum (CRC-32C) or structure check");
        return -1;
    }
    return 0;
}

/* big_alloc: len bytes of anonymous memory with transparent huge pages
 * asked for: a restore touches whole shards of fresh memory, and 4 KiB
 * page faults cost more than the copy (see the pool above); NULL if none.
 * big_free releases it. */
static void *big_alloc(size_t len)
{
    void *p = mmap(NULL, len ? len : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                   0);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (len >= (2u << 20))
        madvise(p, len, MADV_HUGEPAGE);
#endif
    return p;
}

static void big_free(void *p, size_t len)
{
    if (p)
        munmap(p, len ? len : 1);
}

/* load_shard: rank's shard of step in dir, read whole and checked against
 * the manifest m: its size, with *img (malloc'd) if img is not NULL; 0
 * (missing or damaged, why says which) or -1 (out of memory).  *img is
 * released with big_free(). */
static int64_t load_shard(const char *dir, int64_t step, int rank, const manifest_t *m,
                          void **img, char *why, size_t wlen)
{
    char path[PATH_MAX + 64];
    struct stat sb;
    unsigned char *b = NULL;
    if (img)
        *img = NULL;
    shard_path(path, sizeof path, dir, step, rank);
    if (rank >= m->world) {
        textf(why, wlen, "step %" PRId64 " in %s has %d shards", step, dir, m->world);
        return 0;
    }
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &sb) < 0) {
        textf(why, wlen, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return 0;
    }
    uint64_t size = m->size[rank];
    if ((uint64_t)sb.st_size != size) {
        textf(why, wlen, "%s has %lld bytes, its manifest says %" PRIu64, path,
              (long long)sb.st_size, size);
        close(fd);
        return 0;
    }
    if (!(b = big_alloc((size_t)size))) {
        close(fd);
        return -1;
    }
    char inner[200] = "cannot be read";
    int rc = read_at(fd, b, (size_t)size, 0);
    close(fd);
    if (rc != 0 || check_image(b, size, rank, step, m->crc[rank], inner, sizeof inner) < 0) {
        textf(why, wlen, "%s: %s", path, inner);
        big_free(b, (size_t)size);
        return 0;
    }
    if (img)
        *img = b; /* big_free() it */
    else
        big_free(b, (size_t)size);
    return (int64_t)size;
}

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* restore_shared: where rank's shard of step is valid in the shared dir. */
static int restore_shared(const char *dir, int64_t step, int rank, char *why, size_t wlen)
{
    manifest_t m;
    if (read_manifest(dir, step, &m) != DDL_OK) {
        textf(why, wlen, "%s", ddl_last_error());
        return 0;
    }
    int64_t got = load_shard(dir, step, rank, &m, NULL, why, wlen);
    manifest_free(&m);
    return got > 0;
}

/* holder: the first rank of another node than rank i's that holds a copy
 * of shard i (have: vec int64 per rank, as partner_round's), or -3 (none). */
static int holder(const ddl_comm_t *comm, const int64_t *have, size_t vec, int i)
{
    for (int q = 0; q < comm->size; q++)
        if (have[(size_t)q * vec + 1 + (size_t)i] > 0 &&
            node_of_rank(comm, q) != node_of_rank(comm, i))
            return q;
    return -3;
}

/* A partner copy travels in pieces of this size, each sent as soon as it
 * is read: the transfer of one piece overlaps the read of the next, and a
 * 4-8 MiB read keeps a disk busier than one read of the whole shard. */
#define COPY_PIECE ((size_t)8 << 20)

static size_t pieces(size_t bytes)
{
    return bytes ? (bytes + COPY_PIECE - 1) / COPY_PIECE : 1;
}

/* send_copy: rank i's shard of step sl, read from ldir piece by piece and
 * each piece sent to rank i as soon as it is read (tags seq0, seq0+1, ...);
 * *img (len bytes, zeroed) holds it until the sends complete.  A copy that
 * cannot be read goes on as zeros from there: its receiver checks every
 * byte and finds it damaged.  Requests are added at reqs[*nreq]. */
static ddl_status_t send_copy(ddl_comm_t *comm, const char *ldir, int64_t sl, int i,
                              size_t len, uint32_t seq0, void **img, void **reqs, int *nreq)
{
    char path[PATH_MAX + 64];
    struct stat sb;
    ddl_status_t st = DDL_OK;
    if (!(*img = big_alloc(len)))
        return ddl_fail(DDL_ERR_NOMEM, "out of memory for rank %d's partner copy", i);
    shard_path(path, sizeof path, ldir, sl, i);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &sb) < 0 || (uint64_t)sb.st_size != len) {
        ddl_warn("node-local copy of rank %d's shard, step %" PRId64 ", not used: %s: %s", i, sl,
                 path, fd < 0 ? strerror(errno) : "it changed since it was found");
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    for (size_t k = 0, off = 0; st == DDL_OK && k < pieces(len); k++, off += COPY_PIECE) {
        size_t part = len - off < COPY_PIECE ? len - off : COPY_PIECE;
        unsigned char *p = (unsigned char *)*img + off;
        errno = 0;
        if (fd >= 0 && read_at(fd, p, part, off) != 0) {
            ddl_warn("node-local copy of rank %d's shard, step %" PRId64 ", not used: %s: %s",
                     i, sl, path, errno ? strerror(errno) : "it is shorter than it was");
            memset(p, 0, part);
            close(fd);
            fd = -1;
        }
        st = ddl_tl_isend(comm, i, p, part, ddl_tag(comm, seq0 + (uint32_t)k, comm->rank),
                          &reqs[(*nreq)++]);
        comm->tl->ops->progress(comm->tl);
    }
    if (fd >= 0)
        close(fd);
    return st;
}

/* partner_round: one exchange of partner copies of step sl (have: what
 * every rank reported, vec int64 each: the manifest text's length, then
 * each shard's size).  Rank i with src[i] >= 0 receives the manifest text
 * and its shard from rank src[i], which reads it from ldir and sends it in
 * pieces (send_copy; the receiver checks it); this rank's into *rtext and
 * *rimg (*rimg_len bytes; the caller frees them, *rimg with big_free).
 * Every rank calls it, with the same src. */
static ddl_status_t partner_round(ddl_comm_t *comm, const char *ldir, int64_t sl,
                                  const char *mtext, size_t mlen, const int64_t *have,
                                  size_t vec, const int *src, char **rtext, void **rimg,
                                  size_t *rimg_len)
{
    const int n = comm->size, me = comm->rank;
    size_t most = 1, nreq_max = 2; /* the pieces of the largest copy; the requests */
    for (int i = 0; i < n; i++)
        if (src[i] >= 0) {
            size_t k = pieces((size_t)have[(size_t)src[i] * vec + 1 + (size_t)i]);
            most = k > most ? k : most;
            if (src[i] == me || i == me)
                nreq_max += 1 + k;
        }
    const uint32_t seq1 = comm->seq++, seq2 = comm->seq;
    comm->seq += (uint32_t)most;
    void **reqs = calloc(nreq_max, sizeof *reqs), **imgs = calloc((size_t)n, sizeof *imgs);
    int nreq = 0;
    ddl_status_t st = DDL_OK;
    if (!reqs || !imgs) {
        st = ddl_fail(DDL_ERR_NOMEM, "out of memory restoring %d ranks", n);
        goto out;
    }
    if (src[me] >= 0) {
        int h = src[me];
        size_t rl = (size_t)have[(size_t)h * vec], bytes = (size_t)have[(size_t)h * vec + 1 + me];
        *rimg_len = bytes;
        if (!(*rtext = malloc(rl + 1)) || !(*rimg = big_alloc(bytes))) {
            st = ddl_fail(DDL_ERR_NOMEM, "out of memory for the partner copy (%zu bytes)",
                          bytes);
            goto out;
        }
        (*rtext)[rl] = '\0';
        if ((st = ddl_tl_irecv(comm, *rtext, rl, ddl_tag(comm, seq1, h), &reqs[nreq++])) !=
            DDL_OK)
            goto abandon;
        for (size_t k = 0, off = 0; k < pieces(bytes); k++, off += COPY_PIECE)
            if ((st = ddl_tl_irecv(comm, (unsigned char *)*rimg + off,
                                   bytes - off < COPY_PIECE ? bytes - off : COPY_PIECE,
                                   ddl_tag(comm, seq2 + (uint32_t)k, h), &reqs[nreq++])) !=
                DDL_OK)
                goto abandon;
    }
    for (int i = 0; i < n; i++) {
        if (src[i] != me)
            continue;
        size_t len = (size_t)have[(size_t)me * vec + 1 + i];
        if ((st = ddl_tl_isend(comm, i, mtext, mlen, ddl_tag(comm, seq1, me), &reqs[nreq++])) !=
                DDL_OK ||
            (st = send_copy(comm, ldir, sl, i, len, seq2, &imgs[i], reqs, &nreq)) != DDL_OK)
            goto abandon;
    }
    st = ddl_tl_waitall(comm, reqs, nreq);
    goto out;
abandon:
    ddl_tl_abandon(comm, reqs, nreq);
out:
    for (int i = 0; imgs && i < n; i++)
        if (imgs[i])
            big_free(imgs[i], (size_t)have[(size_t)me * vec + 1 + (size_t)i]);
    free(imgs);
    free(reqs);
    return st;
}

/* take_copy: rank me's shard of step sl as received from rank h (its
 * manifest text rtext, the shard rimg of len bytes): the manifest written
 * into ldir and the shard checked in memory against it (the shard itself is
 * stored by store_start() once the restore succeeded, without an fsync: the
 * next checkpoint, not this copy, is what a later failure needs).
 * DDL_CKPT_LEVEL_PARTNER, or DDL_CKPT_LEVEL_NONE with why (and a warning). */
static int take_copy(const char *ldir, int64_t sl, int me, int h, const char *rtext,
                     const void *rimg, size_t len, char *why, size_t wlen)
{
    int lvl = DDL_CKPT_LEVEL_NONE;
    manifest_t rm;
    ddl_error_t err;
    const char *what = "";
    char tmp[96], stepname[32];
    int dfd = ddl_dir_open(ldir, 1, "node-local checkpoint directory", &err), sfd = -1;
    textf(stepname, sizeof stepname, "step-%08" PRId64, sl);
    if (dfd < 0)
        textf(why, wlen, "%s", err.text);
    else if ((mkdirat(dfd, stepname, 0700) < 0 && errno != EEXIST) ||
             (sfd = openat(dfd, stepname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                              O_CLOEXEC)) < 0 ||
             (atomic_nosync = 1, write_file_atomic(sfd, "MANIFEST", rtext, 0, &what, tmp,
                                                   sizeof tmp)) < 0)
        textf(why, wlen, "cannot write the partner's manifest into %s/%s: %s", ldir,
              stepname, strerror(errno));
    else if (read_manifest(ldir, sl, &rm) != DDL_OK)
        textf(why, wlen, "the partner's manifest: %s", ddl_last_error());
    else {
        char inner[200];
        if (me >= rm.world || len != rm.size[me] ||
            check_image(rimg, len, me, sl, rm.crc[me], inner, sizeof inner) < 0)
            textf(why, wlen, "the copy from rank %d: %s", h, me >= rm.world ||
                  len != rm.size[me] ? "its size differs from its manifest's" : inner);
        else
            lvl = DDL_CKPT_LEVEL_PARTNER; /* stored by store_start() once restored */
        manifest_free(&rm);
    }
    atomic_nosync = 0;
    if (lvl != DDL_CKPT_LEVEL_PARTNER) /* the sender does not check it: said here */
        ddl_warn("node-local copy of rank %d's shard, step %" PRId64 ", not used: %s", me, sl,
                 why);
    if (sfd >= 0)
        close(sfd);
    if (dfd >= 0)
        close(dfd);
    return lvl;
}

ddl_status_t ddl_ckpt_restore(ddl_comm_t *comm, const char *dir, int64_t *step, char *from,
                              size_t fromlen, int *level)
{
    char ldir[PATH_MAX], text[ERR_TEXT] = "", why[ERR_TEXT] = "";
    ddl_status_t st;
    int from_rank;
    ddl_clear_error();
    if (!step || !from || !fromlen)
        return ddl_fail(DDL_ERR_INVALID, "ddl_ckpt_restore: step or from is NULL or empty");
    *step = -1;
    from[0] = '\0';
    if (level)
        *level = DDL_CKPT_LEVEL_NONE;
    if (!ddl_ctx.initialized)
        return ddl_fail(DDL_ERR_NOT_INITIALIZED, "call ddl_init() before ddl_ckpt_restore()");
    if (!comm || !dir || !*dir)
        return ddl_fail(DDL_ERR_INVALID, "ddl_ckpt_restore: communicator or directory is NULL "
                        "or empty");
    const double t_start = mono_ms();
    held_release();
    store_wait();
    int local = local_dir_resolve(ldir, sizeof ldir);
    if (local < 0)
        return DDL_ERR_INVALID;
    if (local) { /* checked here too, so that a bad value stops the program at its start */
        long every;
        ddl_error_t err;
        if (ddl_env_long(DDLENV_DDL_CKPT_SHARED_EVERY, &every, &err) < 0)
            return ddl_fail(DDL_ERR_INVALID, "%s: use 0 (never) or K (every K-th checkpoint "
                            "goes to the shared directory)", err.text);
    }
    if (strlen(dir) >= fromlen || (local && strlen(ldir) >= fromlen))
        return ddl_fail(DDL_ERR_INVALID, "ddl_ckpt_restore: from has %zu bytes, too few for "
                        "the checkpoint directory paths: pass PATH_MAX", fromlen);
    const int n = comm->size, me = comm->rank;
    int64_t info[4] = {-1, 0, -1, DDL_OK}, *all = NULL;
    if (local) {
        manifest_t lm;
        snprintf(local_used, sizeof local_used, "%s", ldir);
        if (latest_step(ldir, &info[0]) != DDL_OK) {
            ddl_warn("node-local checkpoints ignored: %s", ddl_last_error());
            info[0] = -1;
        } else if (info[0] >= 0 && read_manifest(ldir, info[0], &lm) == DDL_OK) {
            info[1] = lm.world;
            manifest_free(&lm);
        } else if (info[0] >= 0) {
            ddl_warn("node-local checkpoint step %" PRId64 " ignored: %s", info[0],
                     ddl_last_error());
            info[0] = -1;
        }
    }
    if (me == 0 && (st = ddl_ckpt_latest(dir, &info[2])) != DDL_OK) {
        info[3] = st;
        snprintf(text, sizeof text, "%s", ddl_last_error());
    }
    if (!(all = malloc(sizeof info * (size_t)n)))
        return ddl_fail(DDL_ERR_NOMEM, "out of memory for %d ranks' checkpoint steps", n);
    if ((st = ddl_allgather(comm, info, all, 4, DDL_INT64)) != DDL_OK) {
        free(all);
        return st;
    }
    int64_t sl = -1, ss = all[2];
    int world = 0;
    ddl_status_t sst = (ddl_status_t)all[3];
    for (int r = 0; r < n; r++)
        sl = all[4 * r] > sl ? all[4 * r] : sl;
    for (int r = 0; r < n; r++)
        if (all[4 * r] == sl && all[4 * r + 1] > world)
            world = (int)all[4 * r + 1];
    free(all);
    /* a world that grew since the newest node-local checkpoint: its new
     * ranks have no copies there; the shared directory's newest checkpoint
     * (every rank's shard in one place) serves, even if older */
    int grew = local && sl >= 0 && n > world && ss >= 0;
    if (grew && me == 0)
        ddl_info("the world grew from %d to %d ranks since node-local checkpoint step %" PRId64
                 ": restoring step %" PRId64 " from the shared directory %s", world, n, sl, ss,
                 dir);
    if (!local || sl < 0 || ss > sl || grew) { /* the shared level (or none at all) */
        if (sst != DDL_OK) {
            if ((st = ddl_bcast(comm, text, sizeof text, DDL_UINT8, 0)) != DDL_OK)
                return st;
            text[sizeof text - 1] = '\0';
            return ddl_fail(sst, "%s", text);
        }
        snprintf(from, fromlen, "%s", dir);
        *step = ss;
        if (level && ss >= 0)
            *level = DDL_CKPT_LEVEL_SHARED;
        if (me == 0 && local && sl >= 0 && !grew)
            ddl_info("checkpoint step %" PRId64 " in the shared directory %s is newer than the "
                     "node-local level's (%" PRId64 "): restoring from %s", ss, dir, sl, dir);
        return DDL_OK;
    }
    if (sst != DDL_OK && me == 0)
        ddl_warn("the shared checkpoint directory is ignored: %s", text);
    if (n > world)
        return ddl_fail(DDL_ERR_INVALID, "checkpoint step %" PRId64 " has %d shards but the "
                        "communicator %d ranks: restore into a world of at most %d", sl, world,
                        n, world);

    /* which shards of step sl this node holds, by their sizes only: the
     * partner copies travel first (the ranks that lost their node wait for
     * nothing else), then each rank checks its own shard in full; a shard
     * is read once, and checked when it is read and when it arrives */
    int nl = 0, pl = 0, mynode = node_of_rank(comm, me);
    for (int r = 0; r < n; r++)
        if (node_of_rank(comm, r) == mynode) {
            pl += r < me;
            nl++;
        }
    size_t vec = (size_t)world + 1;
    int64_t *mine = calloc(vec, sizeof *mine), *have = malloc(vec * (size_t)n * sizeof *have);
    int *src = malloc(sizeof(int) * (size_t)n), *src2 = malloc(sizeof(int) * (size_t)n);
    int32_t *bad = malloc(sizeof(int32_t) * (size_t)n), own_bad = 0;
    char *mtext = NULL, *rtext = NULL, path[PATH_MAX + 64];
    void *rimg = NULL, *mimg = NULL; /* the partner's copy received; this rank's own */
    size_t mlen = 0, rimg_len = 0, mimg_len = 0;
    int lvl = DDL_CKPT_LEVEL_NONE;
    manifest_t lm = {0};
    int have_lm = 0;
    if (!mine || !have || !src || !src2 || !bad) {
        st = ddl_fail(DDL_ERR_NOMEM, "out of memory restoring %d ranks", n);
        goto out;
    }
    step_path(path, sizeof path, ldir, sl, "MANIFEST");
    if (read_manifest(ldir, sl, &lm) == DDL_OK && lm.world == world &&
        (mtext = read_small(path, &mlen)) != NULL) {
        have_lm = 1;
        mine[0] = (int64_t)mlen;
        for (int i = 0; i < world; i++) {
            int owner_here = i < n && node_of_rank(comm, i) == mynode;
            struct stat sb;
            char sp[PATH_MAX + 64];
            if (i != me && (owner_here || i % nl != pl))
                continue; /* another rank of this node reports it */
            shard_path(sp, sizeof sp, ldir, sl, i);
            errno = 0;
            if (stat(sp, &sb) == 0 && (uint64_t)sb.st_size == lm.size[i])
                mine[1 + i] = sb.st_size;
            else if (errno != ENOENT)
                ddl_warn("node-local copy of rank %d's shard, step %" PRId64 ", not used: %s: "
                         "%s", i, sl, sp, errno ? strerror(errno) : "its size differs from "
                         "the manifest's");
        }
    }
    ddl_debug("restore: node-local copies found at %.1f ms", mono_ms() - t_start);
    if ((st = ddl_allgather(comm, mine, have, (int)vec, DDL_INT64)) != DDL_OK)
        goto out;
    for (int i = 0; i < n; i++) /* on its own node (only rank i reports that), or a partner */
        src[i] = have[(size_t)i * vec + 1 + (size_t)i] > 0 ? -2 : holder(comm, have, vec, i);
    if ((st = partner_round(comm, ldir, sl, mtext, mlen, have, vec, src, &rtext, &rimg,
                            &rimg_len)) != DDL_OK)
        goto out;
    ddl_debug("restore: partner copies received at %.1f ms", mono_ms() - t_start);
    if (src[me] >= 0) {
        lvl = take_copy(ldir, sl, me, src[me], rtext, rimg, rimg_len, why, sizeof why);
    } else if (src[me] == -2) { /* this rank's own copy, in full */
        int64_t got = load_shard(ldir, sl, me, &lm, &mimg, why, sizeof why);
        if (got < 0)
            textf(why, sizeof why, "out of memory reading it");
        mimg_len = got > 0 ? (size_t)got : 0;
        own_bad = got <= 0;
        if (own_bad)
            ddl_warn("node-local copy of rank %d's shard, step %" PRId64 ", not used: %s", me,
                     sl, why);
        else
            lvl = DDL_CKPT_LEVEL_LOCAL;
    }
    /* a rank whose own copy was damaged: a partner's copy, if another node has one */
    if ((st = ddl_allgather(comm, &own_bad, bad, 1, DDL_INT32)) != DDL_OK)
        goto out;
    int again = 0;
    for (int i = 0; i < n; i++) {
        src2[i] = bad[i] ? holder(comm, have, vec, i) : -3;
        again |= src2[i] >= 0;
    }
    if (again && (st = partner_round(comm, ldir, sl, mtext, mlen, have, vec, src2, &rtext,
                                     &rimg, &rimg_len)) != DDL_OK)
        goto out;
    if (src2[me] >= 0)
        lvl = take_copy(ldir, sl, me, src2[me], rtext, rimg, rimg_len, why, sizeof why);
    if (lvl == DDL_CKPT_LEVEL_NONE && src[me] == -3)
        textf(why, sizeof why, "no node holds a valid copy");
    if (lvl == DDL_CKPT_LEVEL_NONE) { /* the next level */
        char swhy[ERR_TEXT];
        if (restore_shared(dir, sl, me, swhy, sizeof swhy))
            lvl = DDL_CKPT_LEVEL_SHARED;
        else
            textf(text, sizeof text, "no valid copy of rank %d's shard of checkpoint step %"
                  PRId64 " at any level: node-local and partner copies: %.120s; shared "
                  "directory %.60s: %.160s", me, sl, why, dir, swhy);
    }
    ddl_debug("restore: level %d at %.1f ms", lvl, mono_ms() - t_start);
    int nlvl[DDL_CKPT_LEVEL_SHARED + 1] = {0};
    st = agree(comm, lvl == DDL_CKPT_LEVEL_NONE ? DDL_ERR_IO : DDL_OK, lvl, nlvl, text,
               &from_rank);
    if (st != DDL_OK) {
        if (from_rank >= 0)
            st = ddl_fail(st, "%s", text);
        goto out;
    }
    *step = sl;
    snprintf(from, fromlen, "%s", lvl == DDL_CKPT_LEVEL_SHARED ? dir : ldir);
    if (level)
        *level = lvl;
    if (lvl == DDL_CKPT_LEVEL_LOCAL || lvl == DDL_CKPT_LEVEL_PARTNER) {
        /* checked in full: ddl_ckpt_read() copies from it (kept above) */
        pthread_mutex_lock(&held_mu);
        snprintf(held.dir, sizeof held.dir, "%s", ldir);
        held.step = sl;
        held.rank = me;
        if (lvl == DDL_CKPT_LEVEL_LOCAL) {
            held.img = mimg, held.len = mimg_len;
            mimg = NULL;
        } else {
            held.img = rimg, held.len = rimg_len;
        }
        pthread_mutex_unlock(&held_mu);
    }
    if (me == 0)
        ddl_info("checkpoint step %" PRId64 " restored: %d shards node-local, %d from partner "
                 "copies, %d from the shared directory %s", sl, nlvl[DDL_CKPT_LEVEL_LOCAL],
                 nlvl[DDL_CKPT_LEVEL_PARTNER], nlvl[DDL_CKPT_LEVEL_SHARED], dir);
    if (lvl == DDL_CKPT_LEVEL_PARTNER) {
        store_start(ldir, sl, me, rimg, rimg_len);
        rimg = NULL;
    }
out:
    if (have_lm)
        manifest_free(&lm);
    free(bad), free(src2), free(src), free(have), free(mine);
    free(mtext), free(rtext);
    big_free(rimg, rimg_len);
    big_free(mimg, mimg_len);
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
    held_release(); /* the restore's shard: training has moved on */
    store_wait();   /* no step directory is stored into while this one cleans up */
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

    /* the node-local level: every rank of comm sees the same variables */
    char ldir[PATH_MAX];
    int local = local_dir_resolve(ldir, sizeof ldir), shared = 1, leader = 0, ldfd = -1;
    verdict_t lv = {0};
    if (local < 0)
        return DDL_ERR_INVALID;
    if (local) {
        long every;
        if (ddl_env_long(DDLENV_DDL_CKPT_SHARED_EVERY, &every, &err) < 0)
            return ddl_fail(DDL_ERR_INVALID, "%s: use 0 (never) or K (every K-th checkpoint "
                            "goes to the shared directory)", err.text);
        local_count++;
        /* a stop's checkpoint must outlive the nodes: the job resumes elsewhere */
        shared = (every > 0 && local_count % every == 0) || ddl_stop_returned;
        leader = node_leader(comm) == comm->rank;
        snprintf(local_used, sizeof local_used, "%s", ldir);
        if (leader) { /* this node's directory, before any rank of it writes */
            int64_t llatest;
            if ((ldfd = ddl_dir_open(ldir, 1, "node-local checkpoint directory", &err)) < 0) {
                lv.status = DDL_ERR_IO;
                textf(lv.text, sizeof lv.text, "%s", err.text);
            } else if ((st = latest_step(ldir, &llatest)) != DDL_OK) {
                lv.status = st;
                snprintf(lv.text, sizeof lv.text, "%s", ddl_last_error());
            } else if (step <= llatest) {
                lv.status = DDL_ERR_INVALID;
                textf(lv.text, sizeof lv.text, "checkpoint step %" PRId64 " is not after the "
                      "latest one (%" PRId64 ") in the node-local directory %s: use a "
                      "larger step, or empty that directory (left by another job?)", step,
                      llatest, ldir);
            } else if ((st = cleanup_at(ldfd, ldir, keep, (flags & DDL_CKPT_ASYNC) ?
                                        CLEAN_PARTIAL : CLEAN_ALL)) != DDL_OK) {
                lv.status = st;
                snprintf(lv.text, sizeof lv.text, "%s", ddl_last_error());
            }
        }
    }

    if (comm->rank == 0 && shared) {
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
        } else if ((st = cleanup_at(dfd, dir, keep, CLEAN_ALL)) != DDL_OK) {
            v.status = st;
            snprintf(v.text, sizeof v.text, "%s", ddl_last_error());
        }
    }
    /* rank 0's verdict on the shared directory and, with the node-local
     * level, each node's first rank's on its own: one collective, which is
     * also the barrier before any rank writes */
    int from = -1;
    const char *why;
    if (local) {
        verdict_t *mine = v.status != DDL_OK ? &v : &lv;
        if (mine == &lv && lv.status != DDL_OK) {
            char t[ERR_TEXT];
            textf(t, sizeof t, "rank %d: %s", comm->rank, lv.text);
            memcpy(lv.text, t, sizeof t);
        }
        st = agree(comm, (ddl_status_t)mine->status, 0, NULL, mine->text, &from);
        why = mine->text;
    } else {
        if ((st = ddl_bcast(comm, &v, sizeof v, DDL_UINT8, 0)) == DDL_OK && v.status != DDL_OK) {
            st = (ddl_status_t)v.status;
            from = 0;
        }
        why = v.text;
    }
    if (st != DDL_OK) {
        if (dfd >= 0)
            close(dfd);
        if (ldfd >= 0)
            close(ldfd);
        local_count -= local ? 1 : 0;
        return from < 0 ? st : ddl_fail(st, "%s", why);
    }

    ddl_ckpt_t *ck = calloc(1, sizeof *ck);
    if (!ck) {
        if (dfd >= 0)
            close(dfd);
        if (ldfd >= 0)
            close(ldfd);
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
    ck->sdirfd = -1;
    ck->sstepfd = -1;
    ck->local = local;
    ck->leader = leader;
    ck->shared = shared;
    if (local) { /* write to this node's directory; the shared one gets a copy */
        textf(ck->sdir, sizeof ck->sdir, "%s", dir);
        ck->sdirfd = dfd;
        if (shared && ck->sdirfd < 0 &&
            (ck->sdirfd = ddl_dir_open(dir, 1, "checkpoint directory", &err)) < 0)
            ck_fail(ck, DDL_ERR_IO, "%s", err.text);
        dfd = ldfd;
        dir = ldir;
    }
    ck->dirfd = dfd; /* rank 0 (a node's first rank) opened it above; the others now */
    if (ck->dirfd < 0 && (ck->dirfd = ddl_dir_open(dir, 1, local ? "node-local checkpoint "
                                                    "directory" : "checkpoint directory",
                                                    &err)) < 0)
        ck_fail(ck, DDL_ERR_IO, "%s", err.text); /* reported by write and commit */
    ck->faults = (fault("write", ck->rank) ? F_WRITE : 0) |
                 (fault("fsync", ck->rank) ? F_FSYNC : 0) |
                 (fault("rename", ck->rank) ? F_RENAME : 0) |
                 (ddl_ctx.gen == 0 && fault("exit", ck->rank) ? F_EXIT : 0);
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
        if (ck->local) { /* the same numbers on every rank: commits come in one order */
            ck->pseq = ck->comm->seq;
            ck->comm->seq += 3;
        }
        pending = ck;
        if (pthread_create(&ck->thread, NULL, async_writer, ck) == 0)
            ck->thread_started = 1;
        else
            async_writer(ck); /* no thread to be had: write now */
        return DDL_OK;
    }
    shard_close(ck);
    copy_shared(ck);
    ddl_status_t st = ck->local ? partner_copies(ck) : DDL_OK;
    if (st == DDL_OK)
        st = decide(ck);
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

/* image_find: the record called name in a shard image that check_image()
 * accepted: its index, data offset and length; *nrec the image's records.
 * 0, or -1 if there is no such record. */
static int image_find(const unsigned char *b, uint64_t size, const char *name, uint32_t *idx,
                      uint64_t *off, uint64_t *len, uint32_t *nrec)
{
    uint64_t at = HDR_BYTES;
    int found = -1;
    size_t want = strlen(name);
    *nrec = 0;
    while (at + TRAIL_BYTES < size) {
        uint32_t nlen = get32(b + at);
        uint64_t dlen = get64(b + at + 8);
        if (found < 0 && nlen == want && !memcmp(b + at + REC_BYTES, name, want)) {
            *idx = *nrec;
            *off = at + REC_BYTES + nlen;
            *len = dlen;
            found = 0;
        }
        at += REC_BYTES + nlen + dlen;
        (*nrec)++;
    }
    return found;
}

/* read_dest: ddl_ckpt_read's checks of its destination for buffer name of
 * dlen bytes (found: the shard holds it): DDL_OK to copy it; DDL_INPROGRESS
 * when only its size was asked for (*got set); or DDL_ERR_INVALID. */
static ddl_status_t read_dest(const char *name, int rank, int64_t step, int found, uint64_t dlen,
                              const void *buf, size_t bytes, size_t *got)
{
    if (!found)
        return ddl_fail(DDL_ERR_INVALID, "rank %d's shard of checkpoint step %" PRId64 " has no "
                        "buffer named '%s'", rank, step, name);
    if (got)
        *got = (size_t)dlen;
    if (!buf && !bytes && got)
        return DDL_INPROGRESS;
    if (got ? bytes < dlen : bytes != dlen)
        return ddl_fail(DDL_ERR_INVALID, "checkpoint buffer '%s' (rank %d, step %" PRId64 ") has "
                        "%" PRIu64 " bytes, the destination %zu: pass a buffer of that size",
                        name, rank, step, dlen, bytes);
    return DDL_OK;
}

/* held_read: ddl_ckpt_read from the shard the last restore kept, if it is
 * this one: DDL_OK or an error as ddl_ckpt_read's, or DDL_INPROGRESS when
 * the file must be read. */
static ddl_status_t held_read(const char *dir, int64_t step, int rank, const char *name,
                              void *buf, size_t bytes, size_t *got)
{
    ddl_status_t st = DDL_INPROGRESS;
    uint32_t idx = 0, nrec = 0;
    uint64_t off = 0, len = 0;
    pthread_mutex_lock(&held_mu);
    if (!held.img || held.step != step || held.rank != rank || strcmp(held.dir, dir) != 0)
        goto out;
    int found = image_find(held.img, held.len, name, &idx, &off, &len, &nrec) == 0;
    if ((st = read_dest(name, rank, step, found, len, buf, bytes, got)) != DDL_OK) {
        st = st == DDL_INPROGRESS ? DDL_OK : st; /* the size only */
        goto out;
    }
    memcpy(buf, held.img + off, (size_t)len);
    st = DDL_OK;
    if (!held.seen && !(held.seen = calloc(nrec ? nrec : 1, 1)))
        goto out; /* kept until the next begin: no harm */
    held.nrec = nrec;
    if (!held.seen[idx]) {
        held.seen[idx] = 1;
        held.nread++;
    }
    if (held.nread == held.nrec)
        held_release_locked(); /* every buffer read: the program holds them now */
out:
    pthread_mutex_unlock(&held_mu);
    return st;
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
    if ((st = held_read(dir, step, rank, name, buf, bytes, got)) != DDL_INPROGRESS)
        return st;
    store_wait(); /* the file may be the partner copy being stored */
    if ((st = read_manifest(dir, step, &m)) != DDL_OK)
        return st;
    if (rank >= m.world) {
        st = ddl_fail(DDL_ERR_INVALID, "checkpoint step %" PRId64 " has %d shards; there is no "
                      "rank %d", step, m.world, rank);
        goto out;
    }
    shard_path(path, sizeof path, dir, step, rank);
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
    if ((st = read_dest(name, rank, step, found != 0, dlen, buf, bytes, got)) != DDL_OK) {
        st = st == DDL_INPROGRESS ? DDL_OK : st; /* the size only */
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
