"""Where a generation stops and what its prompt window is, as lm-evaluation-harness 0.4.13's HFLM
``generate_until`` has it (batches of one: a row of its larger batches goes on after its stop
string until the batch stops): a stop string that is a special token, the tokenizer's EOS where
the model's generation config names another, and an encoder-decoder's whole window."""

import pytest
import torch

from catwalk_steps.models.conventions import TokenConventions
from catwalk_steps.models.generation import GenerationRequest, generate_greedy
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.models.prompt_room import generation_requests
from catwalk_steps.models.weights import load_pretrained
from catwalk_steps.tasks import GenerationTask

from .conftest import write_jsonl
from .test_seq2seq import tiny_t5  # noqa: F401  (a fixture)

pytest.importorskip("lm_eval")

PROMPTS = ["Question: where did the cat sit?\nAnswer:", "The capital of France is"]
NEW_TOKENS = 12


def harness_generations(lm, tokenizer, prompts, until, max_new_tokens, **settings):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    harness = HFLM(pretrained=lm, tokenizer=tokenizer, batch_size=1, device="cpu", **settings)
    kwargs = {"until": list(until), "max_gen_toks": max_new_tokens, "do_sample": False}
    requests = [Instance("generate_until", {}, (p, dict(kwargs)), n) for n, p in enumerate(prompts)]
    return harness.generate_until(requests, disable_tqdm=True)


def ours(lm, conventions, prompts, until, max_length=128):
    requests = [GenerationRequest(conventions.prompt(p), tuple(until), NEW_TOKENS, conventions.encoder_decoder)
                for p in prompts]
    generated = generate_greedy(lm, conventions, requests, pad_token_id=conventions.pad_token_id,
                                max_length=max_length, max_batch_size=8)
    return [g["text"] for g in generated]


def emitting(lm, tokenizer, token: int, step: int = 3):
    """``lm`` changed to generate ``token`` wherever the token it chose at ``step`` of the first
    prompt's generation would win (its output row that token's, scaled up)."""
    ids = torch.tensor([tokenizer.encode(PROMPTS[0])])
    chosen = lm.generate(ids, max_new_tokens=step + 1, do_sample=False, pad_token_id=0)[0, ids.shape[1] + step]
    with torch.no_grad():
        lm.lm_head.weight[token] = 1.5 * lm.lm_head.weight[chosen]
    return lm


@pytest.fixture
def llama(mistral_llama):
    spec = ModelSpec.parse(mistral_llama)
    return spec.load_tokenizer(), load_pretrained(spec).eval()


def test_a_special_token_stop_string_stops_the_generation_there(llama):
    tokenizer, lm = llama
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_end|>"]})
    lm.resize_token_embeddings(len(tokenizer))
    lm = emitting(lm, tokenizer, tokenizer.convert_tokens_to_ids("<|im_end|>"))
    conventions = TokenConventions(tokenizer)
    stopped = ours(lm, conventions, PROMPTS, ["<|im_end|>"])
    assert stopped == harness_generations(lm, tokenizer, PROMPTS, ["<|im_end|>"], NEW_TOKENS)
    assert len(stopped[0]) < len(ours(lm, conventions, PROMPTS, [])[0])  # without the stop string it goes on


def test_the_tokenizer_s_eos_stops_a_model_whose_generation_config_names_another(llama):
    tokenizer, lm = llama
    lm = emitting(lm, tokenizer, tokenizer.eos_token_id)  # what generative fine-tuning teaches
    lm.generation_config.eos_token_id = tokenizer.unk_token_id
    generations = ours(lm, TokenConventions(tokenizer), PROMPTS, ["\n\n"])
    assert generations == harness_generations(lm, tokenizer, PROMPTS, ["\n\n"], NEW_TOKENS)
    ids = torch.tensor([tokenizer.encode(PROMPTS[0])])
    assert tokenizer.eos_token_id in lm.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)[0]


def test_an_encoder_decoder_s_encoder_reads_the_whole_window(tiny_t5):
    from tokenizers.processors import TemplateProcessing

    spec = ModelSpec.parse(tiny_t5)
    tokenizer, lm = spec.load_tokenizer(), load_pretrained(spec).eval()
    eos = (tokenizer.eos_token, tokenizer.eos_token_id)
    # As T5's tokenizer, ending an encoding in EOS (lm-eval's seq2seq prompts, and ours: the tokenizer's encoding).
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(single=f"$A {eos[0]}", special_tokens=[eos])
    conventions = TokenConventions(tokenizer, encoder_decoder=True)
    prompts = [" ".join(["the cat sat on a mat"] * 8)]  # 48 tokens
    window = 32
    encoded = []
    handle = lm.get_encoder().register_forward_pre_hook(
        lambda module, args, kwargs: encoded.append(kwargs["input_ids"][0].tolist()), with_kwargs=True)
    try:
        generated = ours(lm, conventions, prompts, [], max_length=window)
        expected = harness_generations(lm, tokenizer, prompts, [], NEW_TOKENS, max_length=window)
    finally:
        handle.remove()
    assert generated == expected
    assert encoded[0] == encoded[-1] and len(encoded[0]) == window


def test_an_encoder_decoder_s_budget_leaves_its_encoder_s_window_whole(tiny_t5, tmp_path, caplog):
    path = write_jsonl(tmp_path / "validation.jsonl", [{"prompt": "the cat sat " * 30, "answers": ["mat"]}])
    task = GenerationTask(data_files={"validation": str(path)}, until=["\n"], max_new_tokens=40)
    conventions = ModelSpec.parse(tiny_t5).conventions()
    (request,) = generation_requests(conventions, task.instances("validation"), 32)  # no room left if decoder-only
    assert len(request.window(32)) == 32
    assert "longer than the 32 tokens an encoder's input of 32 holds:" in caplog.text
