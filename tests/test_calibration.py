"""ece and brier against an independent computation (numpy, by hand), including instances with
different numbers of choices, and carried into tables and suite averages."""

import math

import numpy as np
import pytest

from catwalk_steps import CalculateMetricsStep
from catwalk_steps.reports.calibration import calibration
from catwalk_steps.reports.tables import MetricsTable


def numpy_calibration(predictions, bins=15):
    confidences, outcomes, squared = [], [], []
    for p in predictions:
        logliks = np.array(p["logliks"], dtype=np.float64)
        probabilities = np.exp(logliks - logliks.max())
        probabilities /= probabilities.sum()
        chosen = int(np.argmax(logliks))
        confidences.append(probabilities[chosen])
        outcomes.append(float(chosen == p["label"]))
        squared.append(((probabilities - np.eye(len(logliks))[p["label"]]) ** 2).sum())
    confidences, outcomes = np.array(confidences), np.array(outcomes)
    # Equal-width bins [k/15, (k+1)/15); a confidence of exactly 1 in a bin of its own.
    index = np.floor(confidences * bins).astype(int)
    ece = 0.0
    for k in np.unique(index):
        members = index == k
        ece += members.mean() * abs(outcomes[members].mean() - confidences[members].mean())
    return ece, float(np.mean(squared))


def random_predictions(count, seed):
    rng = np.random.default_rng(seed)
    predictions = []
    for _ in range(count):
        choices = int(rng.integers(2, 6))  # 2 to 5 choices
        logliks = (rng.normal(size=choices) * rng.uniform(0.1, 6)).tolist()
        predictions.append({"label": int(rng.integers(choices)), "logliks": logliks,
                            "num_tokens": [1] * choices, "num_chars": [1] * choices})
    return predictions


def test_two_instances_by_hand():
    # a: softmax(-1, -1 - ln 3) = (0.75, 0.25), picks 0, gold 0: right at 0.75 -> |1 - 0.75|
    # b: softmax of 3 choices (ln 0.2, ln 0.2, ln 0.6) = (0.2, 0.2, 0.6), picks 2, gold 0: wrong at 0.6
    predictions = [
        {"label": 0, "logliks": [-1.0, -1.0 - math.log(3)], "num_tokens": [1, 1], "num_chars": [1, 1]},
        {"label": 0, "logliks": [math.log(0.2), math.log(0.2), math.log(0.6)], "num_tokens": [1] * 3,
         "num_chars": [1] * 3},
    ]
    metrics = calibration(predictions)
    # 0.75 and 0.6 fall in different bins (11/15 = 0.733..0.8 and 9/15 = 0.6..0.667): each half the weight.
    assert metrics["ece"] == pytest.approx(0.5 * 0.25 + 0.5 * 0.6, abs=1e-9)
    # a: 0.25^2 + 0.25^2; b: 0.8^2 + 0.2^2 + 0.6^2
    assert metrics["brier"] == pytest.approx((0.125 + 1.04) / 2, abs=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ece_and_brier_match_numpy_with_mixed_choice_counts(seed):
    predictions = random_predictions(400, seed)
    ece, brier = numpy_calibration(predictions)
    metrics = CalculateMetricsStep(predictions=predictions).run(predictions=predictions)
    assert metrics["ece"] == pytest.approx(ece, abs=1e-6)
    assert metrics["brier"] == pytest.approx(brier, abs=1e-6)
    assert "ece_stderr" not in metrics and "brier_stderr" not in metrics


def test_groups_and_their_macro_average_have_them_too():
    predictions = [{**p, "group": "ab"[n % 2]} for n, p in enumerate(random_predictions(60, 3))]
    metrics = CalculateMetricsStep(predictions=predictions).run(predictions=predictions)
    for group in "ab":
        ece, brier = numpy_calibration([p for p in predictions if p["group"] == group])
        assert metrics["groups"][group]["ece"] == pytest.approx(ece, abs=1e-6)
        assert metrics["groups"][group]["brier"] == pytest.approx(brier, abs=1e-6)
    assert metrics["macro"]["ece"] == pytest.approx((metrics["groups"]["a"]["ece"] + metrics["groups"]["b"]["ece"]) / 2)


def test_tables_show_them_and_average_them_without_stderr():
    results = {"tiny/0/piqa": {"acc": 0.5, "acc_stderr": 0.1, "ece": 0.2, "brier": 0.4, "count": 10},
               "tiny/0/boolq": {"acc": 0.7, "acc_stderr": 0.2, "ece": 0.1, "brier": 0.3, "count": 10}}
    table = MetricsTable.from_results(results, ["model", "shots", "task"], average_over="task")
    assert table.columns == ["model", "shots", "task", "acc", "acc_stderr", "brier", "ece", "count"]
    macro = table.rows[2]
    assert macro["ece"] == pytest.approx(0.15) and macro["brier"] == pytest.approx(0.35)
    assert "ece_stderr" not in macro
    assert table.to_markdown().splitlines()[4] == "| tiny | 0 | macro-average | 0.6000 ± 0.1118 | 0.3500 | 0.1500 | 20 |"


def test_a_cached_rerun_does_not_import_torchmetrics():
    import subprocess
    import sys

    code = ("import sys, catwalk_steps, catwalk_steps.steps.metrics, catwalk_steps.steps.export; "
            "print('torchmetrics' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
