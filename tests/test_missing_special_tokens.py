"""Tokenizers without a pad token or an EOS: padding falls back to EOS, else UNK, else id 0
(padding is masked, so the numbers are those of unpadded passes), and generative fine-tuning,
which ends each answer with the EOS, refuses a tokenizer without one before any training."""

import shutil

import pytest
from tango.common.exceptions import ConfigurationError
from tango.workspaces import LocalWorkspace

from catwalk_steps import FinetuneStep
from catwalk_steps.models.conventions import TokenConventions
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.models.scoring import Query, score_queries
from catwalk_steps.models.weights import load_pretrained
from catwalk_steps.tasks import GenerationTask

from .conftest import TINY, write_jsonl

#: Every word of the prompts here and of ``conventions.SAMPLE`` (there is no UNK to fall back on).
WORDS = ("the cat sat on a mat and then it ran to door where dog slept all day Question Answer : is this sample ? "
         "yes").split()


def word_tokenizer(directory, **special_tokens):
    """A word-level tokenizer of :data:`WORDS` with only ``special_tokens`` (none by default),
    saved in ``directory`` beside the demo model's weights (ids within its vocabulary)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(dict.fromkeys(WORDS + list(special_tokens.values())))}
    backend = Tokenizer(models.WordLevel(vocab))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    shutil.copytree(TINY / "model", directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"):
        (directory / name).unlink(missing_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=backend, **special_tokens).save_pretrained(directory)
    return directory


@pytest.mark.parametrize("special_tokens, pad", [
    ({}, 0), ({"unk_token": "<unk>"}, len(WORDS)), ({"eos_token": "</s>", "unk_token": "<unk>"}, len(WORDS)),
])
def test_padding_falls_back_to_eos_then_unk_then_id_0(tmp_path, special_tokens, pad):
    spec = ModelSpec(str(word_tokenizer(tmp_path / "model", **special_tokens)))
    tokenizer = spec.load_tokenizer()
    assert tokenizer.pad_token_id == pad
    queries = [Query(tuple(tokenizer.encode(c)), tuple(tokenizer.encode(x)))
               for c, x in [("Question the cat sat on", "a mat"), ("Answer", "the dog slept all day")]]
    lm = load_pretrained(spec).eval()
    settings = dict(pad_token_id=TokenConventions(tokenizer).pad_token_id, max_length=64, max_batch_tokens=10**6)
    padded = score_queries(lm, queries, max_batch_size=2, **settings)
    assert padded == pytest.approx(score_queries(lm, queries, max_batch_size=1, **settings), abs=1e-5)


def test_generative_fine_tuning_refuses_a_tokenizer_without_eos_before_training(tmp_path):
    model = word_tokenizer(tmp_path / "model")
    rows = [{"prompt": "Question where the cat sat Answer", "answers": ["mat"]}] * 4
    task = GenerationTask(data_files={"train": str(write_jsonl(tmp_path / "train.jsonl", rows))}, until=["\n"])
    step = FinetuneStep(model=f"rc::{model}", tasks=[task], batch_size=2, train_epochs=1, validation_split=None)
    with pytest.raises(ConfigurationError, match=f"the tokenizer of {model} has none: give the model a tokenizer"):
        step.result(LocalWorkspace(tmp_path / "workspace"))
    assert not list((tmp_path / "workspace").rglob("*.safetensors"))
