# etc/: installed configuration files and the pkg-config file.
pkgconfig_DATA = etc/ddl.pc
EXTRA_DIST += etc/README.md

# The administrator's files of the Slurm plugin, installed as examples (never
# over a live configuration): ddl.conf with every key and its default, and
# the plugstack line with the plugin's installed path.
ddlexampledir = $(sysconfdir)/slurm
ddlexample_DATA = etc/ddl.conf.example etc/plugstack-ddl.conf.example
etc/ddl.conf.example: $(top_srcdir)/etc/ddl.conf
	$(AM_V_GEN)$(MKDIR_P) etc && cp $(top_srcdir)/etc/ddl.conf $@
etc/plugstack-ddl.conf.example: $(top_srcdir)/etc/plugstack.conf.d/ddl.conf.in Makefile
	$(AM_V_GEN)$(MKDIR_P) etc && sed -e 's|@spankdir[@]|$(spankdir)|g' \
	    $(top_srcdir)/etc/plugstack.conf.d/ddl.conf.in >$@
CLEANFILES += etc/ddl.conf.example etc/plugstack-ddl.conf.example
EXTRA_DIST += etc/ddl.conf etc/plugstack.conf.d/ddl.conf.in
