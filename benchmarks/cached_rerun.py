"""How long a fully cached rerun of the demo takes: `tango run` that computes nothing.

    python benchmarks/cached_rerun.py [--repeats 5]

Runs configs/piqa_tiny.jsonnet once into a fresh workspace (computing every step), then
`--repeats` more times, each a new process as a user would start it, and prints the wall time of
each rerun beside the time to start Python and import Tango, torch and catwalk_steps alone.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TANGO = str(Path(sys.executable).with_name("tango"))
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def wall(command, repeats: int):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, cwd=REPO, env={**os.environ, **OFFLINE}, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = [TANGO, "run", "configs/piqa_tiny.jsonnet", "-w", f"{tmp}/workspace",
               "-o", json.dumps({"steps.export.output_dir": f"{tmp}/results"})]
        (first,) = wall(run, 1)
        rows = {
            "python -c 'import torch'": wall([sys.executable, "-c", "import torch"], args.repeats),
            "python -c 'import tango.cli'": wall([sys.executable, "-c", "import tango.cli"], args.repeats),
            "python -c 'import catwalk_steps'": wall([sys.executable, "-c", "import catwalk_steps"], args.repeats),
            "tango run configs/piqa_tiny.jsonnet (all cached)": wall(run, args.repeats),
        }
    print(f"\nFirst run (computing every step): {first:.1f} s; then {args.repeats} runs of each, "
          f"{os.cpu_count()} cores, Python {sys.version.split()[0]}")
    print("| command | min s | median s |")
    print("|---|---|---|")
    for name, times in rows.items():
        print(f"| {name} | {min(times):.2f} | {statistics.median(times):.2f} |")


if __name__ == "__main__":
    main()
