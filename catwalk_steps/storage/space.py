"""Disk space, as a user meets it: a write that fills the disk fails with one line naming the path,
the space free and, where known, the space needed (:class:`DiskFullError`); and a run checks
before it starts that its directories are writable and have room for what it will write
(:func:`check_room`), instead of failing an hour in.

On a cluster the shared filesystem fills up; a raw ``OSError: [Errno 28]`` from deep inside a
checkpoint writer (torch's own wraps it in a multi-line ``CheckpointException``) says neither
where nor what to do.
"""

import errno
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, Optional

from ..tango_fixes.one_line_errors import shown_in_one_line

#: A full filesystem, or a user's quota spent.
FULL = {errno.ENOSPC, errno.EDQUOT}


def human_bytes(n: float) -> str:
    """``n`` bytes for people: ``512 B``, ``1.5 MiB``, ``3.6 GiB``."""
    if abs(n) < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if abs(n) < 1024:
            break
    else:
        n, unit = n / 1024, "TiB"
    return f"{n:.1f} {unit}"


def _existing(path: Path) -> Path:
    """``path``, or its nearest ancestor that exists (what a directory to be made will live on)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: Path) -> int:
    """Bytes this user may still write on the filesystem of ``path``."""
    return shutil.disk_usage(_existing(path)).free


def disk_bytes(directory: Path) -> int:
    """Bytes of the files under ``directory`` (none if it is missing), each file once however
    many names it has (hard links)."""
    seen, total = set(), 0
    for path in Path(directory).rglob("*"):
        stat = path.lstat()
        if path.is_file() and stat.st_ino not in seen:
            seen.add(stat.st_ino)
            total += stat.st_size
    return total


class _OneLineError(OSError):
    """An ``OSError`` (code catching those still does) whose message is its one line, without
    the ``[Errno N]`` prefix."""

    def __str__(self) -> str:
        return self.strerror


@shown_in_one_line
class DiskFullError(_OneLineError):
    """Writing ``path`` failed because its filesystem is full (or the quota spent)."""

    def __init__(self, path: Path, needed: Optional[int] = None) -> None:
        self.path, self.needed, self.free = Path(path), needed, free_bytes(path)
        needs = f", about {human_bytes(needed)} needed" if needed else ""
        super().__init__(
            errno.ENOSPC,
            f"Disk full: cannot write {path} ({human_bytes(self.free)} free on its filesystem{needs}). Free space "
            "there, or use a workspace on a larger filesystem, and run again: completed work (checkpoints, "
            "journals, cached steps) is kept",
            str(path),
        )

    def __reduce__(self):
        return type(self), (self.path, self.needed)


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error``, or an error it wraps (its cause or context, or a failure that torch's
    distributed checkpoint collected from a worker), is a full disk."""
    seen, todo = set(), [error]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in FULL:
            return True
        todo += [e.__cause__, e.__context__]
        todo += [failure for failure, _ in getattr(e, "failures", {}).values()]  # CheckpointException
    return False


@contextmanager
def reporting_full_disk(path: Path, needed: Optional[int] = None) -> Iterator[None]:
    """Turns a full disk met inside the block into a :class:`DiskFullError` for ``path`` (what
    was being written, ``needed`` bytes if known); every other error passes unchanged.

    torch's zip writer (under ``torch.save`` and DCP) loses the errno: a full disk there is a
    ``RuntimeError: ... unexpected pos``. So an error raised while less than ``needed`` is free
    is taken for a full disk too (the original stays chained to it)."""
    try:
        yield
    except DiskFullError:
        raise
    except BaseException as e:  # torch's CheckpointException is a BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)) or not (
            is_disk_full(e) or (needed is not None and free_bytes(path) < needed)
        ):
            raise
        raise DiskFullError(path, needed) from e


@shown_in_one_line
class NotEnoughSpaceError(_OneLineError):
    """A run would not fit on its filesystem (found before it started)."""


def check_room(needs: Dict[Path, int], what: str) -> None:
    """Checks that each directory of ``needs`` is writable (making it if missing) and that each
    filesystem has room for the bytes its directories need together; else raises, saying what
    ``what`` (the run, for people) needs against what is free, and how to fix it."""
    by_device: Dict[int, Dict[Path, int]] = {}
    for directory, needed in needs.items():
        directory = Path(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            probe = directory / f".space-probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise NotEnoughSpaceError(e.errno, f"{directory} is not a writable directory ({e.strerror}): {what} "
                                              "cannot write its results there") from None
        by_device.setdefault(directory.stat().st_dev, {})[directory] = needed
    for directories in by_device.values():
        needed, first = sum(directories.values()), next(iter(directories))
        free = free_bytes(first)
        if needed > free:
            raise NotEnoughSpaceError(
                errno.ENOSPC,
                f"Not enough disk space: {what} will write up to {human_bytes(needed)} into "
                f"{', '.join(map(str, directories))}, and its filesystem has {human_bytes(free)} free. Free "
                f"{human_bytes(needed - free)} there, or run with a workspace on a larger filesystem (tango run -w DIR)",
            )
