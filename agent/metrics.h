/* metrics.h: a step's state as Prometheus metrics (text exposition format
 * 0.0.4), from the agents' STATUS answers (proto.h): the same text for the
 * file an agent keeps up to date in DDL_METRICS_DIR (node_exporter's
 * textfile collector) and for `ddl-agent status --prometheus`.  The metric
 * names, types and labels are listed in docs/user-guide.md ("Metrics").
 *
 * Not thread-safe (callers are single-threaded); writes only to f.
 */
#ifndef DDL_AGENT_METRICS_H
#define DDL_AGENT_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "proto.h"

/* ddl_metrics_print: the metrics of n steps (n DDL_MSG_STATUS messages,
 * one per agent of this node) as one exposition on f: each family's HELP
 * and TYPE once, then its samples, labelled job, step and node.  wall_ms:
 * the wall-clock time (ddl_realtime_ms) written as
 * ddl_metrics_timestamp_seconds; active: 1 while the steps run, 0 in an
 * agent's last write (ddl_step_active).  Returns 0, or -1 with errno when
 * writing to f failed. */
int ddl_metrics_print(FILE *f, const ddl_msg_t *const *st, size_t n, int64_t wall_ms, int active);

#endif
