#!/bin/sh
# t0002-ddlrun-exit: ddlrun's exit status and messages: success, the first
# failed rank's exit code or signal, bad usage (2), a missing program (127),
# the environment each rank gets, and --label.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
ulimit -c 0

t_run 30 "$DDLRUN" -n 3 true
t_is $? 0 "all ranks exit 0 -> ddlrun exits 0"

t_run 30 "$DDLRUN" -n 4 --grace 2 sh -c "[ \$RANK = 2 ] && exit 3; exec sleep 60 # $T_TOKEN"
t_is $? 3 "rank 2 exits 3 -> ddlrun exits 3"
t_like "$T_TMP/err" "generation 0: rank 2 on node 0 \([^)]*\): worker [0-9]+ exited with status 3 \[worker-exit\]; stopping the step \(exit status 3\): no restart allowed" \
    "... and the message names rank 2 and its status"

t_run 30 "$DDLRUN" -n 3 sh -c "[ \$RANK = 1 ] && kill -KILL \$\$; exec sleep 60 # $T_TOKEN"
t_is $? 137 "rank 1 killed by SIGKILL -> ddlrun exits 137"
t_like "$T_TMP/err" "rank 1 on node 0 \([^)]*\): worker [0-9]+ was killed by signal 9 \(SIGKILL\)" \
    "... and the message names rank 1 and SIGKILL"

t_run 30 "$DDLRUN" -n 2 sh -c "[ \$RANK = 0 ] && kill -SEGV \$\$; exec sleep 60 # $T_TOKEN"
t_is $? 139 "rank 0 killed by SIGSEGV -> ddlrun exits 139"

t_run 30 "$DDLRUN" -n 2 sh -c 'exit $((RANK + 4))'
rc=$?
t_ok $([ $rc = 4 ] || [ $rc = 5 ]; echo $?) "several failing ranks -> the first failure's status ($rc)"

t_run 10 "$DDLRUN" -n 2 ddl-no-such-program-$$
t_is $? 127 "missing program -> 127"
t_like "$T_TMP/err" "cannot execute 'ddl-no-such-program-$$'" "... with a message naming it"

for args in "" "-n" "-n 0 true" "-n x true" "-n 5000 true" "-n 2" "--bogus -n 1 true" \
            "--grace never -n 1 true"; do
    # shellcheck disable=SC2086
    t_run 10 "$DDLRUN" $args
    rc=$?
    t_is $rc 2 "bad usage 'ddlrun $args' -> exit 2"
    t_like "$T_TMP/err" "^ddlrun: .+" "... with a message"
done
t_run 10 "$DDLRUN" -n x true
t_like "$T_TMP/err" "^ddlrun: -n: 'x' is not a number of ranks \(1-4096\)$" \
    "the message names the option, the value and the range"

t_run 10 "$DDLRUN" --help
t_is $? 0 "--help exits 0"
t_like "$T_TMP/out" "usage: ddlrun -n N" "--help prints the usage"

t_run 30 "$DDLRUN" -n 3 sh -c 'echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $NODE_RANK $DDL_RANK $DDL_SIZE $MASTER_ADDR $MASTER_PORT"'
t_is $? 0 "environment probe runs"
t_is "$(cut -d' ' -f1-7 "$T_TMP/out" | sort | tr '\n' '|')" "0 3 0 3 0 0 3|1 3 1 3 0 1 3|2 3 2 3 0 2 3|" \
    "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, DDL_RANK, DDL_SIZE per rank"
t_is "$(awk '{print $8}' "$T_TMP/out" | sort -u)" "127.0.0.1" "MASTER_ADDR is 127.0.0.1"
t_is "$(awk '{print $9}' "$T_TMP/out" | sort -u | wc -l)" 1 "MASTER_PORT is the same on every rank"

MASTER_PORT=4242 t_run 30 "$DDLRUN" -n 2 sh -c 'echo $MASTER_PORT'
t_is "$(sort -u "$T_TMP/out")" 4242 "a user's MASTER_PORT wins"

t_run 30 "$DDLRUN" -n 2 --label sh -c 'echo out $RANK; echo err $RANK >&2; printf tail'
t_is $? 0 "--label run succeeds"
t_is "$(sort "$T_TMP/out" | tr '\n' '|')" "[0] out 0|[0] tail|[1] out 1|[1] tail|" \
    "--label prefixes stdout lines, including an unterminated last line"
t_is "$(sort "$T_TMP/err" | tr '\n' '|')" "[0] err 0|[1] err 1|" "--label prefixes stderr lines"

t_run 30 "$DDLRUN" -n 1 sh -c 'cat; echo done'
t_is "$(cat "$T_TMP/out")" "done" "ranks read /dev/null as standard input"
t_done
