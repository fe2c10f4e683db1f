"""Documents' perplexity (``loglikelihood_rolling``): documents in, rolling windows to score, one
record per document out, and from those the perplexities per word, byte and token
(:mod:`..reports.perplexity`) and, per document, its log-likelihood.

Every window of every document is a scoring query of its own, so the worker pool, its journals
and resume serve perplexity exactly as they serve multiple choice; a document's windows all go
to one worker (strided by document), and its log-likelihood is their sum, added in window order
so that it does not depend on how the windows were batched or shared out.
"""

from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np
from tango.common.exceptions import ConfigurationError

from ..models.conventions import TokenConventions
from ..models.loading import context_window
from ..models.rolling import document_windows
from ..models.scoring import Query, score_queries
from ..reports.perplexity import document_perplexities
from ..tasks.instance import DocumentInstance
from .base import Record, RequestKind, RequestSetting, register, with_group
from .multiple_choice import query_work


def document_queries(
    conventions: TokenConventions, documents: Sequence[DocumentInstance], max_length: int
) -> Tuple[List[Query], List[int]]:
    """Every document's rolling windows, in document order, and the document of each window."""
    queries: List[Query] = []
    document_of: List[int] = []
    for number, document in enumerate(documents):
        windows = document_windows(conventions, document.text, max_length)
        queries += windows
        document_of += [number] * len(windows)
    return queries, document_of


def perplexity_records(
    documents: Sequence[DocumentInstance], queries: Sequence[Query], document_of: Sequence[int],
    logliks: Sequence[float],
) -> List[Dict[str, Any]]:
    """One JSON-safe record per document: its id, summed log-likelihood, the tokens scored (the
    windows' continuations), and its words and bytes (counted on the original document)."""
    totals = [0.0] * len(documents)
    tokens = [0] * len(documents)
    for query, number, loglik in zip(queries, document_of, logliks):
        totals[number] += loglik
        tokens[number] += len(query.continuation)
    records = []
    for document, loglik, num_tokens in zip(documents, totals, tokens):
        record = {
            "id": document.id,
            "loglik": loglik,
            "num_tokens": num_tokens,
            "num_words": document.num_words,
            "num_bytes": document.num_bytes,
        }
        records.append(with_group(record, document))
    return records


def causal_only(setting: RequestSetting) -> None:
    """Rolling windows and scored targets are computed for causal language models only."""
    if setting.config.is_encoder_decoder:
        raise ConfigurationError(
            f"{setting.model_name} is an encoder-decoder model: {setting.task.REQUEST_TYPE} requests (perplexity, "
            "LAMBADA) are computed here for causal language models only"
        )


class ScoredWhole(RequestKind):
    """What documents and targets share: queries scored by :func:`..models.scoring.score_queries`
    (``greedy``: with a greedy flag each), each record's ``loglik`` per instance."""

    greedy = False

    def work(self, requests: Sequence[Query]) -> Any:
        return query_work(requests)

    def compute(self, lm, spec, requests: Sequence[Query], max_batch_tokens: int, **batching: Any) -> None:
        score_queries(lm, requests, max_batch_tokens=max_batch_tokens, greedy=self.greedy, **batching)

    def values(self, records: Sequence[Mapping[str, Any]]) -> Dict[str, np.ndarray]:
        return {"loglik": np.array([r["loglik"] for r in records], dtype=np.float64)}

    def binary(self, metric: str) -> bool:
        return False  # a log-likelihood (targets add their 0/1 greedy flag)


class Documents(ScoredWhole):
    name = "loglikelihood_rolling"
    journal = "scores"
    description = "Log-likelihood queries"
    record_field = "num_bytes"
    diffable = False  # a log-likelihood, no right or wrong

    def requests(self, instances: Sequence[DocumentInstance], setting: RequestSetting) -> Tuple[List[Query], List[int]]:
        causal_only(setting)
        return document_queries(setting.conventions, instances, context_window(setting.config))

    def records(self, instances, requests, instance_of, results, setting) -> List[Record]:
        return perplexity_records(instances, requests, instance_of, results)

    def metrics(self, records: List[Record]) -> Dict[str, Any]:
        return document_perplexities(records)

    def instance_text(self, instance: DocumentInstance) -> Record:
        return {"prompt": instance.text, "gold": None}


register(Documents())
