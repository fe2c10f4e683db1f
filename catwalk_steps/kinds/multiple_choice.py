"""Multiple choice (``multiple_choice``): a scoring query per choice of every instance (and per
choice after the task's unconditioned context, when asked), one record per instance with every
choice's log-likelihood, and from those the accuracies under each ranking, calibration and, per
instance, each ranking's 0/1 correctness, the Brier score and the gold choice's log-likelihood.

Fine-tuning (:class:`MultipleChoiceObjective`) ranks each instance's choices as scoring does:
the loss is the cross-entropy over the choices' summed log-likelihoods, and validation measures
the accuracy under each ranking and that loss."""

from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from tango.common import Tqdm

from ..models.conventions import TokenConventions
from ..models.scoring import Query, score_queries
from ..reports.accuracy import RANKINGS, accuracies, choice_scores, correctness, rankings
from ..reports.calibration import brier_scores, calibration
from ..reports.olmes import olmes_metrics
from ..tasks import MCInstance
from .base import Record, RequestKind, RequestSetting, register, with_group
from .objective import Example, TrainingObjective

if TYPE_CHECKING:
    from ..models.rank_classification import ChoiceRow


def top_two_margin(logliks: Sequence[float]) -> float:
    """How far the chosen answer's log-likelihood is ahead of the runner-up's: a decision with a
    margin within the batching tolerance (README) may flip with the batch size or device count."""
    first, second = sorted(logliks, reverse=True)[:2]
    return first - second


def choice_queries(
    conventions: TokenConventions, instances: Sequence[MCInstance], unconditioned_context: Optional[str]
) -> Tuple[List[Query], List[int]]:
    """Every instance's (context, choice) queries, in instance order, then, given an
    ``unconditioned_context``, every choice after that context alone, in the same order; and the
    instance of each query."""
    queries = [conventions.pair(context, c) for i in instances for context, c in i.pairs()]
    instance_of = [n for n, i in enumerate(instances) for _ in i.continuations]
    if unconditioned_context is not None:
        queries += [conventions.pair(unconditioned_context, c) for i in instances for c in i.continuations]
        instance_of += instance_of
    return queries, instance_of


def choice_records(
    instances: Sequence[MCInstance], queries: Sequence[Query], logliks: Sequence[float]
) -> List[Dict[str, Any]]:
    """One JSON-safe record per instance (see ``catwalk::predict``) from the log-likelihoods of
    :func:`choice_queries`' queries."""
    conditioned = sum(len(i.continuations) for i in instances)  # the queries after that are unconditioned
    predictions, start = [], 0
    for instance in instances:
        end = start + len(instance.continuations)
        record = {
            "id": instance.id,
            "label": instance.label,
            "logliks": logliks[start:end],
            "num_tokens": [len(q.continuation) for q in queries[start:end]],
            "num_chars": instance.answer_lengths(),
            "margin": top_two_margin(logliks[start:end]),
        }
        if conditioned < len(queries):
            record["unconditioned_logliks"] = logliks[conditioned + start:conditioned + end]
        predictions.append(with_group(record, instance))
        start = end
    return predictions


def gold_margins(records: Sequence[Mapping[str, Any]], metric: str) -> np.ndarray:
    """Per instance, the gold choice's score under ``metric``'s ranking minus the best other's."""
    scores = choice_scores(list(records), metric).numpy()
    rows = np.arange(len(records))
    labels = np.array([r["label"] for r in records])
    gold = scores[rows, labels]
    scores[rows, labels] = -np.inf
    return gold - scores.max(axis=1)


def choice_examples(conventions: TokenConventions, instances: Sequence[MCInstance], desc: str) -> List["ChoiceRow"]:
    """Multiple-choice instances as the rank-classification loss takes them
    (:class:`..models.rank_classification.ChoiceRow`), each choice encoded as scoring encodes it."""
    from ..models.rank_classification import ChoiceRow  # (peft: only once training)

    return [
        ChoiceRow(tuple(conventions.pair(context, c) for context, c in instance.pairs()), instance.label,
                  tuple(instance.answer_lengths()))
        for instance in Tqdm.tqdm(instances, desc=desc)
    ]


class MultipleChoiceObjective(TrainingObjective):
    """Rank classification (:mod:`..models.rank_classification`): the loss of a micro-batch is
    the mean over its instances, so each worker divides it by its micro-batches per step (the
    global batch is cut into micro-batches of one size). Validation's accuracy ranks by summed
    log-likelihood (``accuracy``, a task's ``acc``), and, when one chooses the best weights, per
    character (``acc_norm``) or per token (``acc_per_token``)."""

    tasks_called = "multiple-choice"
    val_metrics = ("accuracy", "loss", "acc_norm", "acc_per_token")
    aliases = {"acc": "accuracy"}
    val_metrics_why = "validation ranks choices by summed log-likelihood, per character and per token, and measures the loss"
    #: The model's outputs that say which instances an accuracy other than ``acc`` gets right, by record key.
    picks = {"val_acc_norm": "correct_norm", "val_acc_per_token": "correct_per_token"}

    def record_key(self, val_metric: Optional[str]) -> str:
        name = self.val_metric(val_metric) or self.val_metrics[0]
        return "val_acc" if name == "accuracy" else f"val_{name}"

    def examples(self, conventions, instances_per_task, max_length, desc, chat_example) -> List[Example]:
        return choice_examples(conventions, [i for part in instances_per_task for i in part], desc)

    def example_tokens(self, example: Example) -> int:
        """Every (context, choice) pair's."""
        return sum(len(query.context) + len(query.continuation) for query in example.queries)

    def model(self, spec, adapter, gradient_checkpointing, shared_context, lm=None):
        from ..models.rank_classification import RankClassificationModel  # (peft: only once training)

        return RankClassificationModel(spec, adapter, gradient_checkpointing, shared_context, lm=lm)

    def collator(self, model, pad_token_id: int, max_length: int):
        from ..models.rank_classification import RankClassificationCollator

        return RankClassificationCollator(pad_token_id, max_length, model.shares_contexts,
                                          model.scoring_lm.config.is_encoder_decoder)

    def loss_divisor(self, step_examples, micro_batches_per_worker: int, world_size: int) -> float:
        return micro_batches_per_worker

    def validation_sums(self, outputs: Dict[str, torch.Tensor], selected: str) -> Dict[str, torch.Tensor]:
        """Instances right (by summed log-likelihood), their summed loss, their count, and
        instances right under the ranking that is ``selected``."""
        correct = outputs["correct"]
        chosen = outputs[self.picks[selected]] if selected in self.picks else correct
        return {"correct": correct.sum(), "loss": outputs["losses"].sum(),
                "count": torch.tensor(correct.shape[0], device=correct.device), "chosen": chosen.sum()}

    def validation_scores(self, sums: Mapping[str, float], selected: str, instances: int) -> Dict[str, float]:
        count = sums["count"]
        return {"val_acc": sums["correct"] / count, "val_loss": sums["loss"] / count,
                **({selected: sums["chosen"] / count} if selected in self.picks else {})}


class MultipleChoice(RequestKind):
    name = "multiple_choice"
    journal = "scores"
    description = "Log-likelihood queries"
    record_field = "logliks"
    conversational = True
    training = MultipleChoiceObjective()

    logs_requests = True

    def requests(self, instances: Sequence[MCInstance], setting: RequestSetting) -> Tuple[List[Query], List[int]]:
        return choice_queries(setting.conventions, instances, unconditioned_context(setting))

    def work(self, requests: Sequence[Query]) -> Any:
        return query_work(requests)

    def compute(self, lm, spec, requests: Sequence[Query], max_batch_tokens: int, **batching: Any) -> None:
        score_queries(lm, requests, max_batch_tokens=max_batch_tokens, **batching)

    def records(self, instances, requests, instance_of, results, setting) -> List[Record]:
        return choice_records(instances, requests, results)

    def metrics(self, records: List[Record]) -> Dict[str, Any]:
        measured = accuracies(records)
        return {**measured, **calibration(records), **olmes_metrics(records, measured)}

    def values(self, records: Sequence[Mapping[str, Any]]) -> Dict[str, np.ndarray]:
        records = list(records)
        values = {name: correctness(records, name).numpy() for name in rankings(records)}
        values["brier"] = brier_scores(records).numpy()
        values["gold_loglik"] = np.array([r["logliks"][r["label"]] for r in records], dtype=np.float64)
        return values

    def binary(self, metric: str) -> bool:
        """Each ranking's correctness; not the Brier score nor the gold log-likelihood."""
        return metric in RANKINGS

    def headline_metric(self, records: Sequence[Mapping[str, Any]]) -> str:
        return "acc"

    def gold_margins(self, records: Sequence[Mapping[str, Any]], metric: str) -> np.ndarray:
        return gold_margins(records, metric)

    def diff_side(self, record: Mapping[str, Any], metric: str, text: Mapping[str, Any]) -> Record:
        pick = int(choice_scores([dict(record)], metric).argmax())
        choices = text.get("choices")
        return {"pick": pick, **({"pick_text": choices[pick]} if choices else {}), "margin": record["margin"]}

    def instance_text(self, instance: MCInstance) -> Record:
        prompts = instance.prompts()
        choices = [c[len(instance.target_delimiter):] for c in instance.continuations]
        return {"prompt": instance.description + prompts[instance.label], "choices": choices,
                "gold": choices[instance.label]}

    def readable(self, records: List[Record]) -> Iterator[Record]:
        """Each record plus, under every ranking, the choice it picks and whether that is the gold label."""
        names = rankings(records)
        chosen = {name: choice_scores(records, name).argmax(-1).tolist() for name in names}
        for n, record in enumerate(records):
            picks = {name: chosen[name][n] for name in names}
            yield {**record, "chosen": picks, "correct": {name: pick == record["label"] for name, pick in picks.items()}}

    def logged_requests(self, instance: MCInstance, setting: RequestSetting) -> Record:
        """Each choice's ``[context, continuation]``, in choice order, as scored (and after the
        unconditioned context alone, where scored)."""
        logged: Record = {"requests": [list(pair) for pair in instance.pairs()]}
        alone = unconditioned_context(setting)
        if alone is not None:
            logged["unconditioned_requests"] = [[alone, c] for c in instance.continuations]
        return logged


def unconditioned_context(setting: RequestSetting) -> Optional[str]:
    """What each choice is also scored after alone, if the step asks (``unconditioned``) and the task has it."""
    return setting.task.unconditioned_context if setting.unconditioned else None


def query_work(queries: Sequence[Query]) -> Any:
    """Scoring ``queries`` as JSON (what their journals are of)."""
    return [list(q.context + q.continuation) for q in queries]


register(MultipleChoice())
