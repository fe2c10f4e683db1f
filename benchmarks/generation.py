"""Greedy generation speed: ours against lm-evaluation-harness's HFLM, same model, same prompts,
same generation_kwargs, 32 per batch on CPU, the outputs checked to be identical.

    pip install -e ".[bench]"
    python benchmarks/generation.py            # --quick for a smoke run

Model: the randomly initialised GPT-2 of benchmarks/scoring.py (4 layers, 256 wide, 512
positions, the real GPT-2 BPE tokenizer). Prompts: GSM8K-shaped questions of many lengths
(``Question: ...\\nAnswer:``, 20 to 200 tokens). A random model rarely emits a stop string, so
each prompt gets its own stop string, a word it will say: the token its greedy continuation
emits at a seeded position in 1..max_gen_toks, found by one uncut generation first. So
sequences end at different steps, as a real model's answers do.

- **ours**: ``catwalk_steps.models.generation.generate_greedy`` as ``catwalk::predict`` runs it:
  prompts sorted longest first, left-padded batches of 32, a KV cache, argmax of the last
  position's logits only, finished sequences dropped from the batch and the cache.
- **lm-eval**: ``HFLM.generate_until`` (``batch_size=32``, float32) on the same directory and
  requests: transformers' ``generate`` with its stop-sequence criteria.

``--bos``: a random Llama of the same size (RoPE, grouped-query attention) with Mistral-7B v0.1's
BOS-adding SentencePiece tokenizer (the ``mistral-common`` wheel's), so both generators encode
each prompt with BOS (lm-eval 0.4.13's default, our ``models/conventions.py``).

Each runs in a fresh process (best of ``--repeats``); the table goes to stdout.
"""

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scoring import build_model

WORDS = ("Tom has apples and buys more pens for the class so how many does each of his friends get after "
         "they share the boxes equally between three rooms of the school").split()


def requests(count: int, max_gen_toks: int, seed: int = 0):
    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        words = [rng.choice(WORDS) for _ in range(rng.randint(15, 150))]
        prompts.append(f"Question: {' '.join(words)}?\nAnswer:")
    return prompts


def ours(directory: Path, prompts, stops, max_gen_toks: int):
    from catwalk_steps.models.generation import GenerationRequest, generate_greedy
    from catwalk_steps.models.loading import ModelSpec
    from catwalk_steps.models.weights import load_pretrained

    spec = ModelSpec.parse(f"rc::{directory}")
    conventions, lm = spec.conventions(), load_pretrained(spec).eval()
    batch = [GenerationRequest(conventions.prompt(p), tuple(s), max_gen_toks) for p, s in zip(prompts, stops)]

    def run():
        out = generate_greedy(lm, conventions, batch, pad_token_id=conventions.pad_token_id, max_length=512,
                              max_batch_size=32)
        return [g["text"] for g in out]

    return run


def lm_eval(directory: Path, prompts, stops, max_gen_toks: int):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    harness = HFLM(pretrained=str(directory), device="cpu", batch_size=32, dtype="float32", max_length=512)
    batch = [Instance(request_type="generate_until", doc={}, idx=0,
                      arguments=(p, {"until": list(s), "max_gen_toks": max_gen_toks, "do_sample": False}))
             for p, s in zip(prompts, stops)]
    return lambda: harness.generate_until(batch, disable_tqdm=True)


def measure(directory: Path, which: str, count: int, max_gen_toks: int, repeats: int) -> None:
    """One generator in this process: prints its best wall time and its outputs as JSON."""
    stops = json.loads((directory / "stops.json").read_text())
    run = {"ours": ours, "lm-eval": lm_eval}[which](directory, requests(count, max_gen_toks), stops, max_gen_toks)
    best, outputs = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        outputs = run()
        best = min(best, time.perf_counter() - start)
    print(json.dumps({"seconds": best, "outputs": outputs}))


def stop_words(directory: Path, count: int, max_gen_toks: int) -> None:
    """Each prompt's stop string: a word of its own uncut greedy continuation, at a seeded place."""
    prompts = requests(count, max_gen_toks)
    uncut = ours(directory, prompts, [[] for _ in prompts], max_gen_toks)()
    rng = random.Random(1)
    stops = []
    for text in uncut:
        words = text.split()
        stops.append([" " + words[rng.randrange(len(words))]] if words else [])
    (directory / "stops.json").write_text(json.dumps(stops))


def build_bos_model(directory: Path) -> Path:
    """A random Llama the size of :func:`scoring.build_model`'s GPT-2, with Mistral-7B v0.1's tokenizer."""
    import mistral_common
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaTokenizer

    source = directory / "sentencepiece"
    source.mkdir()
    (source / "tokenizer.model").write_bytes((Path(mistral_common.__file__).parent / "data/tokenizer.model.v1").read_bytes())
    tokenizer = LlamaTokenizer.from_pretrained(source, add_bos_token=True, add_eos_token=False)
    assert tokenizer.encode("Hello")[0] == tokenizer.bos_token_id
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--bos", action="store_true", help="a Llama with Mistral's BOS-adding tokenizer")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--directory", help=argparse.SUPPRESS)
    args = parser.parse_args()
    count, max_gen_toks, repeats = (32, 16, 1) if args.quick else (128, 64, 2)
    if args.measure:
        measure(Path(args.directory), args.measure, count, max_gen_toks, repeats)
        return
    with tempfile.TemporaryDirectory() as tmp:
        directory = build_bos_model(Path(tmp)) if args.bos else build_model(Path(tmp))
        stop_words(directory, count, max_gen_toks)
        found = {}
        for which in ("ours", "lm-eval"):
            out = subprocess.run([sys.executable, __file__, "--measure", which, "--directory", str(directory)],
                                 capture_output=True, text=True, check=True).stdout
            found[which] = json.loads(out.strip().splitlines()[-1])
    same = found["ours"]["outputs"] == found["lm-eval"]["outputs"]
    differing = sum(a != b for a, b in zip(found["ours"]["outputs"], found["lm-eval"]["outputs"]))
    model = "Llama, Mistral's BOS-adding tokenizer" if args.bos else "GPT-2, GPT-2's tokenizer"
    print(f"{model}; {count} prompts, max_gen_toks {max_gen_toks}, batch 32, CPU float32, best of {repeats}")
    print("| generator | wall s | ours / this |")
    print("|---|---|---|")
    for which in ("ours", "lm-eval"):
        print(f"| {which} | {found[which]['seconds']:.2f} | {found['ours']['seconds'] / found[which]['seconds']:.2f}x |")
    print(f"identical outputs: {same} ({differing} of {count} differ)")


if __name__ == "__main__":
    main()
