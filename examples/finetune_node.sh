#!/usr/bin/env bash
# One node of a multi-node fine-tuning step (see slurm_finetune.sh): Slurm's node 0 runs the
# step, the others join it. Any node may start first.
#   SLURM_NODEID=0 examples/finetune_node.sh CONFIG STEP WORKSPACE
set -euo pipefail
config=${1:?usage: finetune_node.sh CONFIG STEP WORKSPACE} step=${2:?STEP} workspace=${3:?WORKSPACE}
if [ "${SLURM_NODEID:?set by srun}" = 0 ]; then
  exec tango run "$config" -w "$workspace" -s "$step" --name "$step-node0"
fi
exec python -m catwalk_steps.join "$config" "$step" -w "$workspace"
