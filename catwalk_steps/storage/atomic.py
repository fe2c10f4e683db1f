"""Writing result files so that a run killed at any moment leaves either the old file or the
complete new one, never a torn one."""

import json
import os
from pathlib import Path
from typing import Any, Callable

from tango.common.aliases import PathOrStr
from tango.format import Format

from ..tango_fixes.class_paths import keep_class_path
from ..tango_fixes.damaged_entries import CorruptCacheError


def replace_atomically(path: Path, write: Callable[[Path], Any]) -> None:
    """Calls ``write`` on a temporary path beside ``path``, flushes it to disk, then renames it."""
    temp = path.with_name(path.name + ".tmp")
    try:
        write(temp)
        with open(temp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def read_json(path: Path) -> Any:
    """A JSON file of a complete cache entry: one that is missing or does not parse is damaged
    (the step is then computed again, see :mod:`..tango_fixes.damaged_entries`)."""
    try:
        return json.loads(path.read_bytes())
    except (FileNotFoundError, ValueError) as e:
        raise CorruptCacheError(f"{path} cannot be read as JSON ({e})") from e


@Format.register("catwalk::json")
@keep_class_path("catwalk_steps.atomic.AtomicJsonFormat")
class AtomicJsonFormat(Format[Any]):
    """Plain JSON, written atomically, read without importing or executing anything."""

    VERSION = "1"
    FILE = "data.json"

    def write(self, artifact: Any, dir: PathOrStr) -> None:
        replace_atomically(Path(dir) / self.FILE, lambda p: p.write_text(json.dumps(artifact, indent=1)))

    def read(self, dir: PathOrStr) -> Any:
        return read_json(Path(dir) / self.FILE)
