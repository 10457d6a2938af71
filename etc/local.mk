# etc/: installed configuration files and the pkg-config file.
pkgconfig_DATA = etc/ddl.pc
EXTRA_DIST += etc/README.md
