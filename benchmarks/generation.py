"""Greedy generation speed: ours against lm-evaluation-harness's HFLM, same model, same prompts,
same generation_kwargs, 32 per batch, the outputs checked to be identical.

    pip install -e ".[bench]"
    python benchmarks/generation.py            # --quick for a smoke run
    python benchmarks/generation.py --device cuda --dtype float32 bfloat16 --shape gpt2-small  # gpu_check.sh

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

``--device cuda`` (issue 34, item 3): the same on a GPU, once per ``--dtype`` (both generators
load the model in it), at ``--shape`` (``gpt2-small``: 12 layers, 768 wide, 1,024 positions),
each timed after a warm-up batch with the device synchronised. Every row gives the wall time,
tokens/s (the tokens of its own generations as kept, re-encoded: the same count for both where
no string differs) and how many of the strings differ. In bfloat16 a string can differ where a decision's two best logits
are within rounding of each other, as rows are batched differently (ours drops finished rows);
the row then says so, with the widest of those strings' margins (each string's margin is its
closest decision: all of them were decided within that of a tie).

``--long``: the budget case of ``benchmarks/end_to_end_generation.py`` in one batch: 32 prompts of
2-shot GSM8K length (330-600 words, ~340-620 tokens) on a 1,024-position model (``tiny-1024``),
no stop strings, so every sequence runs its 256 tokens. Both generators then run the same decode
steps, and what differs is each step's own cost (the key/value cache's growth above all).

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

from scoring import SHAPES, build_model

WORDS = ("Tom has apples and buys more pens for the class so how many does each of his friends get after "
         "they share the boxes equally between three rooms of the school").split()


def requests(count: int, long: bool = False, seed: int = 0):
    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        words = [rng.choice(WORDS) for _ in range(rng.randint(*(330, 600) if long else (15, 150)))]
        prompts.append(f"Question: {' '.join(words)}?\nAnswer:")
    return prompts


def ours(directory: Path, prompts, stops, max_gen_toks: int, device: str = "cpu", dtype: str = "float32",
         max_length: int = 512):
    import torch

    from catwalk_steps.models.generation import GenerationRequest, generate_greedy
    from catwalk_steps.models.loading import ModelSpec
    from catwalk_steps.models.weights import load_pretrained

    spec = ModelSpec.parse(f"rc::{directory}")
    conventions = spec.conventions()
    lm = load_pretrained(spec, getattr(torch, dtype)).to(device).eval()
    batch = [GenerationRequest(conventions.prompt(p), tuple(s), max_gen_toks) for p, s in zip(prompts, stops)]

    def run(only=None):
        out = generate_greedy(lm, conventions, batch[:only], pad_token_id=conventions.pad_token_id, max_length=max_length,
                              max_batch_size=32)
        return [g["text"] for g in out], [g["margin"] for g in out]

    return run


def lm_eval(directory: Path, prompts, stops, max_gen_toks: int, device: str = "cpu", dtype: str = "float32",
            max_length: int = 512):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    harness = HFLM(pretrained=str(directory), device=device, batch_size=32, dtype=dtype, max_length=max_length)
    batch = [Instance(request_type="generate_until", doc={}, idx=0,
                      arguments=(p, {"until": list(s), "max_gen_toks": max_gen_toks, "do_sample": False}))
             for p, s in zip(prompts, stops)]
    return lambda only=None: (harness.generate_until(batch[:only], disable_tqdm=True), None)


def window(args) -> int:
    """Both generators' context window: the model's positions."""
    return SHAPES[args.shape]["n_positions"]


def measure(directory: Path, which: str, args, dtype: str, repeats: int) -> None:
    """One generator in this process: prints its best wall time, its outputs (and our margins)
    and the tokens they hold as JSON. On a GPU, one batch first warms up kernels and allocator,
    and each timing waits for the device."""
    import torch
    from transformers import AutoTokenizer

    device = args.device
    stops = json.loads((directory / "stops.json").read_text())
    run = {"ours": ours, "lm-eval": lm_eval}[which](directory, requests(args.count, args.long), stops, args.max_gen_toks,
                                                     device, dtype, window(args))
    synchronize = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    if device.startswith("cuda"):
        run(32)
    best, outputs, margins = float("inf"), None, None
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        outputs, margins = run()
        synchronize()
        best = min(best, time.perf_counter() - start)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokens = sum(len(tokenizer(text, add_special_tokens=False).input_ids) for text in outputs)
    print(json.dumps({"seconds": best, "outputs": outputs, "margins": margins, "tokens": tokens}))


def stop_words(directory: Path, args) -> None:
    """Each prompt's stop string: a word of its own uncut greedy continuation (float32), at a
    seeded place; none with ``--long``."""
    prompts = requests(args.count, args.long)
    if args.long:
        (directory / "stops.json").write_text(json.dumps([[] for _ in prompts]))
        return
    uncut = ours(directory, prompts, [[] for _ in prompts], args.max_gen_toks, args.device,
                 max_length=window(args))()[0]
    rng = random.Random(1)
    stops = []
    for text in uncut:
        words = text.split()
        stops.append([" " + words[rng.randrange(len(words))]] if words else [])
    (directory / "stops.json").write_text(json.dumps(stops))


def build_bos_model(directory: Path, positions: int) -> Path:
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
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=positions)
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def compare(directory: Path, args, dtype: str, repeats: int) -> None:
    """Both generators in fresh processes on ``args.device`` in ``dtype``: a table row each."""
    found = {}
    for which in ("ours", "lm-eval"):
        command = [sys.executable, __file__, "--measure", which, "--directory", str(directory), "--device",
                   args.device, "--dtype", dtype, "--count", str(args.count), "--max_gen_toks",
                   str(args.max_gen_toks), "--repeats", str(repeats), "--shape", args.shape] + ["--long"] * args.long
        child = subprocess.run(command, capture_output=True, text=True)
        if child.returncode:  # its traceback, not only its exit status
            raise SystemExit(f"{which} failed ({child.returncode}):\n{child.stderr[-4000:]}")
        out = child.stdout
        found[which] = json.loads(out.strip().splitlines()[-1])
    mine, theirs = found["ours"]["outputs"], found["lm-eval"]["outputs"]
    differing = [k for k, (a, b) in enumerate(zip(mine, theirs)) if a != b]
    widest = max((found["ours"]["margins"][k] for k in differing), default=None)
    for which in ("ours", "lm-eval"):
        seconds = found[which]["seconds"]
        print(f"| {args.device} | {dtype} | {which} | {seconds:.2f} | {found[which]['tokens'] / seconds:.0f} | "
              f"{found['ours']['seconds'] / seconds:.2f}x | {len(differing)} of {len(mine)}"
              + (f" (each of ours decided within {widest:.3g} of a tie)" if differing else "") + " |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--bos", action="store_true", help="a Llama with Mistral's BOS-adding tokenizer")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", nargs="+", default=["float32"], choices=["float32", "bfloat16"])
    parser.add_argument("--shape", default="tiny", help="a shape of benchmarks/scoring.py (GPT-2 only)")
    parser.add_argument("--long", action="store_true",
                        help="2-shot-length prompts (~340-620 tokens), no stop strings, a 1,024-position model")
    parser.add_argument("--count", type=int, help="prompts (default 128; --quick or --long 32)")
    parser.add_argument("--max_gen_toks", type=int, help="token budget (default 64; --quick 16; --long 256)")
    parser.add_argument("--repeats", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--directory", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.count = args.count or (32 if args.quick or args.long else 128)
    args.max_gen_toks = args.max_gen_toks or (16 if args.quick else 256 if args.long else 64)
    if args.long and args.shape == "tiny":
        args.shape = "tiny-1024"
    repeats = args.repeats or (1 if args.quick else 2)
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("benchmarks/generation.py --device cuda needs a CUDA device")
    if args.measure:
        measure(Path(args.directory), args.measure, args, args.dtype[0], repeats)
        return
    with tempfile.TemporaryDirectory() as tmp:
        directory = build_bos_model(Path(tmp), window(args)) if args.bos else build_model(Path(tmp), args.shape)
        stop_words(directory, args)
        model = "Llama, Mistral's BOS-adding tokenizer" if args.bos else f"GPT-2 ({args.shape}), GPT-2's tokenizer"
        print(f"{model}; {args.count} {'long ' if args.long else ''}prompts, max_gen_toks {args.max_gen_toks}, "
              f"batch 32, best of {repeats}")
        print("| device | dtype | generator | wall s | tokens/s | ours / this | strings differing |")
        print("|---|---|---|---|---|---|---|")
        for dtype in args.dtype:
            compare(directory, args, dtype, repeats)


if __name__ == "__main__":
    main()
