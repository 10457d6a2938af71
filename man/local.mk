# man/: the manual pages, written once in roff (man(7) macros) and
# installed by `make install` under $(mandir)/man1, man3, man5, man7 and man8.
# tests/integration/t0040-man.t lints them (mandoc, groff) and compares
# their option lists with the programs'.
dist_man_MANS = man/ddlrun.1 man/ddl-agent.1 man/ddl-bench.1 man/libddl.3 man/ddl.conf.5 \
                man/spank_ddl.8 man/ddl-python.7
EXTRA_DIST += man/README.md
