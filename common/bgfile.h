/* bgfile.h: a small file replaced whole, again and again, by a thread of
 * its own (the agent's metrics file): the caller hands over the newest
 * content and goes on at once, so that a slow or hung file system never
 * holds up the caller's loop (the agent's, whose beats keep its node
 * alive).  Content handed over while an older one waits is replaced: only
 * the newest is written.  Each write goes to a new temporary file in the
 * directory (safefile.h's ddl_tmp_openat), is given its mode, and is
 * renamed over the file, so that a reader sees an old or a new file, never
 * a part.
 *
 * Thread-safety: one caller thread per bgfile; the writer is internal.
 * Errors: -1/NULL with errno, as util.h says.
 */
#ifndef DDL_BGFILE_H
#define DDL_BGFILE_H

#include <stddef.h>
#include <sys/types.h>

typedef struct ddl_bgfile ddl_bgfile_t;

/* ddl_bgfile_new: a writer for dfd/name (dfd is duplicated: the caller
 * keeps its own), files given mode.  Starts the thread.  NULL with errno
 * (ENOMEM, EAGAIN: no thread, EBADF, ENAMETOOLONG: name over 200 bytes). */
ddl_bgfile_t *ddl_bgfile_new(int dfd, const char *name, mode_t mode);

/* ddl_bgfile_put: the file's next content: text (len bytes), owned by the
 * bgfile from now on, whatever the result (freed with free()).  Never waits
 * for the file system.  0, or -1 with errno EINVAL (no bgfile or text). */
int ddl_bgfile_put(ddl_bgfile_t *b, char *text, size_t len);

/* ddl_bgfile_error: the errno of the last write that ended (0: it
 * succeeded, or none ended yet).  Does not wait. */
int ddl_bgfile_error(ddl_bgfile_t *b);

/* ddl_bgfile_close: wait up to timeout_ms for the content handed over to
 * be written, then stop.  A write still stuck in the file system is left
 * to the thread, which frees what it holds when it returns.  0 when
 * everything was written, -1 with errno ETIMEDOUT otherwise, or the last
 * write's errno.  NULL is accepted. */
int ddl_bgfile_close(ddl_bgfile_t *b, int timeout_ms);

/* Tests only: called by the thread before each write (a file system that
 * is slow or hangs); NULL otherwise. */
extern void (*ddl_bgfile_test_hook)(void);

#endif
