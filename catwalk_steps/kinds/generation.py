"""Generation (``generate_until``): a greedy generation per instance from its prompt
(:func:`..models.prompt_room.generation_requests`), one record per instance with the text and
the task's scores, and from those each score's mean (:mod:`..reports.generation`) and, per
instance, every numeric score."""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..models.generation import GenerationRequest, generate_greedy
from ..models.loading import context_window
from ..models.prompt_room import generation_requests
from ..reports.generation import score_averages
from ..tasks.generative import GenerativeTask
from ..tasks.instance import GenerationInstance
from .base import Record, RequestKind, RequestSetting, register, with_group


def generation_records(
    task: GenerativeTask,
    instances: Sequence[GenerationInstance],
    requests: Sequence[GenerationRequest],
    generations: Sequence[Dict[str, Any]],
    max_length: int,
) -> List[Dict[str, Any]]:
    """Per instance: its id, the prompt's token count and whether it was cut from the left to fit
    (``truncated``), the generated text, the references, the task's scores and the ``margin``
    (the smallest top-two logit gap over the greedy decisions, :mod:`..models.generation`)."""
    texts = [g["text"] for g in generations]
    records = []
    for instance, request, generation, scores in zip(instances, requests, generations, task.scores(instances, texts)):
        record = {
            "id": instance.id,
            "num_prompt_tokens": len(request.prompt),
            "truncated": len(request.window(max_length)) < len(request.prompt),
            "generation": generation["text"],
            "references": list(instance.references),
            "scores": scores,
            "margin": generation["margin"],
        }
        records.append(with_group(record, instance))
    return records


#: The names of the task scores that are 0/1 (before a filter's name).
BINARY_SCORES = ("exact_match", "acc")


class Generation(RequestKind):
    name = "generate_until"
    journal = "generations"
    description = "Generations"
    record_field = "generation"

    def requests(self, instances: Sequence[GenerationInstance],
                 setting: RequestSetting) -> Tuple[List[GenerationRequest], List[int]]:
        max_length = context_window(setting.config)
        return generation_requests(setting.conventions, instances, max_length), list(range(len(instances)))

    def work(self, requests: Sequence[GenerationRequest]) -> Any:
        return [[list(r.prompt), r.until, r.max_new_tokens] for r in requests]

    def compute(self, lm, spec, requests: Sequence[GenerationRequest], max_batch_tokens: int, **batching: Any) -> None:
        generate_greedy(lm, spec.conventions(), requests, max_batch_tokens=max_batch_tokens, **batching)

    def records(self, instances, requests, instance_of, results, setting) -> List[Record]:
        return generation_records(setting.task, instances, requests, results, context_window(setting.config))

    def metrics(self, records: List[Record]) -> Dict[str, Any]:
        return score_averages(records)

    def values(self, records: Sequence[Mapping[str, Any]]) -> Dict[str, np.ndarray]:
        """Every numeric score all records hold (``exact_match``, ``f1``, ``exact_match/strict-match``,
        ...), in the task's order."""
        names = [name for name in (records[0]["scores"] if records else ()) if all(name in r["scores"] for r in records)]
        return {
            name: np.array([r["scores"][name] for r in records], dtype=np.float64)
            for name in names
            if all(isinstance(r["scores"][name], (int, float)) for r in records)
        }

    def binary(self, metric: str) -> bool:
        """A task's scores are named by the task (and, for lm_eval tasks, their filter after a
        ``/``: ``exact_match/strict-match``): ``exact_match`` and ``acc`` are 0/1; any other
        score (``f1``, a task's own) is taken as continuous, which the paired permutation test
        takes whatever its values."""
        return metric.split("/")[0] in BINARY_SCORES

    def headline_metric(self, records: Sequence[Mapping[str, Any]]) -> Optional[str]:
        """``exact_match``, else the task's first 0/1 score in the task's order
        (``exact_match/strict-match`` before ``exact_match/flexible-extract``, as lm-evaluation-harness
        lists GSM8K's filters), else none."""
        binary = [name for name in self.values(records) if self.binary(name)]
        return "exact_match" if "exact_match" in binary else next(iter(binary), None)

    def instance_text(self, instance: GenerationInstance) -> Record:
        return {"prompt": instance.prompt, "gold": (list(instance.references) or [None])[0]}


register(Generation())
