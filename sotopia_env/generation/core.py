"""What scenario and character generation share: settings, counts, the bounded retry loop, ids and YAML.

One item (a scenario from a seed, or a character) is asked for with a JSON schema; a reply that fails
(backend error, not JSON, or invalid for the pydantic model) is asked for again, with the problem fed
back, up to ``attempts`` times; then the item is skipped and counted as failed. Nothing raises out of
a run for one bad item.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from sotopia_env.backends.base import Backend, ChatRequest
from sotopia_env.limits import DEFAULT_CONCURRENCY

T = TypeVar("T")
Status = Literal["generated", "duplicate", "failed"]
MAX_KEPT_ERRORS = 20


class InvalidGeneration(ValueError):
    """A reply that cannot become a valid item. The message says why, in one line."""


@dataclass
class RunSettings:
    """Sampling and robustness settings of a generation run."""

    attempts: int = 3  # tries per item, the first included
    concurrency: int = DEFAULT_CONCURRENCY  # items in flight at once
    temperature: float = 0.9
    top_p: float = 0.95
    max_new_tokens: int = 700
    seed: int = 0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")

    def request(self, messages: list[dict[str, str]], schema: dict[str, Any], seed: int) -> ChatRequest:
        return ChatRequest(
            messages=messages,
            json_schema=schema,
            temperature=self.temperature,
            top_p=self.top_p,
            max_new_tokens=self.max_new_tokens,
            seed=seed,
        )


@dataclass
class Outcome:
    """What became of one item: for progress display and the summary."""

    status: Status
    item_id: str | None = None
    detail: str = ""
    attempts: int = 0
    path: Path | None = None


@dataclass
class GenerationStats:
    """The counts a run reports."""

    requested: int = 0  # items attempted (seeds drawn, or characters asked for)
    generated: int = 0
    duplicates: int = 0  # valid, but a near-copy of a library or earlier item: rejected
    failed: int = 0  # still invalid (or a backend error) after every attempt
    retries: int = 0  # extra attempts made over all items
    reused_seeds: int = 0  # seeds skipped because an earlier run already used them
    repeated_seeds: int = 0  # seeds dropped because the input holds the same text earlier
    errors: list[str] = field(default_factory=list)  # the last error of each failed item (first 20)
    written: list[Path] = field(default_factory=list)

    def record(self, outcome: Outcome) -> None:
        self.retries += max(0, outcome.attempts - 1)
        if outcome.status == "generated":
            self.generated += 1
            if outcome.path is not None:
                self.written.append(outcome.path)
        elif outcome.status == "duplicate":
            self.duplicates += 1
        else:
            self.failed += 1
            if len(self.errors) < MAX_KEPT_ERRORS:
                self.errors.append(outcome.detail)

    def summary(self) -> dict[str, int]:
        return {
            "requested": self.requested,
            "generated": self.generated,
            "duplicates": self.duplicates,
            "failed": self.failed,
            "retries": self.retries,
            "reused_seeds": self.reused_seeds,
            "repeated_seeds": self.repeated_seeds,
        }


OnOutcome = Callable[[Outcome], None]
OnStart = Callable[[int], None]  # called once with the number of items the run will attempt


async def run_bounded(
    jobs: Sequence[Callable[[], Awaitable[Outcome]]],
    concurrency: int,
    stats: GenerationStats,
    on_outcome: OnOutcome | None = None,
) -> None:
    """Run the jobs, at most ``concurrency`` at once; record and report each outcome as it comes."""
    semaphore = asyncio.Semaphore(concurrency)

    async def one(job: Callable[[], Awaitable[Outcome]]) -> Outcome:
        async with semaphore:
            return await job()

    for next_done in asyncio.as_completed([one(job) for job in jobs]):
        outcome = await next_done
        stats.record(outcome)
        if on_outcome is not None:
            on_outcome(outcome)


def load_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a reply (code fences and prose around it tolerated)."""
    text = text.strip()
    candidates = [text]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    if not text:
        raise InvalidGeneration("empty reply")
    raise InvalidGeneration(f"reply is not a JSON object: {text[:60]!r}")


async def generate_valid(
    backend: Backend,
    messages: list[dict[str, str]],
    schema: dict[str, Any],
    parse: Callable[[str], T],
    settings: RunSettings,
    seed: int,
) -> tuple[T | None, str, int]:
    """``(item, "", attempts)`` for the first reply ``parse`` accepts, else ``(None, last error, attempts)``."""
    messages = list(messages)
    error = "no attempt made"
    for attempt in range(1, settings.attempts + 1):
        request = settings.request(messages, schema, seed=seed + attempt - 1)
        try:
            (completion,) = await backend.generate([request])
        except Exception as exc:  # noqa: BLE001 - a backend that raises must not end the run
            error = f"backend error: {type(exc).__name__}: {exc}"
            continue
        if completion.error is not None:
            error = f"backend error: {completion.error}"
            continue
        try:
            return parse(completion.text), "", attempt
        except InvalidGeneration as exc:
            error = str(exc)
            messages = [
                *messages,
                {"role": "assistant", "content": completion.text},
                {"role": "user", "content": f"That answer is invalid ({error}). Answer again with one JSON object."},
            ]
    return None, error, settings.attempts


def slug(text: str, sep: str = "-", limit: int = 40) -> str:
    """Lower-case ASCII letters and digits joined by ``sep``, at most ``limit`` characters."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    out = sep.join(words)[:limit].strip(sep)
    return out


def unique_id(base: str, taken: set[str]) -> str:
    """``base``, or ``base-2``, ``base-3``... whichever is not taken; the result is added to ``taken``."""
    candidate, n = base, 1
    while candidate in taken:
        n += 1
        candidate = f"{base}-{n}"
    taken.add(candidate)
    return candidate


class _Dumper(yaml.SafeDumper):
    pass


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = ">" if len(value) > 80 and "\n" not in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_presenter)


def write_yaml(path: Path, section: str, entries: list[dict[str, Any]], header: str = "") -> Path:
    """Write ``{section: entries}`` atomically (temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = yaml.dump({section: entries}, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    text = "".join(f"# {line}\n" for line in header.splitlines()) + body
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
