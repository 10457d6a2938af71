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

static void print_step(const ddl_msg_t *m, const char *path, int json, int first)
{
    const typeof(m->u.status) *s = &m->u.status;
    if (json) {
        printf("%s{\"step\": ", first ? "" : ",\n ");
        ddl_json_str(s->step);
        printf(", \"socket\": ");
        ddl_json_str(path);
        printf(", \"agent_pid\": %d, \"size\": %u, \"generation\": %u, \"ranks\": [", s->agent_pid,
               s->size, s->gen);
        for (uint32_t i = 0; i < s->nranks; i++) {
            const ddl_rank_info_t *r = &s->ranks[i];
            printf("%s{\"rank\": %u, \"state\": \"%s\", \"pid\": %d, \"worker_pid\": %d",
                   i ? ", " : "", r->rank, ddl_rank_state_str(r->state), r->pid, r->wpid);
            if (r->state == DDL_RANK_EXITED || r->state == DDL_RANK_FAILED)
                printf(", \"exit_code\": %d", ddl_wait_status_code(r->wstatus));
            printf("}");
        }
        printf("]}");
        return;
    }
    printf("step %s: %u ranks, generation %u, agent pid %d (%s)\n", s->step, s->size, s->gen,
           s->agent_pid, path);
    printf("  %-6s %-9s %-8s %-8s %s\n", "RANK", "STATE", "PID", "WORKER", "EXIT");
    for (uint32_t i = 0; i < s->nranks; i++) {
        const ddl_rank_info_t *r = &s->ranks[i];
        char exit_text[96] = "-";
        if (r->state == DDL_RANK_EXITED || r->state == DDL_RANK_FAILED)
            ddl_describe_wait_status(r->wstatus, exit_text, sizeof exit_text);
        printf("  %-6u %-9s %-8d %-8d %s\n", r->rank, ddl_rank_state_str(r->state), r->pid,
               r->wpid, exit_text);
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
