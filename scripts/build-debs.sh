#!/bin/sh
# build-debs.sh: build ddl's Debian packages out of tree, check them with
# lintian, install them on this machine, run a job from the installed
# paths, and remove them again, leaving the machine's packages as they were.
#
#   scripts/build-debs.sh [--keep] [--check-build DIR] [--slurm]
#
#   --keep             leave the packages installed (and the work directory)
#   --check-build DIR  while the packages are installed, run t0001 and t0040
#                      in the configured build tree DIR and check that its
#                      programs load DIR's libddl, not the installed one
#   --slurm            also run an `srun --mpi=pmix --ddl` step with the
#                      packaged plugin on the namespace test cluster
#                      (tests/slurm/cluster.sh; serialised by
#                      flock /tmp/ddl-cluster.lock)
#
# Run as root, from a clone (or an unpacked tarball), on Debian 12.  It
# installs the packaging tools it needs (debhelper, dpkg-dev, lintian,
# fakeroot) and the build dependencies of debian/control with apt-get.
# The .debs, the lintian report and the build log stay in the work
# directory, $DDL_DEB_WORK (default: a new /var/tmp/ddl-debs.XXXXXX),
# whose path is printed at the end.  Exit status 0 when every step passed.
# shellcheck disable=SC2016 # the sh -c scripts in single quotes expand in that shell
set -eu

SRC=$(cd "$(dirname "$0")/.." && pwd)
KEEP=0 CHECK_BUILD="" SLURM=0
while [ $# -gt 0 ]; do
    case "$1" in
    --keep) KEEP=1 ;;
    --check-build) CHECK_BUILD=$(cd "$2" && pwd); shift ;;
    --slurm) SLURM=1 ;;
    -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-debs: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
if [ "$(id -u)" != 0 ]; then
    echo "build-debs: run this script as root (it installs packages with apt-get)" >&2
    exit 2
fi

PKGS="ddl libddl0 libddl-dev ddl-slurm-plugin python3-ddl"
T0=$(date +%s)
step_t=$T0
step() { # step NAME: print the time the previous step took, then NAME
    now=$(date +%s)
    echo "build-debs: [$((now - T0)) s] $*"
    step_t=$now
}
fail() { echo "build-debs: FAILED: $*" >&2; exit 1; }

export DEBIAN_FRONTEND=noninteractive
APT="apt-get -y -q -o DPkg::Lock::Timeout=300"

# --------------------------------------------------------------- before
for p in $PKGS; do
    if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
        fail "package $p is already installed: remove it first (apt-get purge $PKGS)"
    fi
done
for f in /etc/slurm/ddl.conf /etc/slurm/plugstack.conf.d/ddl.conf; do
    [ -e "$f" ] && fail "$f exists and is no package's: the package would take it over; move it away first"
done

# --------------------------------------------------------------- tools
step "installing the packaging tools and build dependencies"
TOOLS="debhelper dpkg-dev lintian fakeroot build-essential"
missing=""
for p in $TOOLS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
if [ -n "$missing" ]; then
    $APT update
    # shellcheck disable=SC2086
    $APT install --no-install-recommends $missing
fi
if ! (cd "$SRC" && dpkg-checkbuilddeps) 2>/dev/null; then
    $APT update
    (cd "$SRC" && $APT build-dep ./)
fi
# what is installed now, to remove exactly what the .debs pull in
dpkg-query -W -f='${Package}\n' | sort >"${TMPDIR:-/tmp}/build-debs.before.$$"
BEFORE="${TMPDIR:-/tmp}/build-debs.before.$$"

# --------------------------------------------------------------- source copy
WORK=${DDL_DEB_WORK:-$(mktemp -d /var/tmp/ddl-debs.XXXXXX)}
mkdir -p "$WORK"
TREE="$WORK/ddl"
rm -rf "$TREE"
mkdir -p "$TREE"
step "copying the source tree to $TREE"
if [ -d "$SRC/.git" ] || [ -f "$SRC/.git" ]; then
    # tracked files and new ones git does not ignore: never a build output
    (cd "$SRC" && git ls-files -z --cached --others --exclude-standard |
        xargs -0 -I{} sh -c '[ -e "{}" ] && printf "%s\0" "{}"' | tar --null -T - -cf -) |
        (cd "$TREE" && tar -xf -)
else
    (cd "$SRC" && tar --exclude='./build*' --exclude='./debian/tmp' -cf - .) |
        (cd "$TREE" && tar -xf -)
fi

# --------------------------------------------------------------- build
step "dpkg-buildpackage -us -uc -b (log: $WORK/build.log)"
jobs=${DDL_DEB_JOBS:-$(nproc)}
if ! (cd "$TREE" && DEB_BUILD_OPTIONS="parallel=$jobs ${DEB_BUILD_OPTIONS:-}" \
    dpkg-buildpackage -us -uc -b) >"$WORK/build.log" 2>&1; then
    tail -n 40 "$WORK/build.log" >&2
    fail "dpkg-buildpackage; see $WORK/build.log"
fi
build_s=$(($(date +%s) - step_t))
grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR):' "$WORK/build.log" | sed 's/^/build-debs:   tests at build time: /' || true
ls "$WORK"/*.deb

# --------------------------------------------------------------- lintian
step "lintian (report: $WORK/lintian.txt)"
changes=$(ls "$WORK"/ddl_*.changes)
lintian --tag-display-limit 0 --display-info "$changes" >"$WORK/lintian.txt" 2>&1 || true
sed 's/^/build-debs:   /' "$WORK/lintian.txt"
grep -q '^E: ' "$WORK/lintian.txt" && fail "lintian reports errors (above)"

# --------------------------------------------------------------- install
cleanup() {
    rc=$?
    if [ "$KEEP" = 0 ]; then
        echo "build-debs: removing the packages and what they pulled in"
        # shellcheck disable=SC2086
        $APT purge $PKGS >/dev/null 2>&1 || true
        dpkg-query -W -f='${Package}\n' | sort >"$BEFORE.after"
        extra=$(comm -13 "$BEFORE" "$BEFORE.after" | tr '\n' ' ')
        # shellcheck disable=SC2086
        [ -z "$extra" ] || $APT purge $extra >/dev/null 2>&1 || true
        dpkg-query -W -f='${Package}\n' | sort >"$BEFORE.after"
        if cmp -s "$BEFORE" "$BEFORE.after" && [ ! -e /usr/bin/ddlrun ] &&
            [ ! -e /etc/slurm/ddl.conf ]; then
            echo "build-debs: the machine's packages are as before"
        else
            echo "build-debs: FAILED: packages or files left behind:" \
                "$(comm -3 "$BEFORE" "$BEFORE.after" | tr '\n' ' ')" >&2
            rc=1
        fi
        rm -f "$BEFORE" "$BEFORE.after"
    fi
    echo "build-debs: work directory $WORK; $(($(date +%s) - T0)) s in all (package build ${build_s:-?} s)"
    exit $rc
}
trap cleanup EXIT
step "apt-get install ./*.deb"
(cd "$WORK" && $APT install ./ddl_*.deb ./libddl0_*.deb ./libddl-dev_*.deb \
    ./ddl-slurm-plugin_*.deb ./python3-ddl_*.deb) >"$WORK/install.log" 2>&1 ||
    { tail -n 20 "$WORK/install.log" >&2; fail "apt-get install; see $WORK/install.log"; }

# --------------------------------------------------------------- checks
step "checks from the installed paths"
checks=0
check() { # check DESCRIPTION COMMAND...: run it, print ok or fail
    desc=$1
    shift
    if "$@" >"$WORK/check.out" 2>&1; then
        echo "build-debs:   ok: $desc"
    else
        echo "build-debs:   FAILED: $desc" >&2
        sed 's/^/build-debs:     /' "$WORK/check.out" | tail -n 20 >&2
        checks=$((checks + 1))
    fi
}
# no path of the build tree or the source tree is used from here on
cd /
export DDL_RUNTIME_DIR="$WORK/run"
mkdir -p "$DDL_RUNTIME_DIR"
check "ddlrun, ddl-agent, ddl-bench in /usr/bin, ddl-launch in /usr/libexec" sh -c \
    '[ "$(command -v ddlrun)" = /usr/bin/ddlrun ] && [ "$(command -v ddl-agent)" = /usr/bin/ddl-agent ] &&
     [ "$(command -v ddl-bench)" = /usr/bin/ddl-bench ] && [ -x /usr/libexec/ddl-launch ] && ddlrun --version'
check "ddl-bench loads the packaged libddl.so.0" sh -c \
    'ldd /usr/bin/ddl-bench | grep -E "libddl\.so\.0 => (/usr)?/lib/[^ ]*/libddl\.so\.0 "'
check "ddlrun -n 2 ddl-bench allreduce -e 1M: every result right" \
    timeout 120 ddlrun -n 2 ddl-bench allreduce -b 8 -e 1M -n 5 -w 1
check "ddl-agent config --check /etc/slurm/ddl.conf (the packaged conffile)" \
    ddl-agent config --check /etc/slurm/ddl.conf
# libddl(3)'s example, from the installed page, built with pkg-config ddl
zcat /usr/share/man/man3/libddl.3.gz |
    awk '/^\.EX/ { n++; next } /^\.EE/ { if (n == 1) exit } n == 1' |
    sed 's/\\e/\\/g; s/\\-/-/g' >"$WORK/ex.c"
check "libddl(3)'s example builds with pkg-config ddl (libddl-dev)" sh -c \
    "cc -o '$WORK/ex' '$WORK/ex.c' \$(pkg-config --cflags --libs ddl)"
check "ddlrun -n 2 runs it: both ranks get the sum 1" sh -c \
    "timeout 60 ddlrun -n 2 '$WORK/ex' | sort | tr '\n' ';' | grep -qx 'rank 0 of 2: sum 1;rank 1 of 2: sum 1;'"
# the training example, from the sources, against the installed library
if pkg-config --exists openblas zlib && [ -d /usr/share/datasets/fashion-mnist ]; then
    check "fmnist-train builds against the installed libddl" sh -c \
        "cc -O2 -o '$WORK/fmnist-train' '$TREE/examples/fmnist/fmnist-train.c' \
            '$TREE/examples/fmnist/idx.c' -I'$TREE/examples/fmnist' \
            \$(pkg-config --cflags --libs ddl openblas zlib) -lm"
    check "ddlrun -n 2 fmnist-train --epochs 1: both ranks agree" sh -c \
        "timeout 300 ddlrun -n 2 '$WORK/fmnist-train' --epochs 1 >'$WORK/fmnist.out' 2>&1;
         cat '$WORK/fmnist.out'; grep -q '^checksums: all 2 ranks agree' '$WORK/fmnist.out'"
    grep -E '^(epoch|checksums|final)' "$WORK/fmnist.out" | sed 's/^/build-debs:     /' || true
else
    echo "build-debs:   skipped: fmnist-train (needs libopenblas-dev, zlib1g-dev, dataset-fashion-mnist)"
fi
# the Python package from /usr/lib/python3/dist-packages, on 2 ranks
cat >"$WORK/py.py" <<'EOP'
import os, ddl, numpy as np
ddl.init()
x = np.full(4, ddl.rank() + 1, dtype=np.float32)
ddl.allreduce(x)
# one write(2) per line: the ranks share the pipe
os.write(1, ("rank %d: %s %s\n" % (ddl.rank(), x[0], ddl.__file__)).encode())
ddl.finalize()
EOP
check "python3-ddl: ddlrun -n 2 python3 imports ddl from dist-packages, allreduce gives 3" sh -c \
    "timeout 60 ddlrun -n 2 /usr/bin/python3 '$WORK/py.py' | sort | tee /dev/stderr |
     grep -c '^rank [01]: 3.0 /usr/lib/python3/dist-packages/ddl/__init__.py$' | grep -qx 2"
for page in ddlrun ddl-agent ddl-bench "3 libddl" "5 ddl.conf" "8 spank_ddl" "7 ddl-python"; do
    # shellcheck disable=SC2086
    check "man $page" sh -c "MANWIDTH=80 man -P cat $page 2>&1 | head -n 8 | grep -q '^NAME'"
done
check "the plugstack line names the packaged plugin" sh -c \
    'so=$(awk "/^(optional|required)/ {print \$2}" /etc/slurm/plugstack.conf.d/ddl.conf);
     echo "$so"; [ -f "$so" ] && dpkg -S "$so"'

# --------------------------------------------------------------- build tree
if [ -n "$CHECK_BUILD" ]; then
    step "the build tree $CHECK_BUILD with the packages installed"
    check "the build tree's ddl-bench loads its own libddl" sh -c \
        "cd '$CHECK_BUILD' && ./libtool --mode=execute ldd bench/ddl-bench |
         grep -E 'libddl\.so\.0 => $CHECK_BUILD/collectives/\.libs/libddl\.so\.0 '"
    check "the build tree's t0001 and t0040 pass" sh -c \
        "cd '$CHECK_BUILD' && make check TESTS='tests/integration/t0001-allreduce.t tests/integration/t0040-man.t' >/dev/null 2>&1 ||
         { cat test-suite.log; exit 1; }"
fi

# --------------------------------------------------------------- slurm
if [ "$SLURM" = 1 ]; then
    step "srun --ddl with the packaged plugin on the namespace cluster (waiting for /tmp/ddl-cluster.lock)"
    # a 2-node cluster whose plugstack.conf is the packaged line (the nodes
    # are namespaces of this host: they see the installed packages)
    cat >"$WORK/slurm-step.sh" <<'EOS'
set -u
CLUSTER=$1 DIR=$2
mkdir -p "$DIR"
cp /etc/slurm/plugstack.conf.d/ddl.conf "$DIR/plugstack.conf"
sh "$CLUSTER" start "$DIR" 2 >"$DIR.start" 2>&1 || { cat "$DIR.start"; rm -rf "$DIR"; exit 1; }
export SLURM_CONF="$DIR/slurm.conf"
unset DDL_RUNTIME_DIR
# UCX held to TCP, as in the cluster tests: the nodes share one kernel, and
# UCX's shared-memory transports between namespaces do not work
export UCX_TLS=tcp,self
rc=0
out=$(timeout 60 srun --mpi=pmix -N2 -n2 --ddl printenv DDL_ENABLED 2>&1) || rc=1
echo "srun --ddl printenv DDL_ENABLED: $(echo "$out" | tr '\n' ' ')"
[ "$out" = "$(printf '1\n1')" ] || rc=1
timeout 120 srun --mpi=pmix -N2 -n2 --ddl ddl-bench allreduce -b 8 -e 64K -n 5 -w 1 || rc=1
sh "$CLUSTER" stop "$DIR" >/dev/null 2>&1
rm -f "$DIR.start"
exit $rc
EOS
    check "srun --mpi=pmix -N2 -n2 --ddl (DDL_ENABLED, ddl-bench) with the packaged plugin" \
        flock /tmp/ddl-cluster.lock sh "$WORK/slurm-step.sh" "$TREE/tests/slurm/cluster.sh" \
        "/var/tmp/ddl-debs-cluster.$$"
fi

step "done: $checks check(s) failed"
[ "$checks" -eq 0 ]
