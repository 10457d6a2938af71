# agent/: ddl-agent, the per-node, per-step daemon and its status client.
bin_PROGRAMS += agent/ddl-agent
agent_ddl_agent_SOURCES = agent/main.c agent/agent.c agent/agent.h agent/status.c \
                          agent/agent_int.h agent/conn.c agent/links.c agent/exchange.c \
                          agent/recovery.c agent/revive.c agent/drain.c agent/world.c agent/world.h \
                          agent/metrics.c agent/metrics.h agent/telemetry.c \
                          agent/straggler.c agent/straggler.h agent/detector.c agent/detector.h agent/fileio.c agent/fileio.h \
                          agent/policy.c agent/policy.h agent/auth.c agent/auth.h \
                          agent/topo_cmd.c agent/topo_cmd.h \
                          agent/config_cmd.c agent/config_cmd.h
agent_ddl_agent_CFLAGS = $(AM_CFLAGS) $(HWLOC_CFLAGS) $(CRYPTO_CFLAGS) $(PTHREAD_CFLAGS)
agent_ddl_agent_LDADD = common/libddlnode.la common/libddlcommon.la $(CRYPTO_LIBS) $(PTHREAD_LIBS) -lm
EXTRA_DIST += agent/README.md
