/* fake-agent.c: a hostile "agent" for tests/integration/t0022-file-safety.t.
 *
 *   fake-agent SOCKET LOG [esc]
 *
 * Listens on SOCKET; for each connection, appends "request" to LOG, reads
 * one message and answers with a STATUS whose strings hold terminal control
 * sequences, as an agent run by another user could: by default the C1
 * control CSI (byte 0x9b, which 8-bit terminals obey), which the
 * wire protocol lets through and `ddl-agent status` must escape; with
 * `esc`, ESC and BEL sequences, which the decoder refuses as malformed.
 * Prints "ready" once listening; runs until killed.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto.h"
#include "sock.h"

int main(int argc, char **argv)
{
    ddl_error_t err;
    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "esc") == 0)) {
        fprintf(stderr, "usage: fake-agent SOCKET LOG [esc]\n");
        return 2;
    }
    int lfd = ddl_sock_listen(argv[1], &err);
    if (lfd < 0) {
        fprintf(stderr, "fake-agent: %s\n", err.text);
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        int c = accept(lfd, NULL, NULL);
        if (c < 0)
            continue;
        FILE *log = fopen(argv[2], "a");
        if (log) {
            fputs("request\n", log);
            fclose(log);
        }
        ddl_msg_t req, m;
        if (ddl_proto_recv(c, &req, 2000, &err) == 0)
            ddl_msg_clear(&req);
        memset(&m, 0, sizeof m);
        m.type = DDL_MSG_STATUS;
        int esc = argc == 4;
        m.u.status.step = esc ? "\x1b]0;owned\x07\x1b[2J\x1b[31mEVIL" : "\x9b" "2J\x9b" "31mEVIL";
        m.u.status.host = esc ? "h\x1b[1A" : "h\x9b" "1A";
        m.u.status.ckpt_dir = esc ? "/x\x1b[K" : "/x\x9b" "K";
        m.u.status.last_failure = esc ? "\x1b[5mblink" : "\x9b" "5mblink";
        m.u.status.ckpt_step = -1;
        m.u.status.size = 1;
        m.u.status.nnodes = 1;
        m.u.status.agent_pid = (int32_t)getpid();
        ddl_proto_send(c, &m);
        close(c);
    }
}
