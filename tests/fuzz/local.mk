# tests/fuzz/: libFuzzer targets (tests/fuzz/README.md), built by $(FUZZ_CC)
# (clang, found by configure) straight from the sources they test, never
# from the libtool objects that $(CC) builds; fuzz.t runs each for
# $(DDL_FUZZ_SECONDS) (default 15) under make check, or skips without clang.
FUZZ_TARGETS = tests/fuzz/fuzz_proto tests/fuzz/fuzz_conf tests/fuzz/fuzz_args \
               tests/fuzz/fuzz_ckpt
FUZZ_CFLAGS = -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -g -O1 \
              -std=gnu11 -Wall -Wextra -I$(top_builddir) -I$(top_srcdir)/common
FUZZ_COMMON_H = $(top_srcdir)/common/util.h $(top_srcdir)/common/log.h config.h
fuzz_proto_SRC = $(top_srcdir)/tests/fuzz/fuzz_proto.c $(top_srcdir)/common/proto.c \
                 $(top_srcdir)/common/util.c $(top_srcdir)/common/log.c \
                 $(top_srcdir)/common/safefile.c $(top_srcdir)/common/failure.c
fuzz_conf_SRC = $(top_srcdir)/tests/fuzz/fuzz_conf.c $(top_srcdir)/common/conf.c \
                $(top_srcdir)/common/util.c
fuzz_args_SRC = $(top_srcdir)/tests/fuzz/fuzz_args.c $(top_srcdir)/launcher/ddlrun_args.c \
                $(top_srcdir)/plugins/spank_opts.c $(top_srcdir)/common/conf.c \
                $(top_srcdir)/common/util.c
fuzz_ckpt_SRC = $(top_srcdir)/tests/fuzz/fuzz_ckpt.c $(top_srcdir)/collectives/checkpoint.c \
                $(top_srcdir)/collectives/crc32c.c $(top_srcdir)/collectives/status.c \
                $(top_srcdir)/common/log.c $(top_srcdir)/common/util.c \
                $(top_srcdir)/common/safefile.c $(top_srcdir)/common/env.c

tests/fuzz/fuzz_proto: $(fuzz_proto_SRC) $(top_srcdir)/common/proto.h $(FUZZ_COMMON_H)
	$(AM_V_GEN)$(MKDIR_P) tests/fuzz && \
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(fuzz_proto_SRC) -o $@
tests/fuzz/fuzz_conf: $(fuzz_conf_SRC) $(top_srcdir)/common/conf.h $(FUZZ_COMMON_H)
	$(AM_V_GEN)$(MKDIR_P) tests/fuzz && \
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(CONFUSE_CFLAGS) $(fuzz_conf_SRC) $(CONFUSE_LIBS) -o $@
tests/fuzz/fuzz_args: $(fuzz_args_SRC) $(top_srcdir)/launcher/ddlrun.h \
                      $(top_srcdir)/plugins/spank_opts.h $(FUZZ_COMMON_H)
	$(AM_V_GEN)$(MKDIR_P) tests/fuzz && \
	$(FUZZ_CC) $(FUZZ_CFLAGS) -I$(top_srcdir)/launcher -I$(top_srcdir)/plugins \
	    $(CONFUSE_CFLAGS) $(fuzz_args_SRC) $(CONFUSE_LIBS) -o $@
tests/fuzz/fuzz_ckpt: $(fuzz_ckpt_SRC) $(top_srcdir)/collectives/ddl_int.h \
                      $(top_srcdir)/collectives/crc32c.h $(FUZZ_COMMON_H)
	$(AM_V_GEN)$(MKDIR_P) tests/fuzz && \
	$(FUZZ_CC) $(FUZZ_CFLAGS) -I$(top_srcdir)/collectives -I$(top_srcdir)/collectives/include \
	    -I$(top_builddir)/collectives/include $(UCX_CFLAGS) $(fuzz_ckpt_SRC) -pthread -o $@

if HAVE_FUZZ
check_SCRIPTS = $(FUZZ_TARGETS)
endif
CLEANFILES += $(FUZZ_TARGETS)
TESTS += tests/fuzz/fuzz.t
EXTRA_DIST += tests/fuzz/fuzz.t tests/fuzz/README.md tests/fuzz/fuzz_proto.c \
              tests/fuzz/fuzz_conf.c tests/fuzz/fuzz_args.c tests/fuzz/fuzz_ckpt.c \
              tests/fuzz/gen_seeds.c tests/fuzz/corpus
