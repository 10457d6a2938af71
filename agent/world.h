/* world.h: which task slots hold which world ranks in a generation of a
 * step, as pure functions (no I/O, no state outside the structure).
 *
 * A step runs `size` tasks (Slurm tasks, "slots") on `nnodes` nodes.  With
 * a map (spare nodes or shrinking allowed) the tasks are whole nodes of
 * `tpn` tasks in block order (slot = node * tpn + j), and a node at world
 * position p holds world ranks p * tpn + j; a node at DDL_NODE_IDLE holds
 * none (a spare).  Without a map, world rank = slot and the world never
 * changes.  Not thread-safe; the caller owns the structure.
 */
#ifndef DDL_AGENT_WORLD_H
#define DDL_AGENT_WORLD_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h" /* DDL_NODE_IDLE */

typedef struct {
    uint32_t size;          /* tasks of the step */
    uint32_t nnodes;        /* nodes of the step */
    uint32_t tpn;           /* tasks per node (with a map) */
    uint32_t *node_rank;    /* per node: its world position, DDL_NODE_IDLE; NULL: no map */
    uint32_t *slot_of_rank; /* per world rank: its slot (with a map) */
    uint32_t world;         /* ranks in the world of this generation */
} ddl_world_t;

/* ddl_world_init: the first generation's world.  With map, the last
 * `spares` nodes are idle and every node must have the same number of
 * tasks; min_nodes is checked against the others.  0, or -1 with a reason
 * for people in why (EINVAL) or ENOMEM. */
int ddl_world_init(ddl_world_t *w, uint32_t size, uint32_t nnodes, int map, uint32_t spares,
                   uint32_t min_nodes, char *why, size_t len);

/* ddl_world_free: release what init allocated (the structure stays). */
void ddl_world_free(ddl_world_t *w);

/* ddl_world_remap: `world` and `slot_of_rank` again from `node_rank`. */
void ddl_world_remap(ddl_world_t *w);

/* ddl_world_slot: the slot that holds world rank r (< world). */
uint32_t ddl_world_slot(const ddl_world_t *w, uint32_t r);

/* ddl_world_rank: the world rank slot s holds now, -1 if none (an idle
 * node's slot, or s < 0). */
int64_t ddl_world_rank(const ddl_world_t *w, int64_t s);

/* ddl_world_replace: the next world after the nodes marked in lost[]
 * (per node, non-zero: lost) left it: each lost node's place goes to an
 * idle node with usable[n] set (lowest first), spare_of[l] saying which
 * (DDL_NODE_IDLE: none); if a place found no spare, the world shrinks when
 * min_nodes allows (min_nodes > 0 and at least that many nodes left): the
 * survivors keep their order and move down past the gaps, spares placed
 * above come after them, and *shrunk is set to the nodes left.  Returns the
 * new map (nnodes entries, malloc'd, the caller frees), or NULL (no world
 * can be formed, or no map, or ENOMEM). */
uint32_t *ddl_world_replace(const ddl_world_t *w, const uint8_t *lost, const uint8_t *usable,
                            uint32_t min_nodes, uint32_t *spare_of, uint32_t *shrunk);

/* ddl_world_grow: the next world of a world that shrank: the idle nodes
 * with usable[n] set (lowest first) take the positions after the active
 * ones, until `full` nodes are active (the first world's size).  Returns
 * the new map (nnodes entries, malloc'd, the caller frees) with *added the
 * nodes given a place (0: none could be, the map is the old one), or NULL
 * (no map, or ENOMEM). */
uint32_t *ddl_world_grow(const ddl_world_t *w, const uint8_t *usable, uint32_t full,
                         uint32_t *added);

/* ddl_world_majority: whether the nodes with present[n] set may go on as
 * the step after a loss: more than half of the members (member[n] set:
 * the step's nodes as of its last decision), or exactly half with the
 * lowest-numbered member among them.  Under a network partition that
 * cuts a step in two, each side sees the other lost; one side at most
 * passes.  *left and *base (may be NULL): the members present, all
 * members.  1 or 0; pure, no allocation. */
int ddl_world_majority(const uint8_t *member, const uint8_t *present, uint32_t nnodes,
                       uint32_t *left, uint32_t *base);

/* ddl_world_check: whether map (n entries, from another agent) is a world
 * this step can run: n == nnodes, every position distinct, below nnodes
 * and dense from 0, at least one node.  0, or -1 with the reason in why. */
int ddl_world_check(const ddl_world_t *w, const uint32_t *map, uint32_t n, char *why,
                    size_t len);

#endif
