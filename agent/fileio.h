/* fileio.h: the agent's file I/O kept off its event loop.  The checkpoint
 * directory is usually on a shared file system; a slow or hung server must
 * not stop the loop, whose beats tell the other agents that this node is
 * alive (they count it lost after a few missed beats, about 0.3 s).
 *
 * Each operation runs on a thread of its own and the loop waits for it at
 * most DDL_FILEIO_WAIT_MS:
 *   - ddl_fio_latest: the latest committed checkpoint (DIR/latest): the
 *     answer of this read if it comes in time, else the last one known
 *     (one read at a time: while a read is stuck, callers get the last
 *     answer at once);
 *   - ddl_fio_summary: the failure summary (failure.h), written in the
 *     background; ddl_fio_drain waits for the writes still running before
 *     the agent exits.
 *
 * Called from the loop's thread only (the helper threads touch nothing
 * but their own job).  Errors come back as text through ddl_fio_errors
 * for the loop to log (the helper threads do not log).
 */
#ifndef DDL_FILEIO_H
#define DDL_FILEIO_H

#include <stdint.h>

#include "failure.h"

#define DDL_FILEIO_WAIT_MS 50 /* the longest the loop waits for one operation */

/* ddl_fio_latest: *step and *age_ms (since the commit, from the file's
 * mtime) of dir's latest checkpoint.  0; -1 if there is none or it cannot
 * be read (or no answer has come yet).  *stale (may be NULL) is set to 1
 * when the answer is an older one because this read has not finished in
 * DDL_FILEIO_WAIT_MS, else 0. */
int ddl_fio_latest(const char *dir, int64_t *step, uint32_t *age_ms, int *stale);

/* ddl_fio_summary: write s to dir (ddl_fail_summary_write) in the
 * background; s and its strings are copied.  0, or -1 with errno (no
 * memory or no thread: then written here, blocking). */
int ddl_fio_summary(const char *dir, const ddl_fail_summary_t *s);

/* ddl_fio_drain: wait up to timeout_ms for the summary writes still
 * running.  Returns how many are still running (0: all done). */
int ddl_fio_drain(int timeout_ms);

/* ddl_fio_errors: calls log(text) for each error a background write met
 * since the last call. */
void ddl_fio_errors(void (*log)(const char *text));

/* Tests only: every background read of DIR/latest first sleeps this many
 * ms (a slow file system); 0 in the agent. */
extern int ddl_fio_read_delay_ms;

#endif
