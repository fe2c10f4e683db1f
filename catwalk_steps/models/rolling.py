"""A document's log-likelihood, scored whole in disjoint windows of the model's context length.

The windows are lm-evaluation-harness's (``lm_eval.utils.get_rolling_token_windows`` with
``context_len=1``, then ``make_disjoint_window``), so perplexities are comparable with its
``loglikelihood_rolling``: the first window predicts the first ``max_length`` tokens after a
prefix token; each later window predicts the next ``max_length`` tokens (fewer at the end) after
as much of what precedes them as fits. Every token is predicted exactly once. A window is an
ordinary (context, continuation) :class:`~.scoring.Query`, so documents are scored by
:func:`~.scoring.score_queries` like any choice, batched across windows and documents, and the
windows' log-likelihoods are added per document.
"""

from typing import TYPE_CHECKING, List, Sequence

from .scoring import Query

if TYPE_CHECKING:
    from .conventions import TokenConventions


def rolling_windows(tokens: Sequence[int], prefix: int, max_length: int) -> List[Query]:
    """``tokens`` cut into disjoint windows whose inputs fit ``max_length`` tokens, each window's
    continuation the tokens it predicts and its context what the model reads before them."""
    if max_length < 1:
        raise ValueError(f"max_length must be at least 1, got {max_length}")
    tokens = tuple(tokens)
    if not tokens:
        return []
    first = min(max_length, len(tokens))
    windows = [Query((prefix,), tokens[:first])]
    predicted = first
    while predicted < len(tokens):
        end = min(len(tokens), predicted + max_length)
        windows.append(Query(tokens[end - max_length - 1:predicted], tokens[predicted:end]))
        predicted = end
    return windows


def document_windows(conventions: "TokenConventions", text: str, max_length: int) -> List[Query]:
    """``text``, encoded as a document (:meth:`.conventions.TokenConventions.document`: with the
    tokenizer's special tokens), as :func:`rolling_windows` after the prefix token."""
    return rolling_windows(conventions.document(text), conventions.prefix_token_id, max_length)
