"""Tasks whose instances are their rows, one each, in file order."""

from typing import Any, List, Optional

from .base import Task
from .instance import Row


class RowTask(Task):
    """A task that turns each row of a split into one instance (:meth:`row_instance`) and whose
    cache key is its class, its ``VERSION`` and its data: it has no prompt settings."""

    VERSION = "1"

    def det_hash_object(self) -> Any:
        return (type(self).__name__, self.VERSION, self.data_source())

    def instances(self, split: str, limit: Optional[int] = None) -> List[Any]:
        rows, source = self.load_rows(split)
        count = len(rows) if limit is None else min(limit, len(rows))
        return [self.row_instance(Row(rows[n], source, n + 1), f"{split}/{n}") for n in range(count)]

    def row_instance(self, row: Row, instance_id: str) -> Any:
        """Row ``row`` as an instance; ``row.get(name)`` returns a checked field."""
        raise NotImplementedError
