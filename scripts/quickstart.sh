#!/bin/sh
# quickstart.sh: the README's first command.  Installs the dependencies,
# builds ddl and runs the main job: fmnist-train on 4 ranks for 3 epochs.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/install-deps.sh"
"$top/scripts/build.sh"
cd "$top/build"
exec ./launcher/ddlrun -n 4 examples/fmnist/fmnist-train --epochs 3
