/* t_respawn.c: launcher/respawn.c, how ddl-launch records a running worker
 * and starts it again: ddl_spawn_exec_done tells a forked child from the
 * program it execs; ddl_spawn_capture records that program's executable,
 * arguments and environment from /proc; a process whose environment reads
 * empty (as one caught inside execve does: the kernel sets the
 * environment's end last) is refused with EAGAIN, to be read again, instead
 * of being recorded with no environment; ddl_spawn_start starts the
 * recording again with variables set and unset. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "respawn.h"
#include "../tap.h"

/* child: fork and exec `sleep 30` with env (NULL-terminated); its pid. */
static pid_t child(char *const env[])
{
    pid_t pid = fork();
    if (pid == 0) {
        char *const argv[] = {"sleep", "30", NULL};
        execve("/bin/sleep", argv, env);
        _exit(127);
    }
    return pid;
}

/* exec_wait: wait up to 5 s for pid to run another program than this one. */
static int exec_wait(pid_t pid)
{
    for (int i = 0; i < 500; i++) {
        int d = ddl_spawn_exec_done(pid, getpid());
        if (d != 0)
            return d;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* capture: ddl_spawn_capture as ddl-launch uses it: a child caught inside
 * its execve may still read an empty environment (EAGAIN): read again. */
static int capture(pid_t pid, ddl_spawn_t *sp, ddl_error_t *err)
{
    int rc, tries = 0;
    while ((rc = ddl_spawn_capture(pid, sp, err)) < 0 && errno == EAGAIN && ++tries < 100) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return rc;
}

static int has(char **v, const char *s)
{
    for (size_t i = 0; v && v[i]; i++)
        if (strcmp(v[i], s) == 0)
            return 1;
    return 0;
}

static void reap(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

int main(void)
{
    plan(NO_PLAN);
    ddl_error_t err;
    ddl_spawn_t sp;

    char *const env[] = {"DDL_RANK=3", "DDL_AGENT_SOCK=/run/x.sock", "PATH=/usr/bin:/bin", NULL};
    pid_t pid = child(env);
    ok(pid > 0, "forked a child");
    is(exec_wait(pid), 1, "ddl_spawn_exec_done: 1 once the child runs /bin/sleep");
    if (!ok(capture(pid, &sp, &err) == 0, "ddl_spawn_capture of the running sleep")) {
        diag("%s", err.text);
        reap(pid);
        return done_testing(); /* nothing below can run without the recording */
    }
    ok(strstr(sp.exe, "sleep") != NULL, "... its executable (%s)", sp.exe);
    ok(sp.argv && sp.argv[0] && sp.argv[1] && strcmp(sp.argv[1], "30") == 0 && !sp.argv[2],
       "... its arguments: sleep 30");
    ok(has(sp.envp, "DDL_RANK=3") && has(sp.envp, "DDL_AGENT_SOCK=/run/x.sock") &&
           has(sp.envp, "PATH=/usr/bin:/bin") && sp.envp[3] == NULL,
       "... exactly its environment");

    /* started again: a variable replaced, one removed */
    char *const set[] = {"DDL_RANK=5", NULL};
    const char *const unset[] = {"DDL_AGENT_SOCK", NULL};
    pid_t again = ddl_spawn_start(&sp, set, unset, -1, &err);
    ok(again > 0, "ddl_spawn_start: started again (%d)", (int)again);
    ddl_spawn_t sp2;
    is(exec_wait(again), 1, "... it runs sleep");
    if (!ok(again > 0 && capture(again, &sp2, &err) == 0, "... and can be recorded in turn")) {
        diag("%s", err.text);
        if (again > 0)
            reap(again);
        ddl_spawn_free(&sp);
        reap(pid);
        return done_testing();
    }
    ok(has(sp2.envp, "DDL_RANK=5") && !has(sp2.envp, "DDL_RANK=3"), "... DDL_RANK replaced");
    ok(!has(sp2.envp, "DDL_AGENT_SOCK=/run/x.sock"), "... DDL_AGENT_SOCK removed");
    ok(has(sp2.envp, "PATH=/usr/bin:/bin"), "... PATH kept");
    ddl_spawn_free(&sp2);
    reap(again);
    ddl_spawn_free(&sp);
    reap(pid);

    /* an empty environment: what /proc/PID/environ gives between the exec
     * and the kernel's setting of the environment */
    char *const none[] = {NULL};
    pid = child(none);
    is(exec_wait(pid), 1, "a child exec'd with an empty environment runs sleep");
    errno = 0;
    is(ddl_spawn_capture(pid, &sp, &err), -1, "ddl_spawn_capture refuses its empty environment");
    is(errno, EAGAIN, "... with EAGAIN (read it again later)");
    ok(strstr(err.text, "empty environment") != NULL, "... saying so: %s", err.text);
    ok(sp.argv == NULL && sp.envp == NULL, "... nothing left to free");
    reap(pid);

    is(ddl_spawn_exec_done(pid, getpid()), -1, "ddl_spawn_exec_done: -1 once the process is gone");
    return done_testing();
}
