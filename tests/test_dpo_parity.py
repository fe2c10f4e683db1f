"""DPO checked against TRL 1.16's ``DPOTrainer`` itself, run beside us on the same tiny Llama
(Mistral-7B v0.1's real tokenizer, Zephyr's chat template) and the same pairs: the rows TRL
tokenises (prompt, chosen and rejected ids) and the sequences and completion masks its collator
makes equal ours; the rewards it logs for a step (``rewards/chosen``, ``rewards/rejected``,
``rewards/accuracies``, ``rewards/margins``) equal ours on the same batch; and one optimizer step
(plain SGD, constant learning rate, no clipping, float32, one batch of every pair) changes the
weights as TRL's step changes them, to 1e-5 relative, per tensor, for plain and conversational
pairs (implicit prompts among them) and each loss type we take."""

import shutil
from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch
import transformers

from catwalk_steps import FinetuneStep
from catwalk_steps.steps.finetune import _RUN_DEFAULTS
from catwalk_steps.tasks import PreferenceTask
from catwalk_steps.training.preparation import training_job
from catwalk_steps.training.settings import FinetuneSettings

from .conftest import write_jsonl
from .tiny_models import ZEPHYR_TEMPLATE

trl = pytest.importorskip("trl")

LEARNING_RATE = 10.0  # large, so that float32 rounding of weights near 1.0 stays far below the tolerance
TOLERANCE = 1e-5
EXCHANGES = [
    ("What do you use to cut bread?", "A sharp knife.", "A spoon, carefully."),
    ("And to dry the dishes?", "A clean towel", "The oven"),
    ("What opens the door?", "The key.", "Nothing at all, it is a wall"),
    ("What is 2 + 2?", "4", "22"),
    ("Which tool drives nails?", "A hammer, of course.", "A feather"),
    ("What holds water?", "A bucket", "A sieve with many holes"),
]


def plain_rows() -> List[Dict[str, Any]]:
    """Answers with and without a leading space, one ending in EOS already."""
    rows = [{"prompt": f"Question: {q}\nAnswer:", "chosen": f" {c}", "rejected": f" {r}"} for q, c, r in EXCHANGES[:3]]
    rows += [{"prompt": f"Q: {q}\nA: ", "chosen": c, "rejected": r} for q, c, r in EXCHANGES[3:]]
    rows[-1]["chosen"] += "</s>"
    return rows


def conversational_rows() -> List[Dict[str, Any]]:
    """Prompts of one and of two exchanges, some with a system turn."""
    rows = []
    for n, (question, chosen, rejected) in enumerate(EXCHANGES):
        prompt = [{"role": "system", "content": "Answer in a few words."}] if n % 2 == 0 else []
        if n % 3 == 0:
            before = EXCHANGES[n - 1]
            prompt += [{"role": "user", "content": before[0]}, {"role": "assistant", "content": before[1]}]
        rows.append({"prompt": prompt + [{"role": "user", "content": question}],
                     "chosen": [{"role": "assistant", "content": chosen}],
                     "rejected": [{"role": "assistant", "content": rejected}]})
    return rows


def implicit_prompt_rows() -> List[Dict[str, Any]]:
    return [{"chosen": row["prompt"] + row["chosen"], "rejected": row["prompt"] + row["rejected"]}
            for row in conversational_rows()]


ROWS = {"plain": plain_rows, "conversational": conversational_rows, "implicit": implicit_prompt_rows}
#: (rows, our settings, TRL's settings). Every loss type on plain rows, and DPO's own (sigmoid) on
#: every kind of row.
CASES = {
    "plain-sigmoid": ("plain", {}, {}),
    "conversational-sigmoid": ("conversational", {}, {}),
    "implicit-sigmoid": ("implicit", {}, {}),
    "plain-beta": ("plain", dict(beta=0.5), dict(beta=0.5)),
    "plain-hinge": ("plain", dict(loss_type="hinge"), dict(loss_type=["hinge"])),
    "plain-ipo": ("plain", dict(loss_type="ipo"), dict(loss_type=["ipo"])),
    "plain-sigmoid_norm": ("plain", dict(loss_type="sigmoid_norm"), dict(loss_type=["sigmoid_norm"])),
    "conversational-ipo": ("conversational", dict(loss_type="ipo"), dict(loss_type=["ipo"])),
    "plain-robust": ("plain", dict(loss_type="robust", label_smoothing=0.1),
                     dict(loss_type=["robust"], label_smoothing=0.1)),
    "plain-exo_pair": ("plain", dict(loss_type="exo_pair", label_smoothing=1e-3),
                       dict(loss_type=["exo_pair"], label_smoothing=1e-3)),
    "plain-nca_pair": ("plain", dict(loss_type="nca_pair"), dict(loss_type=["nca_pair"])),
    "plain-bco_pair": ("plain", dict(loss_type="bco_pair"), dict(loss_type=["bco_pair"])),
    "plain-sppo_hard": ("plain", dict(loss_type="sppo_hard"), dict(loss_type=["sppo_hard"])),
    "plain-apo_zero": ("plain", dict(loss_type="apo_zero"), dict(loss_type=["apo_zero"])),
    "plain-apo_down": ("plain", dict(loss_type="apo_down"), dict(loss_type=["apo_down"])),
    "plain-weighted-list": ("plain", dict(loss_type=["sigmoid", "ipo"], loss_weights=[0.8, 0.2]),
                            dict(loss_type=["sigmoid", "ipo"], loss_weights=[0.8, 0.2])),
    # The step's mean over its pairs however it is cut: three micro-batches of two pairs.
    "plain-accumulated": ("plain", dict(micro_batch_size=2),
                          dict(per_device_train_batch_size=2, gradient_accumulation_steps=3)),
}
#: The quick run's representative (a template, rewards, the step); the rest run under --full.
QUICK = {"conversational-sigmoid"}


@pytest.fixture(scope="module")
def zephyr_llama(tmp_path_factory, mistral_tokenizer_path) -> Path:
    """A tiny Llama (Mistral's tokenizer, Zephyr's template) whose window is TRL's default
    ``max_length`` (1024), so that neither side cuts a pair."""
    from transformers import AutoTokenizer

    from .tiny_models import tiny_llama

    directory = tiny_llama(tmp_path_factory.mktemp("dpo-llama"), mistral_tokenizer_path, window=1024)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.chat_template = ZEPHYR_TEMPLATE
    tokenizer.save_pretrained(directory)
    return directory


class StepOne(transformers.TrainerCallback):
    """The weights after TRL's first step and the numbers it logs at each step."""

    def __init__(self) -> None:
        self.weights: Dict[str, torch.Tensor] = {}
        self.logs: List[Dict[str, float]] = []

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step == 1:
            self.weights = {name: p.detach().clone() for name, p in model.named_parameters()}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if "rewards/chosen" in logs:
            self.logs.append(dict(logs))


def trl_trainer(model_dir: Path, data: Path, rows: int, settings: Dict[str, Any], output: Path, **extra: Any):
    """TRL's ``DPOTrainer`` at its defaults but for SGD steps over one batch of every pair, each
    step's numbers logged: the second step's rewards are the first to differ from 0 (the policy
    is the reference before the first)."""
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = trl.DPOConfig(**{
        **dict(output_dir=str(output), use_cpu=True, bf16=False, gradient_checkpointing=False, report_to=[],
               per_device_train_batch_size=rows, max_steps=2, learning_rate=LEARNING_RATE, lr_scheduler_type="constant",
               warmup_steps=0, optim="sgd", weight_decay=0.0, max_grad_norm=0.0, save_strategy="no",
               logging_strategy="steps", logging_steps=1, dataset_num_proc=None),
        **settings,
    })
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return trl.DPOTrainer(model=model, args=config, processing_class=AutoTokenizer.from_pretrained(model_dir),
                          train_dataset=load_dataset("json", data_files=str(data), split="train"),
                          callbacks=[StepOne()], **extra)


def step_one(trainer) -> StepOne:
    (found,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, StepOne)]
    return found


def our_step(model_dir: Path, data: Path, rows: int, conversational: bool, settings: Dict[str, Any]) -> FinetuneStep:
    chat = {"apply_chat_template": True} if conversational else {}
    return FinetuneStep(
        model=f"rc::{model_dir}", tasks=[PreferenceTask(data_files={"train": str(data)})], batch_size=rows,
        train_epochs=1, validation_split=None, optimizer={"type": "torch::SGD", "lr": LEARNING_RATE},
        lr_scheduler={"type": "torch::ConstantLR", "factor": 1.0}, max_grad_norm=None, **chat, **settings,
    )


def our_job(step: FinetuneStep, tmp_path: Path):
    from tango.workspaces import LocalWorkspace

    settings = FinetuneSettings(**{**_RUN_DEFAULTS, **step.kwargs})
    return training_job(settings, work_dir=tmp_path, workspace=LocalWorkspace(tmp_path / "ws"), step_id="t",
                        step_name="t", tracking=None)


def our_rewards(job, weights: Dict[str, torch.Tensor]) -> Dict[str, float]:
    """TRL's logged rewards of one batch of every pair, by our model with ``weights`` (the
    reference measured at its starting weights)."""
    model = job.build_model()
    collate = job.collator(model)
    rows = job.objective.with_starting_model(model, job.train, collate, len(job.train), 0, 1, torch.device("cpu"))
    model.scoring_lm.load_state_dict(weights)
    with torch.no_grad():
        chosen, rejected = model(**collate(rows))["rewards"].unbind(-1)
    return {"rewards/chosen": chosen.mean().item(), "rewards/rejected": rejected.mean().item(),
            "rewards/accuracies": (chosen > rejected).float().mean().item(),
            "rewards/margins": (chosen - rejected).mean().item()}


def sequences(rows) -> List[tuple]:
    """Each pair's chosen and rejected sequence and completion mask, as TRL's collator lays them out."""
    return [(list(row.prompt + answer), [0] * len(row.prompt) + [1] * len(answer))
            for answers in ([row.chosen for row in rows], [row.rejected for row in rows])
            for row, answer in zip(rows, answers)]


def weight_change_difference(before, after, result, scale_ours: float = 1.0) -> float:
    """The largest relative difference of our weight change from TRL's, over the tensors."""
    worst = 0.0
    for name, weight in before.items():
        theirs = after[name].detach() - weight
        ours = (result[name].float() - weight) * scale_ours
        scale = theirs.norm().item()
        if scale == 0:  # (embeddings of tokens no row holds)
            assert ours.norm().item() == 0, name
            continue
        worst = max(worst, (ours - theirs).norm().item() / scale)
    return worst


@pytest.mark.parametrize("case", [c if c in QUICK else pytest.param(c, marks=pytest.mark.full) for c in CASES])
def test_rows_rewards_and_one_step_equal_trl(case, zephyr_llama, tmp_path):
    from tango.workspaces import LocalWorkspace

    kind, ours, theirs = CASES[case]
    rows = ROWS[kind]()
    data = write_jsonl(tmp_path / "train.jsonl", rows)
    trainer = trl_trainer(zephyr_llama, data, len(rows), theirs, tmp_path / "trl")
    step = our_step(zephyr_llama, data, len(rows), kind != "plain", ours)
    job = our_job(step, tmp_path / "rows")

    expected = [(list(r["prompt_ids"]), list(r["chosen_ids"]), list(r["rejected_ids"])) for r in trainer.train_dataset]
    assert [(list(r.prompt), list(r.chosen), list(r.rejected)) for r in job.train] == expected
    collated = trainer.data_collator([{k: r[k] for k in ("prompt_ids", "chosen_ids", "rejected_ids")}
                                      for r in trainer.train_dataset])
    lengths = collated["attention_mask"].sum(-1).tolist()
    assert sequences(job.train) == [(ids[:n], mask[:n]) for ids, mask, n in zip(
        collated["input_ids"].tolist(), collated["completion_mask"].tolist(), lengths)]

    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()
    result = step.result(LocalWorkspace(tmp_path / "ours")).state_dict
    worst = weight_change_difference(before, step_one(trainer).weights, result)
    print(f"{case}: largest relative difference of a weight change from TRL's: {worst:.1e}")
    assert worst < TOLERANCE
    # Each step's rewards are measured before its update: the second step's on the first's weights.
    first, second = step_one(trainer).logs
    assert first["rewards/margins"] == 0 and first["rewards/accuracies"] == 0
    logged = our_rewards(job, result)
    for name, value in logged.items():
        assert value == pytest.approx(second[name], rel=1e-4, abs=1e-6), name


@pytest.mark.full
def test_a_lora_step_equals_trls_with_its_peft_config(zephyr_llama, tmp_path):
    """TRL with ``peft_config`` (its reference: the adapter disabled) and ours with the same
    adapter settings, TRL's adapter started from our initial adapter weights: one step changes
    the adapter alike."""
    from tango.workspaces import LocalWorkspace

    from catwalk_steps.models.adapters import load_trained_state_dict, peft_config
    from catwalk_steps.training.seeds import derive_seed

    adapter = {"type": "lora", "r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    rows = conversational_rows()
    data = write_jsonl(tmp_path / "train.jsonl", rows)
    step = our_step(zephyr_llama, data, len(rows), True, dict(adapter=adapter))
    job = our_job(step, tmp_path / "rows")
    torch.manual_seed(derive_seed(job.plan.seed, "init"))  # as each worker starts
    start = {name: p.detach().clone() for name, p in job.build_model().lm.named_parameters() if "lora_" in name}
    trainer = trl_trainer(zephyr_llama, data, len(rows), {}, tmp_path / "trl", peft_config=peft_config(adapter))
    theirs = dict(trainer.model.named_parameters())
    with torch.no_grad():
        for name, weight in start.items():
            theirs[name].copy_(weight)
    trainer.train()
    trained = job.build_model().lm
    load_trained_state_dict(trained, step.result(LocalWorkspace(tmp_path / "ours")).state_dict)
    ours = {name: p.detach() for name, p in trained.named_parameters() if "lora_" in name}
    worst = weight_change_difference(start, step_one(trainer).weights, ours)
    print(f"lora: largest relative difference of an adapter weight change from TRL's: {worst:.1e}")
    assert worst < TOLERANCE
