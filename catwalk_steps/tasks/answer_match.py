"""Scoring a generated answer against reference answers with SQuAD's rules, as catwalk did:
``exact_match`` (the normalised texts are equal) and ``f1`` (token overlap of the normalised
texts), each the best over the references, as fractions in [0, 1]. Normalising lowercases and
drops punctuation, articles (a, an, the) and extra whitespace. The computation is
``torchmetrics.functional.text.squad``'s, imported on first use."""

from typing import Dict, Sequence


def squad_scores(generation: str, references: Sequence[str]) -> Dict[str, float]:
    from torchmetrics.functional.text import squad

    found = squad(
        [{"prediction_text": generation, "id": "0"}],
        [{"answers": {"answer_start": [0] * len(references), "text": list(references)}, "id": "0"}],
    )
    return {name: float(value) / 100 for name, value in found.items()}  # torchmetrics gives percentages
