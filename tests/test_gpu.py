"""The CUDA path (NCCL, bf16, FSDP on GPUs): collected everywhere, skipped without CUDA. Run on a
GPU machine by ``benchmarks/gpu_check.sh``; CI has no GPU."""

import pytest
import torch
from tango.workspaces import LocalWorkspace

from catwalk_steps import CalculateMetricsStep, FinetuneStep, PredictStep

from .conftest import TINY_MODEL

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
WORKERS = min(2, torch.cuda.device_count()) if torch.cuda.is_available() else 1


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
@pytest.mark.parametrize("precision", ["32", "bf16-mixed"])
def test_fine_tuning_on_gpus_gives_cpu_weights_that_score_as_validated(tiny_task, tmp_path, strategy, precision):
    step = FinetuneStep(
        model=TINY_MODEL, tasks=[tiny_task], device="cuda", device_count=WORKERS, strategy=strategy,
        precision=precision, batch_size=16, micro_batch_size=8 // WORKERS, train_limit=64, validation_limit=32,
        train_epochs=2, learning_rate=1e-3, step_name="finetune",
    )
    workspace = LocalWorkspace(tmp_path)
    trained = step.result(workspace)
    assert all(t.device.type == "cpu" for t in trained.state_dict.values())  # device-agnostic result
    predictions = PredictStep(model=step, task=tiny_task, limit=32, device="cuda").result(workspace)
    metrics = CalculateMetricsStep(predictions=predictions).run(predictions)
    # Validation runs in float32 on the GPU, as scoring does: the same decisions but for near-ties
    # (within a margin of float32 noise on GPU kernels), so one instance of 32 may differ.
    assert abs(metrics["acc"] - trained.training_metrics["val_acc"]) <= 1 / 32


def test_scoring_on_cuda_equals_scoring_on_the_cpu(tiny_task):
    cpu = PredictStep(model=TINY_MODEL, task=tiny_task, limit=32, device="cpu").run(
        model=TINY_MODEL, task=tiny_task, limit=32, device="cpu")
    cuda = PredictStep(model=TINY_MODEL, task=tiny_task, limit=32, device="cuda").run(
        model=TINY_MODEL, task=tiny_task, limit=32, device="cuda")
    # float32 on both; GPU reductions sum in another order: relative 1e-4 of a log-likelihood.
    for a, b in zip(cpu, cuda):
        for x, y in zip(a["logliks"], b["logliks"]):
            assert abs(x - y) <= 1e-4 * max(1.0, abs(x))
    bf16 = PredictStep(model=TINY_MODEL, task=tiny_task, limit=32, device="cuda", dtype="bfloat16").run(
        model=TINY_MODEL, task=tiny_task, limit=32, device="cuda", dtype="bfloat16")
    assert len(bf16) == 32 and all(len(r["logliks"]) == 2 for r in bf16)
