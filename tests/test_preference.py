"""Preference tasks (:mod:`catwalk_steps.tasks.preference`): every row checked before work, each
bad one a ``DataError`` naming the file, the line and the field; the rows TRL takes (plain,
conversational, implicit prompt) read; DPO's settings checked when the step graph is built; and
DPO fine-tunes a tiny model with validation on held-out pairs, whose result ``catwalk::predict``
scores on those pairs."""

import json

import pytest
from tango.common.exceptions import ConfigurationError
from tango.workspaces import LocalWorkspace

from catwalk_steps import CalculateMetricsStep, FinetuneStep, PredictStep
from catwalk_steps.tasks import DataError, PreferenceTask
from catwalk_steps.tasks.chat import ChatFormat

from .conftest import write_jsonl

USER = {"role": "user", "content": "What cuts bread?"}
KNIFE, SPOON = {"role": "assistant", "content": "A knife."}, {"role": "assistant", "content": "A spoon."}
GOOD_TEXT = {"prompt": "Q: What cuts bread?\nA:", "chosen": " A knife.", "rejected": " A spoon."}
GOOD_TURNS = {"prompt": [USER], "chosen": [KNIFE], "rejected": [SPOON]}


def render(messages, add_generation_prompt=True, continue_final_message=None):
    """A stand-in template: each turn on its own line, the generation prompt ``assistant:``."""
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
    return text + ("assistant:" if add_generation_prompt else "")


@pytest.mark.parametrize("bad, line, field, problem", [
    ({"prompt": "Q?", "chosen": " A."}, 2, "rejected", "is missing"),
    ({"prompt": "Q?", "chosen": "", "rejected": " B."}, 2, "chosen", "is empty"),
    ({"chosen": " A.", "rejected": " B."}, 2, "prompt", "is missing"),
    ({"prompt": "Q?", "chosen": [KNIFE], "rejected": [SPOON]}, 2, "prompt", "is a string while chosen is a list"),
    ({"prompt": [USER], "chosen": [{"role": "assistant", "content": " "}], "rejected": [SPOON]}, 2, "chosen",
     "has an empty answer"),
    ({"prompt": [USER], "chosen": [], "rejected": [SPOON]}, 2, "chosen", "is an empty list of turns"),
    ({"prompt": [USER], "chosen": [USER], "rejected": [SPOON]}, 2, "prompt/chosen", "turn 2 is a user turn"),
    ({"chosen": [USER, KNIFE], "rejected": [{"role": "user", "content": "Other?"}, SPOON]}, 2, "prompt",
     "is missing, and chosen and rejected share no leading turn"),
    ({"chosen": [USER, KNIFE], "rejected": [USER, KNIFE]}, 2, "chosen", "holds no turn after the prompt"),
])
def test_a_bad_row_is_a_data_error_naming_file_line_and_field(bad, line, field, problem, tmp_path):
    good = GOOD_TURNS if any(isinstance(v, list) for v in bad.values()) else GOOD_TEXT
    path = write_jsonl(tmp_path / "pairs.jsonl", [good, bad])
    with pytest.raises(DataError, match=f"pairs.jsonl: line {line}: field '{field}' {problem}"):
        PreferenceTask(data_files={"train": str(path)}).instances("train", chat=ChatFormat(render))


def test_a_split_mixing_text_and_turns_is_refused_at_the_row_that_differs(tmp_path):
    path = write_jsonl(tmp_path / "pairs.jsonl", [GOOD_TEXT, GOOD_TEXT, GOOD_TURNS])
    with pytest.raises(DataError, match="pairs.jsonl: line 3: field 'chosen' is a list of turns where the split's "
                                        "first row's is a string"):
        PreferenceTask(data_files={"train": str(path)}).instances("train", chat=ChatFormat(render))


def test_conversations_need_a_chat_template(tmp_path):
    path = write_jsonl(tmp_path / "pairs.jsonl", [GOOD_TURNS])
    with pytest.raises(ConfigurationError, match="holds conversations, which only a chat template"):
        PreferenceTask(data_files={"train": str(path)}).instances("train")


def test_trls_three_row_formats_are_read(tmp_path):
    """Plain text (answers follow the prompt as given), conversations (the template's texts) and
    the implicit prompt (the leading turns both answers share), which reads as the explicit one."""
    implicit = {"chosen": [USER, KNIFE], "rejected": [USER, SPOON]}
    (plain,) = PreferenceTask(data_files={"train": str(write_jsonl(tmp_path / "a.jsonl", [GOOD_TEXT]))}).instances("train")
    assert (plain.prompt, plain.chosen, plain.rejected, plain.chat) == (
        "Q: What cuts bread?\nA:", "Q: What cuts bread?\nA: A knife.", "Q: What cuts bread?\nA: A spoon.", False)
    turns = PreferenceTask(data_files={"train": str(write_jsonl(tmp_path / "b.jsonl", [GOOD_TURNS, implicit]))})
    explicit, found = turns.instances("train", chat=ChatFormat(render))
    assert explicit.prompt == "user: What cuts bread?\nassistant:" and explicit.chat
    assert explicit.chosen == "user: What cuts bread?\nassistant: A knife.\n"
    assert (found.prompt, found.chosen, found.rejected, found.answers) == (
        explicit.prompt, explicit.chosen, explicit.rejected, ("A knife.", "A spoon."))


@pytest.fixture
def pairs(tmp_path):
    rows = [{"prompt": f"Q: What is {n} + 1?\nA:", "chosen": f" {n + 1}", "rejected": f" {n + 7}"} for n in range(8)]
    return {split: str(write_jsonl(tmp_path / f"{split}.jsonl", part)) for split, part in
            (("train", rows[:6]), ("validation", rows[6:]))}


@pytest.mark.parametrize("settings, message", [
    (dict(loss_type="kto"), "loss_type must be one of sigmoid, hinge, ipo"),
    (dict(beta=0), "beta must be a positive number"),
    (dict(label_smoothing=0.1), "label_smoothing is read by the robust and exo_pair losses only, not by sigmoid"),
    (dict(loss_type=["sigmoid", "ipo"], loss_weights=[1.0]), "one weight per loss_type"),
    (dict(loss_type="exo_pair"), "label_smoothing must be in \\(0, 1\\) for the exo_pair loss"),
    (dict(val_metric="accuracy"), "val_metric must be one of loss, rewards/accuracies, rewards/margins"),
    (dict(packing=True), "packing packs the rows of generative tasks"),
])
def test_dpo_settings_are_checked_when_the_graph_is_built(settings, message, pairs):
    with pytest.raises(ConfigurationError, match=message):
        FinetuneStep(model="rc::gpt2", tasks=[PreferenceTask(data_files=pairs)], **settings)


def test_dpo_settings_are_refused_for_other_tasks(tmp_path):
    from catwalk_steps.tasks import PiqaTask

    from .conftest import TINY

    with pytest.raises(ConfigurationError, match="beta is a setting of fine-tuning on preference tasks, not on "
                                                 "multiple-choice ones"):
        FinetuneStep(model="rc::gpt2", tasks=[PiqaTask(data_files={"train": str(TINY / "validation.jsonl")})],
                     beta=0.5)


def test_dpo_fine_tunes_and_the_result_is_evaluated_on_held_out_pairs(mistral_llama, pairs, tmp_path):
    """The representative run: DPO on six pairs, validated on two (TRL's numbers), its result
    scored by ``catwalk::predict`` on the held-out pairs (``pair_acc``, ``margin``, and, against
    the starting model as ``reference_model``, the implicit rewards)."""
    task = PreferenceTask(data_files=pairs)
    step = FinetuneStep(model=mistral_llama, tasks=[task], batch_size=2, train_epochs=2, learning_rate=1e-3,
                        val_metric="rewards/margins")
    model = step.result(LocalWorkspace(tmp_path / "ws"))
    validations = model.training_metrics["history"]["validations"]
    assert len(validations) == 2 and set(validations[0]) >= {
        "val_loss", "val_rewards/chosen", "val_rewards/rejected", "val_rewards/accuracies", "val_rewards/margins"}
    # Measured from the starting model, the first validation's rewards have moved from 0.
    assert validations[0]["val_rewards/margins"] != 0
    predict = PredictStep(model=model, task=task, split="validation", reference_model=mistral_llama)
    records = predict.run(**predict.kwargs)
    assert [r["kind"] for r in records] == ["preference"] * 2
    assert all(r["margin"] == pytest.approx(r["logps"][0] - r["logps"][1]) for r in records)
    metrics = CalculateMetricsStep(predictions=records).run(predictions=records)
    assert set(metrics) >= {"pair_acc", "margin", "reward_acc", "reward_margin", "count"}
    # DPO's reward margin is beta times the log-ratios' difference: the result's (the best
    # validation's, by val_metric) as its validation measured it.
    best = max(v["val_rewards/margins"] for v in validations)
    assert 0.1 * metrics["reward_margin"] == pytest.approx(best, rel=1e-4)
    json.dumps(records)


def test_a_reference_model_is_for_preference_tasks():
    from catwalk_steps.tasks import PiqaTask

    from .conftest import TINY

    with pytest.raises(ConfigurationError, match="reference_model measures DPO's implicit rewards"):
        PredictStep(model="rc::gpt2", task=PiqaTask(data_files={"validation": str(TINY / "validation.jsonl")}),
                    reference_model="rc::gpt2")


@pytest.mark.full
@pytest.mark.ddp
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_one_and_two_workers_give_the_same_dpo_model(strategy, tmp_path):
    """Micro-batches of one pair, accumulated, on 1 worker and shared out over 2 (whose reference
    log-probabilities each measures half of): the same weights and validation numbers."""
    from .conftest import NO_DROPOUT, TINY_MODEL

    rows = [{"prompt": f"Question: what is {n} plus {n}?\nAnswer:", "chosen": f" {2 * n}", "rejected": f" {n + 3}"}
            for n in range(12)]
    data = {split: str(write_jsonl(tmp_path / f"{split}.jsonl", part)) for split, part in
            (("train", rows[:8]), ("validation", rows[8:]))}
    results = [FinetuneStep(model=TINY_MODEL, tasks=[PreferenceTask(data_files=data)], batch_size=4, micro_batch_size=1,
                            train_epochs=2, learning_rate=1e-3, config_overrides=NO_DROPOUT, device_count=workers,
                            strategy=strategy).result(LocalWorkspace(tmp_path / f"ws{workers}"))
               for workers in (1, 2)]
    one, two = (result.state_dict for result in results)
    assert max((one[name] - two[name]).abs().max().item() for name in one) < 1e-4
    first, second = (result.training_metrics["history"]["validations"] for result in results)
    for a, b in zip(first, second):
        assert a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-6) for k in a)


@pytest.mark.full
def test_precomputed_reference_log_probs_are_one_cached_step_and_train_the_same_model(mistral_llama, pairs, tmp_path):
    """``precompute_ref_log_probs: true``: a sweep over ``beta`` shares one reference step (one
    key), and the model trained from its values is the one the workers' own measurement trains."""
    from catwalk_steps.steps.reference_log_probs import ReferenceLogProbsStep

    task = PreferenceTask(data_files=pairs)

    def finetune(**extra) -> FinetuneStep:
        return FinetuneStep(model=mistral_llama, tasks=[task], batch_size=2, train_epochs=1, learning_rate=1e-3,
                            **extra)

    sweep = [finetune(beta=beta, precompute_ref_log_probs=True) for beta in (0.1, 0.5)]
    references = [step.kwargs["precompute_ref_log_probs"] for step in sweep]
    assert all(isinstance(step, ReferenceLogProbsStep) for step in references)
    assert references[0].unique_id == references[1].unique_id
    workspace = LocalWorkspace(tmp_path / "ws")
    precomputed, measured = sweep[0].result(workspace), finetune().result(workspace)
    assert max((precomputed.state_dict[k] - measured.state_dict[k]).abs().max().item() for k in measured.state_dict) < 1e-5
    (a,), (b,) = (m.training_metrics["history"]["validations"] for m in (precomputed, measured))
    assert all(a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-6) for k in a)


@pytest.mark.full
def test_the_dpo_demo_runs_as_the_docs_show(tmp_path):
    """The preference demo: DPO on the tools' pairs, the held-out pairs scored before and after,
    the implicit rewards measured against the starting model (zero for the starting model itself)."""
    from .tango_runs import documented_run

    workspace = tmp_path / "workspace"
    documented_run("tango run configs/dpo_tiny.jsonnet -w workspace", workspace, "dpo")
    found = LocalWorkspace(workspace)
    zero, tuned = (found.step_result_for_run("dpo", f"metrics_{run}") for run in ("zero_shot", "dpo"))
    assert zero["reward_margin"] == 0 and zero["count"] == tuned["count"] == 64
    model = found.step_result_for_run("dpo", "finetune")
    best = max(v["val_rewards/accuracies"] for v in model.training_metrics["history"]["validations"])
    assert tuned["reward_acc"] == pytest.approx(best)
