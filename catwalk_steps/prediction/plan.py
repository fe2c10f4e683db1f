"""What ``catwalk::predict`` computes for one task split (:class:`PredictionPlan`), and how
(:func:`predictions`): the split's instances are read, turned into the requests of the task's
kind (choices to score, prompts to generate from, documents' rolling windows, targets), computed
on the workers of :mod:`.workers`, which journal as they go, and made into one record per
instance."""

import logging
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import torch
from tango.common.exceptions import ConfigurationError

from ..models.finetuned import FinetunedModel
from ..models.chat_templates import template_renderer
from ..models.loading import ModelSpec, context_window
from ..models.prompt_room import generation_requests
from ..storage.hashing import fingerprint
from ..tasks import Task
from ..tasks.chat import ChatSettings
from .choice_records import choice_queries, choice_records
from .generation_records import generation_records
from .perplexity_records import document_queries, perplexity_records, target_queries, target_records
from .workers import PredictionJob, run_on_workers, strided_shards

logger = logging.getLogger(__name__)

Records = List[Dict[str, Any]]
#: ``compute(kind, requests, instance_of, work)``: see :func:`_computed`.
Compute = Callable[[str, List[Any], Sequence[int], str], List[Any]]


@dataclass(frozen=True)
class PredictionPlan:
    """The predictions of ``task``'s ``split`` (its first ``limit`` instances) by the model of
    ``spec`` (with ``finetuned``'s weights, if given) in ``dtype`` on ``devices``, one worker each.
    The workers' journals go to ``journals`` (the step's work dir), so that a killed run resumes
    where it stopped, or, when ``None``, to a temporary directory."""

    spec: ModelSpec
    finetuned: Optional[FinetunedModel]
    task: Task
    split: str
    limit: Optional[int]
    devices: List[torch.device]
    dtype: torch.dtype
    unconditioned: bool
    chat: Optional[ChatSettings]
    max_batch_size: int
    max_batch_tokens: Union[int, str]  # or "auto"
    journals: Optional[Path]


def work_of(requests: Any, finetuned: Optional[FinetunedModel]) -> str:
    """What computing ``requests`` (as JSON) with these weights is, for journals: a journal written
    for other requests or other weights is discarded."""
    return fingerprint([requests, finetuned and finetuned.fingerprint])


def query_work(queries: Sequence[Any], finetuned: Optional[FinetunedModel]) -> str:
    """:func:`work_of` scoring (context, continuation) ``queries``."""
    return work_of([list(q.context + q.continuation) for q in queries], finetuned)


def predictions(plan: PredictionPlan) -> Records:
    """One JSON-safe record per instance of the plan's split (see ``catwalk::predict``), each
    with the shots its prompt holds (``num_shots``)."""
    records = _records(plan)
    shots = getattr(plan.task, "num_shots", 0)
    return [{**record, "num_shots": shots} for record in records]


def _records(plan: PredictionPlan) -> Records:
    # A bad data file fails at the instances, before anything is loaded; only a chat template
    # needs the tokenizer first, to write the prompts.
    if plan.chat is None:
        instances, conventions = plan.task.instances(plan.split, plan.limit), None
    else:
        conventions = plan.spec.conventions()
        render = template_renderer(conventions.tokenizer, plan.chat.template, plan.spec.pretrained)
        instances = plan.task.instances(plan.split, plan.limit, chat=plan.chat.format(render))
    if not instances:  # (MMLU's subjects may select none): no records, and nothing to compute metrics on
        raise ConfigurationError(f"{type(plan.task).__name__}: split {plan.split!r} has no instances to predict")
    conventions = conventions or plan.spec.conventions()
    with nullcontext(plan.journals) if plan.journals else TemporaryDirectory(prefix="catwalk-predict-") as journals:
        compute: Compute = partial(_computed, plan, Path(journals), conventions.pad_token_id, len(instances))
        if plan.task.REQUEST_TYPE == "generate_until":
            max_length = context_window(plan.spec.load_config())
            requests = generation_requests(conventions, instances, max_length)
            work = work_of([[list(r.prompt), r.until, r.max_new_tokens] for r in requests], plan.finetuned)
            generations = compute("generations", requests, range(len(requests)), work)
            return generation_records(plan.task, instances, requests, generations, max_length)
        if plan.task.REQUEST_TYPE in ("loglikelihood_rolling", "loglikelihood"):
            return _whole_scores(plan, instances, conventions, compute)
        unconditioned = plan.task.unconditioned_context if plan.unconditioned else None
        queries, instance_of = choice_queries(conventions, instances, unconditioned)
        logliks = compute("scores", queries, instance_of, query_work(queries, plan.finetuned))
        return choice_records(instances, queries, logliks)


def _computed(
    plan: PredictionPlan, journals: Path, pad_token_id: int, instances: int,
    kind: str, requests: List[Any], instance_of: Sequence[int], work: str,
) -> List[Any]:
    """The results of the computation ``kind`` (:data:`.workers.COMPUTATIONS`) of ``requests``
    (of ``instances`` instances; request *q*'s is ``instance_of[q]``), journaled as ``work``."""
    devices = ", ".join(map(str, plan.devices))
    logger.info("Computing %d %s of %d instances on %s", len(requests), kind, instances, devices)
    return run_on_workers(PredictionJob(
        spec=plan.spec, finetuned=plan.finetuned, requests=requests,
        shards=strided_shards(instance_of, len(plan.devices)), devices=plan.devices, dtype=plan.dtype,
        pad_token_id=pad_token_id, max_batch_size=plan.max_batch_size, max_batch_tokens=plan.max_batch_tokens,
        work_dir=journals, work=work, kind=kind,
    ))


def _whole_scores(plan: PredictionPlan, instances: List[Any], conventions, compute: Compute) -> Records:
    """Records of a perplexity task's documents (``loglikelihood_rolling``: every rolling window
    a query) or of (context, target) instances scored with a greedy flag (``loglikelihood``).
    Causal LMs only."""
    config = plan.spec.load_config()
    if config.is_encoder_decoder:
        raise ConfigurationError(
            f"{plan.spec.pretrained} is an encoder-decoder model: {plan.task.REQUEST_TYPE} requests (perplexity, "
            "LAMBADA) are computed here for causal language models only"
        )
    if plan.task.REQUEST_TYPE == "loglikelihood_rolling":
        queries, document_of = document_queries(conventions, instances, context_window(config))
        logliks = compute("scores", queries, document_of, query_work(queries, plan.finetuned))
        return perplexity_records(instances, queries, document_of, logliks)
    queries, instance_of = target_queries(conventions, instances)
    results = compute("greedy_scores", queries, instance_of, query_work(queries, plan.finetuned))
    return target_records(instances, queries, results)
