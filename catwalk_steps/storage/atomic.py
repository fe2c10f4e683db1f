"""How anything reaches the disk: one publish for a file (:func:`publish_file`) and one for a
directory (:func:`publish_dir`). Either is written under a temporary name beside its target, its
files are fsynced, it is renamed into place, and the parent directory is fsynced, so that a run
killed, or a machine cut off, at any moment leaves the old version or the complete new one, never
a torn one, and the rename itself survives a crash. A full disk met on the way fails with one line
naming the path (:class:`.space.DiskFullError`), and the temporary file is removed.

Tango marks a cache entry complete only after its format's ``write`` returns (see
:mod:`..tango_fixes.durable_cache_entries`), so a format that publishes each file is complete on
disk before that."""

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Optional

from tango.common.aliases import PathOrStr
from tango.format import Format

from ..tango_fixes.class_paths import keep_class_path
from ..tango_fixes.damaged_entries import CorruptCacheError
from .space import reporting_full_disk


def temp_beside(path: Path) -> Path:
    """Where ``path`` is written before it is published: beside it (the rename stays on one
    filesystem), hidden, and the same for the next run, which replaces what a killed one left."""
    return path.with_name(f".{path.name}.tmp")


def fsync_path(path: Path) -> None:
    """Flushes a file's data, or a directory's entries, to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _commit(temp: Path, path: Path) -> None:
    """The last move of every publish: the rename, made durable."""
    os.replace(temp, path)
    fsync_path(path.parent)


def publish_file(path: Path, write: Callable[[Path], Any], needed: Optional[int] = None) -> None:
    """Calls ``write`` on :func:`temp_beside` ``path``, then publishes it as ``path``. ``needed``
    (bytes, if known) is said in the message if the disk is full."""
    temp = temp_beside(path)
    try:
        with reporting_full_disk(path, needed):
            write(temp)
            fsync_path(temp)
            _commit(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def publish_text(path: Path, text: str) -> None:
    """Publishes ``text`` as the file ``path`` (UTF-8)."""
    data = text.encode()
    publish_file(path, lambda temp: temp.write_bytes(data), needed=len(data))


def fresh_temp_dir(path: Path) -> Path:
    """An empty directory at :func:`temp_beside` ``path`` (whatever a killed run left there is
    removed), for one or several workers to write ``path`` into before :func:`publish_dir`."""
    temp = temp_beside(path)
    shutil.rmtree(temp, ignore_errors=True)
    temp.mkdir(parents=True)
    return temp


def publish_dir(path: Path, needed: Optional[int] = None) -> None:
    """Publishes the directory written at :func:`temp_beside` ``path`` (see :func:`fresh_temp_dir`)
    as ``path``, replacing the directory there."""
    temp = temp_beside(path)
    with reporting_full_disk(path, needed):
        for written in temp.rglob("*"):
            fsync_path(written)
        fsync_path(temp)
        shutil.rmtree(path, ignore_errors=True)  # a kill from here to the rename loses the old one only
        _commit(temp, path)


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
        publish_text(Path(dir) / self.FILE, json.dumps(artifact, indent=1))

    def read(self, dir: PathOrStr) -> Any:
        return read_json(Path(dir) / self.FILE)
