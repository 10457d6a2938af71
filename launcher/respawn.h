/* respawn.h: how ddl-launch starts a Slurm task's worker again.
 *
 * Under Slurm the first worker is started by slurmstepd (after TaskProlog,
 * limits and the user's environment), not by ddl-launch.  To start it again
 * in a new generation, ddl-launch records, while that first worker runs,
 * what it was started with: its executable, arguments,
 * environment, working directory, resource limits, CPU mask and umask, all
 * read from /proc/PID.  Not thread-safe; blocking /proc reads only.
 */
#ifndef DDL_RESPAWN_H
#define DDL_RESPAWN_H

#include <sched.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "util.h"

typedef struct {
    char exe[4096];   /* /proc/PID/exe at capture */
    char cwd[4096];
    char **argv;      /* NULL-terminated, owned */
    char **envp;      /* NULL-terminated, owned */
    struct rlimit lim[RLIM_NLIMITS];
    cpu_set_t cpus;
    mode_t umask;
} ddl_spawn_t;

/* ddl_spawn_exec_done: 1 once process pid runs another program than
 * process `like` (the worker has left slurmstepd's code for the user's
 * program), 0 not yet, -1 if pid is gone. */
int ddl_spawn_exec_done(pid_t pid, pid_t like);

/* ddl_spawn_capture: fill *sp from running process pid.  0, or -1 with
 * errno and err (nothing to free then).  errno EAGAIN: pid was caught
 * inside its execve (no arguments or an empty environment yet); read it
 * again a few milliseconds later.  Free with ddl_spawn_free. */
int ddl_spawn_capture(pid_t pid, ddl_spawn_t *sp, ddl_error_t *err);

/* ddl_spawn_self: fill *sp to start argv[0] (found in PATH when it has no
 * '/') with argv and this process's own environment, working directory,
 * limits, CPU mask and umask: the worker of a ddl-launch that starts it
 * itself (ddlrun --emulate).  0, or -1 with errno and err (program not
 * found or not executable).  Free with ddl_spawn_free. */
int ddl_spawn_self(char *const argv[], ddl_spawn_t *sp, ddl_error_t *err);

/* ddl_spawn_start: fork and exec the recorded program again, with the
 * recorded state, the variables set[] ("NAME=VALUE", replacing the recorded
 * ones of that name) and without those named in unset[] (NULL-terminated
 * lists, either may be NULL).  keep_fd stays open in the child (-1: none).
 * The child dies with the caller (PR_SET_PDEATHSIG) and starts with no
 * signal blocked.  Returns the child's pid, or -1 with errno and err. */
pid_t ddl_spawn_start(const ddl_spawn_t *sp, char *const set[], const char *const unset[],
                      int keep_fd, ddl_error_t *err);

/* ddl_spawn_free: release what capture allocated (sp itself is the caller's). */
void ddl_spawn_free(ddl_spawn_t *sp);

#endif
