/* beat.c: opening the worker's heartbeat channel to ddl-launch (the pipe in
 * DDL_HEARTBEAT_FD or the FIFO in DDL_HEARTBEAT_PATH), shared by libddl and
 * `ddl-agent heartbeat`. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "beat.h"
#include "env.h"
#include "util.h"

int ddl_beat_channel_open(int *owned)
{
    const char *path = ddl_env_str(DDLENV_DDL_HEARTBEAT_PATH);
    long fd = -1;
    *owned = 0;
    if (ddl_env_long_in(DDLENV_DDL_HEARTBEAT_FD, 3, DDL_BEAT_FD_MAX, -1, &fd, NULL) > 0 &&
        fcntl((int)fd, F_GETFD) >= 0) {
        /* the pipe from ddl-launch */
    } else if (path && *path) {
        if ((fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0)
            return -1;
        *owned = 1;
    } else {
        errno = ENOENT;
        return -1;
    }
    int fl = fcntl((int)fd, F_GETFL);
    if (fl < 0 || fcntl((int)fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        int e = errno;
        if (*owned)
            close((int)fd);
        *owned = 0;
        errno = e;
        return -1;
    }
    return (int)fd;
}
