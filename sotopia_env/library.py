"""Loading and validating scenario, character and relationship YAML.

A library is a set of YAML files. Each file holds one or more of the top-level
keys ``scenarios``, ``characters`` and ``relationships``, each a list of
entries. Errors name the file, the entry and the field in one line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from sotopia_env.errors import UserError, did_you_mean
from sotopia_env.profiles import GAME_TAG, MULTI_PARTY_TAG, VERIFIABLE_TAG, Character, RelationshipProfile, Scenario
from sotopia_env.validation import field_problem

SECTIONS: dict[str, type[BaseModel]] = {
    "scenarios": Scenario,
    "characters": Character,
    "relationships": RelationshipProfile,
}

M = TypeVar("M", bound=BaseModel)
OPT_IN_TAGS = (VERIFIABLE_TAG, MULTI_PARTY_TAG, GAME_TAG)
LIST_HINT = "'sotopia-env scenarios list' lists the ids, tags and splits"


class LibraryError(UserError, ValueError):
    """A library file is malformed. The message names file, entry and field."""


def _entry_label(entry: object, index: int) -> str:
    if isinstance(entry, dict) and entry.get("id"):
        return f"entry {index} (id {entry['id']!r})"
    return f"entry {index}"


def read_yaml(path: Path, error: type[Exception] = ValueError) -> object:
    """Parse a YAML file; an unreadable file or bad YAML raises ``error`` with one line naming file and line."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(f"{path}: cannot read file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start}); is this a YAML file?") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{path}:{line} invalid YAML: {problem}") from None


def parse_file(path: Path) -> dict[str, list[BaseModel]]:
    """Validate one YAML file; raise LibraryError on the first problem."""
    raw = read_yaml(path, LibraryError)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise LibraryError(f"{path}: top level must be a mapping with keys {', '.join(SECTIONS)}")
    unknown = set(raw) - set(SECTIONS)
    if unknown:
        raise LibraryError(f"{path}: unknown top-level key {sorted(unknown)[0]!r} (expected {', '.join(SECTIONS)})")
    out: dict[str, list[BaseModel]] = {}
    for section, model in SECTIONS.items():
        entries = raw.get(section) or []
        if not isinstance(entries, list):
            raise LibraryError(f"{path}: '{section}' must be a list")
        parsed = []
        for i, entry in enumerate(entries):
            label = _entry_label(entry, i)
            if not isinstance(entry, dict):
                raise LibraryError(f"{path}: {section} {label}: must be a mapping")
            try:
                parsed.append(model.model_validate(entry))
            except ValidationError as exc:
                raise LibraryError(f"{path}: {section} {label}, {field_problem(exc, count_more=True)}") from None
        out[section] = parsed
    return out


def yaml_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted([*path.rglob("*.yaml"), *path.rglob("*.yml")])
    return [path]


@dataclass
class Library:
    """Scenarios, characters and relationship profiles, indexed by id."""

    scenarios: dict[str, Scenario] = field(default_factory=dict)
    characters: dict[str, Character] = field(default_factory=dict)
    relationships: list[RelationshipProfile] = field(default_factory=list)

    def add_file(self, path: Path) -> None:
        parsed = parse_file(path)
        for section, key in (("scenarios", "scenarios"), ("characters", "characters")):
            table: dict = getattr(self, key)
            for i, item in enumerate(parsed[section]):
                if item.id in table:  # type: ignore[attr-defined]
                    raise LibraryError(f"{path}: {section} entry {i} (id {item.id!r}): field 'id': duplicate id")  # type: ignore[attr-defined]
                table[item.id] = item  # type: ignore[attr-defined]
        self.relationships.extend(parsed["relationships"])  # type: ignore[arg-type]

    def check_references(self) -> None:
        """Every relationship must name known characters."""
        for rel in self.relationships:
            for cid in rel.characters:
                if cid not in self.characters:
                    raise LibraryError(f"relationship {rel.characters}: field 'characters': unknown character {cid!r}")

    def relationship_between(self, a: str, b: str) -> RelationshipProfile | None:
        for rel in self.relationships:
            if rel.involves(a, b):
                return rel
        return None

    def select(self, which: str | Iterable[str]) -> list[Scenario]:
        """Scenarios by selector: ``all``, ``hard``, a split name, a tag, ``PART:PART`` (all of them, e.g.
        ``verifiable:test`` or ``bargaining:train``), or ids.

        Three families are opt-in (``OPT_IN_TAGS``): ``verifiable`` (meant for a rule partner in seat 2),
        ``multi-party`` (three seats or more) and ``game``. A selector leaves each out unless it names its tag
        or matches nothing else (``bargaining``, ``werewolf``); ids always select. So ``all`` and the split
        names select the two-seat talk scenarios, as they did before the other families existed.
        """
        if isinstance(which, str):
            parts = which.split(":")
            if "," not in which and which not in self.scenarios and all(p.strip() for p in parts):
                hits = [s for s in self.scenarios.values() if all(_matches(s, p) for p in parts)]
                left_out = set(OPT_IN_TAGS) - set(parts)
                chosen = [s for s in hits if not left_out & set(s.tags)] or hits
                if chosen or which in ("all", "train", "dev", "test"):
                    return chosen
                if len(parts) > 1:
                    unknown = [p for p in parts if p not in self.selector_words()]
                    hint = did_you_mean(unknown[0], self.selector_words(), LIST_HINT) if unknown else f"; {LIST_HINT}"
                    why = f" ({unknown[0]!r} is no tag or split)" if unknown else ""
                    raise LibraryError(f"no scenario matches every part of {which!r}{why}{hint}")
                hint = did_you_mean(which, [*self.scenarios, *self.selector_words()], LIST_HINT)
                raise LibraryError(f"unknown scenario id {which!r} (nor a tag, a split or 'all'){hint}")
            which = [w for w in which.split(",") if w.strip()]
        out = []
        for sid in which:
            sid = sid.strip()
            if sid not in self.scenarios:
                raise LibraryError(f"unknown scenario id {sid!r}{did_you_mean(sid, self.scenarios, LIST_HINT)}")
            out.append(self.scenarios[sid])
        return out

    def selector_words(self) -> set[str]:
        """The words a selector may use besides ids: ``all``, the splits and every tag in the library."""
        return {"all", "train", "dev", "test"} | {tag for s in self.scenarios.values() for tag in s.tags}


def _matches(scenario: Scenario, part: str) -> bool:
    if part == "all":
        return True
    if part in ("train", "dev", "test"):
        return scenario.split == part
    return part in scenario.tags


def builtin_dir() -> Path:
    return Path(str(resources.files("sotopia_env") / "data"))


def load_library(extra: Iterable[str | Path] = (), builtin: bool = True) -> Library:
    """The built-in library plus any extra YAML files or directories."""
    lib = Library()
    if builtin:
        base = _builtin_library()
        lib = Library(dict(base.scenarios), dict(base.characters), list(base.relationships))
    for item in extra:
        path = Path(item)
        if not path.exists():
            raise LibraryError(f"{path}: no such file or directory")
        for f in yaml_files(path):
            lib.add_file(f)
    lib.check_references()
    return lib


@lru_cache(maxsize=1)
def _builtin_library() -> Library:
    lib = Library()
    for f in yaml_files(builtin_dir()):
        lib.add_file(f)
    return lib
