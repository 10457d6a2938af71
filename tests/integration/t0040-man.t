#!/bin/sh
# t0040-man: the man pages of man/ are clean (mandoc -T lint, groff's
# warnings), and in step with the programs: each page's option list is the
# one the program's --help prints (ddlrun, ddl-agent, ddl-bench), the
# plugin's --ddl* options and plugstack arguments are those plugins/
# spank_ddl.c registers, ddl.conf(5)'s keys are common/conf.c's, every
# DDL_* variable named is in common/ddl_env.def, libddl(3) names every
# function of ddl.h and nothing else, every page carries the version, and
# libddl(3)'s example compiles and runs on 2 ranks, and ddl-python(7)
# describes what the Python package exports.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

MAN="$top_srcdir/man"
PAGES="ddlrun.1 ddl-agent.1 ddl-bench.1 libddl.3 ddl.conf.5 spank_ddl.8 ddl-python.7"

# section PAGE NAME: the roff source of section NAME (.SH NAME up to the
# next .SH), with \- turned into -.
section() {
    awk -v want="$2" '/^\.SH/ { sub(/^\.SH +/, ""); gsub(/"/, ""); on = ($0 == want); next }
                      on' "$MAN/$1" | sed 's/\\-/-/g'
}

# tag_options: the options (-x, --long) on the tag lines of .TP/.TQ
# paragraphs of the roff text on stdin, one a line, sorted.
tag_options() {
    awk '/^\.(TP|TQ)/ { if ((getline line) > 0) print line }' |
        grep -oE '(^|[ "])--?[a-zA-Z][a-zA-Z0-9-]*' | tr -d ' "' | sort -u
}

# same WHAT HELP_FILE MAN_FILE: one test, with the differences on failure.
same() {
    if [ -s "$2" ] && cmp -s "$2" "$3"; then t_ok 0 "$1"; else
        t_ok 1 "$1"
        t_diag "< in the program, > in the man page:"
        t_diag "$(diff "$2" "$3" | grep '^[<>]')"
    fi
}

# ---------------------------------------------------------------- lint
for p in $PAGES; do
    [ -f "$MAN/$p" ] || { echo "Bail out! $MAN/$p is missing"; exit 1; }
done
if command -v mandoc >/dev/null 2>&1; then
    for p in $PAGES; do
        mandoc -T lint -W style "$MAN/$p" >"$T_TMP/lint" 2>&1
        rc=$?
        t_ok "$([ $rc -eq 0 ] && [ ! -s "$T_TMP/lint" ] && echo 0 || echo 1)" \
            "mandoc -T lint -W style $p: no message"
        [ -s "$T_TMP/lint" ] && t_diag "$(head -20 "$T_TMP/lint")"
    done
else
    t_skip "mandoc is not installed (Debian package mandoc): no lint"
fi
if command -v groff >/dev/null 2>&1; then
    for p in $PAGES; do
        LC_ALL=C.UTF-8 groff -man -ww -z -Tutf8 "$MAN/$p" >"$T_TMP/groff" 2>&1
        t_ok "$([ ! -s "$T_TMP/groff" ] && echo 0 || echo 1)" "groff -man -ww $p: no warning"
        [ -s "$T_TMP/groff" ] && t_diag "$(head -20 "$T_TMP/groff")"
    done
else
    t_skip "groff is not installed (Debian package groff-base): no formatter check"
fi

# ---------------------------------------------------------------- version
version=$("$DDLRUN" --version | awk '{print $2}')
for p in $PAGES; do
    t_like "$MAN/$p" "^\.TH .*\"ddl $version\"" "$p carries the version, ddl $version"
done

# ---------------------------------------------------------------- ddlrun(1)
# the option lines of ddlrun --help: "  -n, --np N", "      --nodes K"
"$DDLRUN" --help >"$T_TMP/help" 2>&1
sed -nE 's/^ +(-[a-zA-Z], )?(--[a-z][a-z-]*).*/\1 \2/p' "$T_TMP/help" | tr -d ',' |
    tr ' ' '\n' | grep . | sort -u >"$T_TMP/want"
section ddlrun.1 OPTIONS | tag_options >"$T_TMP/got"
same "ddlrun(1)'s options are those of ddlrun --help" "$T_TMP/want" "$T_TMP/got"
# and every long option ddlrun's parser takes is in its --help
sed -n 's/^ *{"\([a-z-]*\)", [a-z_]*argument.*/--\1/p' "$top_srcdir/launcher/ddlrun_args.c" |
    sort -u >"$T_TMP/parser"
missing=$(comm -23 "$T_TMP/parser" "$T_TMP/want" | tr '\n' ' ')
t_is "$missing" "" "every option of ddlrun's parser is in ddlrun --help"

# ---------------------------------------------------------------- ddl-agent(1)
# --help shows every command's synopsis; topo --help and config --help
# describe theirs (short options too)
{
    "$DDL_AGENT" --help
    "$DDL_AGENT" topo --help
    "$DDL_AGENT" config --help
} >"$T_TMP/help" 2>&1
# (topo --help quotes lstopo's own --of, which is not one of ddl-agent's)
sed -i 's/(lstopo --of xml)//' "$T_TMP/help"
{
    grep -oE -- '--[a-z][a-z-]*' "$T_TMP/help"
    sed -nE 's/^ +(-[a-zA-Z]), --.*/\1/p' "$T_TMP/help"
} | sort -u >"$T_TMP/want"
section ddl-agent.1 COMMANDS | tag_options >"$T_TMP/got"
same "ddl-agent(1)'s options are those of ddl-agent --help, topo --help, config --help" \
    "$T_TMP/want" "$T_TMP/got"
# every option `ddl-agent serve` parses is in the synopsis of --help
sed -n 's/^ *{"\([a-z-]*\)", [a-z_]*argument.*/--\1/p' "$top_srcdir/common/agent_args.c" |
    sort -u >"$T_TMP/parser"
missing=$(comm -23 "$T_TMP/parser" "$T_TMP/want" | tr '\n' ' ')
t_is "$missing" "" "every option of ddl-agent serve's parser is in ddl-agent --help"

# ---------------------------------------------------------------- ddl-bench(1)
BENCH="$top_builddir/bench/ddl-bench"
"$BENCH" >"$T_TMP/help" 2>&1
t_is "$?" 2 "ddl-bench without a collective prints its usage and exits 2"
grep -oE '\[-[a-zA-Z] ' "$T_TMP/help" | tr -d '[ ' | sort -u >"$T_TMP/want"
section ddl-bench.1 OPTIONS | tag_options >"$T_TMP/got"
same "ddl-bench(1)'s options are those of ddl-bench's usage" "$T_TMP/want" "$T_TMP/got"

# ---------------------------------------------------------------- spank_ddl(8)
# the options the plugin registers with Slurm (its table in spank_ddl.c,
# which srun --help shows; t0010 checks srun --help on the test cluster)
sed -n 's/^ *{"\(ddl[a-z-]*\)", .*/--\1/p' "$top_srcdir/plugins/spank_ddl.c" | sort -u >"$T_TMP/want"
section spank_ddl.8 OPTIONS | tag_options >"$T_TMP/got"
same "spank_ddl(8)'s options are the --ddl* options spank_ddl.c registers" \
    "$T_TMP/want" "$T_TMP/got"
grep -oE 'strncmp\(av\[i\], "[a-z]+=' "$top_srcdir/plugins/spank_ddl.c" | sed 's/.*"//' |
    sort -u >"$T_TMP/want"
section spank_ddl.8 "PLUGSTACK ARGUMENTS" |
    awk '/^\.(TP|TQ)/ { if ((getline line) > 0) print line }' |
    grep -oE '[a-z]+=' | sort -u >"$T_TMP/got"
same "spank_ddl(8)'s plugstack arguments are those spank_ddl.c takes" "$T_TMP/want" "$T_TMP/got"

# ---------------------------------------------------------------- ddl.conf(5)
grep -oE 'CFG_(INT|FLOAT|STR|STR_LIST|SEC)\("[a-z_]+"' "$top_srcdir/common/conf.c" |
    sed 's/.*("//; s/"$//' | sort -u >"$T_TMP/want"
section ddl.conf.5 KEYS | awk '/^\.(TP|TQ)/ { if ((getline line) > 0) print line }' |
    awk '{print $2}' | sort -u >"$T_TMP/got"
same "ddl.conf(5)'s keys are those common/conf.c reads" "$T_TMP/want" "$T_TMP/got"

# ---------------------------------------------------------------- variables
sed -n 's/^DDL_ENV(\(DDL_[A-Z0-9_]*\),.*/\1/p' "$top_srcdir/common/ddl_env.def" | sort -u >"$T_TMP/env"
for p in $PAGES; do
    grep -ohE 'DDL_[A-Z0-9_]+' "$MAN/$p" |
        grep -vE '^DDL_(OK|INPROGRESS|STOP|RESTART|ERR_[A-Z_]+|FLOAT(16|32|64)|BFLOAT16|INT(32|64)|UINT8|SUM|PROD|MIN|MAX|AVG|IN_PLACE)$'
done | sort -u >"$T_TMP/named"
unknown=$(comm -23 "$T_TMP/named" "$T_TMP/env" | tr '\n' ' ')
t_is "$unknown" "" "every DDL_* variable the man pages name is in common/ddl_env.def"

# ---------------------------------------------------------------- ddl-python(7)
# the page's tags name exactly the __all__ of ddl, ddl.checkpoint and
# ddl.torch (read from the sources: nothing needs to be importable)
py=$(command -v python3 || echo /usr/bin/python3)
if "$py" - "$top_srcdir/python/ddl" >"$T_TMP/want" 2>"$T_TMP/err" <<'EOF'
import ast, sys
for mod, prefix in (("__init__", "ddl."), ("checkpoint", "ddl.checkpoint."), ("torch", "ddl.torch.")):
    tree = ast.parse(open("%s/%s.py" % (sys.argv[1], mod)).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            for name in ast.literal_eval(node.value):
                print(prefix + name)
EOF
then
    sort -u -o "$T_TMP/want" "$T_TMP/want"
    awk '/^\.(TP|TQ)/ { if ((getline line) > 0) print line }' "$MAN/ddl-python.7" |
        grep -oE 'ddl(\.[A-Za-z_0-9]+)+' | sort -u >"$T_TMP/got"
    same "ddl-python(7) describes exactly the names the package exports (__all__)" \
        "$T_TMP/want" "$T_TMP/got"
else
    t_ok 1 "the __all__ lists of python/ddl are readable"
    t_diag "$(cat "$T_TMP/err")"
fi

# ---------------------------------------------------------------- libddl(3)
sed 's|/\*.*||' "$top_srcdir/collectives/include/ddl.h" |
    sed -nE 's/^[a-z].*[ *](ddl_[a-z0-9_]+)\(.*/\1/p' |
    sort -u >"$T_TMP/api"
grep -oE 'ddl_[a-z0-9_]+' "$MAN/libddl.3" | grep -vE '^ddl_(status|dtype|op|comm|request|mem|ckpt)_t$' |
    sort -u >"$T_TMP/named"
same "libddl(3) names every function of ddl.h, and no other" "$T_TMP/api" "$T_TMP/named"

# its example, as printed, compiles against this build and runs on 2 ranks
awk '/^\.EX/ { n++; next } /^\.EE/ { if (n == 1) exit } n == 1' "$MAN/libddl.3" |
    sed 's/\\e/\\/g; s/\\-/-/g' >"$T_TMP/ex.c"
# a sanitizer build's libddl needs its runtimes first in the program
san=
ldd "$top_builddir/collectives/.libs/libddl.so" 2>/dev/null | grep -q 'libasan\.so' &&
    san="-fsanitize=address,undefined"
# shellcheck disable=SC2086
if ${CC:-cc} $san -o "$T_TMP/ex" "$T_TMP/ex.c" -I"$top_srcdir/collectives/include" \
    -I"$top_builddir/collectives/include" -L"$top_builddir/collectives/.libs" -lddl \
    >"$T_TMP/cc" 2>&1; then
    t_ok 0 "libddl(3)'s example compiles"
    LD_LIBRARY_PATH="$top_builddir/collectives/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        t_run 60 "$DDLRUN" -n 2 "$T_TMP/ex"
    t_status "$?" 0 "ddlrun -n 2 runs libddl(3)'s example" "$T_TMP/err"
    sort "$T_TMP/out" >"$T_TMP/sorted"
    printf 'rank 0 of 2: sum 1\nrank 1 of 2: sum 1\n' >"$T_TMP/expect"
    same "the example prints each rank's sum" "$T_TMP/expect" "$T_TMP/sorted"
else
    t_ok 1 "libddl(3)'s example compiles"
    t_diag "$(head -20 "$T_TMP/cc")"
fi

t_done
