/* idx.c: the IDX (MNIST format) reader declared in idx.h.
 *
 * The file is opened with open(2) so that errno is exact, then read through
 * zlib's gzdopen()/gzread(), which inflate gzip files and pass plain files
 * through.  Every length is checked: the header, the data against the
 * product of the dimensions, and the absence of bytes after the data.
 * Reading one byte past the data also makes zlib reach the gzip trailer and
 * verify its CRC, so a corrupt stream cannot go unnoticed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "idx.h"

#define IDX_TYPE_UBYTE 0x08
#define IDX_READ_CHUNK ((size_t)1 << 30) /* gzread takes an unsigned, returns an int */
#define IDX_FIRST_ALLOC ((size_t)1 << 20)
#define IDX_GZ_BUFFER (128u * 1024u)

/* fail: write a message "PATH: ..." into err, set errno and return -1. */
static int fail(char *err, size_t errlen, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int errnum, const char *fmt, ...)
{
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    errno = errnum;
    return -1;
}

/* gz_message: zlib's text for the stream's error state, without the
 * "<fd:N>: " prefix that zlib puts on descriptors opened with gzdopen(). */
static const char *gz_message(gzFile f, int *zerr)
{
    const char *msg = gzerror(f, zerr);
    if (*zerr == Z_ERRNO)
        return strerror(errno);
    if (strncmp(msg, "<fd:", 4) == 0) {
        const char *p = strstr(msg, ">: ");
        if (p)
            msg = p + 3;
    }
    return msg;
}

/* read_some: read up to len bytes, stopping early only at the end of the
 * input.  Returns the number of bytes read, or -1 when zlib reports an
 * error (a short count may also come with an error: see gz_message). */
static long long read_some(gzFile f, uint8_t *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        size_t want = len - got;
        if (want > IDX_READ_CHUNK)
            want = IDX_READ_CHUNK;
        int n = gzread(f, buf + got, (unsigned)want);
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (long long)got;
}

/* check_read: the verdict on a read_some() that returned n: -1 with the
 * message written if zlib recorded an error (including a gzip stream cut
 * short, which gzread() reports as a plain end of file) or n < 0, else 0.
 * zlib inflates ahead of the reader, so the message does not say where in
 * the file the damage lies. */
static int check_read(gzFile f, long long n, const char *path, char *err,
                      size_t errlen)
{
    int zerr = Z_OK;
    const char *msg = gz_message(f, &zerr);
    if (zerr == Z_ERRNO)
        return fail(err, errlen, EIO, "%s: read error: %s", path, msg);
    if (zerr == Z_MEM_ERROR)
        return fail(err, errlen, ENOMEM, "%s: out of memory while inflating", path);
    if (zerr != Z_OK)
        return fail(err, errlen, EIO, "%s: corrupt gzip stream: %s", path, msg);
    if (n < 0)
        return fail(err, errlen, EIO, "%s: read error", path);
    return 0;
}

/* describe_dims: "10000 x 28 x 28" into buf. */
static void describe_dims(const uint32_t *dims, int ndims, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < ndims && used < len; i++) {
        int n = snprintf(buf + used, len - used, "%s%u", i ? " x " : "", dims[i]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

/* load: idx_load() on an open gzFile; leaves whatever it allocated in *out
 * for the caller to free on failure. */
static int load(gzFile f, const char *path, idx_t *out, char *err, size_t errlen)
{
    uint8_t magic[4];
    long long n = read_some(f, magic, sizeof magic);
    if (check_read(f, n, path, err, errlen) < 0)
        return -1;
    if (n == 0)
        return fail(err, errlen, EINVAL, "%s: empty file (expected an IDX file)", path);
    if (n < (long long)sizeof magic)
        return fail(err, errlen, EINVAL,
                    "%s: truncated header: expected 4 bytes of magic, got %lld", path, n);

    uint32_t m = (uint32_t)magic[0] << 24 | (uint32_t)magic[1] << 16 |
                 (uint32_t)magic[2] << 8 | (uint32_t)magic[3];
    if (magic[0] != 0 || magic[1] != 0)
        return fail(err, errlen, EINVAL,
                    "%s: not an IDX file: magic 0x%08x (expected 0x00000801 for labels "
                    "or 0x00000803 for images)",
                    path, m);
    if (magic[2] != IDX_TYPE_UBYTE)
        return fail(err, errlen, EINVAL,
                    "%s: IDX element type 0x%02x is not supported (magic 0x%08x): only "
                    "0x08, unsigned bytes, is",
                    path, magic[2], m);
    if (magic[3] < 1 || magic[3] > IDX_MAX_DIMS)
        return fail(err, errlen, EINVAL,
                    "%s: IDX file with %u dimensions (magic 0x%08x): only 1 to %d are "
                    "supported",
                    path, magic[3], m, IDX_MAX_DIMS);

    int ndims = magic[3];
    uint8_t raw[4 * IDX_MAX_DIMS];
    size_t want = 4 * (size_t)ndims;
    n = read_some(f, raw, want);
    if (check_read(f, n, path, err, errlen) < 0)
        return -1;
    if ((size_t)n < want)
        return fail(err, errlen, EINVAL,
                    "%s: truncated header: expected %zu bytes of dimensions, got %lld",
                    path, want, n);

    size_t size = 1;
    int overflow = 0;
    for (int i = 0; i < ndims; i++) {
        const uint8_t *p = raw + 4 * i;
        out->dims[i] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
                       (uint32_t)p[3];
        if (out->dims[i] == 0)
            return fail(err, errlen, EINVAL, "%s: dimension %d of %d is 0", path, i + 1,
                        ndims);
        if (__builtin_mul_overflow(size, (size_t)out->dims[i], &size))
            overflow = 1;
    }
    out->ndims = ndims;
    char shape[64];
    describe_dims(out->dims, ndims, shape, sizeof shape);
    if (overflow)
        return fail(err, errlen, EOVERFLOW,
                    "%s: dimensions %s: the data size overflows size_t", path, shape);

    /* Grow the buffer as data arrives rather than trusting the header. */
    size_t cap = size < IDX_FIRST_ALLOC ? size : IDX_FIRST_ALLOC;
    size_t got = 0;
    out->data = malloc(cap);
    if (!out->data)
        return fail(err, errlen, ENOMEM, "%s: out of memory for %zu bytes", path, cap);
    for (;;) {
        n = read_some(f, out->data + got, cap - got);
        if (check_read(f, n, path, err, errlen) < 0)
            return -1;
        got += (size_t)n;
        if (got < cap || cap == size)
            break;
        size_t next = cap > size / 2 ? size : 2 * cap;
        uint8_t *p = realloc(out->data, next);
        if (!p)
            return fail(err, errlen, ENOMEM, "%s: out of memory for %zu bytes", path,
                        next);
        out->data = p;
        cap = next;
    }
    if (got < size)
        return fail(err, errlen, EINVAL,
                    "%s: truncated: expected %zu bytes of data (%s), got %zu", path, size,
                    shape, got);

    /* Nothing may follow; this read also makes zlib check the gzip trailer. */
    uint8_t extra;
    n = read_some(f, &extra, 1);
    if (check_read(f, n, path, err, errlen) < 0)
        return -1;
    if (n > 0)
        return fail(err, errlen, EINVAL,
                    "%s: unexpected bytes after the %zu bytes of data (%s): not an IDX "
                    "file, or the dimensions are wrong",
                    path, size, shape);

    out->count = out->dims[0];
    out->item_size = size / out->count;
    out->size = size;
    return 0;
}

int idx_load(const char *path, idx_t *out, char *err, size_t errlen)
{
    if (err && errlen > 0)
        err[0] = '\0';
    if (!out)
        return fail(err, errlen, EINVAL, "idx_load: no output structure");
    memset(out, 0, sizeof *out);
    if (!path)
        return fail(err, errlen, EINVAL, "idx_load: no path");

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return fail(err, errlen, e,
                        "%s: no such file: the Fashion-MNIST data set comes in the "
                        "Debian package dataset-fashion-mnist (apt-get install "
                        "dataset-fashion-mnist)",
                        path);
        return fail(err, errlen, e, "%s: cannot open: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return fail(err, errlen, e, "%s: cannot stat: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return fail(err, errlen, EISDIR, "%s: is a directory, not an IDX file", path);
    }
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        return fail(err, errlen, ENOMEM, "%s: out of memory opening the file", path);
    }
    gzbuffer(f, IDX_GZ_BUFFER);

    int rc = load(f, path, out, err, errlen);
    int saved = errno;
    gzclose_r(f); /* closes fd; a read-only close has nothing to report */
    if (rc < 0) {
        idx_free(out);
        errno = saved;
        return -1;
    }
    return 0;
}

void idx_free(idx_t *idx)
{
    if (!idx)
        return;
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}
