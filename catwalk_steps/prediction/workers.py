"""Scoring a split's queries on several workers (CUDA devices, or CPU processes sharing out the
cores), each with a journal of its own, merged in query order.

Worker *r* of *N* takes instances *r, r+N, ...* with all their queries: strided, so that a split
ordered by length or topic is shared out evenly. Workers exchange nothing: each appends its
scores to its journal in the step's work dir, and the parent reads the journals once they are
done. Journals are keyed by the query's index in the whole split, so a rerun resumes from every
journal written for the same work, whatever the device count that wrote it.
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch
from tango.common import Tqdm

from ..distributed.launch import launch
from ..models.finetuned import FinetunedModel
from ..models.loading import ModelSpec, context_window
from ..models.scoring import Query, score_queries
from ..storage.journal import Journal

logger = logging.getLogger(__name__)


@dataclass
class ScoringJob:
    """Everything a worker needs to score its shard; sent once to each worker."""

    spec: ModelSpec
    finetuned: Optional[FinetunedModel]
    queries: List[Query]
    shards: List[List[int]]
    devices: List[torch.device]
    dtype: torch.dtype
    pad_token_id: int
    max_batch_size: int
    max_batch_tokens: int
    work_dir: Path
    work: str

    def journal(self, rank: int) -> Journal:
        return Journal(self.work_dir / f"scores-{rank}.jsonl", self.work)


def strided_shards(instance_of: Sequence[int], workers: int) -> List[List[int]]:
    """Query indices per worker: every query of instance *i* goes to worker *i* mod ``workers``."""
    return [[q for q, instance in enumerate(instance_of) if instance % workers == rank] for rank in range(workers)]


def recorded_scores(job: ScoringJob) -> Dict[int, float]:
    """Every score in the work dir's journals for this work, from runs on any device count."""
    ranks = {int(path.stem.split("-")[1]) for path in job.work_dir.glob("scores-*.jsonl")}
    scores: Dict[int, float] = {}
    for rank in sorted(ranks | set(range(len(job.devices)))):
        scores.update(job.journal(rank).load())
    return scores


def score_on_workers(job: ScoringJob) -> List[float]:
    """The log-likelihood of every query, scored by ``len(job.devices)`` workers. A worker that
    fails fails this call with its traceback; what the workers scored until then stays in their
    journals for the next run."""
    recorded = recorded_scores(job)
    if len(recorded) < len(job.queries):  # else a run killed after scoring everything: no workers
        for rank, shard in enumerate(job.shards):
            done = sum(q in recorded for q in shard)
            if done:
                logger.info("Worker %d resumes with %d of its %d queries scored", rank, done, len(shard))
        launch(score_shard, job.devices, job, recorded)
    scores = recorded_scores(job)
    missing = [q for q in range(len(job.queries)) if q not in scores]
    if missing:
        raise RuntimeError(f"The workers left {len(missing)} queries unscored, e.g. query {missing[0]}")
    return [scores[q] for q in range(len(job.queries))]


def score_shard(rank: int, world_size: int, device: torch.device, job: ScoringJob, recorded: Dict[int, float]) -> None:
    """Scores what ``recorded`` lacks of worker ``rank``'s shard, appending each batch to its journal."""
    shard, journal = job.shards[rank], job.journal(rank)
    known = {i: recorded[q] for i, q in enumerate(shard) if q in recorded}
    # Loaded once, in the scoring dtype, then moved to the device.
    lm = job.finetuned.load_model(job.dtype) if job.finetuned else job.spec.load_model(job.dtype)
    lm = lm.to(device).eval()
    desc = "Log-likelihood queries" + (f" (worker 1 of {world_size})" if world_size > 1 else "")
    with Tqdm.tqdm(total=len(shard), initial=len(known), desc=desc, disable=rank != 0) as progress:
        score_queries(
            lm,
            [job.queries[q] for q in shard],
            pad_token_id=job.pad_token_id,
            max_length=context_window(lm.config),
            max_batch_size=job.max_batch_size,
            max_batch_tokens=job.max_batch_tokens,
            progress=progress,
            known=known,
            on_batch=lambda scored: journal.append([(shard[i], value) for i, value in scored]),
        )
