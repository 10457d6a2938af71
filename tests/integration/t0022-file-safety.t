#!/bin/sh
# t0022-file-safety.t: files and directories another user could redirect
# (docs/security.md, "Files and directories"), played with two throw-away
# users, an attacker and a victim (root only):
#   1. checkpoint directory: links planted by the attacker (a step
#      directory, the failure summary's temporary name) make the victim
#      neither remove nor overwrite files outside it;
#   2. runtime directory: the attacker taking /tmp/ddl-<victim uid> first
#      does not stop the victim's ddlrun, and `ddl-agent status` still finds
#      the victim's step;
#   3. root's `ddl-agent status`: an agent's terminal escape sequences are
#      printed escaped, and a planted link to another root-owned socket is
#      not followed.
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || t_skip_all "needs root to create throw-away users (useradd)"
FAKE_AGENT="$top_builddir/tests/helpers/fake-agent"
CKPT_CHECK="$top_builddir/tests/helpers/ckpt-check"
ATT=ddlt-attacker
VIC=ddlt-victim
for u in $ATT $VIC; do
    id -u $u >/dev/null 2>&1 ||
        useradd --system --no-create-home --shell /usr/sbin/nologin $u >/dev/null 2>&1 ||
        id -u $u >/dev/null 2>&1 || t_skip_all "useradd $u failed"
done
AUID=$(id -u $ATT)
VUID=$(id -u $VIC)
chmod 755 "$T_TMP"
# as USER CMD...: run with USER's ids and a clean environment (but for the
# sanitizer build's settings: scripts/sanitize.sh's suppressions)
as() {
    local u=$1
    shift
    setpriv --reuid="$u" --regid="$(id -g "$u")" --clear-groups -- \
        env -i PATH=/usr/bin:/bin HOME=/ \
        ${LSAN_OPTIONS+"LSAN_OPTIONS=$LSAN_OPTIONS"} ${ASAN_OPTIONS+"ASAN_OPTIONS=$ASAN_OPTIONS"} \
        ${UBSAN_OPTIONS+"UBSAN_OPTIONS=$UBSAN_OPTIONS"} \
        ${UCX_MEM_MALLOC_HOOKS+"UCX_MEM_MALLOC_HOOKS=$UCX_MEM_MALLOC_HOOKS"} \
        ${UCX_MEM_MMAP_HOOK_MODE+"UCX_MEM_MMAP_HOOK_MODE=$UCX_MEM_MMAP_HOOK_MODE"} "$@"
}
cleanup_tmp() { rm -rf "/tmp/ddl-$VUID" /tmp/ddl-"$VUID".*; }
cleanup_tmp
trap 'cleanup_tmp; t_cleanup' EXIT

# --- 1. the checkpoint directory -------------------------------------------
mkdir -p "$T_TMP/v/data"
echo precious >"$T_TMP/v/secret"
echo keep >"$T_TMP/v/data/file"
chown -R $VIC "$T_TMP/v"
chmod 700 "$T_TMP/v"
chmod 600 "$T_TMP/v/secret"
mkdir -m 777 "$T_TMP/shared"
chown $ATT "$T_TMP/shared"
as $ATT ln -s "$T_TMP/v/data" "$T_TMP/shared/step-00000099"
for g in 0 1 2; do as $ATT ln -s "$T_TMP/v/secret" "$T_TMP/shared/failure-gen$g.json.tmp"; done
as $VIC "$CKPT_CHECK" commit "$T_TMP/shared" >"$T_TMP/ck.out" 2>&1
t_is "$(cat "$T_TMP/v/data/file" 2>&1)" keep \
    "the victim's checkpoint cleanup removed nothing through the attacker's step-N link"
as $VIC "$DDLRUN" -n 1 --restarts 1 --checkpoint-dir "$T_TMP/shared" false \
    >"$T_TMP/run.out" 2>&1
t_is "$(cat "$T_TMP/v/secret")" precious \
    "the victim's failure summary did not overwrite its file through the attacker's link"
t_like "$T_TMP/ck.out" "owned by uid $AUID with mode 0777" \
    "the victim is told why the directory is refused"

# --- 2. the runtime directory ----------------------------------------------
cleanup_tmp
as $ATT mkdir -m 700 "/tmp/ddl-$VUID"
as $VIC "$DDLRUN" -n 1 true >"$T_TMP/dos.out" 2>&1
t_status $? 0 "ddlrun runs although another user took /tmp/ddl-$VUID" "$T_TMP/dos.out"
as $VIC "$DDLRUN" -n 1 sleep 4 >/dev/null 2>&1 &
vpid=$!
i=0
while [ $i -lt 30 ]; do
    as $VIC "$DDL_AGENT" status >"$T_TMP/st.out" 2>&1 && grep -q "^step local-" "$T_TMP/st.out" &&
        break
    sleep 0.2
    i=$((i + 1))
done
t_like "$T_TMP/st.out" "^step local-" "the victim's ddl-agent status finds its step"
wait $vpid
t_is "$(stat -c %U /tmp/ddl-"$VUID".* 2>/dev/null | sort -u)" "$VIC" \
    "... in a private /tmp/ddl-$VUID.XXXXXX of its own"

# --- 3. root's ddl-agent status --------------------------------------------
RT="$T_TMP/rt"
mkdir -m 1777 "$RT"
mkdir -m 700 "$T_TMP/rootsock"
"$FAKE_AGENT" "$T_TMP/rootsock/r.sock" "$T_TMP/root.log" >"$T_TMP/fa0" 2>&1 &
fa0=$!
as $ATT mkdir -m 700 "$RT/ddl-$AUID"
setpriv --reuid=$ATT --regid="$(id -g $ATT)" --clear-groups -- \
    "$FAKE_AGENT" "$RT/ddl-$AUID/evil.sock" /dev/null >"$T_TMP/fa1" 2>&1 &
fa1=$! # setpriv execs: the fake agent's pid
setpriv --reuid=$ATT --regid="$(id -g $ATT)" --clear-groups -- \
    "$FAKE_AGENT" "$RT/ddl-$AUID/evil2.sock" /dev/null esc >"$T_TMP/fa2" 2>&1 &
fa2=$!
trap 'kill $fa0 $fa1 $fa2 2>/dev/null; cleanup_tmp; t_cleanup' EXIT
for n in ddl-link ddl-0 ddl-$AUID.x; do as $ATT ln -s "$T_TMP/rootsock" "$RT/$n"; done
i=0
until grep -q ready "$T_TMP/fa0" && grep -q ready "$T_TMP/fa1" && grep -q ready "$T_TMP/fa2" ||
    [ $i -ge 50 ]; do
    sleep 0.1
    i=$((i + 1))
done
DDL_RUNTIME_DIR="$RT" "$DDL_AGENT" status >"$T_TMP/root.out" 2>&1
DDL_RUNTIME_DIR="$RT" "$DDL_AGENT" status --json >>"$T_TMP/root.out" 2>&1
t_is "$(LC_ALL=C grep -c "$(printf '\033\\|\233\\|\177')" "$T_TMP/root.out")" 0 \
    "root's ddl-agent status prints no control byte (ESC, CSI, DEL) an agent sent"
t_like "$T_TMP/root.out" 'x9b2J' "... but shows the C1 control escaped (table)"
t_like "$T_TMP/root.out" 'u009b2J' "... and in JSON"
t_like "$T_TMP/root.out" "evil2.sock: malformed STATUS message" \
    "a STATUS whose strings hold ESC is refused by the decoder (malformed)"
t_is "$(cat "$T_TMP/root.log" 2>/dev/null)" "" \
    "root's ddl-agent status did not follow the ddl-link to another root socket"
t_done
