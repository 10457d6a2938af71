/* safefile.c: directories checked once and used through their descriptor,
 * and unpredictable temporary names (see safefile.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safefile.h"

int ddl_dir_check(int fd, const char *path, uid_t uid, const char *what, ddl_error_t *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return ddl_errprintf(err, "cannot check %s %s: %s", what, path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return ddl_errprintf(err, "%s %s is not a directory", what, path);
    }
    if ((st.st_uid != uid && st.st_uid != 0) || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        errno = EPERM;
        return ddl_errprintf(err, "%s %s is owned by uid %u with mode %04o: it must be owned by "
                             "uid %u (or root) and writable by nobody else, or another user "
                             "could replace its files: run 'chmod go-w %s' if it is yours, or "
                             "use a directory of your own",
                             what, path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
                             (unsigned)uid, path);
    }
    return 0;
}

/* dir_walk: ddl_dir_open without the check of the directory itself. */
static int dir_walk(const char *path, int create, const char *what, ddl_error_t *err)
{
    char buf[PATH_MAX], *save = NULL;
    uid_t me = geteuid();
    if (!path || !*path) {
        errno = EINVAL;
        return ddl_errprintf(err, "%s: empty path", what);
    }
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        return ddl_errprintf(err, "%s path '%.60s...' is too long", what, path);
    }
    int cur = open(path[0] == '/' ? "/" : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cur < 0)
        return ddl_errprintf(err, "cannot open %s: %s", path[0] == '/' ? "/" : ".",
                             strerror(errno));
    for (char *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        struct stat st;
        /* how far we got, for messages: path up to and including c */
        int upto = (int)(c - buf + (ptrdiff_t)strlen(c));
        if (fstat(cur, &st) < 0)
            goto fail;
        int shared = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
        int fl = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (shared ? O_NOFOLLOW : 0);
        int next = openat(cur, c, fl);
        if (next < 0 && errno == ENOENT && create) {
            if (mkdirat(cur, c, 0700) < 0 && errno != EEXIST)
                goto fail_at;
            next = openat(cur, c, fl | O_NOFOLLOW);
        }
        if (next < 0) {
            if (shared && (errno == ELOOP || errno == ENOTDIR)) {
                struct stat lst;
                if (fstatat(cur, c, &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode)) {
                    close(cur);
                    errno = ELOOP;
                    return ddl_errprintf(err, "%s %s: %.*s is a symbolic link in a directory "
                                         "others can write (mode %04o), which ddl does not "
                                         "follow: give the real path", what, path, upto, path,
                                         (unsigned)(st.st_mode & 07777));
                }
            }
            goto fail_at;
        }
        if (shared && c[strspn(c, ".")] != '\0' && fstat(next, &st) == 0 && st.st_uid != me &&
            st.st_uid != 0) {
            close(next);
            close(cur);
            errno = EPERM;
            return ddl_errprintf(err, "%s %s: %.*s is owned by uid %u, not uid %u, in a directory "
                                 "others can write: remove it or use a directory of your own",
                                 what, path, upto, path, (unsigned)st.st_uid, (unsigned)me);
        }
        close(cur);
        cur = next;
        continue;
    fail_at:;
        int e = errno;
        close(cur);
        errno = e;
        return ddl_errprintf(err, "cannot %s %s %s: %.*s: %s (errno %d): fix the path or its "
                             "permissions", create ? "create" : "open", what, path, upto, path,
                             strerror(e), e);
    }
    return cur;
fail:;
    int e = errno;
    close(cur);
    errno = e;
    return ddl_errprintf(err, "cannot open %s %s: %s (errno %d)", what, path, strerror(e), e);
}

int ddl_dir_open(const char *path, int create, const char *what, ddl_error_t *err)
{
    int fd = dir_walk(path, create, what, err);
    if (fd >= 0 && ddl_dir_check(fd, path, geteuid(), what, err) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int ddl_dir_open_shared(const char *path, const char *what, ddl_error_t *err)
{
    struct stat st;
    int fd = dir_walk(path, 0, what, err);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return ddl_errprintf(err, "cannot check %s %s: %s", what, path, strerror(e));
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) {
        close(fd);
        errno = EPERM;
        return ddl_errprintf(err, "%s %s has mode %04o: others may write it but it is not "
                             "sticky, so they could replace ddl's files: run 'chmod +t %s'",
                             what, path, (unsigned)(st.st_mode & 07777), path);
    }
    return fd;
}

int ddl_tmp_openat(int dfd, const char *prefix, char *name, size_t len)
{
    for (int tries = 0; tries < 100; tries++) {
        unsigned char r[6];
        if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
            return -1;
        int n = snprintf(name, len, "%s.%02x%02x%02x%02x%02x%02x", prefix, r[0], r[1], r[2],
                         r[3], r[4], r[5]);
        if (n < 0 || (size_t)n >= len) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}
