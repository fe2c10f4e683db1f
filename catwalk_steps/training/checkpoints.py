"""Training checkpoints that any number of workers, under DDP or FSDP, can resume from, that no
worker has to hold whole, and that a kill at any moment leaves readable.

Tango's trainer writes one set of files per worker (``worker{rank}_model.pt``), so a run killed
on 1 device could not resume on 2; and its rank 0 moved the ``latest`` link and deleted older
checkpoints before the other ranks had written theirs. Here a checkpoint is written with
``torch.distributed.checkpoint`` (DCP): every worker writes its own shards of the weights and
the optimizer state (under DDP the replicas' identical tensors are written once), keyed by
parameter name, so that DCP reshards them on load for any world size and either strategy. The
schedule, the callbacks' state and the progress are JSON. A checkpoint is written into a
temporary directory; once every worker's shards are in (DCP's own final barrier), rank 0
publishes it (:func:`..storage.atomic.publish_dir`), only then points ``latest.json`` to it, and
only then deletes older ones. A full disk fails the save with one line
(:class:`..storage.space.DiskFullError`), and the run after space is freed resumes from the
checkpoint before.
"""

import json
import shutil
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from ..storage.atomic import fresh_temp_dir, publish_dir, publish_text, temp_beside
from ..storage.space import reporting_full_disk
from .eval_tasks import higher_is_better, measured

# One worker saves and loads with no process group (``no_dist``), which DCP warns about each time.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")

CHECKPOINTS = "checkpoints"  # in the step's work dir
LATEST = "latest.json"
STATE = "state.json"
SHARDS_METADATA = ".metadata"  # written by DCP last, on the coordinator


@dataclass
class Progress:
    """What the loop has done: optimizer steps, and the record of every validation."""

    step: int = 0
    validations: List[Dict[str, Any]] = field(default_factory=list)
    #: The validation number that chooses the best weights (see :func:`ranking`).
    selected: str = "val_acc"

    @property
    def best(self) -> Optional[Dict[str, Any]]:
        """The best validation by :func:`ranking`; of equal ones, the earliest."""
        if not self.validations:
            return None
        return max(self.validations, key=lambda v: (*ranking(v, self.selected), -v["step"]))


def ranking(validation: Dict[str, Any], selected: str) -> Tuple[float, ...]:
    """How good a validation is by its number ``selected``, larger being better: ``val_loss``
    negated (lower is better); an accuracy (``val_acc``, ``val_exact_match``) or an eval task's
    number (``eval/TASK/METRIC``) as it is, or negated where lowest is best (a perplexity), then,
    of equal ones, the lower loss."""
    if selected == "val_loss":
        return (-validation["val_loss"],)
    number = measured(validation, selected)  # an eval task's perplexity is best lowest
    return (number if higher_is_better(selected) else -number, -validation["val_loss"])


def state_bytes(state: Any) -> int:
    """The bytes of the tensors in a (nested) state dict, each name counted (DCP writes a tied
    weight under each of its names)."""
    if isinstance(state, torch.Tensor):
        return state.nbytes
    if isinstance(state, dict):
        return sum(state_bytes(value) for value in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(value) for value in state)
    return 0


def _options(model: torch.nn.Module):
    """Only what trains: a frozen base model under an adapter is the pretrained one, reloaded."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    frozen = any(not p.requires_grad for p in model.parameters())
    return StateDictOptions(ignore_frozen_params=frozen, strict=not frozen)


def checkpoint_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Dict[str, Any]:
    """What a checkpoint holds: the weights that train and their optimizer state, keyed by name
    (also of a model on the meta device: what a run will write, see :mod:`.preflight`)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer, options=_options(model))
    return {"model": model_state, "optimizer": optimizer_state}


def barrier() -> None:
    """Waits for every worker (no-op for one in-process worker)."""
    if dist.is_initialized():
        dist.barrier()


class CheckpointStore:
    def __init__(self, dir: Path) -> None:
        self.dir = Path(dir)

    def path(self, step: int) -> Path:
        return self.dir / f"step-{step:07d}"

    def latest(self) -> Optional[Path]:
        """The latest complete checkpoint. One from before checkpoints were sharded (no DCP
        metadata) cannot be resumed from: it is skipped, and training starts over."""
        pointer = self.dir / LATEST
        if not pointer.exists():
            return None
        path = self.path(json.loads(pointer.read_text())["step"])
        return path if (path / SHARDS_METADATA).exists() else None

    def save(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, training_state: Dict[str, Any],
        progress: Progress, rank: int, world_size: int,
    ) -> None:
        """Writes the checkpoint of ``progress.step`` (every worker must call), then keeps only it
        and the best one. ``training_state`` (JSON) comes from rank 0; ``world_size`` is recorded
        for people, and never read back."""
        import torch.distributed.checkpoint as dcp

        final, temp = self.path(progress.step), temp_beside(self.path(progress.step))
        if rank == 0:
            fresh_temp_dir(final)  # (what a killed run left there goes)
        barrier()
        state = checkpoint_state(model, optimizer)
        with reporting_full_disk(final, needed=state_bytes(state)):
            dcp.save(state, checkpoint_id=temp, no_dist=not dist.is_initialized())
        if rank == 0:  # every worker's shards are in (DCP's own final barrier)
            state = {"progress": asdict(progress), "training_state": training_state, "world_size": world_size}
            publish_text(temp / STATE, json.dumps(state, indent=1))
            publish_dir(final)
            publish_text(self.dir / LATEST, json.dumps({"step": progress.step}))
            best = progress.best
            self.keep({final.name, self.path(best["step"]).name if best else final.name})
        barrier()  # no worker moves on before the checkpoint is complete

    def keep(self, names) -> None:
        for path in self.dir.glob("*step-*"):
            if path.name not in names:
                shutil.rmtree(path, ignore_errors=True)

    def load(self, path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Dict[str, Any]:
        """Loads the checkpoint at ``path`` into ``model`` and ``optimizer`` (every worker must
        call; each reads the shards it keeps, whatever the world size and strategy that wrote
        them); returns its JSON state (``progress``, ``training_state``)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        state = checkpoint_state(model, optimizer)
        dcp.load(state, checkpoint_id=path, no_dist=not dist.is_initialized())
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"],
                       options=_options(model))
        return json.loads((path / STATE).read_text())

    def load_weights(self, path: Path, model: torch.nn.Module) -> None:
        """Only the weights of the checkpoint at ``path`` (every worker must call)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

        options = _options(model)
        state = {"model": get_model_state_dict(model, options=options)}
        dcp.load(state, checkpoint_id=path, no_dist=not dist.is_initialized())
        set_model_state_dict(model, state["model"], options=options)
