"""PIQA-shaped data: the real PIQA validation set's size and GPT-2 BPE length distribution,
generated (no download): 1,838 instances, 2 choices; goals of 5-29 words (contexts of ~13 tokens
with the prompt), solutions long-tailed like PIQA's (continuation tokens: mean ~23, median ~15,
p90 ~51, p99 ~111, max 246).

Solutions are drawn from a log-normal fitted to those quantiles, each word a common English word
that GPT-2's BPE encodes as one token, so word counts are token counts (plus punctuation).
"""

import json
import math
import random
from pathlib import Path
from typing import Dict, List

WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had by "
    "word but not what all were we when your can said there use an each which she do how their if will up "
    "other about out many then them these so some her would make like him into time has look two more write "
    "go see number no way could people my than first water been call who oil its now find long down day did "
    "get come made may part over new sound take only little work know place year live me back give most very "
    "after thing our just name good sentence man think say great where help through much before line right "
    "too mean old any same tell boy follow came want show also around form three small set put end does "
    "another well large must big even such because turn here why ask went men read need land different home "
    "us move try kind hand picture again change off play spell air away animal house point page letter"
).split()


def lognormal_length(rng: random.Random, median: float, p90: float, low: int, high: int) -> int:
    sigma = math.log(p90 / median) / 1.2816
    return max(low, min(high, round(rng.lognormvariate(math.log(median), sigma))))


def piqa_shaped_rows(count: int = 1838, seed: int = 0) -> List[Dict]:
    rng = random.Random(seed)

    def text(words: int) -> str:
        return " ".join(rng.choices(WORDS, k=words)).capitalize() + "."

    rows = []
    for _ in range(count):
        goal_words = lognormal_length(rng, 7, 13, 3, 29)
        rows.append({
            "goal": text(goal_words),
            "sol1": text(lognormal_length(rng, 14, 52, 2, 244)),
            "sol2": text(lognormal_length(rng, 14, 52, 2, 244)),
            "label": rng.randint(0, 1),
        })
    return rows


def write_piqa_shaped(path: Path, count: int = 1838) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in piqa_shaped_rows(count)))
    return path
