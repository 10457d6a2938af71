/* metrics.c: the Prometheus text exposition of agents' STATUS answers
 * (metrics.h): families in a fixed order, each with its HELP and TYPE
 * lines once, then one sample per step (and per rank, state or failure
 * kind), labelled job, step and node.  Label values are escaped as the
 * format asks (backslash, double quote, newline). */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "failure.h"
#include "metrics.h"

typedef typeof(((ddl_msg_t *)0)->u.status) status_t;

/* labels: `job="J",step="S",node="H"` for s into buf.  The step id is
 * "JOB.STEP" under Slurm, "local-PID" under ddlrun (job "local-PID",
 * step ""). */
static const char *labels(const status_t *s, char *buf, size_t len)
{
    const char *id = s->step ? s->step : "";
    const char *dot = strrchr(id, '.');
    size_t jl = dot ? (size_t)(dot - id) : strlen(id);
    const char *parts[3] = {id, dot ? dot + 1 : "", s->host ? s->host : ""};
    size_t plen[3] = {jl, strlen(parts[1]), strlen(parts[2])};
    static const char *const names[3] = {"job", "step", "node"};
    size_t n = 0;
    for (int i = 0; i < 3 && n + 16 < len; i++) {
        n += (size_t)snprintf(buf + n, len - n, "%s%s=\"", i ? "," : "", names[i]);
        for (size_t k = 0; k < plen[i] && n + 4 < len; k++) {
            char c = parts[i][k];
            if (c == '\\' || c == '"')
                buf[n++] = '\\';
            if (c == '\n') {
                buf[n++] = '\\';
                c = 'n';
            }
            buf[n++] = c;
        }
        if (n + 1 < len)
            buf[n++] = '"';
        buf[n] = '\0';
    }
    return buf;
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

int ddl_metrics_print(FILE *f, const ddl_msg_t *const *st, size_t n, int64_t wall_ms, int active)
{
    char lb[1024];
#define S (&st[i]->u.status)
#define L labels(S, lb, sizeof lb)
    family(f, "ddl_agent_info", "gauge",
           "Always 1: the agent of this node for the step, its node id and whether it leads.");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "ddl_agent_info{%s,node_id=\"%u\",leader=\"%d\"} 1\n", L, S->node_id,
                S->leader ? 1 : 0);
    family(f, "ddl_step_active", "gauge",
           "1 while the step runs, 0 in the agent's last write when it ends.");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "ddl_step_active{%s} %d\n", L, active ? 1 : 0);
    family(f, "ddl_world_ranks", "gauge", "Ranks in the step's world.");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "ddl_world_ranks{%s} %u\n", L, S->size);
    family(f, "ddl_step_nodes", "gauge", "Nodes in the step, spares included.");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "ddl_step_nodes{%s} %u\n", L, S->nnodes);
    family(f, "ddl_ranks", "gauge", "Ranks of this node by state.");
    for (size_t i = 0; i < n; i++)
        for (int state = 0; state <= DDL_RANK_STATE_MAX; state++) {
            unsigned c = 0;
            for (uint32_t r = 0; r < S->nranks; r++)
                c += S->ranks[r].state == state;
            fprintf(f, "ddl_ranks{%s,state=\"%s\"} %u\n", L, ddl_rank_state_str(state), c);
        }
    family(f, "ddl_generation", "gauge",
           "The step's generation: 0, then one more at each restart.");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "ddl_generation{%s} %u\n", L, S->gen);
    family(f, "ddl_restarts_total", "counter", "Restarts of the step after failures.");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "ddl_restarts_total{%s} %u\n", L, S->gen);
    family(f, "ddl_failures_total", "counter",
           "Failures this node's agent detected or its supervisors reported, by kind "
           "(the leader also counts the nodes it lost).");
    for (size_t i = 0; i < n; i++)
        for (int c = 1; c <= DDL_FAIL_CLASS_MAX; c++)
            fprintf(f, "ddl_failures_total{%s,kind=\"%s\"} %u\n", L, ddl_fail_class_str(c),
                    S->failures[c]);
    family(f, "ddl_checkpoint_step", "gauge",
           "Step of the newest checkpoint committed in the step's checkpoint directory.");
    for (size_t i = 0; i < n; i++)
        if (S->ckpt_step >= 0)
            fprintf(f, "ddl_checkpoint_step{%s} %lld\n", L, (long long)S->ckpt_step);
    family(f, "ddl_checkpoint_age_seconds", "gauge",
           "Seconds since that checkpoint was committed.");
    for (size_t i = 0; i < n; i++)
        if (S->ckpt_step >= 0 && S->ckpt_age_ms != DDL_HEARD_NEVER)
            fprintf(f, "ddl_checkpoint_age_seconds{%s} %.3f\n", L, S->ckpt_age_ms / 1000.0);
    family(f, "ddl_rank_step", "gauge", "The step a rank's worker last reported (ddl_heartbeat).");
    for (size_t i = 0; i < n; i++)
        for (uint32_t r = 0; r < S->nranks; r++)
            if (S->ranks[r].step >= 0)
                fprintf(f, "ddl_rank_step{%s,rank=\"%u\"} %lld\n", L, S->ranks[r].rank,
                        (long long)S->ranks[r].step);
    family(f, "ddl_rank_collectives_total", "counter",
           "Collectives a rank's current worker has started (from its heartbeats).");
    for (size_t i = 0; i < n; i++)
        for (uint32_t r = 0; r < S->nranks; r++)
            fprintf(f, "ddl_rank_collectives_total{%s,rank=\"%u\"} %llu\n", L, S->ranks[r].rank,
                    (unsigned long long)S->ranks[r].collectives);
    family(f, "ddl_rank_iterations_per_second", "gauge",
           "A rank's training steps per second over the last few seconds (from its heartbeats).");
    for (size_t i = 0; i < n; i++)
        for (uint32_t r = 0; r < S->nranks; r++)
            if (S->ranks[r].rate_milli != DDL_RATE_UNKNOWN)
                fprintf(f, "ddl_rank_iterations_per_second{%s,rank=\"%u\"} %.3f\n", L,
                        S->ranks[r].rank, S->ranks[r].rate_milli / 1000.0);
    family(f, "ddl_iterations_per_second", "gauge",
           "The slowest rank of this node: its training steps per second.");
    for (size_t i = 0; i < n; i++) {
        uint32_t low = DDL_RATE_UNKNOWN;
        for (uint32_t r = 0; r < S->nranks; r++)
            if (S->ranks[r].rate_milli < low)
                low = S->ranks[r].rate_milli;
        if (low != DDL_RATE_UNKNOWN)
            fprintf(f, "ddl_iterations_per_second{%s} %.3f\n", L, low / 1000.0);
    }
    family(f, "ddl_rank_heard_seconds", "gauge",
           "Seconds since the agent last heard from a rank's supervisor.");
    for (size_t i = 0; i < n; i++)
        for (uint32_t r = 0; r < S->nranks; r++)
            if (S->ranks[r].heard_ms != DDL_HEARD_NEVER)
                fprintf(f, "ddl_rank_heard_seconds{%s,rank=\"%u\"} %.3f\n", L, S->ranks[r].rank,
                        S->ranks[r].heard_ms / 1000.0);
    family(f, "ddl_links", "gauge",
           "Links to other nodes' agents by state (the leader's to every node, the others' "
           "to the leader).");
    for (size_t i = 0; i < n; i++)
        for (int state = DDL_PEER_UP; state <= DDL_PEER_LOST; state++) {
            unsigned c = 0;
            for (uint32_t p = 0; p < S->npeers; p++)
                c += S->peers[p].state == state;
            fprintf(f, "ddl_links{%s,state=\"%s\"} %u\n", L, ddl_peer_state_str(state), c);
        }
    family(f, "ddl_straggler_rank", "gauge",
           "The leader's straggler: the rank persistently slower than its peers, -1 none.");
    for (size_t i = 0; i < n; i++)
        if (S->leader)
            fprintf(f, "ddl_straggler_rank{%s} %lld\n", L,
                    S->straggler.rank == DDL_STRAGGLER_NONE ? -1LL
                                                            : (long long)S->straggler.rank);
    family(f, "ddl_straggler_slower_ratio", "gauge",
           "How much more compute a step the straggler takes than its peers' median "
           "(0.2: 20 % more).");
    for (size_t i = 0; i < n; i++)
        if (S->leader && S->straggler.rank != DDL_STRAGGLER_NONE)
            fprintf(f, "ddl_straggler_slower_ratio{%s,rank=\"%u\",node_id=\"%u\"} %.3f\n", L,
                    S->straggler.rank, S->straggler.node_id, S->straggler.slower_pm / 1000.0);
    family(f, "ddl_stragglers_named_total", "counter",
           "Stragglers the leader named since it started.");
    for (size_t i = 0; i < n; i++)
        if (S->leader)
            fprintf(f, "ddl_stragglers_named_total{%s} %u\n", L, S->straggler.named);
    family(f, "ddl_metrics_timestamp_seconds", "gauge",
           "Wall-clock time when these metrics were taken (Unix time).");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "ddl_metrics_timestamp_seconds{%s} %lld.%03d\n", L, (long long)(wall_ms / 1000),
                (int)(wall_ms % 1000));
#undef S
#undef L
    if (fflush(f) != 0 || ferror(f)) {
        if (!errno)
            errno = EIO;
        return -1;
    }
    return 0;
}
