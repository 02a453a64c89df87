"""The SQLite episode store: one file, no server.

Layout: ``episodes`` holds one row per episode (indexed columns plus the full
log as JSON in ``data``); ``episode_models`` holds one row per seat, so a model
matches whichever seat it played. The file is in WAL mode with a busy timeout,
every write is one ``BEGIN IMMEDIATE`` transaction, and each thread (and each
process) uses its own connection, so many writers can share one file.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sotopia_env.episodes.log import STATUSES, EpisodeLog
from sotopia_env.episodes.store_base import (
    StoreError,
    StoreUnavailable,
    check_status,
    created_timestamp,
    gc_paused,
    load_stored,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS episodes (
    id TEXT PRIMARY KEY,
    tag TEXT NOT NULL,
    scenario_id TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL,
    created_ts REAL NOT NULL,
    combo_key TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS episodes_order ON episodes (created_ts, id);
CREATE INDEX IF NOT EXISTS episodes_tag ON episodes (tag, created_ts, id);
CREATE INDEX IF NOT EXISTS episodes_scenario ON episodes (scenario_id);
CREATE INDEX IF NOT EXISTS episodes_status ON episodes (status);
CREATE INDEX IF NOT EXISTS episodes_combo ON episodes (tag, combo_key, status);
CREATE TABLE IF NOT EXISTS episode_models (
    episode_id TEXT NOT NULL,
    seat INTEGER NOT NULL,
    model TEXT NOT NULL,
    PRIMARY KEY (episode_id, seat)
);
CREATE INDEX IF NOT EXISTS episode_models_model ON episode_models (model, episode_id);
CREATE TABLE IF NOT EXISTS queue (
    name TEXT NOT NULL,
    id TEXT NOT NULL,
    body TEXT NOT NULL,
    created_ts REAL NOT NULL,
    PRIMARY KEY (name, id)
);
CREATE TABLE IF NOT EXISTS claims (
    tag TEXT NOT NULL,
    combo_key TEXT NOT NULL,
    owner TEXT NOT NULL,
    expires_ts REAL NOT NULL,
    PRIMARY KEY (tag, combo_key)
);
"""

_UPSERT = """
INSERT INTO episodes (id, tag, scenario_id, status, created_at, created_ts, combo_key, data)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    tag = excluded.tag, scenario_id = excluded.scenario_id, status = excluded.status,
    created_at = excluded.created_at, created_ts = excluded.created_ts,
    combo_key = excluded.combo_key, data = excluded.data
"""

_PAGE = 256
_BEST = "MIN(CASE status {} ELSE {} END)".format(
    " ".join(f"WHEN '{s}' THEN {i}" for i, s in enumerate(STATUSES)), len(STATUSES)
)  # a combo's best status (rated > unrated > failed), as its index in STATUSES


def _best_status(conn: sqlite3.Connection, tag: str, key: str) -> str | None:
    (best,) = conn.execute(f"SELECT {_BEST} FROM episodes WHERE tag = ? AND combo_key = ?", (tag, key)).fetchone()
    return STATUSES[best] if best is not None and best < len(STATUSES) else None


def sqlite_path(url: str) -> Path:
    """``sqlite:///abs/path.db`` (or ``sqlite:////abs/path.db``) or a plain path."""
    if url.startswith("sqlite://"):
        rest = url[len("sqlite://") :]
        path = "/" + rest.lstrip("/") if rest.startswith("/") else rest
    else:
        path = url
    if path in ("", ":memory:", "/:memory:"):
        raise StoreError(f"{url}: in-memory SQLite is not supported; give a file path")
    return Path(path).expanduser()


class SQLiteStore:
    """Episodes in one SQLite file; safe for concurrent writers (threads and processes)."""

    def __init__(self, url: str, timeout: float = 60.0) -> None:
        self.path = sqlite_path(url)
        self.url = f"sqlite:///{self.path}"
        self._timeout = timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the directory for SQLite store {self.path}: {exc.strerror or exc}"
            ) from None
        with self._guard("open"):
            conn = self._conn()
            _retry_locked(lambda: conn.execute("PRAGMA journal_mode=WAL").fetchone())
            with self._write() as w:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        w.execute(statement)

    # -- connections and transactions -------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            return conn
        conn = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
        conn.execute("PRAGMA synchronous = NORMAL")
        self._local.conn, self._local.pid = conn, os.getpid()
        with self._lock:
            self._connections.append(conn)
        return conn

    def _forget_conn(self) -> None:
        """Close this thread's connection; the next call opens a new one (one opened read-only stays so)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            return
        self._local.conn = None
        with self._lock:
            if conn in self._connections:
                self._connections.remove(conn)
        conn.close()

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """SQLite errors as StoreErrors: StoreUnavailable for operational faults that may pass (locked,
        read-only, disk full or failing), after which this thread reconnects; a plain StoreError for the rest."""
        try:
            yield
        except sqlite3.Error as exc:
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            transient = isinstance(exc, sqlite3.OperationalError)
            if transient:
                self._forget_conn()
            kind = StoreUnavailable if transient else StoreError
            raise kind(f"cannot {what} SQLite store {self.path}: {message}") from None

    def ping(self) -> None:
        """A write that is rolled back: fails when the file is read-only or stays locked past the timeout.
        (``BEGIN IMMEDIATE`` alone passes on a read-only file in WAL mode.)"""
        with self._guard("write to"), self._write_lock:
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("INSERT OR REPLACE INTO episode_models (episode_id, seat, model) VALUES ('', -1, '')")
            finally:
                conn.execute("ROLLBACK")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction. Threads of this process take turns on a lock (SQLite's own busy
        wait sleeps in coarse steps); other processes are kept out by ``BEGIN IMMEDIATE``."""
        conn = self._conn()
        with self._write_lock:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    # -- writing ------------------------------------------------------------------------------------

    @staticmethod
    def _insert(conn: sqlite3.Connection, log: EpisodeLog) -> None:
        row = (
            log.id,
            log.tag,
            log.scenario_id,
            log.status,
            log.created_at,
            created_timestamp(log.created_at),
            log.combo_key,
            log.model_dump_json(),
        )
        conn.execute(_UPSERT, row)
        conn.execute("DELETE FROM episode_models WHERE episode_id = ?", (log.id,))
        conn.executemany(
            "INSERT INTO episode_models (episode_id, seat, model) VALUES (?, ?, ?)",
            [(log.id, seat, model) for seat, model in enumerate(log.models)],
        )

    def put(self, log: EpisodeLog) -> None:
        with self._guard("write to"), self._write() as conn:
            self._insert(conn, log)

    def put_many(self, logs: Iterable[EpisodeLog]) -> None:
        """All of ``logs`` in one transaction: either every one is stored or none is."""
        with self._guard("write to"), self._write() as conn:
            for log in logs:
                self._insert(conn, log)

    def delete(self, episode_id: str) -> None:
        with self._guard("delete from"), self._write() as conn:
            if conn.execute("DELETE FROM episodes WHERE id = ?", (episode_id,)).rowcount == 0:
                raise KeyError(f"episode {episode_id!r} not found in {self.url}")
            conn.execute("DELETE FROM episode_models WHERE episode_id = ?", (episode_id,))

    # -- claims: each combination played once, however many drivers share the store ----------------

    def claim(
        self,
        tag: str,
        key: str,
        owner: str,
        ttl_s: float,
        expected: str | None = None,
        stale: Callable[[str], bool] | None = None,
    ) -> str:
        """``"ours"`` (the lease is ``owner``'s for ``ttl_s``), ``"held"`` (another driver's lease is live) or
        ``"done"`` (the combo's stored status is no longer ``expected``: someone played it). One transaction.
        ``stale(holder)`` true takes over a live lease whose driver is known to be gone."""
        now = time.time()
        with self._guard("claim in"), self._write() as conn:
            if _best_status(conn, tag, key) != expected:
                return "done"
            row = conn.execute("SELECT owner, expires_ts FROM claims WHERE tag = ? AND combo_key = ?", (tag, key))
            current = row.fetchone()
            if current is not None and current[0] != owner and current[1] > now:
                if stale is None or not stale(current[0]):
                    return "held"
            conn.execute(
                "INSERT OR REPLACE INTO claims (tag, combo_key, owner, expires_ts) VALUES (?, ?, ?, ?)",
                (tag, key, owner, now + ttl_s),
            )
            return "ours"

    def renew_claims(self, tag: str, keys: Iterable[str], owner: str, ttl_s: float) -> list[str]:
        """Extend ``owner``'s leases on ``keys``; returns the keys whose lease it no longer holds."""
        keys = list(keys)
        lost = []
        with self._guard("renew claims in"), self._write() as conn:
            for key in keys:
                updated = conn.execute(
                    "UPDATE claims SET expires_ts = ? WHERE tag = ? AND combo_key = ? AND owner = ?",
                    (time.time() + ttl_s, tag, key, owner),
                )
                if updated.rowcount == 0:
                    lost.append(key)
        return lost

    def release_claim(self, tag: str, key: str, owner: str) -> None:
        """Drop ``owner``'s lease on ``key`` (another driver's is left alone)."""
        with self._guard("release a claim in"), self._write() as conn:
            conn.execute("DELETE FROM claims WHERE tag = ? AND combo_key = ? AND owner = ?", (tag, key, owner))

    # -- the request queue: accepted work that must survive a restart ---------------------------------

    def queue_put(self, queue: str, item_id: str, body: str) -> None:
        with self._guard("queue a request in"), self._write() as conn:
            conn.execute(
                "INSERT INTO queue (name, id, body, created_ts) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (name, id) DO UPDATE SET body = excluded.body",
                (queue, item_id, body, time.time()),
            )

    def queue_items(self, queue: str) -> dict[str, str]:
        rows = self._select("SELECT id, body FROM queue WHERE name = ? ORDER BY created_ts, id", [queue])
        return {item_id: body for item_id, body in rows}

    def queue_drop(self, queue: str, item_id: str) -> None:
        with self._guard("drop a request from"), self._write() as conn:
            conn.execute("DELETE FROM queue WHERE name = ? AND id = ?", (queue, item_id))

    # -- reading ------------------------------------------------------------------------------------

    def _load(self, episode_id: str, data: str) -> EpisodeLog:
        return load_stored(str(self.path), episode_id, data)

    def _select(self, sql: str, params: list[object]) -> list[tuple]:
        with self._guard("read"):
            return self._conn().execute(sql, params).fetchall()

    def get(self, episode_id: str) -> EpisodeLog:
        rows = self._select("SELECT id, data FROM episodes WHERE id = ?", [episode_id])
        if not rows:
            raise KeyError(f"episode {episode_id!r} not found in {self.url}")
        return self._load(*rows[0])

    def query(
        self,
        tag: str | None = None,
        model: str | None = None,
        scenario: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[EpisodeLog]:
        where, params = _where(tag, model, scenario, status)
        sql = f"SELECT id, data FROM episodes{where} ORDER BY created_ts, id LIMIT ? OFFSET ?"
        rows = self._select(sql, [*params, -1 if limit is None else limit, offset])
        with gc_paused():
            return [self._load(*row) for row in rows]

    def count(
        self, tag: str | None = None, model: str | None = None, scenario: str | None = None, status: str | None = None
    ) -> int:
        where, params = _where(tag, model, scenario, status)
        return int(self._select(f"SELECT COUNT(*) FROM episodes{where}", params)[0][0])

    def iter(self, tag: str | None = None) -> Iterator[EpisodeLog]:
        """Pages of episodes, oldest first; each page is its own short read."""
        where, params = _where(tag, None, None, None)
        joiner = " AND " if where else " WHERE "
        cursor: tuple[float, str] = (float("-inf"), "")
        while True:
            sql = (
                f"SELECT id, data, created_ts FROM episodes{where}{joiner}(created_ts, id) > (?, ?) "
                "ORDER BY created_ts, id LIMIT ?"
            )
            rows = self._select(sql, [*params, *cursor, _PAGE])
            for episode_id, data, _ in rows:
                yield self._load(episode_id, data)
            if len(rows) < _PAGE:
                return
            cursor = (rows[-1][2], rows[-1][0])

    def combo_status(self, tag: str) -> dict[str, str]:
        sql = f"SELECT combo_key, {_BEST} FROM episodes WHERE tag = ? AND combo_key != '' GROUP BY combo_key"
        return {key: STATUSES[best] for key, best in self._select(sql, [tag]) if best < len(STATUSES)}

    def tags(self) -> list[str]:
        return [row[0] for row in self._select("SELECT DISTINCT tag FROM episodes ORDER BY tag", [])]

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"


def _where(tag: str | None, model: str | None, scenario: str | None, status: str | None) -> tuple[str, list[object]]:
    check_status(status)
    clauses: list[str] = []
    params: list[object] = []
    for column, value in (("tag", tag), ("scenario_id", scenario), ("status", status)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    if model is not None:
        clauses.append("id IN (SELECT episode_id FROM episode_models WHERE model = ?)")
        params.append(model)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _retry_locked(action: Callable[[], object], attempts: int = 100) -> None:
    """Run ``action``; retry briefly while another process holds the lock (switching to WAL needs it)."""
    for attempt in range(attempts):
        try:
            action()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(0.05)
