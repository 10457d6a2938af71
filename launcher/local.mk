# launcher/: ddlrun (standalone launcher) and ddl-launch (per-rank supervisor).
bin_PROGRAMS += launcher/ddlrun
launcher_ddlrun_SOURCES = launcher/ddlrun.c launcher/ddlrun.h launcher/ddlrun_args.c
launcher_ddlrun_LDADD = common/libddlcommon.la

libexec_PROGRAMS += launcher/ddl-launch
launcher_ddl_launch_SOURCES = launcher/launch.c
launcher_ddl_launch_LDADD = common/libddlcommon.la
EXTRA_DIST += launcher/README.md
