# agent/: ddl-agent, the per-node, per-step daemon and its status client.
bin_PROGRAMS += agent/ddl-agent
agent_ddl_agent_SOURCES = agent/main.c agent/agent.c agent/agent.h agent/status.c \
                          agent/topo_cmd.c agent/topo_cmd.h \
                          agent/config_cmd.c agent/config_cmd.h
agent_ddl_agent_LDADD = common/libddlnode.la common/libddlcommon.la
EXTRA_DIST += agent/README.md
