"""The lm_eval task type on generate_until tasks against lm-evaluation-harness's own run
(``lm_eval.simple_evaluate`` with its HFLM on the same tiny model, 32 per batch): the same
prompts, every greedy generation identical, every metric equal. Task YAMLs in tests/data."""

from pathlib import Path

import pytest
from tango.common.exceptions import ConfigurationError
from tango.workspaces import LocalWorkspace

from catwalk_steps import CalculateMetricsStep, PredictStep
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.models.weights import load_pretrained
from catwalk_steps.tasks import LmEvalTask
from catwalk_steps.tasks.lm_eval_bridge import task_manager

from .conftest import TINY_MODEL



@pytest.fixture(scope="module")
def include_path(tmp_path_factory) -> str:
    """The task YAMLs, pointed at their documents where they are copied to."""
    from .lm_eval_docs import copy_generation_yamls

    return copy_generation_yamls(tmp_path_factory.mktemp("lm_eval_generation"))


def harness_run(include_path: str, name: str, num_shots: int):
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    spec = ModelSpec.parse(TINY_MODEL)
    model = HFLM(pretrained=load_pretrained(spec).eval(), tokenizer=spec.load_tokenizer(), batch_size=32, device="cpu")
    results = lm_eval.simple_evaluate(
        model=model, tasks=[name], num_fewshot=num_shots, task_manager=task_manager(include_path, False),
        log_samples=True, fewshot_random_seed=1234,
    )
    return results["results"][name], results["samples"][name]


@pytest.mark.parametrize("name, num_shots", [("local_gen_arith", 2), ("local_gen_qa", 0)])
def test_generations_and_metrics_equal_lm_evaluation_harness_s(include_path, name, num_shots, tmp_path):
    task = LmEvalTask(task=name, include_path=include_path, include_defaults=False, num_shots=num_shots)
    assert task.REQUEST_TYPE == "generate_until"
    step = PredictStep(model=TINY_MODEL, task=task, device="cpu", max_batch_size=32, step_name="predict")
    ours = step.result(LocalWorkspace(tmp_path))
    metrics = CalculateMetricsStep(predictions=ours).run(predictions=ours)
    expected, samples = harness_run(include_path, name, num_shots)

    by_doc = {}
    for sample in samples:  # one per document and filter
        by_doc.setdefault(sample["doc_id"], sample)
    assert len(ours) == len(by_doc)
    for record, instance in zip(ours, task.instances("validation")):
        sample = by_doc[int(record["id"].split("/")[1])]
        assert instance.prompt == sample["arguments"][0][0]
        assert record["generation"] == sample["resps"][0][0]
    found = {key.replace(",none", "").replace(",", "/"): value for key, value in expected.items()
             if "," in key and "_stderr" not in key}
    assert found and {k: metrics[k] for k in found} == found
    for key, value in expected.items():
        if "_stderr," in key and value != "N/A":
            metric = key.replace("_stderr,none", "").replace("_stderr,", "/")
            assert metrics[f"{metric}_stderr"] == pytest.approx(value)
    if name == "local_gen_arith":  # 2-shot prompts are cut to fit the tiny model's 64-token window
        assert all(r["truncated"] for r in ours)
    else:  # some of its answers are what the tiny model says, so the scores are not all 0
        assert metrics["exact_match"] > 0 and metrics["prefix_match"] > metrics["exact_match"]


def test_sampling_settings_are_refused_before_any_data_is_read(include_path, tmp_path):
    (Path(include_path) / "sampled.yaml").write_text(
        "task: local_gen_sampled\ninclude: qa.yaml\ngeneration_kwargs: {until: ['\\n'], do_sample: true, temperature: 0.7}\n"
    )
    task_manager.cache_clear()
    with pytest.raises(ConfigurationError, match="only greedy decoding of one answer is run"):
        LmEvalTask(task="local_gen_sampled", include_path=include_path, include_defaults=False)
    task_manager.cache_clear()
