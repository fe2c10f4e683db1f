"""Downstream evaluation inside fine-tuning (``eval_tasks``): at every validation each eval task
is scored on the in-memory weights, and the numbers of the returned weights are the ones
``catwalk::predict`` + ``catwalk::calculate_metrics`` give for the cached result; a
``val_metric`` of an eval task chooses the weights and drives ``patience``; 1 and 2 workers and
a killed and resumed run give the same history; bad settings fail when the graph is built."""

import pytest
from tango.common.exceptions import ConfigurationError
from tango.common.lazy import Lazy
from tango.workspaces import LocalWorkspace

from catwalk_steps import CalculateMetricsStep, FinetuneStep, PredictStep
from catwalk_steps.tasks import GenerationTask, PerplexityTask, PiqaTask
from catwalk_steps.training.eval_tasks import EvalTask

from .conftest import NO_DROPOUT, TINY, TINY_MODEL

GENERATION = TINY / "generation"
TOLERANCE = 1e-6
#: An eval task's number that chooses the weights (here an earlier validation's than the loss would).
BY_TOOLS = "eval/tools/exact_match"


@pytest.fixture(scope="module")
def piqa() -> PiqaTask:
    return PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})


@pytest.fixture(scope="module")
def tools() -> GenerationTask:
    return GenerationTask(data_files={split: str(GENERATION / f"{split}.jsonl") for split in ("train", "validation")},
                          until=["\n"], max_new_tokens=8)


@pytest.fixture(scope="module")
def eval_tasks(piqa, tools):
    """One of each kind, with predict settings: multiple choice, generation, perplexity."""
    documents = PerplexityTask(data_files={"validation": str(TINY / "perplexity" / "documents.jsonl")})
    return [EvalTask(piqa, limit=24), EvalTask(tools, name="tools", limit=12),
            EvalTask(documents, name="documents", limit=6)]


def finetune(task, eval_tasks, device_count: int = 1, **extra) -> FinetuneStep:
    """Training on the tools' answers, so that greedy answers to them become right."""
    settings = dict(
        model=TINY_MODEL, tasks=[task], batch_size=16, micro_batch_size=8, train_epochs=2, train_limit=64,
        validation_limit=12, learning_rate=3e-3, validate_every=4, eval_tasks=eval_tasks, device_count=device_count,
        config_overrides=NO_DROPOUT, step_name="finetune",
    )
    return FinetuneStep(**{**settings, **extra})


@pytest.fixture(scope="module")
def trained(tools, eval_tasks, tmp_path_factory):
    workspace = LocalWorkspace(tmp_path_factory.mktemp("eval_tasks"))
    step = finetune(tools, eval_tasks, val_metric=BY_TOOLS)
    return step, step.result(workspace), workspace


def test_in_loop_numbers_are_predict_and_calculate_metrics_of_the_result(trained, eval_tasks):
    """The returned weights are the best validation's by an eval task's exact match (not the
    lowest loss's), and each eval task's numbers for them are calculate_metrics of predict."""
    step, result, workspace = trained
    history = result.training_metrics["history"]["validations"]
    print("history:", history)
    assert [v["step"] for v in history] == [4, 8]
    assert all(set(v["eval"]) == {"piqa", "tools", "documents"} for v in history)
    by_tools = max(history, key=lambda v: (v["eval"]["tools"]["exact_match"], -v["val_loss"], -v["step"]))
    by_loss = min(history, key=lambda v: v["val_loss"])
    assert result.training_metrics["step"] == by_tools["step"] != by_loss["step"]
    in_loop = result.training_metrics["eval"]
    for entry in eval_tasks:
        entry = entry if isinstance(entry, EvalTask) else EvalTask(entry)
        predictions = PredictStep(model=step, task=entry.task, split=entry.split, limit=entry.limit,
                                  step_name=f"predict_{entry.name}")
        metrics = CalculateMetricsStep(predictions=predictions, step_name=f"metrics_{entry.name}").result(workspace)
        numbers = {name: value for name, value in metrics.items()
                   if isinstance(value, (int, float)) and name != "num_shots"}
        print(entry.name, numbers)
        assert in_loop[entry.name].keys() == numbers.keys()
        for name, value in numbers.items():
            assert in_loop[entry.name][name] == pytest.approx(value, abs=TOLERANCE, rel=TOLERANCE), (entry.name, name)
    assert in_loop["tools"]["exact_match"] > 0  # something to compare
