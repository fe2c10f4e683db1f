"""End to end on a GSM8K 2-shot + WikiText check: `tango run` of catwalk::predict +
catwalk::calculate_metrics against lm-evaluation-harness's own CLI, on the same model, data and
prompts (issue 34, item 5).

    pip install -e ".[bench]"
    python benchmarks/end_to_end_generation.py             # about 5 minutes on 2 cores
    python benchmarks/end_to_end_generation.py --per_task  # each task alone too: about 10 minutes
    python benchmarks/end_to_end_generation.py --stops     # answers ending at different lengths
    python benchmarks/end_to_end_generation.py --quick     # a smoke run, about 1 minute

Data, generated here (no download) as jsonl files: GSM8K-shaped rows (``question``, ``answer``
with reasoning lines, ``<<a*b=c>>`` calculations and ``#### <number>``; real GSM8K's lengths:
questions of 25-80 words, answers of 2-6 steps), a train split for the demonstrations and a test
split to score (``--test`` rows), and WikiText-shaped documents (``page``: `` = Title = ``
headings, WikiText's `` @-@ `` / `` , `` tokenisation; ``--documents`` of 200-700 words).

lm-evaluation-harness: ``lm_eval --model hf --model_args pretrained=DIR,dtype=float32 --tasks
gsm8k_local,wikitext_local --include_path TASKS --batch_size 32 --device cpu --output_path OUT
--log_samples``, where TASKS holds two YAMLs that ``include:`` lm_eval's own ``gsm8k.yaml`` and
``wikitext.yaml`` (from the installed package) and override only the data (``dataset_path:
json``, ``data_files``, the splits), ``num_fewshot: 2`` for GSM8K (lm-eval applies a task YAML's
``num_fewshot`` when the CLI gives none) and, for GSM8K, ``generation_kwargs`` with
``max_gen_toks: --max_gen_toks`` (lm-eval's own stop strings; its default budget is 256).

Ours: ``tango run -i catwalk_steps`` of a config with ``catwalk::predict`` (split ``test``, batch
32, float32) + ``catwalk::calculate_metrics`` per task, with our ``lm_eval`` task type on the
same YAMLs (``{type: lm_eval, task: gsm8k_local, include_path: TASKS, num_shots: 2}``: the
prompts, stop strings, filters and scoring are lm-evaluation-harness's own); and, as a second row,
our native ``gsm8k`` (``data_files``, ``num_shots: 2``, ``max_new_tokens``) and ``wikitext``
(``data_files``) tasks, whose demonstrations are drawn by our own sampler (so their GSM8K prompts
differ from lm-eval's, and only the WikiText figure is compared).

Model: benchmarks/scoring.py's tiny-shape random GPT-2 (4 layers, 256 wide, real GPT-2 BPE)
with **1,024 positions** (``n_positions=1024``) so that 2-shot prompts (~300-500 tokens) plus 256
generated tokens fit without truncation. A random model rarely says ``Question:``, so each
generation runs its whole budget, on both sides alike.

Timing: each command in a fresh process, from start-up to metrics, with ``OMP_NUM_THREADS``
``--threads`` (default 1) on both sides: on a shared 2-core machine, two torch threads wait on
each other at every small operation of a decode step (350 ms a step at load 2.5, against 21 ms
with one thread, both sides alike). In each of ``--repeats`` rounds the sides take turns, and the
best of the rounds is reported (the load then weighs on both). Rows: both tasks in one command
(ours with the lm_eval task type, lm_eval's CLI, ours with the native tasks); with
``--per_task`` each task alone too (whether generation or perplexity dominates). Then the
outputs are compared: GSM8K's two exact-match metrics, every generation (lm-eval's
``--log_samples`` against our records) and WikiText's ``word_perplexity``.

A random model rarely says a stop string, so its answers run to ``max_gen_toks``: every
sequence of a batch ends at the same step, and the lever that makes our generation faster
(finished sequences leave the batch and the cache; lm-eval's batch runs until its last sequence
stops) has nothing to act on. ``--stops`` adds stop strings to the GSM8K YAML (both sides read
it) so that answers end at different lengths, as a trained model's do (:meth:`Setup.add_stops`).

Where the time goes: docs/benchmarks.md, "End to end: GSM8K 2-shot + WikiText against the
lm_eval CLI" (``python -m cProfile`` of each command).
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
BATCH = 32

NAMES = ("Natalia Weng Betty Julie James Mark Albert Ken Alexis Tina Randy Joy Carla Mike Sam "
         "Brandon Jasmine Tobias Kylie Ann Greg Janet").split()
ITEMS = ("clips apples pens books cookies marbles stickers cupcakes tickets shirts eggs pages "
         "flowers candies toys boxes dollars minutes miles cards").split()
FILLER = ("the of and to in for on with at from by as each every more than half twice many much "
          "total after before during week day month year school store friends family class "
          "there was were has had buys sells gives makes reads pays earns spends saves").split()
WIKI_WORDS = ("the of and in to a was is for on as by with he that at from his it an were are which "
              "this be also first had after its new their two or one been has but who they season "
              "album song game war city station film team league british american century church "
              "river island army series north school during released world later time years").split()

GSM8K_TASK = """task: gsm8k_local
include: {source}
dataset_path: json
dataset_name: null
dataset_kwargs:
  data_files:
    train: {train}
    test: {test}
num_fewshot: 2
generation_kwargs:
  until:
    - "Question:"
    - "</s>"
    - "<|im_end|>"{extra_stops}
  do_sample: false
  temperature: 0.0
  max_gen_toks: {max_gen_toks}
"""

WIKITEXT_TASK = """task: wikitext_local
include: {source}
dataset_path: json
dataset_name: null
dataset_kwargs:
  data_files:
    test: {test}
training_split: null
validation_split: null
test_split: test
"""


def gsm8k_rows(count: int, seed: int):
    """GSM8K-shaped rows: a word problem of 25-80 words with numbers, and an answer of 2-6
    reasoning lines, each with a ``<<a op b=c>>`` calculation, ending ``#### <number>``."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        words = []
        for _ in range(rng.randint(25, 80)):
            r = rng.random()
            words.append(str(rng.randint(2, 99)) if r < 0.08 else rng.choice(ITEMS) if r < 0.15 else rng.choice(FILLER))
        question = (f"{name} has {rng.randint(2, 99)} {item}, " + " ".join(words)
                    + f". How many {item} does {name} have?")
        value, lines = rng.randint(2, 99), []
        for _ in range(rng.randint(2, 6)):
            operand, op = rng.randint(2, 20), rng.choice("+-*")
            result = {"+": value + operand, "-": value - operand, "*": value * operand}[op]
            filler = " ".join(rng.choices(FILLER, k=rng.randint(4, 14)))
            lines.append(f"{name} {filler} {value} {op} {operand} = <<{value}{op}{operand}={result}>>{result} {item}.")
            value = result
        rows.append({"question": question, "answer": "\n".join(lines) + f"\n#### {value}"})
    return rows


def wikitext_pages(count: int, seed: int):
    """WikiText-shaped pages: `` = Title = `` and `` = = Section = = `` headings, paragraphs with
    WikiText's tokenisation (`` @-@ ``, `` @,@ ``, `` , ``, `` . ``, ``( ... )``), 200-700 words."""
    rng = random.Random(seed)
    pages = []
    for _ in range(count):
        title = " ".join(w.capitalize() for w in rng.choices(WIKI_WORDS, k=rng.randint(1, 3)))
        parts, words = [f" = {title} = \n", " \n"], rng.randint(200, 700)
        while words > 0:
            if rng.random() < 0.2:
                parts.append(f" = = {' '.join(rng.choices(WIKI_WORDS, k=2)).capitalize()} = = \n")
            paragraph = []
            for _ in range(min(words, rng.randint(40, 140))):
                r = rng.random()
                if r < 0.04:  # (the list is drawn only here: the seeded sequence of draws is the data)
                    paragraph.append(rng.choice([f"{rng.randint(1, 99)} @-@ {rng.choice(WIKI_WORDS)}",
                                                 f"{rng.randint(1, 9)} @,@ {rng.randint(100, 999)}", "(", ")", '"']))
                else:
                    paragraph.append(rng.choice([",", "."]) if r < 0.14 else rng.choice(WIKI_WORDS))
            words -= len(paragraph)
            parts.append(" " + " ".join(paragraph) + " . \n")
        pages.append({"page": "".join(parts)})
    return pages


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def build_model_1024(directory: Path) -> Path:
    """benchmarks/scoring.py's tiny random GPT-2 (4 x 256, the real GPT-2 BPE) with 1,024 positions."""
    sys.path.insert(0, str(Path(__file__).parent))
    import scoring

    return scoring.build_model(directory, "tiny-1024")


def timed(command, threads: int = 0):
    """Runs ``command`` in a fresh process; its wall time in seconds and the finished process.
    ``threads``: torch's intra-op threads in it (``OMP_NUM_THREADS``), 0 to leave its default."""
    env = {**os.environ, **OFFLINE, "PYTHONPATH": str(REPO)}
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    start = time.perf_counter()
    done = subprocess.run([str(c) for c in command], cwd=REPO, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(" ".join(map(str, command)) + "\n" + done.stdout[-2000:] + done.stderr[-3000:])
    return time.perf_counter() - start, done


class Setup:
    """The model, data, task YAMLs and the commands of one benchmark run, under ``root``."""

    def __init__(self, root: Path, test: int, documents: int, max_gen_toks: int):
        self.root, self.max_gen_toks, self.stops = root, max_gen_toks, []
        (root / "model").mkdir()
        self.model = build_model_1024(root / "model")
        self.train = write_jsonl(root / "gsm8k_train.jsonl", gsm8k_rows(200, seed=0))
        self.test = write_jsonl(root / "gsm8k_test.jsonl", gsm8k_rows(test, seed=1))
        self.pages = write_jsonl(root / "wikitext_test.jsonl", wikitext_pages(documents, seed=2))
        self.tasks = root / "lm_eval_tasks"
        self.tasks.mkdir()
        self.write_tasks()
        self.count = 0

    def write_tasks(self) -> None:
        import lm_eval

        harness = Path(lm_eval.__file__).parent / "tasks"
        extra = "".join(f"\n    - {json.dumps(stop)}" for stop in self.stops)  # JSON strings are YAML strings
        (self.tasks / "gsm8k_local.yaml").write_text(GSM8K_TASK.format(
            source=harness / "gsm8k/gsm8k.yaml", train=self.train, test=self.test, max_gen_toks=self.max_gen_toks,
            extra_stops=extra))
        (self.tasks / "wikitext_local.yaml").write_text(WIKITEXT_TASK.format(
            source=harness / "wikitext/wikitext.yaml", test=self.pages))

    def add_stops(self, seed: int = 3) -> None:
        """Stop strings that end the random model's answers at different lengths, as a trained
        model's answers end at ``Question:``: one uncut greedy generation of every test prompt
        (lm-eval's own 2-shot prompts, through our lm_eval task type), then for each, the first
        change of word (``"w1 w2"``, w1 != w2) at or after a seeded point in its second and
        third quarters. Added to the GSM8K YAML's ``until`` (both sides read it); a phrase may
        also end another answer earlier, and an answer with no change after its point runs to
        ``max_gen_toks``."""
        from catwalk_steps.models.generation import GenerationRequest, generate_greedy
        from catwalk_steps.models.loading import ModelSpec
        from catwalk_steps.models.weights import load_pretrained
        from catwalk_steps.tasks.lm_eval_bridge import LmEvalTask

        task = LmEvalTask(task="gsm8k_local", include_path=str(self.tasks), num_shots=2)
        spec = ModelSpec.parse(f"rc::{self.model}")
        conventions, lm = spec.conventions(), load_pretrained(spec).eval()
        requests = [GenerationRequest(conventions.prompt(i.prompt), (), self.max_gen_toks)
                    for i in task.instances("test")]
        uncut = generate_greedy(lm, conventions, requests, pad_token_id=conventions.pad_token_id, max_length=1024,
                                max_batch_size=BATCH)
        rng, stops = random.Random(seed), []
        for generation in uncut:
            words = generation["text"].split()
            start = rng.randint(len(words) // 4, max(len(words) // 4, 3 * len(words) // 4))
            for k in range(start, len(words) - 1):
                if words[k] != words[k + 1]:
                    stops.append(f"{words[k]} {words[k + 1]}")
                    break
        self.stops = sorted(set(stops))
        self.write_tasks()

    def task(self, name: str, native: bool):
        if not native:
            return {"type": "lm_eval", "task": f"{name}_local", "include_path": str(self.tasks),
                    **({"num_shots": 2} if name == "gsm8k" else {})}
        if name == "gsm8k":
            return {"type": "gsm8k", "data_files": {"train": str(self.train), "test": str(self.test)},
                    "num_shots": 2, "max_new_tokens": self.max_gen_toks}
        return {"type": "wikitext", "data_files": {"test": str(self.pages)}}

    def ours(self, names, native: bool = False):
        """A fresh workspace and ``tango run`` command of predict + calculate_metrics per task."""
        steps = {}
        for name in names:
            steps[f"predict_{name}"] = {"type": "catwalk::predict", "model": f"rc::{self.model}",
                                        "task": self.task(name, native), "split": "test", "max_batch_size": BATCH}
            steps[f"metrics_{name}"] = {"type": "catwalk::calculate_metrics",
                                        "predictions": {"type": "ref", "ref": f"predict_{name}"}}
        self.count += 1
        config = self.root / f"config{self.count}.json"
        config.write_text(json.dumps({"steps": steps}))
        workspace = self.root / f"workspace{self.count}"
        return [BIN / "tango", "run", config, "-w", workspace, "-i", "catwalk_steps", "--name", "run"], workspace

    def lm_eval(self, names):
        self.count += 1
        out = self.root / f"lm_eval_out{self.count}"
        return [BIN / "lm_eval", "--model", "hf", "--model_args", f"pretrained={self.model},dtype=float32",
                "--tasks", ",".join(f"{n}_local" for n in names), "--include_path", self.tasks,
                "--batch_size", str(BATCH), "--device", "cpu", "--output_path", out, "--log_samples"], out


def read_ours(workspace: Path, names):
    from tango.workspaces import LocalWorkspace

    import catwalk_steps  # noqa: F401 (registers the formats the cache's metadata names)

    ws = LocalWorkspace(workspace)
    return {name: {"metrics": ws.step_result_for_run("run", f"metrics_{name}"),
                   "records": ws.step_result_for_run("run", f"predict_{name}")} for name in names}


def read_lm_eval(out: Path, names):
    (found,) = out.rglob("results_*.json")
    results = json.loads(found.read_text())["results"]
    read = {}
    for name in names:
        (samples,) = out.rglob(f"samples_{name}_local_*.jsonl")
        rows = {}  # one line per document and filter (gsm8k: strict-match, flexible-extract), the same resps
        for line in samples.read_text().splitlines():
            row = json.loads(line)
            rows.setdefault(row["doc_id"], row)
        rows = [rows[n] for n in sorted(rows)]
        read[name] = {"metrics": results[f"{name}_local"], "samples": rows}
    return read


def compare_outputs(ours, theirs, native=False):
    """Lines saying whether the two sides' numbers (and generations) are equal."""
    lines = []
    if "gsm8k" in ours and not native:
        a, b = ours["gsm8k"], theirs["gsm8k"]
        generations = [r["generation"] for r in sorted(a["records"], key=lambda r: int(r["id"].rsplit("/", 1)[1]))]
        harness = [s["resps"][0][0] for s in b["samples"]]
        same = sum(x == y for x, y in zip(generations, harness))
        for f in ("strict-match", "flexible-extract"):
            lines.append(f"gsm8k exact_match,{f}: ours {a['metrics'][f'exact_match/{f}']:.4f}, "
                         f"lm_eval {b['metrics'][f'exact_match,{f}']:.4f}")
        lines.append(f"gsm8k generations identical as strings: {same} of {len(harness)} "
                     f"(ours {len(generations)})")
    if "wikitext" in ours:
        a = ours["wikitext"]["metrics"]["word_perplexity"]
        b = theirs["wikitext"]["metrics"]["word_perplexity,none"]
        lines.append(f"wikitext word_perplexity: ours {a:.6f}, lm_eval {b:.6f} "
                     f"(relative difference {abs(a - b) / b:.1e})")
    return lines


def load():
    return os.getloadavg()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--test", type=int, default=64, help="GSM8K-shaped test rows scored")
    parser.add_argument("--documents", type=int, default=16, help="WikiText-shaped documents")
    parser.add_argument("--max_gen_toks", type=int, default=256, help="GSM8K's budget on both sides (lm-eval's: 256)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1,
                        help="OMP_NUM_THREADS for both sides (default 1: on a shared 2-core machine two threads wait "
                             "on each other at every small decode-step operation); 0 leaves torch's default")
    parser.add_argument("--quick", action="store_true", help="16 rows, 4 documents, 32 tokens, 1 round")
    parser.add_argument("--per_task", action="store_true", help="also each task alone (doubles the run time)")
    parser.add_argument("--no_native", action="store_true", help="skip the native-task row")
    parser.add_argument("--stops", action="store_true",
                        help="answers end at different lengths, as a trained model's do (Setup.add_stops); "
                             "no native-task row")
    args = parser.parse_args()
    if args.quick:
        args.test, args.documents, args.max_gen_toks, args.repeats = 16, 4, 32, 1
    rows = [("gsm8k", "wikitext")] + ([("gsm8k",), ("wikitext",)] if args.per_task else [])
    with tempfile.TemporaryDirectory() as tmp:
        setup = Setup(Path(tmp), args.test, args.documents, args.max_gen_toks)
        if args.stops:
            import torch

            torch.set_num_threads(args.threads or torch.get_num_threads())
            setup.add_stops()
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(setup.model)
        page_tokens = [len(tokenizer.encode(json.loads(line)["page"])) for line in setup.pages.read_text().splitlines()]
        print(f"GSM8K-shaped: {args.test} test rows, 2-shot from 200 train rows, max_gen_toks {args.max_gen_toks}; "
              f"WikiText-shaped: {args.documents} pages, {sum(page_tokens)} tokens "
              f"({min(page_tokens)}-{max(page_tokens)}); "
              f"random GPT-2 4 x 256, 1,024 positions; batch {BATCH}, float32, {os.cpu_count()} cores, "
              f"OMP_NUM_THREADS={args.threads or 'unset'}; "
              f"best of {args.repeats}", flush=True)
        best, loads, outputs = {}, [], {}
        for _ in range(args.repeats):
            for names in rows:
                sides = [("ours (lm_eval task type)", False), ("lm_eval CLI", None)]
                if names == rows[0] and not args.no_native and not args.stops:  # its prompts are not lm-eval's:
                    # the stop strings found on lm-eval's would not end its answers alike
                    sides.append(("ours (native tasks)", True))
                for side, native in sides:
                    if native is None:
                        command, out = setup.lm_eval(names)
                    else:
                        command, out = setup.ours(names, native)
                    loads.append(load())
                    seconds, _ = timed(command, args.threads)
                    key = (names, side)
                    if seconds < best.get(key, float("inf")):
                        best[key] = seconds
                    if key not in outputs:
                        outputs[key] = read_lm_eval(out, names) if native is None else read_ours(out, names)
                    print(f"  {'+'.join(names)}, {side}: {seconds:.1f} s (load {loads[-1]:.2f})", flush=True)
        loads.append(load())

        print(f"\nWall time from start-up to metrics, best of {args.repeats} (load average "
              f"{min(loads):.2f}-{max(loads):.2f}):\n")
        print("| tasks | command | seconds | ours / lm_eval CLI |")
        print("|---|---|---|---|")
        for names in rows:
            reference = best[(names, "lm_eval CLI")]
            for (row, side), seconds in best.items():
                if row == names:
                    print(f"| {' + '.join(names)} | {side} | {seconds:.1f} | {seconds / reference:.2f}x |")
        print()
        generations = [r["resps"][0][0] for r in outputs[(rows[0], "lm_eval CLI")]["gsm8k"]["samples"]]
        lengths = [len(tokenizer.encode(text)) for text in generations]
        print(f"gsm8k answers (lm_eval's, re-encoded): {min(lengths)}-{max(lengths)} tokens, "
              f"mean {sum(lengths) / len(lengths):.0f}, "
              f"{sum(n >= args.max_gen_toks for n in lengths)} of {len(lengths)} ran to max_gen_toks"
              + (f"; {len(setup.stops)} stop strings added" if args.stops else ""))
        for names in rows:
            theirs = outputs[(names, "lm_eval CLI")]
            for line in compare_outputs(outputs[(names, "ours (lm_eval task type)")], theirs):
                print(f"{' + '.join(names)}, lm_eval task type: {line}")
            if (names, "ours (native tasks)") in outputs:
                ours = outputs[(names, "ours (native tasks)")]
                for line in compare_outputs(ours, theirs, native=True):
                    print(f"{' + '.join(names)}, native tasks: {line}")
                m = ours["gsm8k"]["metrics"]
                print(f"{' + '.join(names)}, native tasks: gsm8k exact_match strict / flexible "
                      f"{m['exact_match/strict-match']:.4f} / {m['exact_match/flexible-extract']:.4f} "
                      "(own demonstrations: not lm-eval's prompts)")


if __name__ == "__main__":
    main()
