/* util.h: small helpers shared by ddl's programs and libraries: error text
 * buffers, strict number parsing, monotonic time, whole-buffer I/O, file
 * descriptor flags and the per-user runtime directory.
 *
 * Convention: functions return 0 (or a valid pointer) on success and -1 (or
 * NULL) with errno set on failure; those taking a ddl_error_t also write a
 * message for people into it.  No function here has side effects on failure.
 */
#ifndef DDL_UTIL_H
#define DDL_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

/* A message for people, filled by the function that failed. */
typedef struct {
    char text[512];
} ddl_error_t;

/* ddl_errprintf: format into err (may be NULL) and return -1, so that
 * failure paths are one line: return ddl_errprintf(err, "...", ...).
 * errno is preserved. */
int ddl_errprintf(ddl_error_t *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ddl_parse_long: parse all of text as a base-10 integer in [min, max].
 * Returns 0 and sets *out; -1 with errno EINVAL (not a number, trailing
 * characters, empty) or ERANGE (outside [min, max]). */
int ddl_parse_long(const char *text, long min, long max, long *out);

/* ddl_parse_seconds: like ddl_parse_long but accepts a decimal fraction
 * ("0.5"); result in milliseconds within [min_ms, max_ms]. */
int ddl_parse_seconds_ms(const char *text, long min_ms, long max_ms, long *out_ms);

/* ddl_now_ms / ddl_now_us: CLOCK_MONOTONIC time. */
int64_t ddl_now_ms(void);
int64_t ddl_now_us(void);

/* ddl_realtime_ms: CLOCK_REALTIME in ms since the epoch (for reports that
 * are compared between processes and nodes). */
int64_t ddl_realtime_ms(void);

/* ddl_deadline_in: CLOCK_REALTIME timeout_ms from now, the absolute time
 * pthread_cond_timedwait takes. */
struct timespec ddl_deadline_in(int timeout_ms);

/* ddl_write_full / ddl_read_full: transfer exactly len bytes, retrying on
 * EINTR and short transfers (blocking descriptors).  read_full returns -1
 * with errno ECONNRESET if the peer closed before len bytes arrived. */
int ddl_write_full(int fd, const void *buf, size_t len);
int ddl_read_full(int fd, void *buf, size_t len);

/* ddl_fd_set_cloexec / ddl_fd_set_nonblock: set the flag on fd. */
int ddl_fd_set_cloexec(int fd);
int ddl_fd_set_nonblock(int fd, int on);

/* The per-user runtime directory that holds agent sockets (docs/security.md,
 * "Files and directories"), the first of:
 *   1. $DDL_RUNTIME_DIR/ddl-UID when DDL_RUNTIME_DIR is set (only that);
 *   2. /run/ddl/UID, made for the user by root (the Slurm plugin) in a
 *      directory of root's that nobody else may write;
 *   3. $XDG_RUNTIME_DIR/ddl when XDG_RUNTIME_DIR is a private directory of
 *      the user (the calling user only);
 *   4. /tmp/ddl-UID; if that name is taken by someone else (or is not
 *      private), an existing private /tmp/ddl-UID.XXXXXX of the user's, or
 *      a new one from mkdtemp (unpredictable, so nobody can take it first).
 * Every directory is private: a real directory (no link) owned by uid with
 * mode 0700.  DDL_SYSTEM_RUNTIME_BASE (a compile-time definition) replaces
 * /run/ddl; the
 * environment variable DDL_SYSTEM_RUNTIME_DIR replaces it in tests. */

/* ddl_runtime_dir: the directory for uid, as above, into buf.  With create,
 * makes it (mode 0700) where needed.  -1 with errno (ENOENT: none exists
 * and create is 0; EPERM: $DDL_RUNTIME_DIR/ddl-UID or $XDG_RUNTIME_DIR/ddl
 * is not private) and err. */
int ddl_runtime_dir(uid_t uid, int create, char *buf, size_t len, ddl_error_t *err);

/* ddl_runtime_dirs: call fn(ctx, dir, owner) for each existing private
 * runtime directory of uid, or of every user with uid (uid_t)-1 (root's
 * `ddl-agent status`): the candidates of ddl_runtime_dir, including every
 * /tmp/ddl-UID.XXXXXX.  A directory is listed only if it is owned by the
 * uid its name gives; the caller still opens it with O_NOFOLLOW. */
void ddl_runtime_dirs(uid_t uid, void (*fn)(void *ctx, const char *dir, uid_t owner), void *ctx);

/* ddl_runtime_system_base: /run/ddl (or what replaces it, above). */
const char *ddl_runtime_system_base(void);

/* ddl_runtime_dir_prepare: as root, make the system base (0755, root's)
 * and uid's directory in it (0700, owned by uid:gid), refusing a base that
 * is a link, not root's or writable by others; the path goes to buf.  For
 * the Slurm plugin.  0, or -1 with errno and err. */
int ddl_runtime_dir_prepare(uid_t uid, gid_t gid, char *buf, size_t len, ddl_error_t *err);

/* ddl_user_dir_prepare: the same in any base (ddl.conf's log_dir): as root,
 * make base if it is missing (0755; its parent must exist), refuse a base
 * that is a link, not root's or writable by group or others, and make
 * base/UID (0700, owned by uid:gid; an existing one is opened without
 * following a link and given to uid:gid again); the path goes to buf.
 * what names base in messages ("log_dir").  0, or -1 with errno and err. */
int ddl_user_dir_prepare(const char *base, const char *what, uid_t uid, gid_t gid, char *buf,
                         size_t len, ddl_error_t *err);

/* ddl_signal_name: "SIGKILL" for 9, "signal 70" for unknown numbers;
 * returns buf. */
const char *ddl_signal_name(int sig, char *buf, size_t len);

/* ddl_describe_wait_status: "exited with status 3" / "was killed by signal 9
 * (SIGKILL)" for a waitpid() status; returns buf. */
const char *ddl_describe_wait_status(int status, char *buf, size_t len);

/* ddl_wait_status_code: the shell-style exit code of a waitpid() status:
 * the exit status, or 128 + signal number. */
int ddl_wait_status_code(int status);

/* ddl_cpulist_parse: parse a CPU list ("0-3,8,10-11": decimal numbers
 * below 65536, ranges low-high, separated by commas), calling add(ctx, lo,
 * hi) for each item when add is not NULL.  0 on success; -1 with errno
 * EINVAL and a message naming the bad part otherwise (add may have been
 * called for the items before it).  No hwloc: the Slurm plugin uses it. */
int ddl_cpulist_parse(const char *text, void (*add)(void *ctx, unsigned lo, unsigned hi),
                      void *ctx, ddl_error_t *err);

/* ddl_bind_check: 0 if text is a placement policy: "auto", "none", or CPU
 * lists separated by ':' (one per local rank, like 0-3:4-7); -1 with errno
 * EINVAL (ENOMEM) and the reason for the first bad list otherwise. */
int ddl_bind_check(const char *text, ddl_error_t *err);

/* ddl_json_str: write s (NULL writes "") to f as a JSON string: in double
 * quotes, with '"' and '\\' escaped by a backslash, and every byte below
 * 0x20 or from 0x7f up as \\u00XX (so no control character, C1 control or
 * broken UTF-8 from an agent reaches a terminal; non-ASCII text comes out
 * byte by byte).  ddl's only JSON string writer: ddl-agent status --json,
 * ddl-agent topo --json and the failure summaries (failure-gen<G>.json) use
 * it.  Write errors are left in f's error flag (check ferror or fclose).
 * Thread-safe as stdio is (one call may interleave with another thread's
 * output on the same f). */
void ddl_json_str(FILE *f, const char *s);

/* ddl_find_helper: the path of one of ddl's own programs (ddl-agent,
 * ddl-launch).  When the calling program runs from a build tree (a
 * config.status one level above its directory) the helper is taken from
 * that tree's subdir ("agent", "launcher"), so tests use what was just
 * built; otherwise from installed_dir.  -1 with errno ENOENT and a message
 * if the result is not executable. */
int ddl_find_helper(const char *name, const char *subdir, const char *installed_dir, char *buf,
                    size_t len, ddl_error_t *err);

/* ddl_kill_adopted: SIGKILL and reap every child of the calling process but
 * keep (0: none), again until none is left (at most 50 rounds, 10 ms
 * apart).  For a child subreaper (PR_SET_CHILD_SUBREAPER), which inherits
 * every orphaned descendant: ddlrun and ddl-launch call it once the job's
 * processes should all be gone.  Not thread-safe (it reaps any child). */
void ddl_kill_adopted(pid_t keep);

/* ddl_secret_hex: a fresh step secret, DDL_SECRET_BYTES random bytes
 * (getrandom) as lower-case hex in out (2 * DDL_SECRET_BYTES + 1 bytes).
 * 0, or -1 with errno and err. */
#define DDL_SECRET_BYTES 32
int ddl_secret_hex(char *out, ddl_error_t *err);

/* ddl_spawn_ready: start the daemon path with argv (NULL-terminated; argv[0]
 * is its name) plus "--ready-fd N", keeping the descriptors keep[0..nkeep)
 * open across exec, stdin on /dev/null and every signal at its default (with
 * new_group, in a new process group that it leads), and
 * wait up to timeout_ms for it to write "1" on that descriptor.  Returns its
 * pid; -1 with the reason in err, the child (if any) killed and reaped.
 * The caller reaps the daemon later. */
pid_t ddl_spawn_ready(const char *path, char *const argv[], const int *keep, int nkeep,
                      int new_group, int timeout_ms, ddl_error_t *err);

#endif
