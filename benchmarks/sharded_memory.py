"""Host memory of every worker and the size of the cache entry, for FSDP fine-tuning on 2 CPU
workers at a GPT-2-medium shape (24 layers, 1024 wide, the demo's 489-token vocabulary: 307M
parameters), a checkpoint after every step: this checkout against another (e.g. the commit
before sharded checkpoints), measured in one run.

    python benchmarks/sharded_memory.py [--before PATH_TO_OTHER_CHECKOUT] [--steps 3]

Every process of a run (the step's own and its workers) is sampled every 20 ms (resident set);
the workers are the processes that load the model. Targets (issue 18): every worker at most
0.9x the full training state (float32 weights + Adam's two moments), the largest at most 1.25x
the smallest; the entry at most 1.1x its weights file.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GiB = 2**30
SHAPE = dict(n_layer=24, n_embd=1024, n_head=16, n_positions=256)

RUN = """
import json, sys
from tango.workspaces import LocalWorkspace
from catwalk_steps import FinetuneStep, PiqaTask
task = PiqaTask(data_files={{"train": "{repo}/data/tiny/train.jsonl", "validation": "{repo}/data/tiny/validation.jsonl"}})
step = FinetuneStep(model="rc::{model}", tasks=[task], strategy="fsdp", device="cpu", device_count=2, batch_size=4,
                    micro_batch_size=2, train_limit={examples}, validation_limit=4, validate_every=1, train_epochs=1,
                    learning_rate=1e-5, step_name="medium"{options})
step.result(LocalWorkspace("{workspace}"))
"""


def build_model(directory: Path) -> int:
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(REPO / "data/tiny/model")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), **SHAPE))
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return sum(p.numel() for p in model.parameters())


def sample(root, peaks: dict, running: list) -> None:
    """Every process under ``root`` (a psutil.Process): its largest resident set so far."""
    import psutil

    while running:
        try:
            processes = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for process in processes:
            try:
                peaks[process.pid] = max(peaks.get(process.pid, 0), process.memory_info().rss)
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.02)


def measure(checkout: Path, model: Path, workspace: Path, steps: int, shared_context: bool = True) -> dict:
    import psutil

    options = "" if shared_context else ", shared_context=False"  # the default, also where the option is older
    script = RUN.format(repo=REPO, model=model, examples=4 * steps, workspace=workspace, options=options)
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", script], cwd=checkout, env=env)
    peaks, running = {}, [True]
    sampler = threading.Thread(target=sample, args=(psutil.Process(process.pid), peaks, running))
    sampler.start()
    process.wait()
    running.clear()
    sampler.join()
    if process.returncode:
        raise SystemExit(f"the run in {checkout} failed")
    parent = peaks.pop(process.pid)
    workers = sorted(peaks.values(), reverse=True)[:2]  # the step's 2 workers: its largest children
    (entry,) = workspace.glob("cache/FinetuneStep-*")
    files = {p.stat().st_ino: p.stat().st_size for p in entry.rglob("*") if p.is_file()}
    return {"parent": parent, "workers": workers, "entry": sum(files.values()),
            "weights": (entry / "model.safetensors").stat().st_size, "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="another checkout to measure in the same run")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--without-shared-context", action="store_true",
                        help="also measure each checkout with shared_context=false (see docs/benchmarks.md)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        parameters = build_model(Path(tmp) / "model")
        full_state = parameters * 4 * 3  # float32 weights + Adam's two moments
        print(f"GPT-2-medium shape, {parameters / 1e6:.0f}M parameters; full state (weights + Adam) "
              f"{full_state / GiB:.2f} GiB; FSDP on 2 CPU workers, a checkpoint after each of {args.steps} steps")
        print("| checkout | worker peaks GiB | step's process GiB | largest worker / full state "
              "| largest / smallest worker | entry / weights | s |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        runs = [("this", REPO, True)]
        runs += [("this, shared_context=false", REPO, False)] if args.without_shared_context else []
        runs += [("before", args.before, True)] if args.before else []
        runs += [("before, shared_context=false", args.before, False)] if args.before and args.without_shared_context else []
        for number, (name, checkout, shared_context) in enumerate(runs):
            result = measure(checkout, Path(tmp) / "model", Path(tmp) / f"ws-{number}", args.steps, shared_context)
            workers = result["workers"]
            print(f"| {name} | {', '.join(f'{p / GiB:.2f}' for p in workers)} | {result['parent'] / GiB:.2f} "
                  f"| {workers[0] / full_state:.2f}x | {workers[0] / workers[-1]:.2f}x "
                  f"| {result['entry'] / result['weights']:.2f}x | {result['seconds']:.0f} |")
            print(json.dumps(result), file=sys.stderr)


if __name__ == "__main__":
    main()
