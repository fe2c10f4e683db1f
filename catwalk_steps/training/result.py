"""The result of training: the best validation's weights (never the optimizer state), written by
the workers as one safetensors file in the step's work dir, without any worker gathering the
whole model, for the step to hand to the cache.

Full fine-tuning on several workers writes with :func:`..models.weights.write_full_weights`: each
worker writes its shards, then they are consolidated into one file of full tensors, tensor by
tensor. An adapter's weights are small, and named as peft names them, and one worker holds the
whole model anyway: then rank 0 writes them with :func:`..models.weights.save_weights`.
The directory is published (:func:`..storage.atomic.publish_dir`: written under a temporary
name, fsynced, renamed into place) with ``result.json`` inside, so a run killed after it is
complete finds it and trains no more; the cache entry then links the weights file.
"""

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional

import torch.distributed as dist

from ..storage.atomic import fresh_temp_dir, publish_dir, publish_text, temp_beside
from .checkpoints import CheckpointStore, Progress, barrier

if TYPE_CHECKING:  # a step that finds its result here imports no model code
    from ..models.adapters import Adapter
    from ..models.finetuned import FinetunedModel
    from ..models.loading import ModelSpec
    from ..models.rank_classification import RankClassificationModel

RESULT = "result"
WEIGHTS = "model.safetensors"
RECORD = "result.json"


def finished(work_dir: Path) -> Optional[Dict[str, Any]]:
    """What a completed training left (``weights``: the file's meta; ``training_metrics``), if it did."""
    record = work_dir / RESULT / RECORD
    return json.loads(record.read_text()) if record.exists() else None


def finished_model(work_dir: Path, spec: "ModelSpec", adapter: Optional["Adapter"]) -> Optional["FinetunedModel"]:
    """What a completed training wrote into ``work_dir`` (the best validation's weights, or the
    last step's) as the step's result, if it completed."""
    from ..models.finetuned import FinetunedModel

    record = finished(work_dir)
    if record is None:
        return None
    return FinetunedModel(
        spec, training_metrics=record["training_metrics"], adapter=adapter,
        weights_file=work_dir / RESULT / WEIGHTS, weights_meta=record["weights"],
    )


def write_result(
    model: "RankClassificationModel", checkpoints: CheckpointStore, progress: Progress, work_dir: Path, rank: int,
    extra_metrics: Optional[Dict[str, Any]] = None,
) -> None:
    """Writes the best validation's weights (the last step's without validations) into
    ``work_dir/result`` (every worker must call, at the end of training). ``training_metrics``
    are the best validation's numbers plus ``extra_metrics`` (the training curves)."""
    from peft import PeftModel

    from ..models.weights import save_weights, write_full_weights
    from .strategies import trained_weights

    best = progress.best
    step = best["step"] if best else progress.step
    if step != progress.step:
        checkpoints.load_weights(checkpoints.path(step), model)
    final, temp = work_dir / RESULT, temp_beside(work_dir / RESULT)
    if rank == 0:
        fresh_temp_dir(final)
    barrier()
    if isinstance(model.lm, PeftModel) or not dist.is_initialized():
        # An adapter is small; one worker holds the whole model anyway. (safetensors' own writer
        # also writes the same bytes for the same weights: DCP's orders its header at random.)
        weights = trained_weights(model)  # every rank gathers; rank 0 holds the result
        meta = save_weights(weights, temp / WEIGHTS) if rank == 0 else None
    else:
        aliases = {alias: names[0] for names in model.tied_names for alias in names[1:]}
        meta = write_full_weights(model.lm, aliases, temp / WEIGHTS, rank)
    if rank == 0:
        record = {"weights": meta, "training_metrics": {**(best or {"step": step}), **(extra_metrics or {})}}
        publish_text(temp / RECORD, json.dumps(record, indent=1))
        publish_dir(final)
    barrier()
