#!/usr/bin/env bash
# Submits a sweep to Slurm in stages, as jobs sharing one Tango workspace on a filesystem every
# node sees (docs/sweeps.md). Which jobs, on how many nodes, running what, after which others, is
# `python -m catwalk_steps.list_steps CONFIG --plan WORKSPACE`'s (catwalk_steps/list_steps.py);
# this script only submits them:
#   1. each fine-tuning step its own job (`nodes: N` runs on N nodes, as slurm_finetune.sh submits);
#   2. the evaluations of each fine-tuned model one job (`tango run -s METRICS_STEP ...`: their
#      predictions and metrics), started as soon as its fine-tuning has succeeded, and cancelled
#      by Slurm if it failed or was cancelled (--kill-on-invalid-dep) instead of pending forever;
#      the evaluations of the stock models one job, started at once;
#   3. the table job, once every other job has ended, however it ended (afterany, a dependency
#      that cannot go unsatisfied): sweep_table.sh makes the table, or fails naming the missing steps.
# Running the same command again finishes the sweep, whatever happened before: it cancels this
# sweep's jobs still queued or running (a running step resumes from its checkpoint or journals
# in the new jobs) and submits only the steps the workspace has not cached, then the table.
#   examples/slurm_sweep.sh CONFIG WORKSPACE
# Run it from the repository root, in the activated environment (sbatch passes it on). Options for
# every job through sbatch's own environment variables (e.g. SBATCH_PARTITION=gpu
# SBATCH_TIMELIMIT=2:00:00); per stage, sbatch options in SWEEP_FINETUNE_OPTIONS,
# SWEEP_EVAL_OPTIONS and SWEEP_TABLE_OPTIONS (e.g. SWEEP_FINETUNE_OPTIONS="--gres=gpu:8
# --cpus-per-task=32"). Logs go to SWEEP_LOGS (default WORKSPACE/slurm-logs), one file per job
# (FINETUNE_STEP-JOBID.out, evaluate-FINETUNE_STEP-JOBID.out, evaluate-stock-JOBID.out,
# table-JOBID.out), which a requeued job appends to.
set -euo pipefail
usage="usage: slurm_sweep.sh CONFIG WORKSPACE"
config=${1:?$usage} workspace=${2:?$usage}
logs=${SWEEP_LOGS:-$workspace/slurm-logs}
mkdir -p "$logs"
declare -A options=([finetune]=${SWEEP_FINETUNE_OPTIONS:-} [evaluate]=${SWEEP_EVAL_OPTIONS:-} [table]=${SWEEP_TABLE_OPTIONS:-})

leftovers=$(python -m catwalk_steps.list_steps "$config" --leftovers "$workspace")
if [ -n "$leftovers" ]; then
  echo "Cancelling the jobs of an earlier submission of this sweep: $leftovers"
  # shellcheck disable=SC2086  # a list of job ids
  scancel $leftovers
fi
# Read whole before submitting (a failure in `< <(...)` would go unnoticed). It waits until the
# cancelled jobs have ended: a step they finish meanwhile is then not submitted again.
plan=$(python -m catwalk_steps.list_steps "$config" --plan "$workspace")

declare -A job_of  # a job's key in the plan -> its Slurm job id
{
  read -r name
  while read -r key stage nodes after command; do
    dependency=()
    if [ "$after" != - ]; then  # afterok:KEY:KEY...: the same, by job ids
      IFS=: read -r -a waits <<< "$after"
      ids=() && for waited in "${waits[@]:1}"; do ids+=("${job_of[$waited]}"); done
      dependency=(--dependency="${waits[0]}:$(IFS=:; echo "${ids[*]}")" --kill-on-invalid-dep=yes)
    fi
    # shellcheck disable=SC2086  # word-split on purpose: sbatch options
    job_of[$key]=$(sbatch --parsable --job-name="$name" --output="$logs/$key-%j.out" --open-mode=append \
      --nodes="$nodes" --ntasks-per-node=1 "${dependency[@]}" ${options[$stage]} --wrap "$command")
  done
} <<< "$plan"
echo "Submitted $((${#job_of[@]} - 1)) step jobs and the table (job ${job_of[table]}) as $name; logs in $logs"
