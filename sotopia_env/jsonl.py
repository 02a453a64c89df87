"""The one JSONL reader: numbered rows, and one-line errors that name ``file:line``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def json_lines(
    path: str | Path, error: type[Exception] = ValueError, objects: bool = True
) -> Iterator[tuple[str, Any]]:
    """``(file:line, value)`` for each non-blank line of ``path``, in order.

    A file that cannot be read, a line that is not UTF-8 or not JSON, and (with ``objects``) a value that is not
    a JSON object raise ``error`` with one line naming the file, or ``file:line``, and what is wrong.
    """
    path = Path(path)
    try:
        raw_lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise error(f"{path}: cannot read file: {exc.strerror or exc}") from None
    for number, raw in enumerate(raw_lines, 1):
        where = f"{path}:{number}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise error(f"{where}: not UTF-8 text") from None
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})") from None
        if objects and not isinstance(value, dict):
            raise error(f"{where}: expected a JSON object")
        yield where, value
