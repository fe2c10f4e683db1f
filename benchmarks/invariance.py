"""Does a fine-tuned model depend on how it was computed? The scenarios of the training-invariance
issue, on the demo data (data/tiny), printed as a table:

- 101 train / 37 validation rows, batch 8 in micro-batches of 4, 3 epochs: are the returned
  weights those of the best validation, and does PredictStep agree with the reported accuracy?
- 512 / 128 rows, batch 16 in micro-batches of 8, 8 epochs, dropout on: 1 vs 2 workers, and a
  run interrupted after its first checkpoint and resumed on 1 and on 2 workers.

    python benchmarks/invariance.py
"""

import tempfile
from pathlib import Path

from tango.common.lazy import Lazy
from tango.common.logging import initialize_logging
from tango.integrations.torch import TrainCallback
from tango.workspaces import LocalWorkspace

from catwalk_steps import CalculateMetricsStep, FinetuneStep, PiqaTask, PredictStep

TINY = Path(__file__).resolve().parent.parent / "data" / "tiny"


class Interrupt(TrainCallback):
    def pre_batch(self, step: int, epoch: int, batch) -> None:
        if step == 40:  # after the first checkpoint (end of epoch 1, step 32)
            raise RuntimeError("interrupted")


def largest_difference(a, b) -> float:
    return max((a[name] - b[name]).abs().max().item() for name in a)


def main() -> None:
    initialize_logging(log_level="warning")
    task = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})
    root = Path(tempfile.mkdtemp(prefix="invariance-"))
    rows = []

    uneven = dict(model=f"rc::{TINY / 'model'}", tasks=[task], batch_size=8, micro_batch_size=4, train_epochs=3,
                  train_limit=101, validation_limit=37, learning_rate=1e-3, step_name="uneven")
    for device_count in (1, 2):
        workspace = LocalWorkspace(root / f"uneven{device_count}")
        step = FinetuneStep(**uneven, device_count=device_count)
        result = step.result(workspace)
        predictions = PredictStep(model=step, task=task, limit=37, step_name="p")
        acc = CalculateMetricsStep(predictions=predictions, step_name="m").result(workspace)["acc"]
        rows.append((f"101/37 rows, {device_count} worker(s)", f"best step {result.training_metrics['step']}, "
                     f"val_acc {result.training_metrics['val_acc']:.4f}, PredictStep acc {acc:.4f}"))

    demo = dict(model=f"rc::{TINY / 'model'}", tasks=[task], batch_size=16, micro_batch_size=8, train_epochs=8,
                learning_rate=1e-3, step_name="demo")
    results = {}
    for name, first, then in [("1 worker", 1, None), ("2 workers", 2, None), ("1, killed, resumed on 1", 1, 1),
                              ("1, killed, resumed on 2", 1, 2), ("2, killed, resumed on 1", 2, 1)]:
        workspace = LocalWorkspace(root / name.replace(" ", "_").replace(",", ""))
        if then is not None:
            try:
                FinetuneStep(**demo, device_count=first, callbacks=[Lazy(Interrupt)]).result(workspace)
            except Exception:
                pass
        results[name] = FinetuneStep(**demo, device_count=then or first).result(workspace)
    reference = results["1 worker"]
    for name, result in results.items():
        rows.append((f"demo, dropout on, {name}", f"val_acc {result.training_metrics['val_acc']:.4f}, largest weight "
                     f"difference to 1 worker {largest_difference(reference.state_dict, result.state_dict):.1e}"))

    print("| run | result |\n| --- | --- |")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
