/* idx.h: a reader for IDX files, the format of the MNIST and Fashion-MNIST
 * data sets, used by the fmnist-train example.
 *
 * An IDX file is a 4-byte magic (two zero bytes, a type byte, the number of
 * dimensions), one big-endian uint32 per dimension, then the elements in
 * row-major order.  This reader accepts the unsigned-byte type (0x08) only,
 * with 1 to 3 dimensions: 0x00000801 for label files, 0x00000803 for image
 * files.  Files are read through zlib, so gzip-compressed (.gz) and plain
 * files are both accepted.
 *
 * Not thread-safe per idx_t; distinct idx_t may be used from distinct
 * threads.
 */
#ifndef DDL_EXAMPLES_IDX_H
#define DDL_EXAMPLES_IDX_H

#include <stddef.h>
#include <stdint.h>

#define IDX_MAX_DIMS 3

/* A loaded IDX file.  data holds dims[0] * ... * dims[ndims-1] bytes. */
typedef struct {
    int ndims;                   /* 1 .. IDX_MAX_DIMS */
    uint32_t dims[IDX_MAX_DIMS]; /* each > 0; unused entries are 0 */
    size_t count;                /* dims[0]: number of items (images, labels) */
    size_t item_size;            /* bytes per item: product of dims[1..] (1 for labels) */
    size_t size;                 /* bytes of data: count * item_size */
    uint8_t *data;               /* owned by the idx_t; freed by idx_free() */
} idx_t;

/* idx_load: read the IDX file at path into *out.
 *
 * Returns 0 and fills *out; the caller owns out->data and releases it with
 * idx_free().  Returns -1 on failure, with *out zeroed (nothing to free),
 * errno set and, when err is not NULL and errlen > 0, a one-line message for
 * people in err that starts with the path:
 *   ENOENT    the file does not exist (the message names the Debian package
 *             dataset-fashion-mnist, which installs the data set);
 *   other     open(2) errors as reported by the system (EACCES, EISDIR...);
 *   EINVAL    not an IDX file of unsigned bytes: bad magic, a type other
 *             than 0x08, 0 or more than 3 dimensions, a zero dimension,
 *             a truncated header or data, or bytes after the data;
 *   EOVERFLOW the product of the dimensions does not fit in size_t;
 *   EIO       a read error or a corrupt gzip stream (bad data, bad check
 *             value, stream cut short);
 *   ENOMEM    out of memory.
 * The buffer grows as data arrives, so a short file that claims huge
 * dimensions fails as truncated rather than allocating what it claims. */
int idx_load(const char *path, idx_t *out, char *err, size_t errlen);

/* idx_free: release what idx_load() allocated and zero *idx.  Accepts NULL
 * and a zeroed or already freed idx_t. */
void idx_free(idx_t *idx);

#endif /* DDL_EXAMPLES_IDX_H */
