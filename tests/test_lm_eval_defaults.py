"""The lm_eval task type takes a task's own settings as ``lm_eval --tasks NAME`` does: its
``num_fewshot`` when ``num_shots`` is unset, its ``description``, delimiters and ``gen_prefix``;
the shots used are in every record, in the metrics and in the table."""

import json
from pathlib import Path

import pytest
from tango.common.exceptions import ConfigurationError

from catwalk_steps import CalculateMetricsStep, PredictStep, TabulateMetricsStep
from catwalk_steps.tasks import LmEvalTask
from catwalk_steps.tasks.lm_eval_bridge import task_manager

from .conftest import TINY, TINY_MODEL

pytest.importorskip("lm_eval")
from .lm_eval_docs import LM_EVAL_TASKS, copy_generation_yamls  # noqa: E402  (imports lm_eval)



@pytest.fixture(scope="module")
def include_path(tmp_path_factory) -> str:
    directory = Path(copy_generation_yamls(tmp_path_factory.mktemp("lm_eval_defaults")))
    # gsm8k-like: the YAML says how many shots
    (directory / "arith_2shot.yaml").write_text("task: local_arith_2shot\ninclude: arith.yaml\nnum_fewshot: 2\n")
    files = {"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")}
    (directory / "piqa_own.yaml").write_text("\n".join([
        "task: local_piqa_own", f"include: {LM_EVAL_TASKS / 'piqa' / 'piqa.yaml'}", "dataset_path: json",
        "dataset_name: null", f"dataset_kwargs: {{data_files: {json.dumps(files)}}}", "test_split: null",
        "num_fewshot: 1", 'description: "Pick the better way.\\n\\n"', 'fewshot_delimiter: "\\n###\\n"',
        'target_delimiter: " ->"', 'gen_prefix: "Best:"',
    ]) + "\n")
    return str(directory)


def harness_requests(include_path: str, name: str):
    """lm-evaluation-harness's requests for ``name`` as its evaluator builds them at the task's
    own settings (``simple_evaluate(num_fewshot=None)``)."""
    task = task_manager(include_path, False).load(name)["tasks"][name]
    task.set_fewshot_seed(1234)
    task.build_all_requests(limit=4)
    return [request.arguments for request in task.instances]


def test_unset_num_shots_is_the_task_yaml_s(include_path):
    task = LmEvalTask(task="local_arith_2shot", include_path=include_path, include_defaults=False)
    assert task.num_shots == 2
    ours = [(i.prompt, i.until) for i in task.instances("validation", limit=4)]
    theirs = [(prompt, tuple(kwargs["until"])) for prompt, kwargs in harness_requests(include_path, "local_arith_2shot")]
    assert ours == theirs and all(prompt.count("Question:") == 3 for prompt, _ in ours)
    explicit = LmEvalTask(task="local_arith_2shot", include_path=include_path, include_defaults=False, num_shots=0)
    assert explicit.num_shots == 0 and explicit.instances("validation", limit=1)[0].prompt.count("Question:") == 1
    assert LmEvalTask(task="local_gen_arith", include_path=include_path, include_defaults=False).num_shots == 0
    # the same shots are the same task, whether written or taken from the YAML
    written = LmEvalTask(task="local_arith_2shot", include_path=include_path, include_defaults=False, num_shots=2)
    from tango.common.det_hash import det_hash

    assert det_hash(written) == det_hash(task) != det_hash(explicit)


def test_description_delimiters_and_gen_prefix_are_the_task_yaml_s(include_path):
    task = LmEvalTask(task="local_piqa_own", include_path=include_path, include_defaults=False)
    assert task.num_shots == 1
    ours = [pair for instance in task.instances("validation", limit=4) for pair in instance.pairs()]
    assert ours == harness_requests(include_path, "local_piqa_own")
    context, continuation = ours[0]
    assert context.startswith("Pick the better way.") and "\n###\n" in context and context.endswith("Best:")
    assert continuation.startswith(" ->")


def test_a_bad_num_fewshot_in_the_yaml_is_refused(include_path, tmp_path):
    (tmp_path / "bad.yaml").write_text(f"task: local_bad_shots\ninclude: {include_path}/arith.yaml\nnum_fewshot: -1\n")
    for path in Path(include_path).glob("arith*.jsonl"):
        (tmp_path / path.name).write_text(path.read_text())
    with pytest.raises(ConfigurationError, match="num_fewshot -1"):
        LmEvalTask(task="local_bad_shots", include_path=str(tmp_path), include_defaults=False)


def test_the_shots_are_in_the_records_the_metrics_and_the_table(include_path):
    task = LmEvalTask(task="local_piqa_own", include_path=include_path, include_defaults=False)
    records = PredictStep(model=TINY_MODEL, task=task, limit=4).run(model=TINY_MODEL, task=task, limit=4)
    assert {record["num_shots"] for record in records} == {1}
    metrics = CalculateMetricsStep(predictions=records).run(predictions=records)
    assert metrics["num_shots"] == 1
    zero = {**metrics, "num_shots": 0}
    table = TabulateMetricsStep(metrics={}).run(metrics={"own": metrics, "zero": zero})
    assert table.columns[1] == "num_shots" and [row["num_shots"] for row in table.rows] == [1, 0]
    assert "num_shots" not in TabulateMetricsStep(metrics={}).run(metrics={"zero": zero}).columns


def test_a_task_of_the_include_path_is_read_without_scanning_the_built_in_tasks(include_path, monkeypatch):
    """With ``include_defaults`` left on, a task YAML of ``include_path``'s own is found in the
    index of ``include_path`` alone (seconds of scanning lm-evaluation-harness's ~13,000 built-in
    YAMLs saved), with the same config, instances and cache key as under the full index."""
    from catwalk_steps.tasks import lm_eval_bridge

    asked = []

    def recording(path, include_defaults):
        asked.append(include_defaults)
        return task_manager(path, include_defaults)

    monkeypatch.setattr(lm_eval_bridge, "task_manager", recording)
    task = LmEvalTask(task="local_arith_2shot", include_path=include_path)
    split = task.splits[-1]
    instances = task.instances(split, limit=4)
    assert asked and not any(asked)  # only the include_path's own index
    full = task_manager(str(Path(include_path).resolve()), True)
    assert task.config == lm_eval_bridge.task_config(full, "local_arith_2shot")
    explicit = LmEvalTask(task="local_arith_2shot", include_path=include_path, include_defaults=False)
    assert instances == explicit.instances(split, limit=4)
    assert task.det_hash_object() == explicit.det_hash_object()
