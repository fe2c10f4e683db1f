"""A request kind: everything that differs between multiple choice, generation, documents'
perplexity and scored targets, in one object, so that the layers above ask the kind instead of
checking a string or guessing from a record's fields.

A task says its kind by lm-evaluation-harness's name (``Task.REQUEST_TYPE``, its YAML's
``output_type``); :func:`kind_of_task` finds the object. ``catwalk::predict`` asks it for the
requests of a split's instances, the computation that answers them and the records it makes of
the answers; every record says its kind (``"kind"``), and :func:`kind_of_records` reads it, or,
for records cached before they said it, recognises the kind by the one field only its records
hold. Metrics, comparisons, diffs, exports and the command line then ask the records' kind for
their metrics, their per-instance values (and which are 0/1, the test a comparison makes), the
one a table and a diff show, and what a diff shows of an instance. ``catwalk::finetune`` asks a
kind's ``training`` (:mod:`.objective`) for its training examples, loss and validation.

A new kind is one module that subclasses :class:`RequestKind` (and, to be fine-tuned on,
:class:`.objective.TrainingObjective`) and registers an instance with :func:`register`.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from tango.common.exceptions import ConfigurationError

from .objective import TrainingObjective

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

    from ..models.conventions import TokenConventions
    from ..models.loading import ModelSpec
    from ..tasks import Task

Record = Dict[str, Any]


@dataclass(frozen=True)
class RequestSetting:
    """What making a split's requests and records needs beside its instances: the task, the
    model's token conventions and config (its context window, whether it is an encoder-decoder),
    its name for messages, and whether to score choices after the task's unconditioned context."""

    task: "Task"
    conventions: "TokenConventions"
    config: "PretrainedConfig"
    model_name: str
    unconditioned: bool = False


class RequestKind:
    """One kind of request, from instances to metrics. Subclasses set the class attributes and
    implement the methods that raise :class:`NotImplementedError`."""

    #: lm-evaluation-harness's name of the kind (a task's ``REQUEST_TYPE``).
    name: ClassVar[str]
    #: What the workers compute (their journals' names, ``<journal>-<rank>.jsonl``).
    journal: ClassVar[str]
    #: The progress bar's words.
    description: ClassVar[str]
    #: A field that only this kind's records hold: how records cached before they said their
    #: kind are recognised.
    record_field: ClassVar[str]
    #: Whether its records have a per-instance 0/1 metric whose changes a diff lists.
    diffable: ClassVar[bool] = True
    #: Whether its tasks' prompts can be conversations, under a chat template (their tasks'
    #: ``instances(split, limit, chat)`` then write them: :mod:`..tasks.chat`).
    conversational: ClassVar[bool] = False
    #: How ``catwalk::finetune`` trains on its tasks; ``None``: it does not.
    training: ClassVar[Optional[TrainingObjective]] = None
    #: Whether its records can carry their requests as text (:meth:`logged_requests`).
    logs_requests: ClassVar[bool] = False

    def requests(self, instances: Sequence[Any], setting: RequestSetting) -> Tuple[List[Any], List[int]]:
        """The requests of ``instances``, in order, and the instance of each (by position)."""
        raise NotImplementedError

    def work(self, requests: Sequence[Any]) -> Any:
        """``requests`` as JSON, for the journals' fingerprint (a journal of other work is discarded)."""
        raise NotImplementedError

    def compute(self, lm: "PreTrainedModel", spec: "ModelSpec", requests: Sequence[Any], max_batch_tokens: int,
                **batching: Any) -> None:
        """Computes ``requests`` with ``lm``, handing each batch's results to ``batching["on_batch"]``
        (the batching settings of :mod:`catwalk_steps.prediction.workers`)."""
        raise NotImplementedError

    def records(self, instances: Sequence[Any], requests: Sequence[Any], instance_of: Sequence[int],
                results: Sequence[Any], setting: RequestSetting) -> List[Record]:
        """One JSON-safe record per instance from the results of :meth:`requests`' requests (and
        the instance of each)."""
        raise NotImplementedError

    def metrics(self, records: List[Record]) -> Dict[str, Any]:
        """Every metric of ``records`` (``catwalk::calculate_metrics``)."""
        raise NotImplementedError

    def values(self, records: Sequence[Mapping[str, Any]]) -> Dict[str, np.ndarray]:
        """Every per-instance metric of ``records``, by name: what comparisons and diffs pair."""
        raise NotImplementedError

    def binary(self, metric: str) -> bool:
        """Whether the per-instance ``metric`` (of :meth:`values`) is 0/1, right or wrong: a
        comparison tests it by the exact McNemar test, else (a continuous value) by the paired
        permutation test (:mod:`..reports.comparison`)."""
        raise NotImplementedError

    def headline_metric(self, records: Sequence[Mapping[str, Any]]) -> Optional[str]:
        """The per-instance 0/1 metric of ``records`` that a table's ``Δ`` column shows and a diff
        lists the changes of, when none is named: one rule for both, so that a diff written
        beside a table speaks of the table's metric. ``None`` where the kind has none."""
        return None

    def gold_margins(self, records: Sequence[Mapping[str, Any]], metric: str) -> Optional[np.ndarray]:
        """Per instance, how far the gold answer is ahead under ``metric`` (negative: behind), for
        a diff's largest swings; ``None`` where answers are not ranked."""
        return None

    def diff_side(self, record: Mapping[str, Any], metric: str, text: Mapping[str, Any]) -> Record:
        """What a diff shows of one side's ``record`` (``text``: the instance's, if known)."""
        return {key: value for key, value in record.items() if key not in ("id", "label", "kind")}

    def instance_text(self, instance: Any) -> Record:
        """An instance's prompt and gold answer, for diffs."""
        raise NotImplementedError

    def readable(self, records: List[Record]) -> Iterator[Record]:
        """The records as ``catwalk::export_predictions`` writes them."""
        yield from records

    def logged_requests(self, instance: Any, setting: RequestSetting) -> Record:
        """What ``log_requests`` adds to an instance's record: its requests as text (kinds that
        say :attr:`logs_requests`)."""
        raise NotImplementedError


def task_fields(task: Any, kind: RequestKind) -> Record:
    """What every record of ``task`` says beside its kind's own fields: its request ``kind``, the
    shots its prompt holds (``num_shots``) and, for a task that names one (OLMES's), its
    ``primary_metric``, which the kind's metrics read."""
    said = {"kind": kind.name, "num_shots": getattr(task, "num_shots", 0)}
    if getattr(task, "primary_metric", None) is not None:
        said["primary_metric"] = task.primary_metric
    return said


def with_group(record: Record, instance: Any) -> Record:
    """``record`` with its instance's group (MMLU's subject), where it has one."""
    return record if instance.group is None else {**record, "group": instance.group}


KINDS: Dict[str, RequestKind] = {}


def register(kind: RequestKind) -> RequestKind:
    """Adds ``kind`` under its name; a second kind of the same name is refused (it would replace
    the first without a word, and records of the first would be read by the second)."""
    if kind.name in KINDS and KINDS[kind.name] is not kind:
        raise ValueError(f"A request kind named {kind.name!r} is registered already: {type(KINDS[kind.name]).__name__}")
    KINDS[kind.name] = kind
    return kind


def conversational_kinds() -> List[str]:
    """The names of the kinds whose prompts can be conversations (:attr:`RequestKind.conversational`)."""
    return [name for name, kind in KINDS.items() if kind.conversational]


def kind_named(name: str) -> RequestKind:
    if name not in KINDS:
        raise ConfigurationError(f"Unknown request kind {name!r} (known: {', '.join(KINDS)})")
    return KINDS[name]


def kind_of_task(task: Any) -> RequestKind:
    """The kind of ``task``'s requests, or a :class:`ConfigurationError` naming the task."""
    name = getattr(task, "REQUEST_TYPE", None)
    if name not in KINDS:
        raise ConfigurationError(
            f"{type(task).__name__} makes {name!r} requests, which no request kind answers (known: {', '.join(KINDS)})"
        )
    return KINDS[name]


def kind_of_record(record: Mapping[str, Any]) -> RequestKind:
    """The kind a record says, or, for one cached before records said it, the kind whose own field it holds."""
    if "kind" in record:
        return kind_named(record["kind"])
    found = [kind for kind in KINDS.values() if kind.record_field in record]
    if len(found) != 1:
        raise ValueError(f"Not a catwalk::predict record of any one kind (its fields: {', '.join(sorted(record))})")
    return found[0]


def kind_of_records(records: Iterable[Mapping[str, Any]]) -> RequestKind:
    """The one kind of all of ``records``; a :class:`ValueError` for none or a mix."""
    kinds = {id(kind): kind for kind in map(kind_of_record, records)}
    if len(kinds) != 1:
        names = sorted(kind.name for kind in kinds.values())
        raise ValueError(f"Predictions of one kind expected, got {'none' if not names else ' and '.join(names)}")
    return next(iter(kinds.values()))

