#!/bin/sh
# t0011-config-check: `ddl-agent config --check FILE [--partition P]`: exit
# status 0 with the effective values for a valid file, 1 with "FILE:LINE:"
# for an invalid one, 2 for bad usage; and etc/ddl.conf, the installed
# example, is valid as shipped and with every key uncommented, and names
# every key that the check prints; the shipped file with a key set again at
# its end, or with a '${VAR}', is refused at the right line (after its many
# comments), whatever the environment.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
EXAMPLE="$top_srcdir/etc/ddl.conf"

t_run 10 "$DDL_AGENT" config --check "$EXAMPLE"
t_is $? 0 "etc/ddl.conf as shipped is valid"
t_like "$T_TMP/out" '^max_restarts = 10$' "... and prints the defaults"
grep -Eo '^(# )?[a-z_]+ ' "$T_TMP/out" | sed 's/^# //; s/ $//' >"$T_TMP/keys"
missing=0
while read -r key; do
    grep -q "^#$key = " "$EXAMPLE" || { t_diag "etc/ddl.conf lacks '$key'"; missing=1; }
done <"$T_TMP/keys"
t_ok $missing "etc/ddl.conf shows every key ($(wc -l <"$T_TMP/keys") keys), commented, with a value"

sed -e 's/^#\([a-z]\)/\1/' -e 's/^#\(    \)/\1/' -e 's/^#}/}/' "$EXAMPLE" >"$T_TMP/all.conf"
t_run 10 "$DDL_AGENT" config --check "$T_TMP/all.conf" --partition gpu
t_is $? 0 "etc/ddl.conf with every line uncommented is valid"
t_like "$T_TMP/out" '^max_restarts = 20$' "... its partition gpu overrides max_restarts"
t_like "$T_TMP/out" '^checkpoint_roots = \{"/scratch"\}$' "... and checkpoint_roots"
t_like "$T_TMP/out" '^ucx_tls = "rc,sm,self"$' "... and inherits ucx_tls"

printf 'node_timeout = 5\n\nmax_restarts = 500\n' >"$T_TMP/bad.conf"
t_run 10 "$DDL_AGENT" config --check "$T_TMP/bad.conf"
t_is $? 1 "an out-of-range value: exit status 1"
t_is "$(cat "$T_TMP/err")" \
    "ddl-agent: $T_TMP/bad.conf:3: max_restarts: 500 is out of range (0-100)" \
    "... with the file, line, key and range"
t_is "$(wc -c <"$T_TMP/out")" 0 "... and nothing on stdout"

cp "$T_TMP/all.conf" "$T_TMP/twice.conf"
echo 'checkpoint_roots = {"/"}' >>"$T_TMP/twice.conf"
last=$(wc -l <"$T_TMP/twice.conf")
first=$(grep -n '^checkpoint_roots' "$T_TMP/all.conf" | head -1 | cut -d: -f1)
t_run 10 "$DDL_AGENT" config --check "$T_TMP/twice.conf"
t_is $? 1 "a key set a second time at the end: exit status 1"
t_like "$T_TMP/err" "twice.conf:$last: checkpoint_roots is set a second time \\(first on line $first\\)" \
    "... naming both lines, counted through the file's comments"

cp "$EXAMPLE" "$T_TMP/env.conf"
echo 'log_dir = "${DDL_T_LOG}"' >>"$T_TMP/env.conf"
t_run 10 env DDL_T_LOG=/var/log "$DDL_AGENT" config --check "$T_TMP/env.conf"
t_is $? 1 "'\${VAR}' with VAR set: exit status 1"
t_like "$T_TMP/err" "env.conf:$(wc -l <"$T_TMP/env.conf"): '\\\$\\{' here would be replaced" \
    "... at its line: the environment is not read"

t_run 10 "$DDL_AGENT" config --check "$T_TMP/none.conf"
t_is $? 1 "a missing file: exit status 1"
t_like "$T_TMP/err" "none.conf: No such file or directory" "... naming the file"

t_run 10 "$DDL_AGENT" config
t_is $? 2 "no --check: exit status 2"
t_run 10 "$DDL_AGENT" config --check "$EXAMPLE" extra
t_is $? 2 "an extra argument: exit status 2"
t_run 10 "$DDL_AGENT" config --frobnicate
t_is $? 2 "an unknown option: exit status 2"
t_done
