"""The multiple-choice task abstraction: every task turns its rows into :class:`MCInstance` objects."""

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import datasets
from tango.common import Registrable
from tango.common.det_hash import CustomDetHash
from tango.common.exceptions import ConfigurationError


@dataclass(frozen=True)
class MCInstance:
    """One multiple-choice question in rank-classification form: the model scores each
    ``context + continuation`` and the highest log-likelihood wins."""

    id: str
    context: str
    continuations: List[str]
    label: int


class DataError(ValueError):
    """A data row that cannot become an instance. The message names the source, row and field."""


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

    The cache key of a task (``det_hash_object``) is its registered name, its prompt
    ``VERSION`` and *what the data is*: the hub id and revision, or the sha256 of each local
    file. Moving a file does not retrain a model; editing one does.
    """

    VERSION = "1"
    HUB_ID: str
    #: Hub split name for each of our split names.
    HUB_SPLITS: Mapping[str, str] = {"train": "train", "validation": "validation"}

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
                raise ConfigurationError(f"{self.name}: data file for split '{split}' not found: {path}")

    @property
    def name(self) -> str:
        return next(
            (name for name, (cls, _) in Registrable._registry[MultipleChoiceTask].items() if cls is type(self)),
            type(self).__name__,
        )

    @property
    def splits(self) -> Sequence[str]:
        return list(self.data_files) if self.data_files else list(self.HUB_SPLITS)

    def det_hash_object(self) -> Any:
        if self.data_files:
            source: Any = {split: sha256_of_file(path) for split, path in sorted(self.data_files.items())}
        else:
            source = (self.hub_id, self.revision)
        return (self.name, self.VERSION, source)

    def instances(self, split: str, limit: Optional[int] = None) -> List[MCInstance]:
        """The instances of ``split`` in file order, the first ``limit`` of them if given."""
        rows, source = self._load_rows(split)
        if limit is not None:
            rows = rows.select(range(min(limit, len(rows))))
        return [self._checked_instance(row, index, split, source) for index, row in enumerate(rows)]

    def _load_rows(self, split: str):
        if self.data_files:
            if split not in self.data_files:
                raise ConfigurationError(
                    f"{self.name}: no data file for split '{split}' (have: {', '.join(self.data_files)})"
                )
            path = self.data_files[split]
            builder = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}.get(path.suffix)
            if builder is None:
                raise ConfigurationError(f"{path}: unsupported data file type (use .jsonl, .json, .csv or .parquet)")
            return datasets.load_dataset(builder, data_files={split: str(path)}, split=split), str(path)
        if split not in self.HUB_SPLITS:
            raise ConfigurationError(f"{self.name}: unknown split '{split}' (have: {', '.join(self.HUB_SPLITS)})")
        rows = datasets.load_dataset(self.hub_id, split=self.HUB_SPLITS[split], revision=self.revision)
        return rows, f"hub dataset {self.hub_id} ({self.HUB_SPLITS[split]} split)"

    def _checked_instance(self, row: Dict[str, Any], index: int, split: str, source: str) -> MCInstance:
        def field(name: str, kind: type = str) -> Any:
            value = row.get(name)
            if value is None or value == "" or not isinstance(value, kind) or isinstance(value, bool):
                raise DataError(
                    f"{source}: row {index + 1}: field '{name}' is missing or not a {kind.__name__} "
                    f"(got {value!r})"
                )
            return value

        instance = self.row_to_instance(field, f"{split}/{index}")
        if not 0 <= instance.label < len(instance.continuations):
            raise DataError(
                f"{source}: row {index + 1}: field '{self.LABEL_FIELD}' must be in "
                f"[0, {len(instance.continuations) - 1}], got {instance.label}"
            )
        return instance

    LABEL_FIELD = "label"

    def row_to_instance(self, field, instance_id: str) -> MCInstance:
        """Build the instance from a row; ``field(name, kind)`` returns a checked field value."""
        raise NotImplementedError
