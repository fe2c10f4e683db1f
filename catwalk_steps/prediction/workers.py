"""Computing a split's requests on several workers (CUDA devices, or CPU processes sharing out
the cores), each with a journal of its own, merged in request order.

A request is whatever one computation answers: a (context, continuation) pair to score, a
prompt to generate from. Worker *r* of *N* takes instances *r, r+N, ...* with all their
requests: strided, so that a split ordered by length or topic is shared out evenly. Workers
exchange nothing: each appends its results to its journal in the step's work dir, and the
parent reads the journals once they are done. Journals are keyed by the request's index in the
whole split, so a rerun resumes from every journal written for the same work, whatever the
device count that wrote it.
"""

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

import torch
from tango.common import Tqdm

from ..distributed.launch import launch
from ..kinds import kind_named
from ..models.batch_budget import resolved_batch_tokens
from ..models.finetuned import FinetunedModel
from ..models.loading import ModelSpec, context_window
from ..models.weights import load_pretrained
from ..storage.journal import Journal

logger = logging.getLogger(__name__)


@dataclass
class PredictionJob:
    """Everything a worker needs to compute its shard; sent once to each worker. ``kind`` names
    the request kind (:mod:`..kinds`), which computes the requests and names their journals
    (``<journal>-<rank>.jsonl``)."""

    spec: ModelSpec
    finetuned: Optional[FinetunedModel]
    requests: List[Any]
    shards: List[List[int]]
    devices: List[torch.device]
    dtype: torch.dtype
    pad_token_id: int
    max_batch_size: int
    max_batch_tokens: Union[int, str]  # or "auto" (:mod:`..models.batch_budget`), resolved in each worker
    work_dir: Path
    work: str
    kind: str = "multiple_choice"

    def journal(self, rank: int) -> Journal:
        return Journal(self.work_dir / f"{kind_named(self.kind).journal}-{rank}.jsonl", self.work)


def recorded_results(job: PredictionJob) -> Dict[int, Any]:
    """Every result in the work dir's journals for this work, from runs on any device count."""
    ranks = {int(path.stem.split("-")[1]) for path in job.work_dir.glob(f"{kind_named(job.kind).journal}-*.jsonl")}
    results: Dict[int, Any] = {}
    for rank in sorted(ranks | set(range(len(job.devices)))):
        results.update(job.journal(rank).load())
    return results


def run_on_workers(job: PredictionJob, start: Optional[Callable[[PredictionJob, Dict[int, Any]], None]] = None
                   ) -> List[Any]:
    """The result of every request, computed by ``len(job.devices)`` workers. A worker that
    fails fails this call with its traceback; what the workers computed until then stays in
    their journals for the next run. ``start(job, recorded)`` starts the workers, each journaling
    what ``recorded`` lacks of its shard (by default :func:`compute_shard`'s, with transformers)."""
    recorded = recorded_results(job)
    if len(recorded) < len(job.requests):  # else a run killed after computing everything: no workers
        for rank, shard in enumerate(job.shards):
            done = sum(q in recorded for q in shard)
            if done:
                logger.info("Worker %d resumes with %d of its %d requests done", rank, done, len(shard))
        (start or _launch_workers)(job, recorded)
    results = recorded_results(job)
    missing = [q for q in range(len(job.requests)) if q not in results]
    if missing:
        raise RuntimeError(f"The workers left {len(missing)} requests undone, e.g. request {missing[0]}")
    return [results[q] for q in range(len(job.requests))]


def _launch_workers(job: PredictionJob, recorded: Dict[int, Any]) -> None:
    launch(compute_shard, job.devices, job, recorded)


def compute_shard(rank: int, world_size: int, device: torch.device, job: PredictionJob, recorded: Dict[int, Any]) -> None:
    """Computes what ``recorded`` lacks of worker ``rank``'s shard, appending each batch to its journal."""
    shard, journal = job.shards[rank], job.journal(rank)
    known = {i: recorded[q] for i, q in enumerate(shard) if q in recorded}
    # Loaded once, in the prediction dtype, then moved to the device.
    lm = job.finetuned.load_model(job.dtype) if job.finetuned else load_pretrained(job.spec, job.dtype)
    lm = lm.to(device).eval()
    job = _with_batch_tokens(job, lm, device, world_size)
    kind = kind_named(job.kind)
    desc = kind.description + (f" (worker 1 of {world_size})" if world_size > 1 else "")
    with Tqdm.tqdm(total=len(shard), initial=len(known), desc=desc, disable=rank != 0) as progress:
        kind.compute(
            lm,
            job.spec,
            [job.requests[q] for q in shard],
            max_batch_tokens=job.max_batch_tokens,
            pad_token_id=job.pad_token_id,
            max_length=context_window(lm.config),
            max_batch_size=job.max_batch_size,
            progress=progress,
            known=known,
            on_batch=lambda done: journal.append([(shard[i], value) for i, value in done]),
        )


def _with_batch_tokens(job: PredictionJob, lm, device: torch.device, world_size: int) -> PredictionJob:
    """``job`` with its token budget resolved for ``lm`` on ``device`` (``"auto"``: from the memory
    left with the model loaded; CPU workers share the host's)."""
    budget = resolved_batch_tokens(
        job.max_batch_tokens, lm, device, max_length=context_window(lm.config), max_batch_size=job.max_batch_size,
        workers_sharing=world_size if device.type == "cpu" else 1,
    )
    return replace(job, max_batch_tokens=budget)
