# common/: internals shared by every component (no dependency on the others),
# in two convenience libraries split by what they need beyond libc:
#
# libddlcommon.la: the logger, helpers, wire protocol, Unix sockets, the
#   JSON string writer, the heartbeat channel, the event loop of the agent,
#   ddlrun and ddl-launch (evloop.c) and the shared limits
#   (ddl_limits.h).  Needs nothing but libc; libddl is linked with it, so the
#   library training programs load needs neither hwloc nor libconfuse
#   (tests/integration/t0023-deps.t checks libddl.so).
# libddlnode.la: the node's topology (hwloc) and the administrator's
#   configuration (libconfuse), for ddl-agent, ddlrun, ddl-launch and tests.
#   It uses libddlcommon: link both, libddlnode first.
noinst_LTLIBRARIES += common/libddlcommon.la common/libddlnode.la
common_libddlcommon_la_SOURCES = \
    common/log.c common/log.h \
    common/util.c common/util.h \
    common/safefile.c common/safefile.h \
    common/bgfile.c common/bgfile.h \
    common/proto.c common/proto.h common/failure.c common/failure.h \
    common/sock.c common/sock.h \
    common/beat.c common/beat.h \
    common/agent_args.c common/agent_args.h \
    common/env.c common/env.h common/ddl_env.def \
    common/rank_env.c common/rank_env.h \
    common/evloop.c common/evloop.h \
    common/ddl_limits.h
common_libddlnode_la_SOURCES = \
    common/topo.c common/topo.h \
    common/conf.c common/conf.h
common_libddlnode_la_CFLAGS = $(AM_CFLAGS) $(HWLOC_CFLAGS) $(CONFUSE_CFLAGS)
common_libddlnode_la_LIBADD = $(HWLOC_LIBS) $(CONFUSE_LIBS)
EXTRA_DIST += common/README.md
