/* safefile.h: directories and files that another user cannot redirect.
 *
 * A directory is opened once, checked (owned by the expected user or root,
 * writable by nobody else), and every file inside it is then created,
 * renamed or removed relative to that descriptor (openat, renameat,
 * unlinkat) with O_NOFOLLOW, so a symbolic link planted by someone else is
 * never followed.  Directories ddl creates are mode 0700, files 0600.
 * docs/security.md ("Files and directories") states the rules.
 *
 * Convention (util.h): 0 or a descriptor on success, -1 with errno and a
 * message in err (may be NULL) on failure.  Blocking file-system calls;
 * thread-safe (no shared state).
 */
#ifndef DDL_SAFEFILE_H
#define DDL_SAFEFILE_H

#include <stddef.h>
#include <sys/types.h>

#include "util.h"

/* ddl_dir_check: 0 if the directory open as fd is owned by uid (or root)
 * and neither its group nor others may write it; -1 with errno EPERM and a
 * message naming path (for people only), what ("checkpoint directory"),
 * the owner and mode found, and the fix. */
int ddl_dir_check(int fd, const char *path, uid_t uid, const char *what, ddl_error_t *err);

/* ddl_dir_open: open path as a directory, component by component.  With
 * create, missing components are made with mode 0700.  A component inside
 * a directory that its group or others may write (like /tmp) must not be a
 * symbolic link and must be owned by the caller (effective uid) or root.
 * The result passes ddl_dir_check for the effective uid.  Returns the
 * directory's descriptor (O_CLOEXEC; the caller closes it); -1 with errno
 * (ENOENT: a component is missing and create is 0; EPERM: a check failed;
 * ELOOP: a link where none may be) and err naming the component. */
int ddl_dir_open(const char *path, int create, const char *what, ddl_error_t *err);

/* ddl_dir_open_shared: open an existing directory that other users may
 * share (node_exporter's textfile directory), walking path as
 * ddl_dir_open does (no symbolic link followed inside a directory others
 * can write).  The directory may be writable by others only if it is
 * sticky (mode 1777 like /tmp), so that nobody else can rename or remove
 * the files ddl puts there.  Returns its descriptor (O_CLOEXEC); -1 with
 * errno (ENOENT, EPERM, ELOOP...) and err. */
int ddl_dir_open_shared(const char *path, const char *what, ddl_error_t *err);

/* ddl_tmp_openat: create a new file "PREFIX.XXXXXXXXXXXX" (twelve random
 * hex digits) in dfd with O_EXCL | O_NOFOLLOW, mode 0600, open for writing;
 * its name goes to name (len bytes).  Returns the descriptor (O_CLOEXEC);
 * -1 with errno (ENAMETOOLONG when name is too small). */
int ddl_tmp_openat(int dfd, const char *prefix, char *name, size_t len);

#endif
