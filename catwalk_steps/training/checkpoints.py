"""Training checkpoints that any number of workers can resume from, and that a kill at any
moment leaves readable.

Tango's trainer writes one set of files per worker (``worker{rank}_model.pt``), so a run killed
on 1 device could not resume on 2; and its rank 0 moved the ``latest`` link and deleted older
checkpoints before the other ranks had written theirs. Here a checkpoint is the *global* state,
written by rank 0 alone (DDP keeps every replica identical): weights as checksummed safetensors,
optimizer and schedule state as tensors (read back with ``weights_only=True``), progress as
JSON. Each checkpoint is written to a temporary directory and renamed into place; only then
does ``latest.json`` (replaced atomically) point to it, and only then are older ones deleted.
"""

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch

from ..storage.atomic import replace_atomically
from ..storage.weights import load_state_dict, save_state_dict

LATEST = "latest.json"
WEIGHTS = "model.safetensors"
OPTIMIZER = "optimizer.pt"
STATE = "state.json"


@dataclass
class Progress:
    """What the loop has done: optimizer steps, and the record of every validation."""

    step: int = 0
    validations: List[Dict[str, Any]] = field(default_factory=list)

    @property
    def best(self) -> Optional[Dict[str, Any]]:
        """The validation with the highest accuracy; of equal ones, the lowest loss, then the earliest."""
        if not self.validations:
            return None
        return max(self.validations, key=lambda v: (v["val_acc"], -v["val_loss"], -v["step"]))


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointStore:
    def __init__(self, dir: Path) -> None:
        self.dir = Path(dir)

    def _path(self, step: int) -> Path:
        return self.dir / f"step-{step:07d}"

    def latest(self) -> Optional[Path]:
        pointer = self.dir / LATEST
        return self._path(json.loads(pointer.read_text())["step"]) if pointer.exists() else None

    def save(
        self, weights: Dict[str, torch.Tensor], training_state: Dict[str, Any], progress: Progress, world_size: int
    ) -> None:
        """Writes the checkpoint of ``progress.step``, then keeps only it and the best one.
        ``world_size`` is recorded for people, and never read back."""
        self.dir.mkdir(parents=True, exist_ok=True)
        final = self._path(progress.step)
        temp = final.with_name("." + final.name + ".tmp")
        shutil.rmtree(temp, ignore_errors=True)
        temp.mkdir()
        meta = save_state_dict(weights, temp / WEIGHTS)
        torch.save(training_state, temp / OPTIMIZER)
        _fsync(temp / OPTIMIZER)
        (temp / STATE).write_text(json.dumps({"progress": asdict(progress), "weights": meta, "world_size": world_size}, indent=1))
        _fsync(temp / STATE)
        shutil.rmtree(final, ignore_errors=True)  # left by a run killed before it pointed to it
        os.replace(temp, final)
        _fsync(self.dir)
        replace_atomically(self.dir / LATEST, lambda p: p.write_text(json.dumps({"step": progress.step})))

        best = progress.best
        keep = {final.name, self._path(best["step"]).name if best else final.name}
        for path in self.dir.glob("*step-*"):
            if path.name not in keep:
                shutil.rmtree(path, ignore_errors=True)

    def load(self, path: Path):
        """``(weights, training_state, progress)`` of the checkpoint at ``path``."""
        state = json.loads((path / STATE).read_text())
        weights = load_state_dict(path / WEIGHTS, state["weights"])
        training_state = torch.load(path / OPTIMIZER, map_location="cpu", weights_only=True)
        return weights, training_state, Progress(**state["progress"])

    def progress(self) -> Progress:
        """The progress recorded in the latest checkpoint."""
        return Progress(**json.loads((self.latest() / STATE).read_text())["progress"])

    def weights_of(self, step: int) -> Tuple[Path, Dict[str, Any]]:
        """The weights file of the checkpoint of ``step``, and what :func:`load_state_dict` needs."""
        path = self._path(step)
        return path / WEIGHTS, json.loads((path / STATE).read_text())["weights"]
