"""What ``catwalk::predict`` makes of a multiple-choice task: a scoring query per choice of every
instance (and per choice after the task's unconditioned context, when asked), and from their
log-likelihoods one record per instance."""

from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..models.conventions import TokenConventions
from ..models.scoring import Query
from ..tasks import MCInstance


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
        if instance.group is not None:
            record["group"] = instance.group
        if conditioned < len(queries):
            record["unconditioned_logliks"] = logliks[conditioned + start:conditioned + end]
        predictions.append(record)
        start = end
    return predictions
