#!/bin/sh
# Regenerate the build system: libtoolize + autoreconf, nothing else.
set -e
cd "$(dirname "$0")"
autoreconf --force --install --verbose
