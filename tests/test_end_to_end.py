"""`tango run` on the offline demo, in a subprocess, exactly as a user runs it; the DDP config's
steps are computed in this process under the keys `tango run` gives them (its 2-worker `tango run`
is exercised by tests/test_reliability.py's signal tests)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tango.step_graph import StepGraph
from tango.workspaces import LocalWorkspace

from .conftest import REPO, computed_in_this_process
from .documented import README_TRAIN, documented_argv, missing_rows, shown_outputs, table_rows
from .tango_runs import OFFLINE, documented_run, export_to, started_steps, tango_run

pytestmark = pytest.mark.e2e
DEMO_DIFF = "diff_fine-tuned_vs_zero-shot"
CALIBRATION = ("ece", "brier")


def metrics(workspace: Path, run: str):
    ws = LocalWorkspace(workspace)
    return {kind: ws.step_result_for_run(run, f"metrics_{kind}") for kind in ("zero_shot", "finetuned")}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    workspace = tmp_path_factory.mktemp("e2e") / "workspace"
    output = documented_run(
        "tango run configs/piqa_tiny.jsonnet -w workspace", workspace, "first",
        *export_to(workspace.parent / "results", [DEMO_DIFF]),
    )
    return workspace, output


def test_the_demo_prints_the_readmes_table(first_run):
    """The README shows the demo's table: its cells are the run's, to every digit shown."""
    _, output = first_run
    (shown,) = [block for block in shown_outputs("piqa-tiny/fine-tuned │") if "┃" in block]
    assert table_rows(shown) and not missing_rows(shown, output), (missing_rows(shown, output), output[-3000:])


def test_demo_fine_tuning_beats_zero_shot_and_prints_the_table(first_run):
    workspace, output = first_run
    results = metrics(workspace, "first")
    assert results["finetuned"]["count"] == results["zero_shot"]["count"] == 128
    assert results["finetuned"]["acc"] > results["zero_shot"]["acc"] + 0.2
    assert "piqa-tiny/fine-tuned" in output and "piqa-tiny/zero-shot" in output
    assert f"{results['finetuned']['acc']:.4f}" in output
    assert "pkg_resources" not in output and "Error saving pip packages" not in output  # Tango's, before compat


def test_demo_exports_predictions_and_table_where_the_config_says(first_run):
    workspace, _ = first_run
    results, exported = metrics(workspace, "first"), workspace.parent / "results"
    records = [json.loads(line) for line in (exported / "predictions" / "piqa-tiny_fine-tuned.jsonl").open()]
    assert len(records) == 128
    for metric in ("acc", "acc_norm", "acc_uncond"):
        assert sum(r["correct"][metric] for r in records) / 128 == pytest.approx(results["finetuned"][metric])
    table = LocalWorkspace(workspace).step_result_for_run("first", "table")
    assert (exported / "metrics.csv").read_text() == table.to_csv()
    assert (exported / "metrics.md").read_text() == table.to_markdown()
    assert not (exported / "acc.png").exists()  # the demo asks for no chart


def test_second_run_is_all_cache_hits(first_run):
    workspace, _ = first_run
    output = tango_run(
        "configs/piqa_tiny.jsonnet", workspace, "second", *export_to(workspace.parent / "results", [DEMO_DIFF])
    )
    assert sorted(started_steps(output)) == [DEMO_DIFF, "export", "results"]  # the uncached table and files only
    assert "Training" not in output
    assert metrics(workspace, "second") == metrics(workspace, "first")


def test_demo_compares_fine_tuned_with_zero_shot_and_lists_the_changed_questions(first_run):
    workspace, output = first_run
    assert "Δ acc [95% CI]" in output and "Holm-corrected" in output
    table = LocalWorkspace(workspace).step_result_for_run("first", "table")
    (tuned,) = [row for row in table.rows if row["run"] == "piqa-tiny/fine-tuned"]
    results = metrics(workspace, "first")
    assert tuned["delta_acc"] == pytest.approx(results["finetuned"]["acc"] - results["zero_shot"]["acc"])
    assert tuned["delta_acc_ci_low"] < tuned["delta_acc"] < tuned["delta_acc_ci_high"] and tuned["p_acc"] < 1e-3
    diffs = workspace.parent / "results" / "diffs" / DEMO_DIFF
    changed = [json.loads(line) for line in (diffs / "diff.jsonl").open()]
    assert len(changed) == tuned["wins_acc"] + tuned["losses_acc"]
    assert all(c["prompt"].startswith("Question: ") and c["gold"] in c["choices"] for c in changed)
    written = (diffs / "diff.md").read_text()
    assert f"- wins (candidate right, baseline wrong): {tuned['wins_acc']}" in written
    (shown,) = shown_outputs("# piqa-tiny/fine-tuned vs piqa-tiny/zero-shot")  # docs/comparisons.md's excerpt
    assert all(line in written.splitlines() for line in shown.splitlines()), (shown, written[:2000])


DEMO_FLAGS = documented_argv(README_TRAIN)[3:-2]  # the README's command-line example, without its -w


def command(module: str, *arguments: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", module, *arguments], cwd=REPO, env={**os.environ, **OFFLINE, "COLUMNS": "200"},
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.mark.full  # the keys' equality is checked without a run in test_comparison.py
def test_the_command_line_with_the_demos_settings_trains_and_scores_nothing_after_it(first_run):
    workspace, _ = first_run
    output = command("catwalk_steps.train", *DEMO_FLAGS, "-w", str(workspace))
    assert started_steps(output) and not {"finetune", "predict_zero_shot_piqa", "predict_finetuned_piqa"} & set(
        started_steps(output))
    assert "Training" not in output and "Δ acc [95% CI]" in output


@pytest.mark.full
def test_a_config_run_after_the_command_line_trains_nothing(tmp_path):
    settings = ["--train_limit", "16", "--train_epochs", "1", "--limit", "16"]
    command("catwalk_steps.train", *DEMO_FLAGS[:7], "--batch_size", "8", *settings, "-w", str(tmp_path / "ws"))
    config = tmp_path / "same.jsonnet"
    config.write_text(
        f'local lib = import "{REPO}/configs/lib.libsonnet";\n'
        '{ steps: lib.finetune_and_evaluate_tasks("rc::data/tiny/model", { piqa: { type: "piqa", data_files: '
        '{ train: "data/tiny/train.jsonl", validation: "data/tiny/validation.jsonl" } } }, '
        '{ batch_size: 8, train_epochs: 1, train_limit: 16 }, predict={ limit: 16 }) }\n'
    )
    # `tango run` computes no step its workspace's cache holds: so it would train and score nothing.
    graph = StepGraph.from_file(config)
    cache = LocalWorkspace(tmp_path / "ws").step_cache
    assert all(graph[name] in cache for name in ("finetune", "predict_finetuned_piqa", "predict_zero_shot_piqa"))


@pytest.mark.ddp
@pytest.mark.full
def test_two_process_run_gives_the_same_metrics_and_cache_key(first_run, tmp_path, monkeypatch):
    workspace, _ = first_run
    monkeypatch.chdir(REPO)  # the config's paths are the repository's
    kinds = ("zero_shot", "finetuned")
    two = computed_in_this_process(REPO / "configs/piqa_tiny_ddp.jsonnet", *(f"metrics_{kind}" for kind in kinds),
                                   workspace=tmp_path / "ddp")
    two, one = dict(zip(kinds, two)), metrics(workspace, "first")
    (meta,) = (tmp_path / "ddp").glob("cache/FinetuneStep-*/model.json")
    assert json.loads(meta.read_text())["training_metrics"]["world_size"] == 2
    for kind in one:
        # Accuracies (decisions) are equal; ece and brier move with the weights, which 1 and 2
        # workers round differently (within 3e-4, README): probabilities by as little again.
        assert {k: v for k, v in two[kind].items() if k not in CALIBRATION} == {
            k: v for k, v in one[kind].items() if k not in CALIBRATION}
        for k in CALIBRATION:
            assert two[kind][k] == pytest.approx(one[kind][k], abs=1e-3)
    # The same cache key (so in the first workspace this config would train nothing).
    (ddp_model,) = (tmp_path / "ddp" / "cache").glob("FinetuneStep-*")
    assert (workspace / "cache" / ddp_model.name / "cache-metadata.json").exists()


@pytest.mark.full
def test_another_config_reuses_the_fine_tuned_model(first_run):
    workspace, _ = first_run
    output = tango_run("configs/tools_tiny_transfer.jsonnet", workspace, "transfer")
    assert 'Starting step "finetune"' not in output and "Training" not in output
    table = LocalWorkspace(workspace).step_result_for_run("transfer", "table")
    (shared,) = [row for row in table.rows if row["run"] == "piqa/fine-tuned-on-piqa"]
    expected = {k: v for k, v in metrics(workspace, "first")["finetuned"].items() if k in table.columns}
    assert {k: shared[k] for k in expected} == expected and "acc" in expected


@pytest.mark.full
def test_offline_sweep_fills_every_cell_of_its_table_and_charts_it(sequential_sweep):
    workspace = sequential_sweep
    table = LocalWorkspace(workspace).step_result_for_run("sweep", "table")
    keys = ["task", "model", "finetuned_on", "seed", "lr"]
    accuracies = ["acc", "acc_norm", "acc_per_token", "acc_uncond"]
    assert table.columns == keys + [c for a in accuracies for c in (a, a + "_stderr")] + ["brier", "ece", "count"]
    expected = {
        (task, model, trained, seed)
        for task in ("piqa", "tools")
        for model in ("tiny", "tiny-small")
        for trained, seed in (("zero-shot", "-"), ("piqa", "1"), ("piqa", "2"))
    }
    assert {tuple(row[k] for k in keys[:4]) for row in table.rows} == expected
    for row in table.rows:
        has_uncond = row["task"] == "piqa"  # the template task has no unconditioned context
        for column in ["acc", "acc_norm", "acc_per_token", "count"] + (["acc_uncond"] if has_uncond else []):
            assert isinstance(row[column], (int, float)), (row, column)
    written = next((workspace / "cache").glob("TabulateMetricsStep-*"))
    assert {"table.md", "table.csv", "table.json"} <= {p.name for p in written.iterdir()}
    exported = workspace.parent / "results"
    assert len(list((exported / "predictions").glob("*.jsonl"))) == len(table.rows) == 12
    assert (exported / "acc.png").read_bytes().startswith(b"\x89PNG")


CORE_SUITE = {"piqa", "arc_easy", "arc_challenge", "openbookqa", "hellaswag", "copa", "boolq", "sciq", "winogrande",
              "commonsense_qa", "social_iqa", "mmlu"}


@pytest.mark.full
def test_core_suite_zero_and_five_shot_in_one_table_with_macro_averages(tmp_path):
    output = tango_run("configs/core_tiny.jsonnet", tmp_path / "core", "core")
    (shown,) = shown_outputs("│ 0-shot │ mmlu")  # docs/configs.md shows part of the table
    assert table_rows(shown) and not missing_rows(shown, output), (missing_rows(shown, output), output[-3000:])
    workspace = LocalWorkspace(tmp_path / "core")
    table = workspace.step_result_for_run("core", "table")
    for shots in ("0-shot", "5-shot"):
        rows = {row["task"]: row for row in table.rows if row["model"] == "tiny" and row["shots"] == shots}
        assert set(rows) == CORE_SUITE | {"macro-average"}
        macro = rows.pop("macro-average")
        assert macro["acc"] == pytest.approx(sum(row["acc"] for row in rows.values()) / len(CORE_SUITE))
        assert all(isinstance(row["acc_stderr"], float) for row in [macro, *rows.values()])
    assert "macro-average" in output and " ± " in output
    zero, five = (workspace.step_result_for_run("core", f"predict_tiny_piqa_{k}shot") for k in (0, 5))
    assert [p["logliks"] for p in zero] != [p["logliks"] for p in five]  # the demonstrations are scored with


@pytest.mark.full
def test_the_generation_demo_scores_generation_and_perplexity_before_and_after(tmp_path):
    workspace = tmp_path / "workspace"
    documented_run("tango run configs/generation_tiny.jsonnet -w workspace", workspace, "generation",
                   *export_to(tmp_path / "results"))
    table = LocalWorkspace(workspace).step_result_for_run("generation", "table")
    rows = {(row["task"], row["run"]): row for row in table.rows}
    assert rows["generation", "fine-tuned"]["exact_match"] > rows["generation", "zero-shot"]["exact_match"] + 0.3
    for task in ("answered-questions", "tool-texts"):
        for run in ("zero-shot", "fine-tuned"):
            assert 1 < rows[task, run]["word_perplexity"] < float("inf") and rows[task, run]["bits_per_byte"] > 0


@pytest.mark.full
def test_the_chat_demo_learns_the_assistant_turns_and_prints_the_readmes_table(tmp_path):
    workspace = tmp_path / "workspace"
    output = documented_run("tango run configs/chat_tiny.jsonnet -w workspace", workspace, "chat")
    shown = shown_outputs("│ chat │ fine-tuned")
    assert len(shown) == 2  # the README's and docs/chat.md's
    assert not [row for block in shown for row in missing_rows(block, output)], output[-3000:]
    model = LocalWorkspace(workspace).step_result_for_run("chat", "finetune")
    assert model.training_metrics["val_exact_match"] > 0.9
