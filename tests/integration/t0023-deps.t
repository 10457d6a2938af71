#!/bin/sh
# t0023-deps: the libraries' dependencies.  libddl.so, which training
# programs load, needs UCX but neither hwloc nor libconfuse (those are for
# the agent, the launchers and the Slurm plugin): checked on the built
# library's NEEDED entries and undefined symbols.  And the source tree's
# dependencies point one way, common <- collectives <- agent, launcher,
# plugins: no lower folder includes a higher one's headers, and no build
# rule outside tests/ and examples/ uses anything from them.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

LIB="$top_builddir/collectives/.libs/libddl.so"
command -v readelf >/dev/null 2>&1 || t_skip_all "readelf (binutils) is not installed"
[ -f "$LIB" ] || t_skip_all "no shared libddl at $LIB (configured with --disable-shared?)"

readelf -d "$LIB" >"$T_TMP/dyn" 2>&1
t_status $? 0 "readelf -d libddl.so" "$T_TMP/dyn"
sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p' "$T_TMP/dyn" >"$T_TMP/needed"
t_diag "libddl.so needs: $(tr '\n' ' ' <"$T_TMP/needed")"

needs() { grep -q "^$1" "$T_TMP/needed"; }
needs libhwloc && t_ok 1 "libddl.so does not need libhwloc" ||
    t_ok 0 "libddl.so does not need libhwloc"
needs libconfuse && t_ok 1 "libddl.so does not need libconfuse" ||
    t_ok 0 "libddl.so does not need libconfuse"
needs libucp
t_ok $? "libddl.so needs libucp (UCX)"
needs libucs
t_ok $? "libddl.so needs libucs (UCX)"

# No symbol of hwloc or libconfuse left undefined (so none is used through
# another library either).
if command -v nm >/dev/null 2>&1; then
    nm -D --undefined-only "$LIB" >"$T_TMP/undef" 2>&1
    grep -E ' (hwloc_|cfg_)' "$T_TMP/undef" >"$T_TMP/bad"
    [ ! -s "$T_TMP/bad" ]
    t_ok $? "libddl.so uses no hwloc_* or cfg_* symbol"
    [ -s "$T_TMP/bad" ] && t_diag "$(head -5 "$T_TMP/bad")"
    grep -q ' ucp_init_version' "$T_TMP/undef"
    t_ok $? "libddl.so calls UCX (ucp_init_version)"
else
    t_skip "nm (binutils) is not installed"
    t_skip "nm (binutils) is not installed"
fi

# One-way dependencies in the sources: FOLDER may include only the headers
# of the folders below it.  Headers named "NAME" (quotes) are looked up in
# every folder; a hit in a folder that is not allowed is a violation.
cd "$top_srcdir" || exit 1
headers_of() { # headers_of DIR...: the base names of the .h files in DIRs
    for d in "$@"; do ls "$d"/*.h 2>/dev/null; done | sed 's|.*/||' | sort -u
}
check_includes() { # check_includes FOLDER FORBIDDEN-DIR...
    folder=$1
    shift
    headers_of "$@" >"$T_TMP/forbidden"
    : >"$T_TMP/viol"
    for f in "$folder"/*.c "$folder"/*.h; do
        [ -f "$f" ] || continue
        sed -n 's/^#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | sed 's|.*/||' |
            while read -r h; do
                # a header of the folder itself wins over a same-named one
                [ -f "$folder/$h" ] && continue
                grep -qx "$h" "$T_TMP/forbidden" && echo "$f includes $h"
            done >>"$T_TMP/viol"
    done
    [ ! -s "$T_TMP/viol" ]
    t_ok $? "$folder/ includes no header of: $*"
    [ -s "$T_TMP/viol" ] && t_diag "$(cat "$T_TMP/viol")"
}
check_includes common collectives collectives/include agent launcher plugins tests tests/helpers \
    examples/fmnist bench
check_includes collectives agent launcher plugins tests tests/helpers examples/fmnist bench
for d in agent launcher plugins; do
    check_includes "$d" tests tests/helpers examples/fmnist bench
done

# Build rules: nothing outside tests/ and examples/ names a file there.
grep -nE '(^|[[:space:]=])(\$\(top_srcdir\)/|\$\(srcdir\)/)?(tests|examples)/' \
    Makefile.am common/local.mk collectives/local.mk agent/local.mk launcher/local.mk \
    plugins/local.mk bench/local.mk etc/local.mk 2>/dev/null | grep -Ev '^[^:]*:[0-9]*:[[:space:]]*(#|include )' >"$T_TMP/rules"
[ ! -s "$T_TMP/rules" ]
t_ok $? "no build rule outside tests/ and examples/ uses their files"
[ -s "$T_TMP/rules" ] && t_diag "$(cat "$T_TMP/rules")"

t_done
