"""Peak host memory of scoring (perplexity, or long multiple-choice contexts) on a model with a
2,048-token window: this checkout, and optionally another (e.g. the commit before shared-context
groups were split by the token budget), on the same model and documents, each in a fresh process.

    python benchmarks/scoring_memory.py [--before PATH_TO_OTHER_CHECKOUT] [--documents 32]
    python benchmarks/scoring_memory.py --choices 4 [--before ...]   # long multiple-choice contexts

Model: a randomly initialised GPT-2 shape (4 layers, 256 wide, 4 heads, ``n_positions=2048``)
with the demo's tokenizer (489 tokens), float32. Documents: ``--documents`` texts of the demo's
words, each a little over 2,048 tokens, so each is a full first window (all of them sharing the
one-token context, the prefix token) and a short second one. Scored as ``catwalk::predict``
scores a perplexity task (``document_queries`` + ``score_queries``, ``max_batch_size=32``,
``max_batch_tokens=16384``, its defaults).

``--choices N``: instead, each document's first 2,000 tokens are the shared context of ``N``
choices of 16 tokens (a multiple-choice instance with a long context, as a reading-comprehension
task's): each choice holds a copy of its context's key/value cache while it is scored.

Per checkout: the largest forward pass (rows x padded positions attended, the key/value cache
included, recorded by a hook on the transformer), the peak resident set over the resident set before scoring (``ru_maxrss`` less
``VmRSS`` after loading), the time, and the documents' summed log-likelihood (equal up to float
rounding). The last column is the budget's estimate (:func:`catwalk_steps.models.batch_budget.bytes_per_token`
x ``max_batch_tokens``), the bound ``max_batch_tokens: "auto"`` plans with.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHAPE = dict(n_layer=4, n_embd=256, n_head=4, n_positions=2048)
BATCH, BUDGET = 32, 16384
MiB = 2**20

CHILD = """
import json, resource, sys, time
import torch
from catwalk_steps.models.loading import ModelSpec, context_window
from catwalk_steps.models.scoring import Query, score_queries
from catwalk_steps.models.weights import load_pretrained
from catwalk_steps.kinds.documents import document_queries
from catwalk_steps.tasks import DocumentInstance

directory, batch, budget, choices = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
spec = ModelSpec.parse("rc::" + directory + "/model")
conventions, lm = spec.conventions(), load_pretrained(spec, torch.float32).eval()
texts = [json.loads(line)["text"] for line in open(directory + "/documents.jsonl")]
window = context_window(lm.config)
if choices:
    encoded = [conventions.plain(t) for t in texts]
    queries = [Query(tuple(e[:2000]), tuple(e[2000 + 16 * c: 2016 + 16 * c])) for e in encoded for c in range(choices)]
else:
    queries, _ = document_queries(conventions, [DocumentInstance(str(i), t, 1, 1) for i, t in enumerate(texts)], window)
largest = []
lm.base_model.register_forward_pre_hook(
    lambda module, args, kwargs: largest.append(
        (kwargs.get("attention_mask") if kwargs.get("attention_mask") is not None else
         args[0] if args else kwargs["input_ids"]).numel()),
    with_kwargs=True)
before = int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS:")).split()[1]) * 1024
start = time.perf_counter()
logliks = score_queries(lm, queries, pad_token_id=conventions.pad_token_id, max_length=window, max_batch_size=batch,
                        max_batch_tokens=budget)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"largest": max(largest), "peak": peak - before, "seconds": seconds, "loglik": sum(logliks),
                  "queries": len(queries)}))
"""


def build(directory: Path, documents: int, choices: int) -> None:
    """The model and the documents, in ``directory``."""
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(REPO / "data/tiny/model")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), **SHAPE)).save_pretrained(directory / "model")
    tokenizer.save_pretrained(directory / "model")
    rows = [json.loads(line) for line in (REPO / "data/tiny/train.jsonl").read_text().splitlines()]
    words = sorted({w for r in rows for w in (r["goal"] + " " + r["sol1"]).split()})
    rng = random.Random(0)
    texts = []
    for _ in range(documents):
        text = ""
        while len(tokenizer.encode(text)) <= SHAPE["n_positions"] + 16 * max(1, choices):
            text += " ".join(rng.choices(words, k=200)) + " "
        texts.append(text.strip())
    (directory / "documents.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))


def measure(checkout: Path, directory: Path, choices: int) -> dict:
    environment = {**os.environ, "PYTHONPATH": str(checkout)}
    command = [sys.executable, "-c", CHILD, str(directory), str(BATCH), str(BUDGET), str(choices)]
    # Run from the data's directory: ``-c`` puts the working directory first on the path.
    done = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=directory)
    if done.returncode:
        raise SystemExit(f"{checkout}: {done.stderr[-3000:]}")
    out = done.stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, help="another checkout to measure the same way")
    parser.add_argument("--documents", type=int, default=32)
    parser.add_argument("--choices", type=int, default=0, help="score N choices after a 2,000-token context")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    import torch
    from transformers import GPT2Config

    from catwalk_steps.models.batch_budget import bytes_per_token

    estimate = BUDGET * bytes_per_token(GPT2Config(vocab_size=489, **SHAPE), torch.float32, SHAPE["n_positions"],
                                        chunked_logits=True)
    checkouts = {"this checkout": REPO, **({f"{args.before}": args.before} if args.before else {})}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        build(directory, args.documents, args.choices)
        scored = (f"{args.documents} contexts of 2,000 tokens, {args.choices} choices of 16 tokens each" if args.choices
                  else f"{args.documents} documents of a little over {SHAPE['n_positions']} tokens")
        print(f"{scored}; max_batch_size={BATCH}, max_batch_tokens={BUDGET}")
        print("| checkout | queries | largest forward pass (positions held) | peak RSS over loaded (MiB) | seconds | "
              "summed loglik | budget's estimate (MiB) |")
        print("|---|---|---|---|---|---|---|")
        for name, checkout in checkouts.items():
            r = measure(checkout, directory, args.choices)
            print(f"| {name} | {r['queries']} | {r['largest']} | {r['peak'] / MiB:.0f} | {r['seconds']:.1f} | "
                  f"{r['loglik']:.10g} | {estimate / MiB:.0f} |", flush=True)


if __name__ == "__main__":
    main()
