import json
import math

import pytest
from tango.common.exceptions import ConfigurationError
from tango.workspaces import LocalWorkspace

from catwalk_steps import ExportPredictionsStep
from catwalk_steps.reports.charts import binomial_stderr, stderr_of
from catwalk_steps.reports.tables import MetricsTable

from .test_metrics import PREDICTIONS

TABLE = MetricsTable.from_results(
    {
        "piqa/tiny/zero-shot": {"acc": 0.5, "acc_norm": 0.25, "count": 2},
        "piqa/tiny/fine-tuned": {"acc": 0.75, "count": 101},
        "tools/tiny/zero-shot": {"acc": 0.3, "count": 10},
    },
    ["task", "model", "run"],
)


def export(tmp_path, **settings) -> ExportPredictionsStep:
    step = ExportPredictionsStep(step_name="export", **settings)
    step.result(LocalWorkspace(tmp_path / "ws"))
    return step


def test_predictions_say_what_each_metric_chose_and_whether_it_was_right(tmp_path):
    out = tmp_path / "results" / "demo"  # made, with its parent
    export(tmp_path, output_dir=str(out), predictions={"piqa/tiny zero-shot": PREDICTIONS}, table=TABLE)
    records = [json.loads(line) for line in (out / "predictions" / "piqa_tiny_zero-shot.jsonl").open()]
    assert [r["id"] for r in records] == ["a", "b"]
    assert records[0]["logliks"] == [-4.0, -6.0] and records[0]["label"] == 1
    # as in test_metrics: a is picked 0 by summed log-likelihood, 1 by the others; b is 2 by all but acc_uncond
    assert records[0]["chosen"] == {"acc": 0, "acc_norm": 1, "acc_per_token": 1, "acc_uncond": 1}
    assert records[0]["correct"] == {"acc": False, "acc_norm": True, "acc_per_token": True, "acc_uncond": True}
    assert records[1]["chosen"]["acc_uncond"] == 0 and records[1]["correct"]["acc"] is True
    assert (out / "metrics.csv").read_text() == TABLE.to_csv()
    assert (out / "metrics.md").read_text() == TABLE.to_markdown()
    assert not list(out.glob("*.tmp")) and not (out / "acc.png").exists()


def test_chart_is_a_png_of_the_metric_with_stderr_bars(tmp_path):
    export(tmp_path, output_dir=str(tmp_path / "out"), table=TABLE, chart="acc_norm")
    assert (tmp_path / "out" / "acc_norm.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(ConfigurationError, match="no column 'acc_uncond' to chart; it has task, model, run, acc"):
        export(tmp_path, output_dir=str(tmp_path / "out"), table=TABLE, chart="acc_uncond")


def test_standard_error_is_binomial_unless_the_table_has_one():
    assert binomial_stderr(0.75, 101) == pytest.approx(math.sqrt(0.75 * 0.25 / 100))
    assert math.isnan(binomial_stderr(1.0, 1))
    assert stderr_of({"acc": 0.5, "count": 101}, "acc") == pytest.approx(0.05)
    assert stderr_of({"acc": 0.5, "count": 101, "acc_stderr": 0.01}, "acc") == 0.01


def test_bad_settings_fail_before_anything_runs(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigurationError, match="is not a writable directory"):
        ExportPredictionsStep(output_dir=str(tmp_path / "file" / "out"), table=TABLE)
    with pytest.raises(ConfigurationError, match="would both be written to a_b.jsonl"):
        ExportPredictionsStep(output_dir=str(tmp_path), predictions={"a/b": PREDICTIONS, "a b": PREDICTIONS})
    with pytest.raises(ConfigurationError, match="chart needs a table"):
        ExportPredictionsStep(output_dir=str(tmp_path), predictions={"a": PREDICTIONS}, chart="acc")


def test_training_curves_are_drawn_next_to_the_chart(tmp_path):
    def run(losses, accuracies, stopped_at=None):
        validations = [{"step": 2 * (n + 1), "val_acc": a, "val_loss": 1.0} for n, a in enumerate(accuracies)]
        best = max(validations, key=lambda v: v["val_acc"])
        return {**best, "history": {"loss": [[n + 1, v] for n, v in enumerate(losses)], "validations": validations},
                **({"stopped_at": stopped_at} if stopped_at else {})}

    training = {"tiny-lr0.001": run([1.0, 0.8, 0.7, 0.6], [0.5, 0.6]), "tiny-lr0.01": run([1.2, 0.9], [0.55], 2),
                "old": {"step": 4, "val_acc": 0.5}}  # trained before curves were recorded: left out
    out = tmp_path / "out"
    # The key of an export without `training` is the one from before it existed.
    assert ExportPredictionsStep(output_dir="/tmp/x").unique_id == "ExportPredictionsStep-4x6fy1E8krCQjuTHDhqPHHoPAUGv1oc7"
    export(tmp_path, output_dir=str(out), table=TABLE, chart="acc", training=training)
    assert (out / "training.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert (out / "acc.png").exists()
    export(tmp_path, output_dir=str(tmp_path / "none"), table=TABLE, training={"old": {"step": 4}})
    assert not (tmp_path / "none" / "training.png").exists()


def test_a_chart_of_a_calibration_metric_has_no_error_bars():
    assert math.isnan(stderr_of({"ece": 0.1, "count": 101}, "ece"))
