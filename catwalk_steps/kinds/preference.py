"""Preference pairs (``preference``): each pair scored by the summed log-probability of its
chosen and of its rejected answer after its prompt (two scoring queries, as two choices of
multiple choice), one record per pair with both and their ``margin``; metrics ``pair_acc`` (how
often the chosen answer is the likelier) and the mean ``margin``, and, for records that hold a
``reference_model``'s log-probabilities too (``catwalk::predict``'s ``reference_model``), DPO's
implicit rewards: ``reward_acc`` (how often the chosen answer's log-ratio to the reference is
the larger) and ``reward_margin`` (the mean difference of the two log-ratios, DPO's reward margin
divided by ``beta``).

Fine-tuning (:class:`PreferenceObjective`) is DPO as TRL 1.16's ``DPOTrainer`` runs it
(:mod:`..models.preference_loss`, :mod:`..models.preference_rows`): the reference is the
starting model (under an adapter, the adapter disabled), measured once on every training and
validation pair before the first step. Validation measures TRL's numbers over the whole
validation split: ``val_loss`` and ``val_rewards/chosen``, ``val_rewards/rejected``,
``val_rewards/accuracies``, ``val_rewards/margins``; the lowest loss chooses the best weights by
default, or the largest reward accuracy or margin (``val_metric``).
"""

import logging
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from tango.common import Tqdm
from tango.common.exceptions import ConfigurationError

from ..models.preference_rows import pair_queries
from ..models.scoring import Query, score_queries
from ..reports.averages import STDERR_SUFFIX, binomial_stderr
from ..tasks.preference import PreferenceInstance
from .base import Record, RequestKind, RequestSetting, register
from .multiple_choice import query_work
from .objective import Example, TrainingObjective

logger = logging.getLogger(__name__)


class PreferenceObjective(TrainingObjective):
    """DPO (see the module). Each micro-batch's loss is its pairs' sum, divided by the global
    batch's pairs (``batch_size`` counts pairs), so the step's gradient is the mean over its
    pairs whatever the micro-batching and device count."""

    tasks_called = "preference"
    val_metrics = ("loss", "rewards/accuracies", "rewards/margins")
    val_metrics_why = "validation measures DPO's loss and TRL's reward numbers"
    settings = ("beta", "loss_type", "loss_weights", "label_smoothing", "precompute_ref_log_probs")

    def __init__(self, loss: Any = None) -> None:
        self.loss = loss

    def configured(self, precompute_ref_log_probs: Any = False, **loss: Any) -> "PreferenceObjective":
        """DPO's loss of the step's settings (the precomputed reference log-probabilities are the
        rows', attached where they are read: :mod:`catwalk_steps.training.preparation`)."""
        from ..models.preference_loss import DPOLoss

        return PreferenceObjective(DPOLoss.of(**loss))

    def examples(self, conventions, instances_per_task, max_length, desc, chat_example) -> List[Example]:
        from ..models.preference_rows import preference_row

        if conventions.encoder_decoder:
            raise ConfigurationError("DPO fine-tunes causal LMs (as TRL's DPOTrainer does), not encoder-decoders")
        rows, cut = [], 0
        for instances in instances_per_task:
            for instance in Tqdm.tqdm(instances, desc=desc):
                row = preference_row(conventions, instance, max_length)
                cut += row is None
                if row is not None:
                    rows.append(row)
        if cut:
            logger.warning("%s: %d pairs' prompts fill the model's window of %d tokens (their start is kept, as TRL "
                           "keeps it): they are left out", desc, cut, max_length)
        return rows

    def example_tokens(self, example: Example) -> int:
        return example.length

    def model(self, spec, adapter, gradient_checkpointing, shared_context, lm=None):
        from ..models.preference_loss import DPOLoss, PreferenceLossModel

        return PreferenceLossModel(spec, adapter, gradient_checkpointing, shared_context, lm=lm,
                                   loss=self.loss or DPOLoss())

    def collator(self, model, pad_token_id: int, max_length: int):
        from ..models.preference_loss import PreferenceCollator

        return PreferenceCollator(pad_token_id, max_length, model.shares_contexts)

    def loss_divisor(self, step_examples, micro_batches_per_worker: int, world_size: int) -> float:
        return len(step_examples) / world_size

    def with_starting_model(self, model, examples, collate, batch_size, rank, world_size, device) -> List[Example]:
        from ..models.preference_loss import with_reference

        return with_reference(model, examples, collate, batch_size, rank, world_size, device)

    def validation_sums(self, outputs: Dict[str, torch.Tensor], selected: str) -> Dict[str, torch.Tensor]:
        """The pairs' summed loss, their count, and their summed rewards (chosen, rejected) and
        pairs whose chosen reward is the larger."""
        chosen, rejected = outputs["rewards"].unbind(-1)
        return {"loss": outputs["losses"].sum(), "count": torch.tensor(chosen.shape[0], device=chosen.device),
                "chosen": chosen.sum(), "rejected": rejected.sum(), "correct": (chosen > rejected).sum()}

    def validation_scores(self, sums: Mapping[str, float], selected: str, instances: int) -> Dict[str, float]:
        count = sums["count"]
        return {"val_loss": sums["loss"] / count, "val_rewards/chosen": sums["chosen"] / count,
                "val_rewards/rejected": sums["rejected"] / count, "val_rewards/accuracies": sums["correct"] / count,
                "val_rewards/margins": (sums["chosen"] - sums["rejected"]) / count}


def margins(records: Sequence[Mapping[str, Any]], field: str = "logps") -> np.ndarray:
    """Per pair, the chosen answer's ``field`` minus the rejected one's; for ``reference_logps``'
    implicit rewards, the log-ratios' difference."""
    values = np.array([r[field] for r in records], dtype=np.float64)
    if field == "reference_logps":
        values = np.array([r["logps"] for r in records], dtype=np.float64) - values
    return values[:, 0] - values[:, 1]


def check_reference_model(kwargs: Mapping[str, Any]) -> None:
    """``catwalk::predict``'s ``reference_model`` is for preference tasks, refused for any other."""
    task = kwargs.get("task")
    if kwargs.get("reference_model") is not None and getattr(task, "REQUEST_TYPE", None) != Preference.name:
        raise ConfigurationError(f"reference_model measures DPO's implicit rewards of preference pairs; "
                                 f"{type(task).__name__} is not a preference task")
    if isinstance(kwargs.get("reference_model"), str):
        from ..models.loading import ModelSpec

        ModelSpec.parse(kwargs["reference_model"])


def with_reference_logps(records: List[Record], reference: Sequence[Mapping[str, Any]]) -> List[Record]:
    """``records`` each with the reference model's log-probabilities of the same pair."""
    assert [r["id"] for r in records] == [r["id"] for r in reference]
    return [{**record, "reference_logps": other["logps"]} for record, other in zip(records, reference)]


class Preference(RequestKind):
    name = "preference"
    journal = "preference_scores"
    description = "Preference pairs"
    record_field = "logps"
    conversational = True
    training = PreferenceObjective()

    def requests(self, instances: Sequence[PreferenceInstance], setting: RequestSetting) -> Tuple[List[Query], List[int]]:
        queries = [query for instance in instances for query in pair_queries(setting.conventions, instance)]
        return queries, [n for n in range(len(instances)) for _ in range(2)]

    def work(self, requests: Sequence[Query]) -> Any:
        return query_work(requests)

    def compute(self, lm, spec, requests: Sequence[Query], max_batch_tokens: int, **batching: Any) -> None:
        score_queries(lm, requests, max_batch_tokens=max_batch_tokens, **batching)

    def records(self, instances, requests, instance_of, results, setting) -> List[Record]:
        return [{"id": instance.id, "logps": results[2 * n:2 * n + 2],
                 "num_tokens": [len(q.continuation) for q in requests[2 * n:2 * n + 2]],
                 "margin": results[2 * n] - results[2 * n + 1]} for n, instance in enumerate(instances)]

    def metrics(self, records: List[Record]) -> Dict[str, Any]:
        values = self.values(records)
        metrics: Dict[str, Any] = {}
        for name, per_pair in values.items():
            metrics[name] = float(per_pair.mean())
            if self.binary(name):
                metrics[name + STDERR_SUFFIX] = binomial_stderr(metrics[name], len(records))
        metrics["count"] = len(records)
        return metrics

    def values(self, records: Sequence[Mapping[str, Any]]) -> Dict[str, np.ndarray]:
        """``pair_acc`` and ``margin``; with the reference's log-probabilities, ``reward_acc``
        and ``reward_margin``."""
        records = list(records)
        found = {"pair_acc": (margins(records) > 0).astype(np.float64), "margin": margins(records)}
        if records and all("reference_logps" in r for r in records):
            rewards = margins(records, "reference_logps")
            found.update(reward_acc=(rewards > 0).astype(np.float64), reward_margin=rewards)
        return found

    def binary(self, metric: str) -> bool:
        return metric in ("pair_acc", "reward_acc")

    def headline_metric(self, records: Sequence[Mapping[str, Any]]) -> str:
        return "pair_acc"

    def gold_margins(self, records: Sequence[Mapping[str, Any]], metric: str) -> np.ndarray:
        """How far the chosen answer is ahead: by log-probability, or by implicit reward."""
        return margins(records, "reference_logps" if metric.startswith("reward") else "logps")

    def diff_side(self, record: Mapping[str, Any], metric: str, text: Mapping[str, Any]) -> Record:
        return {"logps": record["logps"], "margin": record["margin"]}

    def instance_text(self, instance: PreferenceInstance) -> Record:
        return {"prompt": instance.prompt, "gold": instance.answers[0], "rejected": instance.answers[1]}


register(Preference())
