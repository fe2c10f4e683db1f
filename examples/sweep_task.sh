#!/usr/bin/env bash
# One task of a job array (see slurm_sweep.sh): runs every SLURM_ARRAY_TASK_COUNT-th step of
# STEPS_FILE, starting from the SLURM_ARRAY_TASK_ID-th (0-based), and the steps they need, with
# Tango's own step selection (`tango run -s`). All tasks share WORKSPACE: a step that another task
# is computing is waited for ("waiting for another run of ...") and then read from the cache.
#   SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_TASK_COUNT=4 examples/sweep_task.sh CONFIG WORKSPACE STEPS_FILE
set -euo pipefail
config=${1:?usage: sweep_task.sh CONFIG WORKSPACE STEPS_FILE} workspace=${2:?WORKSPACE} steps_file=${3:?STEPS_FILE}
args=()
while read -r step; do
  args+=(-s "$step")
done < <(awk -v n="$SLURM_ARRAY_TASK_COUNT" -v i="$SLURM_ARRAY_TASK_ID" '(NR - 1) % n == i' "$steps_file")
if [ ${#args[@]} -eq 0 ]; then  # more tasks than steps; without -s, tango would run everything
  echo "Task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT: no steps of $steps_file left for it"
  exit 0
fi
exec tango run "$config" -w "$workspace" --name "$(basename "$config" .jsonnet)-task$SLURM_ARRAY_TASK_ID" "${args[@]}"
