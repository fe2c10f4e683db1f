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


@pytest.fixture(scope="module")
def zephyr_llama(tmp_path_factory, mistral_tokenizer_path):
    from transformers import AutoTokenizer

    from .tiny_models import tiny_llama

    directory = tiny_llama(tmp_path_factory.mktemp("packing-llama"), mistral_tokenizer_path, window=256)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.chat_template = TEMPLATES["zephyr"]
    tokenizer.save_pretrained(directory)
    return directory


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


@pytest.mark.full
def test_one_packed_step_moves_the_weights_as_the_unpacked_step(zephyr_llama, tmp_path):
    data = write_jsonl(tmp_path / "train.jsonl", messages_rows(True))
    unpacked = our_step(zephyr_llama, data, 6, "zephyr", {})
    packs = len(job_of(our_step(zephyr_llama, data, 1, "zephyr", dict(packing=True)), tmp_path / "job").train)
    packed = our_step(zephyr_llama, data, packs, "zephyr", dict(packing=True))  # every row in one step either way
    unpacked, packed = (step.result(LocalWorkspace(tmp_path / name)).state_dict
                        for name, step in (("u", unpacked), ("p", packed)))
    worst = max((packed[name] - weight).norm().item() / max(weight.norm().item(), 1e-12)
                for name, weight in unpacked.items())
    print(f"one step over every row, {packs} packs vs 6 rows: largest relative weight difference {worst:.1e}")
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
    data = write_jsonl(tmp_path / "train.jsonl", messages_rows(True) + messages_rows(False))
    task = GenerationTask(data_files={"train": str(data)}, until=[], max_new_tokens=8)
    one, two = (FinetuneStep(model=f"rc::{zephyr_llama}", tasks=[task], apply_chat_template=True, packing=True,
                             batch_size=2, micro_batch_size=1, train_epochs=3, validation_split=None, device_count=n)
                for n in (1, 2))
    assert one.unique_id == two.unique_id
    one, two = (step.result(LocalWorkspace(tmp_path / str(n))).state_dict for n, step in ((1, one), (2, two)))
    worst = max((two[name] - weight).norm().item() / max(weight.norm().item(), 1e-12) for name, weight in one.items())
    print(f"packed, 1 vs 2 workers: largest relative weight difference {worst:.1e}")
    from safetensors.torch import load_file

    base = load_file(str(zephyr_llama / "model.safetensors"))
    assert any(not torch.equal(base[name], weight) for name, weight in one.items() if name in base)  # it trained
    assert worst < TOLERANCE
