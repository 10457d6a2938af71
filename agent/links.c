/* links.c: the TCP links between a step's agents: mutual authentication
 * (auth.h) on both sides, the beats and the silence that makes a node
 * lost, the roster of where every agent listens, and the takeover by the
 * lowest live node when the leader is lost.
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

#define ASK_LEADER_MS 1000 /* asking the old leader again: to connect, as long for its answer */
#define REJOIN_WAIT_MS 250 /* between two asks while the leader decides */
#define REJOIN_TRIES 40    /* asks before giving up (10 s) */
#define CUT_ASK_MS 1000    /* a node cut off: between two rounds of asks */
#define ROSTER_GATHER_MS 1000 /* joins gathered into one ROSTER while the others join */

/* hostport_ok: "" or "IPv4:port" (what ROSTER, PEER_AUTH and the leader's
 * address may hold). */
int hostport_ok(const char *s)
{
    struct sockaddr_in sa;
    return !s || !*s || ddl_hostport_parse(s, &sa) == 0;
}

/* beat: this agent's PEER_BEAT (points into a). */
static ddl_msg_t beat(agent_t *a)
{
    ddl_msg_t m = {.type = DDL_MSG_PEER_BEAT};
    m.u.peer_beat.node_id = a->opts->node_id;
    m.u.peer_beat.gen = a->ag_gen;
    m.u.peer_beat.host = a->host;
    return m;
}

/* send_beats: PEER_BEAT on every link between agents. */
void send_beats(agent_t *a)
{
    if (a->roster_at && a->leader && ddl_now_ms() >= a->roster_at)
        send_roster(a);
    ddl_msg_t m = beat(a);
    for (size_t i = 0; i < a->nconns; i++)
        if (a->conns[i]->kind == CONN_PEER || a->conns[i]->kind == CONN_LEADER)
            conn_queue(a->conns[i], &m);
}

/* handle_beat: another agent is alive; the leader's first beat also says
 * which node it is. */
void handle_beat(agent_t *a, conn_t *c, const ddl_msg_t *m)
{
    uint32_t node = m->u.peer_beat.node_id;
    if (node >= a->opts->nnodes || node == a->opts->node_id ||
        (c->node_id != UINT32_MAX && node != c->node_id)) {
        ddl_warn("ignoring a heartbeat that claims node %u on the link of node %u", node,
                 c->node_id);
        return;
    }
    if (c->kind == CONN_LEADER && c->node_id == UINT32_MAX) {
        c->node_id = node;
        a->peers[node].state = DDL_PEER_UP;
        snprintf(a->peers[node].addr, sizeof a->peers[node].addr, "%s", a->leader_addr);
        a->leader_node = node;
    }
    int before = c->det.allowed_ms;
    ddl_det_beat(&c->det, ddl_now_ms());
    int diff = c->det.allowed_ms - before;
    if (diff * 10 >= before || -diff * 10 >= before) { /* a change of 10 % or more */
        double mean, sd;
        uint32_t longest;
        ddl_det_stats(&c->det, &mean, &sd, &longest);
        ddl_debug("node %u's link: silence allowed %.2f s (%u intervals: mean %.0f ms, sd %.1f ms, "
                  "longest %u ms)", node, c->det.allowed_ms / 1000.0, c->det.count, mean, sd,
                  longest);
    }
    if (m->u.peer_beat.host)
        snprintf(a->peers[node].host, sizeof a->peers[node].host, "%s", m->u.peer_beat.host);
}

/* nonce_replayed: whether this PEER_AUTH nonce was seen lately (a recorded
 * PEER_AUTH sent again); remembers it otherwise. */
static int nonce_replayed(agent_t *a, const uint8_t *nonce)
{
    for (uint32_t i = 0; i < NONCE_MEMORY; i++)
        if (memcmp(a->nonces[i], nonce, DDL_AUTH_NONCE) == 0)
            return 1;
    memcpy(a->nonces[a->nonce_next++ % NONCE_MEMORY], nonce, DDL_AUTH_NONCE);
    return 0;
}

/* retired: node came back more often than DDL_NODE_RETAKES allows: linked,
 * but never given ranks again (the leader's count, or the last ROSTER's). */
int retired(const agent_t *a, uint32_t node)
{
    return a->retaken && a->retaken[node] > a->opts->node_retakes;
}

/* may_return: whether lost node's agent may link again now: 0, or an
 * errno value with the reason in why: EAGAIN while the leader is still
 * deciding what follows a failure (its agent asks again), EPERM when the
 * step has no place for it. */
static int may_return(const agent_t *a, uint32_t node, char *why, size_t len)
{
    if (!a->opts->supervise || !a->w.node_rank) {
        snprintf(why, len, "node %u was lost from this step, which has no spare node and may "
                 "not shrink: it is not taken back", node);
        return EPERM;
    }
    if (a->final) {
        snprintf(why, len, "node %u was lost from this step, which is ending", node);
        return EPERM;
    }
    if (a->decide_at || a->takeover_until || a->w.node_rank[node] != NO_RANK) {
        snprintf(why, len, "node %u was lost and the leader is still deciding what follows: "
                 "ask again", node);
        return EAGAIN;
    }
    char minority[300];
    if (!majority(a, minority, sizeof minority)) {
        /* a leader on the minority side of a partition steps down: taking
         * a node of its side back would only pass the lead back and forth */
        snprintf(why, len, "node %u was lost and this leader has no majority: ask again", node);
        return EAGAIN;
    }
    return 0;
}

/* handle_auth: a TCP connection proves that it is an agent of this step
 * (auth.h).  One that cannot is dropped without an answer; an agent that
 * can but may not link (its node is linked already, or was lost and cannot
 * come back now) is told why; the others get PEER_WELCOME and the link is
 * authenticated; a lost node's agent that comes back is taken back
 * (retake(), recovery.c). */
void handle_auth(agent_t *a, conn_t *c, const ddl_msg_t *m)
{
    const typeof(m->u.peer_auth) *h = &m->u.peer_auth;
    const ddl_agent_opts_t *o = a->opts;
    uint8_t mac[DDL_AUTH_MAC];
    ddl_error_t err;
    char why[160];
    if (!o->secret_len || !h->step ||
        ddl_auth_hello_mac(o->secret, o->secret_len, h->step, h->node_id, h->host, h->listen,
                           h->nonce, mac) < 0 ||
        !ddl_auth_equal(mac, h->mac, DDL_AUTH_MAC) || strcmp(h->step, o->step) != 0 ||
        h->node_id >= o->nnodes || h->node_id == o->node_id || !hostport_ok(h->listen)) {
        if (limited())
            ddl_warn("refused an agent connection from %s: it did not prove that it belongs to "
                     "this step", c->ip);
        c->dead = 1;
        return;
    }
    if (nonce_replayed(a, h->nonce)) {
        if (limited())
            ddl_warn("refused an agent connection from %s: a replayed authentication", c->ip);
        c->dead = 1;
        return;
    }
    uint32_t node = h->node_id;
    int code = a->peers[node].state == DDL_PEER_UP ? EEXIST
               : a->lost[node]                    ? may_return(a, node, why, sizeof why)
                                                  : 0;
    if (code) {
        if (code == EEXIST)
            snprintf(why, sizeof why, "node %u already has an agent linked to the leader", node);
        if (code == EAGAIN)
            ddl_info("node %u's agent at %s asks to come back: %s", node, c->ip, why);
        else
            ddl_warn("refused node %u's agent at %s: %s", node, c->ip, why);
        reply_error(c, code, why);
        c->close_after_flush = 1;
        return;
    }
    int back = a->lost[node];
    ddl_msg_t w = {.type = DDL_MSG_PEER_WELCOME};
    w.u.peer_welcome.node_id = o->node_id;
    if (ddl_auth_nonce(w.u.peer_welcome.nonce, &err) < 0 ||
        ddl_auth_welcome_mac(o->secret, o->secret_len, o->step, o->node_id, node, h->nonce,
                             w.u.peer_welcome.nonce, w.u.peer_welcome.mac) < 0 ||
        ddl_auth_link_init(&c->link, o->secret, o->secret_len, h->nonce,
                           w.u.peer_welcome.nonce, 0) < 0 ||
        conn_queue(c, &w) < 0) {
        ddl_error("cannot authenticate node %u's link: %s", node,
                  errno == EIO ? "libcrypto failed" : strerror(errno));
        c->dead = 1;
        return;
    }
    c->authed = 1; /* every later frame both ways carries its tag */
    c->kind = CONN_PEER;
    c->node_id = node;
    c->heard_ms = ddl_now_ms();
    ddl_det_init(&c->det, o->detector != AGENT_DET_FIXED, a->beat_ms, a->node_timeout_ms);
    peer_t *p = &a->peers[node];
    p->state = DDL_PEER_UP;
    p->heard_at = ddl_now_ms();
    snprintf(p->host, sizeof p->host, "%s", h->host ? h->host : "");
    snprintf(p->addr, sizeof p->addr, "%s", c->ip);
    ddl_debug("node %u's agent (%s) connected and authenticated", node, p->host);
    /* a beat at once: the new peer hears the leader at once */
    ddl_msg_t b = beat(a);
    conn_queue(c, &b);
    if (back) /* before the roster, which names the nodes not lost */
        retake(a, c);
    if (a->roster) { /* where the new peer would lead, to everyone */
        snprintf(a->roster[node], sizeof a->roster[0], "%s", h->listen ? h->listen : "");
        /* At the start of a step, one ROSTER (naming every node) to every
         * node per join would be N^3 bytes: 12 GB for 1,000 nodes.  Joins
         * are gathered for up to ROSTER_GATHER_MS, and sent at once when
         * every node is linked, or when a node comes back. */
        uint32_t missing = 0;
        for (uint32_t n = 0; n < o->nnodes; n++)
            missing += n != o->node_id && !a->lost[n] && a->peers[n].state != DDL_PEER_UP;
        if (back || !missing)
            send_roster(a);
        else if (!a->roster_at)
            a->roster_at = ddl_now_ms() + ROSTER_GATHER_MS;
    }
}

static int auth_answer(agent_t *a, int fd, const char *addr, const uint8_t *nonce,
                       int timeout_ms);

/* auth_send: the first half of linking to a leader agent over fd (a
 * connected socket): this node's PEER_AUTH, with a fresh nonce (into
 * nonce), which proves that it belongs to the step; the secret never
 * crosses the wire.  The first time, this agent also starts listening, on
 * the address that reaches the leader, where it would lead after a
 * takeover.  0, or -1 (logged; fd left open). */
static int auth_send(agent_t *a, int fd, uint8_t nonce[DDL_AUTH_NONCE])
{
    const ddl_agent_opts_t *o = a->opts;
    ddl_error_t err;
    ddl_msg_t m = {.type = DDL_MSG_PEER_AUTH};
    uint8_t mac[DDL_AUTH_MAC];
    if (o->supervise && a->listen_fd < 0) {
        /* where this agent would lead: the address that reaches the leader */
        struct sockaddr_in sa;
        socklen_t sl = sizeof sa;
        char ip[INET_ADDRSTRLEN];
        uint16_t port = 0;
        if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0 &&
            inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip) &&
            (a->listen_fd = ddl_tcp_listen(ip, &port, &err)) >= 0)
            snprintf(a->roster[o->node_id], sizeof a->roster[0], "%s:%u", ip, port);
        else
            ddl_warn("node %u: cannot listen for agents (%s): it will not take over as the "
                     "leader", o->node_id, err.text);
    }
    const char *listen = a->roster ? a->roster[o->node_id] : "";
    if (ddl_auth_nonce(nonce, &err) < 0 ||
        ddl_auth_hello_mac(o->secret, o->secret_len, o->step, o->node_id, a->host, listen, nonce,
                           mac) < 0) {
        ddl_error("node %u: cannot authenticate to the leader agent: %s", o->node_id,
                  errno == EIO ? "libcrypto failed" : err.text);
        return -1;
    }
    m.u.peer_auth.step = (char *)o->step;
    m.u.peer_auth.node_id = o->node_id;
    m.u.peer_auth.host = a->host;
    m.u.peer_auth.listen = (char *)listen;
    memcpy(m.u.peer_auth.nonce, nonce, DDL_AUTH_NONCE);
    memcpy(m.u.peer_auth.mac, mac, sizeof mac);
    if (ddl_proto_send(fd, &m) < 0) {
        ddl_log(a->ask_quiet ? DDL_LOG_DEBUG : DDL_LOG_ERROR,
                "node %u: cannot send to the agent: %s", o->node_id, strerror(errno));
        return -1;
    }
    return 0;
}

/* connect_to: a link to the leader agent at addr, authenticated both ways
 * (auth.h).  Blocks up to timeout_ms to connect, as long again for the
 * answer.  retry: a refused connection is tried again until timeout_ms (at
 * the start, the leader may not listen yet); 0: refused is final (nothing
 * listens there any more: its agent is gone). */
int connect_to(agent_t *a, const char *addr, int timeout_ms, int retry)
{
    const ddl_agent_opts_t *o = a->opts;
    ddl_error_t err;
    uint8_t nonce[DDL_AUTH_NONCE];
    if (!hostport_ok(addr)) {
        ddl_error("node %u: the leader agent's address '%s' is not IPv4:port", o->node_id, addr);
        return -1;
    }
    a->refused = 0;
    int fd, e = 0;
    if (retry) {
        fd = ddl_tcp_connect(addr, timeout_ms, &err);
    } else if (ddl_tcp_connect_each(&addr, 1, timeout_ms, 0, &fd, &e) == 0) {
        errno = e;
        ddl_errprintf(&err, "cannot connect to %s: %s", addr, strerror(e));
    }
    if (fd < 0) {
        ddl_log(a->ask_quiet ? DDL_LOG_DEBUG : DDL_LOG_ERROR,
                "node %u: cannot reach the leader agent: %s", o->node_id, err.text);
        return -1;
    }
    if (auth_send(a, fd, nonce) < 0) {
        close(fd);
        return -1;
    }
    return auth_answer(a, fd, addr, nonce, timeout_ms);
}

/* auth_answer: the second half: the leader's answer on fd to the PEER_AUTH
 * that carried nonce, waited for up to timeout_ms.  It must prove that it
 * belongs to the step too before anything it says is believed.  0: fd is
 * this node's link to the leader (a->up); -1: fd closed, a->refused the
 * leader's ERROR code if it refused (0: no answer, or a wrong one). */
static int auth_answer(agent_t *a, int fd, const char *addr, const uint8_t *nonce,
                       int timeout_ms)
{
    const ddl_agent_opts_t *o = a->opts;
    ddl_error_t err;
    ddl_msg_t m = {0};
    a->refused = 0;
    if (ddl_proto_recv(fd, &m, timeout_ms, &err) < 0) {
        ddl_log(a->ask_quiet ? DDL_LOG_DEBUG : DDL_LOG_ERROR,
                "node %u: the agent at %s did not authenticate this node: %s (not the leader "
                "of step %s, or another secret)", o->node_id, addr,
                errno == EPROTO || errno == ETIMEDOUT ? err.text : strerror(errno), o->step);
        close(fd);
        return -1;
    }
    const char *why = NULL;
    uint8_t expect[DDL_AUTH_MAC];
    conn_t *c = NULL;
    if (m.type == DDL_MSG_ERROR) {
        a->refused = m.u.error.code ? m.u.error.code : EPERM;
        if (a->refused == EAGAIN || a->refused == EEXIST)
            ddl_info("node %u: the leader agent at %s says: %s", o->node_id, addr,
                     m.u.error.text);
        else
            ddl_error("node %u: the leader agent at %s refused this node: %s", o->node_id, addr,
                      m.u.error.text);
        why = "";
    } else if (m.type != DDL_MSG_PEER_WELCOME) {
        why = "it answered with another message";
    } else if (m.u.peer_welcome.node_id >= o->nnodes || m.u.peer_welcome.node_id == o->node_id ||
               ddl_auth_welcome_mac(o->secret, o->secret_len, o->step, m.u.peer_welcome.node_id,
                                    o->node_id, nonce, m.u.peer_welcome.nonce, expect) < 0 ||
               !ddl_auth_equal(expect, m.u.peer_welcome.mac, sizeof expect)) {
        why = "it did not prove that it belongs to this step";
    } else if (!(c = calloc(1, sizeof *c)) ||
               ddl_auth_link_init(&c->link, o->secret, o->secret_len, nonce,
                                  m.u.peer_welcome.nonce, 1) < 0 ||
               (c->fd = fd, conn_add(a, c) < 0)) {
        why = "out of memory or libcrypto failed";
    }
    if (why) {
        if (*why)
            ddl_error("node %u: not linking to the agent at %s: %s", o->node_id, addr, why);
        free(c);
        ddl_msg_clear(&m);
        close(fd);
        return -1;
    }
    uint32_t leader = m.u.peer_welcome.node_id;
    ddl_fd_set_nonblock(fd, 1);
    c->kind = CONN_LEADER;
    c->authed = 1;
    c->node_id = leader;
    c->heard_ms = ddl_now_ms();
    ddl_det_init(&c->det, o->detector != AGENT_DET_FIXED, a->beat_ms, a->node_timeout_ms);
    c->rank = -1;
    snprintf(c->ip, sizeof c->ip, "%.*s", (int)strcspn(addr, ":"), addr);
    a->up = c;
    snprintf(a->leader_addr, sizeof a->leader_addr, "%s", addr);
    a->leader_node = leader;
    a->peers[leader].state = DDL_PEER_UP;
    a->peers[leader].heard_at = ddl_now_ms();
    snprintf(a->peers[leader].addr, sizeof a->peers[leader].addr, "%s", addr);
    ddl_debug("node %u: linked to the leader agent (node %u) at %s, authenticated", o->node_id,
              leader, addr);
    return 0;
}

/* stall_ms: a pause of this agent's loop this long means it was stopped
 * (the loop waits at most a beat interval). */
static int64_t stall_ms(const agent_t *a)
{
    int64_t t = a->node_timeout_ms / 2;
    return t > 4 * a->beat_ms ? t : 4 * a->beat_ms;
}

/* link_lost: a link between agents closed or went silent while the step runs. */
void link_lost(agent_t *a, conn_t *c, const char *how)
{
    if (!a->opts->supervise || a->final || a->shutting_down)
        return;
    if (c->kind == CONN_LEADER) {
        /* the main loop chooses another leader (takeover), outside the
         * walk over the connections; when this agent itself was stopped
         * (a frozen node that resumed: the loop ran long after it last
         * waited) or the leader's side closed the link, the leader is
         * likely alive and asked first: it may take this node back */
        a->ask_old_leader = ddl_now_ms() - a->round_ms > stall_ms(a) ||
                            strcmp(how, LINK_CLOSED) == 0;
        snprintf(a->takeover_why, sizeof a->takeover_why, "lost the leader agent (node %u, %s): %s",
                 a->leader_node, a->leader_addr, how);
        snprintf(a->takeover_how, sizeof a->takeover_how, "%s", how);
        a->need_takeover = 1;
        return;
    }
    if (c->kind != CONN_PEER || c->node_id >= a->opts->nnodes || a->lost[c->node_id])
        return;
    if (!a->leader) /* step_down drops the links of a leader cut off: no failure, no decision */
        return;
    a->lost[c->node_id] = 1;
    if (a->w.node_rank && a->w.node_rank[c->node_id] == NO_RANK) {
        uint32_t left = 0;
        for (uint32_t n = 0; n < a->opts->nnodes; n++)
            left += a->w.node_rank[n] == NO_RANK && !a->lost[n];
        ddl_error("generation %u: spare node %u (%s) %s [node-lost]; %u spare node%s left", a->gen,
                  c->node_id, a->peers[c->node_id].host, how, left, left == 1 ? "" : "s");
        snprintf(a->last_failure, sizeof a->last_failure, "generation %u: spare node %u (%s) %s "
                 "[node-lost]", a->gen, c->node_id, a->peers[c->node_id].host, how);
        char why[300];
        if (a->leader && !a->decide_at && majority(a, why, sizeof why)) {
            members_now(a); /* the step goes on without it */
            send_roster(a);
        }
        return;
    }
    failure_t f = {.gen = a->gen, .rank = -1, .node = c->node_id, .cls = DDL_FAIL_NODE};
    snprintf(f.host, sizeof f.host, "%s", a->peers[c->node_id].host);
    snprintf(f.text, sizeof f.text, "its agent %s", how);
    leader_failure(a, &f);
}

/* pending: bytes wait unread on c's socket (this agent, not the link, was
 * late: the loop will read them next). */
static int pending(const conn_t *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    return c->fd >= 0 && poll(&p, 1, 0) > 0;
}

/* recoverable: a lost node would not end the step: a spare is left, or the
 * world may shrink (--ddl-min-nodes).  A follower's view of the world is
 * its last GENERATION's, which is enough here. */
static int recoverable(const agent_t *a)
{
    if (!a->w.node_rank)
        return 0; /* no spare, no shrinking: any lost node ends the step */
    uint32_t idle = 0, active = 0;
    for (uint32_t n = 0; n < a->opts->nnodes; n++) {
        if (a->lost[n])
            continue;
        idle += a->w.node_rank[n] == NO_RANK;
        active += a->w.node_rank[n] != NO_RANK;
    }
    return idle > 0 || (a->opts->min_nodes && active > a->opts->min_nodes);
}

/* learned: whether the links' learned allowances apply now.  They find a
 * lost node in a fraction of the node timeout, and can be wrong on a
 * machine so loaded that an agent misses a few beats.  DDL_DETECTOR=auto
 * uses them only while a lost node can be recovered from (a false alarm
 * then costs a restart); where a lost node ends the step, a link is
 * allowed the whole node timeout, so that a late beat cannot end a healthy
 * step.  Once per pass over the links: recoverable() walks the nodes. */
static int learned(const agent_t *a)
{
    return a->opts->detector != AGENT_DET_AUTO || recoverable(a);
}

/* deadline: when c, silent since c->heard_ms, is lost. */
static int64_t deadline(const agent_t *a, const conn_t *c, int use_learned)
{
    return use_learned ? ddl_det_deadline(&c->det, c->heard_ms) : c->heard_ms + a->node_timeout_ms;
}

/* check_silence: links quiet past their deadline are lost. */
void check_silence(agent_t *a)
{
    int64_t now = ddl_now_ms();
    int use = learned(a);
    for (size_t i = a->nconns; i-- > 0;) {
        conn_t *c = a->conns[i];
        if ((c->kind != CONN_PEER && c->kind != CONN_LEADER) ||
            now <= deadline(a, c, use) ||
            (!c->close_after_flush && now - c->heard_ms <= a->node_timeout_ms && pending(c)))
            continue;
        char how[128];
        snprintf(how, sizeof how, "was silent for %.2f s (allowed %.2f s, node timeout %.1f s)",
                 (double)(now - c->heard_ms) / 1000.0,
                 (use ? c->det.allowed_ms : a->node_timeout_ms) / 1000.0, a->node_timeout_ms / 1000.0);
        link_lost(a, c, how);
        use = learned(a); /* this loss may have used the last spare */
        c->heard_ms = INT64_MAX / 2; /* reported: drop it without a second report */
        conn_drop(a, i);
    }
}

/* silence_due: ms until the next link could time out, -1: none linked. */
int silence_due(agent_t *a)
{
    int64_t due = -1, now = ddl_now_ms();
    int use = learned(a);
    for (size_t i = 0; i < a->nconns; i++) {
        conn_t *c = a->conns[i];
        if (c->kind != CONN_PEER && c->kind != CONN_LEADER)
            continue;
        int64_t left = deadline(a, c, use) + 1 - now;
        left = left < 0 ? 0 : left;
        due = due < 0 || left < due ? left : due;
    }
    return (int)due;
}

/* send_roster: the leader tells every linked agent where each agent listens,
 * how often each node came back after a loss (a new leader keeps counting
 * where this one stopped) and which nodes are the step's members (a new
 * leader needs a majority of them: majority(), recovery.c). */
void send_roster(agent_t *a)
{
    a->roster_at = 0;
    if (!a->roster)
        return;
    char **addr = calloc(a->opts->nnodes, sizeof *addr);
    if (!addr)
        return;
    uint8_t *gone = calloc(a->opts->nnodes, 1);
    if (!gone) {
        free(addr);
        return;
    }
    for (uint32_t n = 0; n < a->opts->nnodes; n++) {
        addr[n] = a->lost[n] ? "" : a->roster[n];
        gone[n] = !a->member[n];
    }
    ddl_msg_t m = {.type = DDL_MSG_ROSTER};
    m.u.roster.nnodes = a->opts->nnodes;
    m.u.roster.addr = addr;
    m.u.roster.retaken = a->retaken;
    m.u.roster.lost = gone;
    to_peers(a, &m);
    free(addr);
    free(gone);
}

/* handle_roster: a non-leader learns where the others would lead, the
 * leader's retake counts (DDL_NODE_RETAKES holds across a takeover) and
 * its members: the nodes it lost are lost here too, so that a takeover
 * neither waits for them nor counts them in its majority. */
void handle_roster(agent_t *a, const ddl_msg_t *m)
{
    if (!a->roster || m->u.roster.nnodes != a->opts->nnodes)
        return;
    for (uint32_t n = 0; n < a->opts->nnodes; n++) {
        if (m->u.roster.retaken)
            a->retaken[n] = m->u.roster.retaken[n];
        if (n == a->opts->node_id)
            continue;
        /* a lost node's address (sent empty) is kept: cut off by a
         * partition, this node asks every known address to take it back */
        if (m->u.roster.addr[n][0] || !a->roster[n][0])
            snprintf(a->roster[n], sizeof a->roster[n], "%s", m->u.roster.addr[n]);
        if (m->u.roster.lost) {
            a->lost[n] = m->u.roster.lost[n];
            a->member[n] = !m->u.roster.lost[n];
        }
    }
}

/* become_leader: this agent leads from now on; the others connect to the
 * socket it has listened on since it started. */
static void become_leader(agent_t *a)
{
    uint32_t age;
    a->leader = 1;
    a->leader_node = a->opts->node_id;
    snprintf(a->leader_addr, sizeof a->leader_addr, "%s", a->roster[a->opts->node_id]);
    a->tfd = a->listen_fd;
    a->listen_fd = -1;
    ddl_fd_set_nonblock(a->tfd, 1);
    int64_t ck = -1;
    if (ckpt_latest(a->ckpt_dir, &ck, &age) < 0)
        ck = -1;
    ddl_policy_init(&a->pol, a->gen, ck); /* one generation per restart so far */
    a->decide_at = 0;
    for (uint32_t n = 0; n < a->opts->nnodes; n++)
        a->peers[n].state = a->lost[n] ? DDL_PEER_LOST : DDL_PEER_NONE;
    a->takeover_until = ddl_now_ms() + a->node_timeout_ms + 1000;
    ddl_warn("generation %u: node %u (%s) takes over as the leader; waiting up to %.1f s for "
             "the other nodes' agents", a->gen, a->opts->node_id, a->host,
             (a->node_timeout_ms + 1000) / 1000.0);
}

/* ask_leader: this node's link to the leader ended while this agent was
 * stopped, or was closed: ask the same leader to link again before taking
 * over.  1: linked (the leader's GENERATION says what this node is now), or
 * to ask again at rejoin_at (it is deciding), or this node's ranks stop (it
 * refused); 0: the leader is unreachable, take over. */
static int ask_leader(agent_t *a)
{
    const ddl_agent_opts_t *o = a->opts;
    a->ask_old_leader = 0;
    if (!a->leader_addr[0] || !o->supervise)
        return 0;
    if (!a->rejoin_tries)
        ddl_warn("generation %u: node %u lost its link to the leader agent (node %u, %s) while "
                 "this agent was stopped or the leader closed the link: asking it to link again",
                 a->gen, o->node_id, a->leader_node, a->leader_addr);
    else
        ddl_debug("node %u: asking the leader agent (node %u, %s) again (%u)", o->node_id,
                  a->leader_node, a->leader_addr, a->rejoin_tries);
    ag_fail(a, ECANCELED, "this node lost its link to the leader agent");
    char addr[sizeof a->leader_addr]; /* connect_to writes a->leader_addr */
    snprintf(addr, sizeof addr, "%s", a->leader_addr);
    if (connect_to(a, addr, ASK_LEADER_MS, 0) == 0) {
        a->rejoin_tries = 0;
        ddl_warn("generation %u: node %u is linked to the leader agent again", a->gen,
                 o->node_id);
        return 1;
    }
    /* EAGAIN: it is deciding on this node's loss; EEXIST: it has not yet
     * seen this node's old link go (it will: that link closed here) */
    if ((a->refused == EAGAIN || a->refused == EEXIST) && a->rejoin_tries < REJOIN_TRIES) {
        a->rejoin_tries++;
        a->rejoin_at = ddl_now_ms() + REJOIN_WAIT_MS;
        return 1;
    }
    if (a->refused) {
        char why[300];
        snprintf(why, sizeof why, "the leader agent (node %u) did not take this node back",
                 a->leader_node);
        stop_here(a, why);
        return 1;
    }
    return 0;
}

/* step_down: this leader found itself cut off, on the minority side of a
 * partition (majority(), recovery.c): it leads no more.  Its listening
 * socket closes (connect_to opens another), links not yet authenticated
 * go, no decision is pending. */
void step_down(agent_t *a)
{
    a->leader = 0;
    a->up = NULL;
    a->decide_at = a->takeover_until = a->grow_at = 0;
    a->grow_ck = -2;
    for (size_t i = a->nconns; i-- > 0;)
        if (a->conns[i]->kind != CONN_UNIX)
            conn_drop(a, i);
    if (a->tfd_ev)
        ddl_ev_fd_remove(a->tfd_ev);
    a->tfd_ev = NULL;
    if (a->tfd >= 0)
        close(a->tfd);
    a->tfd = -1;
}

/* ask_back: a node cut off asks the others to take it back, all at once
 * (one node at a time, a step of a thousand nodes would take a thousand
 * seconds per round, with this agent's loop blocked): the leader of the
 * rest welcomes it (and takes it back as a spare, as a node that froze and
 * resumed), or says to ask again, or refuses (its ranks stop); the others
 * do not answer.  Blocks up to 2 x ASK_LEADER_MS; asks again every
 * CUT_ASK_MS, until cut_until; when every node refuses the connection,
 * their agents are gone: the step ended there, and so do this node's ranks. */
static void ask_back(agent_t *a)
{
    const ddl_agent_opts_t *o = a->opts;
    char why[300];
    if (ddl_now_ms() >= a->cut_until) {
        a->cut_until = 0;
        snprintf(why, sizeof why, "no other node of the step took this one back within %d s "
                 "of the cut (DDL_CUT_OFF_WAIT_S)", o->cut_off_wait_s);
        stop_here(a, why);
        return;
    }
    size_t asked = 0, gone = 0, nfds = o->nnodes;
    const char *answered = NULL;
    const char **addrs = calloc(nfds, sizeof *addrs);
    int *fds = calloc(nfds, sizeof *fds), *errs = calloc(nfds, sizeof *errs);
    uint8_t (*nonces)[DDL_AUTH_NONCE] = calloc(nfds, sizeof *nonces);
    struct pollfd *pf = calloc(nfds, sizeof *pf);
    if (!addrs || !fds || !errs || !nonces || !pf)
        goto out; /* out of memory: ask again later */
    for (uint32_t n = 0; n < o->nnodes; n++)
        if (n != o->node_id && a->roster[n][0])
            addrs[asked++] = a->roster[n];
    ddl_tcp_connect_each(addrs, asked, ASK_LEADER_MS, 0, fds, errs);
    a->ask_quiet = 1; /* a round of asks in vain is expected: no error each time */
    for (size_t i = 0; i < asked; i++) {
        gone += errs[i] == ECONNREFUSED;
        if (fds[i] >= 0 && auth_send(a, fds[i], nonces[i]) < 0) {
            close(fds[i]);
            fds[i] = -1;
        }
        pf[i].fd = fds[i];
        pf[i].events = POLLIN;
    }
    int64_t deadline = ddl_now_ms() + ASK_LEADER_MS;
    while (!answered) {
        int64_t left = deadline - ddl_now_ms();
        if (left <= 0 || (poll(pf, (nfds_t)asked, (int)left) < 0 && errno != EINTR))
            break;
        for (size_t i = 0; i < asked && !answered; i++) {
            if (pf[i].fd < 0 || !pf[i].revents)
                continue;
            int fd = fds[i];
            pf[i].fd = fds[i] = -1; /* auth_answer links it or closes it */
            left = deadline - ddl_now_ms();
            if (auth_answer(a, fd, addrs[i], nonces[i], left > 0 ? (int)left : 1) == 0 ||
                a->refused)
                answered = addrs[i];
        }
    }
    a->ask_quiet = 0;
out:
    for (size_t i = 0; fds && i < asked; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(addrs);
    free(fds);
    free(errs);
    free(nonces);
    free(pf);
    if (answered && a->up) {
        a->cut_until = 0;
        ddl_warn("generation %u: node %u reaches the step's leader agent (node %u, %s): "
                 "linked again", a->gen, o->node_id, a->leader_node, answered);
    } else if (answered && (a->refused == EAGAIN || a->refused == EEXIST)) {
        a->rejoin_at = ddl_now_ms() + REJOIN_WAIT_MS;
    } else if (answered) {
        a->cut_until = 0;
        snprintf(why, sizeof why, "the leader agent at %s did not take this node back", answered);
        stop_here(a, why);
    } else if (asked && gone == asked) {
        a->cut_until = 0;
        stop_here(a, "every other node refuses connections: the step's agents there are gone");
    } else {
        a->rejoin_at = ddl_now_ms() + CUT_ASK_MS;
    }
}

/* rejoin: the time to ask the old leader again, or (cut off) the others,
 * has come. */
void rejoin(agent_t *a)
{
    a->rejoin_at = 0;
    if (a->final || a->up || a->leader)
        return;
    if (a->cut_until) {
        ask_back(a);
        return;
    }
    a->ask_old_leader = 1;
    takeover(a);
}

static int next_leader(agent_t *a);

/* takeover: the leader is lost: the lowest live node leads; the others
 * connect to it.  Without a node to lead, this node's ranks stop. */
void takeover(agent_t *a)
{
    const ddl_agent_opts_t *o = a->opts;
    uint32_t old = a->leader_node;
    if (a->ask_old_leader && ask_leader(a))
        return; /* linked again, or waiting to ask again */
    if (old < o->nnodes)
        a->lost[old] = 1;
    a->old_leader = old;
    ag_fail(a, ECANCELED, "the leader agent was lost");
    if (!a->roster || !a->w.node_rank) { /* no spare, no shrinking: nothing to take over */
        stop_here(a, a->takeover_why);
        return;
    }
    ddl_error("generation %u: %s; choosing another leader", a->gen, a->takeover_why);
    while (!next_leader(a))
        ;
}

/* next_leader: one round of choosing the leader: the lowest node not known
 * lost.  This node leads if it is that node; otherwise it connects to every
 * node that could lead before it at once, and links to the lowest that
 * answers (a candidate's agent answers once it leads: it listens from its
 * first link on).  Those below it that gave no answer within the node
 * timeout + 1 s are lost: one wait for all of them, not one per node (a
 * rack of low-numbered nodes lost with the leader).  1: done (following,
 * leading, or this node's ranks stopped); 0: another round. */
static int next_leader(agent_t *a)
{
    const ddl_agent_opts_t *o = a->opts;
    uint32_t cand = 0;
    while (cand < o->nnodes && a->lost[cand])
        cand++;
    if (cand >= o->nnodes || (cand == o->node_id && a->listen_fd < 0)) {
        stop_here(a, a->takeover_why);
        return 1;
    }
    if (cand == o->node_id) {
        become_leader(a);
        return 1;
    }
    /* the candidates: nodes not lost, below this one if it can lead */
    uint32_t limit = a->listen_fd >= 0 ? o->node_id : o->nnodes, k = 0;
    uint32_t *node = calloc(o->nnodes, sizeof *node);
    const char **addrs = calloc(o->nnodes, sizeof *addrs);
    int *fds = calloc(o->nnodes, sizeof *fds), *errs = calloc(o->nnodes, sizeof *errs);
    int timeout = a->node_timeout_ms + 1000, done = 0;
    if (!node || !addrs || !fds || !errs) {
        stop_here(a, "out of memory while choosing another leader");
        done = 1;
        goto out;
    }
    for (uint32_t n = cand; n < limit; n++) {
        if (a->lost[n] || n == o->node_id)
            continue;
        if (!a->roster[n][0]) { /* never listened: it cannot lead */
            a->lost[n] = 1;
            continue;
        }
        node[k] = n;
        addrs[k++] = a->roster[n];
    }
    ddl_tcp_connect_each(addrs, k, timeout, 1, fds, errs);
    for (uint32_t i = 0; i < k && !done; i++) {
        uint8_t nonce[DDL_AUTH_NONCE];
        if (fds[i] < 0 && (errs[i] == EMFILE || errs[i] == ENFILE || errs[i] == ENOMEM ||
                           errs[i] == ENOBUFS)) { /* this node's lack, not node[i]'s loss */
            char why[400];
            snprintf(why, sizeof why, "%.300s; no socket to reach node %u, a candidate to lead: %s",
                     a->takeover_why, node[i], strerror(errs[i]));
            stop_here(a, why);
            done = 1;
            break;
        }
        if (fds[i] < 0) {
            ddl_debug("node %u: node %u (%s) cannot lead: %s", o->node_id, node[i], addrs[i],
                      strerror(errs[i]));
            if (errs[i] != ECANCELED)
                a->lost[node[i]] = 1;
            continue;
        }
        int fd = fds[i];
        fds[i] = -1;
        if (auth_send(a, fd, nonce) < 0) {
            close(fd);
        } else if (auth_answer(a, fd, addrs[i], nonce, timeout) == 0) {
            a->leader_node = node[i];
            ddl_warn("generation %u: node %u follows node %u (%s), the new leader", a->gen,
                     o->node_id, node[i], addrs[i]);
            done = 1;
            break;
        }
        a->lost[node[i]] = 1; /* it did not lead: the next round */
        break;
    }
out:
    for (uint32_t i = 0; fds && i < k; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(node);
    free(addrs);
    free(fds);
    free(errs);
    return done;
}

/* finish_takeover: the new leader has heard from every live agent, or
 * waited long enough: the silent ones are lost too; the old leader's loss
 * is decided like any node's. */
void finish_takeover(agent_t *a)
{
    const ddl_agent_opts_t *o = a->opts;
    int64_t now = ddl_now_ms();
    int all = 1;
    for (uint32_t n = 0; n < o->nnodes; n++)
        if (n != o->node_id && !a->lost[n] && a->peers[n].state != DDL_PEER_UP)
            all = 0;
    if (!all && now < a->takeover_until)
        return;
    a->takeover_until = 0;
    for (uint32_t n = 0; n < o->nnodes; n++)
        if (n != o->node_id && !a->lost[n] && a->peers[n].state != DDL_PEER_UP) {
            ddl_error("generation %u: node %u did not join the new leader: lost", a->gen, n);
            a->lost[n] = 1;
        }
    send_roster(a);
    failure_t f = {.gen = a->gen, .rank = -1, .node = a->old_leader, .cls = DDL_FAIL_NODE};
    snprintf(f.host, sizeof f.host, "%s",
             a->old_leader < o->nnodes ? a->peers[a->old_leader].host : "?");
    snprintf(f.text, sizeof f.text, "the leader's agent %s", a->takeover_how);
    leader_failure(a, &f);
}
