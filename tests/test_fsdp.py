"""FSDP (torch's fully_shard) on 2 gloo processes: the model DDP trains, and resumable."""

import pytest
from tango.common.lazy import Lazy
from tango.workspaces import LocalWorkspace

from catwalk_steps import FinetuneStep

from .conftest import TINY_MODEL
from .test_training_invariance import WEIGHT_TOLERANCE, Interrupt, largest_difference

pytestmark = pytest.mark.ddp


def finetune(task, strategy: str, **extra) -> FinetuneStep:
    return FinetuneStep(
        model=TINY_MODEL, tasks=[task], batch_size=8, micro_batch_size=2, train_epochs=2, train_limit=37,
        validation_limit=21, learning_rate=1e-3, validate_every=2, device_count=2, strategy=strategy,
        step_name="finetune", **extra,
    )


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    from catwalk_steps import PiqaTask

    from .conftest import TINY

    task = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})
    return task, finetune(task, "ddp").result(LocalWorkspace(tmp_path_factory.mktemp("ddp")))


@pytest.mark.parametrize("adapter", [None, {"type": "lora", "r": 4}], ids=["full", "lora"])
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


def test_fsdp_resumes_after_an_interruption_also_as_ddp(ddp, tmp_path):
    task, reference = ddp
    workspace = LocalWorkspace(tmp_path)
    with pytest.raises(Exception, match="interrupted at step 5"):
        finetune(task, "fsdp", callbacks=[Lazy(Interrupt, at=5)]).result(workspace)
    resumed = finetune(task, "ddp").result(workspace)  # a checkpoint is a checkpoint
    worst = largest_difference(reference.state_dict, resumed.state_dict)
    print(f"FSDP interrupted, resumed as DDP: largest weight difference {worst:.1e}")
    assert worst < WEIGHT_TOLERANCE
