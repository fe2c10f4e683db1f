"""Scoring a generated answer against reference answers with SQuAD's rules, as catwalk did:
``exact_match`` (the normalised texts are equal) and ``f1`` (token overlap of the normalised
texts), each the best over the references, as fractions in [0, 1]. Normalising lowercases and
drops punctuation, articles (a, an, the) and extra whitespace. The computation is
``torchmetrics.functional.text.squad``'s, imported on first use."""

import re
import string
from typing import Dict, Sequence

ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalised(text: str) -> str:
    """SQuAD's normalisation (``normalize_answer`` of its evaluation script, as torchmetrics's):
    lowercase, without punctuation, articles and extra whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    return " ".join(ARTICLES.sub(" ", text).split())


def squad_scores(generation: str, references: Sequence[str]) -> Dict[str, float]:
    from torchmetrics.functional.text import squad

    found = squad(
        [{"prediction_text": generation, "id": "0"}],
        [{"answers": {"answer_start": [0] * len(references), "text": list(references)}, "id": "0"}],
    )
    return {name: float(value) / 100 for name, value in found.items()}  # torchmetrics gives percentages
