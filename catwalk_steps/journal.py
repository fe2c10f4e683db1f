"""An append-only record of finished work in a step's work dir, so that a killed step resumes
where it stopped instead of starting over."""

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Dict, Iterable, Tuple


def fingerprint(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


class Journal:
    """``{key: value}`` pairs appended as JSON lines after a header naming the work they belong
    to. Entries written for other work are discarded, and a line torn by a kill is ignored."""

    def __init__(self, path: Path, work: str) -> None:
        self.path, self.work = path, work

    def load(self) -> Dict[int, Any]:
        entries: Dict[int, Any] = {}
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            lines = []
        if not lines or lines[0] != json.dumps({"work": self.work}):
            self.path.write_text(json.dumps({"work": self.work}) + "\n")
            return entries
        for line in lines[1:]:
            try:
                key, value = json.loads(line)
            except ValueError:
                break  # the last line, cut short when the process was killed
            entries[key] = value
        return entries

    def append(self, entries: Iterable[Tuple[int, Any]]) -> None:
        with open(self.path, "a") as f:
            f.write("".join(json.dumps([key, value]) + "\n" for key, value in entries))
            f.flush()
            os.fsync(f.fileno())
