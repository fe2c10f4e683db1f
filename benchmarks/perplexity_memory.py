"""Peak host memory of perplexity scoring on a model with a 2,048-token window: this checkout,
and optionally another (e.g. the commit before shared-context groups were split by the token
budget), on the same model and documents, each in a fresh process.

    python benchmarks/perplexity_memory.py [--before PATH_TO_OTHER_CHECKOUT] [--documents 32]

Model: a randomly initialised GPT-2 shape (4 layers, 256 wide, 4 heads, ``n_positions=2048``)
with the demo's tokenizer (489 tokens), float32. Documents: ``--documents`` texts of the demo's
words, each a little over 2,048 tokens, so each is a full first window (all of them sharing the
one-token context, the prefix token) and a short second one. Scored as ``catwalk::predict``
scores a perplexity task (``document_queries`` + ``score_queries``, ``max_batch_size=32``,
``max_batch_tokens=16384``, its defaults).

Per checkout: the largest forward pass (rows x padded length, recorded by a hook on the
transformer), the peak resident set over the resident set before scoring (``ru_maxrss`` less
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
from catwalk_steps.models.scoring import score_queries
from catwalk_steps.models.weights import load_pretrained
from catwalk_steps.prediction.perplexity_records import document_queries
from catwalk_steps.tasks import DocumentInstance

directory, batch, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spec = ModelSpec.parse("rc::" + directory + "/model")
conventions, lm = spec.conventions(), load_pretrained(spec, torch.float32).eval()
texts = [json.loads(line)["text"] for line in open(directory + "/documents.jsonl")]
window = context_window(lm.config)
queries, _ = document_queries(conventions, [DocumentInstance(str(i), t, 1, 1) for i, t in enumerate(texts)], window)
largest = []
lm.base_model.register_forward_pre_hook(
    lambda module, args, kwargs: largest.append((args[0] if args else kwargs["input_ids"]).numel()), with_kwargs=True)
before = int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS:")).split()[1]) * 1024
start = time.perf_counter()
logliks = score_queries(lm, queries, pad_token_id=conventions.pad_token_id, max_length=window, max_batch_size=batch,
                        max_batch_tokens=budget)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"largest": max(largest), "peak": peak - before, "seconds": seconds, "loglik": sum(logliks),
                  "windows": len(queries)}))
"""


def build(directory: Path, documents: int) -> None:
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
        while len(tokenizer.encode(text)) <= SHAPE["n_positions"] + 16:
            text += " ".join(rng.choices(words, k=200)) + " "
        texts.append(text.strip())
    (directory / "documents.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))


def measure(checkout: Path, directory: Path) -> dict:
    environment = {**os.environ, "PYTHONPATH": str(checkout)}
    command = [sys.executable, "-c", CHILD, str(directory), str(BATCH), str(BUDGET)]
    # Run from the data's directory: ``-c`` puts the working directory first on the path.
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=environment, cwd=directory).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, help="another checkout to measure the same way")
    parser.add_argument("--documents", type=int, default=32)
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
        build(directory, args.documents)
        print(f"{args.documents} documents of a little over {SHAPE['n_positions']} tokens; "
              f"max_batch_size={BATCH}, max_batch_tokens={BUDGET}")
        print("| checkout | windows | largest forward pass (tokens) | peak RSS over loaded (MiB) | seconds | "
              "summed loglik | budget's estimate (MiB) |")
        print("|---|---|---|---|---|---|---|")
        for name, checkout in checkouts.items():
            r = measure(checkout, directory)
            print(f"| {name} | {r['windows']} | {r['largest']} | {r['peak'] / MiB:.0f} | {r['seconds']:.1f} | "
                  f"{r['loglik']:.10g} | {estimate / MiB:.0f} |", flush=True)


if __name__ == "__main__":
    main()
