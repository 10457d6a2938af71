/* proto.c: encoder and strict decoder for ddl's framed wire protocol (see
 * proto.h).  The decoder validates every length against what is left of the
 * body before reading, so malformed input yields EPROTO, never an overread.
 * About 1050 lines, over the usual 1000: one encoder and one decoder case
 * per message type side by side, so that each type's layout is read and
 * written in one place (the failure, exit-code and JSON helpers are in
 * failure.c). */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto.h"

const char *ddl_rank_state_str(int state)
{
    static const char *const names[] = {"pending", "starting", "running", "exited", "failed",
                                        "spare"};
    return state >= 0 && state <= DDL_RANK_STATE_MAX ? names[state] : "unknown";
}

const char *ddl_peer_state_str(int state)
{
    static const char *const names[] = {"none", "up", "lost"};
    return state >= 0 && state <= DDL_PEER_LOST ? names[state] : "unknown";
}

const char *ddl_msg_type_str(int type)
{
    static const char *const names[] = {"",       "ERROR",      "REGISTER", "RANK_STATE",
                                        "ALLGATHER", "ALLGATHER_RESULT", "STATUS_REQ",
                                        "STATUS", "ACK", "PEER_HELLO", "NODE_GATHER",
                                        "PEER_BEAT", "FAILURE", "GENERATION", "ROSTER",
                                        "PEER_AUTH", "PEER_WELCOME", "PROGRESS", "STOP_REQ",
                                        "STOP", "STOP_AT", NULL, NULL, "WARM"};
    return type >= DDL_MSG_ERROR && type <= DDL_MSG_TYPE_MAX && names[type] ? names[type]
                                                                            : "unknown";
}


void ddl_msg_clear(ddl_msg_t *msg)
{
    if (!msg)
        return;
    switch (msg->type) {
    case DDL_MSG_ERROR:
        free(msg->u.error.text);
        break;
    case DDL_MSG_ALLGATHER:
        free(msg->u.allgather.data);
        break;
    case DDL_MSG_ALLGATHER_RESULT:
        free(msg->u.allgather_result.lens);
        free(msg->u.allgather_result.data);
        break;
    case DDL_MSG_STATUS:
        free(msg->u.status.step);
        free(msg->u.status.ranks);
        free(msg->u.status.host);
        free(msg->u.status.peers);
        free(msg->u.status.ckpt_dir);
        free(msg->u.status.last_failure);
        break;
    case DDL_MSG_PEER_HELLO:
        free(msg->u.peer_hello.step);
        free(msg->u.peer_hello.secret);
        free(msg->u.peer_hello.host);
        free(msg->u.peer_hello.listen);
        break;
    case DDL_MSG_PEER_AUTH:
        free(msg->u.peer_auth.step);
        free(msg->u.peer_auth.host);
        free(msg->u.peer_auth.listen);
        break;
    case DDL_MSG_PEER_BEAT:
        free(msg->u.peer_beat.host);
        break;
    case DDL_MSG_FAILURE:
        free(msg->u.failure.host);
        free(msg->u.failure.text);
        break;
    case DDL_MSG_ROSTER:
        for (uint32_t i = 0; msg->u.roster.addr && i < msg->u.roster.nnodes; i++)
            free(msg->u.roster.addr[i]);
        free(msg->u.roster.addr);
        free(msg->u.roster.retaken);
        free(msg->u.roster.lost);
        break;
    case DDL_MSG_GENERATION:
        free(msg->u.generation.cause);
        free(msg->u.generation.node_rank);
        free(msg->u.generation.master);
        break;
    case DDL_MSG_STOP_REQ:
        free(msg->u.stop_req.why);
        break;
    case DDL_MSG_STOP:
        free(msg->u.stop.why);
        break;
    case DDL_MSG_NODE_GATHER:
        free(msg->u.node_gather.ranks);
        free(msg->u.node_gather.lens);
        free(msg->u.node_gather.data);
        break;
    default:
        break;
    }
    memset(msg, 0, sizeof *msg);
}

/* ---------------------------------------------------------------- encoding */

typedef struct {
    uint8_t *buf;
    size_t len, cap;
    int failed; /* errno of the first failure, sticky */
} wbuf_t;

static void w_bytes_raw(wbuf_t *w, const void *p, size_t n)
{
    if (w->failed)
        return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n)
            cap *= 2;
        uint8_t *nb = realloc(w->buf, cap);
        if (!nb) {
            w->failed = ENOMEM;
            return;
        }
        w->buf = nb;
        w->cap = cap;
    }
    if (n)
        memcpy(w->buf + w->len, p, n);
    w->len += n;
}

static void w_u8(wbuf_t *w, uint8_t v)
{
    w_bytes_raw(w, &v, 1);
}

static void w_u16(wbuf_t *w, uint16_t v)
{
    uint16_t n = htons(v);
    w_bytes_raw(w, &n, 2);
}

static void w_u32(wbuf_t *w, uint32_t v)
{
    uint32_t n = htonl(v);
    w_bytes_raw(w, &n, 4);
}

static void w_i32(wbuf_t *w, int32_t v)
{
    w_u32(w, (uint32_t)v);
}

static void w_i64(wbuf_t *w, int64_t v)
{
    w_u32(w, (uint32_t)((uint64_t)v >> 32));
    w_u32(w, (uint32_t)v);
}

static void w_blob(wbuf_t *w, const void *p, uint32_t n)
{
    if (n && !p && !w->failed)
        w->failed = EINVAL;
    w_u32(w, n);
    w_bytes_raw(w, p, n);
}

static void w_str(wbuf_t *w, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n > DDL_PROTO_MAX_STR) {
        if (!w->failed)
            w->failed = EINVAL;
        return;
    }
    w_blob(w, s, (uint32_t)n);
}

int ddl_proto_encode(const ddl_msg_t *msg, uint8_t **frame, size_t *len)
{
    wbuf_t w = {0};
    const typeof(msg->u) *u = &msg->u;

    w_u32(&w, DDL_PROTO_MAGIC);
    w_u8(&w, DDL_PROTO_MAJOR);
    w_u8(&w, DDL_PROTO_MINOR);
    w_u16(&w, msg->type);
    w_u32(&w, 0); /* body length, patched below */

    switch (msg->type) {
    case DDL_MSG_ERROR:
        w_i32(&w, u->error.code);
        w_str(&w, u->error.text);
        break;
    case DDL_MSG_REGISTER:
        w_u32(&w, u->reg.rank);
        w_i32(&w, u->reg.pid);
        w_str(&w, u->reg.cpus);
        w_str(&w, u->reg.gpu);
        w_str(&w, u->reg.nic);
        w_u32(&w, u->reg.restarts);
        break;
    case DDL_MSG_RANK_STATE:
        w_u32(&w, u->rank_state.rank);
        w_u8(&w, u->rank_state.state);
        w_i32(&w, u->rank_state.pid);
        w_i32(&w, u->rank_state.wstatus);
        w_u32(&w, u->rank_state.gen);
        break;
    case DDL_MSG_ALLGATHER:
        w_u32(&w, u->allgather.gen);
        w_u32(&w, u->allgather.seq);
        w_u32(&w, u->allgather.rank);
        w_u32(&w, u->allgather.size);
        w_blob(&w, u->allgather.data, u->allgather.len);
        break;
    case DDL_MSG_ALLGATHER_RESULT: {
        const uint8_t *p = u->allgather_result.data;
        w_u32(&w, u->allgather_result.gen);
        w_u32(&w, u->allgather_result.seq);
        w_u32(&w, u->allgather_result.count);
        if (u->allgather_result.count && !u->allgather_result.lens && !w.failed)
            w.failed = EINVAL;
        for (uint32_t i = 0; i < u->allgather_result.count && !w.failed; i++) {
            w_blob(&w, p, u->allgather_result.lens[i]);
            p += u->allgather_result.lens[i];
        }
        break;
    }
    case DDL_MSG_STATUS:
        w_str(&w, u->status.step);
        w_u32(&w, u->status.size);
        w_u32(&w, u->status.gen);
        w_i32(&w, u->status.agent_pid);
        w_u32(&w, u->status.nranks);
        if (u->status.nranks && !u->status.ranks && !w.failed)
            w.failed = EINVAL;
        for (uint32_t i = 0; i < u->status.nranks && !w.failed; i++) {
            const ddl_rank_info_t *r = &u->status.ranks[i];
            w_u32(&w, r->rank);
            w_u8(&w, r->state);
            w_i32(&w, r->pid);
            w_i32(&w, r->wpid);
            w_i32(&w, r->wstatus);
        }
        w_u32(&w, u->status.node_id);
        w_u32(&w, u->status.nnodes);
        /* minor 2 */
        w_str(&w, u->status.host);
        w_u8(&w, u->status.leader);
        for (uint32_t i = 0; i < u->status.nranks && !w.failed; i++) {
            const ddl_rank_info_t *r = &u->status.ranks[i];
            w_str(&w, r->cpus);
            w_str(&w, r->gpu);
            w_str(&w, r->nic);
            w_u32(&w, r->restarts);
            w_u32(&w, r->heard_ms);
        }
        w_u32(&w, u->status.npeers);
        if (u->status.npeers && !u->status.peers && !w.failed)
            w.failed = EINVAL;
        for (uint32_t i = 0; i < u->status.npeers && !w.failed; i++) {
            const ddl_peer_info_t *pi = &u->status.peers[i];
            w_u32(&w, pi->node_id);
            w_u8(&w, pi->state);
            w_u32(&w, pi->heard_ms);
            w_str(&w, pi->host);
            w_str(&w, pi->addr);
        }
        w_str(&w, u->status.ckpt_dir);
        w_i64(&w, u->status.ckpt_step);
        w_u32(&w, u->status.ckpt_age_ms);
        w_str(&w, u->status.last_failure);
        for (uint32_t i = 0; i < u->status.nranks && !w.failed; i++) { /* minor 6 */
            const ddl_rank_info_t *r = &u->status.ranks[i];
            w_i64(&w, r->step);
            w_i64(&w, (int64_t)r->collectives);
            w_u32(&w, r->rate_milli);
        }
        w_u32(&w, DDL_FAIL_CLASS_MAX);
        for (uint32_t i = 1; i <= DDL_FAIL_CLASS_MAX; i++)
            w_u32(&w, u->status.failures[i]);
        /* minor 8 */
        w_u32(&w, u->status.straggler.rank);
        w_u32(&w, u->status.straggler.node_id);
        w_u32(&w, u->status.straggler.slower_pm);
        w_u32(&w, u->status.straggler.steps);
        w_u32(&w, u->status.straggler.compute_us);
        w_u32(&w, u->status.straggler.peers_us);
        w_u32(&w, u->status.straggler.named);
        break;
    case DDL_MSG_PEER_HELLO:
        w_str(&w, u->peer_hello.step);
        w_u32(&w, u->peer_hello.node_id);
        if (u->peer_hello.secret_len > DDL_PROTO_MAX_SECRET && !w.failed)
            w.failed = EINVAL;
        w_blob(&w, u->peer_hello.secret, u->peer_hello.secret_len);
        w_str(&w, u->peer_hello.host);
        w_str(&w, u->peer_hello.listen);
        break;
    case DDL_MSG_PEER_AUTH:
        w_str(&w, u->peer_auth.step);
        w_u32(&w, u->peer_auth.node_id);
        w_str(&w, u->peer_auth.host);
        w_str(&w, u->peer_auth.listen);
        w_blob(&w, u->peer_auth.nonce, DDL_PROTO_NONCE_LEN);
        w_blob(&w, u->peer_auth.mac, DDL_PROTO_MAC_LEN);
        break;
    case DDL_MSG_PROGRESS:
        w_u32(&w, u->progress.rank);
        w_u32(&w, u->progress.gen);
        w_i64(&w, u->progress.step);
        w_i64(&w, (int64_t)u->progress.collectives);
        w_i64(&w, u->progress.at_ns); /* minor 8 */
        w_i64(&w, (int64_t)u->progress.wait_ns);
        break;
    case DDL_MSG_PEER_WELCOME:
        w_u32(&w, u->peer_welcome.node_id);
        w_blob(&w, u->peer_welcome.nonce, DDL_PROTO_NONCE_LEN);
        w_blob(&w, u->peer_welcome.mac, DDL_PROTO_MAC_LEN);
        break;
    case DDL_MSG_PEER_BEAT:
        w_u32(&w, u->peer_beat.node_id);
        w_u32(&w, u->peer_beat.gen);
        w_str(&w, u->peer_beat.host);
        break;
    case DDL_MSG_FAILURE:
        w_u32(&w, u->failure.gen);
        w_u32(&w, u->failure.rank);
        w_u32(&w, u->failure.node_id);
        w_u8(&w, u->failure.cls);
        w_i32(&w, u->failure.wstatus);
        w_str(&w, u->failure.host);
        w_str(&w, u->failure.text);
        break;
    case DDL_MSG_ROSTER:
        if (u->roster.nnodes && !u->roster.addr && !w.failed)
            w.failed = EINVAL;
        w_u32(&w, u->roster.nnodes);
        for (uint32_t i = 0; i < u->roster.nnodes && u->roster.addr; i++)
            w_str(&w, u->roster.addr[i]);
        for (uint32_t i = 0; i < u->roster.nnodes; i++) /* minor 10 */
            w_u32(&w, u->roster.retaken ? u->roster.retaken[i] : 0);
        for (uint32_t i = 0; i < u->roster.nnodes; i++)
            w_u8(&w, u->roster.lost ? u->roster.lost[i] != 0 : 0);
        break;
    case DDL_MSG_GENERATION:
        w_u32(&w, u->generation.gen);
        w_u8(&w, u->generation.action);
        w_i32(&w, u->generation.code);
        w_u32(&w, u->generation.delay_ms);
        w_str(&w, u->generation.cause);
        if (u->generation.nnodes && !u->generation.node_rank && !w.failed)
            w.failed = EINVAL;
        w_u32(&w, u->generation.nnodes);
        for (uint32_t i = 0; i < u->generation.nnodes && u->generation.node_rank; i++)
            w_u32(&w, u->generation.node_rank[i]);
        w_str(&w, u->generation.master); /* minor 4 */
        break;
    case DDL_MSG_STOP_REQ:
        w_i32(&w, u->stop_req.signo);
        w_str(&w, u->stop_req.why);
        break;
    case DDL_MSG_STOP:
        if (u->stop.at < -1 && !w.failed)
            w.failed = EINVAL;
        w_u32(&w, u->stop.gen);
        w_i64(&w, u->stop.at);
        w_str(&w, u->stop.why);
        break;
    case DDL_MSG_STOP_AT:
        if (u->stop_at.boundary < 0 && !w.failed)
            w.failed = EINVAL;
        w_u32(&w, u->stop_at.gen);
        w_u32(&w, u->stop_at.rank);
        w_i64(&w, u->stop_at.boundary);
        w_i64(&w, u->stop_at.step);
        break;
    case DDL_MSG_WARM:
        w_u32(&w, u->warm.gen);
        w_u32(&w, u->warm.rank);
        w_u8(&w, u->warm.on);
        w_u32(&w, u->warm.node_id);
        break;
    case DDL_MSG_NODE_GATHER: {
        const typeof(u->node_gather) *g = &u->node_gather;
        const uint8_t *p = g->data;
        w_u32(&w, g->gen);
        w_u32(&w, g->seq);
        w_u32(&w, g->size);
        w_u32(&w, g->count);
        if (g->count && (!g->ranks || !g->lens) && !w.failed)
            w.failed = EINVAL;
        for (uint32_t i = 0; i < g->count && !w.failed; i++) {
            if (g->ranks[i] >= g->size)
                w.failed = EINVAL;
            w_u32(&w, g->ranks[i]);
            w_blob(&w, p, g->lens[i]);
            p += g->lens[i];
        }
        break;
    }
    case DDL_MSG_STATUS_REQ:
    case DDL_MSG_ACK:
        break;
    default:
        w.failed = EINVAL;
        break;
    }
    if (!w.failed && w.len - DDL_PROTO_HDR_LEN > DDL_PROTO_MAX_BODY)
        w.failed = EMSGSIZE;
    if (w.failed) {
        free(w.buf);
        errno = w.failed;
        return -1;
    }
    uint32_t body = htonl((uint32_t)(w.len - DDL_PROTO_HDR_LEN));
    memcpy(w.buf + 8, &body, 4);
    *frame = w.buf;
    *len = w.len;
    return 0;
}

/* ---------------------------------------------------------------- decoding */

typedef struct {
    const uint8_t *p;
    size_t left;
    const char *what; /* the first field that did not fit, for the message */
} rbuf_t;

static int r_need(rbuf_t *r, size_t n, const char *what)
{
    if (r->left < n) {
        if (!r->what)
            r->what = what;
        return -1;
    }
    return 0;
}

static uint32_t r_u32(rbuf_t *r, const char *what)
{
    uint32_t v = 0;
    if (r_need(r, 4, what) == 0) {
        memcpy(&v, r->p, 4);
        r->p += 4;
        r->left -= 4;
    }
    return ntohl(v);
}

static uint8_t r_u8(rbuf_t *r, const char *what)
{
    uint8_t v = 0;
    if (r_need(r, 1, what) == 0) {
        v = *r->p++;
        r->left--;
    }
    return v;
}

static int32_t r_i32(rbuf_t *r, const char *what)
{
    return (int32_t)r_u32(r, what);
}

static int64_t r_i64(rbuf_t *r, const char *what)
{
    uint64_t hi = r_u32(r, what);
    return (int64_t)(hi << 32 | r_u32(r, what));
}

/* r_blob: point *out at the next blob inside the body (not copied). */
static uint32_t r_blob(rbuf_t *r, const uint8_t **out, const char *what)
{
    uint32_t n = r_u32(r, what);
    *out = NULL;
    if (r->what || r_need(r, n, what) < 0)
        return 0;
    *out = r->p;
    r->p += n;
    r->left -= n;
    return n;
}

/* r_fixed: a blob of exactly len bytes, copied into out. */
static void r_fixed(rbuf_t *r, uint8_t *out, uint32_t len, const char *what)
{
    const uint8_t *p;
    uint32_t n = r_blob(r, &p, what);
    if (!r->what && n != len)
        r->what = what;
    if (!r->what)
        memcpy(out, p, len);
}

/* str_ok: a wire string holds no NUL and no control character. */
static int str_ok(const uint8_t *s, uint32_t n)
{
    if (n > DDL_PROTO_MAX_STR)
        return 0;
    for (uint32_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return 1;
}

static char *r_str(rbuf_t *r, const char *what, int *nomem)
{
    const uint8_t *s;
    uint32_t n = r_blob(r, &s, what);
    if (r->what)
        return NULL;
    if (!str_ok(s, n)) {
        r->what = what;
        return NULL;
    }
    char *out = malloc(n + 1);
    if (!out) {
        *nomem = 1;
        return NULL;
    }
    memcpy(out, s, n);
    out[n] = '\0';
    return out;
}

/* r_str_into: a string copied into buf (cut to size - 1 bytes: these are
 * for display); "" when the body ends before it (an older minor). */
static void r_str_into(rbuf_t *r, char *buf, size_t size, const char *what)
{
    const uint8_t *s;
    buf[0] = '\0';
    if (r->what || r->left == 0)
        return;
    uint32_t n = r_blob(r, &s, what);
    if (r->what)
        return;
    if (!str_ok(s, n)) {
        r->what = what;
        return;
    }
    size_t k = n < size - 1 ? n : size - 1;
    memcpy(buf, s, k);
    buf[k] = '\0';
}

static int malformed(ddl_msg_t *msg, ddl_error_t *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int malformed(ddl_msg_t *msg, ddl_error_t *err, const char *fmt, ...)
{
    ddl_msg_clear(msg);
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->text, sizeof err->text, fmt, ap);
        va_end(ap);
    }
    errno = EPROTO;
    return -1;
}

int ddl_proto_peek(const uint8_t *buf, size_t avail, uint16_t *type, size_t *frame_len,
                   ddl_error_t *err)
{
    uint32_t magic, body;
    uint16_t t;
    if (avail < DDL_PROTO_HDR_LEN)
        return 0;
    memcpy(&magic, buf, 4);
    memcpy(&t, buf + 6, 2);
    memcpy(&body, buf + 8, 4);
    magic = ntohl(magic);
    t = ntohs(t);
    body = ntohl(body);
    errno = EPROTO;
    if (magic != DDL_PROTO_MAGIC)
        return ddl_errprintf(err, "bad magic 0x%08x (not a ddl peer?)", magic);
    if (buf[4] != DDL_PROTO_MAJOR)
        return ddl_errprintf(err, "protocol major version %u not supported (this side speaks %u)",
                             buf[4], DDL_PROTO_MAJOR);
    if (body > DDL_PROTO_MAX_BODY)
        return ddl_errprintf(err, "frame body of %u bytes exceeds the %u-byte limit", body,
                             DDL_PROTO_MAX_BODY);
    if (t < DDL_MSG_ERROR || t > DDL_MSG_TYPE_MAX || !strcmp(ddl_msg_type_str(t), "unknown"))
        return ddl_errprintf(err, "unknown message type %u", t);
    *type = t;
    *frame_len = DDL_PROTO_HDR_LEN + (size_t)body;
    return 1;
}

ssize_t ddl_proto_decode(const uint8_t *buf, size_t avail, ddl_msg_t *msg, ddl_error_t *err)
{
    uint32_t magic, body;
    uint16_t type;
    int nomem = 0;

    memset(msg, 0, sizeof *msg);
    if (avail < DDL_PROTO_HDR_LEN)
        return 0;
    memcpy(&magic, buf, 4);
    memcpy(&type, buf + 6, 2);
    memcpy(&body, buf + 8, 4);
    magic = ntohl(magic);
    type = ntohs(type);
    body = ntohl(body);
    if (magic != DDL_PROTO_MAGIC)
        return malformed(msg, err, "bad magic 0x%08x (not a ddl peer?)", magic);
    if (buf[4] != DDL_PROTO_MAJOR)
        return malformed(msg, err, "protocol major version %u not supported (this side speaks %u)",
                         buf[4], DDL_PROTO_MAJOR);
    if (body > DDL_PROTO_MAX_BODY)
        return malformed(msg, err, "frame body of %u bytes exceeds the %u-byte limit", body,
                         DDL_PROTO_MAX_BODY);
    if (avail - DDL_PROTO_HDR_LEN < body)
        return 0;

    rbuf_t r = {buf + DDL_PROTO_HDR_LEN, body, NULL};
    typeof(msg->u) *u = &msg->u;
    msg->type = type;
    switch (type) {
    case DDL_MSG_ERROR:
        u->error.code = r_i32(&r, "error code");
        u->error.text = r_str(&r, "error text", &nomem);
        break;
    case DDL_MSG_REGISTER:
        u->reg.rank = r_u32(&r, "rank");
        u->reg.pid = r_i32(&r, "pid");
        if (!r.what && r.left) { /* minor 2 */
            r_str_into(&r, u->reg.cpus, sizeof u->reg.cpus, "cpus");
            r_str_into(&r, u->reg.gpu, sizeof u->reg.gpu, "gpu");
            r_str_into(&r, u->reg.nic, sizeof u->reg.nic, "nic");
            u->reg.restarts = r_u32(&r, "restarts");
        }
        break;
    case DDL_MSG_RANK_STATE:
        u->rank_state.rank = r_u32(&r, "rank");
        u->rank_state.state = r_u8(&r, "state");
        u->rank_state.pid = r_i32(&r, "pid");
        u->rank_state.wstatus = r_i32(&r, "wait status");
        if (!r.what && u->rank_state.state > DDL_RANK_STATE_MAX)
            r.what = "state";
        if (!r.what && r.left >= 4) /* minor 3 */
            u->rank_state.gen = r_u32(&r, "generation");
        break;
    case DDL_MSG_ALLGATHER: {
        const uint8_t *data;
        u->allgather.gen = r_u32(&r, "generation");
        u->allgather.seq = r_u32(&r, "sequence");
        u->allgather.rank = r_u32(&r, "rank");
        u->allgather.size = r_u32(&r, "size");
        u->allgather.len = r_blob(&r, &data, "data");
        if (!r.what && (u->allgather.size == 0 || u->allgather.rank >= u->allgather.size))
            r.what = "rank/size";
        if (!r.what) {
            u->allgather.data = malloc(u->allgather.len ? u->allgather.len : 1);
            if (!u->allgather.data)
                nomem = 1;
            else if (u->allgather.len)
                memcpy(u->allgather.data, data, u->allgather.len);
        }
        break;
    }
    case DDL_MSG_ALLGATHER_RESULT: {
        u->allgather_result.gen = r_u32(&r, "generation");
        u->allgather_result.seq = r_u32(&r, "sequence");
        uint32_t count = r_u32(&r, "count");
        /* each blob needs at least its 4-byte length: bound count by the body */
        if (!r.what && count > r.left / 4)
            r.what = "count";
        if (r.what)
            break;
        u->allgather_result.count = count;
        u->allgather_result.lens = calloc(count ? count : 1, sizeof(uint32_t));
        u->allgather_result.data = malloc(r.left ? r.left : 1);
        if (!u->allgather_result.lens || !u->allgather_result.data) {
            nomem = 1;
            break;
        }
        size_t off = 0;
        for (uint32_t i = 0; i < count && !r.what; i++) {
            const uint8_t *p;
            uint32_t n = r_blob(&r, &p, "blob");
            u->allgather_result.lens[i] = n;
            if (n)
                memcpy(u->allgather_result.data + off, p, n);
            off += n;
        }
        break;
    }
    case DDL_MSG_STATUS: {
        u->status.ckpt_step = -1;
        u->status.ckpt_age_ms = DDL_HEARD_NEVER;
        u->status.straggler.rank = DDL_STRAGGLER_NONE; /* unless minor 8 says */
        u->status.step = r_str(&r, "step", &nomem);
        u->status.size = r_u32(&r, "size");
        u->status.gen = r_u32(&r, "generation");
        u->status.agent_pid = r_i32(&r, "agent pid");
        uint32_t n = r_u32(&r, "rank count");
        if (!r.what && n > r.left / 17)
            r.what = "rank count";
        if (r.what || nomem)
            break;
        u->status.nranks = n;
        u->status.ranks = calloc(n ? n : 1, sizeof(ddl_rank_info_t));
        if (!u->status.ranks) {
            nomem = 1;
            break;
        }
        for (uint32_t i = 0; i < n; i++) {
            ddl_rank_info_t *ri = &u->status.ranks[i];
            ri->rank = r_u32(&r, "rank");
            ri->state = r_u8(&r, "state");
            ri->pid = r_i32(&r, "pid");
            ri->wpid = r_i32(&r, "worker pid");
            ri->wstatus = r_i32(&r, "wait status");
            ri->step = -1; /* unknown unless minor 6 says */
            ri->rate_milli = DDL_RATE_UNKNOWN;
        }
        u->status.nnodes = 1;
        if (!r.what && r.left >= 8) { /* minor 1 */
            u->status.node_id = r_u32(&r, "node id");
            u->status.nnodes = r_u32(&r, "node count");
        }
        if (r.what || r.left == 0)
            break;
        /* minor 2 */
        u->status.host = r_str(&r, "host", &nomem);
        u->status.leader = r_u8(&r, "leader");
        for (uint32_t i = 0; i < n && !r.what; i++) {
            ddl_rank_info_t *ri = &u->status.ranks[i];
            r_str_into(&r, ri->cpus, sizeof ri->cpus, "cpus");
            r_str_into(&r, ri->gpu, sizeof ri->gpu, "gpu");
            r_str_into(&r, ri->nic, sizeof ri->nic, "nic");
            ri->restarts = r_u32(&r, "restarts");
            ri->heard_ms = r_u32(&r, "heard");
        }
        uint32_t np = r_u32(&r, "peer count");
        if (!r.what && np > r.left / 17)
            r.what = "peer count";
        if (r.what || nomem)
            break;
        u->status.peers = calloc(np ? np : 1, sizeof(ddl_peer_info_t));
        if (!u->status.peers) {
            nomem = 1;
            break;
        }
        u->status.npeers = np;
        for (uint32_t i = 0; i < np && !r.what; i++) {
            ddl_peer_info_t *pi = &u->status.peers[i];
            pi->node_id = r_u32(&r, "peer node");
            pi->state = r_u8(&r, "peer state");
            pi->heard_ms = r_u32(&r, "peer heard");
            r_str_into(&r, pi->host, sizeof pi->host, "peer host");
            r_str_into(&r, pi->addr, sizeof pi->addr, "peer address");
        }
        if (r.what)
            break;
        u->status.ckpt_dir = r_str(&r, "checkpoint directory", &nomem);
        u->status.ckpt_step = r_i64(&r, "checkpoint step");
        u->status.ckpt_age_ms = r_u32(&r, "checkpoint age");
        if (!r.what && r.left) { /* minor 3 */
            u->status.last_failure = r_str(&r, "last failure", &nomem);
            if (u->status.last_failure && !*u->status.last_failure) {
                free(u->status.last_failure);
                u->status.last_failure = NULL;
            }
        }
        if (r.what || nomem || r.left == 0)
            break;
        /* minor 6 */
        for (uint32_t i = 0; i < n && !r.what; i++) {
            ddl_rank_info_t *ri = &u->status.ranks[i];
            ri->step = r_i64(&r, "rank step");
            ri->collectives = (uint64_t)r_i64(&r, "rank collectives");
            ri->rate_milli = r_u32(&r, "rank rate");
        }
        uint32_t nc = r_u32(&r, "failure class count");
        /* a newer agent may know more classes: those are skipped */
        for (uint32_t i = 1; i <= nc && !r.what; i++) {
            uint32_t v = r_u32(&r, "failure count");
            if (i <= DDL_FAIL_CLASS_MAX)
                u->status.failures[i] = v;
        }
        if (r.what || r.left == 0)
            break;
        /* minor 8 */
        u->status.straggler.rank = r_u32(&r, "straggler rank");
        u->status.straggler.node_id = r_u32(&r, "straggler node");
        u->status.straggler.slower_pm = r_u32(&r, "straggler slowness");
        u->status.straggler.steps = r_u32(&r, "straggler steps");
        u->status.straggler.compute_us = r_u32(&r, "straggler compute");
        u->status.straggler.peers_us = r_u32(&r, "straggler peers' compute");
        u->status.straggler.named = r_u32(&r, "stragglers named");
        break;
    }
    case DDL_MSG_PROGRESS:
        u->progress.rank = r_u32(&r, "rank");
        u->progress.gen = r_u32(&r, "generation");
        u->progress.step = r_i64(&r, "step");
        u->progress.collectives = (uint64_t)r_i64(&r, "collectives");
        if (!r.what && r.left) { /* minor 8 */
            u->progress.at_ns = r_i64(&r, "step time");
            u->progress.wait_ns = (uint64_t)r_i64(&r, "time waited");
        }
        break;
    case DDL_MSG_PEER_HELLO: {
        const uint8_t *p;
        u->peer_hello.step = r_str(&r, "step", &nomem);
        u->peer_hello.node_id = r_u32(&r, "node id");
        uint32_t n = r_blob(&r, &p, "secret");
        if (!r.what && n > DDL_PROTO_MAX_SECRET)
            r.what = "secret";
        if (r.what || nomem)
            break;
        u->peer_hello.secret = malloc(n ? n : 1);
        if (!u->peer_hello.secret) {
            nomem = 1;
            break;
        }
        memcpy(u->peer_hello.secret, p, n);
        u->peer_hello.secret_len = n;
        if (r.left) /* minor 2 */
            u->peer_hello.host = r_str(&r, "host", &nomem);
        if (!r.what && r.left) /* minor 3 */
            u->peer_hello.listen = r_str(&r, "listen address", &nomem);
        break;
    }
    case DDL_MSG_PEER_AUTH:
        u->peer_auth.step = r_str(&r, "step", &nomem);
        u->peer_auth.node_id = r_u32(&r, "node id");
        u->peer_auth.host = r_str(&r, "host", &nomem);
        u->peer_auth.listen = r_str(&r, "listen address", &nomem);
        r_fixed(&r, u->peer_auth.nonce, DDL_PROTO_NONCE_LEN, "nonce");
        r_fixed(&r, u->peer_auth.mac, DDL_PROTO_MAC_LEN, "MAC");
        break;
    case DDL_MSG_PEER_WELCOME:
        u->peer_welcome.node_id = r_u32(&r, "node id");
        r_fixed(&r, u->peer_welcome.nonce, DDL_PROTO_NONCE_LEN, "nonce");
        r_fixed(&r, u->peer_welcome.mac, DDL_PROTO_MAC_LEN, "MAC");
        break;
    case DDL_MSG_PEER_BEAT: {
        u->peer_beat.node_id = r_u32(&r, "node id");
        u->peer_beat.gen = r_u32(&r, "generation");
        u->peer_beat.host = r_str(&r, "host", &nomem);
        break;
    }
    case DDL_MSG_FAILURE:
        u->failure.gen = r_u32(&r, "generation");
        u->failure.rank = r_u32(&r, "rank");
        u->failure.node_id = r_u32(&r, "node id");
        u->failure.cls = r_u8(&r, "class");
        u->failure.wstatus = r_i32(&r, "wait status");
        if (!r.what && (u->failure.cls < 1 || u->failure.cls > DDL_FAIL_CLASS_MAX))
            r.what = "class";
        u->failure.host = r_str(&r, "host", &nomem);
        u->failure.text = r_str(&r, "text", &nomem);
        break;
    case DDL_MSG_ROSTER: {
        uint32_t n = r_u32(&r, "node count");
        if (!r.what && n > r.left / 4) /* each address needs its length */
            r.what = "node count";
        if (r.what)
            break;
        u->roster.addr = calloc(n ? n : 1, sizeof *u->roster.addr);
        if (!u->roster.addr) {
            nomem = 1;
            break;
        }
        u->roster.nnodes = n;
        for (uint32_t i = 0; i < n && !r.what && !nomem; i++)
            u->roster.addr[i] = r_str(&r, "address", &nomem);
        u->roster.retaken = calloc(n ? n : 1, sizeof *u->roster.retaken);
        u->roster.lost = calloc(n ? n : 1, 1);
        if (!u->roster.retaken || !u->roster.lost) {
            nomem = 1;
            break;
        }
        int newer = r.left > 0; /* minor 10: both arrays */
        for (uint32_t i = 0; i < n && !r.what && newer; i++)
            u->roster.retaken[i] = r_u32(&r, "retake count");
        for (uint32_t i = 0; i < n && !r.what && newer; i++)
            u->roster.lost[i] = r_u8(&r, "lost flag") != 0;
        break;
    }
    case DDL_MSG_GENERATION:
        u->generation.gen = r_u32(&r, "generation");
        u->generation.action = r_u8(&r, "action");
        u->generation.code = r_i32(&r, "exit code");
        u->generation.delay_ms = r_u32(&r, "delay");
        if (!r.what && u->generation.action > DDL_GEN_FINISH)
            r.what = "action";
        if (!r.what && (u->generation.code < -1 || u->generation.code > 255))
            r.what = "exit code";
        u->generation.cause = r_str(&r, "cause", &nomem);
        u->generation.nnodes = r_u32(&r, "node count");
        if (!r.what && u->generation.nnodes > r.left / 4)
            r.what = "node count";
        if (!r.what && u->generation.nnodes) {
            u->generation.node_rank = calloc(u->generation.nnodes, sizeof(uint32_t));
            if (!u->generation.node_rank) {
                nomem = 1;
                break;
            }
            for (uint32_t i = 0; i < u->generation.nnodes; i++)
                u->generation.node_rank[i] = r_u32(&r, "node rank");
        }
        if (!r.what && r.left) /* minor 4 */
            u->generation.master = r_str(&r, "master address", &nomem);
        if (r.what)
            u->generation.nnodes = 0;
        break;
    case DDL_MSG_STOP_REQ:
        u->stop_req.signo = r_i32(&r, "signal");
        if (!r.what && (u->stop_req.signo < 0 || u->stop_req.signo > 64))
            r.what = "signal";
        u->stop_req.why = r_str(&r, "reason", &nomem);
        break;
    case DDL_MSG_STOP:
        u->stop.gen = r_u32(&r, "generation");
        u->stop.at = r_i64(&r, "boundary");
        if (!r.what && u->stop.at < -1)
            r.what = "boundary";
        u->stop.why = r_str(&r, "reason", &nomem);
        break;
    case DDL_MSG_STOP_AT:
        u->stop_at.gen = r_u32(&r, "generation");
        u->stop_at.rank = r_u32(&r, "rank");
        u->stop_at.boundary = r_i64(&r, "boundary");
        u->stop_at.step = r_i64(&r, "step");
        if (!r.what && u->stop_at.boundary < 0)
            r.what = "boundary";
        break;
    case DDL_MSG_WARM:
        u->warm.gen = r_u32(&r, "generation");
        u->warm.rank = r_u32(&r, "rank");
        u->warm.on = r_u8(&r, "on");
        u->warm.node_id = r_u32(&r, "node");
        break;
    case DDL_MSG_NODE_GATHER: {
        typeof(u->node_gather) *g = &u->node_gather;
        g->gen = r_u32(&r, "generation");
        g->seq = r_u32(&r, "sequence");
        g->size = r_u32(&r, "size");
        uint32_t count = r_u32(&r, "count");
        /* each entry needs its rank and blob length: bound count by the body */
        if (!r.what && (count > r.left / 8 || count > g->size))
            r.what = "count";
        if (r.what)
            break;
        g->ranks = calloc(count ? count : 1, sizeof(uint32_t));
        g->lens = calloc(count ? count : 1, sizeof(uint32_t));
        g->data = malloc(r.left ? r.left : 1);
        if (!g->ranks || !g->lens || !g->data) {
            nomem = 1;
            break;
        }
        g->count = count;
        size_t off = 0;
        for (uint32_t i = 0; i < count && !r.what; i++) {
            const uint8_t *p;
            g->ranks[i] = r_u32(&r, "rank");
            uint32_t n = r_blob(&r, &p, "blob");
            if (!r.what && g->ranks[i] >= g->size)
                r.what = "rank";
            g->lens[i] = n;
            if (n && !r.what)
                memcpy(g->data + off, p, n);
            off += n;
        }
        break;
    }
    case DDL_MSG_STATUS_REQ:
    case DDL_MSG_ACK:
        break;
    default:
        msg->type = 0;
        return malformed(msg, err, "unknown message type %u", type);
    }
    if (nomem) {
        ddl_msg_clear(msg);
        errno = ENOMEM;
        return ddl_errprintf(err, "out of memory decoding a %s message", ddl_msg_type_str(type));
    }
    if (r.what)
        return malformed(msg, err, "malformed %s message: bad or truncated field '%s'",
                         ddl_msg_type_str(type), r.what);
    return (ssize_t)(DDL_PROTO_HDR_LEN + body);
}

/* ---------------------------------------------------------------- blocking I/O */

/* send_full: like ddl_write_full, but a peer that closed the socket is
 * EPIPE, never SIGPIPE: libddl must not touch the application's signals. */
static int send_full(int fd, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == ENOTSOCK)
                return ddl_write_full(fd, p, len);
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int ddl_proto_send(int fd, const ddl_msg_t *msg)
{
    uint8_t *frame;
    size_t len;
    if (ddl_proto_encode(msg, &frame, &len) < 0)
        return -1;
    int rc = send_full(fd, frame, len);
    int saved = errno;
    free(frame);
    errno = saved;
    return rc;
}

/* read_deadline: read exactly len bytes before the deadline (ms, <0: none). */
static int read_deadline(int fd, uint8_t *buf, size_t len, int64_t deadline)
{
    while (len > 0) {
        int wait = -1;
        if (deadline >= 0) {
            int64_t left = deadline - ddl_now_ms();
            if (left <= 0) {
                errno = ETIMEDOUT;
                return -1;
            }
            wait = left > 1000000 ? 1000000 : (int)left;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int rc = poll(&pfd, 1, wait);
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (rc == 0)
            continue;
        ssize_t n = read(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -1;
        }
        if (n == 0) {
            errno = ECONNRESET;
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

int ddl_proto_recv(int fd, ddl_msg_t *msg, int timeout_ms, ddl_error_t *err)
{
    uint8_t hdr[DDL_PROTO_HDR_LEN];
    int64_t deadline = timeout_ms < 0 ? -1 : ddl_now_ms() + timeout_ms;
    uint32_t body;

    memset(msg, 0, sizeof *msg);
    if (read_deadline(fd, hdr, sizeof hdr, deadline) < 0)
        return ddl_errprintf(err, "%s", strerror(errno));
    /* Validate the header before trusting its length. */
    if (ddl_proto_decode(hdr, sizeof hdr, msg, err) < 0)
        return -1;
    memcpy(&body, hdr + 8, 4);
    body = ntohl(body);
    uint8_t *frame = malloc(DDL_PROTO_HDR_LEN + (size_t)body);
    if (!frame) {
        errno = ENOMEM;
        return ddl_errprintf(err, "out of memory for a %u-byte frame", body);
    }
    memcpy(frame, hdr, sizeof hdr);
    if (read_deadline(fd, frame + DDL_PROTO_HDR_LEN, body, deadline) < 0) {
        int saved = errno;
        free(frame);
        errno = saved;
        return ddl_errprintf(err, "%s", strerror(errno));
    }
    ssize_t n = ddl_proto_decode(frame, DDL_PROTO_HDR_LEN + (size_t)body, msg, err);
    int saved = errno;
    free(frame);
    errno = saved;
    return n > 0 ? 0 : -1;
}
