# common/: internals shared by every component (no dependency on the others).
noinst_LTLIBRARIES += common/libddlcommon.la
common_libddlcommon_la_SOURCES = \
    common/log.c common/log.h \
    common/util.c common/util.h \
    common/safefile.c common/safefile.h \
    common/proto.c common/proto.h \
    common/sock.c common/sock.h \
    common/topo.c common/topo.h \
    common/conf.c common/conf.h
common_libddlcommon_la_CFLAGS = $(AM_CFLAGS) $(HWLOC_CFLAGS) $(CONFUSE_CFLAGS)
common_libddlcommon_la_LIBADD = $(HWLOC_LIBS) $(CONFUSE_LIBS)
EXTRA_DIST += common/README.md
