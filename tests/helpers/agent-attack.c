/* agent-attack: attacks on the links of ddl-agent, as TAP (run by
 * t0021-agent-security.t; usage: agent-attack PATH/TO/ddl-agent).
 *
 * It starts real agents of a made-up multi-node step, with a secret it
 * knows, and plays the other nodes:
 *  1. as node 1 of a 2-node step it links to the leader (authenticated),
 *     keeps beating, and meanwhile floods the leader's port from
 *     connections without the secret: huge frames, many small frames never
 *     read back, forged and replayed authentications, hundreds of idle
 *     connections past the agent's descriptor limit.  The leader's beats
 *     must keep coming well within the node timeout, its memory stay small,
 *     its CPU idle, and its Unix socket keep answering;
 *  2. as an authenticated node 1, it sends what node 1 may not say (a rank
 *     twice, another node's ranks, a second link for itself), and a second
 *     supervisor tries to register the leader's rank: all refused, the step
 *     goes on;
 *  3. as the leader of a 3-node step, it checks that the agent connecting
 *     to it never sends the secret, that a leader without the secret is not
 *     believed, and that an authenticated leader's impossible world map or
 *     a MASTER_ADDR with a newline neither crashes the agent nor is used;
 *  4. as that leader, it moves the step to generation 1; a worker asking
 *     to join generation 0 is refused and told generation 1 and its map.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include "auth.h"
#include "proto.h"
#include "sock.h"
#include "util.h"

static int test_num;
static int failed;

static void ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ok(int cond, const char *fmt, ...)
{
    va_list ap;
    printf("%sok %d - ", cond ? "" : "not ", ++test_num);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    failed |= !cond;
}

static void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void diag(const char *fmt, ...)
{
    va_list ap;
    printf("# ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

static const char *agent_bin;
static char tmpdir[] = "/tmp/ddl-attack.XXXXXX";
static uint8_t secret[32];
static const char *step = "attack-step";

/* ------------------------------------------------------------ framed I/O */

static int send_frame(int fd, ddl_auth_dir_t *tx, const ddl_msg_t *m)
{
    uint8_t *frame, tag[DDL_AUTH_TAG];
    size_t len;
    if (ddl_proto_encode(m, &frame, &len) < 0)
        return -1;
    int rc = ddl_write_full(fd, frame, len);
    if (rc == 0 && tx) {
        ddl_auth_tag(tx, frame, len, tag);
        rc = ddl_write_full(fd, tag, sizeof tag);
    }
    free(frame);
    return rc;
}

/* read_all: exactly len bytes within timeout_ms. */
static int read_all(int fd, uint8_t *p, size_t len, int timeout_ms)
{
    int64_t end = ddl_now_ms() + timeout_ms;
    while (len) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int64_t left = end - ddl_now_ms();
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            return -1;
        ssize_t n = read(fd, p, len);
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* recv_frame: one frame (and its tag, checked, with rx); -2: the tag did
 * not match; -1: closed, malformed or timed out. */
static int recv_frame(int fd, ddl_auth_dir_t *rx, ddl_msg_t *m, int timeout_ms, uint8_t **raw,
                      size_t *raw_len)
{
    uint8_t hdr[DDL_PROTO_HDR_LEN];
    uint16_t type;
    size_t flen;
    if (read_all(fd, hdr, sizeof hdr, timeout_ms) < 0 ||
        ddl_proto_peek(hdr, sizeof hdr, &type, &flen, NULL) != 1)
        return -1;
    size_t total = flen + (rx ? DDL_AUTH_TAG : 0);
    uint8_t *buf = malloc(total);
    if (!buf)
        return -1;
    memcpy(buf, hdr, sizeof hdr);
    if (read_all(fd, buf + sizeof hdr, total - sizeof hdr, timeout_ms) < 0) {
        free(buf);
        return -1;
    }
    int rc = 0;
    if (rx && ddl_auth_check(rx, buf, flen, buf + flen) != 1)
        rc = -2;
    else if (ddl_proto_decode(buf, flen, m, NULL) < 0)
        rc = -1;
    if (raw) {
        *raw = buf;
        *raw_len = total;
    } else {
        free(buf);
    }
    return rc;
}

/* ------------------------------------------------------------ agents */

typedef struct {
    pid_t pid;
    char sock[256];
    char log[256];
} agent_t;

static rlim_t nofile_hard; /* start_agent: the hard limit, if not nofile */

/* start_agent: ddl-agent serve with our secret on a pipe; tcp_fd: the
 * leader's listening socket (or -1 and leader "IP:port"); nofile: its
 * descriptor limit (0: unchanged; the hard one is nofile_hard if set).  Waits until it listens (or fails). */
static int start_agent(agent_t *ag, const char *name, char *const extra[], int tcp_fd,
                       rlim_t nofile, int wait_ready)
{
    int sp[2], rp[2];
    char sfd[16], rfd[16], tfd[16], parent[16];
    snprintf(ag->sock, sizeof ag->sock, "%s/%s.sock", tmpdir, name);
    snprintf(ag->log, sizeof ag->log, "%s/%s.log", tmpdir, name);
    if (pipe(sp) < 0 || pipe(rp) < 0)
        return -1;
    ag->pid = fork();
    if (ag->pid < 0)
        return -1;
    if (ag->pid == 0) {
        char *argv[64];
        int k = 0;
        close(sp[1]);
        close(rp[0]);
        int logfd = open(ag->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(logfd, 2);
        if (tcp_fd >= 0) {
            fcntl(tcp_fd, F_SETFD, 0); /* inherited by the agent */
            snprintf(tfd, sizeof tfd, "%d", tcp_fd);
        }
        snprintf(sfd, sizeof sfd, "%d", sp[0]);
        snprintf(rfd, sizeof rfd, "%d", rp[1]);
        snprintf(parent, sizeof parent, "%d", (int)getppid());
        if (nofile) {
            struct rlimit rl = {nofile, nofile_hard ? nofile_hard : nofile};
            setrlimit(RLIMIT_NOFILE, &rl);
        }
        argv[k++] = (char *)agent_bin;
        argv[k++] = "serve";
        argv[k++] = "--socket";
        argv[k++] = ag->sock;
        argv[k++] = "--step";
        argv[k++] = (char *)step;
        argv[k++] = "--secret-fd";
        argv[k++] = sfd;
        argv[k++] = "--ready-fd";
        argv[k++] = rfd;
        argv[k++] = "--parent";
        argv[k++] = parent;
        if (tcp_fd >= 0) {
            argv[k++] = "--tcp-fd";
            argv[k++] = tfd;
        }
        for (int i = 0; extra[i]; i++)
            argv[k++] = extra[i];
        argv[k] = NULL;
        setenv("DDL_LOG_LEVEL", "debug", 1);
        execv(agent_bin, argv);
        _exit(127);
    }
    close(sp[0]);
    close(rp[1]);
    ddl_write_full(sp[1], secret, sizeof secret);
    close(sp[1]);
    if (!wait_ready) {
        close(rp[0]);
        return 0;
    }
    char buf[4];
    struct pollfd pfd = {.fd = rp[0], .events = POLLIN};
    int up = poll(&pfd, 1, 40000) == 1 && read(rp[0], buf, sizeof buf) > 0;
    close(rp[0]);
    return up ? 0 : -1;
}

static void stop_agent(agent_t *ag)
{
    if (ag->pid > 0) {
        kill(ag->pid, SIGKILL);
        waitpid(ag->pid, NULL, 0);
        ag->pid = 0;
    }
}

/* log_has: whether the agent's log has a line containing text. */
static int log_has(const agent_t *ag, const char *text)
{
    FILE *f = fopen(ag->log, "r");
    char line[2048];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f))
        found = strstr(line, text) != NULL;
    if (f)
        fclose(f);
    return found;
}

/* log_line_starts: whether a line of the log starts with text (a forged line). */
static int log_line_starts(const agent_t *ag, const char *text)
{
    FILE *f = fopen(ag->log, "r");
    char line[2048];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f))
        found = strncmp(line, text, strlen(text)) == 0;
    if (f)
        fclose(f);
    return found;
}

static long proc_kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    long v = -1;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, strlen(field)) == 0)
            v = strtol(line + strlen(field) + 1, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(buf, sizeof buf, f)) {
        if (f)
            fclose(f);
        return -1;
    }
    fclose(f);
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    /* fields after ')': state(3) ... utime(14) stime(15) */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* ------------------------------------------------------------ as a node */

typedef struct {
    int fd;
    ddl_auth_link_t link;
    uint8_t *auth_raw; /* our PEER_AUTH frame, for the replay */
    size_t auth_len;
} link_t;

/* link_up: connect to addr as node `node` and authenticate; 0 linked, -1
 * refused (*refusal: the ERROR's text, if any). */
static int link_up(link_t *l, const char *addr, uint32_t node, char *refusal, size_t rlen)
{
    ddl_msg_t m = {.type = DDL_MSG_PEER_AUTH};
    uint8_t nonce[DDL_AUTH_NONCE], expect[DDL_AUTH_MAC];
    memset(l, 0, sizeof *l);
    if (refusal)
        refusal[0] = '\0';
    l->fd = ddl_tcp_connect(addr, 5000, NULL);
    if (l->fd < 0 || ddl_auth_nonce(nonce, NULL) < 0)
        return -1;
    m.u.peer_auth.step = (char *)step;
    m.u.peer_auth.node_id = node;
    m.u.peer_auth.host = "attacker";
    m.u.peer_auth.listen = "";
    memcpy(m.u.peer_auth.nonce, nonce, sizeof nonce);
    ddl_auth_hello_mac(secret, sizeof secret, step, node, "attacker", "", nonce,
                       m.u.peer_auth.mac);
    ddl_proto_encode(&m, &l->auth_raw, &l->auth_len);
    if (ddl_write_full(l->fd, l->auth_raw, l->auth_len) < 0 ||
        recv_frame(l->fd, NULL, &m, 5000, NULL, NULL) < 0)
        return -1;
    if (m.type == DDL_MSG_ERROR && refusal)
        snprintf(refusal, rlen, "%s", m.u.error.text);
    int good = m.type == DDL_MSG_PEER_WELCOME &&
               ddl_auth_welcome_mac(secret, sizeof secret, step, m.u.peer_welcome.node_id, node,
                                    nonce, m.u.peer_welcome.nonce, expect) == 0 &&
               ddl_auth_equal(expect, m.u.peer_welcome.mac, sizeof expect) &&
               ddl_auth_link_init(&l->link, secret, sizeof secret, nonce,
                                  m.u.peer_welcome.nonce, 1) == 0;
    ddl_msg_clear(&m);
    return good ? 0 : -1;
}

static void link_down(link_t *l)
{
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    free(l->auth_raw);
    l->auth_raw = NULL;
}

/* pump: for ms, beat every 100 ms on l and read what the leader sends;
 * the longest gap between the leader's beats, the link's end (1: closed
 * or a bad tag), and the types seen (bit per type). */
typedef struct {
    int64_t max_gap;
    int closed;
    unsigned seen;
    char error[256];
} pump_t;

static void pump(link_t *l, int ms, pump_t *out)
{
    int64_t end = ddl_now_ms() + ms, last_beat_in = ddl_now_ms(), last_beat_out = 0;
    memset(out, 0, sizeof *out);
    while (ddl_now_ms() < end && !out->closed) {
        int64_t now = ddl_now_ms();
        if (now - last_beat_out >= 100) {
            ddl_msg_t b = {.type = DDL_MSG_PEER_BEAT};
            b.u.peer_beat.node_id = 1;
            b.u.peer_beat.host = "attacker";
            if (send_frame(l->fd, &l->link.tx, &b) < 0)
                out->closed = 1;
            last_beat_out = now;
        }
        struct pollfd pfd = {.fd = l->fd, .events = POLLIN};
        if (poll(&pfd, 1, 20) <= 0)
            continue;
        ddl_msg_t m;
        if (recv_frame(l->fd, &l->link.rx, &m, 2000, NULL, NULL) < 0) {
            out->closed = 1;
            break;
        }
        out->seen |= 1u << m.type;
        if (m.type == DDL_MSG_PEER_BEAT) {
            int64_t gap = ddl_now_ms() - last_beat_in;
            out->max_gap = gap > out->max_gap ? gap : out->max_gap;
            last_beat_in = ddl_now_ms();
        } else if (m.type == DDL_MSG_ERROR) {
            snprintf(out->error, sizeof out->error, "%s", m.u.error.text);
        }
        ddl_msg_clear(&m);
    }
    int64_t gap = ddl_now_ms() - last_beat_in;
    out->max_gap = gap > out->max_gap ? gap : out->max_gap;
}

/* ------------------------------------------------------------ the flood */

static char leader_addr[64];
static volatile int flood_phase; /* which attack the flood thread runs; -1: stop */
static int idle_fds[1200];
static int nidle;

static int raw_connect(void)
{
    return ddl_tcp_connect(leader_addr, 2000, NULL);
}

/* big_frame: a header announcing a 64 MiB body of type, then as much of the
 * body as the agent takes within 2 s. */
static void big_frame(uint16_t type)
{
    int fd = raw_connect();
    if (fd < 0)
        return;
    uint8_t hdr[12];
    uint32_t magic = htonl(DDL_PROTO_MAGIC), body = htonl(DDL_PROTO_MAX_BODY);
    uint16_t t = htons(type);
    memcpy(hdr, &magic, 4);
    hdr[4] = DDL_PROTO_MAJOR;
    hdr[5] = DDL_PROTO_MINOR;
    memcpy(hdr + 6, &t, 2);
    memcpy(hdr + 8, &body, 4);
    static uint8_t chunk[1 << 16];
    ddl_fd_set_nonblock(fd, 1);
    send(fd, hdr, sizeof hdr, MSG_NOSIGNAL);
    int64_t end = ddl_now_ms() + 2000;
    size_t sent = 0;
    while (sent < DDL_PROTO_MAX_BODY && ddl_now_ms() < end) {
        ssize_t n = send(fd, chunk, sizeof chunk, MSG_NOSIGNAL);
        if (n < 0 && errno == EAGAIN) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            poll(&p, 1, 50);
            continue;
        }
        if (n <= 0)
            break;
        sent += (size_t)n;
    }
    close(fd);
}

static void *flood(void *arg)
{
    (void)arg;
    while (flood_phase >= 0) {
        switch (flood_phase) {
        case 1: /* a 64 MiB STATUS frame, and 64 MiB frames claiming to authenticate */
            big_frame(DDL_MSG_STATUS);
            for (int i = 0; i < 6; i++)
                big_frame(DDL_MSG_PEER_AUTH);
            flood_phase = 0;
            break;
        case 2: { /* 700,000 small frames, then a bad magic; never read back */
            int fd = raw_connect();
            if (fd >= 0) {
                static uint8_t frames[12 * 4096];
                for (int i = 0; i < 4096; i++) {
                    uint8_t *h = frames + 12 * i;
                    uint32_t magic = htonl(DDL_PROTO_MAGIC);
                    uint16_t t = htons(DDL_MSG_STATUS_REQ);
                    memcpy(h, &magic, 4);
                    h[4] = DDL_PROTO_MAJOR;
                    h[5] = DDL_PROTO_MINOR;
                    memcpy(h + 6, &t, 2);
                    memset(h + 8, 0, 4);
                }
                ddl_fd_set_nonblock(fd, 1);
                int64_t end = ddl_now_ms() + 2000;
                for (int i = 0; i < 171 && ddl_now_ms() < end; i++)
                    if (send(fd, frames, sizeof frames, MSG_NOSIGNAL) < 0 && errno != EAGAIN)
                        break;
                send(fd, "XXXXXXXXXXXX", 12, MSG_NOSIGNAL);
                close(fd);
            }
            flood_phase = 0;
            break;
        }
        case 3: { /* forged authentications: a wrong MAC, a replay, a control character */
            ddl_msg_t m = {.type = DDL_MSG_PEER_AUTH};
            m.u.peer_auth.step = (char *)step;
            m.u.peer_auth.node_id = 1;
            m.u.peer_auth.host = "x";
            m.u.peer_auth.listen = "";
            for (int i = 0; i < 50; i++) {
                int fd = raw_connect();
                if (fd < 0)
                    continue;
                ddl_auth_nonce(m.u.peer_auth.nonce, NULL);
                ddl_auth_nonce(m.u.peer_auth.mac, NULL); /* not the secret's */
                send_frame(fd, NULL, &m);
                close(fd);
            }
            flood_phase = 0;
            break;
        }
        case 4: /* idle connections, past the agent's descriptor limit */
            while (nidle < 1100 && flood_phase == 4) {
                int fd = raw_connect();
                if (fd < 0)
                    break;
                idle_fds[nidle++] = fd;
            }
            flood_phase = 0;
            break;
        default:
            usleep(10000);
        }
    }
    return NULL;
}

/* status_rtt: ms for a STATUS_REQ over the agent's Unix socket (-1: none). */
static int64_t status_rtt(const agent_t *ag)
{
    int64_t t0 = ddl_now_ms();
    int fd = ddl_sock_connect(ag->sock, 1000, NULL);
    if (fd < 0)
        return -1;
    ddl_msg_t m = {.type = DDL_MSG_STATUS_REQ};
    int rc = send_frame(fd, NULL, &m) == 0 ? recv_frame(fd, NULL, &m, 3000, NULL, NULL) : -1;
    close(fd);
    if (rc < 0)
        return -1;
    int good = m.type == DDL_MSG_STATUS;
    ddl_msg_clear(&m);
    return good ? ddl_now_ms() - t0 : -1;
}

static void leader_scenarios(void)
{
    ddl_error_t err;
    uint16_t port;
    int tfd = ddl_tcp_listen("127.0.0.1", &port, &err);
    agent_t leader = {0};
    char *extra[] = {"--size", "2", "--node-id", "0", "--nnodes", "2", "--local-ranks", "0",
                     "--heartbeat", "100", "--supervise", "--node-timeout", "3000", NULL};
    snprintf(leader_addr, sizeof leader_addr, "127.0.0.1:%u", port);
    ok(tfd >= 0 && start_agent(&leader, "leader", extra, tfd, 48, 1) == 0,
       "a leader agent of a 2-node step listens at %s (descriptor limit 48)", leader_addr);
    close(tfd);
    if (!leader.pid)
        return;

    link_t l;
    pump_t p;
    ok(link_up(&l, leader_addr, 1, NULL, 0) == 0,
       "node 1 with the secret authenticates, and the leader proves it has the secret too");
    pump(&l, 500, &p);
    ok(!p.closed && p.max_gap < 400, "the leader beats every 100 ms (longest gap %lld ms)",
       (long long)p.max_gap);

    /* the flood, one attack after another, while node 1 keeps its link */
    pthread_t th;
    pthread_create(&th, NULL, flood, NULL);
    static const char *const what[] = {
        "", "a 64 MiB STATUS frame and six 64 MiB PEER_AUTH frames from strangers",
        "700,000 small frames then a bad magic, never read back",
        "50 authentications with a forged MAC", "1,100 idle connections (limit 48)"};
    double cpu_idle = -1;
    int64_t rtt_idle = -1;
    for (int phase = 1; phase <= 4; phase++) {
        flood_phase = phase;
        int64_t t0 = ddl_now_ms();
        pump(&l, phase == 4 ? 2500 : 1500, &p);
        while (flood_phase == phase && ddl_now_ms() - t0 < 8000)
            pump(&l, 200, &p);
        if (phase == 4) { /* the idle connections stay: is the loop idle, are locals served? */
            double c0 = proc_cpu_s(leader.pid);
            pump(&l, 1000, &p);
            cpu_idle = proc_cpu_s(leader.pid) - c0;
            rtt_idle = status_rtt(&leader);
        }
        ok(!p.closed && p.max_gap < 700,
           "flood: %s: node 1's link stays up, the leader's beats keep coming (longest gap "
           "%lld ms, node timeout 3000 ms)", what[phase], (long long)p.max_gap);
    }
    ok(cpu_idle >= 0 && cpu_idle < 0.3,
       "with its descriptors exhausted by idle connections the leader does not spin (%.2f s "
       "of CPU in 1 s)", cpu_idle);
    ok(rtt_idle >= 0 && rtt_idle < 1000,
       "... and its Unix socket still answers a status request (%lld ms)", (long long)rtt_idle);
    flood_phase = -1;
    pthread_join(th, NULL);
    for (int i = 0; i < nidle; i++)
        close(idle_fds[i]);
    long hwm = proc_kib(leader.pid, "VmHWM:");
    ok(hwm > 0 && hwm < 64 * 1024, "the leader's peak memory stayed small (%ld KiB)", hwm);
    ok(!log_has(&leader, "lost") && !log_has(&leader, "stopping"),
       "the leader never declared node 1 lost nor stopped the step");

    /* replaying node 1's recorded PEER_AUTH, and a second link for node 1 */
    int fd = raw_connect();
    ddl_msg_t m;
    int answered = fd >= 0 && ddl_write_full(fd, l.auth_raw, l.auth_len) == 0 &&
                   recv_frame(fd, NULL, &m, 300, NULL, NULL) == 0;
    if (answered)
        ddl_msg_clear(&m);
    ok(fd >= 0 && !answered, "a replayed PEER_AUTH gets no answer");
    if (fd >= 0)
        close(fd);
    link_t l2;
    char refusal[256];
    ok(link_up(&l2, leader_addr, 1, refusal, sizeof refusal) < 0 && strstr(refusal, "already"),
       "a second authenticated link for node 1 is refused (%s)", refusal);
    link_down(&l2);

    /* what an authenticated node 1 may not say */
    uint32_t twice[2] = {1, 1}, lens[2] = {1, 1};
    m = (ddl_msg_t){.type = DDL_MSG_NODE_GATHER};
    m.u.node_gather.size = 2;
    m.u.node_gather.count = 2;
    m.u.node_gather.ranks = twice;
    m.u.node_gather.lens = lens;
    m.u.node_gather.data = (uint8_t *)"ab";
    send_frame(l.fd, &l.link.tx, &m);
    pump(&l, 400, &p);
    ok(!(p.seen & (1u << DDL_MSG_ALLGATHER_RESULT)) && strstr(p.error, "already in"),
       "NODE_GATHER naming rank 1 twice is refused (%s), no exchange completes", p.error);
    uint32_t zero = 0;
    m.u.node_gather.count = 1;
    m.u.node_gather.ranks = &zero;
    send_frame(l.fd, &l.link.tx, &m);
    pump(&l, 400, &p);
    ok(!(p.seen & (1u << DDL_MSG_ALLGATHER_RESULT)) && *p.error,
       "NODE_GATHER with the leader's own rank 0 is refused (%s)", p.error);
    m = (ddl_msg_t){.type = DDL_MSG_RANK_STATE};
    m.u.rank_state.rank = 0;
    m.u.rank_state.state = DDL_RANK_EXITED;
    send_frame(l.fd, &l.link.tx, &m);
    m.u.rank_state.rank = 1;
    send_frame(l.fd, &l.link.tx, &m);
    pump(&l, 400, &p);
    ok(!(p.seen & (1u << DDL_MSG_GENERATION)) && strstr(p.error, "does not run"),
       "RANK_STATE 'exited' for the leader's rank 0 is refused: the step does not finish (%s)",
       p.error);
    m = (ddl_msg_t){.type = DDL_MSG_FAILURE};
    m.u.failure.rank = 0;
    m.u.failure.cls = DDL_FAIL_WORKER_EXIT;
    m.u.failure.wstatus = 1 << 8;
    m.u.failure.text = "forged";
    send_frame(l.fd, &l.link.tx, &m);
    pump(&l, 400, &p);
    ok(!(p.seen & (1u << DDL_MSG_GENERATION)) && strstr(p.error, "does not run"),
       "a FAILURE of the leader's rank 0 sent by node 1 is refused: the step goes on (%s)",
       p.error);

    /* a second supervisor for the leader's rank 0 (same uid) */
    int s1 = ddl_sock_connect(leader.sock, 2000, NULL), s2 = ddl_sock_connect(leader.sock, 2000, NULL);
    m = (ddl_msg_t){.type = DDL_MSG_REGISTER};
    m.u.reg.rank = 0;
    m.u.reg.pid = (int32_t)getpid();
    int first = s1 >= 0 && send_frame(s1, NULL, &m) == 0 &&
                recv_frame(s1, NULL, &m, 2000, NULL, NULL) == 0 && m.type == DDL_MSG_ACK;
    ddl_msg_clear(&m);
    m = (ddl_msg_t){.type = DDL_MSG_REGISTER};
    m.u.reg.rank = 0;
    m.u.reg.pid = (int32_t)getpid();
    int second = s2 >= 0 && send_frame(s2, NULL, &m) == 0 &&
                 recv_frame(s2, NULL, &m, 2000, NULL, NULL) == 0 ? m.type : -1;
    ok(first && second == DDL_MSG_ERROR, "a second REGISTER of rank 0 is refused (%s)",
       second == DDL_MSG_ERROR ? m.u.error.text : "accepted");
    ddl_msg_clear(&m);
    close(s2);
    pump(&l, 500, &p);
    ok(!p.closed && !(p.seen & (1u << DDL_MSG_GENERATION)),
       "the refused supervisor's exit does not stop the step");

    /* log forging: a beat whose host holds a newline and a forged line */
    m = (ddl_msg_t){.type = DDL_MSG_PEER_BEAT};
    m.u.peer_beat.node_id = 1;
    m.u.peer_beat.host = "x\nddl-agent: every rank exited 0 (forged)";
    send_frame(l.fd, &l.link.tx, &m);
    pump(&l, 500, &p);
    ok(!log_line_starts(&leader, "ddl-agent: every rank exited 0 (forged)"),
       "a peer's string with a newline never reaches the log as a line of its own");
    if (s1 >= 0)
        close(s1);
    link_down(&l);
    int st;
    ok(waitpid(leader.pid, &st, WNOHANG) == 0 || !WIFSIGNALED(st),
       "the leader agent survived every attack");
    stop_agent(&leader);
}

/* ------------------------------------------------------------ fake leaders */

/* accept_auth: accept the agent's connection on lfd and read its first frame. */
static int accept_auth(int lfd, ddl_msg_t *m, uint8_t **raw, size_t *raw_len)
{
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    if (poll(&pfd, 1, 10000) != 1)
        return -1;
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
        return -1;
    if (recv_frame(fd, NULL, m, 5000, raw, raw_len) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int exited_within(agent_t *ag, int ms, int *status)
{
    int64_t end = ddl_now_ms() + ms;
    while (ddl_now_ms() < end) {
        if (waitpid(ag->pid, status, WNOHANG) == ag->pid) {
            ag->pid = 0;
            return 1;
        }
        usleep(20000);
    }
    return 0;
}

/* soft_nofile: pid's soft limit on open files (/proc/PID/limits), or 0 */
static unsigned long long soft_nofile(pid_t pid)
{
    char path[64], line[256];
    unsigned long long v = 0;
    snprintf(path, sizeof path, "/proc/%d/limits", (int)pid);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Max open files %llu", &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

/* limit_scenarios: the leader of a 600-node step needs about 1236
 * descriptors: it raises a soft limit of 64 toward the hard one, and warns
 * when the hard limit is 64 too. */
static void limit_scenarios(void)
{
    ddl_error_t err;
    uint16_t port;
    char *extra[] = {"--size", "600", "--node-id", "0", "--nnodes", "600", "--local-ranks", "0",
                     "--heartbeat", "100", "--supervise", "--node-timeout", "3000", NULL};
    for (int hard = 1; hard >= 0; hard--) {
        agent_t ag = {0};
        int tfd = ddl_tcp_listen("127.0.0.1", &port, &err);
        nofile_hard = hard ? 4096 : 0;
        int up = tfd >= 0 && start_agent(&ag, hard ? "limit" : "limit-hard", extra, tfd, 64, 1) == 0;
        nofile_hard = 0;
        if (tfd >= 0)
            close(tfd);
        unsigned long long soft = up ? soft_nofile(ag.pid) : 0;
        if (hard) {
            ok(up && soft >= 1236 && soft <= 4096,
               "a 600-node leader started with 64 open files (hard limit 4096) raises its soft "
               "limit to %llu", soft);
        } else {
            ok(up && soft == 64 && log_has(&ag, "open-file limit (64, hard limit 64) is below the "
                                                "1236 descriptors"),
               "with a hard limit of 64 it says that the limit is short (soft %llu)", soft);
        }
        stop_agent(&ag);
    }
}

static void follower_scenarios(void)
{
    ddl_error_t err;
    uint16_t port;
    int lfd = ddl_tcp_listen("127.0.0.1", &port, &err);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    char *extra[] = {"--size", "3", "--node-id", "1", "--nnodes", "3", "--local-ranks", "1",
                     "--leader", addr, "--heartbeat", "100", "--supervise", "--node-timeout",
                     "1500", "--spares", "1", NULL};
    agent_t ag = {0};
    ddl_msg_t m, w;
    uint8_t *raw = NULL;
    size_t raw_len = 0;
    int st = 0, fd;

    /* 1: a fake leader: it listens where the leader should, without the secret */
    if (lfd < 0 || start_agent(&ag, "follower1", extra, -1, 0, 0) < 0) {
        ok(0, "start the agent of node 1 of a 3-node step");
        return;
    }
    fd = accept_auth(lfd, &m, &raw, &raw_len);
    ok(fd >= 0 && m.type == DDL_MSG_PEER_AUTH, "node 1's agent connects to the leader's address "
       "and authenticates with PEER_AUTH");
    ok(fd >= 0 && !memmem(raw, raw_len, secret, sizeof secret) &&
       !memmem(raw, raw_len, secret, 8),
       "what it sent (%zu bytes) does not contain the step's secret", raw_len);
    if (fd >= 0) {
        ddl_msg_clear(&m);
        w = (ddl_msg_t){.type = DDL_MSG_PEER_WELCOME};
        ddl_auth_nonce(w.u.peer_welcome.nonce, NULL);
        ddl_auth_nonce(w.u.peer_welcome.mac, NULL); /* a guess: no secret */
        send_frame(fd, NULL, &w);
    }
    int gone = exited_within(&ag, 5000, &st);
    ok(gone && WIFEXITED(st) && WEXITSTATUS(st) != 0,
       "it does not link to a leader without the secret: exits %d, not a crash",
       WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
    ok(log_has(&ag, "did not prove that it belongs to this step"),
       "its log says that the agent at the leader's address did not prove it belongs to the step");
    if (fd >= 0)
        close(fd);
    free(raw);
    raw = NULL;
    stop_agent(&ag);

    /* 2: a leader with the secret (a compromised node) sends impossible things */
    if (start_agent(&ag, "follower2", extra, -1, 0, 0) < 0) {
        ok(0, "start the agent of node 1 again");
        return;
    }
    fd = accept_auth(lfd, &m, NULL, NULL);
    uint8_t mac[DDL_AUTH_MAC];
    ddl_auth_link_t link;
    int authed = fd >= 0 && m.type == DDL_MSG_PEER_AUTH &&
                 ddl_auth_hello_mac(secret, sizeof secret, step, m.u.peer_auth.node_id,
                                    m.u.peer_auth.host, m.u.peer_auth.listen,
                                    m.u.peer_auth.nonce, mac) == 0 &&
                 ddl_auth_equal(mac, m.u.peer_auth.mac, sizeof mac);
    if (authed) {
        w = (ddl_msg_t){.type = DDL_MSG_PEER_WELCOME};
        w.u.peer_welcome.node_id = 0;
        ddl_auth_nonce(w.u.peer_welcome.nonce, NULL);
        ddl_auth_welcome_mac(secret, sizeof secret, step, 0, 1, m.u.peer_auth.nonce,
                             w.u.peer_welcome.nonce, w.u.peer_welcome.mac);
        ddl_auth_link_init(&link, secret, sizeof secret, m.u.peer_auth.nonce,
                           w.u.peer_welcome.nonce, 0);
        send_frame(fd, NULL, &w);
    }
    if (fd >= 0)
        ddl_msg_clear(&m);
    ok(authed, "node 1's PEER_AUTH carries a valid MAC under the secret");
    if (!authed) {
        stop_agent(&ag);
        close(lfd);
        return;
    }
    uint32_t map[3] = {0x40000000u, 0, DDL_NODE_IDLE};
    m = (ddl_msg_t){.type = DDL_MSG_GENERATION};
    m.u.generation.gen = 1;
    m.u.generation.action = DDL_GEN_RESTART;
    m.u.generation.code = -1;
    m.u.generation.cause = "forged";
    m.u.generation.nnodes = 3;
    m.u.generation.node_rank = map;
    send_frame(fd, &link.tx, &m);
    usleep(400000);
    ok(waitpid(ag.pid, &st, WNOHANG) == 0 && log_has(&ag, "ignoring the leader's generation"),
       "a GENERATION placing node 0 at position 2^30 is refused; the agent runs on");
    map[0] = 1;
    m.u.generation.master = "10.0.0.1\nLD_PRELOAD=/tmp/evil.so";
    send_frame(fd, &link.tx, &m);
    usleep(400000);
    ok(log_has(&ag, "malformed") && !log_has(&ag, "restart 1") && !log_has(&ag, "evil"),
       "a MASTER_ADDR with a newline is malformed: not applied, closes the link");
    gone = exited_within(&ag, 3000, &st);
    ok(!gone || !WIFSIGNALED(st), "the agent never crashed (%s)",
       gone ? "it stopped after losing its leader" : "still running");
    close(fd);
    stop_agent(&ag);

    /* 3: a worker late for a generation already over (a warm restart still
     * rejoining it) hears the current one after the refusal.  A new
     * address: the agent of 2 may have queued a connection on the old one */
    close(lfd);
    lfd = ddl_tcp_listen("127.0.0.1", &port, &err);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    if (lfd < 0 || start_agent(&ag, "follower3", extra, -1, 0, 0) < 0) {
        ok(0, "start the agent of node 1 a third time");
        if (lfd >= 0)
            close(lfd);
        return;
    }
    fd = accept_auth(lfd, &m, NULL, NULL);
    authed = fd >= 0 && m.type == DDL_MSG_PEER_AUTH;
    if (authed) {
        w = (ddl_msg_t){.type = DDL_MSG_PEER_WELCOME};
        ddl_auth_nonce(w.u.peer_welcome.nonce, NULL);
        ddl_auth_welcome_mac(secret, sizeof secret, step, 0, 1, m.u.peer_auth.nonce,
                             w.u.peer_welcome.nonce, w.u.peer_welcome.mac);
        ddl_auth_link_init(&link, secret, sizeof secret, m.u.peer_auth.nonce,
                           w.u.peer_welcome.nonce, 0);
        send_frame(fd, NULL, &w);
        ddl_msg_clear(&m);
        uint32_t moved[3] = {DDL_NODE_IDLE, 0, 1}; /* node 0 lost, the spare node 2 in */
        m = (ddl_msg_t){.type = DDL_MSG_GENERATION};
        m.u.generation.gen = 1;
        m.u.generation.action = DDL_GEN_RESTART;
        m.u.generation.code = -1;
        m.u.generation.cause = "node 0 lost (test)";
        m.u.generation.nnodes = 3;
        m.u.generation.node_rank = moved;
        send_frame(fd, &link.tx, &m);
    }
    for (int i = 0; i < 100 && !log_has(&ag, "node 0 lost (test)"); i++)
        usleep(20000);
    ok(authed && log_has(&ag, "node 0 lost (test)"), "node 1's agent takes generation 1 from "
       "the leader");
    int wfd = ddl_sock_connect(ag.sock, 2000, &err), refused = 0, told = 0;
    if (wfd >= 0) {
        uint8_t card = 0;
        m = (ddl_msg_t){.type = DDL_MSG_ALLGATHER};
        m.u.allgather.gen = 0;
        m.u.allgather.rank = 1;
        m.u.allgather.size = 2;
        m.u.allgather.len = 1;
        m.u.allgather.data = &card;
        if (ddl_proto_send(wfd, &m) == 0 && ddl_proto_recv(wfd, &m, 3000, &err) == 0) {
            refused = m.type == DDL_MSG_ERROR && m.u.error.code == ESTALE;
            ddl_msg_clear(&m);
            if (ddl_proto_recv(wfd, &m, 3000, &err) == 0) {
                told = m.type == DDL_MSG_GENERATION && m.u.generation.gen == 1 &&
                       m.u.generation.action == DDL_GEN_RESTART && m.u.generation.nnodes == 3 &&
                       m.u.generation.node_rank && m.u.generation.node_rank[0] == DDL_NODE_IDLE &&
                       m.u.generation.node_rank[1] == 0 && m.u.generation.node_rank[2] == 1;
                ddl_msg_clear(&m);
            }
        }
        close(wfd);
    }
    ok(refused, "a worker's exchange for generation 0 is refused (ESTALE)");
    ok(told, "... and it is told generation 1, with its world map");
    if (fd >= 0)
        close(fd);
    stop_agent(&ag);
    close(lfd);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: agent-attack PATH/TO/ddl-agent\n");
        return 2;
    }
    agent_bin = argv[1];
    /* node 1 here beats only while pump() runs; the agents' adaptive detector
     * would count its pauses (more than 0.3 s) as a loss, which is not what
     * these attacks are about: the agents started here wait the node timeout */
    setenv("DDL_DETECTOR", "fixed", 1);
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 2048) {
        rl.rlim_cur = rl.rlim_max < 2048 ? rl.rlim_max : 2048;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (!mkdtemp(tmpdir) || ddl_auth_nonce(secret, NULL) < 0) {
        printf("1..0 # SKIP cannot make a scratch directory or a secret\n");
        return 0;
    }
    leader_scenarios();
    follower_scenarios();
    limit_scenarios();
    printf("1..%d\n", test_num);
    char cmd[300];
    if (!failed) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
        if (system(cmd) != 0)
            diag("could not remove %s", tmpdir);
    } else {
        diag("agent logs kept in %s", tmpdir);
    }
    return 0;
}
