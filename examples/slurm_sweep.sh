#!/usr/bin/env bash
# Spreads a sweep over a Slurm job array whose tasks share one Tango workspace on a shared
# filesystem: task i of N computes every N-th metrics step and what it needs (sweep_task.sh);
# a last job, started once every task has succeeded, makes the table, prints it and exports the
# results (everything else comes from the cache).
#   examples/slurm_sweep.sh CONFIG WORKSPACE [TASKS]      (default TASKS: one per metrics step)
# Run it from the repository root, in the activated environment (sbatch passes it on), on a
# filesystem every node sees. Partition, GPUs and time limit through sbatch's own environment
# variables, e.g. SBATCH_PARTITION=gpu SBATCH_GRES=gpu:1 SBATCH_TIMELIMIT=2:00:00.
# A task that fails or is killed can simply be resubmitted: finished steps come from the cache,
# fine-tuning resumes from its last checkpoint and prediction from its journals.
set -euo pipefail
config=${1:?usage: slurm_sweep.sh CONFIG WORKSPACE [TASKS]} workspace=${2:?WORKSPACE}
steps_file="$(basename "$config" .jsonnet).steps.txt"
python -m catwalk_steps.list_steps "$config" --type catwalk::calculate_metrics > "$steps_file"
tasks=${3:-$(wc -l < "$steps_file")}
task_command=$(printf '%q ' examples/sweep_task.sh "$config" "$workspace" "$steps_file")
array=$(sbatch --parsable --job-name=sweep --array="0-$((tasks - 1))" --wrap "$task_command")
table=$(sbatch --parsable --job-name=sweep-table --dependency="afterok:$array" \
  --wrap "$(printf '%q ' tango run "$config" -w "$workspace")")
echo "Submitted $tasks tasks (job $array) over the steps in $steps_file, then the table (job $table)"
