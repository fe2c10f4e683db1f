"""``packing: true``: rows packed into the model's window (best-fit decreasing, each row whole)
give the loss, learnt-token count and gradients of the same rows unpacked, within 1e-5, on a
tiny Llama with Mistral's tokenizer and chat rows of several turns; and one optimizer step over
every row, packed, moves the weights as the unpacked step does."""

import pytest
import torch
from tango.common.exceptions import ConfigurationError
from tango.workspaces import LocalWorkspace

from catwalk_steps import FinetuneStep
from catwalk_steps.models.answer_loss import AnswerCollator, AnswerLossModel
from catwalk_steps.tasks import GenerationTask, PiqaTask
from catwalk_steps.models.answer_rows import AnswerRow
from catwalk_steps.models.packing import packed

from .conftest import TINY, TINY_MODEL, write_jsonl
from .test_trl_parity import TEMPLATES, messages_rows, our_step

TOLERANCE = 1e-5


def zephyr_model(directory, tokenizer_path, window: int):
    from transformers import AutoTokenizer

    from .tiny_models import tiny_llama

    tiny_llama(directory, tokenizer_path, window=window)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.chat_template = TEMPLATES["zephyr"]
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def zephyr_llama(tmp_path_factory, mistral_tokenizer_path):
    return zephyr_model(tmp_path_factory.mktemp("packing-llama"), mistral_tokenizer_path, window=256)


@pytest.fixture(scope="module")
def short_zephyr_llama(tmp_path_factory, mistral_tokenizer_path):
    """The same model with a window of 48 tokens, shorter than the longest conversations."""
    return zephyr_model(tmp_path_factory.mktemp("short-packing-llama"), mistral_tokenizer_path, window=48)


def rows_of(lengths, answer=3):
    return [AnswerRow((1,) * (n - answer), (2,) * answer, None, answer) for n in lengths]


def test_best_fit_decreasing_keeps_every_row_whole_within_the_window():
    rows = rows_of([n + 3 for n in (5, 40, 17, 2, 60, 33, 9, 1)])
    packs = packed(rows, max_length=64)
    assert sorted(n for pack in packs for n in pack.segments) == sorted(row.length for row in rows)
    assert all(pack.length <= 64 for pack in packs)
    # Longest first, each into the fullest pack it fits: 63 | 43 + 20 | 36 + 12 + 8 + 5 | 4 (1, 1 and 3 left).
    assert [list(pack.segments) for pack in packs] == [[63], [43, 20], [36, 12, 8, 5], [4]]
    assert sum(pack.learnt for pack in packs) == sum(row.learnt for row in rows)
    with pytest.raises(ValueError, match="longer than the window"):  # rows are cut where they are built
        packed(rows_of([65]), max_length=64)


def job_of(step, tmp_path):
    """The training job ``step`` would run (its rows tokenised, unpacked unless it packs)."""
    from catwalk_steps.steps.finetune import _RUN_DEFAULTS
    from catwalk_steps.training.preparation import training_job
    from catwalk_steps.training.settings import FinetuneSettings

    return training_job(FinetuneSettings(**{**_RUN_DEFAULTS, **step.kwargs}), work_dir=tmp_path, step_id="t",
                        workspace=LocalWorkspace(tmp_path / "ws"), step_name="t", tracking=None)


def test_packs_are_trls_for_rows_longer_than_the_window(zephyr_llama, short_zephyr_llama, tmp_path):
    """TRL's ``pack_dataset`` (``"bfd"``: each row cut to the window keeping its start, then
    best-fit decreasing) of the whole rows gives our packs of the rows as a short window cuts
    them: the same sequences, in the same packs."""
    from datasets import Dataset
    from trl.data_utils import pack_dataset

    data = write_jsonl(tmp_path / "train.jsonl", messages_rows(True) + messages_rows(False))
    whole = job_of(our_step(zephyr_llama, data, 1, "zephyr", dict(assistant_only_loss=False)), tmp_path / "whole").train
    short = job_of(our_step(short_zephyr_llama, data, 1, "zephyr", dict(assistant_only_loss=False, packing=True)),
                   tmp_path / "short")
    assert any(row.length > short.max_length for row in whole)  # some are cut
    labelled = [(list(row.prompt + row.answer), [-100] * len(row.prompt) + [
        t if learnt else -100 for t, learnt in zip(row.answer, row.answer_mask())]) for row in whole]
    trl = pack_dataset(Dataset.from_dict({"input_ids": [ids for ids, _ in labelled],
                                          "labels": [labels for _, labels in labelled]}), short.max_length, "bfd")
    ours = [(list(pack.prompt + pack.answer), list(pack.segments)) for pack in short.train]
    assert ours == [(ids, lengths) for ids, lengths in zip(trl["input_ids"], trl["seq_lengths"])]
    for pack, labels, lengths in zip(short.train, trl["labels"], trl["seq_lengths"]):
        starts = [sum(lengths[:k]) for k in range(len(lengths))]  # each row's first token is not learnt
        assert pack.learnt == sum(label != -100 for k, label in enumerate(labels) if k not in starts)


def test_prompt_answer_rows_longer_than_the_window_train_packed_as_unpacked(tmp_path):
    """Plain prompt/answer rows (no template), some longer than tiny GPT-2's window of 64: each is
    cut where it is built (its prompt from the left, its answer kept), so packed they give the
    unpacked rows' loss and learnt tokens."""
    words = "use a sharp knife to cut the box and then wash the knife with water".split()
    rows = [{"prompt": "Question: " + " ".join(words[:n % len(words)] * (1 + n)) + "\nAnswer:",
             "answers": [" " + " ".join(words[n:n + 3])]} for n in range(8)]
    task = GenerationTask(data_files={"train": str(write_jsonl(tmp_path / "long.jsonl", rows))})

    def job(**settings):
        step = FinetuneStep(model=TINY_MODEL, tasks=[task], validation_split=None, batch_size=1, **settings)
        return job_of(step, tmp_path / str(len(settings)))

    unpacked, packed_job = job(), job(packing=True)
    assert max(len(row.prompt) for row in unpacked.train) > 8 and all(row.length <= 64 for row in unpacked.train)
    assert any(pack.length > 40 for pack in packed_job.train) and len(packed_job.train) < len(unpacked.train)
    model = AnswerLossModel(unpacked.spec, None, False).eval()
    collate = AnswerCollator(unpacked.pad_token_id, unpacked.max_length)
    with torch.no_grad():
        plain, packs = (model(**collate(j.train)) for j in (unpacked, packed_job))
    assert int(packs["tokens"].sum()) == int(plain["tokens"].sum()) == sum(r.learnt for r in unpacked.train)
    assert packs["loss"].item() == pytest.approx(plain["loss"].item(), rel=TOLERANCE)


def test_fewer_packs_than_a_batch_make_one_partial_batch(zephyr_llama, tmp_path):
    """As TRL trains 14 packs at a batch size of 16: one step of every pack, not a refusal."""
    data = write_jsonl(tmp_path / "train.jsonl", messages_rows(True) + messages_rows(False))
    job = job_of(our_step(zephyr_llama, data, 16, "zephyr", dict(packing=True, micro_batch_size=4)), tmp_path)
    assert len(job.train) < 16 and job.plan.steps_per_epoch == 1
    assert sorted(job.plan.step_examples(0)) == list(range(len(job.train)))
    micro = {w: [mb for rank in range(w) for mb in job.plan.micro_batches(0, rank, w)] for w in (1, 2, 4)}
    assert sorted(micro[1]) == sorted(micro[2]) == sorted(micro[4])  # the same micro-batches on any device count
    passes = {w: [len(job.plan.micro_batches(0, r, w)) + job.plan.stand_ins(0, r, w) for r in range(w)] for w in (2, 4)}
    assert all(len(set(counts)) == 1 for counts in passes.values())  # every worker makes as many passes


def test_packed_rows_give_the_unpacked_loss_and_gradients(zephyr_llama, tmp_path):
    data = write_jsonl(tmp_path / "train.jsonl", messages_rows(True) + messages_rows(False))
    job = job_of(our_step(zephyr_llama, data, 12, "zephyr", dict(assistant_only_loss=False)), tmp_path)
    rows = job.train
    packs = packed(rows, job.max_length)
    assert len(packs) < len(rows)  # rows were packed together
    model = AnswerLossModel(job.spec, None, False)
    collate = AnswerCollator(job.pad_token_id, job.max_length)

    def loss_and_gradients(examples):
        model.zero_grad()
        outputs = model(**collate(examples))
        outputs["loss"].backward()
        return outputs["loss"].item(), int(outputs["tokens"].sum()), {
            name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}

    loss, tokens, gradients = loss_and_gradients(rows)
    packed_loss, packed_tokens, packed_gradients = loss_and_gradients(packs)
    assert packed_tokens == tokens == sum(r.learnt for r in rows)
    assert packed_loss == pytest.approx(loss, rel=TOLERANCE)
    worst = max((packed_gradients[name] - g).norm().item() / max(g.norm().item(), 1e-12)
                for name, g in gradients.items() if g.norm() > 0)
    print(f"packed vs unpacked: largest relative gradient difference {worst:.1e}")
    assert worst < TOLERANCE


def largest_change_difference(base, one, other) -> float:
    """The largest difference between two runs' weight changes from ``base``, relative to the
    first's change (a relative difference of the weights themselves would hide a wrong step size
    behind the weights' own size)."""
    return max((other[name] - one[name]).norm().item() / max((one[name] - base[name]).norm().item(), 1e-12)
               for name in one if name in base and not torch.equal(one[name], base[name]))


def base_weights(model_dir):
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


@pytest.mark.full
def test_one_packed_step_moves_the_weights_as_the_unpacked_step(zephyr_llama, tmp_path):
    data = write_jsonl(tmp_path / "train.jsonl", messages_rows(True))
    unpacked = our_step(zephyr_llama, data, 6, "zephyr", {})
    packs = len(job_of(our_step(zephyr_llama, data, 1, "zephyr", dict(packing=True)), tmp_path / "job").train)
    packed_step = our_step(zephyr_llama, data, packs, "zephyr", dict(packing=True))  # every row in one step either way
    unpacked, packed_weights = (step.result(LocalWorkspace(tmp_path / name)).state_dict
                                for name, step in (("u", unpacked), ("p", packed_step)))
    worst = largest_change_difference(base_weights(zephyr_llama), unpacked, packed_weights)
    print(f"one step over every row, {packs} packs vs 6 rows: largest relative difference of the change {worst:.1e}")
    assert packs < 6 and worst < TOLERANCE


def test_packing_is_for_generative_tasks():
    piqa = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})
    with pytest.raises(ConfigurationError, match="packing packs the rows of generative tasks"):
        FinetuneStep(model=TINY_MODEL, tasks=[piqa], packing=True)
    generation = GenerationTask(data_files={"train": str(TINY / "generation" / "train.jsonl")})
    assert FinetuneStep(model=TINY_MODEL, tasks=[generation], validation_split=None, packing=True).unique_id != \
        FinetuneStep(model=TINY_MODEL, tasks=[generation], validation_split=None).unique_id


@pytest.mark.full
@pytest.mark.ddp
def test_packed_training_on_two_workers_gives_the_one_worker_model(zephyr_llama, tmp_path):
    """Each epoch ends with a partial batch of packs whose micro-batches two workers cannot share
    equally (one runs a stand-in): the same losses at every step and the same weight change."""
    data = write_jsonl(tmp_path / "train.jsonl", messages_rows(True) + messages_rows(False))
    task = GenerationTask(data_files={"train": str(data)}, until=[], max_new_tokens=8)
    one, two = (FinetuneStep(model=f"rc::{zephyr_llama}", tasks=[task], apply_chat_template=True, packing=True,
                             batch_size=4, micro_batch_size=1, train_epochs=2, validation_split=None, device_count=n,
                             log_every=1) for n in (1, 2))
    assert one.unique_id == two.unique_id
    packs = len(job_of(one, tmp_path / "job").train)
    assert packs % 4 and (packs % 4) % 2  # the last batch is partial, of an odd number of micro-batches
    one, two = (step.result(LocalWorkspace(tmp_path / str(n))) for n, step in ((1, one), (2, two)))
    one_losses, two_losses = (r.training_metrics["history"]["loss"] for r in (one, two))
    assert [step for step, _ in one_losses] == [step for step, _ in two_losses] == list(range(1, 2 * -(-packs // 4) + 1))
    assert [loss for _, loss in two_losses] == pytest.approx([loss for _, loss in one_losses], rel=TOLERANCE)
    worst = largest_change_difference(base_weights(zephyr_llama), one.state_dict, two.state_dict)
    print(f"packed, 1 vs 2 workers: largest relative difference of the weight change {worst:.1e}")
    assert worst < 1e-4
