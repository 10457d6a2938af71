/* telemetry.c: what the agent knows of its step, for `status` and for the
 * metrics file: the STATUS answer built from the agent's state, the
 * workers' progress (PROGRESS from their supervisors: the last step and
 * collectives of each rank, and its steps per second), the failures
 * counted by kind, and the Prometheus file (metrics.h) kept in
 * DDL_METRICS_DIR, and, on the leader, the straggler detector's view
 * (straggler.h) with its log lines.
 *
 * The file is DIR/ddl-STEP-HOST.prom, rewritten every
 * DDL_METRICS_INTERVAL_S seconds and once more when the agent ends, the
 * way node_exporter's textfile collector wants it: written whole to an
 * unpredictable temporary name in the same directory (".ddl-...prom.XXXX",
 * which the collector ignores), then renamed over the file, so that a
 * reader sees the old or the new file, never part of one.  The directory
 * may be shared by every user if it is sticky (safefile.h).  The loop only
 * renders the text; a thread of its own writes it (bgfile.h), so that a
 * metrics directory on a hung file system never stops the agent's beats
 * (a write still pending when the next is due is replaced by the newer
 * one).  A failure to write is logged once and retried at the next
 * interval.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_int.h"
#include "bgfile.h"
#include "env.h"
#include "log.h"
#include "metrics.h"
#include "safefile.h"
#include "straggler.h"

/* A rank's steps per second are measured over at least RATE_WINDOW_MS;
 * a rank silent for RATE_STALE_MS has no rate (it is not progressing). */
#define RATE_WINDOW_MS 2000
#define RATE_STALE_MS 10000

struct telemetry {
    int dfd;          /* the metrics directory, -1: no metrics file */
    ddl_bgfile_t *bg; /* its writer (NULL: no thread; written from the loop) */
    int64_t every_ms; /* between two writes */
    int64_t next_ms;  /* ddl_now_ms() of the next write */
    int warned;       /* a failure to write was logged */
    char name[160];   /* the file's name in the directory */
};

static uint32_t age_ms(int64_t at)
{
    if (!at)
        return DDL_HEARD_NEVER;
    int64_t d = ddl_now_ms() - at;
    return d < 0 ? 0 : d >= (int64_t)DDL_HEARD_NEVER ? DDL_HEARD_NEVER - 1 : (uint32_t)d;
}

int status_fill(agent_t *a, ddl_msg_t *m)
{
    memset(m, 0, sizeof *m);
    m->type = DDL_MSG_STATUS;
    ddl_rank_info_t *mine = calloc(a->nlocal ? a->nlocal : 1, sizeof *mine);
    /* the leader reports every other node, the others their leader */
    ddl_peer_info_t *peers = calloc(a->opts->nnodes ? a->opts->nnodes : 1, sizeof *peers);
    if (!mine || !peers) {
        free(mine);
        free(peers);
        errno = ENOMEM;
        return -1;
    }
    int64_t now = ddl_now_ms();
    uint32_t k = 0, np = 0;
    for (uint32_t r = 0; r < a->opts->size; r++) {
        if (!a->is_local[r])
            continue;
        ddl_rank_info_t *ri = &mine[k++];
        *ri = a->ranks[r];
        ri->heard_ms = age_ms(a->heard_at[r]);
        ri->step = -1;
        ri->rate_milli = DDL_RATE_UNKNOWN;
        const rank_prog_t *p = a->prog ? &a->prog[r] : NULL;
        if (p && p->last_ms) {
            ri->step = p->step;
            ri->collectives = p->collectives;
            if (p->rate_known)
                ri->rate_milli = now - p->last_ms > RATE_STALE_MS || ri->state != DDL_RANK_RUNNING
                                     ? 0
                                     : p->rate_milli;
        }
    }
    for (uint32_t n = 0; n < a->opts->nnodes; n++) {
        const peer_t *p = &a->peers[n];
        if (n == a->opts->node_id || (!a->leader && p->state == DDL_PEER_NONE))
            continue;
        ddl_peer_info_t *pi = &peers[np++];
        pi->node_id = n;
        pi->state = p->state;
        pi->heard_ms = age_ms(p->heard_at);
        snprintf(pi->host, sizeof pi->host, "%s", p->host);
        snprintf(pi->addr, sizeof pi->addr, "%s", p->addr);
    }
    m->u.status.step = (char *)a->opts->step;
    m->u.status.size = a->w.world; /* with spares, fewer than the tasks */
    m->u.status.gen = a->gen > a->ag_gen ? a->gen : a->ag_gen;
    m->u.status.agent_pid = (int32_t)getpid();
    m->u.status.nranks = k;
    m->u.status.ranks = mine;
    m->u.status.node_id = a->opts->node_id;
    m->u.status.nnodes = a->opts->nnodes;
    m->u.status.host = a->host;
    m->u.status.leader = (uint8_t)a->leader;
    m->u.status.npeers = np;
    m->u.status.peers = peers;
    m->u.status.ckpt_dir = (char *)a->ckpt_dir;
    m->u.status.ckpt_step = -1;
    m->u.status.ckpt_age_ms = DDL_HEARD_NEVER;
    ckpt_latest(a->ckpt_dir, &m->u.status.ckpt_step, &m->u.status.ckpt_age_ms);
    m->u.status.last_failure = a->last_failure[0] ? a->last_failure : NULL;
    memcpy(m->u.status.failures, a->failures, sizeof a->failures);
    straggler_info(a, &m->u.status.straggler);
    return 0;
}

/* straggler_host: the hostname of node n as this agent knows it. */
static const char *straggler_host(const agent_t *a, uint32_t n)
{
    if (n == a->opts->node_id)
        return a->host;
    return n < a->opts->nnodes && a->peers[n].host[0] ? a->peers[n].host : "?";
}

/* to_world: the detector counts slots; people read world ranks. */
static void to_world(const agent_t *a, ddl_straggler_info_t *i)
{
    if (i->rank == DDL_STRAGGLER_NONE)
        return;
    int64_t wr = ddl_world_rank(&a->w, i->rank);
    if (wr >= 0)
        i->rank = (uint32_t)wr;
}

void straggler_info(const agent_t *a, ddl_straggler_info_t *out)
{
    ddl_strag_info(a->leader ? a->strag : NULL, out);
    to_world(a, out);
}

void straggler_note(agent_t *a, uint32_t slot, uint32_t node, const ddl_msg_t *m)
{
    if (!a->leader || a->strag_off || m->u.progress.at_ns <= 0)
        return;
    if (!a->strag) {
        ddl_strag_cfg_t cfg;
        ddl_error_t err;
        if (ddl_strag_cfg_env(&cfg, &err) < 0) {
            ddl_warn("no straggler detection: %s", err.text);
            a->strag_off = 1;
            return;
        }
        if (cfg.pct == 0) {
            a->strag_off = 1;
            return;
        }
        if (!(a->strag = ddl_strag_new(a->opts->size, &cfg)))
            return; /* out of memory: tried again at the next sample */
        ddl_debug("straggler detection: %ld%% slower than the peers' median over %ld steps, "
                  "%ld times in a row", cfg.pct, cfg.window, cfg.persist);
    }
    ddl_straggler_info_t ev;
    ddl_strag_event_t e = ddl_strag_sample(a->strag, slot, node, m->u.progress.gen,
                                           m->u.progress.step, m->u.progress.at_ns,
                                           m->u.progress.wait_ns, &ev);
    if (e == DDL_STRAG_NONE)
        return;
    to_world(a, &ev);
    if (e == DDL_STRAG_NAMED)
        ddl_warn("straggler: rank %u on node %u (%s) is %.1f%% slower than its peers: "
                 "%.2f ms of compute a step against their median %.2f ms, over its last %u "
                 "steps (up to step %lld)",
                 ev.rank, ev.node_id, straggler_host(a, ev.node_id), ev.slower_pm / 10.0,
                 ev.compute_us / 1000.0, ev.peers_us / 1000.0, ev.steps,
                 (long long)m->u.progress.step);
    else if (e == DDL_STRAG_RECOVERED)
        ddl_warn("straggler: rank %u on node %u (%s) recovered: %.1f%% slower than its peers "
                 "(%.2f ms against %.2f ms a step) over its last %u steps (up to step %lld)",
                 ev.rank, ev.node_id, straggler_host(a, ev.node_id), ev.slower_pm / 10.0,
                 ev.compute_us / 1000.0, ev.peers_us / 1000.0, ev.steps,
                 (long long)m->u.progress.step);
    else
        ddl_info("straggler: rank %u on node %u (%s) restarted (generation %u): no longer "
                 "reported until measured again",
                 ev.rank, ev.node_id, straggler_host(a, ev.node_id), m->u.progress.gen);
}

void status_release(ddl_msg_t *m)
{
    free(m->u.status.ranks);
    free(m->u.status.peers);
    memset(m, 0, sizeof *m);
}

void failure_count(agent_t *a, int cls)
{
    if (cls >= 1 && cls <= DDL_FAIL_CLASS_MAX)
        a->failures[cls]++;
}

void progress_note(agent_t *a, uint32_t rank, const ddl_msg_t *m)
{
    if (!a->prog && !(a->prog = calloc(a->opts->size, sizeof *a->prog)))
        return; /* progress is not worth failing for */
    rank_prog_t *p = &a->prog[rank];
    int64_t now = ddl_now_ms();
    int64_t step = m->u.progress.step;
    p->collectives = m->u.progress.collectives;
    if (step >= 0 && (!p->ref_ms || step < p->ref_step || m->u.progress.gen != p->gen)) {
        p->ref_ms = now; /* a new worker, or one that went back to a checkpoint */
        p->ref_step = step;
        p->rate_known = 0;
    } else if (step >= 0 && now - p->ref_ms >= RATE_WINDOW_MS) {
        double rate = (double)(step - p->ref_step) * 1e6 / (double)(now - p->ref_ms);
        p->rate_milli =
            rate >= (double)(DDL_RATE_UNKNOWN - 1) ? DDL_RATE_UNKNOWN - 1 : (uint32_t)(rate + 0.5);
        p->rate_known = 1;
        p->ref_ms = now;
        p->ref_step = step;
    }
    p->gen = m->u.progress.gen;
    p->step = step;
    p->last_ms = now;
}

/* file_name: ddl-STEP-HOST.prom, any byte outside [A-Za-z0-9._-] as '_'. */
static void file_name(const agent_t *a, char *buf, size_t len)
{
    snprintf(buf, len, "ddl-%s-%s.prom", a->opts->step, a->host);
    for (char *c = buf; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '-' || *c == '_'))
            *c = '_';
}

/* mx_get: the telemetry state, made on first use from DDL_METRICS_DIR and
 * DDL_METRICS_INTERVAL_S; NULL only without memory. */
static struct telemetry *mx_get(agent_t *a)
{
    if (a->mx)
        return a->mx;
    struct telemetry *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->dfd = -1;
    a->mx = t;
    const char *dir = ddl_env_str(DDLENV_DDL_METRICS_DIR);
    if (!dir)
        return t;
    ddl_error_t err;
    long every_s;
    if (ddl_env_long(DDLENV_DDL_METRICS_INTERVAL_S, &every_s, &err) < 0) {
        ddl_warn("no metrics: %s", err.text);
        return t;
    }
    t->dfd = ddl_dir_open_shared(dir, "metrics directory", &err);
    if (t->dfd < 0) {
        ddl_warn("no metrics in %s: %s", dir, err.text);
        return t;
    }
    t->every_ms = every_s * 1000;
    t->next_ms = ddl_now_ms(); /* the first write at once */
    file_name(a, t->name, sizeof t->name);
    t->bg = ddl_bgfile_new(t->dfd, t->name, 0644); /* the collector runs as another user */
    if (!t->bg)
        ddl_warn("metrics in %s/%s are written by the agent's loop: no thread of their own: %m",
                 dir, t->name);
    ddl_debug("metrics every %ld s in %s/%s", every_s, dir, t->name);
    return t;
}

int metrics_wait(agent_t *a, int wait)
{
    struct telemetry *t = mx_get(a);
    if (!t || t->dfd < 0)
        return wait;
    int64_t left = t->next_ms - ddl_now_ms();
    left = left < 0 ? 0 : left;
    return wait < 0 || left < wait ? (int)left : wait;
}

/* write_file: the metrics, handed to the writer thread, or without one
 * written whole to a temporary file, then renamed over the file.  0, or -1
 * with errno (with the thread: the last write's, found now). */
static int write_file(agent_t *a, struct telemetry *t, int active)
{
    ddl_msg_t m;
    char *text = NULL, tmp[256], prefix[200];
    size_t len = 0;
    if (status_fill(a, &m) < 0)
        return -1;
    const ddl_msg_t *one = &m;
    FILE *f = open_memstream(&text, &len);
    int rc = f ? ddl_metrics_print(f, &one, 1, ddl_realtime_ms(), active) : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    status_release(&m);
    if (rc < 0) {
        free(text);
        return -1;
    }
    if (t->bg) {
        int e = ddl_bgfile_error(t->bg);
        if (ddl_bgfile_put(t->bg, text, len) < 0)
            return -1;
        errno = e;
        return e ? -1 : 0;
    }
    snprintf(prefix, sizeof prefix, ".%s", t->name);
    int fd = ddl_tmp_openat(t->dfd, prefix, tmp, sizeof tmp);
    if (fd < 0) {
        free(text);
        return -1;
    }
    /* the collector runs as another user: readable by all, like its own files */
    rc = ddl_write_full(fd, text, len) < 0 || fchmod(fd, 0644) < 0 ? -1 : 0;
    free(text);
    if (close(fd) < 0)
        rc = -1;
    if (rc == 0 && renameat(t->dfd, tmp, t->dfd, t->name) < 0)
        rc = -1;
    if (rc < 0) {
        int e = errno;
        unlinkat(t->dfd, tmp, 0);
        errno = e;
    }
    return rc;
}

static void write_now(agent_t *a, struct telemetry *t, int active)
{
    if (write_file(a, t, active) == 0) {
        t->warned = 0;
        return;
    }
    if (!t->warned)
        ddl_warn("cannot write the metrics file %s: %m (trying again every %lld s)", t->name,
                 (long long)(t->every_ms / 1000));
    t->warned = 1;
}

void metrics_tick(agent_t *a)
{
    struct telemetry *t = mx_get(a);
    if (!t || t->dfd < 0 || ddl_now_ms() < t->next_ms)
        return;
    write_now(a, t, 1);
    t->next_ms = ddl_now_ms() + t->every_ms;
}

void metrics_end(agent_t *a)
{
    struct telemetry *t = a->mx;
    if (t && t->dfd >= 0) {
        write_now(a, t, 0);
        /* the last file says the step ended: worth a short wait, not a hang */
        if (t->bg && ddl_bgfile_close(t->bg, 2000) < 0)
            ddl_warn("the last metrics file %s was not written: %s", t->name,
                     errno == ETIMEDOUT ? "the file system did not answer within 2 s"
                                        : strerror(errno));
        close(t->dfd);
    }
    free(t);
    a->mx = NULL;
    free(a->prog);
    a->prog = NULL;
    ddl_strag_free(a->strag);
    a->strag = NULL;
}
