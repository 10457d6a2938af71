# launcher/: ddlrun (standalone launcher) and ddl-launch (per-rank supervisor).
bin_PROGRAMS += launcher/ddlrun
launcher_ddlrun_SOURCES = launcher/ddlrun.c launcher/ddlrun.h launcher/ddlrun_args.c
launcher_ddlrun_LDADD = common/libddlnode.la common/libddlcommon.la

libexec_PROGRAMS += launcher/ddl-launch
launcher_ddl_launch_SOURCES = launcher/launch.c launcher/slurm_boot.c launcher/slurm_boot.h \
	launcher/respawn.c launcher/respawn.h
launcher_ddl_launch_CFLAGS = $(AM_CFLAGS) $(PMIX_CFLAGS)
launcher_ddl_launch_LDADD = common/libddlnode.la common/libddlcommon.la $(PMIX_LIBS)
EXTRA_DIST += launcher/README.md
