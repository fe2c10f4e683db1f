"""Scored targets (``loglikelihood``, LAMBADA's last word): (context, target) instances in, one
query each scored with a greedy flag, one record out; from those the greedy accuracy and the
perplexity over targets (:mod:`..reports.perplexity`) and, per instance, the flag and the
log-likelihood."""

from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from ..models.conventions import TokenConventions
from ..models.scoring import Query
from ..reports.perplexity import target_metrics
from ..tasks.instance import TargetInstance
from .base import Record, RequestSetting, register, with_group
from .documents import ScoredWhole, causal_only


def target_queries(conventions: TokenConventions, instances: Sequence[TargetInstance]) -> Tuple[List[Query], List[int]]:
    """One query per instance, and the instance of each."""
    return [conventions.pair(i.context, i.target) for i in instances], list(range(len(instances)))


def target_records(
    instances: Sequence[TargetInstance], queries: Sequence[Query], results: Sequence[Sequence[Any]]
) -> List[Dict[str, Any]]:
    """One JSON-safe record per instance: its id, the target's log-likelihood, whether greedy
    decoding would produce it (``is_greedy``) and its token count."""
    return [
        with_group({"id": i.id, "loglik": loglik, "is_greedy": bool(greedy), "num_tokens": len(q.continuation)}, i)
        for i, q, (loglik, greedy) in zip(instances, queries, results)
    ]

class Targets(ScoredWhole):
    name = "loglikelihood"
    journal = "greedy_scores"
    description = "Targets"
    record_field = "is_greedy"
    greedy = True
    conversational = True  # the context, as lm-evaluation-harness's loglikelihood request under a template

    def requests(self, instances: Sequence[TargetInstance], setting: RequestSetting) -> Tuple[List[Query], List[int]]:
        causal_only(setting)
        return target_queries(setting.conventions, instances)

    def records(self, instances, requests, instance_of, results, setting) -> List[Record]:
        return target_records(instances, requests, results)

    def metrics(self, records: List[Record]) -> Dict[str, Any]:
        return target_metrics(records)

    def values(self, records: Sequence[Mapping[str, Any]]) -> Dict[str, np.ndarray]:
        return {"acc": np.array([float(r["is_greedy"]) for r in records], dtype=np.float64), **super().values(records)}

    def binary(self, metric: str) -> bool:
        """The greedy flag (``acc``); not the log-likelihood."""
        return metric == "acc"

    def headline_metric(self, records: Sequence[Mapping[str, Any]]) -> str:
        return "acc"

    def instance_text(self, instance: TargetInstance) -> Record:
        return {"prompt": instance.context, "gold": instance.target}


register(Targets())
