"""Paired comparisons of two models scored on the same instances: is a difference real?

Two models' errors on the same questions are correlated, so the honest test is a paired one:

- a 0/1 per-instance metric (``acc``, ``exact_match``, ...): the **exact McNemar test**, a
  binomial test (``scipy.stats.binomtest``, p = 0.5) on the discordant pairs: ``wins`` (the
  candidate right where the baseline is wrong) against ``losses``; with no discordant pair, p = 1;
- a continuous per-instance metric (``brier``, ``f1``, a log-likelihood): a paired permutation
  test of the mean difference (each instance's two values swapped at random: the difference's
  sign flipped), seeded;
- for both, a **paired bootstrap** confidence interval of the difference of the means
  (candidate - baseline): the instances are resampled with replacement, the same draw for both
  models, 10,000 times, seeded, as one numpy draw per block of resamples.

:func:`holm` corrects the p-values of a family of comparisons (a table's).
"""

from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

#: The tests of a 0/1 metric and of a continuous one; which a metric is, its request kind says
#: (``catwalk_steps.kinds``' ``binary``).
MCNEMAR = "exact McNemar"
PERMUTATION = "paired permutation"

RESAMPLES = 10_000
CONFIDENCE = 0.95
#: Most resampled values drawn at once: 10,000 resamples of 10,000 instances in 25 blocks.
BLOCK_VALUES = 4_000_000
#: Differences with at most this many distinct values are resampled as counts per value.
MAX_DISTINCT_VALUES = 64


@dataclass(frozen=True)
class Comparison:
    """One metric of a candidate against a baseline on the same ``n`` instances."""

    metric: str
    test: str
    n: int
    baseline: float
    candidate: float
    delta: float
    ci_low: float
    ci_high: float
    p_value: float
    wins: Optional[int] = None  # binary metrics: the candidate right, the baseline wrong
    losses: Optional[int] = None  # the baseline right, the candidate wrong

    def to_dict(self) -> Dict[str, object]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def mcnemar(baseline: np.ndarray, candidate: np.ndarray) -> tuple:
    """``(wins, losses, p)`` of the exact two-sided McNemar test on paired 0/1 outcomes."""
    baseline, candidate = np.asarray(baseline, dtype=bool), np.asarray(candidate, dtype=bool)
    wins = int(np.sum(candidate & ~baseline))
    losses = int(np.sum(baseline & ~candidate))
    # Imported here: a cached rerun, which compares nothing, does not pay for scipy.stats.
    from scipy import stats

    # binomtest needs at least one trial; with no discordant pair there is no evidence either way.
    p = stats.binomtest(wins, wins + losses, 0.5).pvalue if wins + losses else 1.0
    return wins, losses, float(p)


def bootstrap_deltas(differences: np.ndarray, resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """The mean of ``differences`` (paired, per instance) over ``resamples`` resamples of the
    instances with replacement.

    Differences with few distinct values (a 0/1 metric's are -1, 0, 1) are resampled as counts
    of each value, one multinomial draw per resample: the same distribution as drawing instances,
    in milliseconds. Others draw instance indices, in blocks of at most :data:`BLOCK_VALUES`.
    """
    differences = np.asarray(differences, dtype=np.float64)
    n = len(differences)
    rng = np.random.default_rng(seed)
    values, counts = np.unique(differences, return_counts=True)
    if len(values) <= MAX_DISTINCT_VALUES:
        return rng.multinomial(n, counts / n, size=resamples) @ values / n
    means = np.empty(resamples)
    for start, rows in _blocks(resamples, n):
        means[start:start + rows] = differences[rng.integers(0, n, size=(rows, n), dtype=np.uint32)].mean(axis=1)
    return means


def bootstrap_ci(
    differences: np.ndarray, confidence: float = CONFIDENCE, resamples: int = RESAMPLES, seed: int = 0
) -> tuple:
    """The percentile interval of the paired bootstrap of the mean difference."""
    tail = (1 - confidence) / 2
    low, high = np.quantile(bootstrap_deltas(differences, resamples, seed), [tail, 1 - tail])
    return float(low), float(high)


def permutation_p_value(differences: np.ndarray, resamples: int = RESAMPLES, seed: int = 0) -> float:
    """Two-sided p-value of the paired permutation test of the mean difference: under the null
    hypothesis each instance's two values are exchangeable, so each difference's sign is a coin
    flip. Counted as ``(1 + flips at least as extreme) / (1 + resamples)``, as
    ``scipy.stats.permutation_test`` counts (which, at 10,000 instances, takes a minute here)."""
    differences = np.asarray(differences, dtype=np.float64)
    n = len(differences)
    if not np.any(differences):
        return 1.0
    observed = abs(differences.sum())
    total = differences.sum()
    rng = np.random.default_rng(seed)
    extreme = 0
    for _, rows in _blocks(resamples, n):
        # One random bit per instance: flipping the signs of a subset F turns the sum into
        # total - 2 * sum(F), one matrix product per block.
        bits = rng.integers(0, 256, size=(rows, (n + 7) // 8), dtype=np.uint8)
        flipped = np.unpackbits(bits, axis=1, count=n).astype(np.float64) @ differences
        # The relative tolerance keeps a flip as extreme as the observed one from losing to rounding.
        extreme += int(np.sum(np.abs(total - 2 * flipped) >= observed * (1 - 1e-9)))
    return (1 + extreme) / (1 + resamples)


def _blocks(resamples: int, n: int):
    """``(start, rows)`` blocks of resamples of at most :data:`BLOCK_VALUES` values."""
    block = max(1, BLOCK_VALUES // n)
    for start in range(0, resamples, block):
        yield start, min(block, resamples - start)


def compare_values(
    metric: str,
    baseline: Sequence[float],
    candidate: Sequence[float],
    binary: bool,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Comparison:
    """Compares per-instance values of ``metric`` (same instances, same order): a ``binary`` (0/1)
    metric by the exact McNemar test, any other by the paired permutation test."""
    b, c = np.asarray(baseline, dtype=np.float64), np.asarray(candidate, dtype=np.float64)
    if b.shape != c.shape or b.ndim != 1 or len(b) == 0:
        raise ValueError(f"{metric}: need two equally long, non-empty lists of values, got {len(b)} and {len(c)}")
    if binary and not np.all(np.isin(b, (0, 1)) & np.isin(c, (0, 1))):
        raise ValueError(f"{metric} is a 0/1 metric, but its values are not all 0 or 1")
    low, high = bootstrap_ci(c - b, confidence, resamples, seed)
    common = dict(metric=metric, test=MCNEMAR if binary else PERMUTATION, n=len(b), baseline=float(b.mean()),
                  candidate=float(c.mean()), delta=float(c.mean() - b.mean()), ci_low=low, ci_high=high)
    if binary:
        wins, losses, p = mcnemar(b, c)
        return Comparison(**common, p_value=p, wins=wins, losses=losses)
    return Comparison(**common, p_value=permutation_p_value(c - b, resamples, seed))


def holm(p_values: Sequence[float]) -> List[float]:
    """Holm's step-down adjustment of a family of p-values, in their order: the k-th smallest is
    multiplied by (m - k + 1), kept at least as large as the ones before it, and capped at 1."""
    order = np.argsort(p_values, kind="stable")
    m = len(p_values)
    adjusted = np.empty(m)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted.tolist()
