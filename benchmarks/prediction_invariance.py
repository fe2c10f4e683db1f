"""Do predictions depend on how they were computed? On the demo (data/tiny: the stock tiny GPT-2
and the demo's fine-tuned one, all 128 validation instances, with and without the question),
PredictStep on 1 vs 2 CPU workers and with max_batch_size 1, 7 and 64, printed as a table: the
largest log-likelihood difference to 1 worker at the default batch size, the decisions that
differ, and the smallest margin (the nearest tie) among the instances.

    python benchmarks/prediction_invariance.py
"""

import tempfile
import time
from pathlib import Path

from tango.common.logging import initialize_logging
from tango.workspaces import LocalWorkspace

from catwalk_steps import FinetuneStep, PiqaTask, PredictStep

TINY = Path(__file__).resolve().parent.parent / "data" / "tiny"


def decisions(predictions):
    return [p["logliks"].index(max(p["logliks"])) for p in predictions]


def largest_difference(a, b) -> float:
    return max(
        abs(x - y)
        for p, q in zip(a, b)
        for x, y in zip(p["logliks"] + p.get("unconditioned_logliks", []), q["logliks"] + q.get("unconditioned_logliks", []))
    )


def main() -> None:
    initialize_logging(log_level="warning")
    task = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})
    root = Path(tempfile.mkdtemp(prefix="prediction-invariance-"))
    demo = FinetuneStep(model=f"rc::{TINY / 'model'}", tasks=[task], batch_size=16, micro_batch_size=8,
                        train_epochs=8, learning_rate=1e-3, step_name="finetune")
    fine_tuned = demo.result(LocalWorkspace(root / "finetune"))
    print("| model | run | seconds | largest log-likelihood difference | decisions that differ | smallest margin |")
    print("| --- | --- | --- | --- | --- | --- |")
    runs = [("1 worker", {}), ("2 workers", {"device_count": 2}), ("max_batch_size 1", {"max_batch_size": 1}),
            ("max_batch_size 7", {"max_batch_size": 7}), ("max_batch_size 64", {"max_batch_size": 64})]
    for model_name, model in [("zero-shot", f"rc::{TINY / 'model'}"), ("fine-tuned", fine_tuned)]:
        reference = None
        for run, settings in runs:
            workspace = LocalWorkspace(root / f"{model_name}-{run.replace(' ', '-')}")
            started = time.perf_counter()
            predictions = PredictStep(model=model, task=task, device="cpu", step_name="p", **settings).result(workspace)
            seconds = time.perf_counter() - started
            reference = reference or predictions
            differ = sum(a != b for a, b in zip(decisions(reference), decisions(predictions)))
            print(f"| {model_name} | {run} | {seconds:.1f} | {largest_difference(reference, predictions):.1e} | {differ} "
                  f"| {min(p['margin'] for p in predictions):.1e} |")


if __name__ == "__main__":
    main()
