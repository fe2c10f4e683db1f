#!/usr/bin/env bash
# Submits a fine-tuning step (catwalk::finetune, `nodes: N`) as one Slurm job of N nodes, one srun
# task per node (finetune_node.sh): node 0 runs the step with `tango run -s STEP`, every other node
# joins it with `python -m catwalk_steps.join`. Afterwards the step is in the workspace's cache,
# and any config that uses it reads it from there. Prints the job's id. The job (its nodes and
# command) is `python -m catwalk_steps.list_steps CONFIG --plan WORKSPACE --finetuning STEP`'s.
#   examples/slurm_finetune.sh CONFIG STEP WORKSPACE [SBATCH_OPTION...]
# Run it from the repository root, in the activated environment (sbatch passes it on), with
# WORKSPACE on a filesystem every node sees. GPUs per node, partition and time limit through
# sbatch's own environment variables (e.g. SBATCH_GRES=gpu:8 SBATCH_PARTITION=gpu
# SBATCH_TIMELIMIT=12:00:00) or options after WORKSPACE, which go to sbatch as they are. The
# step's `device_count` is per node; `max_restarts` lets torch's elastic agents restart the
# workers after a failure; a resubmitted job resumes from the last checkpoint.
set -euo pipefail
usage="usage: slurm_finetune.sh CONFIG STEP WORKSPACE [SBATCH_OPTION...]"
config=${1:?$usage} step=${2:?$usage} workspace=${3:?$usage}
shift 3
line=$(python -m catwalk_steps.list_steps "$config" --plan "$workspace" --finetuning "$step")
read -r _ _ nodes _ command <<< "$line"
job=$(sbatch --parsable --job-name="finetune-$step" --nodes="$nodes" --ntasks-per-node=1 "$@" --wrap "$command")
echo "Submitted $step on $nodes node(s) (job $job)" >&2
echo "$job"
