import json

import pytest
from tango.common.exceptions import ConfigurationError

from catwalk_steps import CalculateMetricsStep, TabulateMetricsStep
from catwalk_steps.steps.metrics import MetricsTableFormat
from catwalk_steps.reports.tables import MetricsTable

PREDICTIONS = [
    # summed log-likelihood picks choice 0, per character choice 1, per token choice 1; gold 1
    {"id": "a", "label": 1, "logliks": [-4.0, -6.0], "num_tokens": [1, 3], "num_chars": [2, 6],
     "unconditioned_logliks": [-1.0, -5.0]},
    # every ranking picks choice 2 of 3; gold 2
    {"id": "b", "label": 2, "logliks": [-9.0, -8.0, -1.0], "num_tokens": [1, 1, 1], "num_chars": [1, 1, 1],
     "unconditioned_logliks": [-9.0, -8.0, -1.0]},
]


def test_each_accuracy_ranks_by_its_own_normalisation():
    metrics = CalculateMetricsStep(predictions=PREDICTIONS).run(predictions=PREDICTIONS)
    # acc_uncond: a: -4-(-1) = -3 vs -6-(-5) = -1 -> choice 1 (right); b: all 0 -> choice 0 (wrong)
    accuracies = {"acc": 0.5, "acc_norm": 1.0, "acc_per_token": 1.0, "acc_uncond": 0.5}
    # lm-evaluation-harness's stderr: sqrt(p (1 - p) / (n - 1)); 0.5 of 2 -> sqrt(0.25 / 1)
    stderrs = {"acc_stderr": 0.5, "acc_norm_stderr": 0.0, "acc_per_token_stderr": 0.0, "acc_uncond_stderr": 0.5}
    calibration = {k: metrics.pop(k) for k in ("ece", "brier")}  # see test_calibration
    assert metrics == {**accuracies, **stderrs, "count": 2}
    assert set(calibration) == {"ece", "brier"}


def test_stderr_is_lm_evaluation_harness_s():
    from lm_eval.api.metrics import mean_stderr

    from catwalk_steps.reports.averages import binomial_stderr

    outcomes = [1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 0]
    assert binomial_stderr(sum(outcomes) / len(outcomes), len(outcomes)) == pytest.approx(mean_stderr(outcomes))
    assert binomial_stderr(1.0, 1) is None


def test_acc_norm_divides_by_the_answer_without_its_leading_space():
    """Hand-computed: " ab" (-2.5) vs " abcde" (-6.0). Counting the space, -2.5/3 = -0.833 beats
    -6/6 = -1 and picks choice 0; without it, as lm-evaluation-harness, -2.5/2 = -1.25 loses to
    -6/5 = -1.2 and choice 1 (gold) wins."""
    from catwalk_steps.tasks import MCInstance

    instance = MCInstance(id="x", context="Q:", continuations=[" ab", " abcde"], label=1)
    assert instance.answer_lengths() == [2, 5]
    predictions = [{"label": 1, "logliks": [-2.5, -6.0], "num_tokens": [1, 1], "num_chars": instance.answer_lengths()}]
    assert CalculateMetricsStep(predictions=predictions).run(predictions=predictions)["acc_norm"] == 1.0


def test_grouped_predictions_get_per_group_metrics_and_their_macro_average():
    right = {"logliks": [-1.0, -2.0], "num_tokens": [1, 1], "num_chars": [1, 1], "label": 0}
    wrong = {**right, "label": 1}
    predictions = [{**right, "group": "a"}, {**right, "group": "a"}, {**wrong, "group": "a"}, {**right, "group": "b"},
                   {**wrong, "group": "b"}]
    metrics = CalculateMetricsStep(predictions=predictions).run(predictions=predictions)
    assert metrics["acc"] == pytest.approx(3 / 5) and metrics["count"] == 5
    assert metrics["groups"]["a"]["acc"] == pytest.approx(2 / 3) and metrics["groups"]["b"]["acc"] == 0.5
    assert metrics["macro"]["acc"] == pytest.approx((2 / 3 + 0.5) / 2)
    a, b = metrics["groups"]["a"]["acc_stderr"], metrics["groups"]["b"]["acc_stderr"]
    assert metrics["macro"]["acc_stderr"] == pytest.approx((a * a + b * b) ** 0.5 / 2)
    assert metrics["macro"]["count"] == 5


def test_acc_uncond_only_when_every_prediction_has_it():
    plain = [{k: v for k, v in p.items() if k != "unconditioned_logliks"} for p in PREDICTIONS]
    assert "acc_uncond" not in CalculateMetricsStep(predictions=plain).run(predictions=plain)


def test_table_splits_names_and_writes_markdown_csv_json(tmp_path):
    results = {"piqa/gpt2/1": {"acc": 0.625, "count": 2}, "arc/gpt2/2": {"acc": 0.5, "acc_norm": 0.25}}
    table = TabulateMetricsStep(metrics=results).run(metrics=results, key_columns=["task", "model", "seed"])
    assert table.columns == ["task", "model", "seed", "acc", "acc_norm", "count"]
    MetricsTableFormat().write(table, tmp_path)
    assert (tmp_path / "table.md").read_text().splitlines()[2] == "| piqa | gpt2 | 1 | 0.6250 |  | 2 |"
    assert (tmp_path / "table.csv").read_text().splitlines()[2] == "arc,gpt2,2,0.5,0.25,"
    assert json.loads((tmp_path / "table.json").read_text())["rows"][0]["acc"] == 0.625
    assert MetricsTableFormat().read(tmp_path) == table
    with pytest.raises(ConfigurationError, match="does not split into task/model/seed"):
        MetricsTable.from_results({"piqa/gpt2": {}}, ["task", "model", "seed"])


def test_table_shows_acc_plus_minus_stderr_and_a_macro_average_per_model():
    def result(acc, stderr):
        return {"acc": acc, "acc_stderr": stderr, "count": 10, "groups": {"x": {"acc": 1.0}}}

    results = {"tiny/0/piqa": result(0.5, 0.1), "tiny/0/boolq": result(0.7, 0.2), "big/0/piqa": result(0.9, 0.3)}
    table = MetricsTable.from_results(results, ["model", "shots", "task"], average_over="task")
    assert table.columns == ["model", "shots", "task", "acc", "acc_stderr", "count"]  # no nested columns
    assert [(r["model"], r["task"]) for r in table.rows] == [
        ("tiny", "piqa"), ("tiny", "boolq"), ("tiny", "macro-average"), ("big", "piqa"), ("big", "macro-average"),
    ]
    macro = table.rows[2]
    assert macro["acc"] == pytest.approx(0.6) and macro["acc_stderr"] == pytest.approx((0.01 + 0.04) ** 0.5 / 2)
    assert macro["count"] == 20
    assert table.to_markdown().splitlines()[4] == "| tiny | 0 | macro-average | 0.6000 ± 0.1118 | 20 |"
    assert table.to_csv().splitlines()[0] == "model,shots,task,acc,acc_stderr,count"
    with pytest.raises(ConfigurationError, match="average_over='seed' is not one of the key columns"):
        TabulateMetricsStep(metrics=results, key_columns=["model", "shots", "task"], average_over="seed")


def test_an_empty_table_still_renders():
    table = MetricsTable.from_results({}, ["run"])
    assert table.to_markdown() == "| run |\n|---|\n"
    assert table.to_rich().row_count == 0


MIXED = {  # a generative and a perplexity task in one table: ten columns
    "tiny-generation/zero-shot": {"exact_match": 0.25, "exact_match_stderr": 0.1, "f1": 0.3, "f1_stderr": 0.1,
                                  "truncated": 0, "count": 16},
    "tiny-perplexity/zero-shot": {"bits_per_byte": 1.5, "byte_perplexity": 2.8, "token_perplexity": 30.1,
                                  "word_perplexity": 100.2, "count": 16},
}


@pytest.mark.parametrize("width", [60, 40])
def test_the_printed_table_fits_a_narrow_terminal_with_every_header_whole(monkeypatch, width):
    import io

    from rich.console import Console

    from catwalk_steps.steps import metrics

    printed = []
    monkeypatch.setattr(metrics.cli_logger, "info", printed.append)
    metrics.PrintMetricsStep(table=None).run(MetricsTable.from_results(MIXED, ["task", "run"]))
    console = Console(width=width, file=io.StringIO(), record=True)
    console.print(*printed)
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width  # it was cut: token_perplexi…
    for name in ("token_perplexity", "word_perplexity", "exact_match", "tiny-perplexity", "0.2500 ± 0.1000"):
        assert name in text


def test_the_printed_table_is_text_where_the_log_handler_is_not_rich_s(monkeypatch):
    """``tango run -j 2`` runs a step in a worker process, whose log lines reach the terminal as
    text (``str`` of the message): the table, not ``<FittedTable object at 0x...>``."""
    import logging
    import os

    from catwalk_steps.steps import metrics

    monkeypatch.setenv("COLUMNS", "60")
    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    monkeypatch.setattr(metrics.cli_logger, "handlers", [handler])
    monkeypatch.setattr(metrics.cli_logger, "propagate", False)
    monkeypatch.setattr(metrics.cli_logger, "disabled", False)
    level = metrics.cli_logger.level
    metrics.cli_logger.setLevel(logging.INFO)
    try:
        metrics.PrintMetricsStep(table=None).run(MetricsTable.from_results(MIXED, ["task", "run"]))
    finally:
        metrics.cli_logger.setLevel(level)
    (text,) = records
    assert "object at 0x" not in text and max(len(line) for line in text.splitlines()) <= 60
    for name in ("token_perplexity", "exact_match", "tiny-perplexity", "0.2500 ± 0.1000"):
        assert name in text, os.linesep + text
