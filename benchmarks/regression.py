"""Is anything slower than it was? This checkout's code against an earlier one's, on the CPU
benchmarks' own workloads, side by side in one run on one machine.

    pip install -e ".[bench]"
    git worktree add /tmp/before <commit>
    python benchmarks/regression.py --before /tmp/before    # about 12 minutes on 2 cores
    python benchmarks/regression.py --before /tmp/before --quick   # a smoke run, about 3 minutes

Each workload runs in a fresh process with ``PYTHONPATH`` set to one checkout or the other (the
driver and the workloads' code are this checkout's benchmarks; only ``catwalk_steps`` differs),
on the same model files and data, the sides taking turns in each of ``--repeats`` rounds; the best
of the rounds is reported, so load from other jobs weighs on both sides alike. Workloads:

- **scoring**: ``benchmarks/scoring.py``'s three data sets (PIQA-like, PIQA lengths,
  HellaSwag-like), ``score_queries`` at its ``OUR_BATCHING``, its tiny GPT-2 with the real BPE;
- **perplexity**: ``benchmarks/perplexity.py``'s computation (16 documents, ``document_queries``
  + ``score_queries``);
- **generation**: ``benchmarks/generation.py``'s default (128 prompts, 64 tokens, a stop word
  each) and ``--long`` (32 prompts of 2-shot length, 256 tokens, no stops) workloads of
  ``generate_greedy``;
- **training**: ``FinetuneStep``'s loop on ``benchmarks/scoring.py``'s two training tasks
  (PIQA-like; 4-choice with long contexts), the loop alone timed (``LoopTimer``).

Besides the times, each row says whether the two checkouts computed the same thing: the largest
difference of the log-likelihoods, the number of generations differing, and the final training
loss. A checkout whose code lacks a workload's functions fails that row, with its error.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
COUNT = {"scoring": 100, "perplexity": 16, "generation": 128, "training": 128}


def scoring_workload(directory: Path, data: str, count: int):
    import torch

    from catwalk_steps.models.loading import ModelSpec
    from catwalk_steps.models.weights import load_pretrained
    from scoring import datasets, ours

    spec = ModelSpec(str(directory / "gpt2"))
    tokenizer, lm = spec.load_tokenizer(), load_pretrained(spec, torch.float32).eval()
    pairs = [(c, x) for c, xs in datasets(count)[data] for x in xs]
    ours(lm, tokenizer, pairs[:8])  # warm up
    return lambda: ours(lm, tokenizer, pairs)


def perplexity_workload(directory: Path, count: int):
    from perplexity import computation_ours, documents

    run = computation_ours(directory / "gpt2", documents(count))
    run()  # warm up
    return run


def generation_workload(directory: Path, long: bool, count: int):
    from generation import ours, requests, window

    model = directory / ("gpt2-1024" if long else "gpt2")
    settings = generation_settings(long, count)
    stops = json.loads((model / "stops.json").read_text())
    run = ours(model, requests(settings.count, long), stops, settings.max_gen_toks, max_length=window(settings))
    run(8)  # warm up
    return lambda: run()[0]


def training_workload(directory: Path, task_name: str, count: int):
    from tango.common.lazy import Lazy
    from tango.workspaces import LocalWorkspace

    from catwalk_steps import FinetuneStep
    from scoring import LoopTimer, training_tasks

    task = training_tasks(directory, count)[task_name]

    def run():
        with tempfile.TemporaryDirectory() as workspace:
            step = FinetuneStep(model=f"rc::{directory / 'gpt2'}", tasks=[task], batch_size=16, train_epochs=1,
                                learning_rate=1e-4, validation_split=None, train_limit=count, step_name="finetune",
                                callbacks=[Lazy(LoopTimer.make())])
            weights = step.result(LocalWorkspace(workspace)).state_dict
            return [float(sum(tensor.double().sum() for tensor in weights.values()))]  # equal code, equal weights

    return run


#: Each workload by name: its kind (the kind's ``COUNT`` sizes it) and what builds its run.
WORKLOADS = {
    "scoring: 2-choice (PIQA-like)": ("scoring", lambda d, n: scoring_workload(d, "2-choice (PIQA-like)", n)),
    "scoring: 2-choice (PIQA lengths)": ("scoring", lambda d, n: scoring_workload(d, "2-choice (PIQA lengths)", n)),
    "scoring: 4-choice (HellaSwag-like)": ("scoring",
                                           lambda d, n: scoring_workload(d, "4-choice (HellaSwag-like)", n)),
    "perplexity: documents": ("perplexity", perplexity_workload),
    "generation: 64 tokens, a stop word each": ("generation", lambda d, n: generation_workload(d, False, n)),
    "generation --long: 256 tokens, no stops": ("generation", lambda d, n: generation_workload(d, True, n)),
    "training: 2-choice (PIQA-like)": ("training", lambda d, n: training_workload(d, "2-choice (PIQA-like)", n)),
    "training: 4-choice, long contexts": (
        "training", lambda d, n: training_workload(d, "4-choice (HellaSwag-like, long contexts)", n)),
}


def generation_settings(long: bool, count: int) -> argparse.Namespace:
    """``benchmarks/generation.py``'s settings for its default run (``count`` prompts, 64 tokens)
    or its ``--long`` one (32 prompts, 256 tokens, a 1,024-position model)."""
    return argparse.Namespace(count=32 if long else count, long=long, max_gen_toks=256 if long else 64,
                              device="cpu", shape="tiny-1024" if long else "tiny")


def child(workload: str, directory: Path, count: int) -> None:
    """In this fresh process: one timed run of one workload, after its warm-up; prints JSON."""
    # pip's editable install maps catwalk_steps' modules to its checkout by name, whatever
    # sys.path says: the checkout on PYTHONPATH must be the only one imported from.
    sys.meta_path[:] = [finder for finder in sys.meta_path
                        if not getattr(finder, "__module__", "").startswith("__editable__")]
    from tango.common.logging import initialize_logging

    initialize_logging(log_level="warning")
    kind, build = WORKLOADS[workload]
    run = build(directory, count)
    if kind == "training":
        from scoring import LoopTimer

        values = run()
        seconds = LoopTimer.seconds
    else:
        start = time.perf_counter()
        values = run()
        seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "values": values}))


def measure(workload: str, checkout: Path, directory: Path, count: int) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), str(HERE)])}
    command = [sys.executable, __file__, "--child", workload, "--directory", str(directory), "--count", str(count)]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def prepare(directory: Path, quick: bool) -> None:
    """The models (the tiny GPT-2 at 512 and 1,024 positions) and the generation workloads' stop
    words (``benchmarks/generation.py``'s), computed once with this checkout's code and read by
    both sides."""
    from generation import stop_words
    from scoring import build_model

    for name, shape, long in (("gpt2", "tiny", False), ("gpt2-1024", "tiny-1024", True)):
        (directory / name).mkdir()
        build_model(directory / name, shape)
        stop_words(directory / name, generation_settings(long, COUNT["generation"] // (4 if quick else 1)))


def difference(a, b) -> str:
    """How far apart two checkouts' results are: numbers by their largest difference, strings by
    how many differ."""
    if not a or not b or len(a) != len(b):
        return "-"
    if isinstance(a[0], str):
        return f"{sum(x != y for x, y in zip(a, b))} of {len(a)} differ"
    return f"{max(abs(x - y) for x, y in zip(a, b)):.1e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="the earlier checkout (a worktree of the commit to compare)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; each side's best is reported")
    parser.add_argument("--quick", action="store_true", help="a quarter of the data, one round: a smoke run")
    parser.add_argument("--only", help="run the workloads whose name contains this")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--directory", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.directory, args.count)
        return
    if args.before is None or not (args.before / "catwalk_steps").is_dir():
        parser.error("--before must name a checkout holding catwalk_steps/ (git worktree add DIR COMMIT)")
    sides = {"this": HERE.parent, "before": args.before.resolve()}
    repeats = 1 if args.quick else args.repeats
    workloads = [w for w in WORKLOADS if args.only is None or args.only in w]
    import torch

    print(f"{sides['this']} against {sides['before']}; torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"best of {repeats}, load average at start {os.getloadavg()[0]:.2f}")
    print("| workload | this (s) | before (s) | this / before | same results? |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        prepare(directory, args.quick)
        for workload in workloads:
            count = COUNT[WORKLOADS[workload][0]] // (4 if args.quick else 1)
            best = {side: {"seconds": float("inf")} for side in sides}
            for round_ in range(repeats):
                order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
                for side in order:
                    found = measure(workload, sides[side], directory, count)
                    if "error" in found or found["seconds"] < best[side]["seconds"]:
                        best[side] = found
            if any("error" in best[side] for side in sides):
                errors = "; ".join(f"{side}: {best[side]['error']}" for side in sides if "error" in best[side])
                print(f"| {workload} | - | - | - | failed: {errors} |", flush=True)
                continue
            this, before = best["this"], best["before"]
            print(f"| {workload} | {this['seconds']:.2f} | {before['seconds']:.2f} | "
                  f"{this['seconds'] / before['seconds']:.2f}x | {difference(this['values'], before['values'])} |",
                  flush=True)


if __name__ == "__main__":
    main()
