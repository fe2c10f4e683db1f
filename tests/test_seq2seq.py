"""Encoder-decoder rank classification with a tiny T5 built here: scoring, fine-tuning, caching."""

import pytest
import torch
from tango.workspaces import LocalWorkspace
from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

from catwalk_steps import CalculateMetricsStep, FinetunedModel, FinetuneStep, PiqaTask, PredictStep
from catwalk_steps.models.loading import ModelSpec, context_window
from catwalk_steps.models.weights import load_pretrained
from catwalk_steps.models.conventions import TokenConventions
from catwalk_steps.models.scoring import score_queries

from .conftest import TINY
from .tiny_models import bart_tokenizer, t5_tokenizer, tiny_bart

PAIRS = [
    ("Question: How do I cut the bread?\nAnswer:", " Use a sharp knife."),
    ("Question: How do I cut the bread?\nAnswer:", " Use the fridge."),
    ("Question: To light the candle, what should I do?\nAnswer:", " Get a match first."),
    ("Best way to sweep the floor?", " Use a broom."),
]


def saved_t5(directory, tokenizer) -> str:
    """A randomly initialised 1-layer T5 for ``tokenizer``, saved with it like a hub model."""
    torch.manual_seed(0)
    config = T5Config(
        vocab_size=len(tokenizer), d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2, dropout_rate=0.0,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.eos_token_id,
    )
    T5ForConditionalGeneration(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return f"rc::{directory}"


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory) -> str:
    """A tiny T5 with the demo's tokenizer."""
    return saved_t5(tmp_path_factory.mktemp("tiny-t5"), AutoTokenizer.from_pretrained(TINY / "model"))


def test_the_decoder_scores_each_continuation_after_the_encoded_context(tiny_t5):
    spec = ModelSpec.parse(tiny_t5)
    tokenizer, lm = spec.load_tokenizer(), load_pretrained(spec).eval()
    assert isinstance(lm, T5ForConditionalGeneration)
    queries = [TokenConventions(tokenizer, encoder_decoder=True).pair(c, x) for c, x in PAIRS]
    ours = score_queries(lm, queries, pad_token_id=tokenizer.pad_token_id, max_length=512, max_batch_size=3,
                         max_batch_tokens=10**6)
    eos = tokenizer.eos_token_id
    expected = []
    with torch.no_grad():  # one unpadded pass per pair: HF's own loss over continuation + EOS
        for query in queries:
            labels = torch.tensor([list(query.continuation) + [eos]])
            loss = lm(input_ids=torch.tensor([list(query.context)]), labels=labels).loss
            expected.append(-loss.item() * labels.shape[1])
    assert ours == pytest.approx(expected, abs=1e-4)
    # Contexts longer than the window are cut from the left, to the window (lm-evaluation-harness's
    # seq2seq cut), whatever the continuation's length.
    long = TokenConventions(tokenizer, encoder_decoder=True).pair(" ".join(["the box"] * 40), " Use a broom.")
    kept = long.context[-32:]
    kwargs = dict(pad_token_id=tokenizer.pad_token_id, max_length=32, max_batch_size=4, max_batch_tokens=4096)
    assert score_queries(lm, [long], **kwargs) == pytest.approx(
        score_queries(lm, [type(long)(kept, long.continuation)], **kwargs), abs=1e-5)


def test_fine_tuning_caching_and_prediction_work_as_for_decoder_only_models(tiny_t5, tmp_path):
    task = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})
    workspace = LocalWorkspace(tmp_path)
    step = FinetuneStep(model=tiny_t5, tasks=[task], batch_size=16, train_epochs=2, learning_rate=3e-3,
                        train_limit=128, validation_limit=32, step_name="finetune")
    trained = step.result(workspace)
    assert isinstance(trained, FinetunedModel)
    stock = load_pretrained(ModelSpec.parse(tiny_t5)).state_dict()
    assert any(not torch.equal(stock[k], t) for k, t in trained.state_dict.items())
    cached = LocalWorkspace(workspace.dir).step_cache[step]
    assert isinstance(cached.load_model(), T5ForConditionalGeneration)
    predict = PredictStep(model=step, task=task, limit=32, step_name="predict")
    from_training = predict.run(model=trained, task=task, limit=32)
    from_cache = predict.run(model=cached, task=task, limit=32)
    assert from_training == from_cache and len(from_cache) == 32
    # The reported validation accuracy is what scoring the returned weights gives (an accuracy
    # over 32 instances moves in steps of 1/32: one decision apart fails).
    metrics = CalculateMetricsStep(predictions=predict).run(from_cache)
    assert metrics["acc"] == pytest.approx(trained.training_metrics["val_acc"], abs=1e-6)
    zero_shot = PredictStep(model=tiny_t5, task=task, limit=32, step_name="zero").result(workspace)
    assert [p["logliks"] for p in zero_shot] != [p["logliks"] for p in from_cache]


@pytest.fixture(scope="module", params=["t5", pytest.param("bart", marks=pytest.mark.full)])
def seq2seq_model(request, tmp_path_factory) -> str:
    """A tiny T5 with a T5-style SentencePiece tokenizer (every encoding ending in ``</s>``), or a
    tiny BART with a BART-style one (``<s> ... </s>``): tests/tiny_models.py."""
    directory = tmp_path_factory.mktemp(request.param)
    if request.param == "bart":
        return f"rc::{tiny_bart(directory, bart_tokenizer(directory / 'tokenizer', TINY / 'model'))}"
    texts = [context + continuation for context, continuation in SEQ2SEQ_PAIRS]
    texts += (TINY / "train.jsonl").read_text().splitlines()
    return saved_t5(directory, AutoTokenizer.from_pretrained(t5_tokenizer(directory / "tokenizer", texts)))


#: Beside :data:`PAIRS`: a continuation that SentencePiece encodes apart otherwise than as the
#: tail of the whole (``['▁', '4']``, not ``['4']``), trailing whitespace, an empty context.
SEQ2SEQ_PAIRS = PAIRS + [("2+2=", "4"), ("Answer: ", "yes"), ("", "Hello world")]


def eos_loglik(lm, context, continuation) -> float:
    """The log-probability of EOS after ``continuation``, given ``context``: one HF forward pass."""
    eos = lm.config.eos_token_id
    with torch.no_grad():
        logits = lm(input_ids=torch.tensor([list(context)]), labels=torch.tensor([list(continuation) + [eos]])).logits
    return logits[0, -1].log_softmax(-1)[eos].item()


def test_queries_and_log_likelihoods_are_lm_evaluation_harness_s_seq2seq_ones(seq2seq_model):
    """lm-eval's seq2seq HFLM encodes the context with the tokenizer's special tokens (T5's
    ``... </s>``, BART's ``<s> ... </s>``) and the continuation apart, without them, and its
    encoder reads the context's last ``window`` tokens: so do we, token for token, whatever the
    continuation's length. Our log-likelihood is its number plus the continuation's EOS, our
    documented convention (T0's and catwalk's rank classification)."""
    pytest.importorskip("lm_eval")
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from .test_special_tokens import harness_pairs

    harness = HFLM(pretrained=seq2seq_model.removeprefix("rc::"), device="cpu", batch_size=4, dtype="float32")
    spec = ModelSpec.parse(seq2seq_model)
    conventions, lm = spec.conventions(), load_pretrained(spec).eval()
    window = context_window(lm.config)
    assert harness.backend == "seq2seq" and harness.max_length == window
    long = " ".join(["the box is on the table"] * (window // 4))  # past the window
    pairs = SEQ2SEQ_PAIRS + [(long, " Use a broom."), (long + " and", " a long answer of many words,")]
    queries = [conventions.pair(context, continuation) for context, continuation in pairs]
    assert all(len(q.context) > window for q in queries[len(SEQ2SEQ_PAIRS):])
    tokenizer = conventions.tokenizer
    if tokenizer.bos_token_id is None:  # T5
        assert tokenizer.convert_ids_to_tokens(queries[len(PAIRS)].continuation) == ["▁", "4"]
    else:  # BART
        assert queries[0].context[0] == tokenizer.bos_token_id
    for prompt, _ in pairs:  # generation prompts, the encoder's input there
        assert list(conventions.prompt(prompt)) == harness.tok_batch_encode([prompt])[0][0].tolist()

    theirs = [ll for ll, _ in harness.loglikelihood([Instance("loglikelihood", {}, pair, n)
                                                      for n, pair in enumerate(pairs)], disable_tqdm=True)]
    eos_terms = [eos_loglik(lm, q.context[-window:], q.continuation) for q in queries]
    for batch_size in (1, 4):
        ours = score_queries(lm, queries, pad_token_id=conventions.pad_token_id, max_length=window,
                             max_batch_size=batch_size, max_batch_tokens=10**6)
        assert ours == pytest.approx([t + e for t, e in zip(theirs, eos_terms)], abs=1e-4)
    assert [(q.context, q.continuation) for q in queries] == harness_pairs(harness, pairs)


def test_an_encoder_decoder_with_learned_positions_scores_contexts_past_its_window(tmp_path):
    """BART's positions are a table of its window's size: a context cut as T5's is fits it."""
    spec = ModelSpec.parse(f"rc::{tiny_bart(tmp_path, TINY / 'model', window=64)}")
    conventions, lm = spec.conventions(), load_pretrained(spec).eval()
    query = conventions.pair(" ".join(["the box"] * 80), " box")  # past the window, with a one-token continuation
    assert len(query.continuation) == 1 and len(query.context) > 64
    kwargs = dict(pad_token_id=conventions.pad_token_id, max_length=64, max_batch_size=4, max_batch_tokens=4096)
    cut = type(query)(query.context[-64:], query.continuation)  # its last 64 tokens: the whole window
    assert score_queries(lm, [query], **kwargs) == pytest.approx(score_queries(lm, [cut], **kwargs), abs=1e-5)
