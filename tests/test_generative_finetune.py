"""Fine-tuning on generative tasks keeps the promises of multiple-choice training: the loss is
normalised by the answer tokens of the whole global batch, so 1 and 2 workers (dropout on) give
one cache key and the same model; tasks of two kinds are refused when the graph is built."""

import pytest
import torch
from tango.common.exceptions import ConfigurationError
from tango.common.lazy import Lazy
from tango.workspaces import LocalWorkspace

from catwalk_steps import FinetuneStep
from catwalk_steps.tasks import GenerationTask

from .conftest import NO_DROPOUT, TINY, TINY_MODEL, write_jsonl
from .test_seq2seq import tiny_t5  # noqa: F401 (a fixture)
from .test_training_invariance import WEIGHT_TOLERANCE, Interrupt, RecordStart, largest_difference

GENERATION = TINY / "generation"
LORA = {"type": "lora", "r": 4}
#: bfloat16 autocast rounds to 8 significant bits: a float32 difference in summation order moves
#: later roundings, so 1 and 2 workers part further than in float32 (measured 1.4e-4 here).
BF16_WEIGHT_TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def tool_answers() -> GenerationTask:
    return GenerationTask(data_files={split: str(GENERATION / f"{split}.jsonl") for split in ("train", "validation")},
                          until=["\n"], max_new_tokens=8)


def finetune(task, device_count: int = 1, **extra) -> FinetuneStep:
    settings = dict(
        model=TINY_MODEL, tasks=[task], batch_size=8, micro_batch_size=2, train_epochs=2, train_limit=20,
        validation_limit=12, learning_rate=3e-3, validate_every=2, device_count=device_count, step_name="finetune",
    )
    return FinetuneStep(**{**settings, **extra})


def test_micro_batch_losses_add_up_to_the_global_batch_gradient():
    """Two micro-batches of different answer-token counts: each one's summed loss divided by the
    global batch's tokens (over 1 worker, or 2 whose gradients DDP averages) gives the full
    batch's gradient, which a mean per micro-batch does not."""
    from catwalk_steps.models.answer_loss import AnswerCollator, AnswerLossModel
    from catwalk_steps.models.answer_rows import AnswerRow
    from catwalk_steps.models.loading import ModelSpec
    from catwalk_steps.training.batches import BatchPlan
    from catwalk_steps.kinds import Generation

    model = AnswerLossModel(ModelSpec.parse(TINY_MODEL, config_overrides=NO_DROPOUT))
    model.train()
    answers = [([5, 6, 7], [8, 0]), ([9], [0]), ([10, 11], [12, 13, 14, 15, 0]), ([16], [17, 18, 19, 20, 21, 22, 0])]
    train = [AnswerRow(tuple(prompt), tuple(answer), None, len(answer)) for prompt, answer in answers]
    collate = AnswerCollator(pad_token_id=0, max_length=64)
    plan = BatchPlan(len(train), batch_size=4, micro_batch_size=2, seed=0)

    def gradient(losses) -> torch.Tensor:
        model.zero_grad()
        sum(losses).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    def loss_divisor(world_size: int) -> float:  # the step's, as the loop asks the kind for it
        step_examples = [train[i] for i in plan.step_examples(0)]
        return Generation.training.loss_divisor(step_examples, plan.micro_batches_per_step // world_size, world_size)

    def micro_batch_losses(rank: int, world_size: int, normalised: bool = True):
        for _, indices in plan.micro_batches(0, rank, world_size):
            output = model(**collate([train[i] for i in indices]))
            yield output["loss"] / (loss_divisor(world_size) if normalised else output["tokens"].sum())

    tokens = [len(train[i].answer) for i in plan.step_examples(0)]
    assert sum(tokens[:2]) != sum(tokens[2:]) and loss_divisor(1) == sum(tokens)
    whole = gradient([model(**collate([train[i] for i in plan.step_examples(0)]))["loss"] / sum(tokens)])
    one_worker = gradient(micro_batch_losses(0, 1))
    two_workers = (gradient(micro_batch_losses(0, 2)) + gradient(micro_batch_losses(1, 2))) / 2  # DDP's average
    torch.testing.assert_close(one_worker, whole, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(two_workers, whole, rtol=1e-4, atol=1e-7)
    means = gradient(micro_batch_losses(0, 1, normalised=False)) / 2
    assert not torch.allclose(means, whole, rtol=1e-3)


def test_an_encoder_decoder_learns_the_answer_and_eos_once(tiny_t5):
    """T5's scoring appends EOS to every target itself: the answer gets no second one, and the
    loss and its token count are HF's own over answer + EOS."""
    from catwalk_steps.models.answer_loss import AnswerCollator, AnswerLossModel, encode_answer
    from catwalk_steps.models.answer_rows import AnswerRow
    from catwalk_steps.models.conventions import TokenConventions
    from catwalk_steps.models.loading import ModelSpec

    spec = ModelSpec.parse(tiny_t5)
    conventions, model = spec.conventions(), AnswerLossModel(spec)
    tokenizer = conventions.tokenizer
    assert conventions.encoder_decoder
    prompt, answer = "Question: What do you use to cut the box?\nAnswer:", " a sharp knife"
    query = encode_answer(conventions, prompt, answer)
    eos = tokenizer.eos_token_id
    assert encode_answer(TokenConventions(tokenizer), prompt, answer).continuation == query.continuation + (eos,)
    output = model.eval()(**AnswerCollator(tokenizer.pad_token_id, 512)([AnswerRow(query.context, query.continuation,
                                                                                   None, len(query.continuation) + 1)]))
    labels = torch.tensor([list(query.continuation) + [eos]])
    with torch.no_grad():
        expected = model.lm(input_ids=torch.tensor([list(query.context)]), labels=labels).loss
    assert output["tokens"].tolist() == [labels.shape[1]]
    assert output["loss"].item() == pytest.approx(expected.item() * labels.shape[1], rel=1e-5)


def test_tasks_of_two_kinds_or_perplexity_tasks_are_refused_when_the_graph_is_built(tiny_task, tool_answers):
    from catwalk_steps.tasks.perplexity import PerplexityTask

    with pytest.raises(ConfigurationError, match="all multiple-choice or all generative"):
        finetune(tool_answers, tasks=[tiny_task, tool_answers])
    documents = PerplexityTask(data_files={"validation": str(TINY / "generation" / "answered.jsonl")})
    with pytest.raises(ConfigurationError, match=r"cannot train on PerplexityTask \(loglikelihood_rolling\)"):
        finetune(documents)


def test_an_answer_longer_than_the_window_is_refused_before_training(tmp_path, workspace):
    rows = [{"prompt": "Question: What do you use to cut the box?\nAnswer:", "answers": [" ".join(["a knife"] * 40)]}]
    path = write_jsonl(tmp_path / "long.jsonl", rows * 8)
    task = GenerationTask(data_files={"train": str(path), "validation": str(path)}, max_new_tokens=8)
    with pytest.raises(ConfigurationError, match="Instance train/0: its answer and its end .* make .* tokens, which leave no room for its prompt"):
        finetune(task, train_limit=None).result(workspace)


@pytest.mark.parametrize("kind, overrides, message", [
    ("multiple_choice", {"val_metric": "exact_match"}, r"val_metric must be one of accuracy \(acc\), loss"),
    ("multiple_choice", {"val_metric": "brier"}, "validation ranks choices by summed log-likelihood, per character"),
    ("generate_until", {"val_metric": "accuracy"}, "choose loss or one of its metrics: exact_match, f1"),
    ("generate_until", {"val_metric": "exact_match", "strategy": "fsdp", "device_count": 2}, "cannot do"),
    ("generate_until", {"val_metric": "exact_match", "validation_split": None}, "needs a validation_split"),
])
def test_bad_validation_settings_are_refused(tiny_task, tool_answers, kind, overrides, message):
    task = tool_answers if kind == "generate_until" else tiny_task
    with pytest.raises(ConfigurationError, match=message):
        finetune(task, **overrides)


def test_a_new_kind_is_one_class_that_fine_tuning_asks_too(tool_answers, workspace):
    """A kind registered from outside, with its own training objective (here: the answer loss,
    validated also by the mean answer tokens per instance), is trained on by ``catwalk::finetune``
    with no other change: its tasks are not mixed with another kind's, a ``val_metric`` it does
    not measure is refused in its words, and the one it measures chooses the weights."""
    from catwalk_steps.kinds import KINDS, Generation, TrainingObjective
    from catwalk_steps.kinds.base import register
    from catwalk_steps.kinds.generation import GenerationObjective

    class AnswerLengths(GenerationObjective):
        tasks_called, val_metrics = "answer-length", ("loss", "answer_tokens")

        def generates(self, val_metric):
            return False

        def check_val_metric(self, val_metric, tasks):
            TrainingObjective.check_val_metric(self, val_metric, tasks)

        def validation_scores(self, sums, selected, instances):
            return {**super().validation_scores(sums, selected, instances), "val_answer_tokens": sums["tokens"] / instances}

    class Lengths(Generation):
        name, training = "answer_lengths", AnswerLengths()

    register(Lengths())
    try:
        task = GenerationTask(data_files=tool_answers.data_files, until=["\n"], max_new_tokens=8)
        task.REQUEST_TYPE = "answer_lengths"
        with pytest.raises(ConfigurationError, match="tasks must be all answer-length or all generative"):
            finetune(task, tasks=[task, tool_answers])
        with pytest.raises(ConfigurationError, match="val_metric must be one of loss, answer_tokens for answer-length"):
            finetune(task, val_metric="exact_match")
        step = finetune(task, val_metric="answer_tokens", train_epochs=1, train_limit=8, validation_limit=4)
        result = step.result(workspace)
    finally:
        del KINDS["answer_lengths"]
    from catwalk_steps.models.loading import ModelSpec

    examples = Generation.training.examples(  # the validation examples' answer tokens, counted apart
        ModelSpec.parse(TINY_MODEL).conventions(), [task.instances("validation", 4)], 1024, "count", chat_example=None)
    validations = result.training_metrics["history"]["validations"]
    assert [v["val_answer_tokens"] for v in validations] == [sum(e.learnt for e in examples) / 4]
    assert result.training_metrics["val_answer_tokens"] == validations[0]["val_answer_tokens"]


def test_naming_the_default_val_metric_keeps_the_key(tiny_task, tool_answers):
    assert finetune(tool_answers, val_metric="loss").unique_id == finetune(tool_answers).unique_id
    assert finetune(tiny_task, val_metric="accuracy").unique_id == finetune(tiny_task).unique_id
    assert finetune(tiny_task, val_metric="acc").unique_id == finetune(tiny_task).unique_id  # the same number
    assert finetune(tool_answers, val_metric="exact_match").unique_id != finetune(tool_answers).unique_id


@pytest.fixture(scope="module")
def one_and_two_workers(tool_answers, tmp_path_factory):
    """The same fine-tune (dropout on) on 1 and on 2 workers: (step, result) of each."""
    runs = {}
    for device_count in (1, 2):
        step = finetune(tool_answers, device_count, keep_checkpoints=True)
        runs[device_count] = step, step.result(LocalWorkspace(tmp_path_factory.mktemp(f"workers{device_count}")))
    return runs


@pytest.mark.ddp
def test_one_and_two_workers_give_one_key_and_the_same_model(one_and_two_workers):
    (one, single), (two, double) = one_and_two_workers[1], one_and_two_workers[2]
    assert one.unique_id == two.unique_id
    worst = largest_difference(single.state_dict, double.state_dict)
    print(f"generative, 1 vs 2 workers: largest weight difference {worst:.1e}")
    assert worst < WEIGHT_TOLERANCE
    assert single.training_metrics["step"] == double.training_metrics["step"]
    assert single.training_metrics["val_loss"] == pytest.approx(double.training_metrics["val_loss"], rel=1e-4)
    one_losses, two_losses = (r.training_metrics["history"]["loss"] for r in (single, double))
    assert [v for _, v in one_losses] == pytest.approx([v for _, v in two_losses], rel=1e-4)


@pytest.mark.ddp
def test_the_lowest_validation_loss_chooses_the_weights(one_and_two_workers):
    _, result = one_and_two_workers[1]
    validations = result.training_metrics["history"]["validations"]
    assert [v["step"] for v in validations] == [2, 4]  # 2 epochs of 20 // 8 steps
    assert all(set(v) == {"step", "val_loss"} for v in validations)
    best = min(validations, key=lambda v: v["val_loss"])
    assert {k: result.training_metrics[k] for k in best} == best
    assert validations[-1]["val_loss"] < validations[0]["val_loss"]  # it learns


def test_the_training_chart_draws_generative_runs(tmp_path):
    from catwalk_steps.reports.curves import training_chart

    history = {"loss": [[1, 2.5], [2, 2.0]], "validations": [{"step": 2, "val_loss": 1.5, "val_exact_match": 0.25}]}
    training_chart({"generative": {"step": 2, "val_loss": 1.5, "val_exact_match": 0.25, "history": history}},
                   tmp_path / "training.png")
    assert (tmp_path / "training.png").stat().st_size > 0


#: 128 steps over the whole tiny generative set, validated by exact match: the model learns the tools.
#: 128 steps at a learning rate of 3e-3 amplify the summation-order differences of 1 vs 2 workers
#: (measured 1.6e-4 at torch's default threads in a fresh clone, 0 at one thread per worker); the
#: short runs above keep the issue's 1e-4.
LONG_RUN_WEIGHT_TOLERANCE = 1e-3
BY_EXACT_MATCH = dict(val_metric="exact_match", batch_size=16, micro_batch_size=8, train_epochs=8, train_limit=None,
                      validation_limit=32, learning_rate=3e-3, validate_every=32, config_overrides=NO_DROPOUT)


def test_validation_by_exact_match_is_what_evaluating_the_weights_gives(tool_answers, tmp_path):
    """Greedy generations on the validation split choose the weights, and their exact match is
    the one catwalk::predict and catwalk::calculate_metrics give for the returned model."""
    from catwalk_steps import CalculateMetricsStep, PredictStep

    workspace = LocalWorkspace(tmp_path)
    step = finetune(tool_answers, **{**BY_EXACT_MATCH, "micro_batch_size": 16})  # one forward pass a step
    result = step.result(workspace)
    validations = result.training_metrics["history"]["validations"]
    best = max(validations, key=lambda v: (v["val_exact_match"], -v["val_loss"], -v["step"]))
    print(f"validations by exact match: {validations}")
    assert best["val_exact_match"] > 0.5  # it learns the tools
    assert {k: result.training_metrics[k] for k in best} == best
    predictions = PredictStep(model=step, task=tool_answers, limit=32, step_name="predict")
    metrics = CalculateMetricsStep(predictions=predictions, step_name="metrics").result(workspace)
    assert metrics["exact_match"] == best["val_exact_match"]


@pytest.mark.parametrize("metric", ["acc_norm", "acc_per_token"])
def test_validation_by_a_normalised_accuracy_is_what_evaluating_the_weights_gives(tiny_task, metric, tmp_path):
    """A multiple-choice accuracy other than acc chooses the weights: each validation records it,
    the best by it is returned, and it is the one catwalk::predict and catwalk::calculate_metrics
    give for the returned model (on the whole validation split, where the two differ from acc)."""
    from catwalk_steps import CalculateMetricsStep, PredictStep

    workspace = LocalWorkspace(tmp_path)
    step = finetune(tiny_task, val_metric=metric, validation_limit=None, train_limit=16)
    result = step.result(workspace)
    validations = result.training_metrics["history"]["validations"]
    key = f"val_{metric}"
    assert all(key in v for v in validations) and result.training_metrics[key] == max(v[key] for v in validations)
    predictions = PredictStep(model=step, task=tiny_task, step_name="predict")
    metrics = CalculateMetricsStep(predictions=predictions, step_name="metrics").result(workspace)
    assert metrics[metric] == pytest.approx(result.training_metrics[key])
    assert metrics["acc"] == pytest.approx(result.training_metrics["val_acc"])
    assert any(v[key] != v["val_acc"] for v in validations)  # a different number from acc


@pytest.mark.ddp
@pytest.mark.full
def test_validation_by_acc_norm_chooses_the_same_weights_on_one_and_two_workers(tiny_task, tmp_path):
    """Dropout on (the tiny model's default), accumulation (micro-batches of 2 in batches of 8) and
    a partial last batch (20 examples): each worker's share of the per-character picks adds up to
    the one worker's, so the validations, the chosen step and the weights agree."""
    results = {n: finetune(tiny_task, n, val_metric="acc_norm", validation_limit=None).result(
        LocalWorkspace(tmp_path / str(n))) for n in (1, 2)}
    one, two = (results[n].training_metrics for n in (1, 2))
    history = {n: [(v["step"], v["val_acc_norm"]) for v in results[n].training_metrics["history"]["validations"]]
               for n in (1, 2)}
    assert history[1] == history[2] and one["step"] == two["step"] and one["val_acc_norm"] == two["val_acc_norm"]
    assert largest_difference(results[1].state_dict, results[2].state_dict) < WEIGHT_TOLERANCE


def test_the_lowest_loss_is_the_best_and_patience_watches_it():
    from catwalk_steps.training.callbacks import should_stop
    from catwalk_steps.training.checkpoints import Progress

    losses = [{"step": 1, "val_loss": 2.0}, {"step": 2, "val_loss": 1.0}, {"step": 3, "val_loss": 1.5},
              {"step": 4, "val_loss": 1.0}]
    assert Progress(4, losses, selected="val_loss").best["step"] == 2  # the earliest of equal ones
    assert not should_stop(losses[:3], 2, "val_loss") and should_stop(losses, 2, "val_loss")
    matches = [{"step": 1, "val_loss": 2.0, "val_exact_match": 0.5}, {"step": 2, "val_loss": 1.0, "val_exact_match": 0.5}]
    assert Progress(2, matches, selected="val_exact_match").best["step"] == 2  # of equal ones, the lower loss
    assert should_stop(matches, 1, "val_exact_match")


@pytest.mark.full
@pytest.mark.ddp
@pytest.mark.parametrize("first, then", [(1, 2), (2, 1)], ids=["1->2", "2->1"])
def test_an_interrupted_run_resumes_on_another_device_count(one_and_two_workers, tool_answers, tmp_path, first, then):
    _, reference = one_and_two_workers[1]
    workspace = LocalWorkspace(tmp_path)
    with pytest.raises(Exception, match="interrupted at step 3"):
        finetune(tool_answers, first, callbacks=[Lazy(Interrupt, at=3)]).result(workspace)
    step = finetune(tool_answers, then, callbacks=[Lazy(RecordStart)])
    resumed = step.result(workspace)
    assert (workspace.work_dir(step) / "started_at").read_text() == "2"  # from the checkpoint of step 2
    worst = largest_difference(reference.state_dict, resumed.state_dict)
    print(f"generative, interrupted on {first}, resumed on {then}: largest weight difference {worst:.1e}")
    assert worst < WEIGHT_TOLERANCE
    assert resumed.training_metrics["val_loss"] == pytest.approx(reference.training_metrics["val_loss"], rel=1e-4)


@pytest.mark.full
@pytest.mark.ddp
@pytest.mark.parametrize("strategy, adapter, precision", [
    ("fsdp", None, "32"), ("ddp", LORA, "32"), ("fsdp", LORA, "32"), ("ddp", None, "bf16-mixed"),
], ids=["fsdp", "lora", "fsdp-lora", "bf16-mixed"])
def test_two_workers_give_the_one_worker_model_under_every_strategy(
    one_and_two_workers, tool_answers, tmp_path, strategy, adapter, precision
):
    if adapter is None and precision == "32":
        one, reference = one_and_two_workers[1]
    else:
        one = finetune(tool_answers, 1, adapter=adapter, precision=precision)
        reference = one.result(LocalWorkspace(tmp_path / "one"))
    two = finetune(tool_answers, 2, strategy=strategy, adapter=adapter, precision=precision)
    assert two.unique_id == one.unique_id
    result = two.result(LocalWorkspace(tmp_path / "two"))
    assert result.state_dict.keys() == reference.state_dict.keys()
    worst = largest_difference(reference.state_dict, result.state_dict)
    print(f"generative, {strategy} {adapter} {precision}: 1 vs 2 workers, largest weight difference {worst:.1e}")
    assert worst < (BF16_WEIGHT_TOLERANCE if precision == "bf16-mixed" else WEIGHT_TOLERANCE)
    assert result.training_metrics["val_loss"] == pytest.approx(reference.training_metrics["val_loss"], rel=1e-3)


@pytest.mark.full
@pytest.mark.ddp
def test_validation_by_exact_match_on_two_workers_is_one_worker_s(tool_answers, tmp_path):
    """Each worker generates for its share of the validation split; the sums make the same
    exact match, and so the same choice of weights, as one worker."""
    one, two = (finetune(tool_answers, n, **BY_EXACT_MATCH).result(LocalWorkspace(tmp_path / str(n))) for n in (1, 2))
    matches = [[v["val_exact_match"] for v in r.training_metrics["history"]["validations"]] for r in (one, two)]
    assert matches[0] == matches[1] and max(matches[0]) > 0.5
    assert one.training_metrics["step"] == two.training_metrics["step"]
    worst = largest_difference(one.state_dict, two.state_dict)
    print(f"generative, by exact match, 1 vs 2 workers: largest weight difference {worst:.1e}")
    assert worst < LONG_RUN_WEIGHT_TOLERANCE


def test_val_metric_is_any_metric_the_tasks_report(tool_answers, tmp_path):
    """gsm8k and lm_eval generation tasks name their exact match by filter: ``exact_match`` finds
    it, a named metric is taken as it is, an unknown name is refused with the list of names."""
    from catwalk_steps.tasks import Gsm8kTask, LmEvalTask
    from catwalk_steps.kinds.generation import task_metric

    from .lm_eval_docs import copy_generation_yamls

    gsm8k = Gsm8kTask(data_files={"train": str(GENERATION / "train.jsonl"), "test": str(GENERATION / "validation.jsonl")})
    bridged = LmEvalTask(task="local_gen_arith", include_path=copy_generation_yamls(tmp_path), include_defaults=False)
    assert task_metric(gsm8k, "exact_match") == "exact_match/strict-match"
    assert bridged.METRICS == ["exact_match/strict-match", "exact_match/flexible-extract"]
    assert task_metric(bridged, "exact_match/flexible-extract") == "exact_match/flexible-extract"
    assert task_metric(tool_answers, "f1") == "f1"
    with pytest.raises(ConfigurationError, match="reports none such; choose loss or one of its metrics: exact_match, f1"):
        finetune(tool_answers, val_metric="bleu")
    step = finetune(tool_answers, val_metric="f1", train_epochs=1)
    result = step.result(LocalWorkspace(tmp_path / "ws"))
    validations = result.training_metrics["history"]["validations"]
    assert all("val_f1" in v for v in validations) and result.training_metrics["val_f1"] == max(v["val_f1"] for v in validations)
