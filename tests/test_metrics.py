import json

import pytest
from tango.common.exceptions import ConfigurationError

from catwalk_steps import CalculateMetricsStep, TabulateMetricsStep
from catwalk_steps.metrics import MetricsTableFormat
from catwalk_steps.tables import MetricsTable

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
    assert metrics == {"acc": 0.5, "acc_norm": 1.0, "acc_per_token": 1.0, "acc_uncond": 0.5, "count": 2}


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


def test_an_empty_table_still_renders():
    table = MetricsTable.from_results({}, ["run"])
    assert table.to_markdown() == "| run |\n|---|\n"
    assert table.to_rich().row_count == 0
