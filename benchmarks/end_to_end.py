"""End to end on PIQA-shaped data: `tango run` of catwalk::predict + catwalk::calculate_metrics
against lm-evaluation-harness's own CLI, on the same model and the same data.

    pip install -e ".[bench]"
    python benchmarks/end_to_end.py                 # about 5 minutes on 2 cores

Data: 1,838 generated instances with real PIQA's validation size and length distribution
(benchmarks/piqa_shaped.py), as a local jsonl file that both read: our `piqa` task with
`data_files`, and an lm-evaluation-harness task YAML with the same prompt ("Question: {goal}\\nAnswer:",
choices " {sol1}" / " {sol2}"). Model: the scoring benchmark's tiny-shape GPT-2 (or --shape).
Each command runs once, in a fresh process, from start-up to metrics; both use batch size 32 and
all cores. Then `tango run` again: every step cached.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import catwalk_steps  # noqa: F401  (registers the formats the cache's metadata names)
from piqa_shaped import write_piqa_shaped
from tango.workspaces import LocalWorkspace
from scoring import SHAPES, build_model

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

LM_EVAL_TASK = """task: piqa_shaped
dataset_path: json
dataset_kwargs:
  data_files:
    validation: {data}
output_type: multiple_choice
validation_split: validation
doc_to_text: "Question: {{{{goal}}}}\\nAnswer:"
doc_to_target: label
doc_to_choice: "{{{{[sol1, sol2]}}}}"
metric_list:
  - metric: acc
  - metric: acc_norm
"""


def timed(command, cwd=REPO):
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env={**os.environ, **OFFLINE}, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(" ".join(map(str, command)) + "\n" + done.stdout[-2000:] + done.stderr[-3000:])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--count", type=int, default=1838)
    parser.add_argument("--unconditioned", action="store_true", help="also time predict with unconditioned=true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = build_model(Path(tempfile.mkdtemp(dir=tmp)), args.shape)
        data = write_piqa_shaped(tmp / "piqa_shaped.jsonl", args.count)
        task = {"type": "piqa", "data_files": {"validation": str(data)}}

        def config(**predict):
            return {"steps": {
                "predict": {"type": "catwalk::predict", "model": f"rc::{model}", "task": task, **predict},
                "metrics": {"type": "catwalk::calculate_metrics", "predictions": {"type": "ref", "ref": "predict"}},
            }}

        runs = {"ours": config()}
        if args.unconditioned:
            runs["ours, unconditioned=true (acc_uncond too)"] = config(unconditioned=True)
        times, results = {}, {}
        for name, steps in runs.items():
            path = tmp / f"{len(times)}.json"
            path.write_text(json.dumps(steps))
            workspace = tmp / f"workspace{len(times)}"
            command = [BIN / "tango", "run", path, "-w", workspace, "-i", "catwalk_steps", "--name"]
            times[f"tango run, {name}"] = timed(command + ["first"])
            if name == "ours":
                times["tango run, ours again (all cached)"] = timed(command + ["again"])
                results["ours"] = LocalWorkspace(workspace).step_result_for_run("first", "metrics")

        tasks = tmp / "lm_eval_tasks"
        tasks.mkdir()
        (tasks / "piqa_shaped.yaml").write_text(LM_EVAL_TASK.format(data=data))
        out = tmp / "lm_eval_out"
        times["lm_eval CLI"] = timed([
            BIN / "lm_eval", "--model", "hf", "--model_args", f"pretrained={model},dtype=float32",
            "--tasks", "piqa_shaped", "--include_path", tasks, "--batch_size", "32", "--device", "cpu",
            "--output_path", out,
        ])
        (found,) = out.rglob("results_*.json")
        harness = json.loads(found.read_text())["results"]["piqa_shaped"]
        results["lm_eval"] = {"acc": harness["acc,none"], "acc_norm": harness["acc_norm,none"]}

    print(f"\n{args.count} PIQA-shaped instances, {args.shape} GPT-2 ({os.cpu_count()} cores), "
          f"wall time from start-up to metrics:")
    print("| command | seconds | ratio to lm_eval CLI |")
    print("|---|---|---|")
    for name, seconds in times.items():
        print(f"| {name} | {seconds:.1f} | {seconds / times['lm_eval CLI']:.2f} |")
    print(f"\nacc / acc_norm: ours {results['ours']['acc']:.4f} / {results['ours']['acc_norm']:.4f}, "
          f"lm_eval {results['lm_eval']['acc']:.4f} / {results['lm_eval']['acc_norm']:.4f}")


if __name__ == "__main__":
    main()
