#!/usr/bin/env bash
# The last job of a sweep (slurm_sweep.sh), started once every other job has ended, however it
# ended: if a metrics step is not in the workspace's cache (its job or the fine-tuning it needs
# failed or was cancelled), fails naming them, and does not compute them here, on the table job's
# resources; else runs the whole config, which reads every step from the cache and makes the
# table, prints it and exports the results.
#   examples/sweep_table.sh CONFIG WORKSPACE
set -euo pipefail
usage="usage: sweep_table.sh CONFIG WORKSPACE"
config=${1:?$usage} workspace=${2:?$usage}
missing=$(python -m catwalk_steps.list_steps "$config" --type catwalk::calculate_metrics --uncached-in "$workspace")
if [ -n "$missing" ]; then
  echo "sweep_table.sh: no table: these metrics steps are not in $workspace's cache (their jobs' logs say why):" >&2
  echo "  ${missing//$'\n'/$'\n'  }" >&2
  echo "Submit the sweep again to compute them and the table: examples/slurm_sweep.sh $config $workspace" >&2
  exit 1
fi
exec tango run "$config" -w "$workspace"
