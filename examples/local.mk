# examples/local.mk: the example training programs (included by the top-level
# Makefile.am; paths are relative to the top directory).
#
# fmnist-train trains an MLP on Fashion-MNIST, data-parallel with libddl; it
# needs OpenBLAS (configure --with-blas) and is not installed.  The unit test
# of its IDX reader needs only zlib and is always built by `make check`.
# torch/ddp_check.py is a plain PyTorch DDP job (nothing to build), run by
# tests/integration/t0013-torch.t when python3-torch is installed.

EXTRA_DIST += examples/README.md examples/fmnist/README.md \
              examples/torch/README.md examples/torch/ddp_check.py

if HAVE_BLAS
noinst_PROGRAMS += examples/fmnist/fmnist-train
examples_fmnist_fmnist_train_SOURCES = examples/fmnist/fmnist-train.c \
                                       examples/fmnist/idx.c examples/fmnist/idx.h
examples_fmnist_fmnist_train_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS) $(ZLIB_CFLAGS)
examples_fmnist_fmnist_train_LDADD = collectives/libddl.la $(BLAS_LIBS) $(ZLIB_LIBS) -lm
endif

check_PROGRAMS += tests/unit/t_idx
TESTS += tests/unit/t_idx
tests_unit_t_idx_SOURCES = tests/unit/t_idx.c tests/tap.h \
                           examples/fmnist/idx.c examples/fmnist/idx.h
tests_unit_t_idx_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests \
                            -I$(top_srcdir)/examples/fmnist
tests_unit_t_idx_CFLAGS = $(AM_CFLAGS) $(ZLIB_CFLAGS)
tests_unit_t_idx_LDADD = $(ZLIB_LIBS)
