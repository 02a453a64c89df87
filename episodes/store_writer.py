"""The store step of an episode's life: write it, ride out store faults, and never lose it.

``StoreWriter.put`` is the last step of ``episodes.runner.run_episode``:

1. The write runs in one of the writer's own threads (4), so the event loop keeps playing the other
   episodes, and writes stuck on a locked SQLite file never starve the default executor that backends use.
2. A fault that may pass (``StoreUnavailable``: Redis down or restarting, SQLite locked or read-only) is
   retried with backoff (0.1 s, doubling, at most 2 s apart) until the outage is ``retry_seconds`` old (60 s
   by default). An outage has one window, shared by every episode that waits on it: a store that is back
   within it loses nothing. Any successful write ends the outage.
3. Past the window, or at once for an error that retrying cannot fix (a corrupt record already stored), the
   episode is appended to the spill file instead, in our export JSONL, which ``sotopia-env episodes import
   FILE`` restores (an episode stored after all is replaced, not duplicated: same id). While the store stays
   down, each later episode tries it once and is then spilled too.
4. ``finish()`` raises ``EpisodesSpilled`` when anything was spilled: one line with how many, why, the file
   and the command that restores it.

The spill file is ``<user data dir>/sotopia-env/spill/spill-<tag>-<UTC time>-<pid>.jsonl`` (``spill_dir``
overrides the folder; the training pipeline uses its output dir). It is created when the first episode is
spilled; when its folder cannot be written, the system temp dir is used.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sotopia_env.episodes.job_fields import DEFAULT_RETRY_SECONDS
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.store import EpisodeStore, StoreError, StoreUnavailable

_FIRST_WAIT, _MAX_WAIT = 0.1, 2.0
_THREADS = 4


class EpisodesSpilled(StoreError):
    """Finished episodes that could not be stored are in the spill file ``path`` instead."""

    def __init__(self, message: str, path: Path, count: int) -> None:
        super().__init__(message)
        self.path = path
        self.count = count


def default_spill_dir() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir("sotopia-env")) / "spill"


class StoreWriter:
    """Writes finished episodes to ``store``: retried through faults for ``retry_seconds``, then spilled."""

    def __init__(
        self,
        store: EpisodeStore,
        tag: str = "",
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
        spill_dir: Path | None = None,
    ) -> None:
        self.store = store
        self.retry_seconds = retry_seconds
        self.stored = 0
        self.spilled = 0
        self.spill_path: Path | None = None
        self._tag = tag
        self._spill_dir = spill_dir
        self._down_since: float | None = None
        self._last_error = ""
        self._spill_lock = threading.Lock()
        self._threads = ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="store-writer")

    async def _in_thread(self, write: Callable[[EpisodeLog], None], log: EpisodeLog) -> None:
        await asyncio.get_running_loop().run_in_executor(self._threads, write, log)

    async def put(self, log: EpisodeLog) -> bool:
        """Store ``log`` (True), or append it to the spill file (False). Never raises for a store fault."""
        wait = _FIRST_WAIT
        while True:
            started = time.monotonic()
            try:
                await self._in_thread(self.store.put, log)
            except StoreUnavailable as exc:
                self._last_error = str(exc)
                self._down_since = self._down_since if self._down_since is not None else started
                left = self._down_since + self.retry_seconds - time.monotonic()
                if left <= 0:
                    break
                await asyncio.sleep(min(wait, left))
                wait = min(2 * wait, _MAX_WAIT)
            except Exception as exc:  # retrying cannot fix it (a corrupt stored record, a store bug)
                self._last_error = str(exc) if isinstance(exc, StoreError) else f"{type(exc).__name__}: {exc}"
                break
            else:
                self._down_since = None
                self.stored += 1
                return True
        await self._in_thread(self._spill, log)
        return False

    def _spill(self, log: EpisodeLog) -> None:
        line = log.model_dump_json() + "\n"
        with self._spill_lock:
            if self.spill_path is None:
                self.spill_path = self._create_spill_file()
            try:
                with open(self.spill_path, "a", encoding="utf-8") as f:
                    f.write(line)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:
                raise StoreError(
                    f"could not store episode {log.id} in {self.store.url} ({self._last_error}) "
                    f"nor append it to {self.spill_path}: {exc.strerror or exc}"
                ) from None
            self.spilled += 1

    def _create_spill_file(self) -> Path:
        tag = re.sub(r"[^A-Za-z0-9._-]+", "_", self._tag).strip("_") or "episodes"
        name = f"spill-{tag}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}.jsonl"
        problems = []
        for folder in (self._spill_dir or default_spill_dir(), Path(tempfile.gettempdir())):
            try:
                folder.mkdir(parents=True, exist_ok=True)
                (folder / name).touch()
                return folder / name
            except OSError as exc:
                problems.append(f"{folder}: {exc.strerror or exc}")
        raise StoreError(f"cannot store episodes in {self.store.url} ({self._last_error}) nor spill them: {problems}")

    def finish(self) -> None:
        """Raise ``EpisodesSpilled`` (one line: how many, why, where, how to restore) if anything was spilled."""
        if not self.spilled or self.spill_path is None:
            return
        path = shlex.quote(str(self.spill_path))
        raise EpisodesSpilled(
            f"{self.spilled} finished episode(s) could not be stored in {self.store.url} ({self._last_error}); "
            f"they are saved in {self.spill_path}. Restore them (before rerunning) with: "
            f"sotopia-env episodes import {path} --store {shlex.quote(self.store.url)}",
            self.spill_path,
            self.spilled,
        )
