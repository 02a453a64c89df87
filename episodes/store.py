"""The episode store interface and ``open_store(url)``.

Two implementations share one interface and one test suite:

- SQLite (default): ``sqlite:///path/to/file.db`` or a plain path; the default
  file lives in the user's data directory.
- Redis: ``redis://host:port/db``.

Writes that must survive store faults (retry, then spill to a file) go through
``episodes.store_writer.StoreWriter``, the store step of an episode's life.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Protocol

from pydantic import ValidationError

from sotopia_env.episodes.log import STATUSES, EpisodeLog
from sotopia_env.errors import UserError
from sotopia_env.validation import field_problem


def created_timestamp(created_at: str) -> float:
    """Seconds since the epoch for an ISO time (naive means UTC); 0.0 when it does not parse."""
    try:
        moment = datetime.fromisoformat(created_at)
    except ValueError:
        return 0.0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def check_status(status: str | None) -> None:
    if status is not None and status not in STATUSES:
        raise ValueError(f"unknown status {status!r} (expected one of: {', '.join(STATUSES)})")


class StoreError(UserError, RuntimeError):
    """A store that cannot be reached or used; the message names it."""


class StoreUnavailable(StoreError):
    """A fault that may pass: Redis unreachable or restarting, SQLite locked or read-only. Worth retrying."""


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector around a bulk parse (4x faster for 10,000 episodes)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_stored(where: str, episode_id: str, data: str | bytes) -> EpisodeLog:
    """Parse a stored episode; a corrupt one is a StoreError naming the store, the id and the field."""
    try:
        return EpisodeLog.model_validate_json(data)
    except ValidationError as exc:
        raise StoreError(f"{where}: episode {episode_id!r} is corrupt: {field_problem(exc, '(log)')}") from None


class EpisodeStore(Protocol):
    url: str

    def ping(self) -> None:
        """Cheaply check that the store can be written now; StoreError naming it when not.
        Commands call it before playing, so that no LLM call is paid for an episode that cannot be kept."""

    def put(self, log: EpisodeLog) -> None:
        """Write one episode atomically; an episode with the same id is replaced."""

    def put_many(self, logs: Iterable[EpisodeLog]) -> None:
        """Write many episodes (each atomically; may batch)."""

    def get(self, episode_id: str) -> EpisodeLog:
        """One episode; KeyError naming the id when absent."""

    def query(
        self,
        tag: str | None = None,
        model: str | None = None,
        scenario: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[EpisodeLog]:
        """Episodes matching every given filter, oldest first. ``model`` matches any seat."""

    def count(
        self, tag: str | None = None, model: str | None = None, scenario: str | None = None, status: str | None = None
    ) -> int: ...

    def iter(self, tag: str | None = None) -> Iterator[EpisodeLog]:
        """Every episode (of a tag), streamed."""

    def combo_status(self, tag: str) -> dict[str, str]:
        """combo_key -> best status stored under ``tag`` (rated > unrated > failed)."""

    def delete(self, episode_id: str) -> None: ...

    def tags(self) -> list[str]: ...

    def close(self) -> None: ...


def default_store_url() -> str:
    import os

    from platformdirs import user_data_dir

    env = os.environ.get("SOTOPIA_ENV_STORE")
    if env:
        return env
    return f"sqlite:///{user_data_dir('sotopia-env')}/episodes.db"


def open_store(url: str | None = None) -> EpisodeStore:
    """``sqlite:///path``, a plain file path, or ``redis://...``; None means the default SQLite file."""
    url = url or default_store_url()
    if url.startswith(("redis://", "rediss://", "unix://")):
        from sotopia_env.episodes.redis_store import RedisStore

        return RedisStore(url)
    from sotopia_env.episodes.sqlite_store import SQLiteStore

    return SQLiteStore(url)
