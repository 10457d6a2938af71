/* config_cmd.h: `ddl-agent config --check FILE [--partition P]`, which
 * validates the administrator's ddl.conf and prints its effective values. */
#ifndef DDL_AGENT_CONFIG_CMD_H
#define DDL_AGENT_CONFIG_CMD_H

/* ddl_agent_config_main: run `ddl-agent config` with argv[0] == "config".
 * Returns the exit status: 0 valid (values on stdout), 1 invalid (message
 * "FILE:LINE: ..." on stderr), 2 bad usage. */
int ddl_agent_config_main(int argc, char **argv);

/* ddl_agent_config_usage: the usage line, for ddl-agent --help. */
extern const char ddl_agent_config_usage[];

#endif
