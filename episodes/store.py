"""The episode store interface and ``open_store(url)``.

Two implementations share one interface and one test suite:

- SQLite (default): ``sqlite:///path/to/file.db`` or a plain path; the default
  file lives in the user's data directory.
- Redis: ``redis://host:port/db``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from episodes.log import EpisodeLog


class StoreError(RuntimeError):
    """A store that cannot be reached or used; the message names it."""


class EpisodeStore(Protocol):
    url: str

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
        from episodes.redis_store import RedisStore

        return RedisStore(url)
    from episodes.sqlite_store import SQLiteStore

    return SQLiteStore(url)
