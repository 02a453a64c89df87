"""The Redis episode store, for shared or large runs (a real server, ``redis://`` URL).

Keys, under a configurable prefix (default ``sotopia``):

- ``<p>:ep:<id>``: the episode, as the JSON of ``EpisodeLog``;
- ``<p>:tag:<tag>``, ``<p>:model:<model>``, ``<p>:scenario:<id>``, ``<p>:status:<status>``:
  sets of episode ids;
- ``<p>:order``: sorted set of every id, scored by creation time (ties by id);
- ``<p>:combo:<tag>``: hash ``<status>:<combo_key>`` -> how many episodes of that combo have that status;
- ``<p>:tags``: hash ``tag`` -> how many episodes carry it;
- ``<p>:claim:<tag>:<combo_key>``: the driver playing that combo now, a lease with a time-to-live.
- ``<p>:queue:<name>``: hash id -> body of the requests recorded in a queue, and ``<p>:queue-order:<name>``
  the same ids scored by when they were first recorded.

The two hashes hold counts rather than a single value so that replacing or
deleting an episode keeps them exact. Every write is one MULTI/EXEC
transaction, WATCHing the episode keys so an old version's index entries are
removed consistently.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from typing import Any
from urllib.parse import urlsplit

import redis

from sotopia_env.episodes.log import STATUSES, EpisodeLog
from sotopia_env.episodes.store_base import (
    StoreError,
    StoreUnavailable,
    check_status,
    created_timestamp,
    gc_paused,
    load_stored,
)
from sotopia_env.errors import first_line

_BATCH = 200
# Compare-and-set on claim leases: only the driver that holds a lease renews or releases it.
_RENEW = """
local kept = {}
for i, name in ipairs(KEYS) do
    if redis.call('GET', name) == ARGV[1] then
        redis.call('PEXPIRE', name, ARGV[2])
        kept[i] = 1
    else
        kept[i] = 0
    end
end
return kept
"""
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
_TAKE_OVER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
    return 1
end
return 0
"""
_TRANSIENT_ERRORS = (redis.exceptions.ReadOnlyError, redis.exceptions.ExecAbortError)
_TRANSIENT_REPLIES = ("OOM", "MISCONF", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY", "LOADING")


def redact_url(url: str, with_db: bool = True) -> str:
    """The URL without user name or password: ``redis://host:port[/db]``."""
    try:
        parts = urlsplit(url)
        if parts.scheme == "unix":
            return f"unix://{parts.path}"
        host = parts.hostname or "localhost"
        port = parts.port or 6379
    except ValueError:
        return "redis://(unparsable URL)"
    db = parts.path if with_db and parts.path not in ("", "/") else ""
    return f"{parts.scheme}://{host}:{port}{db}"


def _reason(exc: BaseException, secret: str | None) -> str:
    """The short cause of a connection error, e.g. ``Connection refused``."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            text = seen.strerror
            break
        seen = seen.__cause__ or seen.__context__
    else:
        text = first_line(exc)
        match = re.match(r"Error -?\d+ connecting to \S+?\. (.*)", text)
        text = match.group(1) if match else text
    if any(hint in text for hint in ("NOAUTH", "HELLO must be called", "Authentication required")):
        text = "the server requires a password (give it in the URL: redis://:PASSWORD@host:port/db)"
    text = text.rstrip(".")
    return text.replace(secret, "***") if secret else text


class RedisStore:
    """Episodes in Redis. ``url`` is ``redis://[user:password@]host:port/db``; ``prefix`` namespaces every key."""

    def __init__(self, url: str, prefix: str = "sotopia", timeout: float = 10.0) -> None:
        self.url = redact_url(url)
        self.prefix = prefix
        self._where = redact_url(url, with_db=False)
        self._secret = _password(url)
        try:
            # decode_responses=True: every reply is str (redis-py's stubs say bytes | str, hence Any)
            self._redis: Any = redis.Redis.from_url(
                url, decode_responses=True, socket_connect_timeout=timeout, socket_timeout=timeout
            )
            self._redis.ping()
        except (redis.RedisError, OSError) as exc:
            raise StoreError(f"cannot reach Redis at {self._where}: {_reason(exc, self._secret)}") from None
        except (TypeError, ValueError) as exc:
            raise StoreError(f"invalid Redis URL {self._where}: {_reason(exc, self._secret)}") from None

    # -- keys ---------------------------------------------------------------------------------------

    def _key(self, kind: str, name: str) -> str:
        return f"{self.prefix}:{kind}:{name}"

    def _ep(self, episode_id: str) -> str:
        return self._key("ep", episode_id)

    @property
    def _order(self) -> str:
        return f"{self.prefix}:order"

    @property
    def _tags(self) -> str:
        return f"{self.prefix}:tags"

    def _filter_sets(self, tag: str | None, model: str | None, scenario: str | None, status: str | None) -> list[str]:
        check_status(status)
        pairs = (("tag", tag), ("model", model), ("scenario", scenario), ("status", status))
        return [self._key(kind, value) for kind, value in pairs if value is not None]

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Redis errors as StoreErrors: StoreUnavailable for those that may pass (connection lost, server
        loading or read-only, out of memory, failing to persist), a plain StoreError for the rest."""
        try:
            yield
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            reason = _reason(exc, self._secret)
            raise StoreUnavailable(f"lost connection to Redis at {self._where}: {reason}") from None
        except redis.RedisError as exc:
            text = _reason(exc, self._secret)
            transient = isinstance(exc, _TRANSIENT_ERRORS) or text.startswith(_TRANSIENT_REPLIES)
            kind = StoreUnavailable if transient else StoreError
            raise kind(f"Redis at {self._where} refused the command: {text}") from None

    def ping(self) -> None:
        """One write of a short-lived key, so that a read-only replica or a server that cannot persist fails too."""
        with self._guard():
            self._redis.set(f"{self.prefix}:ping", "1", px=60_000)

    # -- writing ------------------------------------------------------------------------------------

    def _index(self, pipe: Any, entry: dict[str, Any], sign: int) -> None:
        """Queue adding (sign=1) or removing (sign=-1) one episode's index entries."""
        episode_id = entry["id"]
        sets = [
            self._key("tag", entry["tag"]),
            self._key("scenario", entry["scenario_id"]),
            self._key("status", entry["status"]),
        ]
        sets += [self._key("model", m) for m in set(entry["models"])]
        for key in sets:
            (pipe.sadd if sign > 0 else pipe.srem)(key, episode_id)
        if sign > 0:
            pipe.zadd(self._order, {episode_id: entry["created_ts"]})
        else:
            pipe.zrem(self._order, episode_id)
        pipe.hincrby(self._tags, entry["tag"], sign)
        if entry["combo_key"]:
            pipe.hincrby(self._key("combo", entry["tag"]), f"{entry['status']}:{entry['combo_key']}", sign)

    def _old_entry(self, episode_id: str, raw: str | None) -> dict[str, Any] | None:
        if raw is None:
            return None
        try:
            return _entry(json.loads(raw))
        except (ValueError, KeyError, TypeError, AttributeError):
            key = self._ep(episode_id)
            raise StoreError(f"{self.url}: stored episode {episode_id!r} is corrupt; delete key {key}") from None

    def _put_batch(self, logs: Sequence[EpisodeLog]) -> None:
        unique = list({log.id: log for log in logs}.values())
        keys = [self._ep(log.id) for log in unique]
        payloads = [log.model_dump_json() for log in unique]

        def transaction(pipe: Any) -> None:
            olds = pipe.mget(keys)
            pipe.multi()
            for log, key, payload, raw in zip(unique, keys, payloads, olds, strict=True):
                old = self._old_entry(log.id, raw)
                if old is not None:
                    self._index(pipe, old, -1)
                pipe.set(key, payload)
                self._index(pipe, _log_entry(log), 1)

        with self._guard():
            self._redis.transaction(transaction, *keys)

    def put(self, log: EpisodeLog) -> None:
        self._put_batch([log])

    def put_many(self, logs: Iterable[EpisodeLog]) -> None:
        """Batches of episodes, each batch one transaction."""
        iterator = iter(logs)
        while batch := list(islice(iterator, _BATCH)):
            self._put_batch(batch)

    def delete(self, episode_id: str) -> None:
        key = self._ep(episode_id)

        def transaction(pipe: Any) -> None:
            old = self._old_entry(episode_id, pipe.get(key))
            if old is None:
                raise KeyError(f"episode {episode_id!r} not found in {self.url}")
            pipe.multi()
            self._index(pipe, old, -1)
            pipe.delete(key)

        with self._guard():
            self._redis.transaction(transaction, key)

    # -- claims: each combination played once, however many drivers share the store ----------------

    def _claim_key(self, tag: str, key: str) -> str:
        return self._key("claim", f"{tag}:{key}")

    def _best_status(self, tag: str, key: str) -> str | None:
        counts = self._redis.hmget(self._key("combo", tag), [f"{s}:{key}" for s in STATUSES])
        return next((s for s, n in zip(STATUSES, counts, strict=True) if n is not None and int(n) > 0), None)

    def claim(
        self,
        tag: str,
        key: str,
        owner: str,
        ttl_s: float,
        expected: str | None = None,
        stale: Callable[[str], bool] | None = None,
    ) -> str:
        """``"ours"`` (the lease is ``owner``'s for ``ttl_s``: ``SET NX PX``), ``"held"`` (another driver's lease
        is live) or ``"done"`` (the combo's stored status is no longer ``expected``: someone played it).
        The lease is taken before the status is read, and a driver stores before it releases, so a combo
        seen as not done under a live lease of ours cannot be stored by anyone else meanwhile.
        ``stale(holder)`` true takes over a live lease whose driver is known to be gone (compare-and-set)."""
        name = self._claim_key(tag, key)
        ttl_ms = max(1, int(ttl_s * 1000))
        with self._guard():
            if not self._redis.set(name, owner, nx=True, px=ttl_ms):
                holder = self._redis.get(name)
                if holder != owner:
                    if holder is None or stale is None or not stale(holder):
                        return "held"  # (None: it lapsed just now; the next look takes it)
                    if not int(self._redis.eval(_TAKE_OVER, 1, name, holder, owner, ttl_ms)):
                        return "held"
                self._redis.pexpire(name, ttl_ms)
            if self._best_status(tag, key) != expected:
                self._release(name, owner)
                return "done"
        return "ours"

    def renew_claims(self, tag: str, keys: Iterable[str], owner: str, ttl_s: float) -> list[str]:
        """Extend ``owner``'s leases on ``keys``; returns the keys whose lease it no longer holds."""
        keys = list(keys)
        if not keys:
            return []
        with self._guard():
            kept = self._redis.eval(
                _RENEW, len(keys), *[self._claim_key(tag, k) for k in keys], owner, max(1, int(ttl_s * 1000))
            )
        return [key for key, ok in zip(keys, kept, strict=True) if not int(ok)]

    def release_claim(self, tag: str, key: str, owner: str) -> None:
        """Drop ``owner``'s lease on ``key`` (another driver's is left alone)."""
        with self._guard():
            self._release(self._claim_key(tag, key), owner)

    def _release(self, name: str, owner: str) -> None:
        self._redis.eval(_RELEASE, 1, name, owner)

    # -- the request queue: accepted work that must survive a restart ---------------------------------

    def queue_put(self, queue: str, item_id: str, body: str) -> None:
        with self._guard():
            pipe = self._redis.pipeline(transaction=True)
            pipe.hset(self._key("queue", queue), item_id, body)
            pipe.zadd(self._key("queue-order", queue), {item_id: time.time()}, nx=True)
            pipe.execute()

    def queue_items(self, queue: str) -> dict[str, str]:
        with self._guard():
            ids = self._redis.zrange(self._key("queue-order", queue), 0, -1)
            bodies = self._redis.hmget(self._key("queue", queue), ids) if ids else []
        return {i: b for i, b in zip(ids, bodies, strict=True) if b is not None}

    def queue_drop(self, queue: str, item_id: str) -> None:
        with self._guard():
            pipe = self._redis.pipeline(transaction=True)
            pipe.hdel(self._key("queue", queue), item_id)
            pipe.zrem(self._key("queue-order", queue), item_id)
            pipe.execute()

    # -- reading ------------------------------------------------------------------------------------

    def _load_many(self, ids: Sequence[str]) -> list[EpisodeLog]:
        out: list[EpisodeLog] = []
        for start in range(0, len(ids), _BATCH):
            chunk = ids[start : start + _BATCH]
            with self._guard():
                raws = self._redis.mget([self._ep(i) for i in chunk])
            with gc_paused():
                out.extend(self._parse(i, raw) for i, raw in zip(chunk, raws, strict=True) if raw is not None)
        return out

    def _parse(self, episode_id: str, raw: str) -> EpisodeLog:
        return load_stored(self.url, episode_id, raw)

    def get(self, episode_id: str) -> EpisodeLog:
        with self._guard():
            raw = self._redis.get(self._ep(episode_id))
        if raw is None:
            raise KeyError(f"episode {episode_id!r} not found in {self.url}")
        return self._parse(episode_id, raw)

    def _ordered_ids(self, sets: list[str]) -> list[str]:
        """Ids in every set, oldest first (ties by id)."""
        with self._guard():
            if not sets:
                return list(self._redis.zrange(self._order, 0, -1))
            ids = sorted(self._redis.sinter(sets))
            if not ids:
                return []
            scores = self._redis.zmscore(self._order, ids)
        ranked = sorted((score if score is not None else 0.0, i) for score, i in zip(scores, ids, strict=True))
        return [i for _, i in ranked]

    def query(
        self,
        tag: str | None = None,
        model: str | None = None,
        scenario: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[EpisodeLog]:
        sets = self._filter_sets(tag, model, scenario, status)
        if limit == 0:
            return []
        if sets:
            ids = self._ordered_ids(sets)
            ids = ids[offset:] if limit is None else ids[offset : offset + limit]
        else:
            stop = -1 if limit is None else offset + limit - 1
            with self._guard():
                ids = list(self._redis.zrange(self._order, offset, stop))
        return self._load_many(ids)

    def count(
        self, tag: str | None = None, model: str | None = None, scenario: str | None = None, status: str | None = None
    ) -> int:
        sets = self._filter_sets(tag, model, scenario, status)
        with self._guard():
            if not sets:
                return int(self._redis.zcard(self._order))
            if len(sets) == 1:
                return int(self._redis.scard(sets[0]))
            return len(self._redis.sinter(sets))

    def iter(self, tag: str | None = None) -> Iterator[EpisodeLog]:
        """The ids are read once; episodes are then loaded in batches."""
        ids = self._ordered_ids(self._filter_sets(tag, None, None, None))
        for start in range(0, len(ids), _BATCH):
            yield from self._load_many(ids[start : start + _BATCH])

    def combo_status(self, tag: str) -> dict[str, str]:
        with self._guard():
            counts = self._redis.hgetall(self._key("combo", tag))
        best: dict[str, int] = {}
        for field, n in counts.items():
            status, _, key = field.partition(":")
            if int(n) > 0 and status in STATUSES:
                best[key] = min(best.get(key, len(STATUSES)), STATUSES.index(status))
        return {key: STATUSES[rank] for key, rank in sorted(best.items())}

    def tags(self) -> list[str]:
        with self._guard():
            counts = self._redis.hgetall(self._tags)
        return sorted(tag for tag, n in counts.items() if int(n) > 0)

    def clear(self) -> int:
        """Delete every key under this store's prefix (tests use it); returns how many."""
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self.prefix) + ":*"
        deleted = 0
        with self._guard():
            batch: list[str] = []
            for key in self._redis.scan_iter(match=pattern, count=500):
                batch.append(key)
                if len(batch) >= 500:
                    deleted += int(self._redis.delete(*batch))
                    batch = []
            if batch:
                deleted += int(self._redis.delete(*batch))
        return deleted

    def close(self) -> None:
        self._redis.close()

    def __repr__(self) -> str:
        return f"RedisStore({self.url!r}, prefix={self.prefix!r})"


def _entry(data: dict[str, Any]) -> dict[str, Any]:
    """What the indexes need from one episode's JSON."""
    created_at = str(data.get("created_at", ""))
    return {
        "id": data["id"],
        "tag": data.get("tag", ""),
        "status": data["status"],
        "combo_key": data.get("combo_key", ""),
        "scenario_id": data["setup"]["scenario"]["id"],
        "models": [a["model"] for a in data.get("agents", [])],
        "created_ts": created_timestamp(created_at),
    }


def _log_entry(log: EpisodeLog) -> dict[str, Any]:
    return {
        "id": log.id,
        "tag": log.tag,
        "status": log.status,
        "combo_key": log.combo_key,
        "scenario_id": log.scenario_id,
        "models": log.models,
        "created_ts": created_timestamp(log.created_at),
    }


def _password(url: str) -> str | None:
    try:
        return urlsplit(url).password or None
    except ValueError:
        return None
