"""``open_store(url)``: the episode store for a URL, and the interface it implements (from ``store_base``).

Two implementations share one interface (``store_base.EpisodeStore``) and one test suite:

- SQLite (default): ``sqlite:///path/to/file.db`` or a plain ``.db``/``.sqlite`` path; the default
  file lives in the user's data directory.
- Redis: ``redis://host:port/db``, ``rediss://`` (TLS) or ``unix://`` (a socket).

Any other URL is refused (``store_kind``) before anything is created.

Writes that must survive store faults (retry, then spill to a file) go through
``episodes.store_writer.StoreWriter``, the store step of an episode's life.
"""

from __future__ import annotations

import re
from pathlib import Path

from sotopia_env.episodes.store_base import EpisodeStore, StoreError, StoreUnavailable, check_status

# The interface and its errors live in store_base, which the stores import (no circle with this factory); users
# import them from here.
__all__ = ["EpisodeStore", "StoreError", "StoreURLError", "StoreUnavailable", "check_status", "default_store_url"]
__all__ += ["open_store", "store_kind"]


SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
REDIS_SCHEMES = ("redis", "rediss", "unix")
ACCEPTED_STORES = "sqlite:///PATH, a path ending in .db, .sqlite or .sqlite3, redis://HOST:PORT/DB, rediss://… (TLS)"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")


class StoreURLError(StoreError, ValueError):
    """A store URL of a scheme we do not know, or a path that is not a SQLite file; nothing was created."""


def store_kind(url: str, where: str = "store") -> str:
    """``"sqlite"`` or ``"redis"`` for a store URL, checked strictly: anything else is a ``StoreURLError``.

    Accepted: ``sqlite:///path`` (or ``sqlite:////abs/path``), a plain path ending in ``.db``, ``.sqlite`` or
    ``.sqlite3``, ``redis://`` and ``rediss://`` (TLS), and ``unix://`` (a Redis socket). A typo such as
    ``redis:/host:6379/0``, or ``mongodb://x`` or ``postgres://…`` copied from another tool, must never become a
    stray local SQLite file. ``where`` names the source (``--store``, ``$SOTOPIA_ENV_STORE``, a config's key).
    """
    if not isinstance(url, str):
        raise StoreURLError(f"{where}: a store URL is text, not {type(url).__name__}; expected {ACCEPTED_STORES}")
    text = url.strip()
    shown = _redacted(url)
    if not text:
        raise StoreURLError(f"{where}: an empty store URL; expected {ACCEPTED_STORES}")
    if text != url or any(ord(ch) < 32 for ch in text):
        raise StoreURLError(f"{where} {shown!r}: spaces or control characters; expected {ACCEPTED_STORES}")
    match = _SCHEME.match(text)
    scheme = match.group(1).lower() if match and len(match.group(1)) > 1 else ""  # C:\x.db is a path
    if scheme in REDIS_SCHEMES:
        if not text.lower().startswith(f"{scheme}://") or len(text) == len(scheme) + 3:
            raise StoreURLError(f"{where} {shown!r}: write {scheme}://HOST:PORT/DB; expected {ACCEPTED_STORES}")
        return "redis"
    if scheme == "sqlite":
        if not text.lower().startswith("sqlite://") or text.rstrip("/").lower() == "sqlite:":
            raise StoreURLError(f"{where} {shown!r}: write sqlite:///PATH; expected {ACCEPTED_STORES}")
        return "sqlite"
    if scheme:
        raise StoreURLError(f"{where} {shown!r}: unknown store scheme {scheme}://; expected {ACCEPTED_STORES}")
    if not text.lower().endswith(SQLITE_SUFFIXES) or Path(text).name.startswith("."):
        raise StoreURLError(f"{where} {shown!r}: not a SQLite file name; expected {ACCEPTED_STORES}")
    return "sqlite"


def _redacted(url: object) -> str:
    """The URL with any password replaced (``scheme://user:***@host``), for messages."""
    text = url if isinstance(url, str) else repr(url)
    return re.sub(r"(://[^/@:]*:)[^@/]*@", r"\1***@", text)[:200]


def default_store_url() -> str:
    import os

    from platformdirs import user_data_dir

    env = os.environ.get("SOTOPIA_ENV_STORE")
    if env is not None:
        store_kind(env, "$SOTOPIA_ENV_STORE")
        return env
    return f"sqlite:///{user_data_dir('sotopia-env')}/episodes.db"


def open_store(url: str | None = None) -> EpisodeStore:
    """``sqlite:///path``, a ``.db``/``.sqlite`` path, or ``redis://...``; None means the default SQLite file.
    Any other URL is a ``StoreURLError`` (one line naming it), and nothing is created."""
    url = default_store_url() if url is None else url
    if store_kind(url) == "redis":
        from sotopia_env.episodes.redis_store import RedisStore

        return RedisStore(url)
    from sotopia_env.episodes.sqlite_store import SQLiteStore

    return SQLiteStore(url)
