/* world.c: the world map of a step's generation (world.h): which slots
 * hold which ranks, the next world after a node loss (a spare in its place,
 * or a smaller world), and the check of a map another agent sent. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "world.h"

#define IDLE DDL_NODE_IDLE

int ddl_world_init(ddl_world_t *w, uint32_t size, uint32_t nnodes, int map, uint32_t spares,
                   uint32_t min_nodes, char *why, size_t len)
{
    memset(w, 0, sizeof *w);
    w->size = size;
    w->nnodes = nnodes ? nnodes : 1;
    w->world = size;
    if (!map)
        return 0;
    uint32_t nn = w->nnodes;
    w->tpn = size / nn;
    if (size % nn || spares >= nn || min_nodes > nn - spares) {
        snprintf(why, len, "--ddl-spares=%u --ddl-min-nodes=%u: a step of %u tasks on %u nodes %s",
                 spares, min_nodes, size, nn,
                 size % nn      ? "needs the same number of tasks on every node"
                 : spares >= nn ? "leaves no node to train on"
                                : "has too few nodes");
        errno = EINVAL;
        return -1;
    }
    w->node_rank = calloc(nn, sizeof *w->node_rank);
    w->slot_of_rank = calloc(size ? size : 1, sizeof *w->slot_of_rank);
    if (!w->node_rank || !w->slot_of_rank) {
        ddl_world_free(w);
        snprintf(why, len, "out of memory");
        errno = ENOMEM;
        return -1;
    }
    for (uint32_t i = 0; i < nn; i++)
        w->node_rank[i] = i < nn - spares ? i : IDLE;
    ddl_world_remap(w);
    return 0;
}

void ddl_world_free(ddl_world_t *w)
{
    free(w->node_rank);
    free(w->slot_of_rank);
    w->node_rank = w->slot_of_rank = NULL;
}

void ddl_world_remap(ddl_world_t *w)
{
    if (!w->node_rank) {
        w->world = w->size;
        return;
    }
    w->world = 0;
    for (uint32_t n = 0; n < w->nnodes; n++) {
        if (w->node_rank[n] == IDLE)
            continue;
        for (uint32_t j = 0; j < w->tpn; j++)
            w->slot_of_rank[w->node_rank[n] * w->tpn + j] = n * w->tpn + j;
        w->world += w->tpn;
    }
}

uint32_t ddl_world_slot(const ddl_world_t *w, uint32_t r)
{
    return w->node_rank ? w->slot_of_rank[r] : r;
}

int64_t ddl_world_rank(const ddl_world_t *w, int64_t s)
{
    if (!w->node_rank || s < 0)
        return s;
    uint32_t pos = w->node_rank[(uint32_t)s / w->tpn];
    return pos == IDLE ? -1 : (int64_t)pos * w->tpn + (uint32_t)s % w->tpn;
}

/* map_copy: a malloc'd copy of w's map (NULL: ENOMEM). */
static uint32_t *map_copy(const ddl_world_t *w)
{
    uint32_t *map = malloc(w->nnodes * sizeof *map);
    if (map)
        memcpy(map, w->node_rank, w->nnodes * sizeof *map);
    return map;
}

uint32_t *ddl_world_replace(const ddl_world_t *w, const uint8_t *lost, const uint8_t *usable,
                            uint32_t min_nodes, uint32_t *spare_of, uint32_t *shrunk)
{
    uint32_t nn = w->nnodes;
    *shrunk = 0;
    if (!w->node_rank)
        return NULL;
    uint32_t *map = map_copy(w);
    if (!map)
        return NULL;
    int dropped = 0;
    for (uint32_t l = 0; l < nn; l++) {
        spare_of[l] = IDLE;
        if (!lost[l] || map[l] == IDLE)
            continue;
        for (uint32_t n = 0; n < nn && spare_of[l] == IDLE; n++)
            if (map[n] == IDLE && !lost[n] && usable[n])
                spare_of[l] = n;
        if (spare_of[l] != IDLE)
            map[spare_of[l]] = map[l];
        else
            dropped = 1;
        map[l] = IDLE;
    }
    if (!dropped)
        return map;
    uint32_t active = 0;
    for (uint32_t n = 0; n < nn; n++)
        active += map[n] != IDLE;
    if (!min_nodes || active < min_nodes || active == 0) {
        free(map);
        return NULL;
    }
    /* keep the order of the survivors: ranks move down past the gaps */
    uint32_t next = 0;
    const uint32_t *old = w->node_rank;
    for (uint32_t pos = 0; pos < nn; pos++)
        for (uint32_t n = 0; n < nn; n++)
            if (map[n] != IDLE && old[n] == pos)
                map[n] = next++;
    for (uint32_t n = 0; n < nn; n++) /* spares placed above: after the survivors */
        if (map[n] != IDLE && old[n] == IDLE)
            map[n] = next++;
    *shrunk = active;
    return map;
}

uint32_t *ddl_world_grow(const ddl_world_t *w, const uint8_t *usable, uint32_t full,
                         uint32_t *added)
{
    uint32_t nn = w->nnodes, active = 0;
    *added = 0;
    if (!w->node_rank)
        return NULL;
    uint32_t *map = map_copy(w);
    if (!map)
        return NULL;
    for (uint32_t n = 0; n < nn; n++)
        active += map[n] != IDLE;
    for (uint32_t n = 0; n < nn && active < full; n++)
        if (map[n] == IDLE && usable[n]) {
            map[n] = active++;
            ++*added;
        }
    return map;
}

int ddl_world_majority(const uint8_t *member, const uint8_t *present, uint32_t nnodes,
                       uint32_t *left, uint32_t *base)
{
    uint32_t b = 0, l = 0, lowest = nnodes;
    for (uint32_t n = 0; n < nnodes; n++) {
        if (member[n] && lowest == nnodes)
            lowest = n;
        b += member[n] != 0;
        l += member[n] && present[n];
    }
    if (left)
        *left = l;
    if (base)
        *base = b;
    return 2 * l > b || (2 * l == b && lowest < nnodes && present[lowest]);
}

int ddl_world_check(const ddl_world_t *w, const uint32_t *map, uint32_t n, char *why,
                    size_t len)
{
    uint32_t nn = w->nnodes, active = 0;
    if (!w->node_rank || n != nn || !map) {
        snprintf(why, len, "a world map of %u nodes (this step: %u, %s)", n, nn,
                 w->node_rank ? "with a map" : "without a map");
        return -1;
    }
    uint8_t *used = calloc(nn, 1);
    if (!used) {
        snprintf(why, len, "out of memory");
        return -1;
    }
    int rc = 0;
    for (uint32_t i = 0; i < nn && !rc; i++) {
        uint32_t pos = map[i];
        if (pos == IDLE)
            continue;
        if (pos >= nn || used[pos]) {
            snprintf(why, len, "node %u at position %u (%s)", i, pos,
                     pos >= nn ? "out of range" : "twice");
            rc = -1;
        } else {
            used[pos] = 1;
            active++;
        }
    }
    for (uint32_t pos = 0; pos < active && !rc; pos++)
        if (!used[pos]) {
            snprintf(why, len, "no node at position %u of %u", pos, active);
            rc = -1;
        }
    if (!rc && !active) {
        snprintf(why, len, "a world without nodes");
        rc = -1;
    }
    free(used);
    return rc;
}
