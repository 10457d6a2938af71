#!/bin/sh
# t0024-limits: the readers of ddl's shared limits (common/ddl_limits.h)
# other than ddlrun and the plugin (unit tests t_ddlrun_args and
# t_spank_opts): `ddl-agent serve`'s options, ddl.conf (`ddl-agent config
# --check`) and ddl-launch's DDL_GRACE_MS and DDL_HANG_TIMEOUT_MS accept
# each limit and refuse one past it, naming the range.  The numbers come
# from ddl_limits.h itself.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

limit() { # limit NAME: the value of #define NAME in ddl_limits.h
    v=$(sed -n "s/^#define $1 \([0-9][0-9]*\)\$/\1/p" "$top_srcdir/common/ddl_limits.h")
    [ -n "$v" ] || { echo "Bail out! no $1 in common/ddl_limits.h"; exit 1; }
    echo "$v"
}
MAX_NODES=$(limit DDL_MAX_NODES)
MAX_RANKS=$(limit DDL_MAX_RANKS)
MAX_RESTARTS=$(limit DDL_MAX_RESTARTS)
NT_MIN=$(limit DDL_NODE_TIMEOUT_MIN_MS)
NT_MAX=$(limit DDL_NODE_TIMEOUT_MAX_MS)
HB_MIN_MS=$(limit DDL_HEARTBEAT_MIN_MS)
HB_MAX_MS=$(limit DDL_HEARTBEAT_MAX_MS)
HANG_MAX_S=$(limit DDL_HANG_TIMEOUT_MAX_S)
GRACE_MAX=$(limit DDL_GRACE_MAX_MS)

# serve OPTION GOOD BAD RANGE: ddl-agent serve parses OPTION GOOD (and then
# asks for the options it lacks) but refuses OPTION BAD, naming RANGE.
serve() {
    t_run 10 "$DDL_AGENT" serve "$1" "$2"
    if [ $? -eq 2 ] && grep -q -- "--socket, --step and --size are required" "$T_TMP/err"; then
        t_ok 0 "ddl-agent serve $1 $2 is accepted"
    else
        t_ok 1 "ddl-agent serve $1 $2 is accepted"
        t_diag "$(cat "$T_TMP/err")"
    fi
    t_run 10 "$DDL_AGENT" serve "$1" "$3"
    if [ $? -eq 2 ] && grep -qF -- "$4" "$T_TMP/err"; then
        t_ok 0 "ddl-agent serve $1 $3 is refused, naming $4"
    else
        t_ok 1 "ddl-agent serve $1 $3 is refused, naming $4"
        t_diag "$(cat "$T_TMP/err")"
    fi
}
serve --spares "$MAX_NODES" $((MAX_NODES + 1)) "(0-$MAX_NODES)"
serve --min-nodes "$MAX_NODES" $((MAX_NODES + 1)) "(0-$MAX_NODES)"
serve --nnodes "$MAX_NODES" $((MAX_NODES + 1)) "(1-$MAX_NODES)"
serve --nnodes 1 0 "(1-$MAX_NODES)"
serve --node-id $((MAX_NODES - 1)) "$MAX_NODES" "(0-$((MAX_NODES - 1)))"
serve --size "$MAX_RANKS" $((MAX_RANKS + 1)) "(1-$MAX_RANKS)"
serve --restarts "$MAX_RESTARTS" $((MAX_RESTARTS + 1)) "(0-$MAX_RESTARTS)"
serve --crash-loop "$MAX_RESTARTS" $((MAX_RESTARTS + 1)) "(0-$MAX_RESTARTS)"
serve --node-timeout "$NT_MIN" $((NT_MIN - 1)) "($NT_MIN-$NT_MAX)"
serve --node-timeout "$NT_MAX" $((NT_MAX + 1)) "($NT_MIN-$NT_MAX)"
serve --heartbeat "$HB_MIN_MS" $((HB_MIN_MS - 1)) "($HB_MIN_MS-$HB_MAX_MS)"
serve --heartbeat "$HB_MAX_MS" $((HB_MAX_MS + 1)) "($HB_MIN_MS-$HB_MAX_MS)"
DDL_DETECTOR=sometimes t_run 10 "$DDL_AGENT" serve --socket "$T_TMP/s" --step t --size 1
rc=$?
if [ $rc -eq 2 ] && grep -q "DDL_DETECTOR" "$T_TMP/err" && grep -q "adaptive" "$T_TMP/err"; then
    t_ok 0 "ddl-agent serve refuses DDL_DETECTOR=sometimes, naming adaptive and fixed"
else
    t_ok 1 "ddl-agent serve refuses DDL_DETECTOR=sometimes, naming adaptive and fixed"
    t_diag "rc $rc: $(cat "$T_TMP/err")"
fi

# conf KEY GOOD BAD RANGE [OTHER LINES]: ddl.conf takes KEY = GOOD, refuses BAD
conf() {
    key=$1 good=$2 bad=$3 range=$4
    shift 4
    { printf '%s\n' "$@"; echo "$key = $good"; } >"$T_TMP/good.conf"
    t_run 10 "$DDL_AGENT" config --check "$T_TMP/good.conf"
    t_status $? 0 "ddl.conf: $key = $good is valid" "$T_TMP/err"
    { printf '%s\n' "$@"; echo "$key = $bad"; } >"$T_TMP/bad.conf"
    t_run 10 "$DDL_AGENT" config --check "$T_TMP/bad.conf"
    if [ $? -ne 0 ] && grep -qF -- "$key: $bad is out of range $range" "$T_TMP/err"; then
        t_ok 0 "ddl.conf: $key = $bad is refused, naming $range"
    else
        t_ok 1 "ddl.conf: $key = $bad is refused, naming $range"
        t_diag "$(cat "$T_TMP/err")"
    fi
}
conf node_timeout $((NT_MAX / 1000)) $((NT_MAX / 1000 + 1)) "(1-$((NT_MAX / 1000)))"
# heartbeat_interval is seconds with decimals: the range in seconds
HB_RANGE="($(awk "BEGIN{print $HB_MIN_MS/1000}")-$(awk "BEGIN{print $HB_MAX_MS/1000}") seconds)"
conf heartbeat_interval "$((HB_MAX_MS / 1000))" $((HB_MAX_MS / 1000 + 1)) "$HB_RANGE" "node_timeout = $((NT_MAX / 1000))"
conf heartbeat_interval "$(awk "BEGIN{print $HB_MIN_MS/1000}")" "$(awk "BEGIN{print ($HB_MIN_MS-1)/1000}")" "$HB_RANGE"
conf max_restarts "$MAX_RESTARTS" $((MAX_RESTARTS + 1)) "(0-$MAX_RESTARTS)"
conf hang_timeout_max "$HANG_MAX_S" $((HANG_MAX_S + 1)) "(1-$HANG_MAX_S)"

# launch VAR GOOD BAD RANGE: ddl-launch (alone, running true) takes VAR=GOOD
# and refuses VAR=BAD with exit 2, naming RANGE.
launch() {
    t_run 10 env "$1=$2" "$DDL_LAUNCH" -- true
    t_status $? 0 "ddl-launch with $1=$2 runs its program" "$T_TMP/err"
    t_run 10 env "$1=$3" "$DDL_LAUNCH" -- true
    if [ $? -eq 2 ] && grep -qF -- "$4" "$T_TMP/err"; then
        t_ok 0 "ddl-launch refuses $1=$3, naming $4"
    else
        t_ok 1 "ddl-launch refuses $1=$3, naming $4"
        t_diag "$(cat "$T_TMP/err")"
    fi
}
unset DDL_RANK DDL_AGENT_SOCK DDL_GRACE_MS DDL_HANG_TIMEOUT_MS SLURM_STEP_ID SLURM_PROCID
launch DDL_GRACE_MS "$GRACE_MAX" $((GRACE_MAX + 1)) "(0-$GRACE_MAX)"
launch DDL_HANG_TIMEOUT_MS $((HANG_MAX_S * 1000)) $((HANG_MAX_S * 1000 + 1)) "(0-$((HANG_MAX_S * 1000)))"
t_done
