"""Episodes in and out: our own JSONL schema and Hugging Face ``datasets``.

JSONL: one ``EpisodeLog`` JSON object per line, each with its ``schema_version``.
Import checks every line before returning any, so a bad file is reported (file,
line, field) and nothing is half-imported.

Hugging Face: ``to_hf_dataset`` gives flat columns for browsing and analysis plus
a ``json`` column with the full log, from which ``from_hf_dataset`` rebuilds the
logs exactly.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sotopia_env.episodes.log import SCHEMA_VERSION, EpisodeLog
from sotopia_env.episodes.store import EpisodeStore
from sotopia_env.errors import UserError
from sotopia_env.evaluators import SOTOPIA_DIMENSIONS
from sotopia_env.jsonl import json_lines
from sotopia_env.validation import field_problem


class EpisodeFileError(UserError, ValueError):
    """An episode file or dataset that cannot be imported; the message says where and why, in one line."""


# -- JSONL --------------------------------------------------------------------------------------------


def export_jsonl(logs: Iterable[EpisodeLog], path: str | Path) -> int:
    """Write ``logs`` to ``path`` (one per line) and return how many. The file appears whole or not at all."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for log in logs:
                f.write(log.model_dump_json())
                f.write("\n")
                count += 1
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


def episode_from_dict(data: Any, where: str) -> EpisodeLog:
    """Validate one exported episode; ``where`` (e.g. ``file.jsonl:3``) prefixes any error."""
    if not isinstance(data, dict):
        raise EpisodeFileError(f"{where}: expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if version is None:
        raise EpisodeFileError(f"{where}: field 'schema_version' is missing")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise EpisodeFileError(f"{where}: field 'schema_version': {version!r} is not a schema version")
    if version > SCHEMA_VERSION:
        raise EpisodeFileError(
            f"{where}: schema_version {version} is newer than this sotopia-env reads ({SCHEMA_VERSION}); "
            "upgrade sotopia-env to import it"
        )
    try:
        return EpisodeLog.model_validate(data)
    except ValidationError as exc:
        raise EpisodeFileError(f"{where}: {field_problem(exc, '(episode)', count_more=True)}") from None


def import_jsonl(path: str | Path) -> list[EpisodeLog]:
    """Every episode in ``path``; EpisodeFileError naming ``file:line`` (and the field) on the first bad line."""
    return [episode_from_dict(data, where) for where, data in json_lines(path, EpisodeFileError, objects=False)]


def import_jsonl_into(path: str | Path, store: EpisodeStore) -> int:
    """Validate the whole file first, then store every episode; returns how many.

    A bad file raises EpisodeFileError before anything is written, so nothing
    already stored is touched.
    """
    logs = import_jsonl(path)
    store.put_many(logs)
    return len(logs)


# -- Hugging Face datasets ----------------------------------------------------------------------------

DIMENSION_NAMES: tuple[str, ...] = tuple(d.name for d in SOTOPIA_DIMENSIONS)


def hf_features() -> Any:
    """The ``datasets.Features`` of ``to_hf_dataset`` (fixed, so an empty export still has its columns)."""
    from datasets import Features, List, Value

    score = {"agent": Value("string"), "overall": Value("float64")}
    score.update({name: Value("int64") for name in DIMENSION_NAMES})
    turn = {
        "turn": Value("int64"),
        "agent": Value("string"),
        "action_type": Value("string"),
        "argument": Value("string"),
        "to": List(Value("string")),  # an addressed move's recipients; empty: addressed to no one in particular
        "audience": List(Value("string")),  # who observed it; empty: everyone
    }
    strings = (
        "id",
        "tag",
        "scenario_id",
        "codename",
        "split",
        "termination_reason",
        "status",
        "error",
        "evaluator",
        "created_at",
    )
    features: dict[str, Any] = {name: Value("string") for name in strings}
    features.update(
        models=List(Value("string")),
        agents=List(Value("string")),
        scores=List(score),
        transcript=List(turn),
        json=Value("string"),
    )
    return Features(features)


def _row(log: EpisodeLog) -> dict[str, Any]:
    rating = log.rating
    scores = []
    if rating is not None and rating.ratings is not None:
        for agent, agent_rating in rating.ratings.items():
            entry: dict[str, Any] = {"agent": agent, "overall": agent_rating.overall}
            entry.update(
                {
                    name: agent_rating.scores[name].score if name in agent_rating.scores else None
                    for name in DIMENSION_NAMES
                }
            )
            scores.append(entry)
    return {
        "id": log.id,
        "tag": log.tag,
        "scenario_id": log.scenario_id,
        "codename": log.setup.scenario.codename,
        "split": log.setup.scenario.split,
        "termination_reason": log.termination_reason,
        "status": log.status,
        "error": log.error if log.error is not None else (rating.error if rating is not None else None),
        "evaluator": rating.evaluator if rating is not None else None,
        "created_at": log.created_at,
        "models": log.models,
        "agents": [a.name for a in log.agents],
        "scores": scores,
        "transcript": [
            {
                "turn": t.turn,
                "agent": t.agent,
                "action_type": t.action.action_type.value,
                "argument": t.action.argument,
                "to": list(t.action.to or []),
                "audience": list(t.audience or []),
            }
            for t in log.turns
        ],
        "json": log.model_dump_json(),
    }


def to_hf_dataset(logs: Iterable[EpisodeLog]) -> Any:
    """A ``datasets.Dataset``, one row per episode: flat columns plus ``json`` (the full log).

    ``scores`` holds one entry per rated agent with ``overall`` and each SOTOPIA
    dimension (None where that dimension was not rated); it is empty when the
    episode is unrated or failed. ``transcript`` holds one dict per turn, with ``to`` (an addressed move's
    recipients) and ``audience`` (who observed it, where not everyone did; a game's team and private moves).
    """
    from datasets import Dataset

    features = hf_features()
    columns: dict[str, list[Any]] = {name: [] for name in features}
    for log in logs:
        for name, value in _row(log).items():
            columns[name].append(value)
    return Dataset.from_dict(columns, features=features)


def from_hf_dataset(dataset: Iterable[Mapping[str, Any]]) -> list[EpisodeLog]:
    """The logs back from ``to_hf_dataset`` output (a Dataset or any iterable of rows with a ``json`` column)."""
    column_names = getattr(dataset, "column_names", None)
    if column_names is not None and "json" not in column_names:
        raise EpisodeFileError("dataset has no 'json' column (it was not made by to_hf_dataset)")
    logs = []
    for index, row in enumerate(dataset):
        where = f"dataset row {index}"
        text = row.get("json")
        if not isinstance(text, str):
            raise EpisodeFileError(f"{where}: field 'json' is missing or not text")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise EpisodeFileError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})") from None
        logs.append(episode_from_dict(data, where))
    return logs
