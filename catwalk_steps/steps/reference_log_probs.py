"""``catwalk::reference_log_probs``: the reference model's log-probabilities of every pair a DPO
fine-tune trains and validates on, computed once and cached. ``catwalk::finetune`` makes it from
its own settings when ``precompute_ref_log_probs: true`` (TRL's name): its key holds only what
the pairs and the reference are (the model, its tokenizer settings, the tasks, splits and limits),
not ``beta``, ``loss_type`` or the optimizer, so a sweep over those computes it once."""

from typing import Any, Dict, List

import torch
from tango import Step

from ..distributed.devices import worker_devices
from ..storage.atomic import AtomicJsonFormat
from ..training.settings import FinetuneSettings

#: The ``catwalk::finetune`` settings that say which pairs, tokenised how, and which reference.
REFERENCE_SETTINGS = (
    "model", "tasks", "tokenizer", "add_bos_token", "apply_chat_template", "config_overrides", "train_split",
    "validation_split", "train_limit", "validation_limit", "device",
)
#: Pairs per forward pass (the values move with it by float summation order alone).
BATCH_SIZE = 16


@Step.register("catwalk::reference_log_probs")
class ReferenceLogProbsStep(Step):
    """The starting model's summed log-probabilities of each training and validation pair's chosen
    and rejected answer, ``{"train": [[chosen, rejected], ...], "validation": [...]}``, in the
    order ``catwalk::finetune`` reads the pairs, measured as its workers measure them
    (:func:`..models.preference_loss.with_reference`: eval mode, float32), on one device."""

    VERSION = "1"
    FORMAT = AtomicJsonFormat()
    SKIP_ID_ARGUMENTS = {"defaults"}

    def run(self, settings: Dict[str, Any], defaults: Dict[str, Any]) -> Dict[str, List[List[float]]]:  # type: ignore[override]
        """``settings``: the fine-tune's :data:`REFERENCE_SETTINGS`; ``defaults``: its step's
        defaults of the others (not in the key; one pair a batch, so that any split makes one)."""
        from ..models.preference_loss import with_reference  # transformers, peft: only when it runs
        from ..training.preparation import training_job

        finetune = FinetuneSettings(**{**defaults, **settings, "batch_size": 1})
        job = training_job(finetune, work_dir=self.work_dir, workspace=self.workspace, step_id=self.unique_id,
                           step_name=self.name, tracking=None)
        device = worker_devices(finetune.device, 1)[0]
        model = job.build_model().to(device)
        collate = job.collator(model)
        measured = {}
        for split, rows in (("train", job.train), ("validation", job.validation)):
            if rows is not None:
                rows = with_reference(model, rows, collate, BATCH_SIZE, 0, 1, device)
                measured[split] = [list(row.reference) for row in rows]
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return measured
