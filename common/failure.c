/* failure.c: failure classes and their names, the root-cause score, and
 * the failure summary file DIR/failure-gen<G>.json (failure.h), written in
 * a directory checked once, under an unpredictable temporary name, and
 * renamed. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "failure.h"
#include "safefile.h"
#include "util.h"

const char *ddl_fail_class_str(int cls)
{
    static const char *const names[] = {"unknown",         "worker-exit", "worker-signal",
                                        "worker-hang",     "supervisor-lost", "node-lost",
                                        "worker-start"};
    return cls >= 1 && cls <= DDL_FAIL_CLASS_MAX ? names[cls] : "unknown";
}

int ddl_fail_score(int cls, int wstatus)
{
    switch (cls) {
    case DDL_FAIL_NODE:
        return 5;
    case DDL_FAIL_SUPERVISOR:
        return 4;
    case DDL_FAIL_WORKER_HANG:
        return 3;
    case DDL_FAIL_WORKER_SIGNAL:
        if (!WIFSIGNALED(wstatus))
            return 0;
        switch (WTERMSIG(wstatus)) {
        case SIGABRT: case SIGTERM: case SIGPIPE: case SIGHUP: case SIGINT:
            return 0;
        default:
            return 2;
        }
    case DDL_FAIL_WORKER_EXIT:
        return WIFEXITED(wstatus) && WEXITSTATUS(wstatus) != 0 ? 1 : 0;
    case DDL_FAIL_WORKER_START:
        return 1;
    default:
        return 0;
    }
}

int ddl_fail_summary_write(const char *dir, const ddl_fail_summary_t *s, ddl_error_t *err)
{
    char path[4200], name[64], tmp[96], how[128];
    snprintf(name, sizeof name, "failure-gen%u.json", s->gen);
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return ddl_errprintf(err, "checkpoint directory path too long: %s", dir);
    }
    /* the directory checked once, then a fresh temporary name in it: a link
     * planted by someone else is never followed */
    int dfd = ddl_dir_open(dir, 1, "checkpoint directory", err);
    if (dfd < 0)
        return -1;
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    int fd = ddl_tmp_openat(dfd, tmp, tmp, sizeof tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
            unlinkat(dfd, tmp, 0);
        }
        close(dfd);
        errno = e;
        return ddl_errprintf(err, "cannot write the failure summary %s/%s: %s", dir, tmp,
                             strerror(e));
    }
    int worker = s->cls == DDL_FAIL_WORKER_EXIT || s->cls == DDL_FAIL_WORKER_SIGNAL ||
                 s->cls == DDL_FAIL_WORKER_HANG || s->cls == DDL_FAIL_WORKER_START;
    fprintf(f, "{\"step\": ");
    ddl_json_str(f, s->step);
    fprintf(f, ", \"generation\": %u, \"rank\": %lld, \"node\": %lld, \"host\": ", s->gen,
            (long long)s->rank, (long long)s->node);
    ddl_json_str(f, s->host);
    fprintf(f, ", \"class\": \"%s\", \"exit_status\": %d, \"signal\": %d, \"description\": ",
            ddl_fail_class_str(s->cls),
            worker && WIFEXITED(s->wstatus) ? WEXITSTATUS(s->wstatus) : -1,
            worker && WIFSIGNALED(s->wstatus) ? WTERMSIG(s->wstatus) : 0);
    ddl_json_str(f, s->text ? s->text : ddl_describe_wait_status(s->wstatus, how, sizeof how));
    fprintf(f, ", \"decision\": ");
    ddl_json_str(f, s->decision);
    fprintf(f, ", \"exit_code\": %d, \"checkpoint_step\": %lld, "
            "\"restarts_left\": %d, \"detected_unix_ms\": %lld}\n",
            s->exit_code, (long long)s->ckpt_step, s->restarts_left, (long long)s->detected_ms);
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    if (fclose(f) != 0 || bad || renameat(dfd, tmp, dfd, name) != 0) {
        int e = errno;
        unlinkat(dfd, tmp, 0);
        close(dfd);
        errno = e;
        return ddl_errprintf(err, "cannot write the failure summary %s: %s", path, strerror(e));
    }
    close(dfd);
    return 0;
}
