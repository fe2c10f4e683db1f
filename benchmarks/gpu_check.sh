#!/usr/bin/env bash
# The CUDA path in one command, on one GPU machine (about 6 minutes on one H200-class GPU; under
# 10 with every step at its timeout, 100 + 200 + 80 + 80 + 100 s): the GPU's name, the `gpu`-marked tests
# (DDP and FSDP fine-tuning, bf16-mixed, PredictStep on CUDA) with the sync-count, token-budget
# and throughput tests, then benchmarks/gpu.py (bf16 scoring against lm-evaluation-harness at
# GPT-2-small and GPT-2-large shapes; fine-tuning examples/s and peak memory, full and LoRA,
# GPT-2-large shape), then its --profile at GPT-2-small shape (per batch of ours: host ms, device
# ms, syncs; traces in profiles/), then our fine-tuning loop against a plain PyTorch loop
# (benchmarks/training_speed.py, GPT-2-small shape, bf16-mixed), then greedy generation against
# lm-eval's HFLM, 64 prompts at batch 32, float32 and bfloat16 (benchmarks/generation.py: tokens/s, equal strings).
#   pip install torch -e ".[test,bench]" && benchmarks/gpu_check.sh
# On the lent GPU machine, which reaches no package registry: benchmarks/gpu_wheels.sh here first,
# then the one device command in its header.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi: not found"
python -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'devices', torch.cuda.device_count())"
timeout 100 python -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_syncs.py tests/test_batch_budget.py \
  tests/test_throughput.py; tests=$?
timeout 200 python benchmarks/gpu.py --count 256 --steps 10; bench=$?
timeout 80 python benchmarks/gpu.py --profile --count 64 --profile-dir profiles; profile=$?
timeout 80 python benchmarks/training_speed.py; training=$?  # GPT-2-small shape on a GPU
timeout 100 python benchmarks/generation.py --device cuda --dtype float32 bfloat16 --shape gpt2-small --count 64; generation=$?
echo "gpu tests exit $tests, benchmarks exit $bench, profile exit $profile, training speed exit $training," \
  "generation exit $generation, $((SECONDS - start)) s in all"
exit $((tests || bench || profile || training || generation))
