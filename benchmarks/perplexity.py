"""Perplexity speed: ours against lm-evaluation-harness, on the same model and documents.

    pip install -e ".[bench]"
    python benchmarks/perplexity.py            # about 5 minutes on 2 cores; --quick for a smoke run

Model: benchmarks/scoring.py's randomly initialised GPT-2 (4 layers, 256 wide, 512 positions)
with the real GPT-2 BPE tokenizer (50,257 tokens), saved with save_pretrained into a temp dir
that both sides load. Documents: ``--documents`` generated texts (words drawn from the demo's
data, 50 to 800 words each, seeded), so most take one or two 512-token windows.

Two comparisons, each the best of ``--repeats`` rounds in which the two sides take turns (on a
shared machine, the load then weighs on both alike):

- **computation**: in one process, both models loaded, the documents in memory. Ours: what ``catwalk::predict``
  runs for a perplexity task (``document_queries`` + ``score_queries``, ``max_batch_size=32``);
  lm-evaluation-harness: ``HFLM(batch_size=32).loglikelihood_rolling`` on the same strings.
- **end to end**: each run a fresh process, from a JSONL file to the metrics, imports and model
  loading included. Ours:
  ``catwalk::predict`` + ``catwalk::calculate_metrics`` on ``{type: "perplexity"}``;
  lm-evaluation-harness: ``simple_evaluate`` with ``hf`` on a task YAML reading the same file.

The computation comparison also times the **floor**: work no exact scorer can skip (the output
layer and its ``logsumexp`` at every predicted position, 50,257 x 256 per token), alone, at its
most efficient. Its time over lm-eval's is a lower bound on ours / lm-eval.

Equal numbers: the largest relative difference of the per-document log-likelihoods, and of
``word_perplexity`` end to end.
"""

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BATCH = 32


def documents(count: int):
    rows = [json.loads(line) for line in (REPO / "data/tiny/train.jsonl").read_text().splitlines()]
    words = sorted({w for r in rows for w in (r["goal"] + " " + r["sol1"] + " " + r["sol2"]).split()})
    rng = random.Random(0)
    return [" ".join(rng.choices(words, k=rng.randint(50, 800))) for _ in range(count)]


def computation_ours(model: Path, texts):
    import torch

    from catwalk_steps.models.loading import ModelSpec, context_window
    from catwalk_steps.models.weights import load_pretrained
    from catwalk_steps.models.scoring import score_queries
    from catwalk_steps.tasks import DocumentInstance

    try:
        from catwalk_steps.kinds.documents import document_queries
    except ImportError:  # a checkout from before the request kinds had a home (benchmarks/regression.py)
        from catwalk_steps.prediction.perplexity_records import document_queries

    spec = ModelSpec.parse(f"rc::{model}")
    conventions, lm = spec.conventions(), load_pretrained(spec, torch.float32).eval()
    docs = [DocumentInstance(str(i), t, 1, 1) for i, t in enumerate(texts)]

    def run():
        queries, document_of = document_queries(conventions, docs, context_window(lm.config))
        logliks = score_queries(lm, queries, pad_token_id=conventions.pad_token_id, max_length=context_window(lm.config),
                                max_batch_size=BATCH, max_batch_tokens=16384)
        totals = [0.0] * len(docs)
        for n, value in zip(document_of, logliks):
            totals[n] += value
        return totals

    return run


def computation_floor(model: Path, texts):
    """The work neither side can skip: the output layer and its ``logsumexp`` at every predicted
    position (one per token of every document), in cache-sized chunks of one matrix: the same
    FLOPs on both sides, here at their most efficient. Its time over lm-eval's bounds ours /
    lm-eval from below (the transformer's own work comes on top)."""
    import torch

    from catwalk_steps.models.loading import ModelSpec, context_window
    from catwalk_steps.models.output_layer import chunk_logits, token_logprobs
    from catwalk_steps.models.weights import load_pretrained
    from catwalk_steps.kinds.documents import document_queries
    from catwalk_steps.tasks import DocumentInstance

    spec = ModelSpec.parse(f"rc::{model}")
    conventions, lm = spec.conventions(), load_pretrained(spec, torch.float32).eval()
    docs = [DocumentInstance(str(i), t, 1, 1) for i, t in enumerate(texts)]
    positions = sum(len(q.continuation) for q in document_queries(conventions, docs, context_window(lm.config))[0])
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(positions, lm.config.hidden_size, generator=generator)
    targets = torch.randint(lm.config.vocab_size, (positions,), generator=generator)
    head, step = lm.get_output_embeddings(), chunk_logits(hidden.device) // lm.config.vocab_size

    @torch.inference_mode()
    def run():
        return sum(token_logprobs(head(hidden[at:at + step]), targets[at:at + step]).sum()
                   for at in range(0, positions, step)).item()

    return run


def computation_lm_eval(model: Path, texts):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    harness = HFLM(pretrained=str(model), device="cpu", batch_size=BATCH, dtype="float32")
    requests = [Instance("loglikelihood_rolling", {}, (text,), i) for i, text in enumerate(texts)]
    return lambda: harness.loglikelihood_rolling(requests, disable_tqdm=True)


def end_to_end_ours(model: Path, data: Path, directory: Path):
    from catwalk_steps import CalculateMetricsStep, PredictStep
    from catwalk_steps.tasks import PerplexityTask

    task = PerplexityTask(data_files={"validation": str(data)})
    spec = f"rc::{model}"
    records = PredictStep(model=spec, task=task, max_batch_size=BATCH).run(model=spec, task=task,
                                                                            max_batch_size=BATCH)
    return CalculateMetricsStep(predictions=records).run(predictions=records)["word_perplexity"]


def end_to_end_lm_eval(model: Path, data: Path, directory: Path):
    import lm_eval
    from lm_eval.tasks import TaskManager

    (directory / "bench_documents.yaml").write_text("\n".join([
        "task: bench_documents", "dataset_path: json", "dataset_name: null",
        f"dataset_kwargs: {{data_files: {{validation: {data}}}}}", "output_type: loglikelihood_rolling",
        "validation_split: validation", 'doc_to_text: ""', 'doc_to_target: "{{text}}"', "metric_list:",
        "  - metric: word_perplexity", "  - metric: byte_perplexity", "  - metric: bits_per_byte",
    ]) + "\n")
    results = lm_eval.simple_evaluate(
        model="hf", model_args=f"pretrained={model},dtype=float32", tasks=["bench_documents"], batch_size=BATCH,
        device="cpu", task_manager=TaskManager(include_path=str(directory), include_defaults=False),
        bootstrap_iters=0,
    )
    return results["results"]["bench_documents"]["word_perplexity,none"]


def child(args) -> None:
    """In this (fresh) process: the computation comparison's rounds, or one end-to-end run of one
    side; prints seconds and numbers as JSON."""
    directory = Path(args.directory)
    if args.side == "computation":
        texts = [json.loads(line)["text"] for line in (directory / "documents.jsonl").read_text().splitlines()]
        sides = {"ours": computation_ours(directory / "model", texts),
                 "lm_eval": computation_lm_eval(directory / "model", texts),
                 "floor": computation_floor(directory / "model", texts)}
        values = {name: run() for name, run in sides.items()}  # warm up
        best = {name: float("inf") for name in sides}
        for _ in range(args.repeats):
            for name, run in sides.items():
                start = time.perf_counter()
                values[name] = run()
                best[name] = min(best[name], time.perf_counter() - start)
        print(json.dumps({name: {"seconds": best[name], "values": values[name]} for name in sides}))
        return
    side = end_to_end_ours if args.side == "end_to_end_ours" else end_to_end_lm_eval
    print(json.dumps({"values": side(directory / "model", directory / "documents.jsonl", directory)}))


def run_child(directory: Path, side: str, repeats: int):
    command = [sys.executable, __file__, "--child", side, "--directory", str(directory), "--repeats", str(repeats)]
    start = time.perf_counter()
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1]), time.perf_counter() - start


def compare(directory: Path, comparison: str, repeats: int):
    """``{side: {"seconds": best, "values": ...}}``; end to end, each run's whole process is timed."""
    if comparison == "computation":
        return run_child(directory, "computation", repeats)[0]
    results = {}
    for _ in range(repeats):
        for name in ("ours", "lm_eval"):
            result, seconds = run_child(directory, f"end_to_end_{name}", repeats)
            best = min(results.get(name, {}).get("seconds", float("inf")), seconds)
            results[name] = {"seconds": best, "values": result["values"]}
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child")
    parser.add_argument("--directory")
    args = parser.parse_args()
    if args.child:
        args.side = args.child
        child(args)
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from scoring import build_model

    count = 4 if args.quick else args.documents
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "model").mkdir()
        build_model(directory / "model", "tiny")
        texts = documents(count)
        (directory / "documents.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        from transformers import AutoTokenizer

        tokens = [len(AutoTokenizer.from_pretrained(directory / "model").encode(t)) for t in texts]
        print(f"{count} documents, {sum(tokens)} tokens ({min(tokens)}-{max(tokens)} per document), "
              f"batch size {BATCH}, 512-token windows")
        print("| comparison | ours (s) | lm-eval (s) | ours / lm-eval | largest relative difference |")
        print("|---|---|---|---|---|")
        for comparison in ("computation", "end_to_end"):
            results = compare(directory, comparison, args.repeats)
            ours, theirs = results["ours"], results["lm_eval"]
            a, b = ours["values"], theirs["values"]
            pairs = zip(a, b) if isinstance(a, list) else [(a, b)]
            difference = max(abs(x - y) / abs(y) for x, y in pairs)
            print(f"| {comparison.replace('_', ' ')} | {ours['seconds']:.2f} | {theirs['seconds']:.2f} | "
                  f"{ours['seconds'] / theirs['seconds']:.2f}x | {difference:.1e} |", flush=True)
            if "floor" in results:  # the unskippable work, timed alone: the ratio's bound
                floor = results["floor"]
                print(f"| floor: the output layer at every predicted position | {floor['seconds']:.2f} | "
                      f"{theirs['seconds']:.2f} | {floor['seconds'] / theirs['seconds']:.2f}x | - |", flush=True)


if __name__ == "__main__":
    main()
