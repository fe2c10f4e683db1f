"""The cached result of fine-tuning: CPU weights in safetensors (see :mod:`.weights`),
plus JSON saying what they belong to."""

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional

import torch
from tango.common.aliases import PathOrStr
from tango.format import Format

from ..storage.atomic import publish_file, publish_text, read_json
from ..tango_fixes.class_paths import keep_class_path
from .adapters import Adapter, with_adapter_merged
from .loading import ModelSpec
from .weights import check_sha256, load_pretrained, load_saved, load_with_weights, read_weights, save_weights

if TYPE_CHECKING:
    from transformers import PreTrainedModel

WEIGHTS_FILE = "model.safetensors"
META_FILE = "model.json"


class FinetunedModel:
    """What fine-tuning produced: the weights of the whole model, or of an adapter (``adapter``
    holds its settings, see :mod:`.adapters`) for the base model of ``spec``.

    The weights may stay in their safetensors file (``weights_file``, with the ``weights_meta``
    that :func:`.weights.save_weights` returned) until something needs them: :meth:`load_model` then
    reads them once, in the dtype asked for, and ``state_dict`` reads them as stored.
    """

    def __init__(
        self,
        spec: ModelSpec,
        state_dict: Optional[Dict[str, torch.Tensor]] = None,
        training_metrics: Optional[Dict[str, Any]] = None,
        *,
        adapter: Optional[Adapter] = None,
        weights_file: Optional[Path] = None,
        weights_meta: Optional[Dict[str, Any]] = None,
    ) -> None:
        if (state_dict is None) == (weights_file is None):
            raise ValueError("Give either a state dict or a weights file")
        self.spec, self.adapter = spec, adapter
        #: What training reported, e.g. the best validation accuracy and the step it came from.
        self.training_metrics = training_metrics or {}
        self._state_dict, self.weights_file, self.weights_meta = state_dict, weights_file, weights_meta

    @property
    def state_dict(self) -> Dict[str, torch.Tensor]:
        if self._state_dict is None:
            self._state_dict = read_weights(self.weights_file, self.weights_meta)
        return self._state_dict

    @property
    def fingerprint(self) -> str:
        """A digest of the weights, without reading them when their file's digest is known."""
        if self.weights_meta is not None:
            return self.weights_meta["sha256"]
        digest = hashlib.sha256()
        for name, tensor in self.state_dict.items():
            digest.update(name.encode())
            digest.update(tensor.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()

    def load_model(self, dtype: torch.dtype = torch.float32) -> "PreTrainedModel":
        """The fine-tuned model, its weights in ``dtype`` (an adapter merged into them)."""
        if self.adapter is not None:
            return with_adapter_merged(load_pretrained(self.spec, dtype), self.adapter, self.state_dict, dtype)
        if self._state_dict is None:
            return load_saved(self.spec, self.weights_file, self.weights_meta, dtype)
        return load_with_weights(self.spec, self._state_dict, dtype)


def _link_or_copy(source: Path, target: Path) -> None:
    """A second name for ``source`` (training's result file, in the step's work dir, on the same
    filesystem as the entry): no second copy on disk, nor time spent copying; else a copy."""
    target.unlink(missing_ok=True)  # left by a killed run
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


@keep_class_path("catwalk_steps.weights.FinetunedModelFormat")
@Format.register("catwalk::finetuned_model")
class FinetunedModelFormat(Format[FinetunedModel]):
    """``model.safetensors`` (the full model's or the adapter's weights) and ``model.json`` (the
    spec, the adapter settings, the training metrics, and the weights' keys, aliases and sha256).
    Reading checks the sha256 but loads no tensor: see :class:`FinetunedModel`."""

    VERSION = "2"

    def write(self, artifact: FinetunedModel, dir: PathOrStr) -> None:
        dir = Path(dir)
        if artifact._state_dict is None:  # the file, never the tensors, into memory
            source = artifact.weights_file
            publish_file(dir / WEIGHTS_FILE, lambda p: _link_or_copy(source, p), needed=source.stat().st_size)
            weights_meta = dict(artifact.weights_meta)
            check_sha256(dir / WEIGHTS_FILE, weights_meta["sha256"])
            # From now on the weights live in the entry: the work dir's name for them goes once
            # the entry is complete (FinetuneStep.clean_work_dir).
            artifact.weights_file = dir / WEIGHTS_FILE
        else:
            weights_meta = save_weights(artifact.state_dict, dir / WEIGHTS_FILE)
        meta = {
            "spec": artifact.spec.to_json(),
            "adapter": artifact.adapter,
            **weights_meta,
            "training_metrics": artifact.training_metrics,
        }
        publish_text(dir / META_FILE, json.dumps(meta, indent=2))

    def read(self, dir: PathOrStr) -> FinetunedModel:
        dir = Path(dir)
        meta = read_json(dir / META_FILE)
        check_sha256(dir / WEIGHTS_FILE, meta["sha256"])
        weights_meta = {k: meta[k] for k in ("aliases", "keys", "sha256")}
        return FinetunedModel(
            ModelSpec(**meta["spec"]), training_metrics=meta["training_metrics"], adapter=meta.get("adapter"),
            weights_file=dir / WEIGHTS_FILE, weights_meta=weights_meta,
        )
