/* t_world: the agents' world map (agent/world.c): block order, a spare in a
 * lost node's place, shrinking in order, min_nodes, growing back onto
 * nodes that came back, and the check of a map another agent sent. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "world.h"
#include "../tap.h"

#define I DDL_NODE_IDLE

static void test_init(void)
{
    ddl_world_t w;
    char why[200];
    ok(ddl_world_init(&w, 8, 2, 0, 0, 0, why, sizeof why) == 0 && !w.node_rank && w.world == 8,
       "no map: the world is every task");
    is(ddl_world_slot(&w, 5), 5, "no map: rank = slot");
    is(ddl_world_rank(&w, 7), 7, "no map: slot = rank");
    ddl_world_free(&w);
    ok(ddl_world_init(&w, 8, 4, 1, 1, 0, why, sizeof why) == 0 && w.tpn == 2 && w.world == 6,
       "4 nodes of 2 tasks, 1 spare: a world of 6");
    ok(w.node_rank[3] == I && ddl_world_rank(&w, 6) == -1 && ddl_world_rank(&w, 5) == 5,
       "the spare's slots hold no rank");
    ddl_world_free(&w);
    ok(ddl_world_init(&w, 7, 2, 1, 0, 1, why, sizeof why) == -1 && strstr(why, "same number"),
       "uneven tasks per node refused (%s)", why);
    ok(ddl_world_init(&w, 4, 2, 1, 2, 0, why, sizeof why) == -1 && strstr(why, "no node"),
       "as many spares as nodes refused (%s)", why);
    ok(ddl_world_init(&w, 6, 3, 1, 1, 3, why, sizeof why) == -1 && strstr(why, "too few"),
       "min-nodes above the non-spare nodes refused (%s)", why);
}

static void test_replace(void)
{
    ddl_world_t w;
    char why[200];
    uint32_t spare_of[4], shrunk;
    uint8_t lost[4] = {0}, usable[4] = {1, 1, 1, 1};
    ddl_world_init(&w, 8, 4, 1, 1, 0, why, sizeof why);
    lost[1] = 1;
    uint32_t *map = ddl_world_replace(&w, lost, usable, 0, spare_of, &shrunk);
    ok(map && map[0] == 0 && map[1] == I && map[2] == 2 && map[3] == 1 && !shrunk,
       "node 1 lost: spare node 3 takes position 1");
    is(spare_of[1], 3, "... and says so");
    memcpy(w.node_rank, map, sizeof spare_of);
    free(map);
    ddl_world_remap(&w);
    is(ddl_world_slot(&w, 2), 6, "rank 2 now runs in slot 6 (node 3)");
    is(ddl_world_rank(&w, 3), -1, "the lost node's slots hold no rank");
    lost[0] = 1;
    map = ddl_world_replace(&w, lost, usable, 0, spare_of, &shrunk);
    ok(!map, "node 0 lost too, no spare, no min-nodes: no world");
    map = ddl_world_replace(&w, lost, usable, 2, spare_of, &shrunk);
    ok(map && shrunk == 2 && map[0] == I && map[1] == I && map[2] == 1 && map[3] == 0,
       "with min-nodes 2 the world shrinks; survivors keep their order (node 3 at 0, node 2 at 1)");
    free(map);
    map = ddl_world_replace(&w, lost, usable, 3, spare_of, &shrunk);
    ok(!map, "with min-nodes 3 it cannot");
    ddl_world_free(&w);

    ddl_world_init(&w, 4, 4, 1, 1, 0, why, sizeof why);
    memset(lost, 0, sizeof lost);
    lost[2] = 1;
    usable[3] = 0; /* the spare's agent is not linked */
    map = ddl_world_replace(&w, lost, usable, 0, spare_of, &shrunk);
    ok(!map, "a spare that is not usable does not replace anything");
    map = ddl_world_replace(&w, lost, usable, 1, spare_of, &shrunk);
    ok(map && shrunk == 2 && map[0] == 0 && map[1] == 1 && map[2] == I && map[3] == I,
       "... so the world shrinks to the two survivors");
    free(map);
    ddl_world_free(&w);
}

static void test_check(void)
{
    ddl_world_t w;
    char why[200];
    ddl_world_init(&w, 6, 3, 1, 1, 0, why, sizeof why);
    uint32_t good[3] = {1, I, 0}, far[3] = {0x40000000u, 0, I}, twice[3] = {0, 0, I},
             gap[3] = {0, 2, I}, none[3] = {I, I, I};
    ok(ddl_world_check(&w, good, 3, why, sizeof why) == 0, "a permutation with a spare is fine");
    ok(ddl_world_check(&w, far, 3, why, sizeof why) == -1 && strstr(why, "out of range"),
       "a position of 2^30 is refused (%s)", why);
    ok(ddl_world_check(&w, twice, 3, why, sizeof why) == -1 && strstr(why, "twice"),
       "a position twice is refused (%s)", why);
    ok(ddl_world_check(&w, gap, 3, why, sizeof why) == -1 && strstr(why, "no node at position 1"),
       "a gap is refused (%s)", why);
    ok(ddl_world_check(&w, none, 3, why, sizeof why) == -1, "an empty world is refused");
    ok(ddl_world_check(&w, good, 2, why, sizeof why) == -1, "a map of another size is refused");
    ddl_world_free(&w);
    ddl_world_init(&w, 6, 3, 0, 0, 0, why, sizeof why);
    ok(ddl_world_check(&w, good, 3, why, sizeof why) == -1, "a map for a step without one is refused");
}

static void test_grow(void)
{
    ddl_world_t w;
    char why[200];
    uint32_t added;
    /* 4 nodes, min 2: node 1 was lost and the world shrank to 0, 2, 3 */
    ddl_world_init(&w, 8, 4, 1, 0, 2, why, sizeof why);
    uint32_t shrunk[4] = {0, I, 1, 2};
    memcpy(w.node_rank, shrunk, sizeof shrunk);
    ddl_world_remap(&w);
    uint8_t none[4] = {0, 0, 0, 0}, back[4] = {0, 1, 0, 0};
    uint32_t *map = ddl_world_grow(&w, none, 4, &added);
    ok(map && added == 0 && !memcmp(map, shrunk, sizeof shrunk),
       "no node to grow onto: the same map, none added");
    free(map);
    map = ddl_world_grow(&w, back, 4, &added);
    ok(map && added == 1 && map[0] == 0 && map[1] == 3 && map[2] == 1 && map[3] == 2,
       "node 1 back: it takes the position after the others (3), they keep theirs");
    ok(map && ddl_world_check(&w, map, 4, why, sizeof why) == 0, "... a world the check accepts");
    free(map);
    ddl_world_free(&w);
    /* 4 nodes, 1 spare, min 1: two lost, world shrank to node 0 alone; both back */
    ddl_world_init(&w, 4, 4, 1, 1, 1, why, sizeof why);
    uint32_t one[4] = {0, I, I, I};
    memcpy(w.node_rank, one, sizeof one);
    ddl_world_remap(&w);
    uint8_t all[4] = {0, 1, 1, 1};
    map = ddl_world_grow(&w, all, 3, &added);
    ok(map && added == 2 && map[1] == 1 && map[2] == 2 && map[3] == I,
       "grows up to the first size (3 nodes): the lowest idle nodes first, one stays a spare");
    free(map);
    ddl_world_free(&w);
    ddl_world_init(&w, 4, 2, 0, 0, 0, why, sizeof why);
    ok(ddl_world_grow(&w, all, 2, &added) == NULL && added == 0, "no map: nothing to grow");
    ddl_world_free(&w);
}

/* the majority rule: a partition leaves one side at most with a world */
static void test_majority(void)
{
    uint8_t all[4] = {1, 1, 1, 1}, m3[4] = {1, 1, 1, 0}, two[2] = {1, 1};
    uint32_t left, base;
    uint8_t p[4] = {1, 1, 0, 0}, q[4] = {0, 0, 1, 1};
    ok(ddl_world_majority(all, p, 4, &left, &base) == 1 && left == 2 && base == 4,
       "4 nodes split 2|2: the half with node 0 goes on");
    ok(ddl_world_majority(all, q, 4, &left, &base) == 0 && left == 2,
       "... the half without it does not");
    uint8_t r[4] = {0, 1, 1, 1}, s[4] = {1, 0, 0, 0};
    ok(ddl_world_majority(all, r, 4, NULL, NULL) == 1, "3 of 4 (node 0 lost): a majority");
    ok(ddl_world_majority(all, s, 4, NULL, NULL) == 0, "1 of 4, even node 0: not");
    uint8_t t[4] = {1, 0, 1, 1};
    ok(ddl_world_majority(m3, t, 4, &left, &base) == 1 && left == 2 && base == 3,
       "members 0-2 (node 3 left before): 0 and 2 present, 3 not a member: 2 of 3");
    uint8_t u[4] = {0, 0, 1, 1};
    ok(ddl_world_majority(m3, u, 4, &left, &base) == 0 && left == 1,
       "... 2 and 3 present: node 3 does not count, 1 of 3");
    uint8_t a0[2] = {1, 0}, a1[2] = {0, 1};
    ok(ddl_world_majority(two, a0, 2, NULL, NULL) == 1, "2 nodes, node 1 lost: node 0 goes on");
    ok(ddl_world_majority(two, a1, 2, NULL, NULL) == 0, "2 nodes, node 0 lost: node 1 stops");
    uint8_t one[1] = {1};
    ok(ddl_world_majority(one, one, 1, NULL, NULL) == 1, "one node, present: goes on");
    uint8_t none[4] = {0, 0, 0, 0};
    ok(ddl_world_majority(none, all, 4, &left, &base) == 0 && base == 0, "no members: no majority");
}

int main(void)
{
    plan(NO_PLAN);
    test_init();
    test_replace();
    test_check();
    test_grow();
    test_majority();
    return done_testing();
}
