"""One test suite for both episode stores. Redis runs only when REDIS_URL names a real server."""

from __future__ import annotations

import multiprocessing
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from episode_fixtures import make_episode, make_episodes, write_episodes

from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.redis_store import RedisStore
from sotopia_env.episodes.sqlite_store import SQLiteStore
from sotopia_env.episodes.store import EpisodeStore, StoreError, open_store

REDIS_SKIP = "REDIS_URL is not set: Redis store tests skipped"


def redis_url() -> str:
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip(REDIS_SKIP)
    return url


BOTH_STORES = ["sqlite", pytest.param("redis", marks=pytest.mark.redis)]


@contextmanager
def fresh_store(kind: str, tmp_path: Path) -> Iterator[EpisodeStore]:
    """An empty store of ``kind``: an SQLite file under ``tmp_path``, or a Redis prefix of its own (cleared after)."""
    if kind == "sqlite":
        sqlite = SQLiteStore(f"sqlite:///{tmp_path}/store/episodes.db")
        yield sqlite
        sqlite.close()
        return
    redis_store = RedisStore(redis_url(), prefix=f"sotopia-test-{uuid.uuid4().hex[:12]}")
    try:
        yield redis_store
    finally:
        redis_store.clear()
        redis_store.close()


@pytest.fixture(params=BOTH_STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EpisodeStore]:
    with fresh_store(request.param, tmp_path) as st:
        yield st


def ids(logs: list[EpisodeLog]) -> list[str]:
    return [log.id for log in logs]


# -- basics -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["rated", "unrated", "failed"])
def test_put_get_roundtrip(store: EpisodeStore, status: str) -> None:
    log = make_episode(7, status=status)
    store.put(log)
    assert store.get(log.id) == log
    assert store.count() == 1


def test_get_missing_names_the_id(store: EpisodeStore) -> None:
    with pytest.raises(KeyError, match="no-such-episode"):
        store.get("no-such-episode")


def test_replace_updates_every_index(store: EpisodeStore) -> None:
    first = make_episode(1, status="unrated", models=("old-model", "gpt-4o-mini"))
    store.put(first)
    second = make_episode(1, status="rated", models=("new-model", "gpt-4o-mini"))
    assert second.id == first.id and second.combo_key != first.combo_key
    store.put(second)
    assert store.get(first.id) == second
    assert store.count() == 1
    assert store.count(status="unrated") == 0
    assert ids(store.query(status="rated")) == [first.id]
    assert store.query(model="old-model") == []
    assert ids(store.query(model="new-model")) == [first.id]
    assert store.combo_status("test") == {second.combo_key: "rated"}


def test_put_many_and_duplicate_ids(store: EpisodeStore) -> None:
    logs = make_episodes(5)
    newer = make_episode(2, status="failed")
    store.put_many([*logs, newer])
    assert store.count() == 5
    assert store.get(newer.id) == newer
    assert store.count(status="failed") == 1


def test_put_many_failure_stores_nothing_of_its_batch(store: EpisodeStore) -> None:
    def broken() -> Iterator[EpisodeLog]:
        yield make_episode(0)
        yield make_episode(1)
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        store.put_many(broken())
    assert store.count() == 0


# -- queries ------------------------------------------------------------------------------------------


@pytest.fixture
def mixed(store: EpisodeStore) -> list[EpisodeLog]:
    """Six episodes over two tags, three models, three scenarios and all statuses, stored newest first."""
    logs = [
        make_episode(0, tag="a", models=("m1", "m2"), setup_index=0),
        make_episode(1, tag="a", models=("m2", "m1"), setup_index=1, status="unrated"),
        make_episode(2, tag="a", models=("m1", "m3"), setup_index=0, status="failed"),
        make_episode(3, tag="b", models=("m3", "m3"), setup_index=2),
        make_episode(4, tag="b", models=("m1", "m2"), setup_index=1),
        make_episode(5, tag="b", models=("m2", "m3"), setup_index=0, status="unrated"),
    ]
    for log in reversed(logs):
        store.put(log)
    return logs


def test_query_orders_oldest_first(store: EpisodeStore, mixed: list[EpisodeLog]) -> None:
    assert ids(store.query()) == ids(mixed)
    assert store.query() == mixed


def test_query_by_each_filter(store: EpisodeStore, mixed: list[EpisodeLog]) -> None:
    s0 = mixed[0].scenario_id
    assert ids(store.query(tag="a")) == ids(mixed[:3])
    assert ids(store.query(tag="b")) == ids(mixed[3:])
    assert ids(store.query(model="m1")) == ids([mixed[0], mixed[1], mixed[2], mixed[4]])  # either seat
    assert ids(store.query(model="m3")) == ids([mixed[2], mixed[3], mixed[5]])
    assert ids(store.query(scenario=s0)) == ids([mixed[0], mixed[2], mixed[5]])
    assert ids(store.query(status="unrated")) == ids([mixed[1], mixed[5]])
    assert store.query(tag="nope") == []
    assert store.query(model="nope") == []


def test_query_combinations(store: EpisodeStore, mixed: list[EpisodeLog]) -> None:
    s0 = mixed[0].scenario_id
    assert ids(store.query(tag="a", model="m3")) == [mixed[2].id]
    assert ids(store.query(tag="b", status="rated")) == ids(mixed[3:5])
    assert ids(store.query(model="m2", scenario=s0)) == ids([mixed[0], mixed[5]])
    assert ids(store.query(tag="a", model="m1", scenario=s0, status="rated")) == [mixed[0].id]
    assert store.query(tag="a", model="m1", scenario=s0, status="unrated") == []


def test_count_matches_query(store: EpisodeStore, mixed: list[EpisodeLog]) -> None:
    assert store.count() == 6
    all_filters: list[dict[str, Any]] = [
        {"tag": "a"},
        {"model": "m2"},
        {"status": "rated"},
        {"tag": "b", "model": "m3"},
        {"scenario": mixed[1].scenario_id, "status": "unrated"},
        {"tag": "zzz"},
    ]
    for filters in all_filters:
        assert store.count(**filters) == len(store.query(**filters)), filters


def test_unknown_status_is_an_error(store: EpisodeStore) -> None:
    with pytest.raises(ValueError, match="unknown status 'done'"):
        store.query(status="done")


def test_pagination(store: EpisodeStore) -> None:
    logs = make_episodes(10, tag="p")
    store.put_many(reversed(logs))
    assert ids(store.query(limit=3)) == ids(logs[:3])
    assert ids(store.query(limit=3, offset=3)) == ids(logs[3:6])
    assert ids(store.query(offset=8)) == ids(logs[8:])
    assert ids(store.query(limit=5, offset=8)) == ids(logs[8:])
    assert store.query(limit=0) == []
    assert store.query(offset=10) == []
    assert ids(store.query(tag="p", limit=2, offset=1)) == ids(logs[1:3])
    assert ids(store.query(tag="p", model="gpt-4o-mini", limit=4, offset=6)) == ids(logs[6:10])


def test_iter_streams_in_order(store: EpisodeStore) -> None:
    logs = make_episodes(300, tag="big")  # more than one SQLite page
    store.put_many(logs)
    store.put(make_episode(999, tag="other"))
    streamed = list(store.iter("big"))
    assert ids(streamed) == ids(logs)
    assert len(list(store.iter())) == 301


def test_combo_status_best_status(store: EpisodeStore) -> None:
    failed = make_episode(0, status="failed", episode_id="x-failed")
    unrated = make_episode(0, status="unrated", episode_id="x-unrated")
    rated = make_episode(0, status="rated", episode_id="x-rated")
    other = make_episode(1, status="failed")
    elsewhere = make_episode(2, tag="other")
    store.put_many([failed, other, elsewhere])
    assert store.combo_status("test") == {failed.combo_key: "failed", other.combo_key: "failed"}
    store.put(unrated)
    store.put(rated)
    assert store.combo_status("test") == {rated.combo_key: "rated", other.combo_key: "failed"}
    store.delete(rated.id)
    assert store.combo_status("test")[rated.combo_key] == "unrated"
    assert store.combo_status("other") == {elsewhere.combo_key: "rated"}
    assert store.combo_status("missing") == {}


def test_delete(store: EpisodeStore, mixed: list[EpisodeLog]) -> None:
    gone = mixed[3]
    store.delete(gone.id)
    with pytest.raises(KeyError, match=gone.id):
        store.get(gone.id)
    assert store.count() == 5
    assert gone.id not in ids(store.query(tag="b"))
    assert gone.id not in ids(store.query(model="m3"))
    with pytest.raises(KeyError, match=gone.id):
        store.delete(gone.id)


def test_request_queue_keeps_order_replaces_by_id_and_forgets(store: EpisodeStore) -> None:
    store.queue_put("simulations", "b", '{"n": 1}')
    store.queue_put("simulations", "a", '{"n": 2}')
    store.queue_put("other", "a", "elsewhere")
    store.queue_put("simulations", "b", '{"n": 3}')  # the same id: new body, same place
    assert store.queue_items("simulations") == {"b": '{"n": 3}', "a": '{"n": 2}'}
    assert list(store.queue_items("simulations")) == ["b", "a"]
    store.queue_drop("simulations", "b")
    store.queue_drop("simulations", "never-there")
    assert store.queue_items("simulations") == {"a": '{"n": 2}'}
    assert store.queue_items("other") == {"a": "elsewhere"}
    assert store.count() == 0  # requests are not episodes


def test_tags(store: EpisodeStore, mixed: list[EpisodeLog]) -> None:
    assert store.tags() == ["a", "b"]
    only = make_episode(50, tag="solo")
    store.put(only)
    assert store.tags() == ["a", "b", "solo"]
    store.delete(only.id)
    assert store.tags() == ["a", "b"]
    store.put(make_episode(0, tag="c", episode_id=mixed[0].id))  # moves one of "a" to "c"
    assert store.tags() == ["a", "b", "c"]


# -- concurrency --------------------------------------------------------------------------------------


def test_concurrent_writers_threads(store: EpisodeStore) -> None:
    threads_n, per_thread = 8, 50
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for j in range(per_thread):
                store.put(make_episode(worker * 100 + j, episode_id=f"t{worker}-{j:02d}", tag="threads"))
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    expected = {f"t{w}-{j:02d}" for w in range(threads_n) for j in range(per_thread)}
    stored = ids(store.query(tag="threads"))
    assert len(stored) == len(expected) == store.count() == store.count(tag="threads")
    assert set(stored) == expected


def test_sqlite_multiprocess_writers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/mp/episodes.db"
    SQLiteStore(url).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=write_episodes, args=(url, w, 40)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    store = SQLiteStore(url)
    try:
        stored = ids(store.query(tag="multi"))
        assert len(stored) == 80 == len(set(stored))
        assert set(stored) == {f"w{w}-{j:03d}" for w in range(2) for j in range(40)}
    finally:
        store.close()


# -- opening ------------------------------------------------------------------------------------------


def test_open_store_urls(tmp_path: Path) -> None:
    for url in (
        f"sqlite:///{tmp_path}/a/one.db",
        f"sqlite:////{str(tmp_path).lstrip('/')}/b/two.db",
        str(tmp_path / "c" / "three.db"),
    ):
        store = open_store(url)
        assert isinstance(store, SQLiteStore)
        store.put(make_episode(0))
        store.close()
    assert sorted(p.name for p in tmp_path.rglob("*.db")) == ["one.db", "three.db", "two.db"]
    assert open_store(f"sqlite:///{tmp_path}/a/one.db").count() == 1


def test_sqlite_corrupt_file_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not an sqlite database, just text " * 200)
    with pytest.raises(StoreError) as info:
        SQLiteStore(str(bad))
    message = str(info.value)
    assert str(bad) in message and "\n" not in message


def test_sqlite_unopenable_path_is_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "adir.db").mkdir()
    with pytest.raises(StoreError) as info:
        SQLiteStore(f"sqlite:///{tmp_path}/adir.db")
    assert str(tmp_path / "adir.db") in str(info.value) and "\n" not in str(info.value)


def test_unreachable_redis_is_one_line_error_without_password() -> None:
    with pytest.raises(StoreError) as info:
        open_store("redis://:s3cret-pass@127.0.0.1:1/0")
    assert str(info.value) == "cannot reach Redis at redis://127.0.0.1:1: Connection refused"


def test_redis_url_is_redacted() -> None:
    url = redis_url()
    store = RedisStore(url, prefix=f"sotopia-test-{uuid.uuid4().hex[:12]}")
    try:
        assert "@" not in store.url and store.url.startswith(("redis://", "rediss://", "unix://"))
    finally:
        store.close()


def test_concurrent_replacements_keep_indexes_consistent(store: EpisodeStore) -> None:
    statuses = ("rated", "unrated", "failed")

    def work(worker: int) -> None:
        for j in range(30):
            store.put(make_episode(j % 4, status=statuses[(worker + j) % 3], tag="race"))

    threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = {log.id: log.status for log in store.query(tag="race")}
    assert len(final) == 4
    for status in statuses:
        assert store.count(tag="race", status=status) == sum(1 for s in final.values() if s == status)
    assert store.combo_status("race") == {store.get(i).combo_key: s for i, s in final.items()}
    assert store.tags() == ["race"]
