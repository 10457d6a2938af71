/* conn.c: ddl-agent's connections: per-connection input and output
 * buffers on non-blocking sockets, frames checked at the header before a
 * body is buffered (before authentication only a small PEER_AUTH; on an
 * authenticated link the tag before decoding), accepting under limits
 * (unauthenticated connections, descriptors) and dropping a connection
 * with what its end means for the step.  Each connection is an fd watcher
 * in the agent's loop (common/evloop.h) with one timer for its deadlines.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "agent_int.h"
#include "log.h"
#include "sock.h"

void conn_free(conn_t *c)
{
    if (!c)
        return;
    ddl_ev_fd_remove(c->ev); /* before its fd closes */
    ddl_ev_timer_free(c->deadline);
    if (c->fd >= 0)
        close(c->fd);
    free(c->in);
    free(c->out);
    free(c);
}

/* conn_queue: encode msg for c's output (with its tag on an authenticated
 * link between agents); written by the main loop without blocking. */
int conn_queue(conn_t *c, const ddl_msg_t *msg)
{
    uint8_t *frame;
    size_t len;
    if (ddl_proto_encode(msg, &frame, &len) < 0) {
        ddl_error("cannot encode a %s reply: %m", ddl_msg_type_str(msg->type));
        return -1;
    }
    if (c->authed) {
        uint8_t *t = realloc(frame, len + DDL_AUTH_TAG);
        if (!t || ddl_auth_tag(&c->link.tx, t, len, t + len) < 0) {
            ddl_error("cannot sign a %s message for node %u", ddl_msg_type_str(msg->type),
                      c->node_id);
            free(t ? t : frame);
            return -1;
        }
        frame = t;
        len += DDL_AUTH_TAG;
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

/* conn_error: an ERROR for c (never to a TCP peer that has not
 * authenticated: it gets no answer at all). */
void reply_error(conn_t *c, int code, const char *text)
{
    ddl_msg_t m = {.type = DDL_MSG_ERROR};
    m.u.error.code = code;
    m.u.error.text = (char *)text;
    conn_queue(c, &m);
}

void conn_error(conn_t *c, int code, const char *text)
{
    if (c->kind != CONN_TCP_NEW)
        reply_error(c, code, text);
}

/* limited: whether a warning about unauthenticated connections may be
 * logged now: at most 10 in 10 s, then one line saying how many were not. */
int limited(void)
{
    static int64_t window;
    static unsigned shown, hidden;
    int64_t now = ddl_now_ms();
    if (now - window >= 10000) {
        if (hidden)
            ddl_warn("%u more warnings about agent connections were not logged", hidden);
        window = now;
        shown = hidden = 0;
    }
    if (shown < 10) {
        shown++;
        return 1;
    }
    hidden++;
    return 0;
}

/* refuse: a frame c may not send.  A TCP peer is dropped without an answer
 * (before it authenticated) or its link closed; a local client is told why
 * and dropped once that is written (or after CLOSE_FLUSH_MS).  -1: drop now. */
static int refuse(conn_t *c, const char *why)
{
    if (c->kind == CONN_TCP_NEW) {
        if (limited())
            ddl_warn("dropping a TCP connection from %s: %s", c->ip, why);
        return -1;
    }
    if (c->kind != CONN_UNIX) {
        ddl_error("node %u's agent sent a malformed message (%s): closing its link", c->node_id,
                  why);
        return -1;
    }
    ddl_warn("dropping client pid %d: %s", (int)c->pid, why);
    conn_error(c, EPROTO, why);
    c->close_after_flush = 1;
    return 0;
}

/* conn_frames: handle every whole frame in c's input, checking headers
 * before the body is buffered: before authentication only PEER_AUTH of at
 * most DDL_PROTO_MAX_AUTH_BODY bytes; on an authenticated link, the tag
 * before the body is decoded.  Grows the buffer to the frame that is
 * arriving.  -1: drop the connection. */
static int conn_frames(agent_t *a, conn_t *c)
{
    size_t off = 0;
    int rc = 0;
    while (!c->close_after_flush && !c->dead) {
        const uint8_t *p = c->in + off;
        size_t avail = c->in_len - off, flen;
        uint16_t type;
        ddl_error_t err;
        int pk = ddl_proto_peek(p, avail, &type, &flen, &err);
        if (pk == 0)
            break;
        if (pk > 0 && c->kind == CONN_TCP_NEW &&
            (type != DDL_MSG_PEER_AUTH || flen > DDL_PROTO_HDR_LEN + DDL_PROTO_MAX_AUTH_BODY)) {
            snprintf(err.text, sizeof err.text, "a %s message of %zu bytes before authenticating",
                     ddl_msg_type_str(type), flen - DDL_PROTO_HDR_LEN);
            pk = -1;
        }
        if (pk < 0) {
            rc = refuse(c, err.text);
            break;
        }
        size_t need = flen + (c->authed ? DDL_AUTH_TAG : 0);
        if (avail < need) {
            if (need > c->in_cap) {
                uint8_t *nb = realloc(c->in, need);
                if (!nb) {
                    ddl_error("out of memory for a %zu-byte message", need);
                    rc = -1;
                    break;
                }
                c->in = nb;
                c->in_cap = need;
            }
            break;
        }
        if (c->authed && ddl_auth_check(&c->link.rx, p, flen, p + flen) != 1) {
            ddl_error("node %u's agent link: a %s message failed its authentication: closing "
                      "the link", c->node_id, ddl_msg_type_str(type));
            rc = -1;
            break;
        }
        ddl_msg_t m;
        if (ddl_proto_decode(p, flen, &m, &err) < 0) {
            rc = refuse(c, err.text);
            break;
        }
        handle_msg(a, c, &m);
        ddl_msg_clear(&m);
        off += need;
    }
    if (c->dead)
        return -1;
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
    return rc;
}

/* conn_read: read what is available (at most READ_BUDGET bytes per call, so
 * that one busy connection cannot hold the loop) and handle every whole
 * frame; -1 when the connection must be dropped (after handling what came
 * before the peer closed). */
#define READ_BUDGET (4u << 20)
int conn_read(agent_t *a, conn_t *c)
{
    size_t budget = READ_BUDGET;
    if (c->close_after_flush)
        return 0;
    while (budget > 0) {
        if (c->in_len == c->in_cap) {
            /* a first buffer (small before authenticating); a longer frame
             * has had its buffer grown by conn_frames */
            size_t cap = c->kind == CONN_TCP_NEW ? DDL_PROTO_HDR_LEN + DDL_PROTO_MAX_AUTH_BODY
                                                 : 8192;
            if (c->in_cap >= cap)
                return -1; /* cannot happen: whole frames are handled as they arrive */
            uint8_t *nb = realloc(c->in, cap);
            if (!nb)
                return -1;
            c->in = nb;
            c->in_cap = cap;
        }
        size_t room = c->in_cap - c->in_len;
        ssize_t n = read(c->fd, c->in + c->in_len, room < budget ? room : budget);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN ? 0 : -1;
        }
        if (n == 0)
            return -1;
        c->in_len += (size_t)n;
        budget -= (size_t)n;
        if (conn_frames(a, c) < 0)
            return -1;
        if (c->close_after_flush)
            return 0;
    }
    return 0;
}

int conn_flush(conn_t *c)
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

/* conn_ready: c's socket is readable, or closed: read it and handle every
 * whole frame; what is queued is written by conns_prepare. */
static void conn_ready(ddl_evloop_t *loop, ddl_ev_fd_t *w, int fd, short re, void *arg)
{
    conn_t *c = arg;
    (void)loop;
    (void)w;
    (void)fd;
    if ((re & (POLLIN | POLLHUP | POLLERR)) && conn_read(c->a, c) < 0)
        conn_drop_c(c->a, c);
}

/* conn_arm_deadline: c's timer at the earlier of its deadlines (a TCP
 * connection that has not authenticated, a refused client's error that is
 * not being read), or none. */
static void conn_arm_deadline(conn_t *c)
{
    int64_t at = 0;
    if (c->kind == CONN_TCP_NEW)
        at = c->opened_ms + HELLO_TIMEOUT_MS + 1;
    if (c->closing_ms && (!at || c->closing_ms + CLOSE_FLUSH_MS + 1 < at))
        at = c->closing_ms + CLOSE_FLUSH_MS + 1;
    if (at)
        ddl_ev_timer_arm_at(c->deadline, at, 0);
    else
        ddl_ev_timer_cancel(c->deadline);
}

static void conn_deadline(ddl_evloop_t *loop, ddl_ev_timer_t *t, void *arg)
{
    conn_t *c = arg;
    int64_t now = ddl_now_ms();
    (void)loop;
    (void)t;
    if (c->kind == CONN_TCP_NEW && now - c->opened_ms > HELLO_TIMEOUT_MS) {
        if (limited())
            ddl_warn("dropping a TCP connection from %s that did not authenticate within %d s",
                     c->ip, HELLO_TIMEOUT_MS / 1000);
        conn_drop_c(c->a, c);
    } else if (c->closing_ms && now - c->closing_ms > CLOSE_FLUSH_MS) {
        conn_drop_c(c->a, c);
    } else {
        conn_arm_deadline(c);
    }
}

/* conn_add: c (its fd set) joins the agent's connections and loop. */
int conn_add(agent_t *a, conn_t *c)
{
    if (a->nconns == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        conn_t **nc = realloc(a->conns, cap * sizeof *nc);
        if (!nc)
            return -1;
        a->conns = nc;
        a->cap = cap;
    }
    c->ev = ddl_ev_fd_add(a->loop, c->fd, POLLIN, conn_ready, c);
    c->deadline = c->ev ? ddl_ev_timer_new(a->loop, conn_deadline, c) : NULL;
    if (!c->deadline) {
        ddl_ev_fd_remove(c->ev);
        c->ev = NULL;
        return -1;
    }
    c->a = a;
    conn_arm_deadline(c);
    a->conns[a->nconns++] = c;
    return 0;
}

/* conns_prepare: before the loop waits (each round): write what is queued
 * for every connection, drop those closed once written, start the clock
 * of a refused client's error, and poll each for what it needs. */
void conns_prepare(agent_t *a)
{
    for (size_t i = a->nconns; i-- > 0;) {
        conn_t *c = a->conns[i];
        int drop = 0;
        if (c->out_off < c->out_len)
            drop = conn_flush(c) < 0;
        else if (c->close_after_flush)
            drop = 1;
        if (drop) {
            conn_drop(a, i);
            continue;
        }
        if (c->close_after_flush && !c->closing_ms) {
            c->closing_ms = ddl_now_ms();
            conn_arm_deadline(c);
        }
        /* a connection being closed is not read: only its error is written */
        short ev = c->close_after_flush ? 0 : POLLIN;
        if (c->out_off < c->out_len)
            ev |= POLLOUT;
        ddl_ev_fd_set_events(c->ev, ev);
    }
}

void conn_drop_c(agent_t *a, conn_t *c)
{
    for (size_t i = 0; i < a->nconns; i++)
        if (a->conns[i] == c) {
            conn_drop(a, i);
            return;
        }
}

void conn_drop(agent_t *a, size_t idx)
{
    conn_t *c = a->conns[idx];
    if (c->rank >= 0) {
        ddl_rank_info_t *r = &a->ranks[c->rank];
        int live = r->state == DDL_RANK_STARTING || r->state == DDL_RANK_RUNNING;
        if (a->opts->supervise && !a->final && !a->shutting_down) {
            /* its supervisor waits for the decision until the step ends */
            failure_t f = {.gen = a->gen, .rank = c->rank, .node = a->opts->node_id,
                           .cls = DDL_FAIL_SUPERVISOR};
            snprintf(f.host, sizeof f.host, "%s", a->host);
            if (r->state == DDL_RANK_FAILED || r->state == DDL_RANK_EXITED) {
                /* it said how it ended before the decision: it was signalled */
                char how[128] = "never started (a spare)";
                if (r->wpid > 0)
                    ddl_describe_wait_status(r->wstatus, how, sizeof how);
                snprintf(f.text, sizeof f.text, "its supervisor ddl-launch (pid %d) was told to "
                         "stop and ended with its worker, which %s", (int)c->pid, how);
                ddl_debug("supervisor of rank %d (pid %d) ended", c->rank, (int)c->pid);
            } else {
                snprintf(f.text, sizeof f.text, "its supervisor ddl-launch (pid %d) is gone",
                         (int)c->pid);
                ddl_warn("supervisor of rank %d (pid %d) disconnected", c->rank, (int)c->pid);
            }
            r->state = DDL_RANK_FAILED;
            report_failure(a, &f);
        } else if (!a->shutting_down && !a->final && live) {
            ddl_warn("supervisor of rank %d (pid %d) disconnected while the rank was %s",
                     c->rank, (int)c->pid, ddl_rank_state_str(r->state));
            r->state = DDL_RANK_FAILED;
        }
        c->rank = -1;
    }
    if (c->kind == CONN_LEADER) {
        a->up = NULL;
        if (!a->shutting_down) {
            if (a->ag_active)
                ddl_error("lost the link to the leader agent (%s) during an exchange",
                          a->leader_addr);
            else
                ddl_info("the leader agent (%s) closed its link", a->leader_addr);
            ag_fail(a, ECONNRESET, "this node's agent lost its link to the leader agent");
        }
    } else if (c->kind == CONN_PEER && !a->shutting_down && !a->final) {
        ddl_info("node %u's agent closed its link", c->node_id);
    }
    if (c->heard_ms < INT64_MAX / 2 && (c->kind == CONN_PEER || c->kind == CONN_LEADER))
        link_lost(a, c, LINK_CLOSED);
    if ((c->kind == CONN_PEER || c->kind == CONN_LEADER) && c->node_id < a->opts->nnodes)
        a->peers[c->node_id].state = DDL_PEER_LOST;
    for (uint32_t i = 0; i < a->opts->size; i++)
        if (a->ag_waiter[i] == c)
            a->ag_waiter[i] = NULL;
    conn_free(c);
    a->conns[idx] = a->conns[--a->nconns];
}

/* out_of_fds: accept() found no descriptor: make room by dropping the
 * oldest unauthenticated connection, and pause accepting for a moment
 * (poll would report the pending connection again at once: a busy loop). */
static void out_of_fds(agent_t *a, const char *which)
{
    size_t oldest = a->nconns;
    for (size_t i = 0; i < a->nconns; i++)
        if (a->conns[i]->kind == CONN_TCP_NEW &&
            (oldest == a->nconns || a->conns[i]->opened_ms < a->conns[oldest]->opened_ms))
            oldest = i;
    if (oldest < a->nconns)
        conn_drop(a, oldest);
    a->accept_paused_until = ddl_now_ms() + ACCEPT_PAUSE_MS;
    if (limited())
        ddl_warn("accept (%s): out of file descriptors (%zu connections open); pausing for "
                 "%d ms", which, a->nconns, ACCEPT_PAUSE_MS);
}

/* do_accept_tcp: another node's agent; it must authenticate first, within
 * HELLO_TIMEOUT_MS; at most MAX_UNAUTHED wait for that (the oldest goes). */
void do_accept_tcp(agent_t *a)
{
    for (int k = 0; k < 64; k++) {
        struct sockaddr_in sa;
        socklen_t sl = sizeof sa;
        int fd = accept4(a->tfd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                out_of_fds(a, "TCP");
            else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED && limited())
                ddl_warn("accept (TCP): %m");
            return;
        }
        size_t waiting = 0, oldest = a->nconns;
        for (size_t i = 0; i < a->nconns; i++)
            if (a->conns[i]->kind == CONN_TCP_NEW) {
                waiting++;
                if (oldest == a->nconns || a->conns[i]->opened_ms < a->conns[oldest]->opened_ms)
                    oldest = i;
            }
        if (waiting >= MAX_UNAUTHED) {
            if (limited())
                ddl_warn("%zu TCP connections have not authenticated: dropping the oldest",
                         waiting);
            conn_drop(a, oldest);
        }
        conn_t *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->kind = CONN_TCP_NEW;
        c->opened_ms = ddl_now_ms();
        c->rank = -1;
        c->node_id = UINT32_MAX;
        c->uid = (uid_t)-1;
        if (sa.sin_family != AF_INET || !inet_ntop(AF_INET, &sa.sin_addr, c->ip, sizeof c->ip))
            snprintf(c->ip, sizeof c->ip, "?");
        if (conn_add(a, c) < 0) /* armed: it must authenticate within HELLO_TIMEOUT_MS */
            conn_free(c);
    }
}

void do_accept(agent_t *a)
{
    for (;;) {
        int fd = accept4(a->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                out_of_fds(a, "Unix");
            else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED && limited())
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
            if (limited())
                ddl_warn("refused connection from pid %d: %s", (int)c->pid, why);
            conn_error(c, EACCES, why);
            /* one try, never blocking: a client that does not read gets nothing */
            if (send(fd, c->out, c->out_len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
                ddl_debug("refused connection from pid %d: %m", (int)c->pid);
            conn_free(c);
            continue;
        }
        if (conn_add(a, c) < 0)
            conn_free(c);
    }
}
