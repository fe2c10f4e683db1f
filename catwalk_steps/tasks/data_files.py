"""Reading a local data file (jsonl, json, csv, parquet) into rows. The file is checked first,
line by line, so that a bad one is reported as a :class:`DataError` naming the file, the line and
what to fix, not as an exception from inside ``datasets`` or pyarrow without either."""

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

from tango.common.exceptions import ConfigurationError

from .instance import DataError, Source

if TYPE_CHECKING:
    import datasets

BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
ONE_OBJECT_PER_LINE = 'each line must hold one JSON object, {"field": value, ...}'
CUT_OFF = "it ends before its JSON value does, so it was probably cut off (an interrupted download, copy or write)"


def _json_type(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(value), "null")


def _text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line, line_start = data.count(b"\n", 0, e.start) + 1, data.rfind(b"\n", 0, e.start) + 1
        raise DataError(
            f"{path}: line {line}: byte 0x{data[e.start]:02x} at column {e.start - line_start + 1} is not UTF-8: "
            "save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
        ) from None


def _cut_off(error: json.JSONDecodeError, text: str) -> bool:
    """Whether ``text`` failed to parse because it ended (strings cannot hold a raw line break,
    so an unterminated one ran to the end)."""
    return error.msg.startswith("Unterminated string") or error.pos >= len(text.rstrip())


def _check_json_lines(path: Path, text: str) -> List[int]:
    """The file line of each row (blank lines hold none)."""
    lines = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            if _cut_off(e, line):
                fix = f"{CUT_OFF}: restore the file, or delete the incomplete line"
            else:
                fix = f"fix the line ({ONE_OBJECT_PER_LINE})"
            raise DataError(f"{path}: line {number}: not valid JSON ({e.msg}; column {e.colno}): {fix}") from None
        if not isinstance(value, dict):
            raise DataError(
                f"{path}: line {number}: a JSON {_json_type(value)} where a row is expected: {ONE_OBJECT_PER_LINE}"
            )
        lines.append(number)
    return lines


def _check_json(path: Path, text: str) -> List[int]:
    """A ``.json`` file holds one array of objects, or, like ``.jsonl``, one object per line."""
    if not text.lstrip().startswith("["):
        return _check_json_lines(path, text)
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as e:
        fix = f"{CUT_OFF}: restore the file" if _cut_off(e, text) else (
            "fix it (the file must hold one JSON array of objects, or one object per line)"
        )
        raise DataError(f"{path}: line {e.lineno}: not valid JSON ({e.msg}; column {e.colno}): {fix}") from None
    for number, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise DataError(f"{path}: item {number} of the array is a JSON {_json_type(row)}: every item must be "
                            'an object, {"field": value, ...}')
    if not rows:
        raise DataError(f"{path}: the array is empty: it must hold one object per row")
    return _item_lines(text)


def _item_lines(text: str) -> List[int]:
    """The line each item of a (valid) JSON array starts on."""
    decoder, lines = json.JSONDecoder(), []
    position = text.index("[") + 1
    while True:
        while text[position] in " \t\r\n,":
            position += 1
        if text[position] == "]":
            return lines
        lines.append(text.count("\n", 0, position) + 1)
        position = decoder.raw_decode(text, position)[1]


def _check_csv(path: Path, text: str) -> List[int]:
    """The line each data row starts on (a quoted field may hold line breaks)."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header, lines, start = None, [], 1
    try:
        for row in reader:
            row_start, start = start, reader.line_num + 1
            if not row:  # a blank line, skipped by the reader datasets uses too
                continue
            if header is None:
                header = row
                continue
            if len(row) != len(header):
                raise DataError(
                    f"{path}: line {reader.line_num}: {len(row)} fields where the header has {len(header)}: quote "
                    'a text field that holds a comma ("...") and give every row every column'
                )
            lines.append(row_start)
    except csv.Error as e:
        raise DataError(f"{path}: line {reader.line_num}: not valid CSV ({e}): close or escape (\"\") the quote") from None
    return lines


def check_data_file(path: Path) -> Optional[List[int]]:
    """The file line of each row (None for parquet). Raises a :class:`DataError` naming ``path``,
    the line and what to fix if it cannot be rows: empty, not UTF-8, a line that is not JSON (a
    cut-off last line among them), a JSON value that is not an object, a CSV row with the wrong
    number of fields."""
    data = path.read_bytes()
    if not data.strip():
        raise DataError(f"{path}: the file is empty: it must hold the split's rows (was it cut off or not yet written?)")
    if path.suffix == ".parquet":  # binary: datasets's reader says what is wrong (load_local_rows)
        return None
    text = _text(path, data)
    return {".jsonl": _check_json_lines, ".json": _check_json, ".csv": _check_csv}[path.suffix](path, text)


def load_local_rows(path: Path, split: str) -> Tuple["datasets.Dataset", Source]:
    """The rows of a local data file, checked (:func:`check_data_file`) before ``datasets`` reads
    it, and the file as their :class:`~.instance.Source` (with each row's line)."""
    import datasets

    builder = BUILDERS.get(path.suffix)
    if builder is None:
        raise ConfigurationError(f"{path}: unsupported data file type (use .jsonl, .json, .csv or .parquet)")
    lines = check_data_file(path)
    try:
        rows = datasets.load_dataset(builder, data_files={split: str(path)}, split=split)
    except Exception as e:  # what datasets and pyarrow raise varies by version; the innermost says why
        cause = e
        while cause.__cause__ is not None or (cause.__context__ is not None and not cause.__suppress_context__):
            cause = cause.__cause__ or cause.__context__
        fix = "write the file again: it is damaged or not parquet" if builder == "parquet" else (
            "give every row the same fields, each holding values of one type (a field that is a number in one row "
            "and a list or object in another cannot be one column)"
        )
        raise DataError(
            f"{path}: datasets cannot read it as {builder} ({type(cause).__name__}: {cause}): {fix}"
        ) from e
    return rows, Source(str(path), lines if lines is not None and len(lines) == len(rows) else None)
