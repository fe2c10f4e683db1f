#!/usr/bin/env bash
# The CUDA path in one command, on one GPU machine (under 8 minutes on one H200-class GPU):
# the GPU's name, the `gpu`-marked tests (DDP and FSDP fine-tuning, bf16-mixed, PredictStep on
# CUDA), then benchmarks/gpu.py (bf16 scoring against lm-evaluation-harness at GPT-2-small and
# GPT-2-large shapes; fine-tuning examples/s and peak memory, full and LoRA, GPT-2-large shape).
#   pip install torch -e ".[test,bench]" && benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi: not found"
python -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'devices', torch.cuda.device_count())"
timeout 300 python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py; tests=$?
timeout 240 python benchmarks/gpu.py --count 256 --steps 10; bench=$?
echo "gpu tests exit $tests, benchmarks exit $bench"
exit $((tests || bench))
