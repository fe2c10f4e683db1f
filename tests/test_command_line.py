"""The command line offers the tasks of every kind its flags can set up, refuses the others and a
fine-tuning without a train split before anything runs, writes the diffs its ``--output_dir``
promises, and a config anywhere finds the Jsonnet helpers that ship in the package. Step graphs
are built, not run (the runs: tests/test_end_to_end.py, tests/test_install.py)."""

import json
import os
import subprocess
import sys

import pytest
from tango.common import Params
from tango.common.exceptions import ConfigurationError
from tango.step_graph import StepGraph

from catwalk_steps import FinetuneStep, PredictStep, evaluate, train
from catwalk_steps.command_line import CONFIGS, evaluate_jsonnet, resolve_tasks
from catwalk_steps.reports.tables import MetricsTable

from .conftest import REPO
from .documented import code_blocks, documented, documented_argv

TINY = REPO / "data" / "tiny"
LOCAL = {
    "piqa": [f"train={TINY}/train.jsonl", f"validation={TINY}/validation.jsonl"],
    "generation": [f"train={TINY}/generation/train.jsonl", f"validation={TINY}/generation/validation.jsonl"],
    "perplexity": [f"validation={TINY}/perplexity/documents.jsonl"],
    "wikitext": [f"test={TINY}/perplexity/wikitext_test.jsonl"],
    "lambada": [f"test={TINY}/perplexity/lambada_test.jsonl"],
}


def graph_of(command, argv):
    return StepGraph.from_params(json.loads(evaluate_jsonnet(command.build(command.parser().parse_args(argv))))["steps"])


@pytest.mark.parametrize("task", ["gsm8k", "squad", "wikitext", "lambada", "generation", "perplexity", "piqa"])
def test_evaluate_takes_tasks_of_every_kind(task):
    files = ["--data_files", *LOCAL[task]] if task in LOCAL else []
    graph = graph_of(evaluate, ["--model", f"rc::{TINY}/model", "--task", task, *files])
    assert graph[f"predict_rc::{str(TINY / 'model').replace('/', '_')}_{task}"].kwargs["task"].REQUEST_TYPE


@pytest.mark.parametrize("task, needs", [("template", "context"), ("lm_eval", "task")])
def test_tasks_the_flags_cannot_set_up_are_refused_with_what_they_need(task, needs, capsys):
    with pytest.raises(SystemExit):
        train.main(["--model", "rc::x", "--task", task])
    assert f"Task {task!r} needs settings the flags do not give ({needs}): write a config" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main(["--model", "rc::x", "--task", "nope"])
    assert "template" not in capsys.readouterr().err.split("the tasks are")[1].split("suites are")[0]


def test_max_new_tokens_reaches_the_generative_tasks_only(capsys):
    tasks, _ = resolve_tasks(["gsm8k", "squad", "piqa"], {}, max_new_tokens=8)
    assert tasks["gsm8k"]["max_new_tokens"] == tasks["squad"]["max_new_tokens"] == 8
    assert "max_new_tokens" not in tasks["piqa"]
    assert "max_new_tokens" not in resolve_tasks(["gsm8k"], {})[0]["gsm8k"]  # the task's own: the same key
    with pytest.raises(SystemExit):
        evaluate.main(["--model", "rc::m", "--task", "piqa", "--max_new_tokens", "8"])
    assert "--max_new_tokens applies to generative tasks (generation, gsm8k, squad); piqa generate" in \
        capsys.readouterr().err


def test_fine_tuning_without_a_train_split_is_refused_before_anything_runs(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit:
        train.main(["--model", f"rc::{TINY}/model", "--task", "piqa", "--data_files", f"validation={TINY}/validation.jsonl",
                    "-w", str(tmp_path / "ws")])
    assert exit.value.code == 2 and not (tmp_path / "ws").exists()
    assert "Fine-tuning needs a train split, which piqa has not (give --data_files train=PATH)" in capsys.readouterr().err


def test_output_dir_gets_the_diffs_the_help_promises(tmp_path):
    out = str(tmp_path / "out")
    trained = graph_of(train, ["--model", f"rc::{TINY}/model", "--task", "piqa", "--data_files", *LOCAL["piqa"],
                               "--output_dir", out])
    diff = trained["diff_piqa_fine-tuned_vs_zero-shot"]
    assert diff.kwargs["output_dir"] == f"{out}/diffs/piqa_fine-tuned_vs_zero-shot"
    models = ["--model", f"rc::{TINY}/model", "--model", f"rc::{TINY}/model-small", "--baseline", f"rc::{TINY}/model"]
    compared = graph_of(evaluate, [*models, "--task", "piqa", "--data_files", *LOCAL["piqa"], "--output_dir", out])
    assert [name for name in compared if name.startswith("diff_")] == [
        f"diff_piqa_rc::{str(TINY).replace('/', '_')}_model-small_vs_rc::{str(TINY).replace('/', '_')}_model"]
    generated = graph_of(evaluate, [*models, "--task", "generation", "--data_files", *LOCAL["generation"],
                                    "--output_dir", out])
    (diff,) = [step for name, step in generated.items() if name.startswith("diff_")]
    assert diff.kwargs.get("metric") is None  # the kind's own: exact_match
    # Perplexity has no instances that change answer: the table compares, no diff is promised.
    documents = graph_of(evaluate, [*models, "--task", "wikitext", "--data_files", *LOCAL["wikitext"], "--output_dir", out])
    assert "export" in documents and not [name for name in documents if name.startswith("diff_")]


def test_the_helpers_ship_in_the_package_and_the_repositorys_configs_import_them():
    assert (CONFIGS / "lib.libsonnet").is_file() and (CONFIGS / "suites.libsonnet").is_file()
    assert CONFIGS.parent.name == "catwalk_steps"
    assert "../catwalk_steps/configs/lib.libsonnet" in (REPO / "configs" / "lib.libsonnet").read_text()


def test_a_config_anywhere_finds_the_helpers_through_the_run_command(tmp_path, monkeypatch):
    from catwalk_steps.run import helpers_on_jsonnet_path

    config = tmp_path / "mine.jsonnet"
    config.write_text('local lib = import "lib.libsonnet";\n{ steps: lib.suite("core", { m: "rc::m" }) }\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match="imports lib.libsonnet, .* run it with python -m catwalk_steps.run"):
        Params.from_file(config)  # what plain `tango run` does
    from tango.common import params

    monkeypatch.setattr(params, "evaluate_file", params.evaluate_file)  # put back after the test
    helpers_on_jsonnet_path()
    assert "metrics_m_mmlu_0shot" in Params.from_file(config)["steps"]


def test_the_run_command_says_what_it_is():
    done = subprocess.run([sys.executable, "-m", "catwalk_steps.run", "--help"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 0 and "python -m catwalk_steps.run my_config.jsonnet" in done.stdout


@pytest.mark.e2e
@pytest.mark.full
def test_evaluate_runs_a_generation_task_against_a_baseline_with_its_diff(tmp_path):
    """A generative task from the command line: scored, compared (McNemar on exact match) and
    diffed on its own 0/1 metric."""
    models = ["--model", f"rc::{TINY}/model", "--model", f"rc::{TINY}/model-small", "--baseline", f"rc::{TINY}/model"]
    done = subprocess.run(
        [sys.executable, "-m", "catwalk_steps.evaluate", *models, "--task", "generation", "--data_files",
         *LOCAL["generation"], "--limit", "8", "--max_new_tokens", "8", "--output_dir", str(tmp_path / "out"), "-w", str(tmp_path / "ws")],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", "HF_HUB_OFFLINE": "1"},
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Δ exact_match" in done.stdout
    (summary,) = (tmp_path / "out" / "diffs").glob("*/diff.md")
    assert "(exact_match, 8 instances)" in summary.read_text()


@pytest.mark.e2e
@pytest.mark.full
def test_evaluate_runs_a_perplexity_task_against_a_baseline(tmp_path):
    """A task the command line refused before (wikitext), scored and compared end to end: the
    table pairs the models; no diff is written, as its help says."""
    models = ["--model", f"rc::{TINY}/model", "--model", f"rc::{TINY}/model-small", "--baseline", f"rc::{TINY}/model"]
    done = subprocess.run(
        [sys.executable, "-m", "catwalk_steps.evaluate", *models, "--task", "wikitext", "--data_files", *LOCAL["wikitext"],
         "--split", "test", "--output_dir", str(tmp_path / "out"), "-w", str(tmp_path / "ws")],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", "HF_HUB_OFFLINE": "1"},
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "word_perplexity" in done.stdout and "Δ loglik" in done.stdout
    assert (tmp_path / "out" / "metrics.md").is_file() and not (tmp_path / "out" / "diffs").exists()


def test_special_tokens_and_chat_flags_reach_the_steps(tmp_path):
    """--add_bos_token and --apply_chat_template reach fine-tuning and prediction alike (trained as
    scored); the chat settings reach prediction; left out, the steps keep their defaults."""
    chat = [f"train={TINY}/chat/train.jsonl", f"validation={TINY}/chat/validation.jsonl"]
    argv = ["--model", f"rc::{TINY}/chat-model", "--task", "generation", "--data_files", *chat,
            "--add_bos_token", "false", "--apply_chat_template", "--system_instruction", "Be brief.",
            "--fewshot_as_multiturn", "false"]
    graph = graph_of(train, argv)
    finetune = next(step for step in graph.values() if type(step).__name__ == "FinetuneStep")
    assert finetune.kwargs["add_bos_token"] is False and finetune.kwargs["apply_chat_template"] is True
    predict = [step for step in graph.values() if type(step).__name__ == "PredictStep"]
    assert predict and all(step.kwargs["apply_chat_template"] is True and step.kwargs["add_bos_token"] is False
                           and step.kwargs["system_instruction"] == "Be brief."
                           and step.kwargs["fewshot_as_multiturn"] is False for step in predict)
    plain = graph_of(evaluate, ["--model", f"rc::{TINY}/model", "--task", "piqa", "--data_files", *LOCAL["piqa"]])
    (step,) = [s for s in plain.values() if type(s).__name__ == "PredictStep"]
    assert step.kwargs["apply_chat_template"] is False and step.kwargs["add_bos_token"] is None


@pytest.mark.parametrize("command", [
    documented("python -m catwalk_steps.train --model rc::gpt2 --task piqa --device_count 2 --batch_size 16 "
               "--micro_batch_size 8 -w workspace"),
    documented("python -m catwalk_steps.evaluate --model rc::gpt2 --model rc::gpt2-medium --task core "
               "--baseline rc::gpt2 -w workspace"),
])
def test_the_documented_commands_build_their_steps(command):
    """docs/command-line.md's examples name hub models (no network here): their step graphs are
    built as the commands build them, and hold what the flags say; the train line's steps are
    those of the config the page calls its equivalent."""
    argv = documented_argv(command)
    module = {"catwalk_steps.train": train, "catwalk_steps.evaluate": evaluate}[argv[2]]
    graph = graph_of(module, argv[3:])
    if argv[2] == "catwalk_steps.train":
        assert graph["finetune"].kwargs["device_count"] == 2 and graph["finetune"].kwargs["batch_size"] == 16
        (equivalent,) = [block for _, block in code_blocks("jsonnet", [REPO / "docs" / "command-line.md"])]
        assert json.loads(evaluate_jsonnet(module.build(module.parser().parse_args(argv[3:])))) == \
            json.loads(evaluate_jsonnet(equivalent))
    else:
        assert {step.kwargs["model"] for step in graph.values() if step.kwargs.get("model")} >= {"rc::gpt2", "rc::gpt2-medium"}


def flags_of(parser) -> set:
    return {word.split("=")[0].strip(",[") for word in parser.format_help().split() if word.startswith("--")}


def test_every_setting_of_the_steps_is_a_flag_with_its_documentation():
    """The flags are the steps' settings, read from their signatures: a new setting is a flag
    without a hand-written one, with its documentation as help."""
    from catwalk_steps.step_flags import setting_docs, settings
    from catwalk_steps.training.settings import FinetuneSettings

    finetune, predict = settings(FinetuneStep.run), settings(PredictStep.run)
    assert {"packing", "val_metric", "completion_only_loss", "assistant_only_loss", "optimizer"} <= set(finetune)
    assert {f"--{name}" for name in [*finetune, *predict]} <= flags_of(train.parser())
    assert {f"--{name}" for name in predict} <= flags_of(evaluate.parser())
    documented = {**setting_docs(FinetuneStep.run, FinetuneSettings), **setting_docs(PredictStep.run)}
    undocumented = [name for name in [*finetune, *predict] if not documented.get(name)]
    assert not undocumented, f"settings without documentation (FinetuneSettings, predict's :param:): {undocumented}"
    assert "pack the training rows into sequences of the model's window" in " ".join(train.parser().format_help().split())


PIQA = {"piqa": {"type": "piqa", "data_files": {"train": "data/tiny/train.jsonl", "validation": "data/tiny/validation.jsonl"}}}
# A setting of each type, as flags and as the config writes them.
FINETUNE_SETTINGS = [
    (["--gradient_checkpointing", "--shared_context", "false"], {"gradient_checkpointing": True, "shared_context": False}),
    (["--batch_size", "8", "--patience", "2"], {"batch_size": 8, "patience": 2}),
    (["--learning_rate", "1e-3", "--warmup_fraction", "0"], {"learning_rate": 1e-3, "warmup_fraction": 0}),
    (["--val_metric", "loss", "--precision", "bf16-mixed"], {"val_metric": "loss", "precision": "bf16-mixed"}),
    (["--config_overrides", '{"resid_pdrop": 0.0}', "--adapter", '{"type": "lora"}'],
     {"config_overrides": {"resid_pdrop": 0.0}, "adapter": {"type": "lora"}}),
    (["--optimizer", '{"type": "torch::SGD", "lr": 0.1}', "--max_grad_norm", "null", "--validation_split", "null"],
     {"optimizer": {"type": "torch::SGD", "lr": 0.1}, "max_grad_norm": None, "validation_split": None}),
    (["--callbacks", "test::recording", "--wandb_project", "p", "--wandb_tags", "a", "b"],
     {"callbacks": [{"type": "test::recording"}], "wandb_project": "p", "wandb_tags": ["a", "b"]}),
]
PREDICT_SETTINGS = [
    (["--unconditioned", "--limit", "8", "--dtype", "bfloat16"], {"unconditioned": True, "limit": 8, "dtype": "bfloat16"}),
    (["--max_batch_tokens", "auto", "--max_batch_size", "4"], {"max_batch_tokens": "auto", "max_batch_size": 4}),
]
# A setting both steps take goes to both: trained as scored.
SHARED_SETTINGS = (["--add_bos_token", "true", "--device", "cpu"], {"add_bos_token": True, "device": "cpu"})


@pytest.mark.parametrize("flags, finetune, predict", [
    *[(flags, settings, {}) for flags, settings in FINETUNE_SETTINGS],
    *[(flags, {}, settings) for flags, settings in PREDICT_SETTINGS],
    (SHARED_SETTINGS[0], SHARED_SETTINGS[1], SHARED_SETTINGS[1]),
])
def test_a_command_and_a_config_with_the_same_settings_have_the_same_steps_and_keys(flags, finetune, predict,
                                                                                     monkeypatch):
    """Every setting reaches the command line, read as the config writes it (a bool, an int, a
    float, a string, a dict, a registrable by name, a list, null), into the same cache keys."""
    from tests.test_training_config import Recording  # noqa: F401  (registers test::recording)

    monkeypatch.chdir(REPO)
    argv = ["--model", "rc::data/tiny/model", "--task", "piqa", "--data_files", *[
        f"{split}={path}" for split, path in PIQA["piqa"]["data_files"].items()], *flags]
    command = json.loads(evaluate_jsonnet(train.build(train.parser().parse_args(argv))))["steps"]
    config = json.loads(evaluate_jsonnet(
        f'local lib = import "lib.libsonnet";\n{{ steps: lib.finetune_and_evaluate_tasks("rc::data/tiny/model", '
        f'{json.dumps(PIQA)}, {json.dumps(finetune)}, predict={json.dumps(predict)}) }}'))["steps"]
    assert command == config
    assert all(command["finetune"][name] == value for name, value in finetune.items())
    assert all(command["predict_zero_shot_piqa"][name] == value for name, value in predict.items())
    keys = [{name: step.unique_id for name, step in StepGraph.from_params(steps).items()} for steps in (command, config)]
    assert keys[0] == keys[1]


@pytest.mark.parametrize("flags, error", [
    (["--batch_size", "eight"], "argument --batch_size: 'eight' is not an integer"),
    (["--packing", "maybe"], "argument --packing: 'maybe' is not true/false"),
    (["--config_overrides", "dropout"], "argument --config_overrides: 'dropout' is not a JSON object or null"),
])
def test_a_value_of_the_wrong_type_is_refused_in_one_line(flags, error, capsys):
    with pytest.raises(SystemExit):
        train.parser().parse_args(["--model", "rc::m", "--task", "piqa", *flags])
    assert capsys.readouterr().err.splitlines()[-1].endswith(error)


def test_rows_are_named_by_the_models_as_typed(monkeypatch):
    """A local model's row shows the path the user typed (relative where it was relative), not
    a step name made of it."""
    monkeypatch.chdir(REPO)
    models = ["--model", "rc::data/tiny/model", "--model", "rc::data/tiny/model-small", "--baseline", "rc::data/tiny/model"]
    graph = graph_of(evaluate, [*models, "--task", "piqa", "--data_files", *LOCAL["piqa"], "--output_dir", "out"])
    rows = set(graph["table"].kwargs["metrics"])
    assert rows == {"piqa/rc::data/tiny/model", "piqa/rc::data/tiny/model-small"}
    table = MetricsTable.from_results({row: {"acc": 0.5} for row in sorted(rows)}, ["task", "model"])
    assert [(row["task"], row["model"]) for row in table.rows] == [("piqa", "rc::data/tiny/model"),
                                                                   ("piqa", "rc::data/tiny/model-small")]
    assert graph["table"].kwargs["baseline"] == "rc::data/tiny/model"
    diff = graph["diff_piqa_rc::data_tiny_model-small_vs_rc::data_tiny_model"]
    assert (diff.kwargs["baseline_name"], diff.kwargs["candidate_name"]) == \
        ("piqa/rc::data/tiny/model", "piqa/rc::data/tiny/model-small")
