/* topo_cmd.h: `ddl-agent topo`, which prints the node's devices and the
 * placement of N local ranks (see docs/topology.md). */
#ifndef DDL_AGENT_TOPO_CMD_H
#define DDL_AGENT_TOPO_CMD_H

/* ddl_agent_topo_main: run `ddl-agent topo` with argv[0] == "topo".
 * Returns the exit status: 0 printed, 1 the topology could not be read or
 * placed (message on stderr), 2 bad usage. */
int ddl_agent_topo_main(int argc, char **argv);

/* ddl_agent_topo_usage: the option summary, for ddl-agent --help. */
extern const char ddl_agent_topo_usage[];

#endif
