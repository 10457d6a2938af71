#!/bin/sh
# install-deps.sh: install the Debian 12 packages ddl needs to build, test
# and run its examples (clang and libclang-rt-14-dev: the libFuzzer targets
# of tests/fuzz; mandoc: the lint of the man pages).  Idempotent,
# non-interactive; run as root.  Skips apt-get
# entirely when everything is already installed.
set -eu

PACKAGES="
build-essential autoconf automake libtool pkg-config
libucx-dev ucx-utils
libhwloc-dev hwloc-nox
libconfuse-dev
libssl-dev
zlib1g-dev
clang libclang-rt-14-dev
libpmix-dev
openmpi-bin libopenmpi-dev
slurm-wlm slurmctld slurmd slurm-client libslurm-dev munge
libopenblas-dev
mandoc
dataset-fashion-mnist
libnetfilter-queue-dev iptables
procps util-linux iproute2 coreutils findutils gawk
python3 python3-dev python3-numpy python3-torch python3-prometheus-client
"

missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "install-deps: all packages present"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing packages:$missing" >&2
    echo "install-deps: run this script as root (or: sudo $0)" >&2
    exit 1
fi
echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
