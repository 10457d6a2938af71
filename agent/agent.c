/* agent.c: the ddl-agent daemon of one step on one node.
 *
 * It accepts connections from the step's supervisors (ddl-launch: REGISTER,
 * RANK_STATE), its workers (libddl: ALLGATHER for the bootstrap exchange of
 * UCX addresses) and status clients (STATUS_REQ).  Every connection's peer
 * is checked with SO_PEERCRED: only the agent's own uid and root are served.
 * Sockets are non-blocking with per-connection input/output buffers, so one
 * slow client never stalls the others.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent.h"
#include "log.h"
#include "proto.h"
#include "sock.h"

typedef struct {
    int fd;
    uid_t uid;
    pid_t pid;
    int rank; /* rank whose supervisor this is, -1 otherwise */
    uint8_t *in;
    size_t in_len, in_cap;
    uint8_t *out;
    size_t out_len, out_off;
    int close_after_flush;
} conn_t;

typedef struct {
    const ddl_agent_opts_t *opts;
    int lfd, sfd;
    conn_t **conns;
    size_t nconns, cap;
    ddl_rank_info_t *ranks;
    /* the bootstrap allgather in progress */
    int ag_active;
    uint32_t ag_gen, ag_seq, ag_got;
    uint8_t **ag_blob;
    uint32_t *ag_len;
    conn_t **ag_waiter;
    int shutting_down;
} agent_t;

static void conn_free(conn_t *c)
{
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    free(c->in);
    free(c->out);
    free(c);
}

static int conn_queue(conn_t *c, const ddl_msg_t *msg)
{
    uint8_t *frame;
    size_t len;
    if (ddl_proto_encode(msg, &frame, &len) < 0) {
        ddl_error("cannot encode a %s reply: %m", ddl_msg_type_str(msg->type));
        return -1;
    }
    if (c->out_off == c->out_len) {
        free(c->out);
        c->out = frame;
        c->out_len = len;
        c->out_off = 0;
        return 0;
    }
    uint8_t *nb = realloc(c->out, c->out_len + len);
    if (!nb) {
        free(frame);
        return -1;
    }
    memcpy(nb + c->out_len, frame, len);
    c->out = nb;
    c->out_len += len;
    free(frame);
    return 0;
}

static void conn_error(conn_t *c, int code, const char *text)
{
    ddl_msg_t m = {.type = DDL_MSG_ERROR};
    m.u.error.code = code;
    m.u.error.text = (char *)text;
    conn_queue(c, &m);
}

static void ag_reset(agent_t *a)
{
    for (uint32_t i = 0; i < a->opts->size; i++) {
        free(a->ag_blob[i]);
        a->ag_blob[i] = NULL;
        a->ag_len[i] = 0;
        a->ag_waiter[i] = NULL;
    }
    a->ag_active = 0;
    a->ag_got = 0;
}

static void ag_complete(agent_t *a)
{
    size_t total = 0;
    uint32_t n = a->opts->size;
    for (uint32_t i = 0; i < n; i++)
        total += a->ag_len[i];
    uint8_t *data = malloc(total ? total : 1);
    if (!data) {
        ddl_error("out of memory assembling a %zu-byte allgather", total);
        for (uint32_t i = 0; i < n; i++)
            if (a->ag_waiter[i])
                conn_error(a->ag_waiter[i], ENOMEM, "agent out of memory");
        ag_reset(a);
        return;
    }
    size_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (a->ag_len[i])
            memcpy(data + off, a->ag_blob[i], a->ag_len[i]);
        off += a->ag_len[i];
    }
    ddl_msg_t m = {.type = DDL_MSG_ALLGATHER_RESULT};
    m.u.allgather_result.gen = a->ag_gen;
    m.u.allgather_result.seq = a->ag_seq;
    m.u.allgather_result.count = n;
    m.u.allgather_result.lens = a->ag_len;
    m.u.allgather_result.data = data;
    for (uint32_t i = 0; i < n; i++)
        if (a->ag_waiter[i])
            conn_queue(a->ag_waiter[i], &m);
    ddl_debug("allgather %u of generation %u complete (%zu bytes)", a->ag_seq, a->ag_gen, total);
    free(data);
    ag_reset(a);
}

static void handle_allgather(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    char why[160];
    typeof(m->u.allgather) *g = &m->u.allgather;
    if (g->size != a->opts->size) {
        snprintf(why, sizeof why, "world size %u does not match the step's %u", g->size,
                 a->opts->size);
        conn_error(c, EINVAL, why);
        return;
    }
    if (a->ag_active && (g->seq != a->ag_seq || g->gen != a->ag_gen)) {
        snprintf(why, sizeof why, "allgather %u/%u while %u/%u is in progress", g->gen, g->seq,
                 a->ag_gen, a->ag_seq);
        conn_error(c, EBUSY, why);
        return;
    }
    if (a->ag_active && a->ag_blob[g->rank]) {
        snprintf(why, sizeof why, "rank %u contributed twice to allgather %u", g->rank, g->seq);
        conn_error(c, EEXIST, why);
        return;
    }
    a->ag_active = 1;
    a->ag_gen = g->gen;
    a->ag_seq = g->seq;
    a->ag_blob[g->rank] = g->data; /* take ownership */
    a->ag_len[g->rank] = g->len;
    a->ag_waiter[g->rank] = c;
    g->data = NULL;
    a->ag_got++;
    if (a->ranks[g->rank].wpid == 0)
        a->ranks[g->rank].wpid = c->pid;
    ddl_debug("allgather %u: rank %u in (%u of %u)", g->seq, g->rank, a->ag_got, a->opts->size);
    if (a->ag_got == a->opts->size)
        ag_complete(a);
}

static void handle_status(agent_t *a, conn_t *c)
{
    ddl_msg_t m = {.type = DDL_MSG_STATUS};
    m.u.status.step = (char *)a->opts->step;
    m.u.status.size = a->opts->size;
    m.u.status.gen = a->ag_gen;
    m.u.status.agent_pid = (int32_t)getpid();
    m.u.status.nranks = a->opts->size;
    m.u.status.ranks = a->ranks;
    conn_queue(c, &m);
    c->close_after_flush = 1;
}

static void handle_msg(agent_t *a, conn_t *c, ddl_msg_t *m)
{
    char why[160];
    uint32_t rank;
    switch (m->type) {
    case DDL_MSG_REGISTER:
        rank = m->u.reg.rank;
        if (rank >= a->opts->size) {
            snprintf(why, sizeof why, "rank %u is outside the step's world of %u", rank,
                     a->opts->size);
            conn_error(c, EINVAL, why);
            return;
        }
        c->rank = (int)rank;
        a->ranks[rank].state = DDL_RANK_STARTING;
        a->ranks[rank].pid = m->u.reg.pid;
        ddl_debug("rank %u registered (supervisor pid %d)", rank, m->u.reg.pid);
        conn_queue(c, &(ddl_msg_t){.type = DDL_MSG_ACK});
        return;
    case DDL_MSG_RANK_STATE:
        rank = m->u.rank_state.rank;
        if (c->rank < 0 || (uint32_t)c->rank != rank) {
            snprintf(why, sizeof why, "RANK_STATE for rank %u from a connection that did not "
                     "register it", rank);
            conn_error(c, EPERM, why);
            return;
        }
        a->ranks[rank].state = m->u.rank_state.state;
        a->ranks[rank].wpid = m->u.rank_state.pid;
        a->ranks[rank].wstatus = m->u.rank_state.wstatus;
        ddl_debug("rank %u is %s", rank, ddl_rank_state_str(m->u.rank_state.state));
        return;
    case DDL_MSG_ALLGATHER:
        handle_allgather(a, c, m);
        return;
    case DDL_MSG_STATUS_REQ:
        handle_status(a, c);
        return;
    default:
        snprintf(why, sizeof why, "unexpected %s message", ddl_msg_type_str(m->type));
        conn_error(c, EPROTO, why);
        c->close_after_flush = 1;
        return;
    }
}

static void conn_drop(agent_t *a, size_t idx)
{
    conn_t *c = a->conns[idx];
    if (c->rank >= 0) {
        ddl_rank_info_t *r = &a->ranks[c->rank];
        if (!a->shutting_down &&
            (r->state == DDL_RANK_STARTING || r->state == DDL_RANK_RUNNING)) {
            ddl_warn("supervisor of rank %d (pid %d) disconnected while the rank was %s",
                     c->rank, (int)c->pid, ddl_rank_state_str(r->state));
            r->state = DDL_RANK_FAILED;
        }
    }
    for (uint32_t i = 0; i < a->opts->size; i++)
        if (a->ag_waiter[i] == c)
            a->ag_waiter[i] = NULL;
    conn_free(c);
    a->conns[idx] = a->conns[--a->nconns];
}

/* conn_read: read what is available and handle every whole frame; returns
 * -1 when the connection must be dropped (after handling what came before
 * the peer closed). */
static int conn_read(agent_t *a, conn_t *c)
{
    int eof = 0;
    for (;;) {
        if (c->in_cap - c->in_len < 4096) {
            size_t cap = c->in_cap ? c->in_cap * 2 : 8192;
            if (cap > DDL_PROTO_MAX_BODY + 2 * DDL_PROTO_HDR_LEN + 8192)
                cap = DDL_PROTO_MAX_BODY + 2 * DDL_PROTO_HDR_LEN + 8192;
            if (cap <= c->in_cap)
                return -1;
            uint8_t *nb = realloc(c->in, cap);
            if (!nb)
                return -1;
            c->in = nb;
            c->in_cap = cap;
        }
        ssize_t n = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                break;
            return -1;
        }
        if (n == 0) {
            eof = 1;
            break;
        }
        c->in_len += (size_t)n;
    }
    size_t off = 0;
    for (;;) {
        ddl_msg_t m;
        ddl_error_t err;
        ssize_t used = ddl_proto_decode(c->in + off, c->in_len - off, &m, &err);
        if (used < 0) {
            ddl_warn("dropping client pid %d: %s", (int)c->pid, err.text);
            conn_error(c, EPROTO, err.text);
            ddl_fd_set_nonblock(c->fd, 0);
            if (c->out_len > c->out_off)
                ddl_write_full(c->fd, c->out + c->out_off, c->out_len - c->out_off);
            return -1;
        }
        if (used == 0)
            break;
        handle_msg(a, c, &m);
        ddl_msg_clear(&m);
        off += (size_t)used;
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
    return eof ? -1 : 0;
}

static int conn_flush(conn_t *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return 0;
            return -1;
        }
        c->out_off += (size_t)n;
    }
    return c->close_after_flush ? -1 : 0;
}

static void do_accept(agent_t *a)
{
    for (;;) {
        int fd = accept4(a->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR)
                ddl_warn("accept: %m");
            return;
        }
        conn_t *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->rank = -1;
        if (ddl_sock_peer(fd, &c->pid, &c->uid, NULL) < 0 ||
            !ddl_sock_peer_allowed(c->uid, getuid())) {
            char why[128];
            snprintf(why, sizeof why, "permission denied: uid %u may not use the agent of "
                     "uid %u", (unsigned)c->uid, (unsigned)getuid());
            ddl_warn("refused connection from pid %d: %s", (int)c->pid, why);
            conn_error(c, EACCES, why);
            ddl_fd_set_nonblock(fd, 0);
            ddl_write_full(fd, c->out, c->out_len);
            conn_free(c);
            continue;
        }
        if (a->nconns == a->cap) {
            size_t cap = a->cap ? a->cap * 2 : 16;
            conn_t **nc = realloc(a->conns, cap * sizeof *nc);
            if (!nc) {
                conn_free(c);
                continue;
            }
            a->conns = nc;
            a->cap = cap;
        }
        a->conns[a->nconns++] = c;
    }
}

static int setup(agent_t *a)
{
    sigset_t mask;
    ddl_error_t err;
    uint32_t n = a->opts->size;

    a->ranks = calloc(n, sizeof *a->ranks);
    a->ag_blob = calloc(n, sizeof *a->ag_blob);
    a->ag_len = calloc(n, sizeof *a->ag_len);
    a->ag_waiter = calloc(n, sizeof *a->ag_waiter);
    if (!a->ranks || !a->ag_blob || !a->ag_len || !a->ag_waiter) {
        ddl_error("out of memory for a step of %u ranks", n);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        a->ranks[i].rank = i;

    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    a->sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (a->sfd < 0) {
        ddl_error("signalfd: %m");
        return -1;
    }
    if (a->opts->parent_pid > 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != a->opts->parent_pid) {
            ddl_error("parent process %d is already gone", a->opts->parent_pid);
            return -1;
        }
    }
    a->lfd = ddl_sock_listen(a->opts->socket_path, &err);
    if (a->lfd < 0) {
        ddl_error("%s", err.text);
        return -1;
    }
    ddl_fd_set_nonblock(a->lfd, 1);
    return 0;
}

int ddl_agent_serve(const ddl_agent_opts_t *opts)
{
    agent_t a = {.opts = opts, .lfd = -1, .sfd = -1};
    int status = 1;
    struct pollfd *pfds = NULL;

    if (setup(&a) < 0)
        goto out;
    ddl_info("serving step %s (%u ranks) on %s", opts->step, opts->size, opts->socket_path);
    if (opts->ready_fd >= 0) {
        ddl_write_full(opts->ready_fd, "1\n", 2);
        close(opts->ready_fd);
    }
    for (;;) {
        size_t n = a.nconns + 2;
        struct pollfd *np = realloc(pfds, n * sizeof *pfds);
        if (!np) {
            ddl_error("out of memory");
            goto out;
        }
        pfds = np;
        pfds[0] = (struct pollfd){.fd = a.sfd, .events = POLLIN};
        pfds[1] = (struct pollfd){.fd = a.lfd, .events = POLLIN};
        for (size_t i = 0; i < a.nconns; i++) {
            conn_t *c = a.conns[i];
            pfds[i + 2] = (struct pollfd){.fd = c->fd, .events = POLLIN};
            if (c->out_off < c->out_len)
                pfds[i + 2].events |= POLLOUT;
        }
        if (poll(pfds, n, -1) < 0) {
            if (errno == EINTR)
                continue;
            ddl_error("poll: %m");
            goto out;
        }
        /* Walk connections from the end, since dropping swaps in the last. */
        for (size_t i = a.nconns; i-- > 0;) {
            conn_t *c = a.conns[i];
            short re = pfds[i + 2].revents;
            int drop = 0;
            if (re & (POLLIN | POLLHUP | POLLERR))
                drop = conn_read(&a, c) < 0;
            if (!drop && c->out_off < c->out_len)
                drop = conn_flush(c) < 0;
            else if (!drop && c->close_after_flush)
                drop = 1;
            if (drop)
                conn_drop(&a, i);
        }
        /* Replies queued for connections other than the one that was read. */
        for (size_t i = a.nconns; i-- > 0;)
            if (a.conns[i]->out_off < a.conns[i]->out_len && conn_flush(a.conns[i]) < 0)
                conn_drop(&a, i);
        if (pfds[1].revents & POLLIN)
            do_accept(&a);
        /* Signals last: what clients sent before them has been handled. */
        if (pfds[0].revents) {
            struct signalfd_siginfo si;
            if (read(a.sfd, &si, sizeof si) == sizeof si) {
                ddl_debug("got signal %u: shutting down", si.ssi_signo);
                status = 0;
                goto out;
            }
        }
    }
out:
    a.shutting_down = 1;
    if (a.lfd >= 0) {
        unlink(opts->socket_path);
        close(a.lfd);
    }
    while (a.nconns)
        conn_drop(&a, a.nconns - 1);
    if (a.ag_blob)
        ag_reset(&a);
    free(a.conns);
    free(pfds);
    free(a.ranks);
    free(a.ag_blob);
    free(a.ag_len);
    free(a.ag_waiter);
    if (a.sfd >= 0)
        close(a.sfd);
    return status;
}
