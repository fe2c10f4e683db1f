"""What ``eval_tasks`` cost per validation inside ``catwalk::finetune``, against a separate
``catwalk::predict`` + ``catwalk::calculate_metrics`` of the same tasks on the same (one) worker.

    python benchmarks/in_loop_eval.py            # about 2 minutes on 2 cores; --quick for a smoke run

Model: ``--model`` (default the demo's ``data/tiny/model``). Tasks: the tiny PIQA validation split
(multiple choice), the tools' generative validation split (8 new tokens) and the tiny documents
(perplexity), each up to ``--limit`` instances.

- **in loop**: :func:`catwalk_steps.training.downstream.downstream_scores` with the model in
  memory and the requests built before: what each validation costs. Building the requests (once
  per run, before any weights load: :func:`~catwalk_steps.training.downstream.downstream_tasks`)
  is timed apart.
- **separate**: :func:`catwalk_steps.prediction.plan.predictions` (what ``catwalk::predict`` runs:
  the split read, its requests built, the weights loaded, computed on the worker with journals) and
  the kind's metrics, for each task.

Each the best of ``--repeats`` rounds in which the two take turns; the numbers of the two are
checked equal.
"""

import argparse
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "data" / "tiny"


def tasks(limit: int):
    from catwalk_steps.tasks import GenerationTask, PerplexityTask, PiqaTask
    from catwalk_steps.training.eval_tasks import EvalTask

    piqa = PiqaTask(data_files={"validation": str(TINY / "validation.jsonl")})
    tools = GenerationTask(data_files={"validation": str(TINY / "generation" / "validation.jsonl")}, until=["\n"],
                           max_new_tokens=8)
    documents = PerplexityTask(data_files={"validation": str(TINY / "perplexity" / "documents.jsonl")})
    return [EvalTask(piqa, limit=limit), EvalTask(tools, name="tools", limit=limit),
            EvalTask(documents, name="documents", limit=limit)]


def timed(run):
    start = time.perf_counter()
    value = run()
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=f"rc::{TINY / 'model'}")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="16 instances a task, 1 repeat")
    args = parser.parse_args()
    limit, repeats = (16, 1) if args.quick else (args.limit, args.repeats)

    from catwalk_steps.kinds import kind_of_task
    from catwalk_steps.models.loading import ModelSpec
    from catwalk_steps.models.weights import load_pretrained
    from catwalk_steps.prediction.plan import PredictionPlan, predictions
    from catwalk_steps.training.downstream import downstream_scores, downstream_tasks

    spec, entries = ModelSpec.parse(args.model), tasks(limit)
    downstream_tasks(entries, spec, spec.load_config())  # once for the imports and the tokenizer's first load
    building, prepared = timed(lambda: downstream_tasks(entries, spec, spec.load_config()))
    lm = load_pretrained(spec, torch.float32).eval()
    conventions = spec.conventions()

    def separate():
        scores = {}
        for entry in entries:
            plan = PredictionPlan(spec=spec, finetuned=None, task=entry.task, split=entry.split, limit=entry.limit,
                                  devices=[torch.device("cpu")], dtype=torch.float32, unconditioned=False, chat=None,
                                  max_batch_size=32, max_batch_tokens=16384, journals=None)
            records = predictions(plan)
            scores[entry.name] = kind_of_task(entry.task).metrics(records)
        return scores

    in_loop_s, separate_s, in_loop, apart = [], [], None, None
    for _ in range(repeats):  # taking turns: a shared machine's load weighs on both alike
        seconds, in_loop = timed(lambda: downstream_scores(lm, prepared, spec, conventions, 0, 1))
        in_loop_s.append(seconds)
        seconds, apart = timed(separate)
        separate_s.append(seconds)
    worst = max(abs(in_loop[task][name] - apart[task][name]) for task in in_loop for name in in_loop[task])
    print(f"threads {torch.get_num_threads()}, {', '.join(f'{t.name} {len(t.requests)} requests' for t in prepared)}")
    print(f"requests built once: {building:.2f} s")
    print(f"in loop, per validation: {min(in_loop_s):.2f} s; separate predict + metrics: {min(separate_s):.2f} s; "
          f"ratio {min(in_loop_s) / min(separate_s):.2f}")
    print(f"largest difference of a metric: {worst:.1e}")


if __name__ == "__main__":
    main()
