/* beat.h: the worker's end of its heartbeat channel to ddl-launch, opened
 * the same way by libddl (ddl_init) and by `ddl-agent heartbeat`.
 *
 * ddl-launch, when a hang timeout is set, gives its worker the write end of
 * a pipe in DDL_HEARTBEAT_FD; the first worker of a Slurm task, forked
 * before its supervisor could make a pipe, gets the name of a FIFO that the
 * supervisor holds open in DDL_HEARTBEAT_PATH instead.  Records on the
 * channel are ddl_beat_rec_t, below.
 */
#ifndef DDL_BEAT_H
#define DDL_BEAT_H

#include <stdint.h>

/* One heartbeat, worker (libddl) -> its ddl-launch: fixed records in host
 * byte order (both ends are on the same machine), written whole with one
 * write(2) (smaller than PIPE_BUF, so never split). */
typedef struct {
    uint64_t collectives; /* collectives started so far */
    int64_t step;         /* last ddl_heartbeat() step, -1: none */
    /* at that ddl_heartbeat() call (0 and 0 from `ddl-agent heartbeat`): */
    int64_t at_ns;        /* the worker's CLOCK_MONOTONIC, ns */
    uint64_t wait_ns;     /* ns spent waiting in collectives so far */
} ddl_beat_rec_t;

/* ddl_beat_channel_open: the channel named by the environment: the
 * descriptor in DDL_HEARTBEAT_FD when it is a number from 3 to
 * DDL_BEAT_FD_MAX naming an open descriptor (*owned = 0: inherited, not
 * to be closed by the caller), else the FIFO DDL_HEARTBEAT_PATH opened
 * write-only and close-on-exec (*owned = 1: the caller closes it).  The
 * descriptor is made non-blocking: a record that does not fit in a full
 * pipe is dropped by write(), never waited for.  Returns the descriptor,
 * or -1 with errno ENOENT when neither variable names a channel (no
 * supervisor watches this process) or the errno of open(2)/fcntl(2).
 * Reads the environment: call it where getenv is safe (not concurrently
 * with setenv). */
#define DDL_BEAT_FD_MAX (1 << 20)
int ddl_beat_channel_open(int *owned);

#endif
