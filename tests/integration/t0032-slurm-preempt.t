#!/bin/sh
# t0032-slurm-preempt: a batch job that hits its time limit stops at a
# checkpoint and is requeued, on the 2-node namespace cluster.
#
# sbatch --time=2 --signal=USR1@40 --requeue runs fmnist-train under
# `srun --ddl` (2 tasks per node), paced (--pace) so that it would train for
# longer than the 2-minute limit.  Slurm checks time limits every 30 s, so
# it sends SIGUSR1 40 to 70 s before the limit (50 to 80 s into each run),
# to every process of the step: the agents stop every rank at one
# step boundary, each commits the checkpoint of that step and exits 94, srun
# exits 94 and the batch script (docs/slurm.md's recipe) requeues the job
# with `scontrol requeue`.  Slurm holds a requeued job for its credential
# lifetime (AuthInfo cred_expire, 121 s by default): the test starts it 5 s
# after the requeue (`scontrol update StartTime=now`; within the second of
# the requeue, Slurm kills the new run at launch: "Job credential revoked",
# which once ended the job after its first stop in CI).  Each run resumes from the
# checkpoint the previous one committed at the stop (its step is not a
# periodic one's unless by chance: it is the step the stop line names), and
# the last run ends with the same weights as an uninterrupted run
# (`ddlrun -n 4` on the host, the same ranks and allreduce algorithm).
# Nothing of the job is left on the nodes.
#
# The 40 s leave room for the stop, srun's exit and `scontrol requeue`
# under load: with --signal=USR1@10 the signal can come 10 s before the
# limit.  The job's states are followed and printed when it does not
# finish, with slurmctld's lines about it.
#
# Skips when not root, Slurm, the plugin, fmnist-train or the Fashion-MNIST
# data are missing.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"

DATA=${DDL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -x "$FMNIST" ] || t_skip_all "fmnist-train not built (configure found no OpenBLAS)"
[ -r "$DATA/train-images-idx3-ubyte.gz" ] || t_skip_all "no Fashion-MNIST in $DATA"
# 376 steps (2 epochs of 188 batches of 64), 300 ms each: 113 s, past the
# latest signal (80 s into a run)
ARGS="--epochs 2 --limit 12000 --batch 64 --checkpoint-every 50"
PACE=300

# the reference, never stopped: 4 ranks on the host
export DDL_ALLREDUCE_ALGO=ring
# shellcheck disable=SC2086 # ARGS: several words
t_run 180 "$DDLRUN" -n 4 "$FMNIST" $ARGS --checkpoint-dir "$T_TMP/ref"
t_is $? 0 "the reference: ddlrun -n 4 fmnist-train exits 0"
ref=$(t_checksums "$T_TMP/out")
t_ok $([ -n "$ref" ]; echo $?) "... its replicas agree ($ref)"

. "$top_srcdir/tests/slurm/lib-cluster.sh"
cl_init "/var/tmp/ddl-cluster.$$" 2 'checkpoint_roots = {"/var/tmp"}'
cl_start
CK=/var/tmp/ddl-ck.$$
trap 'sh "$CLUSTER" stop "$CL_DIR" >/dev/null 2>&1; rm -rf "$CK"; t_cleanup' EXIT
export UCX_TLS=tcp,self
unset MASTER_ADDR MASTER_PORT

# The batch script: docs/slurm.md's recipe.  A run that ends with 94 was
# stopped at a committed checkpoint: requeue the job.
LOG="$T_TMP/runs"
cat >"$T_TMP/job.sh" <<EOF
#!/bin/sh
srun --mpi=pmix --ddl "$FMNIST" $ARGS --pace $PACE --checkpoint-dir "$CK"
rc=\$?
echo "run \${SLURM_RESTART_COUNT:-0}: srun exited \$rc" >>"$LOG"
if [ \$rc -eq 94 ]; then
    scontrol requeue "\$SLURM_JOB_ID" 2>>"$LOG.requeue"
    echo "run \${SLURM_RESTART_COUNT:-0}: scontrol requeue exited \$?" >>"$LOG.requeue"
fi
exit \$rc
EOF
job=$(sbatch --parsable -N2 --ntasks-per-node=2 --time=2 --signal=USR1@40 --requeue \
    --open-mode=append -o "$T_TMP/job.out" -J "$T_TOKEN" "$T_TMP/job.sh" 2>"$T_TMP/sbatch.err")
t_ok $([ -n "$job" ]; echo $?) "sbatch --time=2 --signal=USR1@40 --requeue: job ${job:-?}"
[ -n "$job" ] || { sed 's/^/# /' "$T_TMP/sbatch.err"; t_done; }

# Follow the job until a run ends other than with 94 (at most 12 minutes):
# a requeued job waits for its begin time; start it now.  A run trains 160
# to 260 steps before the signal: the job takes 2 or 3 runs of 1 to 1.5
# minutes each (requeue and start included).  Every change of the job's
# state is kept (STATES); a job gone from the queue for 30 s without a
# final run is not waited for.
STATES="$T_TMP/states"
t_begin=$(date +%s)
gone=0 held=""
while [ $(($(date +%s) - t_begin)) -lt 720 ]; do
    grep -qv 'exited 94$' "$LOG" 2>/dev/null && break
    st=$(squeue -h -j "$job" -o '%T %r' 2>/dev/null)
    [ "$st" = "$(tail -n 1 "$STATES" 2>/dev/null | cut -d' ' -f2-)" ] ||
        echo "$(($(date +%s) - t_begin))s ${st:-(not in the queue)}" >>"$STATES"
    case $st in
    "PENDING BeginTime")
        # not at once: the requeue revoked the job's credential, to the
        # second, and a run started within that second is killed at launch
        # ("Killing non-startable batch JobId=1: Job credential revoked")
        [ -n "$held" ] || held=$(date +%s)
        [ $(($(date +%s) - held)) -lt 5 ] || scontrol update JobId="$job" StartTime=now ;;
    "") grep -q . "$LOG" 2>/dev/null || break # gone without a run: below
        held=""
        [ $((gone += 1)) -ge 15 ] && break ;;
    *) held="" gone=0 ;;
    esac
    sleep 2
done
took=$(($(date +%s) - t_begin))
t_diag "$(sed 's/^/runs: /' "$LOG" 2>/dev/null)" "after $took s"
why=""
if ! grep -q 'exited 0$' "$LOG" 2>/dev/null; then
    sed 's/^/# job state: /' "$STATES"
    grep -E "JobId=$job([^0-9]|$)" "$CL_DIR/log/slurmctld.log" | tail -n 20 | sed 's/^/# slurmctld: /'
    grep -E "^(srun|slurmstepd|scontrol|ddl-agent|ddl-launch)" "$T_TMP/job.out" | tail -n 10 | sed 's/^/# job.out: /'
    sinfo -R -h 2>/dev/null | sed 's/^/# sinfo -R: /'
    # the check's own line says what happened (CI shows only those): the
    # runs, the job's last states, and any node Slurm took out of service
    why=" (after ${took} s; runs: $(sed 's/^run //' "$LOG" 2>/dev/null | tr '\n' ';');"
    why="$why states: $(tail -n 3 "$STATES" | tr '\n' ';'); requeues: $(tr '\n' ';' <"$LOG.requeue" 2>/dev/null); nodes out: $(sinfo -R -h -o '%N %E' 2>/dev/null | tr '\n' ';'))"
fi
t_like "$LOG" "^run 0: srun exited 94$" "the first run is stopped by Slurm's SIGUSR1: srun exits 94"
t_like "$LOG" "^run [1-9][0-9]*: srun exited 0$" "... requeued, the job finishes: srun exits 0$why"
scontrol show job "$job" >"$T_TMP/show" 2>&1 || true
grep -E 'JobState|Restarts' "$T_TMP/show" | sed 's/^/# /'

# the stops and the resumptions, in the job's output (every run's)
out="$T_TMP/job.out"
t_like "$out" "stopping the step: SIGUSR1 .*every rank commits a checkpoint at one step boundary and exits with 94" \
    "the leader agent stops the step on SIGUSR1"
stops=$(sed -n 's/^fmnist-train: stopped at step \([0-9]*\): checkpoint committed.*/\1/p' "$out" | tr '\n' ' ')
resumes=$(sed -n 's/^fmnist-train: resuming from checkpoint step \([0-9]*\) .*/\1/p' "$out" | tr '\n' ' ')
t_diag "stopped at steps: $stops; resumed from: $resumes"
nstops=$(echo "$stops" | wc -w)
t_ok $([ "$nstops" -ge 1 ] && [ "$nstops" -eq "$(grep -c 'exited 94$' "$LOG")" ]; echo $?) \
    "each stopped run committed the checkpoint of the step it stopped at ($nstops)"
t_is "$resumes" "$stops" "each requeued run resumed from the checkpoint of the previous run's stop (stops: ${stops% }; resumes: ${resumes% })"
t_like "$out" "^checksums: all 4 ranks agree \($(echo "$ref" | awk '{print $2}')\)$" \
    "the last run ends with the weights of the uninterrupted run"

# nothing of the job is left
left() { echo "$(cl_procs ddl-agent) $(cl_procs ddl-launch) $(($(cl_procs fmnist-train) + $(cl_procs lt-fmnist-train)))"; }
i=0
while [ $((i += 1)) -le 20 ] && [ "$(left)" != "0 0 0" ]; do
    sleep 0.5
done
t_is "$(left)" "0 0 0" \
    "no agent, supervisor or worker is left on the nodes"
t_done
