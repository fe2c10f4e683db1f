"""What ``catwalk::predict`` computes for one task split (:class:`PredictionPlan`), and how
(:func:`predictions`): the split's instances are read, turned into the requests of the task's
kind (:mod:`..kinds`: choices to score, prompts to generate from, documents' rolling windows,
targets), computed on the workers of :mod:`.workers`, which journal as they go, and made into
one record per instance."""

import logging
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any, Dict, List, Optional, Sequence, Union

import torch
from tango.common.exceptions import ConfigurationError

from ..distributed.shards import strided_shards
from ..kinds import RequestKind, RequestSetting, kind_of_task
from ..kinds.base import task_fields
from ..models.chat_templates import template_renderer
from ..models.finetuned import FinetunedModel
from ..models.loading import ModelSpec
from ..storage.hashing import fingerprint
from ..tasks import Task
from ..tasks.chat import ChatSettings
from .workers import PredictionJob, run_on_workers

logger = logging.getLogger(__name__)

Records = List[Dict[str, Any]]


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
    log_requests: bool = False
    #: What generates: transformers (``"hf"``) or vLLM's engine (``"vllm"``, :mod:`.vllm_engine`,
    #: with ``vllm_args`` for it).
    backend: str = "hf"
    vllm_args: Optional[Dict[str, Any]] = None


def work_of(requests: Any, finetuned: Optional[FinetunedModel]) -> str:
    """What computing ``requests`` (as JSON) with these weights is, for journals: a journal written
    for other requests or other weights is discarded."""
    return fingerprint([requests, finetuned and finetuned.fingerprint])


def predictions(plan: PredictionPlan) -> Records:
    """One JSON-safe record per instance of the plan's split (see ``catwalk::predict``), each
    with its request kind (``kind``), the shots its prompt holds (``num_shots``) and, for a task
    that names one (OLMES's), its ``primary_metric``."""
    kind = kind_of_task(plan.task)
    said = task_fields(plan.task, kind)
    return [{**record, **said} for record in _records(plan, kind)]


def _records(plan: PredictionPlan, kind: RequestKind) -> Records:
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
    setting = RequestSetting(task=plan.task, conventions=conventions or plan.spec.conventions(),
                             config=plan.spec.load_config(), model_name=plan.spec.pretrained,
                             unconditioned=plan.unconditioned)
    requests, instance_of = kind.requests(instances, setting)
    with nullcontext(plan.journals) if plan.journals else TemporaryDirectory(prefix="catwalk-predict-") as journals:
        results = _computed(plan, Path(journals), setting.conventions.pad_token_id, len(instances), kind, requests,
                            instance_of)
    records = kind.records(instances, requests, instance_of, results, setting)
    if plan.log_requests:
        records = [{**record, **kind.logged_requests(instance, setting)}
                   for record, instance in zip(records, instances)]
    return records


def _computed(
    plan: PredictionPlan, journals: Path, pad_token_id: int, instances: int,
    kind: RequestKind, requests: List[Any], instance_of: Sequence[int],
) -> List[Any]:
    """The results of ``requests`` (of ``instances`` instances; request *q*'s is
    ``instance_of[q]``), computed as ``kind`` says and journaled."""
    devices = ", ".join(map(str, plan.devices))
    logger.info("Computing %d %s of %d instances on %s", len(requests), kind.journal, instances, devices)
    job = PredictionJob(
        spec=plan.spec, finetuned=plan.finetuned, requests=requests,
        shards=strided_shards(instance_of, len(plan.devices)), devices=plan.devices, dtype=plan.dtype,
        pad_token_id=pad_token_id, max_batch_size=plan.max_batch_size, max_batch_tokens=plan.max_batch_tokens,
        work_dir=journals, work=work_of(kind.work(requests), plan.finetuned), kind=kind.name,
    )
    if plan.backend == "vllm":
        from .vllm_engine import run_on_engines

        return run_on_engines(job, str(plan.dtype).removeprefix("torch."), plan.vllm_args or {})
    return run_on_workers(job)
