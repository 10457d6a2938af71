# lib.sh: helpers for ddl's integration tests (TAP from shell).
#
# Source it first thing in a .t script.  It provides ok/not_ok bookkeeping
# (t_ok, t_is, t_skip, t_skip_all, t_diag, t_done), paths to the built
# programs, a per-test scratch directory and a unique token to find the
# test's own processes in the process table.  Everything the test starts is
# bounded in time (t_run uses timeout) and killed on exit.

set -u
: "${top_builddir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_srcdir:=$top_builddir}"

DDLRUN="$top_builddir/launcher/ddlrun"
DDL_LAUNCH="$top_builddir/launcher/ddl-launch"
DDL_AGENT="$top_builddir/agent/ddl-agent"
COLL_CHECK="$top_builddir/tests/helpers/coll-check"
FMNIST="$top_builddir/examples/fmnist/fmnist-train"

T_NUM=0
T_FAILED=0
T_TOKEN="ddltest$$x$(date +%s%N | tail -c 7)"
T_TMP=$(mktemp -d "${TMPDIR:-/tmp}/ddl-test.XXXXXX")
# Sockets of the ddlrun instances this test starts go to a private place.
export DDL_RUNTIME_DIR="$T_TMP/run"
mkdir -p "$DDL_RUNTIME_DIR"

t_cleanup() {
    pkill -KILL -f "$T_TOKEN" 2>/dev/null
    rm -rf "$T_TMP"
}
trap t_cleanup EXIT

t_diag() { printf '%s\n' "$@" | sed 's/^/# /'; }

t_ok() { # t_ok STATUS DESCRIPTION: STATUS 0 is a pass
    T_NUM=$((T_NUM + 1))
    if [ "$1" -eq 0 ]; then
        echo "ok $T_NUM - $2"
    else
        echo "not ok $T_NUM - $2"
        T_FAILED=$((T_FAILED + 1))
    fi
}

t_is() { # t_is GOT WANT DESCRIPTION
    if [ "$1" = "$2" ]; then t_ok 0 "$3"; else
        t_ok 1 "$3"
        t_diag "     got: '$1'" "expected: '$2'"
    fi
}

t_status() { # t_status GOT WANT DESCRIPTION FILE: an exit status; on a
    # mismatch, the last lines of FILE (the command's stderr) as diagnostics
    t_is "$1" "$2" "$3"
    [ "$1" = "$2" ] || { t_diag "last lines of $4:"; tail -n 30 "$4" | sed 's/^/#   /'; }
}

t_like() { # t_like FILE REGEX DESCRIPTION: FILE has a line matching REGEX
    if grep -Eq -- "$2" "$1"; then t_ok 0 "$3"; else
        t_ok 1 "$3"
        t_diag "no line matches /$2/ in:"
        sed 's/^/#   /' "$1" | tail -n 20
    fi
}

t_skip() { T_NUM=$((T_NUM + 1)); echo "ok $T_NUM # SKIP $*"; }

t_skip_all() { echo "1..0 # SKIP $*"; exit 0; }

t_done() {
    echo "1..$T_NUM"
    [ "$T_FAILED" -eq 0 ]
    exit $?
}

# t_run SECONDS CMD...: run with a time limit; stdout/stderr to $T_TMP/out,
# $T_TMP/err; returns the command's status (124 on time-out).  The limit is
# multiplied by DDL_TEST_TIME_SCALE (scripts/sanitize.sh sets 3: sanitizer
# builds run about 3x slower).
t_run() {
    local limit=$(($1 * ${DDL_TEST_TIME_SCALE:-1}))
    shift
    timeout -k 5 "$limit" "$@" >"$T_TMP/out" 2>"$T_TMP/err"
}

# t_procs: number of processes whose command line holds the test token.
t_procs() { pgrep -f "$T_TOKEN" 2>/dev/null | wc -l; }

# t_wait_procs N SECONDS: wait until at most N such processes remain.
t_wait_procs() {
    local i=0 limit=$(($2 * 10))
    while [ "$(t_procs)" -gt "$1" ] && [ $i -lt $limit ]; do
        sleep 0.1
        i=$((i + 1))
    done
    [ "$(t_procs)" -le "$1" ]
}

# t_procs_of PROG PATTERN [NAME=VALUE...]: the pids of the processes that
# run PROG (or libtool's lt-PROG), whose command line matches PATTERN and
# whose environment holds every NAME=VALUE given (DDL_RANK=2, say).
t_procs_of() {
    _tp_prog=$1 _tp_pat=$2
    shift 2
    for _tp in $(pgrep -f "$_tp_pat"); do
        case "$(cat /proc/"$_tp"/comm 2>/dev/null)" in "$_tp_prog" | "lt-$_tp_prog") ;; *) continue ;; esac
        tr '\0' '\n' <"/proc/$_tp/environ" >"$T_TMP/.environ" 2>/dev/null || continue
        _tp_ok=1
        for _tp_kv in "$@"; do grep -qx "$_tp_kv" "$T_TMP/.environ" || _tp_ok=0; done
        [ $_tp_ok = 1 ] && echo "$_tp"
    done
}

# t_checksums FILE: "N 0xCRC" from fmnist-train's "checksums: all N ranks
# agree (0xCRC)" line in FILE, or nothing.
t_checksums() { sed -n 's/^checksums: all \([0-9]*\) ranks agree (\(0x[0-9a-f]*\))$/\1 \2/p' "$1"; }

# t_wait_file PATH SECONDS: wait for a file to appear.
t_wait_file() {
    local i=0 limit=$(($2 * 10))
    while [ ! -e "$1" ] && [ $i -lt $limit ]; do
        sleep 0.1
        i=$((i + 1))
    done
    [ -e "$1" ]
}

# t_find_python MODULE...: set PY to the first of $PYTHON (configure's),
# python3 and /usr/bin/python3 that imports the build tree's ddl package
# and every MODULE given (numpy, torch); returns 1 with PY empty if none
# does.  Exports PYTHONPATH with the build tree's python/ first.
t_find_python() {
    PY=""
    PYTHONPATH="$top_builddir/python${PYTHONPATH:+:$PYTHONPATH}"
    export PYTHONPATH
    [ -e "$top_builddir/python/ddl/_ddl.so" ] || return 1
    _fp_imp="import ddl"
    for _fp_m in "$@"; do _fp_imp="$_fp_imp, $_fp_m"; done
    for _fp_p in ${PYTHON:-} python3 /usr/bin/python3; do
        if timeout 120 "$_fp_p" -c "$_fp_imp" >/dev/null 2>&1; then
            PY=$(command -v "$_fp_p")
            return 0
        fi
    done
    return 1
}

[ -x "$DDLRUN" ] || { echo "Bail out! $DDLRUN is not built"; exit 1; }

# t_prom_python: print a python3 that can import prometheus_client's parser
# (Debian's python3-prometheus-client is built for /usr/bin/python3); false
# if none.
t_prom_python() {
    for _pp in ${PYTHON:-} /usr/bin/python3 python3; do
        if "$_pp" -c 'import prometheus_client.parser' >/dev/null 2>&1; then
            echo "$_pp"
            return 0
        fi
    done
    return 1
}

# t_prom_parse FILE: FILE's metrics through prometheus_client's parser
# (tests/helpers/prom-samples.py) into $T_TMP/samples, one sample a line;
# returns 1 when the parser refuses it.
t_prom_parse() {
    "$(t_prom_python)" "$top_srcdir/tests/helpers/prom-samples.py" "$1" >"$T_TMP/samples" 2>&1
}

# t_prom_value NAME [LABEL=VALUE,...]: the value of the first sample of
# $T_TMP/samples named NAME that has those labels ("" if none), as Python
# prints a float (2.0).
t_prom_value() {
    awk -v n="$1" -v l="${2-}" '{ split($1, a, "{"); lab = substr(a[2], 1, length(a[2]) - 1);
        if (a[1] == n && (l == "" || index("," lab ",", "," l ",") > 0)) { print $2; exit } }' \
        "$T_TMP/samples"
}
