/* t_links.c: when the leader agent counts a silent link as lost
 * (agent/links.c check_silence), on real sockets with made-up times.
 *
 * A link silent past its learned allowance is lost, unless bytes wait
 * unread on its socket while it is still within the node timeout (this
 * agent was late, not the link); past the node timeout, or on a link being
 * closed, waiting bytes do not save it.  Under DDL_DETECTOR=auto a step
 * that cannot recover from a lost node allows the whole node timeout.
 * links.c's calls into the rest of the agent are recorded by the stubs
 * below, so that a loss is seen as the leader's failure report and the
 * link's drop.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent_int.h"
#include "../tap.h"
#include "util.h"

/* ---- the rest of the agent, as links.c sees it ---- */
static int nfailures, ndropped;
static failure_t last_failure;

void leader_failure(agent_t *a, const failure_t *f)
{
    (void)a;
    nfailures++;
    last_failure = *f;
}

void conn_drop(agent_t *a, size_t i)
{
    conn_t *c = a->conns[i];
    ndropped++;
    a->conns[i] = a->conns[--a->nconns];
    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

void ag_fail(agent_t *a, int code, const char *why)
{
    (void)a, (void)code, (void)why;
}

int ckpt_latest(const char *dir, int64_t *step, uint32_t *age_ms)
{
    (void)dir, (void)step, (void)age_ms;
    return -1;
}

int conn_add(agent_t *a, conn_t *c)
{
    (void)a, (void)c;
    return -1;
}

int conn_queue(conn_t *c, const ddl_msg_t *msg)
{
    (void)c, (void)msg;
    return 0;
}

int limited(void)
{
    return 1;
}

void reply_error(conn_t *c, int code, const char *text)
{
    (void)c, (void)code, (void)text;
}

void retake(agent_t *a, conn_t *c)
{
    (void)a, (void)c;
}

void stop_here(agent_t *a, const char *why)
{
    (void)a, (void)why;
}

void to_peers(agent_t *a, const ddl_msg_t *m)
{
    (void)a, (void)m;
}

int majority(const agent_t *a, char *why, size_t len)
{
    (void)a, (void)why, (void)len;
    return 1;
}

void members_now(agent_t *a)
{
    (void)a;
}

/* ---- a leader of 3 nodes, node 1 linked ---- */
#define BEAT_MS 100
#define TIMEOUT_MS 2000

static ddl_agent_opts_t opts;
static agent_t ag;
static peer_t peers[3];
static uint8_t lost[3];
static uint32_t map[3];
static int other_end = -1;

/* link: node 1's link, heard at heard_ms after 20 beats BEAT_MS apart
 * (its allowance learned: 3 beats); with a map (a spare: recoverable) or
 * without.  Its peer's end of the socket pair in other_end. */
static conn_t *link_up(int64_t heard_ms, int with_map)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        return NULL;
    conn_t *c = calloc(1, sizeof *c);
    c->a = &ag;
    c->fd = sv[0];
    other_end = sv[1];
    c->kind = CONN_PEER;
    c->node_id = 1;
    c->rank = -1;
    ddl_det_init(&c->det, opts.detector != AGENT_DET_FIXED, BEAT_MS, TIMEOUT_MS);
    for (int i = 19; i >= 0; i--)
        ddl_det_beat(&c->det, heard_ms - (int64_t)i * BEAT_MS);
    c->heard_ms = heard_ms;
    static conn_t *one[1];
    one[0] = c;
    ag.conns = one;
    ag.nconns = 1;
    ag.w.node_rank = with_map ? map : NULL;
    memset(lost, 0, sizeof lost);
    nfailures = ndropped = 0;
    return c;
}

static void link_down(void)
{
    while (ag.nconns)
        conn_drop(&ag, 0);
    if (other_end >= 0)
        close(other_end);
    other_end = -1;
}

/* silent_for: node 1's link, last heard ms ago, checked once. */
static void silent_for(int64_t ms, int with_map, int bytes_waiting, int closing)
{
    conn_t *c = link_up(ddl_now_ms() - ms, with_map);
    if (!c) {
        ok(0, "socketpair");
        return;
    }
    if (bytes_waiting)
        ok(write(other_end, "beat", 4) == 4, "... (a beat waits unread)");
    c->close_after_flush = closing;
    check_silence(&ag);
}

int main(void)
{
    opts = (ddl_agent_opts_t){.node_id = 0, .nnodes = 3, .supervise = 1,
                              .detector = AGENT_DET_AUTO, .node_timeout_ms = TIMEOUT_MS};
    ag.opts = &opts;
    ag.leader = 1;
    ag.beat_ms = BEAT_MS;
    ag.node_timeout_ms = TIMEOUT_MS;
    ag.peers = peers;
    ag.lost = lost;
    snprintf(peers[1].host, sizeof peers[1].host, "n2");
    map[0] = 0, map[1] = 1, map[2] = NO_RANK; /* node 2 a spare */
    ag.w.world = 2;

    conn_t *c = link_up(100000, 1);
    is(c ? ddl_det_deadline(&c->det, 100000) - 100000 : -1, 3 * BEAT_MS,
       "20 beats 100 ms apart: node 1's link is allowed 300 ms of silence");
    link_down();

    silent_for(100, 1, 0, 0);
    is(nfailures + ndropped, 0, "silent 0.1 s: not lost");
    link_down();

    silent_for(500, 1, 0, 0);
    is(nfailures, 1, "silent 0.5 s, a spare left: lost");
    is(ndropped, 1, "... and its link dropped");
    ok(last_failure.cls == DDL_FAIL_NODE && last_failure.node == 1 &&
             strstr(last_failure.text, "was silent for 0.5") &&
             strstr(last_failure.text, "allowed 0.30 s"),
         "... a node loss naming the silence and the allowance: %s", last_failure.text);
    link_down();

    silent_for(500, 1, 1, 0);
    is(nfailures + ndropped, 0, "silent 0.5 s with a beat waiting unread: not lost (this "
         "agent was late)");
    link_down();

    silent_for(TIMEOUT_MS + 100, 1, 1, 0);
    is(nfailures, 1, "silent past the node timeout, a beat waiting unread: lost");
    link_down();

    silent_for(500, 1, 1, 1);
    is(nfailures, 1, "silent 0.5 s, a beat waiting, the link being closed: lost");
    link_down();

    silent_for(500, 0, 0, 0);
    is(nfailures + ndropped, 0, "DDL_DETECTOR=auto, no spare and no shrinking: silent 0.5 s "
         "is not lost (the node timeout applies)");
    link_down();

    silent_for(TIMEOUT_MS + 100, 0, 0, 0);
    is(nfailures, 1, "... silent past the node timeout: lost");
    ok(strstr(last_failure.text, "allowed 2.00 s") != NULL, "... allowed the node timeout: %s",
         last_failure.text);
    link_down();

    opts.detector = AGENT_DET_ADAPTIVE;
    silent_for(500, 0, 0, 0);
    is(nfailures, 1, "DDL_DETECTOR=adaptive, no spare: silent 0.5 s is lost");
    link_down();

    opts.detector = AGENT_DET_FIXED;
    silent_for(TIMEOUT_MS - 200, 1, 0, 0);
    is(nfailures, 0, "DDL_DETECTOR=fixed, a spare left: silent 1.8 s is not lost");
    link_down();

    is(silence_due(&ag), -1, "no link: no silence timer");
    return done_testing();
}
