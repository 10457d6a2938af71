#!/bin/sh
# t0025-env-doc: the table of DDL_* variables in docs/user-guide.md is the
# one common/ddl_env.def gives (printed by tests/helpers/env-doc), and every
# DDL_* name the sources set or read is in that table.  `make env-doc`
# rewrites the guide's table.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

guide="$top_srcdir/docs/user-guide.md"
"$top_builddir/tests/helpers/env-doc" >"$T_TMP/table" ||
    { echo "Bail out! tests/helpers/env-doc failed"; exit 1; }
sed -n '/^<!-- BEGIN ddl_env.def/,/^<!-- END ddl_env.def/p' "$guide" | sed '1d;$d' >"$T_TMP/doc"
if [ -s "$T_TMP/doc" ] && cmp -s "$T_TMP/table" "$T_TMP/doc"; then
    t_ok 0 "docs/user-guide.md's table of variables is common/ddl_env.def's"
else
    t_ok 1 "docs/user-guide.md's table of variables is common/ddl_env.def's"
    t_diag "run 'make env-doc' to rewrite it; the differences:"
    t_diag "$(diff "$T_TMP/doc" "$T_TMP/table" | head -20)"
fi

# every "DDL_X" string literal in the programs and libraries is a variable
# of the table (the status and operation names DDL_OK, DDL_STOP, DDL_RESTART, DDL_ERR_*, DDL_AVG... aside)
cut -d'`' -f2 "$T_TMP/table" | grep '^DDL_' | sort -u >"$T_TMP/names"
(cd "$top_srcdir" && grep -rhoE '"DDL_[A-Z0-9_]+' collectives launcher agent plugins common \
    examples --include='*.c' --include='*.h' --include='*.cu') | tr -d '"' |
    grep -vE '^DDL_(OK|ERR_.*|INPROGRESS|STOP|RESTART|BIND_|SUM|AVG|PROD|MIN|MAX)$' | sort -u >"$T_TMP/used"
missing=$(comm -23 "$T_TMP/used" "$T_TMP/names" | tr '\n' ' ')
t_ok "$([ -z "$missing" ] && echo 0 || echo 1)" "every DDL_* variable the sources use is in common/ddl_env.def"
[ -z "$missing" ] || t_diag "not in the table: $missing"
t_done
