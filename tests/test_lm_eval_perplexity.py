"""The lm_eval task type's ``loglikelihood_rolling`` and ``loglikelihood`` tasks against
lm-evaluation-harness: its own requests, and its own numbers (``lm_eval.simple_evaluate`` with
HFLM on the tiny model), on local task YAMLs that point its ``wikitext`` and ``lambada_openai``
at our tiny files, and on a plain perplexity YAML without a ``process_results`` of its own."""

import json

import pytest
from tango.common.exceptions import ConfigurationError

from catwalk_steps import CalculateMetricsStep, PredictStep
from catwalk_steps.tasks import DocumentInstance, LmEvalTask, TargetInstance
from catwalk_steps.tasks.lm_eval_bridge import task_manager

from .conftest import TINY, TINY_MODEL

lm_eval = pytest.importorskip("lm_eval")
from .lm_eval_docs import LM_EVAL_TASKS  # noqa: E402  (imports lm_eval)

PERPLEXITY = TINY / "perplexity"
#: task -> (split, the metrics lm-evaluation-harness reports for it)
TASKS = {
    "local_wikitext": ("test", ["word_perplexity", "byte_perplexity", "bits_per_byte"]),
    "local_documents": ("validation", ["word_perplexity", "byte_perplexity", "bits_per_byte"]),
    "local_lambada": ("test", ["perplexity", "acc"]),
}


def write_yamls(directory):
    data = {
        "wikitext": {"test": str(PERPLEXITY / "wikitext_test.jsonl")},
        "lambada": {"test": str(PERPLEXITY / "lambada_test.jsonl")},
    }
    for name, yaml in (("wikitext", "wikitext/wikitext.yaml"), ("lambada", "lambada/lambada_openai.yaml")):
        lines = [f"task: local_{name}", f"include: {LM_EVAL_TASKS / yaml}", "tag: []", "dataset_path: json",
                 "dataset_name: null", f"dataset_kwargs: {{data_files: {json.dumps(data[name])}}}",
                 "training_split: null", "validation_split: null", "test_split: test"]
        (directory / f"local_{name}.yaml").write_text("\n".join(lines) + "\n")
    (directory / "local_documents.yaml").write_text("\n".join([
        "task: local_documents", "dataset_path: json", "dataset_name: null",
        f"dataset_kwargs: {{data_files: {{validation: {PERPLEXITY / 'documents.jsonl'}}}}}",
        "output_type: loglikelihood_rolling", "validation_split: validation", 'doc_to_text: ""',
        'doc_to_target: "{{text}}"', "metric_list:", "  - metric: word_perplexity", "  - metric: byte_perplexity",
        "  - metric: bits_per_byte",
    ]) + "\n")


@pytest.fixture(scope="module")
def include_path(tmp_path_factory):
    directory = tmp_path_factory.mktemp("lm_eval_perplexity")
    write_yamls(directory)
    return str(directory)


@pytest.fixture(scope="module")
def harness_results(include_path):
    """lm-evaluation-harness's own run of the three tasks on the tiny model, on CPU."""
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=str(TINY / "model"), device="cpu", batch_size=32, dtype="float32")
    results = lm_eval.simple_evaluate(
        model=lm, tasks=sorted(TASKS), task_manager=task_manager(include_path, False), log_samples=False,
        bootstrap_iters=0,
    )
    return results["results"]


def bridge(include_path, name):
    return LmEvalTask(task=name, include_path=include_path, include_defaults=False)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_instances_are_lm_evaluation_harness_requests(include_path, name):
    split, _ = TASKS[name]
    ours = bridge(include_path, name)
    instances = ours.instances(split)
    task = task_manager(include_path, False).load(name)["tasks"][name]
    task.build_all_requests()
    requests = [request.arguments for request in task.instances]
    if ours.REQUEST_TYPE == "loglikelihood_rolling":
        assert all(isinstance(i, DocumentInstance) for i in instances)
        assert [(i.text,) for i in instances] == requests
    else:
        assert ours.REQUEST_TYPE == "loglikelihood" and all(isinstance(i, TargetInstance) for i in instances)
        assert [(i.context, i.target) for i in instances] == requests


@pytest.mark.parametrize("name", sorted(TASKS))
def test_numbers_are_lm_evaluation_harness_numbers(include_path, harness_results, name):
    split, metrics = TASKS[name]
    task = bridge(include_path, name)
    predictions = PredictStep(model=TINY_MODEL, task=task, split=split).run(model=TINY_MODEL, task=task, split=split)
    ours = CalculateMetricsStep(predictions=predictions).run(predictions=predictions)
    theirs = harness_results[name]
    for metric in metrics:
        print(name, metric, ours[metric], theirs[f"{metric},none"])
        assert ours[metric] == pytest.approx(theirs[f"{metric},none"], rel=1e-4)
    assert ours["count"] == len(predictions)


def test_a_perplexity_task_with_other_metrics_is_refused(tmp_path):
    (tmp_path / "odd.yaml").write_text("\n".join([
        "task: odd", "dataset_path: json", "dataset_name: null",
        f"dataset_kwargs: {{data_files: {{validation: {PERPLEXITY / 'documents.jsonl'}}}}}",
        "output_type: loglikelihood_rolling", "validation_split: validation", 'doc_to_text: ""',
        'doc_to_target: "{{text}}"', "metric_list:", "  - metric: word_perplexity", "    aggregation: mean",
    ]) + "\n")
    with pytest.raises(ConfigurationError, match="word_perplexity"):
        LmEvalTask(task="odd", include_path=str(tmp_path), include_defaults=False).instances("validation")
