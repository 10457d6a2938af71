#!/bin/sh
# t0031-slurm-ops: what ddl.conf and --ddl-verbose do in a `srun --ddl` step
# on the 2-node namespace cluster, with
#     ucx_tls = "tcp,self", log_level = "info", log_dir = DIR/logs,
#     metrics_dir = DIR/metrics (mode 1777):
#
#  1. every task has UCX_TLS=tcp,self and DDL_LOG_LEVEL=info, unless the
#     user set them (then the user's), DDL_LOG_DIR=DIR/logs/0 and
#     DDL_METRICS_DIR; the agents log at info level;
#  2. log_dir: the plugin made DIR/logs (0755, root's) and DIR/logs/0
#     (0700); each node's agent and ddl-launch wrote
#     step-JOB.STEP.NODE.log (0600), lines with the time and the pid, no
#     debug lines;
#  3. --ddl-verbose: srun prints the step's settings, the tasks get
#     DDL_LOG_LEVEL=debug, debug lines of ddl-launch and ddl-agent reach the
#     job's stderr and the step's log files;
#  4. metrics_dir: while a step beats its steps, both nodes' agents keep
#     ddl-JOB.STEP-NODE.prom there, which prometheus_client parses (the
#     leader's link up to n2, n2's up to the leader, each node's rank
#     running with a step and a rate), `ddl-agent status --prometheus`
#     inside n1 says the same; at the end: step inactive, ranks exited;
#  5. as an ordinary user (ddltest): the log directory DIR/logs/UID, the
#     log files and the metrics files are the user's;
#  6. a symbolic link planted at DIR/logs/UID is not followed (the step is
#     refused, the link's target keeps its owner); a log_dir that others
#     may write refuses --ddl steps;
#  7. a task that fails before the bootstrap's PMIx fence (its runtime
#     directory refused on n2): the other node's task gives up at the fence
#     after DDL_BOOTSTRAP_TIMEOUT instead of waiting for the time limit.
#
# Skips like t0015 (root, Slurm, munge, the plugin), and the prometheus
# and ordinary-user parts without python3-prometheus-client or useradd.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
. "$top_srcdir/tests/slurm/lib-cluster.sh"
D="/var/tmp/ddl-cluster.$$"
LOGS="$D/logs"
MX="$D/metrics"
OTHER=ddltest
cl_init "$D" 2 "max_restarts = 5
ucx_tls = \"tcp,self\"
log_level = \"info\"
log_dir = \"$LOGS\"
metrics_dir = \"$MX\""
cl_start
unset UCX_TLS DDL_LOG_LEVEL DDL_LOG_DIR DDL_METRICS_DIR MASTER_ADDR MASTER_PORT
mkdir -m 1777 "$MX" && chmod 1777 "$MX"
SCR="$D/scripts" # the workers' scripts, readable by the ordinary user
mkdir -m 0755 "$SCR"
cat >"$SCR/env.sh" <<'EOF'
echo "$(hostname) UCX_TLS=${UCX_TLS-} LEVEL=${DDL_LOG_LEVEL-} LOG=${DDL_LOG_DIR-} MX=${DDL_METRICS_DIR-}"
EOF
# beat.sh: the next step every 0.1 s until DIR/stop exists (at most 300)
cat >"$SCR/beat.sh" <<EOF
i=1
while [ \$i -le 300 ] && [ ! -e "$D/stop" ]; do
    "$DDL_AGENT" heartbeat \$i || exit 1
    sleep 0.1
    i=\$((i + 1))
done
EOF
chmod 0644 "$SCR"/*.sh
SRUN="srun --mpi=pmix -N2 -n2 --ddl"

# step_files DIR SUFFIX: the files of the last step (highest job id) in DIR
step_files() { ls "$1" 2>/dev/null | grep "$2\$" | sort -t- -k2 -n | tail -n 2 | tr '\n' ' '; }

# --- 1. the tasks' environment -------------------------------------------------
t_run 60 $SRUN sh "$SCR/env.sh"
t_status $? 0 "srun --ddl with ucx_tls, log_level, log_dir and metrics_dir set runs" "$T_TMP/err"
FILES1=$(step_files "$LOGS/0" .log) # its log files (section 2)
t_is "$(sort "$T_TMP/out" | tr '\n' ';')" \
    "n1 UCX_TLS=tcp,self LEVEL=info LOG=$LOGS/0 MX=$MX;n2 UCX_TLS=tcp,self LEVEL=info LOG=$LOGS/0 MX=$MX;" \
    "... every task: UCX_TLS from ucx_tls, DDL_LOG_LEVEL from log_level, DDL_LOG_DIR, DDL_METRICS_DIR"
UCX_TLS=sm,self DDL_LOG_LEVEL=warn t_run 60 $SRUN sh "$SCR/env.sh"
t_is "$(awk '{print $2, $3}' "$T_TMP/out" | sort -u | tr '\n' ';')" "UCX_TLS=sm,self LEVEL=warn;" \
    "... the user's own UCX_TLS and DDL_LOG_LEVEL are kept"

# --- 2. log_dir ------------------------------------------------------------------
t_is "$(stat -c '%a %u' "$LOGS" "$LOGS/0" 2>&1 | tr '\n' ' ')" "755 0 700 0 " \
    "log_dir made by the plugin (0755, root's), and root's own directory in it (0700)"
files=$FILES1
t_diag "log files of the first step: $files"
t_is "$(echo "$files" | sed 's/step-[0-9]*\.[0-9]*\./step-J.S./g')" "step-J.S.n1.log step-J.S.n2.log " \
    "... one log file per node of the step: step-JOB.STEP.NODE.log"
set -- $files
L1="$LOGS/0/$1"
L2="$LOGS/0/$2"
t_is "$(stat -c '%a %u %h' "$L1" "$L2" 2>&1 | tr '\n' ' ')" "600 0 1 600 0 1 " \
    "... mode 0600, the job owner's, one link"
t_like "$L1" '^\[[0-9]+\.[0-9]{3}\] \[[0-9]+\] ddl-agent: serving step [0-9]+\.[0-9]+ \(2 ranks, 1 here, node 0 of 2, leader\)' \
    "... n1's: its agent's info line, with the time and the pid"
t_like "$L2" 'ddl-agent: serving step [0-9]+\.[0-9]+ \(2 ranks, 1 here, node 1 of 2\)' "... n2's: its agent's"
t_is "$(cat "$L1" "$L2" | grep -c 'debug:')" 0 "... and no debug line (log_level info)"

# --- 3. --ddl-verbose ------------------------------------------------------------
t_run 60 $SRUN --ddl-verbose sh -c 'echo "$DDL_LOG_LEVEL"'
t_status $? 0 "srun --ddl --ddl-verbose runs" "$T_TMP/err"
t_is "$(tr '\n' ' ' <"$T_TMP/out")" "debug debug " "... its tasks get DDL_LOG_LEVEL=debug"
t_like "$T_TMP/err" "ddl: settings of this step \($CL_CONF\): restarts 5, spares 0, min nodes 0, heartbeat 0.1 s, node timeout 2 s, hang timeout 3600 s, bind auto, checkpoint dir \(none\), log level debug, log dir $LOGS, metrics dir $MX, UCX_TLS tcp,self$" \
    "... srun prints the step's settings"
t_like "$T_TMP/err" '^ddl-launch: debug: ' "... ddl-launch's debug lines reach the job's stderr"
t_like "$T_TMP/err" '^ddl-agent: debug: ' "... and the agents'"
set -- $(step_files "$LOGS/0" .log)
t_is "$(cat "$LOGS/0/$1" "$LOGS/0/$2" | grep -Ec '\] ddl-launch: debug: rank [01] of 2: node [01] of 2')" 2 \
    "... and its log files hold the debug lines of both nodes' ddl-launch"
t_like "$LOGS/0/$1" '\] ddl-agent: debug: ' "... and of the agents"

# --- 4. metrics_dir ---------------------------------------------------------------
PROM=0
t_prom_python >/dev/null && PROM=1
if [ $PROM = 1 ]; then
    rm -f "$D/stop"
    timeout -k 5 90 $SRUN -J "$T_TOKEN" sh "$SCR/beat.sh" >"$T_TMP/beat.out" 2>"$T_TMP/beat.err" &
    run=$!
    i=0
    while [ $i -lt 150 ]; do
        set -- $(step_files "$MX" .prom)
        if [ $# = 2 ] && t_prom_parse "$MX/$1" && [ -n "$(t_prom_value ddl_rank_iterations_per_second)" ] &&
            t_prom_parse "$MX/$2" && [ -n "$(t_prom_value ddl_rank_iterations_per_second)" ]; then
            break
        fi
        sleep 0.2
        i=$((i + 1))
    done
    t_is "$(echo "$*" | sed 's/ddl-[0-9]*\.[0-9]*-/ddl-J.S-/g')" "ddl-J.S-n1.prom ddl-J.S-n2.prom" \
        "metrics_dir: each node's agent keeps ddl-JOB.STEP-NODE.prom during the step"
    P1="$MX/$1"
    P2="$MX/$2"
    t_is "$(stat -c '%a %u' "$P1" "$P2" | tr '\n' ' ')" "644 0 644 0 " "... mode 0644, the job owner's"
    t_prom_parse "$P1"
    t_is "$?:$(grep -c '^PROBLEM' "$T_TMP/samples")" "0:0" "... n1's parses, names and labels right"
    t_is "$(t_prom_value ddl_agent_info leader=1,node=n1,node_id=0) $(t_prom_value ddl_links state=up) $(t_prom_value ddl_ranks state=running) $(t_prom_value ddl_world_ranks)" \
        "1.0 1.0 1.0 2.0" "... n1 leads, its link to n2 is up, its rank runs, a world of 2"
    t_ok "$(awk -v s="$(t_prom_value ddl_rank_step rank=0)" -v r="$(t_prom_value ddl_rank_iterations_per_second rank=0)" \
        'BEGIN { exit !(s >= 1 && r > 0) }'; echo $?)" "... rank 0's step and its steps per second"
    t_prom_parse "$P2"
    t_is "$(t_prom_value ddl_agent_info leader=0,node=n2,node_id=1) $(t_prom_value ddl_links state=up) $(t_prom_value ddl_ranks state=running)" \
        "1.0 1.0 1.0" "... n2's: not the leader, its link to the leader up, its rank runs"
    t_ok "$([ -n "$(t_prom_value ddl_rank_step rank=1)" ]; echo $?)" "... with rank 1's step"
    on_node n1 "$DDL_AGENT" status --prometheus >"$T_TMP/n1.prom" 2>"$T_TMP/n1.err"
    t_is $? 0 "ddl-agent status --prometheus inside n1 exits 0"
    t_prom_parse "$T_TMP/n1.prom"
    t_is "$?:$(t_prom_value ddl_agent_info leader=1,node=n1):$(t_prom_value ddl_ranks state=running)" \
        "0:1.0:1.0" "... and parses: n1's agent, leader, its rank running"
    touch "$D/stop"
    wait $run
    t_status $? 0 "the step ends (exit 0)" "$T_TMP/beat.err"
    t_prom_parse "$P1"
    a1="$(t_prom_value ddl_step_active) $(t_prom_value ddl_ranks state=exited)"
    t_prom_parse "$P2"
    t_is "$a1 $(t_prom_value ddl_step_active) $(t_prom_value ddl_ranks state=exited)" \
        "0.0 1.0 0.0 1.0" "... both files end with the step inactive and the rank exited"
else
    for i in $(seq 11); do t_skip "no python3 with prometheus_client (python3-prometheus-client)"; done
fi

# --- 5. an ordinary user ----------------------------------------------------------
if ! id -u $OTHER >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin $OTHER >/dev/null 2>&1 ||
        id -u $OTHER >/dev/null 2>&1
fi
if OTHER_UID=$(id -u $OTHER 2>/dev/null); then
    # srun reads ddl.conf as the user
    chmod 0711 "$T_TMP"
    chmod 0644 "$CL_CONF"
    as_user() { runuser -u $OTHER -- env -C / "$@"; }
    rm -f "$D/stop"
    touch "$D/stop" # a short step: one beat
    as_user timeout -k 5 60 $SRUN sh "$SCR/beat.sh" >"$T_TMP/u.out" 2>"$T_TMP/u.err"
    t_status $? 0 "$OTHER's srun --ddl step runs" "$T_TMP/u.err"
    t_is "$(stat -c '%a %U' "$LOGS/$OTHER_UID" 2>&1)" "700 $OTHER" \
        "... its log directory $LOGS/UID is $OTHER's, mode 0700"
    set -- $(step_files "$LOGS/$OTHER_UID" .log)
    t_is "$# $(cd "$LOGS/$OTHER_UID" && stat -c '%a %U' "$@" | sort -u)" "2 600 $OTHER" \
        "... both nodes' log files are $OTHER's, mode 0600"
    set -- $(step_files "$MX" .prom)
    t_is "$(cd "$MX" && stat -c '%a %U' "$@" | sort -u)" "644 $OTHER" \
        "... and the metrics files of its step are $OTHER's"

    # --- 6. refusals -----------------------------------------------------------------
    rm -rf "${LOGS:?}/$OTHER_UID"
    mkdir -m 0755 "$D/target"
    ln -s "$D/target" "$LOGS/$OTHER_UID"
    as_user timeout -k 5 60 $SRUN true >"$T_TMP/u.out" 2>"$T_TMP/u.err"
    t_ok "$([ $? -ne 0 ]; echo $?)" "a link planted at $LOGS/UID: $OTHER's --ddl step is refused"
    t_is "$(stat -c '%U %a' "$D/target")" "root 755" "... the link is not followed (its target unchanged)"
    t_ok "$(cat "$T_TMP/u.err" "$CL_DIR"/log/slurmd-n*.log | grep -q "ddl: cannot prepare $LOGS/$OTHER_UID for uid $OTHER_UID: it is a symbolic link, which ddl does not follow"; echo $?)" \
        "... with a message naming it"
    grep -h "ddl: " "$T_TMP/u.err" "$CL_DIR"/log/slurmd-n*.log | tail -n 3 | sed 's/^/# /'
    rm -f "$LOGS/$OTHER_UID"
else
    for i in $(seq 7); do t_skip "no user $OTHER and useradd failed"; done
fi
# --- 7. a task that fails before the bootstrap's fence ---------------------------
# DDL_RUNTIME_DIR names a directory in each node's own /tmp; n2's is open to
# everyone, so n2's ddl-launch refuses it and exits before the PMIx fence.
# Slurm's PMIx plugin passes the fence between nodes without a timeout, so
# n1's task, whose node completed its part, used to wait there until the
# job's time limit; it gives up after DDL_BOOTSTRAP_TIMEOUT (+5 s).
RT=/tmp/ddl-rt.$$
mkdir -p "$CL_DIR/nodes/n1$RT" "$CL_DIR/nodes/n2$RT/ddl-0" && chmod 0777 "$CL_DIR/nodes/n2$RT/ddl-0"
t0=$(date +%s)
DDL_RUNTIME_DIR=$RT DDL_BOOTSTRAP_TIMEOUT=5 t_run 60 $SRUN true
rc=$? took=$(($(date +%s) - t0))
t_ok "$([ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ]; echo $?)" \
    "a task fails before the bootstrap's fence: the step ends (srun exited $rc after $took s; 124: hung)"
t_like "$T_TMP/err" "is not a private directory of uid 0" "... n2's task says why it failed"
t_like "$T_TMP/err" "PMIx_Fence over the step's 2 tasks did not complete in 10 s \(DDL_BOOTSTRAP_TIMEOUT\): a task of the step never reached it" \
    "... n1's task gives up waiting for it at the fence"
rm -rf "$CL_DIR/nodes/n1$RT" "$CL_DIR/nodes/n2$RT"

mkdir -m 1777 "$D/open" && chmod 1777 "$D/open"
sed -i "s|^log_dir = .*|log_dir = \"$D/open\"|" "$CL_CONF"
t_run 60 $SRUN true
t_ok "$([ $? -ne 0 ]; echo $?)" "a log_dir others may write (1777): --ddl steps are refused"
t_ok "$(cat "$T_TMP/err" "$CL_DIR"/log/slurmd-n*.log | grep -q "ddl: log_dir $D/open is owned by uid 0 with mode 1777: it must be root's and writable by nobody else"; echo $?)" \
    "... saying why"

sh "$CLUSTER" stop "$CL_DIR"
t_is $? 0 "the cluster stops"
trap t_cleanup EXIT
t_done
