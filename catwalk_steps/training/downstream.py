"""Scoring ``eval_tasks`` (:mod:`.eval_tasks`) inside fine-tuning, through ``catwalk::predict``'s
and ``catwalk::calculate_metrics``' code: each task's requests are built once per run, on node 0
before any model loads, by its request kind (:meth:`~catwalk_steps.kinds.RequestKind.requests`,
as :mod:`catwalk_steps.prediction.plan` builds them for the result's model); at each validation
every worker computes its strided share of them with the in-memory weights
(:meth:`~catwalk_steps.kinds.RequestKind.compute`, :func:`~catwalk_steps.prediction.workers.strided_shards`,
the batching of ``catwalk::predict``'s defaults), the results are gathered on every worker, and
each worker makes the same records and metrics of them (``kind.records``, ``kind.metrics``).
So the numbers are those that ``catwalk::predict`` + ``catwalk::calculate_metrics`` give for the
weights of that validation on one device, and every worker holds them (the best validation and
``patience`` are decided alike on all)."""

import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.distributed as dist
from tango.common import Tqdm

from ..distributed.shards import strided_shards
from ..kinds import RequestSetting, kind_named, kind_of_task
from ..kinds.base import task_fields
from ..models.batch_budget import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS
from ..models.chat_templates import template_renderer
from ..models.loading import ModelSpec, context_window
from ..tasks.chat import ChatSettings
from .eval_tasks import EvalTask

logger = logging.getLogger(__name__)

#: An eval task's numbers, by metric; a validation's, by task.
Scores = Dict[str, Dict[str, float]]


@dataclass
class DownstreamTask:
    """One eval task's instances and requests (request *q* is of instance ``instance_of[q]``),
    built once per run and sent to every worker."""

    name: str
    kind: str
    entry: EvalTask
    instances: List[Any]
    requests: List[Any]
    instance_of: List[int]


def downstream_tasks(entries: Sequence[EvalTask], spec: ModelSpec, config: Any) -> List[DownstreamTask]:
    """The requests of ``entries`` for the model of ``spec`` (the result's: under its chat
    template, if any), made as ``catwalk::predict`` makes them for the fine-tuned result. A bad
    data file or a prompt the window cannot hold fails here, before any weights are loaded."""
    conventions, chat = spec.conventions(), ChatSettings.of(spec.chat_template or False)
    settings = {}
    if chat is not None:
        settings["chat"] = chat.format(template_renderer(conventions.tokenizer, chat.template, spec.pretrained))
    prepared = []
    for entry in entries:
        kind = kind_of_task(entry.task)
        instances = entry.task.instances(entry.split, entry.limit, **settings)
        setting = RequestSetting(task=entry.task, conventions=conventions, config=config, model_name=spec.pretrained,
                                 unconditioned=entry.unconditioned)
        requests, instance_of = kind.requests(instances, setting)
        prepared.append(DownstreamTask(entry.name, kind.name, entry, instances, requests, list(instance_of)))
    return prepared


@torch.no_grad()
def downstream_scores(lm: Any, tasks: Sequence[DownstreamTask], spec: ModelSpec, conventions: Any, rank: int,
                      world_size: int) -> Scores:
    """Every metric of each of ``tasks`` with ``lm`` (in eval mode), its requests shared out over
    the ``world_size`` workers (every worker must call, in the same order)."""
    scores = {}
    for task in tasks:
        kind = kind_named(task.kind)
        shard = strided_shards(task.instance_of, world_size)[rank]
        computed: Dict[int, Any] = {}
        desc = f"Evaluating {task.name}" + (f" (worker 1 of {world_size})" if world_size > 1 else "")
        with Tqdm.tqdm(total=len(shard), desc=desc, disable=rank != 0) as progress:
            kind.compute(
                lm, spec, [task.requests[q] for q in shard], max_batch_tokens=DEFAULT_MAX_BATCH_TOKENS,
                pad_token_id=conventions.pad_token_id, max_length=context_window(lm.config),
                max_batch_size=DEFAULT_MAX_BATCH_SIZE, progress=progress, known={},
                on_batch=lambda done: computed.update((shard[i], value) for i, value in done),
            )
        results = _gathered(computed, world_size)
        setting = RequestSetting(task=task.entry.task, conventions=conventions, config=lm.config,
                                 model_name=spec.pretrained, unconditioned=task.entry.unconditioned)
        said = task_fields(task.entry.task, kind)  # as catwalk::predict's records say it (OLMES's primary metric)
        records = [{**record, **said} for record in kind.records(
            task.instances, task.requests, task.instance_of, [results[q] for q in range(len(task.requests))], setting)]
        scores[task.name] = _numbers(kind.metrics(records))
    if rank == 0:
        logger.info("Eval tasks: %s", scores_line(scores))
    return scores


def _gathered(computed: Dict[int, Any], world_size: int) -> Dict[int, Any]:
    """Every worker's results, on every worker."""
    if world_size == 1:
        return computed
    shares: List[Optional[Dict[int, Any]]] = [None] * world_size
    dist.all_gather_object(shares, computed)
    return {q: value for share in shares for q, value in (share or {}).items()}


def _numbers(metrics: Dict[str, Any]) -> Dict[str, float]:
    """The scalar metrics (not the nested ones, as a task's groups)."""
    return {name: value for name, value in metrics.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)}


def scores_line(scores: Scores) -> str:
    """``piqa acc 0.5123 acc_norm 0.4987; ...``: each task's metrics, without their standard errors."""
    return "; ".join(
        f"{task} " + " ".join(f"{metric} {value:.4f}" for metric, value in metrics.items()
                              if not metric.endswith("_stderr") and metric != "count")
        for task, metrics in scores.items()
    )
