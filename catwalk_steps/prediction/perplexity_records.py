"""Perplexity predictions: documents in, rolling windows to score, one record per document out;
and (context, target) instances in, one query each scored with a greedy flag, one record out.

Every window of every document is a scoring query of its own, so the worker pool, its journals
and resume serve perplexity exactly as they serve multiple choice; a document's windows all go
to one worker (strided by document), and its log-likelihood is their sum, added in window order
so that it does not depend on how the windows were batched or shared out.
"""

from typing import Any, Dict, List, Sequence, Tuple

from ..models.rolling import document_windows
from ..models.conventions import TokenConventions
from ..models.scoring import Query
from ..tasks.instance import DocumentInstance, TargetInstance


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
        if document.group is not None:
            record["group"] = document.group
        records.append(record)
    return records


def target_queries(conventions: TokenConventions, instances: Sequence[TargetInstance]) -> Tuple[List[Query], List[int]]:
    """One query per instance, and the instance of each."""
    return [conventions.pair(i.context, i.target) for i in instances], list(range(len(instances)))


def target_records(
    instances: Sequence[TargetInstance], queries: Sequence[Query], results: Sequence[Sequence[Any]]
) -> List[Dict[str, Any]]:
    """One JSON-safe record per instance: its id, the target's log-likelihood, whether greedy
    decoding would produce it (``is_greedy``) and its token count."""
    records = []
    for instance, query, (loglik, greedy) in zip(instances, queries, results):
        record = {"id": instance.id, "loglik": loglik, "is_greedy": bool(greedy), "num_tokens": len(query.continuation)}
        if instance.group is not None:
            record["group"] = instance.group
        records.append(record)
    return records
