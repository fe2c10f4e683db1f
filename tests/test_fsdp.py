"""FSDP (torch's fully_shard) on 2 gloo processes: the model DDP trains, and resumable."""

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from tango.common.lazy import Lazy
from tango.workspaces import LocalWorkspace

from catwalk_steps import FinetuneStep

from .conftest import TINY_MODEL
from .test_training_invariance import WEIGHT_TOLERANCE, Interrupt, largest_difference

pytestmark = pytest.mark.ddp


def finetune(task, strategy: str, device_count: int = 2, **extra) -> FinetuneStep:
    return FinetuneStep(
        model=TINY_MODEL, tasks=[task], batch_size=8, micro_batch_size=2, train_epochs=2, train_limit=37,
        validation_limit=21, learning_rate=1e-3, validate_every=2, device_count=device_count, strategy=strategy,
        step_name="finetune", keep_checkpoints=True, **extra,
    )


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    from catwalk_steps import PiqaTask

    from .conftest import TINY

    task = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})
    return task, finetune(task, "ddp").result(LocalWorkspace(tmp_path_factory.mktemp("ddp")))


@pytest.mark.parametrize("adapter", [None, pytest.param({"type": "lora", "r": 4}, marks=pytest.mark.full)],
                         ids=["full", "lora"])
def test_fsdp_trains_the_model_ddp_trains(ddp, tmp_path, adapter):
    task, reference = ddp
    if adapter is not None:
        reference = finetune(task, "ddp", adapter=adapter).result(LocalWorkspace(tmp_path / "ddp"))
    step = finetune(task, "fsdp", adapter=adapter)
    assert step.unique_id == finetune(task, "ddp", adapter=adapter).unique_id
    sharded = step.result(LocalWorkspace(tmp_path / "fsdp"))
    assert sharded.state_dict.keys() == reference.state_dict.keys()
    worst = largest_difference(reference.state_dict, sharded.state_dict)
    print(f"FSDP vs DDP ({adapter}): largest weight difference {worst:.1e}")
    assert worst < WEIGHT_TOLERANCE
    assert sharded.training_metrics["val_acc"] == reference.training_metrics["val_acc"]


@pytest.fixture(scope="module")
def interrupted(ddp, tmp_path_factory):
    """``interrupted(strategy, device_count)``: a workspace whose run with those settings failed at
    step 5, after its checkpoint of step 4; one run per setting, copied by each test that resumes it."""
    task, _ = ddp
    runs = {}

    def run(strategy: str, device_count: int) -> Path:
        if (strategy, device_count) not in runs:
            directory = tmp_path_factory.mktemp(f"interrupted-{strategy}x{device_count}")
            with pytest.raises(Exception, match="interrupted at step 5"):
                finetune(task, strategy, device_count, callbacks=[Lazy(Interrupt, at=5)]).result(
                    LocalWorkspace(directory))
            runs[strategy, device_count] = directory
        return runs[strategy, device_count]

    return run


@pytest.mark.full
@pytest.mark.parametrize(
    "first, then",
    [(("fsdp", 2), ("fsdp", 2)), (("fsdp", 2), ("ddp", 2)), (("fsdp", 2), ("ddp", 1)), (("ddp", 2), ("fsdp", 2)),
     (("ddp", 1), ("fsdp", 2))],
    ids=lambda run: f"{run[0]}x{run[1]}",
)
def test_sharded_checkpoints_resume_under_either_strategy_on_any_worker_count(ddp, interrupted, tmp_path, first,
                                                                             then):
    task, reference = ddp
    shutil.copytree(interrupted(*first), tmp_path / "ws")
    workspace = LocalWorkspace(tmp_path / "ws")
    (checkpoint,) = (workspace.work_dir(finetune(task, *first)) / "checkpoints").glob("step-0000004")
    # Each worker wrote its own shards (under DDP the replicas' tensors are written once).
    assert len(list(checkpoint.glob("*.distcp"))) == first[1]
    resumed = finetune(task, *then).result(workspace)
    worst = largest_difference(reference.state_dict, resumed.state_dict)
    print(f"{first} interrupted, resumed as {then}: largest weight difference {worst:.1e}")
    assert worst < WEIGHT_TOLERANCE
    assert resumed.training_metrics["val_acc"] == reference.training_metrics["val_acc"]


def _compare_shards(rank: int, world_size: int, device, out: str) -> None:
    import torch
    from torch.distributed.tensor import DTensor

    from catwalk_steps.models.loading import ModelSpec
    from catwalk_steps.models.rank_classification import RankClassificationModel
    from catwalk_steps.models.weights import load_pretrained
    from catwalk_steps.training.strategies import placed_model

    from .test_weight_loading import entries_into_weights

    spec = ModelSpec.parse(TINY_MODEL)
    job = SimpleNamespace(strategy="fsdp", adapter=None, spec=spec,
                          build_model=lambda lm: RankClassificationModel(spec, shared_context=True, lm=lm))
    with entries_into_weights() as entries:
        model, trained = placed_model(job, world_size, device)
    # One way into the weights module: the sharded model is built, sharded and read inside it.
    assert entries == [("catwalk_steps.training.strategies", "load_own_shards")] and trained is model, entries
    whole = load_pretrained(ModelSpec.parse(TINY_MODEL)).state_dict()
    kept, total = 0, 0
    for name, parameter in model.lm.named_parameters():
        assert isinstance(parameter, DTensor), name
        kept += parameter.to_local().numel()
        total += parameter.numel()
        assert torch.equal(parameter.full_tensor(), whole[name]), name  # gathered here only to compare
    with open(f"{out}.{rank}", "w") as f:
        f.write(f"{kept} {total}")


def test_fsdp_workers_read_only_their_own_shards(tmp_path):
    import torch

    from catwalk_steps.distributed.launch import launch

    launch(_compare_shards, [torch.device("cpu")] * 2, str(tmp_path / "kept"))
    kept = [tuple(map(int, (tmp_path / f"kept.{rank}").read_text().split())) for rank in (0, 1)]
    assert kept[0][1] == kept[1][1] and abs(kept[0][0] + kept[1][0] - kept[0][1]) <= kept[0][1] // 100
    assert max(k for k, _ in kept) <= 0.55 * kept[0][1]  # each about half, shards padded to equal size
