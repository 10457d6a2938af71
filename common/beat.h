/* beat.h: the worker's end of its heartbeat channel to ddl-launch, opened
 * the same way by libddl (ddl_init) and by `ddl-agent heartbeat`.
 *
 * ddl-launch, when a hang timeout is set, gives its worker the write end of
 * a pipe in DDL_HEARTBEAT_FD; the first worker of a Slurm task, forked
 * before its supervisor could make a pipe, gets the name of a FIFO that the
 * supervisor holds open in DDL_HEARTBEAT_PATH instead.  Records on the
 * channel are ddl_beat_rec_t (proto.h).
 */
#ifndef DDL_BEAT_H
#define DDL_BEAT_H

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
