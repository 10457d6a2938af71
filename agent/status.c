/* status.c: `ddl-agent status`, the client that asks each ddl-agent on this
 * node to describe its step and prints the answer as a table or JSON.
 * Agents are found by their sockets in the per-user runtime directory
 * (every user's directory when run as root). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"
#include "log.h"
#include "proto.h"
#include "sock.h"

#define STATUS_TIMEOUT_MS 5000

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
    printf("step %s: %u rank%s on %u node%s, generation %u\n", s->step, s->size,
           s->size == 1 ? "" : "s", s->nnodes, s->nnodes == 1 ? "" : "s", s->gen);
    printf("  this node: %s (node %u%s), agent pid %d, %s\n", s->host ? s->host : "?",
           s->node_id, s->leader && s->nnodes > 1 ? ", leader" : "", s->agent_pid, path);
    if (s->ckpt_step >= 0)
        printf("  checkpoint: step %lld, committed %s ago, in %s\n", (long long)s->ckpt_step,
               fmt_age(s->ckpt_age_ms, age, sizeof age), s->ckpt_dir);
    else if (s->ckpt_dir && *s->ckpt_dir)
        printf("  checkpoint: none committed yet in %s\n", s->ckpt_dir);
    if (s->last_failure)
        printf("  last failure: %s\n", s->last_failure);
    printf("  %-5s %-8s %-8s %-8s %-12s %-13s %-8s %-4s %-6s %s\n", "RANK", "STATE", "PID",
           "WORKER", "CPUS", "GPU", "NIC", "RST", "HEARD", "EXIT");
    for (uint32_t i = 0; i < s->nranks; i++) {
        const ddl_rank_info_t *r = &s->ranks[i];
        char exit_text[96] = "-";
        if (r->state == DDL_RANK_EXITED || r->state == DDL_RANK_FAILED)
            ddl_describe_wait_status(r->wstatus, exit_text, sizeof exit_text);
        printf("  %-5u %-8s %-8d %-8d %-12s %-13s %-8s %-4u %-6s %s\n", r->rank,
               ddl_rank_state_str(r->state), r->pid, r->wpid, r->cpus[0] ? r->cpus : "-",
               r->gpu[0] ? r->gpu : "-", r->nic[0] ? r->nic : "-", r->restarts,
               fmt_age(r->heard_ms, age, sizeof age), exit_text);
    }
    if (s->npeers == 0)
        return;
    printf("  %-5s %-12s %-21s %-6s %s\n", "NODE", "HOST", "ADDRESS", "LINK", "HEARD");
    for (uint32_t i = 0; i < s->npeers; i++) {
        const ddl_peer_info_t *p = &s->peers[i];
        printf("  %-5u %-12s %-21s %-6s %s\n", p->node_id, p->host[0] ? p->host : "?",
               p->addr[0] ? p->addr : "-", ddl_peer_state_str(p->state),
               fmt_age(p->heard_ms, age, sizeof age));
    }
}

/* query: 0 printed, -1 failed (message logged). */
static int query(const char *path, int json, int first)
{
    ddl_error_t err;
    ddl_msg_t m;
    int fd = ddl_sock_connect(path, 0, &err);
    if (fd < 0) {
        ddl_error("%s", err.text);
        return -1;
    }
    ddl_msg_t req = {.type = DDL_MSG_STATUS_REQ};
    /* A refusing agent answers and closes at once, so the request may not
     * go through: read the answer all the same. */
    if (ddl_proto_send(fd, &req) < 0 && errno != EPIPE && errno != ECONNRESET) {
        ddl_error("cannot send to %s: %m", path);
        close(fd);
        return -1;
    }
    if (ddl_proto_recv(fd, &m, STATUS_TIMEOUT_MS, &err) < 0) {
        ddl_error("no answer from the agent at %s: %s", path, err.text);
        close(fd);
        return -1;
    }
    close(fd);
    int rc = 0;
    if (m.type == DDL_MSG_STATUS)
        print_step(&m, path, json, first);
    else if (m.type == DDL_MSG_ERROR) {
        ddl_error("agent at %s refused: %s", path, m.u.error.text);
        rc = -1;
    } else {
        ddl_error("agent at %s answered with an unexpected %s message", path,
                  ddl_msg_type_str(m.type));
        rc = -1;
    }
    ddl_msg_clear(&m);
    return rc;
}

/* collect: append the *.sock files of dir to list. */
static void collect(const char *dir, char ***list, size_t *n)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d)
        return;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".sock") != 0)
            continue;
        char **nl = realloc(*list, (*n + 1) * sizeof *nl);
        if (!nl)
            break;
        *list = nl;
        if (asprintf(&nl[*n], "%s/%s", dir, e->d_name) >= 0)
            (*n)++;
    }
    closedir(d);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int ddl_agent_status(const char *path, int json)
{
    char **list = NULL;
    size_t n = 0;
    int failed = 0;
    char dir[512];
    ddl_error_t err;

    if (path) {
        list = malloc(sizeof *list);
        if (!list || !(list[0] = strdup(path))) {
            free(list);
            ddl_error("out of memory");
            return 1;
        }
        n = 1;
    } else if (getuid() == 0) {
        /* root sees every user's steps */
        const char *base = getenv("DDL_RUNTIME_DIR");
        base = base && *base ? base : "/tmp";
        DIR *d = opendir(base);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (strncmp(e->d_name, "ddl-", 4) != 0)
                continue;
            snprintf(dir, sizeof dir, "%s/%s", base, e->d_name);
            collect(dir, &list, &n);
        }
        if (d)
            closedir(d);
    } else if (ddl_runtime_dir(getuid(), 0, dir, sizeof dir, &err) == 0) {
        collect(dir, &list, &n);
    } else if (errno != ENOENT) {
        ddl_error("%s", err.text); /* a directory that is not private: say so */
        return 1;
    }
    if (n > 1)
        qsort(list, n, sizeof *list, cmp_str);
    if (json)
        printf("[");
    else if (n == 0)
        printf("no ddl steps are running on this node\n");
    int printed = 0;
    for (size_t i = 0; i < n; i++) {
        if (query(list[i], json, printed == 0) < 0)
            failed = 1;
        else
            printed++;
        free(list[i]);
    }
    free(list);
    if (json)
        printf("]\n");
    fflush(stdout);
    return failed ? 1 : 0;
}
