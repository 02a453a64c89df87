"""Seed situations ("inspirational prompts") for scenario generation, and the record of seeds already used.

Seeds come from JSONL (one object per line; ``column`` names the text field, or each line is a JSON
string), CSV (``column`` names the header), or plain text (one seed per line). Each seed is identified by
a hash of its *normalised* text (Unicode NFKC, case-folded, non-alphanumerics dropped, whitespace
collapsed), so seeds differing only in case, punctuation or spacing count as one.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from sotopia_env.errors import UserError
from sotopia_env.jsonl import json_lines

USED_SEEDS_FILE = ".used_seeds.jsonl"
_NON_WORD = re.compile(r"[^\w]+")


class SeedFileError(UserError, ValueError):
    """The seed file cannot be read. The message names file and line."""


def normalise(text: str) -> str:
    """Case-folded words of ``text`` joined by single spaces (punctuation dropped)."""
    text = unicodedata.normalize("NFKC", text).casefold().replace("_", " ")
    return " ".join(_NON_WORD.sub(" ", text).split())


def seed_hash(text: str) -> str:
    """16 hex digits of the SHA-256 of the normalised text."""
    return hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Seed:
    """One situation, where it came from, and its identity."""

    text: str
    file: str
    line: int

    @property
    def key(self) -> str:
        return seed_hash(self.text)

    @property
    def label(self) -> str:
        """The scenario's ``source``: ``<dir>/<file>#<line>: <first 80 characters>``."""
        head = " ".join(self.text.split())
        head = head if len(head) <= 80 else head[:79] + "…"
        return f"{self.file}#{self.line}: {head}"


def _rows(path: Path, column: str) -> Iterator[tuple[int, object]]:
    suffix = path.suffix.lower()
    with path.open(encoding="utf-8", newline="") as fh:
        if suffix == ".csv":
            reader = csv.DictReader(fh)
            if reader.fieldnames is None or column not in reader.fieldnames:
                found = ", ".join(reader.fieldnames or []) or "none"
                raise SeedFileError(f"{path}: no column {column!r} (columns: {found})")
            for row in reader:
                yield reader.line_num, row.get(column)
        elif suffix in (".jsonl", ".ndjson", ".json"):
            for where, obj in json_lines(path, SeedFileError, objects=False):
                n = int(where.rpartition(":")[2])
                if isinstance(obj, dict):
                    if column not in obj:
                        raise SeedFileError(f"{where}: no field {column!r} (fields: {', '.join(obj) or 'none'})")
                    yield n, obj[column]
                else:
                    yield n, obj
        else:
            for n, line in enumerate(fh, start=1):
                yield n, line


def read_seeds(path: str | Path, column: str = "context") -> list[Seed]:
    """Every non-empty seed of the file, in file order (duplicates kept; see ``dedupe``)."""
    path = Path(path)
    if not path.is_file():
        raise SeedFileError(f"{path}: no such file")
    where = f"{path.parent.name}/{path.name}" if path.parent.name else path.name
    seeds = []
    try:
        for line, value in _rows(path, column):
            if isinstance(value, str) and normalise(value):
                seeds.append(Seed(" ".join(value.split()), where, line))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise SeedFileError(f"{path}: cannot read seeds: {exc}") from None
    return seeds


def dedupe(seeds: Iterable[Seed]) -> tuple[list[Seed], int]:
    """The first seed of each normalised text, in order, and how many repeats were dropped."""
    seen: set[str] = set()
    out = []
    dropped = 0
    for seed in seeds:
        if seed.key in seen:
            dropped += 1
        else:
            seen.add(seed.key)
            out.append(seed)
    return out, dropped


class UsedSeeds:
    """``DIR/.used_seeds.jsonl``: one JSON line per seed already turned into a scenario (or a duplicate).

    A seed whose generation failed is not recorded, so a later run tries it again.
    """

    def __init__(self, out_dir: str | Path) -> None:
        self.path = Path(out_dir) / USED_SEEDS_FILE
        self.keys: set[str] = set()
        if self.path.is_file():
            for where, record in json_lines(self.path, SeedFileError):
                if "hash" not in record:
                    raise SeedFileError(f"{where}: not a used-seed record")
                self.keys.add(str(record["hash"]))

    def __contains__(self, seed: Seed) -> bool:
        return seed.key in self.keys

    def add(self, seed: Seed, status: str, scenario_id: str | None, model: str) -> None:
        record = {
            "hash": seed.key,
            "status": status,
            "scenario_id": scenario_id,
            "source": seed.label,
            "model": model,
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.keys.add(seed.key)
