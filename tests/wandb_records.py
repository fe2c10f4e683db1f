"""Reads back what W&B wrote offline: a run's ``.wandb`` file is LevelDB's log format (32 KiB
blocks of checksummed records, FULL or FIRST/MIDDLE.../LAST fragments, after a 7-byte ``:W&B``
header) holding protobuf ``Record`` messages (``wandb.proto.wandb_internal_pb2``). wandb's own
reader is internal (``wandb.sdk.internal``), so the tests read the documented format themselves."""

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List

BLOCK = 32768
HEADER = struct.Struct("<IHB")  # crc32 of type and data, length, type
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> List[Any]:
    from wandb.proto.wandb_internal_pb2 import Record

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    position, pieces, found = 7, [], []
    while position + HEADER.size <= len(data):
        if BLOCK - position % BLOCK < HEADER.size:  # a block's tail too short for a header is padding
            position += BLOCK - position % BLOCK
            continue
        checksum, length, kind = HEADER.unpack_from(data, position)
        payload = data[position + HEADER.size:position + HEADER.size + length]
        if kind == 0 and length == 0:
            break  # zeros past the last record
        assert zlib.crc32(payload, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF == checksum, "damaged record"
        position += HEADER.size + length
        pieces.append(payload)
        if kind in (FULL, LAST):
            record = Record()
            record.ParseFromString(b"".join(pieces))
            found.append(record)
            pieces = []
    return found


@dataclass
class OfflineRun:
    """One offline run's ``.wandb`` file, decoded."""

    run_id: str = ""
    project: str = ""
    name: str = ""
    group: str = ""
    tags: List[str] = field(default_factory=list)
    config: Dict[str, Any] = field(default_factory=dict)
    history: List[Dict[str, Any]] = field(default_factory=list)  # each row with its "_step"
    summary: Dict[str, Any] = field(default_factory=dict)
    exit_code: int = -1

    @classmethod
    def read(cls, path: Path) -> "OfflineRun":
        run = cls()
        for record in records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run.run_id, run.project = record.run.run_id, record.run.project
                run.name, run.group, run.tags = record.run.display_name, record.run.run_group, list(record.run.tags)
                run.config.update({item.key: json.loads(item.value_json) for item in record.run.config.update})
            elif kind == "config":
                run.config.update({item.key: json.loads(item.value_json) for item in record.config.update})
            elif kind == "history":
                row = {"/".join(item.nested_key) or item.key: json.loads(item.value_json) for item in record.history.item}
                run.history.append(row)
            elif kind == "summary":
                run.summary.update({"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in record.summary.update})
            elif kind == "exit":
                run.exit_code = record.exit.exit_code
        return run

    def series(self, name: str) -> List[List[Any]]:
        """``[[step, value], ...]`` of one logged number, in history's form."""
        return [[row["_step"], row[name]] for row in self.history if name in row]


def offline_runs(wandb_dir: Path) -> List[OfflineRun]:
    """Every offline run under ``wandb_dir`` (``offline-run-<time>-<id>/run-<id>.wandb``), oldest first."""
    return [OfflineRun.read(path) for path in sorted(wandb_dir.glob("**/offline-run-*/run-*.wandb"))]
