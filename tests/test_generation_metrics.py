"""Generation predictions through catwalk::calculate_metrics, the table and the export, beside
multiple-choice ones."""

import json

import pytest
from lm_eval.api.metrics import mean_stderr
from tango.workspaces import LocalWorkspace

from catwalk_steps import CalculateMetricsStep, ExportPredictionsStep
from catwalk_steps.reports.tables import MetricsTable

from .test_metrics import PREDICTIONS


def record(n, exact, f1, truncated=False):
    return {"id": f"validation/{n}", "num_prompt_tokens": 9, "truncated": truncated, "generation": "x",
            "references": ["x"], "scores": {"exact_match": exact, "f1": f1}, "margin": 0.5}


GENERATIONS = [record(0, 1.0, 1.0), record(1, 0.0, 0.5, truncated=True), record(2, 0.0, 0.0), record(3, 1.0, 1.0)]


def test_generation_metrics_are_mean_scores_with_lm_evaluation_harness_s_stderr():
    metrics = CalculateMetricsStep(predictions=GENERATIONS).run(predictions=GENERATIONS)
    assert metrics["exact_match"] == 0.5 and metrics["f1"] == 0.625
    assert metrics["exact_match_stderr"] == pytest.approx(mean_stderr([1.0, 0.0, 0.0, 1.0]))
    assert metrics["f1_stderr"] == pytest.approx(mean_stderr([1.0, 0.5, 0.0, 1.0]))
    assert (metrics["truncated"], metrics["count"]) == (1, 4)


def test_a_table_holds_generation_and_multiple_choice_rows_side_by_side(tmp_path):
    results = {
        "squad/tiny": CalculateMetricsStep(predictions=GENERATIONS).run(predictions=GENERATIONS),
        "piqa/tiny": CalculateMetricsStep(predictions=PREDICTIONS).run(predictions=PREDICTIONS),
    }
    table = MetricsTable.from_results(results, ["task", "model"])
    assert {"acc", "exact_match", "f1"} <= set(table.columns)
    markdown = table.to_markdown().splitlines()
    header = [cell.strip() for cell in markdown[0].strip("|").split("|")]
    squad = [cell.strip() for cell in markdown[2].strip("|").split("|")]
    piqa = [cell.strip() for cell in markdown[3].strip("|").split("|")]
    assert squad[header.index("exact_match")] == "0.5000 ± 0.2887" and squad[header.index("acc")] == ""
    assert piqa[header.index("exact_match")] == "" and piqa[header.index("acc")] != ""

    out = tmp_path / "out"
    ExportPredictionsStep(step_name="export", output_dir=str(out), predictions={"squad/tiny": GENERATIONS,
                                                                                "piqa/tiny": PREDICTIONS},
                          table=table).result(LocalWorkspace(tmp_path / "ws"))
    written = [json.loads(line) for line in (out / "predictions" / "squad_tiny.jsonl").open()]
    assert written == GENERATIONS
    assert "exact_match" in (out / "metrics.md").read_text()
