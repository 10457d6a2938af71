/* transport_loopback.c: the loopback transport (transport_loopback.h):
 * threads of one process as the ranks of a world, for tests.  Every rank
 * has an inbox: the messages that arrived before their receive was posted
 * (unexpected), and the receives posted before their message (posted),
 * both in order.  A receive matches the oldest message from its sender
 * with its tag, as UCX's tag matching does; a message longer than its
 * receive fails the receive (DDL_ERR_TRANSPORT).  One lock guards the whole
 * world: the point is correctness, not speed. */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ddl_int.h"
#include "transport_loopback.h"

typedef struct lb_req {
    int is_send;
    int done;
    ddl_status_t st;
    int peer;   /* a send: the destination; a receive: the source */
    void *buf;  /* a receive's buffer */
    size_t len; /* its capacity */
    uint64_t tag;
    struct lb_req *next; /* in the posted list */
} lb_req_t;

typedef struct lb_msg {
    int src;
    uint64_t tag;
    const void *data; /* the sender's buffer (rendezvous) or copy */
    void *copy;       /* eager: owned copy */
    size_t len;
    lb_req_t *sreq; /* rendezvous: the send to complete */
    struct lb_msg *next;
} lb_msg_t;

typedef struct {
    ddl_tl_t tl; /* first: ops receive &tl */
    ddl_loopback_t *lb;
    int rank;
    lb_msg_t *unexpected, **unexpected_tail;
    lb_req_t *posted, **posted_tail;
} lb_rank_t;

struct ddl_loopback {
    pthread_mutex_t mu;
    int n;
    size_t eager_max;
    unsigned long messages;
    lb_rank_t *ranks;
};

static lb_rank_t *rank_of(ddl_tl_t *tl)
{
    return (lb_rank_t *)tl;
}

/* deliver: hand message data to a receive, which completes. */
static void deliver(lb_req_t *r, const void *data, size_t len)
{
    if (len > r->len)
        r->st = DDL_ERR_TRANSPORT;
    else if (len)
        memcpy(r->buf, data, len);
    r->done = 1;
}

static ddl_status_t lb_isend(ddl_tl_t *tl, int peer, const void *buf, size_t len, uint64_t tag,
                             void **req)
{
    lb_rank_t *me = rank_of(tl);
    ddl_loopback_t *lb = me->lb;
    *req = NULL;
    if (peer < 0 || peer >= lb->n)
        return ddl_fail(DDL_ERR_INVALID, "loopback: no rank %d in a world of %d", peer, lb->n);
    lb_rank_t *to = &lb->ranks[peer];
    ddl_status_t st = DDL_OK;
    pthread_mutex_lock(&lb->mu);
    lb->messages++;
    lb_req_t **pp = &to->posted;
    while (*pp && ((*pp)->peer != me->rank || (*pp)->tag != tag))
        pp = &(*pp)->next;
    if (*pp) { /* a receive waits: straight into its buffer */
        lb_req_t *r = *pp;
        *pp = r->next;
        if (!*pp)
            to->posted_tail = pp;
        deliver(r, buf, len);
        goto out;
    }
    lb_msg_t *m = calloc(1, sizeof *m);
    lb_req_t *s = len > lb->eager_max ? calloc(1, sizeof *s) : NULL;
    void *copy = len <= lb->eager_max ? malloc(len ? len : 1) : NULL;
    if (!m || (len > lb->eager_max ? !s : !copy)) {
        free(m);
        free(s);
        free(copy);
        st = ddl_fail(DDL_ERR_NOMEM, "loopback: out of memory for a %zu-byte message", len);
        goto out;
    }
    if (copy) {
        memcpy(copy, buf, len);
        m->data = m->copy = copy;
    } else {
        s->is_send = 1;
        s->peer = peer;
        m->data = buf;
        m->sreq = s;
        *req = s;
    }
    m->src = me->rank;
    m->tag = tag;
    m->len = len;
    *to->unexpected_tail = m;
    to->unexpected_tail = &m->next;
out:
    pthread_mutex_unlock(&lb->mu);
    return st;
}

static ddl_status_t lb_irecv(ddl_tl_t *tl, int peer, void *buf, size_t len, uint64_t tag,
                             void **req)
{
    lb_rank_t *me = rank_of(tl);
    ddl_loopback_t *lb = me->lb;
    ddl_status_t st = DDL_OK;
    *req = NULL;
    pthread_mutex_lock(&lb->mu);
    lb_msg_t **pp = &me->unexpected;
    while (*pp && ((*pp)->src != peer || (*pp)->tag != tag))
        pp = &(*pp)->next;
    if (*pp) { /* the message is here: take it */
        lb_msg_t *m = *pp;
        *pp = m->next;
        if (!*pp)
            me->unexpected_tail = pp;
        lb_req_t r = {.buf = buf, .len = len};
        deliver(&r, m->data, m->len);
        if (r.st != DDL_OK)
            st = ddl_fail(r.st,
                          "loopback: a message of %zu bytes from rank %d for a %zu-byte "
                          "receive",
                          m->len, peer, len);
        if (m->sreq)
            m->sreq->done = 1;
        free(m->copy);
        free(m);
        goto out;
    }
    lb_req_t *r = calloc(1, sizeof *r);
    if (!r) {
        st = ddl_fail(DDL_ERR_NOMEM, "loopback: out of memory for a receive");
        goto out;
    }
    r->peer = peer;
    r->buf = buf;
    r->len = len;
    r->tag = tag;
    *me->posted_tail = r;
    me->posted_tail = &r->next;
    *req = r;
out:
    pthread_mutex_unlock(&lb->mu);
    return st;
}

static ddl_status_t lb_test(ddl_tl_t *tl, void *req, int report)
{
    ddl_loopback_t *lb = rank_of(tl)->lb;
    lb_req_t *r = req;
    pthread_mutex_lock(&lb->mu);
    int done = r->done;
    pthread_mutex_unlock(&lb->mu);
    if (!done)
        return DDL_INPROGRESS;
    ddl_status_t st = r->st;
    free(r);
    if (st != DDL_OK && report)
        return ddl_fail(st, "loopback: a message longer than its receive");
    return st;
}

static void lb_cancel(ddl_tl_t *tl, void *req)
{
    lb_rank_t *me = rank_of(tl);
    ddl_loopback_t *lb = me->lb;
    lb_req_t *r = req;
    pthread_mutex_lock(&lb->mu);
    if (!r->done && !r->is_send) { /* unpost the receive */
        lb_req_t **pp = &me->posted;
        while (*pp && *pp != r)
            pp = &(*pp)->next;
        if (*pp) {
            *pp = r->next;
            if (!*pp)
                me->posted_tail = pp;
        }
    } else if (!r->done) { /* withdraw the message: its buffer may go */
        lb_rank_t *to = &lb->ranks[r->peer];
        lb_msg_t **pp = &to->unexpected;
        while (*pp && (*pp)->sreq != r)
            pp = &(*pp)->next;
        if (*pp) {
            lb_msg_t *m = *pp;
            *pp = m->next;
            if (!*pp)
                to->unexpected_tail = pp;
            free(m);
        }
    }
    pthread_mutex_unlock(&lb->mu);
    free(r);
}

static int lb_progress(ddl_tl_t *tl)
{
    (void)tl;
    return 0; /* messages move when posted */
}

static const ddl_tl_ops_t lb_ops = {
    .name = "loopback",
    .isend = lb_isend,
    .irecv = lb_irecv,
    .test = lb_test,
    .cancel = lb_cancel,
    .progress = lb_progress,
};

ddl_loopback_t *ddl_loopback_new(int n, size_t eager_max)
{
    ddl_loopback_t *lb = calloc(1, sizeof *lb);
    if (!lb || !(lb->ranks = calloc((size_t)n, sizeof *lb->ranks))) {
        free(lb);
        return NULL;
    }
    pthread_mutex_init(&lb->mu, NULL);
    lb->n = n;
    lb->eager_max = eager_max;
    for (int i = 0; i < n; i++) {
        lb_rank_t *r = &lb->ranks[i];
        r->tl.ops = &lb_ops;
        r->lb = lb;
        r->rank = i;
        r->unexpected_tail = &r->unexpected;
        r->posted_tail = &r->posted;
    }
    return lb;
}

ddl_tl_t *ddl_loopback_tl(ddl_loopback_t *lb, int rank)
{
    return &lb->ranks[rank].tl;
}

unsigned long ddl_loopback_messages(ddl_loopback_t *lb)
{
    pthread_mutex_lock(&lb->mu);
    unsigned long n = lb->messages;
    pthread_mutex_unlock(&lb->mu);
    return n;
}

void ddl_loopback_free(ddl_loopback_t *lb)
{
    if (!lb)
        return;
    for (int i = 0; i < lb->n; i++) {
        for (lb_msg_t *m = lb->ranks[i].unexpected, *next; m; m = next) {
            next = m->next;
            free(m->sreq);
            free(m->copy);
            free(m);
        }
        for (lb_req_t *r = lb->ranks[i].posted, *next; r; r = next) {
            next = r->next;
            free(r);
        }
    }
    pthread_mutex_destroy(&lb->mu);
    free(lb->ranks);
    free(lb);
}
