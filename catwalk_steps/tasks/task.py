"""The multiple-choice task abstraction: every task turns its rows into :class:`MCInstance` objects."""

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import datasets
from tango.common import Registrable
from tango.common.det_hash import CustomDetHash
from tango.common.exceptions import ConfigurationError


@dataclass(frozen=True)
class MCInstance:
    """One multiple-choice question in rank-classification form: the model scores each
    (context, continuation) pair and the highest log-likelihood wins.

    Most tasks share one ``context`` between all ``continuations``; tasks such as Winogrande
    vary the context instead and give ``choice_contexts``, one per continuation.
    """

    id: str
    context: str
    continuations: List[str]
    label: int
    choice_contexts: Optional[List[str]] = None

    def pairs(self) -> List[Tuple[str, str]]:
        contexts = self.choice_contexts or [self.context] * len(self.continuations)
        return list(zip(contexts, self.continuations))


class DataError(ValueError):
    """A data row that cannot become an instance. The message names the source, row and field."""


class Row:
    """One data row, whose fields come out checked: an error names the source, row and field."""

    def __init__(self, data: Mapping[str, Any], source: str, number: int) -> None:
        self.data, self.source, self.number = data, source, number

    def error(self, name: str, problem: str) -> DataError:
        return DataError(f"{self.source}: row {self.number}: field '{name}' {problem}")

    def get(self, name: str, kind: type = str) -> Any:
        value = self.data.get(name)
        if value is None or value == "" or not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.error(name, f"is missing or not a {kind.__name__} (got {value!r})")
        return value

    def text(self, name: str) -> str:
        """An optional text field: empty when absent."""
        value = self.data.get(name)
        if value is not None and not isinstance(value, str):
            raise self.error(name, f"is not a str (got {value!r})")
        return value or ""

    def index_of(self, name: str, options: Sequence[Any]) -> int:
        """The position of field ``name``'s value among ``options``."""
        value = self.data.get(name)
        if value not in options:
            raise self.error(name, f"must be one of {list(options)}, got {value!r}")
        return list(options).index(value)


def sha256_of_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class MultipleChoiceTask(Registrable, CustomDetHash):
    """A multiple-choice task read from the HF hub or from local files.

    Subclasses say which hub dataset holds the task and how one row becomes an
    :class:`MCInstance`. ``data_files`` (``{split: path}``) replaces the hub copy with local
    jsonl/json/csv/parquet files of the same fields, which is how everything runs offline.

    The cache key of a task (``det_hash_object``) is its class, its prompt ``VERSION``, its
    settings and *what the data is*: the hub id and revision, or the sha256 of each local
    file. Moving a file does not retrain a model; editing one does.
    """

    VERSION = "1"
    HUB_ID: Optional[str] = None  # None: local data_files only
    HUB_CONFIG: Optional[str] = None
    #: Hub split name for each of our split names.
    HUB_SPLITS: Mapping[str, str] = {"train": "train", "validation": "validation"}
    #: The field whose value gives the gold index, named when it is out of range.
    LABEL_FIELD = "label"
    #: A context that carries no question, e.g. "Answer:", for tasks whose prompt ends in it.
    #: Scoring each continuation after it too gives ``acc_uncond``: choices ranked by how much
    #: the question raises their log-likelihood (lm-evaluation-harness's ``acc_mutual_info``).
    UNCONDITIONED_CONTEXT: Optional[str] = None

    def __init__(
        self,
        data_files: Optional[Dict[str, str]] = None,
        hub_id: Optional[str] = None,
        revision: Optional[str] = None,
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

    def settings(self) -> Any:
        """What else, besides the data, decides the instances (for the cache key)."""
        return None

    def det_hash_object(self) -> Any:
        if self.data_files:
            source: Any = {split: sha256_of_file(path) for split, path in sorted(self.data_files.items())}
        else:
            source = (self.hub_id, self.HUB_CONFIG, self.revision)
        return (type(self).__name__, self.VERSION, self.settings(), source)

    def instances(self, split: str, limit: Optional[int] = None) -> List[MCInstance]:
        """The instances of ``split`` in file order, the first ``limit`` of them if given."""
        rows, source = self._load_rows(split)
        if limit is not None:
            rows = rows.select(range(min(limit, len(rows))))
        return [self._checked_instance(Row(row, source, n + 1), f"{split}/{n}") for n, row in enumerate(rows)]

    def _load_rows(self, split: str):
        if self.data_files:
            if split not in self.data_files:
                raise ConfigurationError(
                    f"{type(self).__name__}: no data file for split '{split}' (have: {', '.join(self.data_files)})"
                )
            path = self.data_files[split]
            builder = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}.get(path.suffix)
            if builder is None:
                raise ConfigurationError(f"{path}: unsupported data file type (use .jsonl, .json, .csv or .parquet)")
            return datasets.load_dataset(builder, data_files={split: str(path)}, split=split), str(path)
        if self.hub_id is None:
            raise ConfigurationError(f"{type(self).__name__} has no hub copy: give data_files")
        if split not in self.HUB_SPLITS:
            raise ConfigurationError(
                f"{type(self).__name__}: unknown split '{split}' (have: {', '.join(self.HUB_SPLITS)})"
            )
        hub_split = self.HUB_SPLITS[split]
        rows = datasets.load_dataset(self.hub_id, self.HUB_CONFIG, split=hub_split, revision=self.revision)
        return rows, f"hub dataset {self.hub_id} ({hub_split} split)"

    def _checked_instance(self, row: Row, instance_id: str) -> MCInstance:
        instance = self.row_to_instance(row, instance_id)
        if not 0 <= instance.label < len(instance.continuations):
            raise row.error(
                self.LABEL_FIELD, f"must be in [0, {len(instance.continuations) - 1}], got {instance.label}"
            )
        return instance

    def row_to_instance(self, row: Row, instance_id: str) -> MCInstance:
        """Build the instance from a row; ``row.get(name, kind)`` returns a checked field."""
        raise NotImplementedError
