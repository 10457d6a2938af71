# python/local.mk: the ddl Python package (included by the top-level
# Makefile.am; paths are relative to the top directory).
#
# python/ddl/_ddl.la is a libtool module (the C extension, over libddl);
# it and the pure-Python modules install into $(pyexecdir)/ddl.  In the
# build tree, `make` links python/ddl/_ddl.so to the module libtool built
# (and, in a VPATH build, the .py files from the source tree), so that
# PYTHONPATH=$(top_builddir)/python imports the package before `make
# install`; the tests do that (tests/integration/t0027-python.t, ...).

PYTHON_PKG_PY = python/ddl/__init__.py python/ddl/_futures.py python/ddl/checkpoint.py \
                python/ddl/torch.py
EXTRA_DIST += python/README.md $(PYTHON_PKG_PY)

if HAVE_PYTHON
ddlpkgdir = $(pyexecdir)/ddl
ddlpkg_LTLIBRARIES = python/ddl/_ddl.la
ddlpkg_PYTHON = $(PYTHON_PKG_PY)
python_ddl__ddl_la_SOURCES = python/ddl/_ddl.c
python_ddl__ddl_la_CPPFLAGS = $(AM_CPPFLAGS) $(PYTHON_CPPFLAGS)
# Python's own headers: -Wmissing-prototypes and -Wstrict-prototypes hold,
# but its macros cast function pointers
python_ddl__ddl_la_CFLAGS = $(AM_CFLAGS) -fno-strict-aliasing
python_ddl__ddl_la_LIBADD = collectives/libddl.la $(PTHREAD_LIBS)
python_ddl__ddl_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shared \
                             -export-symbols-regex '^PyInit__ddl$$'

PYTHON_BUILD_TREE = python-build-tree
else
PYTHON_BUILD_TREE =
endif

# The importable package in the build tree.
all-local: $(PYTHON_BUILD_TREE)
python-build-tree: python/ddl/_ddl.la
	@$(MKDIR_P) python/ddl
	@ln -sf .libs/_ddl.so python/ddl/_ddl.so
	@if test "$(abs_srcdir)" != "$(abs_builddir)"; then \
	  for f in $(PYTHON_PKG_PY); do ln -sf "$(abs_srcdir)/$$f" "$$f"; done; \
	fi
clean-local: python-clean-build-tree
python-clean-build-tree:
	-rm -f python/ddl/_ddl.so
	-rm -rf python/ddl/__pycache__
	-if test "$(abs_srcdir)" != "$(abs_builddir)"; then \
	  for f in $(PYTHON_PKG_PY); do rm -f "$$f"; done; \
	fi
.PHONY: python-build-tree python-clean-build-tree
