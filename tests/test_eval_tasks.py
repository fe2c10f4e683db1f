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
from .test_olmes import tiny_olmes
from .test_training_invariance import WEIGHT_TOLERANCE, largest_difference

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
    """Training on the tools' answers, so that greedy answers to them become right (at step 4
    here, and wrong again at step 8, where the loss is lowest)."""
    settings = dict(
        model=TINY_MODEL, tasks=[task], batch_size=16, micro_batch_size=8, train_epochs=2, train_limit=64,
        validation_limit=12, learning_rate=3e-3, validate_every=4, eval_tasks=eval_tasks, device_count=device_count,
        config_overrides=NO_DROPOUT, step_name="finetune",
    )
    return FinetuneStep(**{**settings, **extra})


@pytest.fixture(scope="module")
def evaluated(tools, piqa, tmp_path_factory):
    """The quick representative: one step, one validation, a little of each eval task (and an
    OLMES task's), tracked by TensorBoard."""
    documents = PerplexityTask(data_files={"validation": str(TINY / "perplexity" / "documents.jsonl")})
    olmes = tiny_olmes("winogrande:rc::olmes", limit=6)  # its records name their primary metric
    eval_tasks = [EvalTask(piqa, limit=8), EvalTask(tools, name="tools", limit=4),
                  EvalTask(documents, name="documents", limit=2), EvalTask(olmes, name="winogrande_olmes")]
    root = tmp_path_factory.mktemp("evaluated")
    workspace = LocalWorkspace(root / "workspace")
    step = finetune(tools, eval_tasks, train_epochs=1, train_limit=16, validation_limit=4,
                    tensorboard_dir=str(root / "tensorboard"))
    return step, step.result(workspace), workspace, eval_tasks


@pytest.fixture(scope="module")
def chosen(tools, eval_tasks, tmp_path_factory):
    """Two validations, the weights chosen by the tools' exact match."""
    workspace = LocalWorkspace(tmp_path_factory.mktemp("chosen"))
    step = finetune(tools, eval_tasks, val_metric=BY_TOOLS)
    return step, step.result(workspace), workspace


def assert_predict_gives_the_in_loop_numbers(step, result, workspace, eval_tasks) -> None:
    """Each eval task's numbers for the returned weights are calculate_metrics of predict."""
    in_loop = result.training_metrics["eval"]
    for entry in eval_tasks:
        predictions = PredictStep(model=step, task=entry.task, split=entry.split, limit=entry.limit,
                                  step_name=f"predict_{entry.name}")
        metrics = CalculateMetricsStep(predictions=predictions, step_name=f"metrics_{entry.name}").result(workspace)
        numbers = {name: value for name, value in metrics.items()
                   if isinstance(value, (int, float)) and name != "num_shots"}
        print(entry.name, numbers)
        assert in_loop[entry.name].keys() == numbers.keys()
        for name, value in numbers.items():
            assert in_loop[entry.name][name] == pytest.approx(value, abs=TOLERANCE, rel=TOLERANCE), (entry.name, name)


def test_in_loop_numbers_are_predict_and_calculate_metrics_of_the_result(evaluated):
    step, result, workspace, eval_tasks = evaluated
    history = history_of(result)
    assert [v["step"] for v in history] == [1]
    assert history[0]["eval"] == result.training_metrics["eval"]
    assert set(result.training_metrics["eval"]) == {"piqa", "tools", "documents", "winogrande_olmes"}
    assert "primary_score" in result.training_metrics["eval"]["winogrande_olmes"]
    assert_predict_gives_the_in_loop_numbers(step, result, workspace, eval_tasks)


def test_tensorboard_gets_each_eval_number_by_step(evaluated):
    from .test_tracking import tensorboard_series

    step, result, workspace, _ = evaluated
    (run_dir,) = (workspace.dir.parent / "tensorboard").iterdir()
    history = history_of(result)
    for task, metrics in history[0]["eval"].items():
        for metric in metrics:
            expected = [[v["step"], pytest.approx(v["eval"][task][metric], rel=1e-6)] for v in history]
            assert tensorboard_series(run_dir, f"eval/{task}/{metric}") == expected, (task, metric)


@pytest.mark.full
def test_an_adapter_s_in_loop_numbers_are_predict_s(tools, piqa, tmp_path):
    """Under LoRA the in-loop model is peft's, the result the adapter applied when loaded."""
    eval_tasks = [EvalTask(piqa, limit=8), EvalTask(tools, name="tools", limit=4)]
    workspace = LocalWorkspace(tmp_path)
    step = finetune(tools, eval_tasks, train_epochs=1, train_limit=16, validation_limit=4,
                    adapter={"type": "lora", "r": 4})
    assert_predict_gives_the_in_loop_numbers(step, step.result(workspace), workspace, eval_tasks)


@pytest.mark.full
def test_a_chat_fine_tune_s_eval_tasks_are_scored_under_its_template(piqa, tmp_path):
    """Under apply_chat_template the result keeps the template, and catwalk::predict scores it so:
    so do the eval tasks (a multiple-choice task and chat data)."""
    from .test_chat_data import CHAT_MODEL

    chat = GenerationTask(
        data_files={split: str(TINY / "chat" / f"{split}.jsonl") for split in ("train", "validation")}, max_new_tokens=8)
    eval_tasks = [EvalTask(piqa, limit=4), EvalTask(chat, name="chat", limit=4)]
    workspace = LocalWorkspace(tmp_path)
    step = FinetuneStep(model=CHAT_MODEL, tasks=[chat], apply_chat_template=True, batch_size=8, train_limit=8,
                        validation_limit=4, eval_tasks=eval_tasks, step_name="finetune")
    assert_predict_gives_the_in_loop_numbers(step, step.result(workspace), workspace, eval_tasks)


@pytest.mark.full
def test_an_eval_task_s_number_chooses_the_returned_weights(chosen, eval_tasks):
    """The returned weights are the best validation's by an eval task's exact match (not the
    lowest loss's), and each eval task's numbers for them are calculate_metrics of predict."""
    step, result, workspace = chosen
    history = history_of(result)
    print("history:", history)
    assert [v["step"] for v in history] == [4, 8]
    by_tools = max(history, key=lambda v: (v["eval"]["tools"]["exact_match"], -v["val_loss"], -v["step"]))
    by_loss = min(history, key=lambda v: v["val_loss"])
    assert result.training_metrics["step"] == by_tools["step"] != by_loss["step"]
    assert result.training_metrics["eval"]["tools"]["exact_match"] > 0  # something to compare
    assert_predict_gives_the_in_loop_numbers(step, result, workspace, eval_tasks)


def history_of(result):
    return result.training_metrics["history"]["validations"]


def assert_same_history(history, reference, rel: float) -> None:
    assert [v["step"] for v in history] == [v["step"] for v in reference]
    for validation, expected in zip(history, reference):
        assert validation["eval"].keys() == expected["eval"].keys()
        for task, metrics in expected["eval"].items():
            assert validation["eval"][task] == pytest.approx(metrics, rel=rel, abs=rel), (validation["step"], task)


@pytest.mark.full
@pytest.mark.ddp
def test_two_workers_give_the_one_worker_history(chosen, tools, eval_tasks, tmp_path):
    """Each worker scores its share of every eval task; the numbers are the one worker's (within
    what padding in other batches moves a log-likelihood), and so is the chosen validation."""
    _, one, _ = chosen
    two = finetune(tools, eval_tasks, 2, val_metric=BY_TOOLS).result(LocalWorkspace(tmp_path))
    assert_same_history(history_of(two), history_of(one), rel=1e-4)
    assert two.training_metrics["step"] == one.training_metrics["step"]


@pytest.mark.full
@pytest.mark.ddp
def test_two_fsdp_workers_give_the_one_worker_history(chosen, tools, eval_tasks, tmp_path):
    """Under FSDP each worker gathers the whole model for the eval tasks (their forward passes
    and generations are its own) and reshards after: the numbers and the chosen validation are
    the one worker's, and training goes on as sharded as before."""
    _, one, _ = chosen
    two = finetune(tools, eval_tasks, 2, val_metric=BY_TOOLS, strategy="fsdp").result(LocalWorkspace(tmp_path))
    assert_same_history(history_of(two), history_of(one), rel=1e-4)
    assert two.training_metrics["step"] == one.training_metrics["step"]
    assert largest_difference(two.state_dict, one.state_dict) < WEIGHT_TOLERANCE


@pytest.mark.full
def test_micro_batching_gives_the_same_history(chosen, tools, eval_tasks, tmp_path):
    """One forward pass a step instead of two: the weights within summation order, so the eval
    numbers too."""
    _, reference, _ = chosen
    whole = finetune(tools, eval_tasks, val_metric=BY_TOOLS, micro_batch_size=16).result(LocalWorkspace(tmp_path))
    assert_same_history(history_of(whole), history_of(reference), rel=1e-4)
    assert whole.training_metrics["step"] == reference.training_metrics["step"]


@pytest.mark.full
def test_a_killed_and_resumed_run_gives_the_same_history(chosen, tools, eval_tasks, tmp_path):
    from .test_training_invariance import Interrupt

    _, reference, _ = chosen
    workspace = LocalWorkspace(tmp_path)
    with pytest.raises(Exception, match="interrupted at step 6"):
        finetune(tools, eval_tasks, val_metric=BY_TOOLS, callbacks=[Lazy(Interrupt, at=6)]).result(workspace)
    resumed = finetune(tools, eval_tasks, val_metric=BY_TOOLS).result(workspace)
    assert_same_history(history_of(resumed), history_of(reference), rel=TOLERANCE)
    assert resumed.training_metrics["step"] == reference.training_metrics["step"]


def test_an_eval_task_s_number_ranks_validations_and_drives_patience():
    """Higher is better for accuracies, lower for perplexities; of equal numbers, the lower loss."""
    from catwalk_steps.training.callbacks import should_stop
    from catwalk_steps.training.checkpoints import Progress

    def validation(step, loss, acc, bpb):
        return {"step": step, "val_loss": loss, "eval": {"piqa": {"acc": acc}, "documents": {"bits_per_byte": bpb}}}

    validations = [validation(2, 3.0, 0.5, 2.0), validation(4, 2.0, 0.6, 2.5), validation(6, 1.0, 0.6, 1.5)]
    assert Progress(6, validations, selected="eval/piqa/acc").best["step"] == 6  # the lower loss of equal ones
    assert Progress(6, validations, selected="eval/documents/bits_per_byte").best["step"] == 6
    assert Progress(4, validations[:2], selected="eval/documents/bits_per_byte").best["step"] == 2
    assert should_stop(validations[:2], 1, "eval/documents/bits_per_byte")
    assert not should_stop(validations, 1, "eval/documents/bits_per_byte")


def test_a_plain_task_and_a_task_with_settings_both_read_from_a_config(piqa):
    from tango.step_graph import StepGraph

    from catwalk_steps.training.settings import FinetuneSettings

    validation = str(TINY / "validation.jsonl")
    step = StepGraph.from_params({"finetune": {
        "type": "catwalk::finetune", "model": TINY_MODEL,
        "tasks": [{"type": "piqa", "data_files": {"train": str(TINY / "train.jsonl"), "validation": validation}}],
        "eval_tasks": [{"type": "piqa", "data_files": {"validation": validation}},
                       {"task": {"type": "piqa", "data_files": {"validation": validation}}, "limit": 8,
                        "name": "piqa_8"}],
        "val_metric": "eval/piqa_8/acc_norm",
    }})["finetune"]
    first, second = step.kwargs["eval_tasks"]
    assert isinstance(first, PiqaTask) and isinstance(second, EvalTask) and (second.name, second.limit) == ("piqa_8", 8)
    assert "eval_tasks" in FinetuneSettings.__dataclass_fields__


def test_an_olmes_task_s_primary_score_can_choose(tools):
    olmes = EvalTask(tiny_olmes("winogrande:rc::olmes"), name="winogrande")
    FinetuneStep(model=TINY_MODEL, tasks=[tools], eval_tasks=[olmes], val_metric="eval/winogrande/primary_score")
    FinetuneStep(model=TINY_MODEL, tasks=[tools], eval_tasks=[olmes], val_metric="eval/winogrande/acc_raw")


def test_eval_tasks_are_in_the_key_only_when_set(piqa, tools):
    plain = FinetuneStep(model=TINY_MODEL, tasks=[piqa])
    assert FinetuneStep(model=TINY_MODEL, tasks=[piqa], eval_tasks=None).unique_id == plain.unique_id
    with_eval = FinetuneStep(model=TINY_MODEL, tasks=[piqa], eval_tasks=[tools])
    assert with_eval.unique_id != plain.unique_id
    assert FinetuneStep(model=TINY_MODEL, tasks=[piqa], eval_tasks=[EvalTask(tools, limit=4)]).unique_id not in (
        plain.unique_id, with_eval.unique_id)


@pytest.mark.parametrize("settings, message", [
    (dict(val_metric="eval/piqa/acc"), "names an eval task, but eval_tasks is empty"),
    (dict(eval_tasks="piqa", validation_split=None), "needs a validation_split"),
    (dict(eval_tasks="twice"), "two entries are named piqa"),
    (dict(eval_tasks="test split"), "has no split 'test'"),
    (dict(eval_tasks="limit 0"), "limit must be at least 1"),
    (dict(eval_tasks="documents", apply_chat_template=True), "no prompt to put in a conversation"),
    (dict(eval_tasks="chat"), "holds conversations .* only a chat template turns into prompts"),
    (dict(eval_tasks="piqa", val_metric="eval/arc/acc"), "no eval task is named 'arc'"),
    (dict(eval_tasks="piqa", val_metric="eval/piqa/exact_match"), "metrics that can choose are acc, acc_norm"),
    (dict(eval_tasks="tools", val_metric="eval/tools/acc"), "metrics that can choose are exact_match, f1"),
    (dict(eval_tasks="piqa", val_metric="eval/piqa"), "eval/TASK/METRIC"),
], ids=lambda value: value if isinstance(value, str) else None)
def test_bad_eval_settings_are_refused_when_the_graph_is_built(piqa, tools, settings, message):
    documents = PerplexityTask(data_files={"validation": str(TINY / "perplexity" / "documents.jsonl")})
    named = {"piqa": [piqa], "twice": [piqa, EvalTask(piqa, limit=4)], "test split": [EvalTask(piqa, split="test")],
             "limit 0": [EvalTask(piqa, limit=0)], "documents": [documents], "tools": [EvalTask(tools, name="tools")],
             "chat": [GenerationTask(data_files={"validation": str(TINY / "chat" / "validation.jsonl")})]}
    if "eval_tasks" in settings:
        settings = {**settings, "eval_tasks": named[settings["eval_tasks"]]}
    with pytest.raises(ConfigurationError, match=message):
        FinetuneStep(model=TINY_MODEL, tasks=[piqa], **settings)


def test_the_training_chart_draws_the_eval_tasks(tmp_path):
    from catwalk_steps.reports.curves import eval_curves, training_chart

    validations = [{"step": s, "val_acc": 0.5, "val_loss": 1.0, "eval": {
        "piqa": {"acc": a, "acc_stderr": 0.1, "count": 24},
        "documents": {"word_perplexity": 90.0, "bits_per_byte": b}}} for s, a, b in ((2, 0.5, 3.0), (4, 0.6, 2.5))]
    history = {"loss": [[1, 2.5], [2, 2.0]], "validations": validations}
    assert eval_curves(history) == {"piqa acc": ([2, 4], [0.5, 0.6]), "documents bits_per_byte": ([2, 4], [3.0, 2.5])}
    training_chart({"run": {**validations[1], "step": 4, "history": history}}, tmp_path / "training.png")
    from PIL import Image

    assert Image.open(tmp_path / "training.png").size[0] > 3 * 5 * 120  # three panels
