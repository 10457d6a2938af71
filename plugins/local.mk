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
# Never built with the sanitizers (--enable-sanitizers): the plugin runs
# inside slurmd and slurmstepd, which would need the ASan runtime preloaded,
# and slurmstepd forks each task from several threads: Debian 12's ASan
# runtime does not lock its allocator across fork, and a task child was
# seen deadlocked in it before it could exec ddl-launch (the step then
# hung in its PMIx fence).  Its code is checked under the sanitizers by
# t_spank_opts, t_conf and the fuzz targets, which compile it themselves.
plugins_spank_ddl_la_CPPFLAGS = $(AM_CPPFLAGS) $(SLURM_CPPFLAGS)
plugins_spank_ddl_la_CFLAGS = $(NOSAN_CFLAGS) $(CONFUSE_CFLAGS)
plugins_spank_ddl_la_LIBADD = $(CONFUSE_LIBS)
plugins_spank_ddl_la_LDFLAGS = -module -avoid-version -shared \
    -Wl,--version-script=$(top_srcdir)/plugins/spank_ddl.lds
EXTRA_plugins_spank_ddl_la_DEPENDENCIES = $(top_srcdir)/plugins/spank_ddl.lds
endif
EXTRA_DIST += plugins/spank_ddl.lds
# spank_opts.c is also compiled, without Slurm, by the fuzz target
# tests/fuzz/fuzz_args.c: distributed even when the plugin is not built.
EXTRA_DIST += plugins/spank_opts.c plugins/spank_opts.h
