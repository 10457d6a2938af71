# plugins/: spank_ddl.so, the Slurm SPANK plugin (built when configure finds
# slurm/spank.h).  It links ddl's configuration reader (common/conf.c) and
# helpers (common/util.c) directly, not libddlcommon, so that it depends on
# Slurm and libconfuse only; the version script keeps those symbols local.
# Installed into $(spankdir) (default $(libdir)/slurm, Slurm's plugin
# directory on Debian; `make install spankdir=DIR` to change).
spankdir = $(libdir)/slurm
if HAVE_SLURM
spank_LTLIBRARIES = plugins/spank_ddl.la
plugins_spank_ddl_la_SOURCES = plugins/spank_ddl.c plugins/spank_opts.c plugins/spank_opts.h \
                               common/conf.c common/conf.h common/util.c common/util.h
plugins_spank_ddl_la_CPPFLAGS = $(AM_CPPFLAGS) $(SLURM_CPPFLAGS)
plugins_spank_ddl_la_CFLAGS = $(AM_CFLAGS) $(CONFUSE_CFLAGS)
plugins_spank_ddl_la_LIBADD = $(CONFUSE_LIBS)
plugins_spank_ddl_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shared \
    -Wl,--version-script=$(top_srcdir)/plugins/spank_ddl.lds
EXTRA_plugins_spank_ddl_la_DEPENDENCIES = $(top_srcdir)/plugins/spank_ddl.lds
endif
EXTRA_DIST += plugins/spank_ddl.lds
# spank_opts.c is also compiled, without Slurm, by the fuzz target
# tests/fuzz/fuzz_args.c: distributed even when the plugin is not built.
EXTRA_DIST += plugins/spank_opts.c plugins/spank_opts.h
