/* status.c: `ddl-agent status`, the client that asks each ddl-agent on this
 * node to describe its step and prints the answer as a table or JSON.
 * Agents are found by their sockets in the per-user runtime directories
 * (every user's when run as root; util.h).  Nothing an agent sends is
 * trusted: every string is escaped before it is printed, a directory is
 * used only if it is a real directory owned by the uid it belongs to, and a
 * socket only if it is a socket (no link) of that uid, connected to through
 * the descriptor that was checked, whose peer runs as that uid. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"
#include "log.h"
#include "metrics.h"
#include "proto.h"
#include "sock.h"

#define STATUS_TIMEOUT_MS 5000

/* Rotating buffers for esc(): one printf may show several strings. */
#define ESC_BUFS 8
#define ESC_LEN 1024

/* esc: s for a terminal: printable ASCII as it is, a backslash doubled and
 * every other byte (control characters, ESC, DEL, bytes of 0x80 and above)
 * as \xHH, cut at about ESC_LEN bytes.  Returns one of ESC_BUFS static
 * buffers (the status client is single-threaded). */
static const char *esc(const char *s)
{
    static char bufs[ESC_BUFS][ESC_LEN];
    static unsigned next;
    char *b = bufs[next++ % ESC_BUFS];
    size_t n = 0;
    for (; s && *s && n + 5 < ESC_LEN; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\\') {
            b[n++] = '\\';
            b[n++] = '\\';
        } else if (c >= 0x20 && c < 0x7f)
            b[n++] = (char)c;
        else
            n += (size_t)snprintf(b + n, ESC_LEN - n, "\\x%02x", c);
    }
    b[n] = '\0';
    return b;
}


/* fmt_age: "0.4s", "12s", "-" (never). */
static const char *fmt_age(uint32_t ms, char *buf, size_t len)
{
    if (ms == DDL_HEARD_NEVER)
        snprintf(buf, len, "-");
    else if (ms < 10000)
        snprintf(buf, len, "%.1fs", ms / 1000.0);
    else
        snprintf(buf, len, "%us", ms / 1000);
    return buf;
}

static void json_age(const char *name, uint32_t ms)
{
    if (ms == DDL_HEARD_NEVER)
        printf(", \"%s\": null", name);
    else
        printf(", \"%s\": %u", name, ms);
}

static void json_field(const char *name, const char *value)
{
    printf(", \"%s\": ", name);
    if (value && *value)
        ddl_json_str(stdout, value);
    else
        printf("null");
}

/* The JSON schema is documented in docs/user-guide.md ("ddl-agent status"). */
static void print_json(const ddl_msg_t *m, const char *path, int first)
{
    const typeof(m->u.status) *s = &m->u.status;
    printf("%s{\"step\": ", first ? "" : ",\n ");
    ddl_json_str(stdout, s->step);
    json_field("host", s->host);
    printf(", \"node_id\": %u, \"nnodes\": %u, \"leader\": %s", s->node_id, s->nnodes,
           s->leader ? "true" : "false");
    json_field("socket", path);
    printf(", \"agent_pid\": %d, \"size\": %u, \"generation\": %u, \"ranks\": [", s->agent_pid,
           s->size, s->gen);
    for (uint32_t i = 0; i < s->nranks; i++) {
        const ddl_rank_info_t *r = &s->ranks[i];
        printf("%s{\"rank\": %u, \"state\": \"%s\", \"pid\": %d, \"worker_pid\": %d",
               i ? ", " : "", r->rank, ddl_rank_state_str(r->state), r->pid, r->wpid);
        json_field("cpus", r->cpus);
        json_field("gpu", r->gpu);
        json_field("nic", r->nic);
        printf(", \"restarts\": %u", r->restarts);
        json_age("heard_ms", r->heard_ms);
        if (r->state == DDL_RANK_EXITED || r->state == DDL_RANK_FAILED)
            printf(", \"exit_code\": %d", ddl_wait_status_code(r->wstatus));
        printf("}");
    }
    printf("], \"checkpoint\": ");
    if (s->ckpt_step >= 0) {
        printf("{\"dir\": ");
        ddl_json_str(stdout, s->ckpt_dir ? s->ckpt_dir : "");
        printf(", \"step\": %lld", (long long)s->ckpt_step);
        json_age("age_ms", s->ckpt_age_ms);
        printf("}");
    } else
        printf("null");
    printf(", \"last_failure\": ");
    if (s->last_failure)
        ddl_json_str(stdout, s->last_failure);
    else
        printf("null");
    printf(", \"straggler\": ");
    if (s->straggler.rank != DDL_STRAGGLER_NONE)
        printf("{\"rank\": %u, \"node_id\": %u, \"slower_pct\": %.1f, \"steps\": %u, "
               "\"compute_ms\": %.3f, \"peers_compute_ms\": %.3f}",
               s->straggler.rank, s->straggler.node_id, s->straggler.slower_pm / 10.0,
               s->straggler.steps, s->straggler.compute_us / 1000.0,
               s->straggler.peers_us / 1000.0);
    else
        printf("null");
    printf(", \"stragglers_named\": %u", s->straggler.named);
    printf(", \"peers\": [");
    for (uint32_t i = 0; i < s->npeers; i++) {
        const ddl_peer_info_t *p = &s->peers[i];
        printf("%s{\"node_id\": %u", i ? ", " : "", p->node_id);
        json_field("host", p->host);
        json_field("address", p->addr);
        printf(", \"link\": \"%s\"", ddl_peer_state_str(p->state));
        json_age("heard_ms", p->heard_ms);
        printf("}");
    }
    printf("]}");
}

static void print_step(const ddl_msg_t *m, const char *path, int json, int first)
{
    const typeof(m->u.status) *s = &m->u.status;
    char age[32];
    if (json) {
        print_json(m, path, first);
        return;
    }
    if (!first)
        printf("\n");
    printf("step %s: %u rank%s on %u node%s, generation %u\n", esc(s->step), s->size,
           s->size == 1 ? "" : "s", s->nnodes, s->nnodes == 1 ? "" : "s", s->gen);
    printf("  this node: %s (node %u%s), agent pid %d, %s\n", s->host ? esc(s->host) : "?",
           s->node_id, s->leader && s->nnodes > 1 ? ", leader" : "", s->agent_pid, esc(path));
    if (s->ckpt_step >= 0)
        printf("  checkpoint: step %lld, committed %s ago, in %s\n", (long long)s->ckpt_step,
               fmt_age(s->ckpt_age_ms, age, sizeof age), esc(s->ckpt_dir));
    else if (s->ckpt_dir && *s->ckpt_dir)
        printf("  checkpoint: none committed yet in %s\n", esc(s->ckpt_dir));
    if (s->last_failure)
        printf("  last failure: %s\n", esc(s->last_failure));
    if (s->straggler.rank != DDL_STRAGGLER_NONE)
        printf("  straggler: rank %u on node %u, %.1f%% slower than its peers (%.2f ms of "
               "compute a step against %.2f ms) over %u steps\n",
               s->straggler.rank, s->straggler.node_id, s->straggler.slower_pm / 10.0,
               s->straggler.compute_us / 1000.0, s->straggler.peers_us / 1000.0,
               s->straggler.steps);
    else if (s->straggler.named)
        printf("  straggler: none now (%u named before)\n", s->straggler.named);
    printf("  %-5s %-8s %-8s %-8s %-12s %-13s %-8s %-4s %-6s %s\n", "RANK", "STATE", "PID",
           "WORKER", "CPUS", "GPU", "NIC", "RST", "HEARD", "EXIT");
    for (uint32_t i = 0; i < s->nranks; i++) {
        const ddl_rank_info_t *r = &s->ranks[i];
        char exit_text[96] = "-";
        if (r->state == DDL_RANK_EXITED || r->state == DDL_RANK_FAILED)
            ddl_describe_wait_status(r->wstatus, exit_text, sizeof exit_text);
        printf("  %-5u %-8s %-8d %-8d %-12s %-13s %-8s %-4u %-6s %s\n", r->rank,
               ddl_rank_state_str(r->state), r->pid, r->wpid, r->cpus[0] ? esc(r->cpus) : "-",
               r->gpu[0] ? esc(r->gpu) : "-", r->nic[0] ? esc(r->nic) : "-", r->restarts,
               fmt_age(r->heard_ms, age, sizeof age), exit_text);
    }
    if (s->npeers == 0)
        return;
    printf("  %-5s %-12s %-21s %-6s %s\n", "NODE", "HOST", "ADDRESS", "LINK", "HEARD");
    for (uint32_t i = 0; i < s->npeers; i++) {
        const ddl_peer_info_t *p = &s->peers[i];
        printf("  %-5u %-12s %-21s %-6s %s\n", p->node_id, p->host[0] ? esc(p->host) : "?",
               p->addr[0] ? esc(p->addr) : "-", ddl_peer_state_str(p->state),
               fmt_age(p->heard_ms, age, sizeof age));
    }
}

/* An agent's socket: its path, and for a discovered one the O_PATH
 * descriptor that was checked and the uid the agent must run as. */
typedef struct {
    char *path;
    int pfd;   /* -1: given with --socket, connect by path */
    uid_t uid;
} sock_t;

/* The answers kept for --prometheus, printed together at the end. */
typedef struct {
    ddl_msg_t **list;
    size_t n;
} kept_t;

/* query: 0 printed (or, with keep, kept), -1 failed (message logged). */
static int query(const sock_t *so, int json, int first, kept_t *keep)
{
    ddl_error_t err;
    ddl_msg_t m;
    char via[64];
    const char *path = so->path;
    /* through the checked descriptor: a link put in its place later is
     * not followed */
    if (so->pfd >= 0)
        snprintf(via, sizeof via, "/proc/self/fd/%d", so->pfd);
    int fd = ddl_sock_connect(so->pfd >= 0 ? via : path, 0, &err);
    if (fd < 0) {
        ddl_error("cannot connect to %s: %s", esc(path), esc(err.text));
        return -1;
    }
    uid_t peer;
    if (so->pfd >= 0 && (ddl_sock_peer(fd, NULL, &peer, NULL) < 0 || peer != so->uid)) {
        ddl_error("the agent at %s does not run as uid %u, the owner of its directory: "
                  "ignored", esc(path), (unsigned)so->uid);
        close(fd);
        return -1;
    }
    ddl_msg_t req = {.type = DDL_MSG_STATUS_REQ};
    /* A refusing agent answers and closes at once, so the request may not
     * go through: read the answer all the same. */
    if (ddl_proto_send(fd, &req) < 0 && errno != EPIPE && errno != ECONNRESET) {
        ddl_error("cannot send to %s: %m", esc(path));
        close(fd);
        return -1;
    }
    if (ddl_proto_recv(fd, &m, STATUS_TIMEOUT_MS, &err) < 0) {
        ddl_error("no answer from the agent at %s: %s", esc(path), esc(err.text));
        close(fd);
        return -1;
    }
    close(fd);
    int rc = 0;
    ddl_msg_t *copy = NULL, **nl = NULL;
    if (m.type == DDL_MSG_STATUS && keep) {
        if (!(copy = malloc(sizeof *copy)) ||
            !(nl = realloc(keep->list, (keep->n + 1) * sizeof *nl))) {
            free(copy);
            ddl_error("out of memory");
            ddl_msg_clear(&m);
            return -1;
        }
        *copy = m; /* the answer's allocations go with it */
        keep->list = nl;
        keep->list[keep->n++] = copy;
        return 0;
    }
    if (m.type == DDL_MSG_STATUS)
        print_step(&m, path, json, first);
    else if (m.type == DDL_MSG_ERROR) {
        ddl_error("agent at %s refused: %s", esc(path), esc(m.u.error.text));
        rc = -1;
    } else {
        ddl_error("agent at %s answered with an unexpected %s message", esc(path),
                  ddl_msg_type_str(m.type));
        rc = -1;
    }
    ddl_msg_clear(&m);
    return rc;
}

typedef struct {
    sock_t *list;
    size_t n;
} socks_t;

/* collect: append the *.sock sockets of dir (a private directory of owner,
 * checked again through its descriptor) that owner owns and that are no
 * links. */
static void collect(void *ctx, const char *dir, uid_t owner)
{
    socks_t *ss = ctx;
    struct stat st;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return;
    if (fstat(dfd, &st) < 0 || st.st_uid != owner || (st.st_mode & 0077)) {
        close(dfd);
        return;
    }
    int lfd = dup(dfd);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    struct dirent *e;
    if (!d && lfd >= 0)
        close(lfd);
    while (d && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".sock") != 0)
            continue;
        int pfd = openat(dfd, e->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (pfd < 0)
            continue;
        sock_t *nl = NULL;
        if (fstat(pfd, &st) < 0 || !S_ISSOCK(st.st_mode) || st.st_uid != owner ||
            !(nl = realloc(ss->list, (ss->n + 1) * sizeof *nl))) {
            close(pfd);
            continue;
        }
        ss->list = nl;
        if (asprintf(&nl[ss->n].path, "%s/%s", dir, e->d_name) < 0) {
            close(pfd);
            continue;
        }
        nl[ss->n].pfd = pfd;
        nl[ss->n].uid = owner;
        ss->n++;
    }
    if (d)
        closedir(d);
    close(dfd);
}

static int cmp_sock(const void *a, const void *b)
{
    return strcmp(((const sock_t *)a)->path, ((const sock_t *)b)->path);
}

int ddl_agent_status(const char *path, int format)
{
    socks_t ss = {NULL, 0};
    kept_t kept = {NULL, 0};
    int failed = 0, json = format == DDL_STATUS_JSON, prom = format == DDL_STATUS_PROMETHEUS;

    if (path) {
        ss.list = malloc(sizeof *ss.list);
        if (!ss.list || !(ss.list[0].path = strdup(path))) {
            free(ss.list);
            ddl_error("out of memory");
            return 1;
        }
        ss.list[0].pfd = -1;
        ss.n = 1;
    } else {
        /* root sees every user's steps */
        ddl_runtime_dirs(getuid() == 0 ? (uid_t)-1 : getuid(), collect, &ss);
    }
    if (ss.n > 1)
        qsort(ss.list, ss.n, sizeof *ss.list, cmp_sock);
    if (json)
        printf("[");
    else if (ss.n == 0 && !prom)
        printf("no ddl steps are running on this node\n");
    int printed = 0;
    for (size_t i = 0; i < ss.n; i++) {
        if (query(&ss.list[i], json, printed == 0, prom ? &kept : NULL) < 0)
            failed = 1;
        else
            printed++;
        free(ss.list[i].path);
        if (ss.list[i].pfd >= 0)
            close(ss.list[i].pfd);
    }
    free(ss.list);
    if (json)
        printf("]\n");
    /* no agent: no samples, only the families (an empty exposition is valid) */
    if (prom && ddl_metrics_print(stdout, (const ddl_msg_t *const *)kept.list, kept.n,
                                  ddl_realtime_ms(), 1) < 0) {
        ddl_error("cannot write the metrics: %m");
        failed = 1;
    }
    for (size_t i = 0; i < kept.n; i++) {
        ddl_msg_clear(kept.list[i]);
        free(kept.list[i]);
    }
    free(kept.list);
    fflush(stdout);
    return failed ? 1 : 0;
}
