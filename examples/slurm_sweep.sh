#!/usr/bin/env bash
# Submits a sweep to Slurm in stages, as jobs sharing one Tango workspace on a filesystem every
# node sees (docs/sweeps.md):
#   1. each fine-tuning step its own job (slurm_finetune.sh: `nodes: N` runs on N nodes);
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
# One job name per config and workspace: how a rerun finds the jobs of earlier submissions.
name="sweep-$(basename "$config" .jsonnet)-$(realpath -m "$config" "$workspace" | cksum | cut -d' ' -f1)"
# Word-split on purpose: each holds sbatch options.
read -r -a finetune_options <<< "${SWEEP_FINETUNE_OPTIONS:-}"
read -r -a eval_options <<< "${SWEEP_EVAL_OPTIONS:-}"
read -r -a table_options <<< "${SWEEP_TABLE_OPTIONS:-}"

earlier=$(squeue --me --noheader --name="$name" --format=%A | sort -u | paste -sd' ')
if [ -n "$earlier" ]; then
  echo "Cancelling the jobs of an earlier submission of this sweep: $earlier"
  # shellcheck disable=SC2086  # a list of job ids
  scancel $earlier
  # Until they are gone (a cancelled job's processes get KillWait seconds to end): a step they
  # finish meanwhile is then not submitted again.
  for _ in $(seq 300); do
    [ -n "$(squeue --me --noheader --name="$name" --format=%A)" ] || break
    sleep 1
  done
fi

declare -A job_of  # fine-tuning step -> its job in this submission
jobs=()
dependency_on() {  # the job's option: wait for the fine-tunings it needs that are submitted here
  local ids=() step
  for step in "$@"; do
    if [ -n "${job_of[$step]:-}" ]; then ids+=("${job_of[$step]}"); fi
  done
  if [ ${#ids[@]} -gt 0 ]; then
    printf -- '--dependency=afterok:%s --kill-on-invalid-dep=yes' "$(IFS=:; echo "${ids[*]}")"
  fi
}
# The uncached steps of a type, each followed by the fine-tunings it needs (read before the loops:
# a failure in `< <(...)` would go unnoticed).
finetunes=$(python -m catwalk_steps.list_steps "$config" --type catwalk::finetune --needs catwalk::finetune \
  --uncached-in "$workspace")
evaluations=$(python -m catwalk_steps.list_steps "$config" --type catwalk::calculate_metrics \
  --needs catwalk::finetune --uncached-in "$workspace")

while read -r step needs; do
  [ -n "$step" ] || continue  # none left
  # shellcheck disable=SC2046,SC2086  # an option or none
  job_of[$step]=$(examples/slurm_finetune.sh "$config" "$step" "$workspace" --job-name="$name" \
    --output="$logs/$step-%j.out" --open-mode=append $(dependency_on $needs) "${finetune_options[@]}")
  jobs+=("${job_of[$step]}")
done <<< "$finetunes"

# One job per set of fine-tunings needed: the evaluations of a fine-tuned model run one after
# another in one job (one start-up, one wait); those that need none, in one job started at once.
declare -A steps_of
groups=()
while read -r step needs; do
  [ -n "$step" ] || continue
  if [ -z "${steps_of[x$needs]:-}" ]; then groups+=("x$needs"); fi  # x: bash refuses an empty key
  steps_of[x$needs]+=" -s $step"
done <<< "$evaluations"
for group in "${groups[@]}"; do
  needs=${group#x} && label=${needs// /+}
  # shellcheck disable=SC2046,SC2086  # an option or none; the -s options
  jobs+=("$(sbatch --parsable --job-name="$name" --output="$logs/evaluate-${label:-stock}-%j.out" --open-mode=append \
    $(dependency_on $needs) "${eval_options[@]}" \
    --wrap "$(printf '%q ' tango run "$config" -w "$workspace" ${steps_of[$group]})")")
done

table_after=()
if [ ${#jobs[@]} -gt 0 ]; then table_after=(--dependency="afterany:$(IFS=:; echo "${jobs[*]}")"); fi
table=$(sbatch --parsable --job-name="$name" --output="$logs/table-%j.out" --open-mode=append \
  "${table_after[@]}" "${table_options[@]}" --wrap "$(printf '%q ' examples/sweep_table.sh "$config" "$workspace")")
echo "Submitted ${#jobs[@]} step jobs and the table (job $table) as $name; logs in $logs"
