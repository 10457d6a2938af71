# examples/local.mk: the example training programs (included by the top-level
# Makefile.am; paths are relative to the top directory).
#
# fmnist-train trains an MLP on Fashion-MNIST, data-parallel with libddl; it
# needs OpenBLAS (configure --with-blas) and is not installed.  The unit test
# of its IDX reader needs only zlib and is always built by `make check`.
# torch/ddp_check.py is a plain PyTorch DDP job (nothing to build), run by
# tests/integration/t0013-torch.t when python3-torch is installed.
#
# With nvcc and cuBLAS as well (HAVE_CUDA_EXAMPLE), fmnist-train-cuda is
# fmnist-train with --device cuda: fmnist_cuda.cu is compiled by nvcc with
# the rule below (automake knows no CUDA) and linked in; otherwise it is
# only distributed.

EXTRA_DIST += examples/README.md examples/fmnist/README.md \
              examples/torch/README.md examples/torch/ddp_check.py examples/torch/fmnist_ddp.py \
              examples/fmnist/fmnist_cuda.cu examples/fmnist/fmnist_cuda.h

if HAVE_BLAS
noinst_PROGRAMS += examples/fmnist/fmnist-train
examples_fmnist_fmnist_train_SOURCES = examples/fmnist/fmnist-train.c \
                                       examples/fmnist/idx.c examples/fmnist/idx.h
examples_fmnist_fmnist_train_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS) $(ZLIB_CFLAGS)
examples_fmnist_fmnist_train_LDADD = collectives/libddl.la $(BLAS_LIBS) $(ZLIB_LIBS) -lm
if HAVE_CUDA_EXAMPLE
# fmnist-train-cuda: the same sources with the CUDA path compiled in.  A
# program of its own, because loading cuBLAS costs every start 0.4 s, which
# the CPU runs (and the tests, which start fmnist-train hundreds of times)
# should not pay.
noinst_PROGRAMS += examples/fmnist/fmnist-train-cuda
examples_fmnist_fmnist_train_cuda_SOURCES = $(examples_fmnist_fmnist_train_SOURCES)
examples_fmnist_fmnist_train_cuda_CFLAGS = $(examples_fmnist_fmnist_train_CFLAGS) -DFMNIST_CUDA
examples_fmnist_fmnist_train_cuda_LDFLAGS = $(AM_LDFLAGS) $(CUDA_LDFLAGS)
# nvcc's host code needs the C++ runtime (guarded statics, unwinding)
examples_fmnist_fmnist_train_cuda_LDADD = $(examples_fmnist_fmnist_train_LDADD) \
    examples/fmnist/fmnist_cuda.$(OBJEXT) $(CUBLAS_LIBS) $(CUDA_LIBS) -lstdc++
EXTRA_examples_fmnist_fmnist_train_cuda_DEPENDENCIES = examples/fmnist/fmnist_cuda.$(OBJEXT)
CLEANFILES += examples/fmnist/fmnist_cuda.$(OBJEXT)

# SASS for Ampere (sm_80, which also runs on sm_86 and sm_89), Hopper and
# Blackwell (sm_100), and PTX for the JIT compiler of later GPUs.
FMNIST_NVCC_ARCH = -gencode arch=compute_80,code=sm_80 \
                   -gencode arch=compute_90,code=sm_90 \
                   -gencode arch=compute_100,code=sm_100 \
                   -gencode arch=compute_100,code=compute_100
fmnist_v_nvcc = $(fmnist_v_nvcc_@AM_V@)
fmnist_v_nvcc_ = $(fmnist_v_nvcc_@AM_DEFAULT_V@)
fmnist_v_nvcc_0 = @echo "  NVCC    " $@;
fmnist_v_nvcc_1 =
examples/fmnist/fmnist_cuda.$(OBJEXT): $(top_srcdir)/examples/fmnist/fmnist_cuda.cu \
                                       $(top_srcdir)/examples/fmnist/fmnist_cuda.h
	$(fmnist_v_nvcc)$(MKDIR_P) examples/fmnist && \
	$(NVCC) -O2 -std=c++17 $(FMNIST_NVCC_ARCH) -Xcompiler -fPIC $(CUDA_CPPFLAGS) \
	  -I$(top_srcdir)/examples/fmnist -c $(top_srcdir)/examples/fmnist/fmnist_cuda.cu -o $@
endif
endif

check_PROGRAMS += tests/unit/t_idx
TESTS += tests/unit/t_idx
tests_unit_t_idx_SOURCES = tests/unit/t_idx.c tests/tap.h \
                           examples/fmnist/idx.c examples/fmnist/idx.h
tests_unit_t_idx_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests \
                            -I$(top_srcdir)/examples/fmnist
tests_unit_t_idx_CFLAGS = $(AM_CFLAGS) $(ZLIB_CFLAGS)
tests_unit_t_idx_LDADD = $(ZLIB_LIBS)
