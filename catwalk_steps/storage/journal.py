"""An append-only record of finished work in a step's work dir, so that a killed step resumes
where it stopped instead of starting over."""

import json
import os
from pathlib import Path
from typing import Any, Dict, Iterable, Tuple

from .atomic import publish_file
from .space import reporting_full_disk


class Journal:
    """``{key: value}`` pairs appended as JSON lines after a header naming the work they belong
    to. Entries written for other work are discarded, and a line torn by a kill (or a full disk)
    is cut off. The header is published (:func:`.atomic.publish_file`): a journal starts whole."""

    def __init__(self, path: Path, work: str) -> None:
        self.path, self.work = path, work

    def load(self) -> Dict[int, Any]:
        """The entries recorded for this work; afterwards the file holds exactly those, so that
        appends start on a line of their own."""
        header = (json.dumps({"work": self.work}) + "\n").encode()
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        if not data.startswith(header):
            publish_file(self.path, lambda temp: temp.write_bytes(header))
            return {}
        entries: Dict[int, Any] = {}
        kept = len(header)
        for line in data[kept:].splitlines(keepends=True):
            try:
                if not line.endswith(b"\n"):
                    raise ValueError("no line end")
                key, value = json.loads(line)
            except ValueError:
                break  # the last line, cut short when the process was killed
            entries[key] = value
            kept += len(line)
        if kept < len(data):
            with open(self.path, "r+b") as f:
                f.truncate(kept)
                os.fsync(f.fileno())
        return entries

    def append(self, entries: Iterable[Tuple[int, Any]]) -> None:
        """Appends ``entries`` and flushes them to the disk before returning: what a run has
        journaled survives it. On a full disk at most a torn last line is left, which
        :meth:`load` cuts off."""
        lines = "".join(json.dumps([key, value]) + "\n" for key, value in entries).encode()
        with reporting_full_disk(self.path, needed=len(lines)), open(self.path, "ab") as f:
            f.write(lines)
            f.flush()
            os.fsync(f.fileno())
