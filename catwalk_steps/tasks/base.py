"""The one registry every task lives in, and where a task's rows come from.

A task produces instances of one request type (:data:`Task.REQUEST_TYPE`): multiple choice
(:class:`~.task.MultipleChoiceTask`), generation or perplexity. Steps annotate their ``task``
arguments with :class:`Task`, so a config's ``{type: NAME}`` resolves to a task of any kind.
Each kind of task keeps a registry of its own too (``MultipleChoiceTask.by_name("piqa")``):
:meth:`Task.register` writes a name into both.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar

from tango.common import Registrable
from tango.common.det_hash import CustomDetHash
from tango.common.exceptions import ConfigurationError

from ..storage.hashing import remembered_sha256_of_file
from ..storage.hub import hub_failure
from .data_files import load_local_rows

if TYPE_CHECKING:  # datasets is imported where rows are loaded: a cached run never needs it
    import datasets

LOCAL_DATA = "give the task local files of the same fields as data_files ({split: path})"

_T = TypeVar("_T")


def check_limit(name: str, limit: Optional[int]) -> None:
    """Refuses a ``limit`` (the first N instances) below 1 when the step graph is built: a slice
    would drop the last instances for a negative one, and none would be left for 0."""
    if limit is not None and limit < 1:
        raise ConfigurationError(f"{name} must be at least 1 (the first {name} instances), got {limit}: "
                                 "leave it out for the whole split")


def check_split(setting: str, task: Any, split: Optional[str]) -> None:
    """Refuses, when the step graph is built, a split ``task`` does not have (a typo would fail
    only when the step runs)."""
    if isinstance(task, Task) and split is not None and split not in task.splits:
        raise ConfigurationError(
            f"{setting}: {type(task).__name__} has no split {split!r} (have: {', '.join(task.splits)})"
        )


def check_prompts(task: Any, split: Optional[str], chat: bool) -> None:
    """Refuses, when the step graph is built, a split whose rows cannot be prompted so (chat data
    without a template: :meth:`Task.check_prompts`)."""
    if isinstance(task, Task) and split is not None and split in task.splits:
        task.check_prompts(split, chat)


def holds_conversations(task: Any, split: Optional[str]) -> bool:
    """Whether ``split``'s rows, as far as the graph build can see, are conversations, which only
    a chat template turns into prompts (:meth:`Task.holds_conversations`)."""
    return isinstance(task, Task) and split is not None and split in task.splits and task.holds_conversations(split)


class Task(Registrable, CustomDetHash):
    """A task read from the HF hub or from local files, as instances of one request type.

    Subclasses say which hub dataset holds the task (``HUB_ID``, ``HUB_CONFIG``, ``HUB_SPLITS``)
    and how rows become instances (:meth:`instances`). ``data_files`` (``{split: path}``)
    replaces the hub copy with local jsonl/json/csv/parquet files of the same fields, which is
    how everything runs offline. :meth:`data_source` is what the data *is*, for cache keys: the
    hub id, config and revision, or the sha256 of each local file.
    """

    #: ``"multiple_choice"``, ``"generate_until"`` or ``"loglikelihood_rolling"``
    #: (lm-evaluation-harness's names): which computation answers this task's instances.
    REQUEST_TYPE: str
    HUB_ID: Optional[str] = None  # None: local data_files only
    HUB_CONFIG: Optional[str] = None
    #: Hub split name for each of our split names.
    HUB_SPLITS: Mapping[str, str] = {"train": "train", "validation": "validation"}

    @classmethod
    def register(  # type: ignore[override]
        cls, name: str, constructor: Optional[str] = None, exist_ok: bool = False
    ) -> Callable[[Type[_T]], Type[_T]]:
        """Registers a task under ``name`` in :class:`Task`'s registry and in that of every task
        class between it and ``cls`` (``MultipleChoiceTask.register`` fills both registries)."""
        kinds = [kind for kind in cls.__mro__ if isinstance(kind, type) and issubclass(kind, Task)]
        registrations = [super(Task, kind).register(name, constructor, exist_ok) for kind in kinds]

        def add(subclass: Type[_T]) -> Type[_T]:
            for registration in registrations:
                registration(subclass)
            return subclass

        return add

    def __init__(
        self, data_files: Optional[Dict[str, str]] = None, hub_id: Optional[str] = None, revision: Optional[str] = None
    ) -> None:
        self.hub_id = hub_id or self.HUB_ID
        self.revision = revision
        self.data_files = {split: Path(path) for split, path in (data_files or {}).items()}
        for split, path in self.data_files.items():
            if not path.is_file():
                raise ConfigurationError(f"{type(self).__name__}: data file for split '{split}' not found: {path}")

    @property
    def splits(self) -> Sequence[str]:
        return list(self.data_files) if self.data_files else list(self.HUB_SPLITS)

    def check_prompts(self, split: str, chat: bool) -> None:
        """Raises where ``split``'s rows, as far as the graph build can see, cannot be prompted
        with a chat template (``chat``) or without one. Any row can, unless a task says otherwise."""

    def holds_conversations(self, split: str) -> bool:
        """Whether ``split``'s rows are conversations, as far as the graph build can see: none
        are, unless a task says otherwise."""
        return False

    def data_source(self) -> Any:
        """What the data is, for the cache key: local files by content, hub data by name."""
        if self.data_files:
            return {split: remembered_sha256_of_file(path) for split, path in sorted(self.data_files.items())}
        return (self.hub_id, self.HUB_CONFIG, self.revision)

    def instances(self, split: str, limit: Optional[int] = None) -> List[Any]:
        """The instances of ``split`` in file order, the first ``limit`` of them if given; a bad
        row raises a :class:`~.instance.DataError` naming it, before any model is loaded."""
        raise NotImplementedError

    def load_rows(self, split: str) -> Tuple["datasets.Dataset", str]:
        """The rows of ``split`` and a name for where they come from (for error messages)."""
        if self.data_files:
            if split not in self.data_files:
                raise ConfigurationError(
                    f"{type(self).__name__}: no data file for split '{split}' (have: {', '.join(self.data_files)})"
                )
            return load_local_rows(self.data_files[split], split)
        if self.hub_id is None:
            raise ConfigurationError(f"{type(self).__name__} has no hub copy: give data_files")
        if split not in self.HUB_SPLITS:
            raise ConfigurationError(
                f"{type(self).__name__}: unknown split '{split}' (have: {', '.join(self.HUB_SPLITS)})"
            )
        import datasets

        hub_split = self.HUB_SPLITS[split]
        try:
            rows = datasets.load_dataset(self.hub_id, self.HUB_CONFIG, split=hub_split, revision=self.revision)
        except Exception as e:
            reason = hub_failure("dataset", self.hub_id, e, LOCAL_DATA, repo_type="dataset")
            if reason is None:
                raise
            raise ConfigurationError(reason) from e
        return rows, f"hub dataset {self.hub_id} ({hub_split} split)"
