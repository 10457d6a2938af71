/* t_idx.c: unit test (TAP) of the IDX reader of the fmnist example
 * (examples/fmnist/idx.c).
 *
 * Writes small IDX files, gzip-compressed and plain, good and broken, into
 * a fresh temporary directory (removed at the end) and checks what
 * idx_load() makes of each: the shape and bytes of good files, and errno
 * and the message for every kind of damage.  If the Fashion-MNIST data set
 * is installed ($DDL_FMNIST_DIR, default /usr/share/datasets/fashion-mnist)
 * it also loads the real test-set files.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "idx.h"
#include "tap.h"

#define MAX_FILES 64

static char tmpdir[256];
static char *created[MAX_FILES];
static int ncreated;

/* path_for: TMPDIR/name, remembered for removal at the end. */
static const char *path_for(const char *name)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", tmpdir, name);
    for (int i = 0; i < ncreated; i++)
        if (strcmp(created[i], buf) == 0)
            return created[i];
    if (ncreated == MAX_FILES)
        BAIL_OUT("too many test files");
    created[ncreated] = strdup(buf);
    if (!created[ncreated])
        BAIL_OUT("out of memory");
    return created[ncreated++];
}

/* header: the IDX header (4 + 4 * ndims bytes) with the given dimensions;
 * returns its length. */
static size_t header(uint8_t *buf, uint32_t magic, const uint32_t *dims, int ndims)
{
    size_t n = 0;
    buf[n++] = (uint8_t)(magic >> 24);
    buf[n++] = (uint8_t)(magic >> 16);
    buf[n++] = (uint8_t)(magic >> 8);
    buf[n++] = (uint8_t)magic;
    for (int i = 0; i < ndims; i++) {
        buf[n++] = (uint8_t)(dims[i] >> 24);
        buf[n++] = (uint8_t)(dims[i] >> 16);
        buf[n++] = (uint8_t)(dims[i] >> 8);
        buf[n++] = (uint8_t)dims[i];
    }
    return n;
}

/* write_plain / write_gz: create name in the temporary directory holding
 * the header followed by len bytes of data; return its path. */
static const char *write_plain(const char *name, const uint8_t *hdr, size_t hlen,
                               const uint8_t *data, size_t len)
{
    const char *path = path_for(name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(hdr, 1, hlen, f) != hlen ||
        (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0)
        BAIL_OUT("cannot write %s: %s", path, strerror(errno));
    return path;
}

static const char *write_gz(const char *name, const uint8_t *hdr, size_t hlen,
                            const uint8_t *data, size_t len)
{
    const char *path = path_for(name);
    gzFile f = gzopen(path, "wb");
    if (!f || gzwrite(f, hdr, (unsigned)hlen) != (int)hlen ||
        (len && gzwrite(f, data, (unsigned)len) != (int)len) || gzclose(f) != Z_OK)
        BAIL_OUT("cannot write %s", path);
    return path;
}

/* read_whole / rewrite: load a file into memory and write it back, for
 * damaging compressed files in place. */
static uint8_t *read_whole(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        BAIL_OUT("cannot open %s: %s", path, strerror(errno));
    uint8_t *buf = malloc(1 << 20);
    if (!buf)
        BAIL_OUT("out of memory");
    *len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

static const char *rewrite(const char *name, const uint8_t *buf, size_t len)
{
    return write_plain(name, buf, len, NULL, 0);
}

/* contains: whether text contains needle, with a diagnostic if not. */
static int contains(const char *text, const char *needle)
{
    if (strstr(text, needle))
        return 1;
    diag("message '%s' lacks '%s'", text, needle);
    return 0;
}

/* expect_fail: load path, which must fail with errno want_errno and a
 * message that names the path and contains needle. */
static void expect_fail(const char *what, const char *path, int want_errno,
                        const char *needle)
{
    idx_t idx;
    char err[512];
    errno = 0;
    int rc = idx_load(path, &idx, err, sizeof err);
    int e = errno;
    is(rc, -1, "%s: idx_load fails", what);
    is(e, want_errno, "%s: errno %s", what, strerror(want_errno));
    ok(contains(err, path) && contains(err, needle), "%s: message '%s'", what, err);
    ok(idx.data == NULL && idx.size == 0 && idx.ndims == 0, "%s: nothing to free", what);
    idx_free(&idx);
}

static void test_good_images_gz(void)
{
    uint8_t hdr[32], data[3 * 4 * 5];
    uint32_t dims[3] = {3, 4, 5};
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 7 + 1);
    size_t h = header(hdr, 0x803, dims, 3);
    const char *path = write_gz("images-idx3-ubyte.gz", hdr, h, data, sizeof data);

    idx_t idx;
    char err[512] = "unset";
    int rc = idx_load(path, &idx, err, sizeof err);
    is(rc, 0, "gz images: idx_load succeeds");
    if (rc != 0) {
        diag("%s", err);
        return;
    }
    is_str(err, "", "gz images: no message");
    is(idx.ndims, 3, "gz images: 3 dimensions");
    ok(idx.dims[0] == 3 && idx.dims[1] == 4 && idx.dims[2] == 5, "gz images: dims 3x4x5");
    is(idx.count, 3, "gz images: 3 items");
    is(idx.item_size, 20, "gz images: 20 bytes per item");
    is(idx.size, 60, "gz images: 60 bytes of data");
    ok(idx.data && memcmp(idx.data, data, sizeof data) == 0, "gz images: bytes match");
    is(idx.data[0], 1, "gz images: first byte");
    is(idx.data[59], (uint8_t)(59 * 7 + 1), "gz images: last byte");
    idx_free(&idx);
    ok(idx.data == NULL && idx.size == 0, "idx_free zeroes the structure");
    idx_free(&idx);
    idx_free(NULL);
    ok(1, "idx_free accepts a freed structure and NULL");
}

static void test_good_labels_plain(void)
{
    uint8_t hdr[32], data[7] = {9, 0, 3, 3, 7, 1, 2};
    uint32_t dims[1] = {7};
    const char *path =
        write_plain("labels-idx1-ubyte", hdr, header(hdr, 0x801, dims, 1), data, 7);

    idx_t idx;
    int rc = idx_load(path, &idx, NULL, 0);
    is(rc, 0, "plain labels: idx_load succeeds (err NULL is accepted)");
    if (rc != 0)
        return;
    is(idx.ndims, 1, "plain labels: 1 dimension");
    is(idx.count, 7, "plain labels: 7 items");
    is(idx.item_size, 1, "plain labels: 1 byte per item");
    ok(memcmp(idx.data, data, 7) == 0, "plain labels: bytes match");
    idx_free(&idx);
}

static void test_bad_lengths(void)
{
    uint8_t hdr[32], data[80];
    uint32_t dims[3] = {3, 4, 5};
    memset(data, 0xab, sizeof data);
    size_t h = header(hdr, 0x803, dims, 3);

    expect_fail("truncated data (gz)", write_gz("trunc.gz", hdr, h, data, 50), EINVAL,
                "truncated: expected 60 bytes of data (3 x 4 x 5), got 50");
    expect_fail("truncated data (plain)", write_plain("trunc", hdr, h, data, 0), EINVAL,
                "expected 60 bytes of data (3 x 4 x 5), got 0");
    expect_fail("truncated header", write_plain("trunc-hdr", hdr, 9, NULL, 0), EINVAL,
                "truncated header: expected 12 bytes of dimensions, got 5");
    expect_fail("truncated magic", write_plain("trunc-magic", hdr, 3, NULL, 0), EINVAL,
                "truncated header");
    expect_fail("empty file", write_plain("empty", hdr, 0, NULL, 0), EINVAL,
                "empty file");
    expect_fail("trailing garbage (plain)", write_plain("trail", hdr, h, data, 61),
                EINVAL, "unexpected bytes after the 60 bytes of data");
    expect_fail("trailing garbage (gz)", write_gz("trail.gz", hdr, h, data, 80), EINVAL,
                "unexpected bytes after the 60 bytes of data");

    /* A short file that claims 4 GiB x 64 KiB must fail as truncated
     * without first allocating what it claims. */
    uint32_t huge[2] = {0xffffffffu, 0xffffu};
    h = header(hdr, 0x802, huge, 2);
    expect_fail("huge claimed size", write_plain("huge", hdr, h, data, 80), EINVAL,
                "got 80");
}

static void test_bad_headers(void)
{
    uint8_t hdr[32], data[4] = {0};
    uint32_t dims[3] = {2, 2, 1};

    expect_fail("bad magic", write_plain("magic", hdr, header(hdr, 0x12340803, dims, 3),
                                         data, 4),
                EINVAL, "not an IDX file: magic 0x12340803");
    expect_fail("float type byte",
                write_plain("float", hdr, header(hdr, 0x00000d03, dims, 3), data, 4),
                EINVAL, "element type 0x0d is not supported");
    expect_fail("signed byte type",
                write_plain("sbyte", hdr, header(hdr, 0x00000903, dims, 3), data, 4),
                EINVAL, "type 0x09");
    expect_fail("0 dimensions", write_plain("dims0", hdr, header(hdr, 0x800, dims, 0),
                                            data, 4),
                EINVAL, "0 dimensions");
    uint32_t four[4] = {1, 1, 2, 2};
    expect_fail("4 dimensions", write_plain("dims4", hdr, header(hdr, 0x804, four, 4),
                                            data, 4),
                EINVAL, "4 dimensions");

    uint32_t zero_first[3] = {0, 28, 28}, zero_last[3] = {10, 28, 0};
    expect_fail("zero first dimension",
                write_plain("zero1", hdr, header(hdr, 0x803, zero_first, 3), NULL, 0),
                EINVAL, "dimension 1 of 3 is 0");
    expect_fail("zero last dimension",
                write_plain("zero3", hdr, header(hdr, 0x803, zero_last, 3), NULL, 0),
                EINVAL, "dimension 3 of 3 is 0");

    uint32_t big[3] = {0xffffffffu, 0xffffffffu, 0xffffffffu};
    expect_fail("overflowing dimensions",
                write_plain("overflow", hdr, header(hdr, 0x803, big, 3), data, 4),
                EOVERFLOW, "overflows size_t");
}

static void test_corrupt_gzip(void)
{
    uint8_t hdr[32], data[4000];
    uint32_t dims[1] = {sizeof data};
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < sizeof data; i++) { /* text-like, compressible bytes */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        data[i] = (uint8_t)('a' + x % 8);
    }
    size_t h = header(hdr, 0x801, dims, 1);
    const char *good = write_gz("good.gz", hdr, h, data, sizeof data);
    size_t len;
    uint8_t *gz = read_whole(good, &len);
    ok(len > 40 && gz[0] == 0x1f && gz[1] == 0x8b, "corrupt gz: reference file is gzip");

    /* The CRC-32 of the data is the 8th to 5th last bytes. */
    gz[len - 8] ^= 0xff;
    expect_fail("bad gzip CRC", rewrite("badcrc.gz", gz, len), EIO,
                "corrupt gzip stream: incorrect data check");
    gz[len - 8] ^= 0xff;

    /* The ISIZE (length mod 2^32) is the last 4 bytes. */
    gz[len - 4] ^= 0x01;
    expect_fail("bad gzip length", rewrite("badlen.gz", gz, len), EIO,
                "corrupt gzip stream: incorrect length check");
    gz[len - 4] ^= 0x01;

    expect_fail("gzip cut short", rewrite("cut.gz", gz, len / 2), EIO,
                "corrupt gzip stream: unexpected end of file");

    /* Damage inside the deflate data: whatever zlib makes of it, the load
     * must fail. */
    for (size_t i = 20; i < 30; i++)
        gz[i] ^= 0x5a;
    idx_t idx;
    char err[512];
    int rc = idx_load(rewrite("damaged.gz", gz, len), &idx, err, sizeof err);
    is(rc, -1, "damaged deflate data: idx_load fails ('%s')", rc ? err : "");
    idx_free(&idx);
    free(gz);
}

static void test_open_errors(void)
{
    const char *missing = path_for("no-such-file-idx3-ubyte.gz");
    expect_fail("missing file", missing, ENOENT, "dataset-fashion-mnist");
    expect_fail("directory", tmpdir, EISDIR, "is a directory");

    idx_t idx;
    errno = 0;
    is(idx_load(NULL, &idx, NULL, 0), -1, "NULL path fails");
    is(errno, EINVAL, "NULL path: EINVAL");
    is(idx_load(missing, NULL, NULL, 0), -1, "NULL output fails");
}

static void test_real_dataset(void)
{
    const char *dir = getenv("DDL_FMNIST_DIR");
    if (!dir || !*dir)
        dir = "/usr/share/datasets/fashion-mnist";
    char labels[1024], images[1024];
    snprintf(labels, sizeof labels, "%s/t10k-labels-idx1-ubyte.gz", dir);
    snprintf(images, sizeof images, "%s/t10k-images-idx3-ubyte.gz", dir);
    if (access(labels, R_OK) != 0 || access(images, R_OK) != 0) {
        skip(6, "Fashion-MNIST not installed in %s "
                "(apt-get install dataset-fashion-mnist)",
             dir);
        return;
    }

    idx_t idx;
    char err[512];
    int rc = idx_load(labels, &idx, err, sizeof err);
    is(rc, 0, "real t10k labels load");
    if (rc != 0)
        diag("%s", err);
    ok(rc == 0 && idx.ndims == 1 && idx.count == 10000, "real t10k labels: 10000 items");
    int below10 = rc == 0;
    for (size_t i = 0; rc == 0 && i < idx.size; i++)
        below10 &= idx.data[i] < 10;
    ok(below10, "real t10k labels: all values < 10");
    idx_free(&idx);

    rc = idx_load(images, &idx, err, sizeof err);
    is(rc, 0, "real t10k images load");
    if (rc != 0)
        diag("%s", err);
    ok(rc == 0 && idx.ndims == 3 && idx.dims[0] == 10000 && idx.dims[1] == 28 &&
           idx.dims[2] == 28,
       "real t10k images: 10000 x 28 x 28");
    is(idx.size, rc == 0 ? 10000 * 784 : 0, "real t10k images: 7840000 bytes");
    idx_free(&idx);
}

int main(void)
{
    plan(NO_PLAN);

    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/t_idx.XXXXXX", base);
    if (!mkdtemp(tmpdir))
        BAIL_OUT("mkdtemp %s: %s", tmpdir, strerror(errno));

    test_good_images_gz();
    test_good_labels_plain();
    test_bad_lengths();
    test_bad_headers();
    test_corrupt_gzip();
    test_open_errors();
    test_real_dataset();

    for (int i = 0; i < ncreated; i++) {
        unlink(created[i]);
        free(created[i]);
    }
    ok(rmdir(tmpdir) == 0, "temporary directory removed");
    return done_testing();
}
