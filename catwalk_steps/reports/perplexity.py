"""Perplexities of ``catwalk::predict`` records, as lm-evaluation-harness defines them.

Documents (``loglikelihood_rolling``): perplexities are weighted over the whole split, not
averaged over documents: ``word_perplexity = exp(-sum loglik / sum words)``, likewise per byte
and per token, and ``bits_per_byte = -sum loglik / sum bytes / ln 2`` (lm_eval's
``weighted_perplexity`` and ``bits_per_byte``). Words and bytes are counted on the original
document, so the numbers do not depend on the tokenizer; ``token_perplexity`` does.

Targets scored after a context (``loglikelihood``, LAMBADA's last word): ``acc`` is the share of
targets that greedy decoding would have produced, with its standard error, and ``perplexity`` is
``exp(-mean loglik)`` over targets (lm_eval's ``perplexity`` aggregation).
"""

import math
from typing import Any, Dict, List

from .averages import STDERR_SUFFIX, binomial_stderr

#: What each perplexity divides the summed log-likelihood by, a field of every document record.
PERPLEXITY_UNITS = {"word_perplexity": "num_words", "byte_perplexity": "num_bytes", "token_perplexity": "num_tokens"}


def document_perplexities(predictions: List[Dict[str, Any]]) -> Dict[str, Any]:
    total = math.fsum(p["loglik"] for p in predictions)
    metrics: Dict[str, Any] = {
        name: math.exp(-total / sum(p[unit] for p in predictions)) for name, unit in PERPLEXITY_UNITS.items()
    }
    metrics["bits_per_byte"] = -total / sum(p["num_bytes"] for p in predictions) / math.log(2)
    metrics["count"] = len(predictions)
    return metrics


def target_metrics(predictions: List[Dict[str, Any]]) -> Dict[str, Any]:
    accuracy = sum(bool(p["is_greedy"]) for p in predictions) / len(predictions)
    return {
        "acc": accuracy,
        "acc" + STDERR_SUFFIX: binomial_stderr(accuracy, len(predictions)),
        "perplexity": math.exp(-math.fsum(p["loglik"] for p in predictions) / len(predictions)),
        "count": len(predictions),
    }
