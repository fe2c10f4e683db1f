"""An append-only record of finished work in a step's work dir, so that a killed step resumes
where it stopped instead of starting over."""

import json
import os
from pathlib import Path
from typing import Any, Dict, Iterable, Tuple


class Journal:
    """``{key: value}`` pairs appended as JSON lines after a header naming the work they belong
    to. Entries written for other work are discarded, and a line torn by a kill is cut off."""

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
            self.path.write_bytes(header)
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
        return entries

    def append(self, entries: Iterable[Tuple[int, Any]]) -> None:
        with open(self.path, "a") as f:
            f.write("".join(json.dumps([key, value]) + "\n" for key, value in entries))
            f.flush()
            os.fsync(f.fileno())
