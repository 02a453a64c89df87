"""Episode store write and read rates: SQLite, and Redis where one can be had.

    python benchmarks/stores.py                  # 10,000 episodes, SQLite and Redis
    python benchmarks/stores.py --stores sqlite  # SQLite only
    python benchmarks/stores.py --quick          # 200 episodes (the smoke test)

Episodes come from ``tests/episode_fixtures.py::make_episodes`` (realistic logs, ~5 KB of JSON each).
Redis: ``$REDIS_URL`` when set; otherwise a ``redis-server`` on PATH is started on a free port (no
persistence) and stopped at the end; otherwise Redis is skipped with a message. Every write mode starts from
an empty store (a new SQLite file, a new Redis key prefix). Writers are threads sharing one store object, as
``run_batch`` does (its ``StoreWriter`` calls ``store.put`` from worker threads). The input logs are moved out of the
garbage collector's sight (``gc.freeze``) once built; what a read builds is not.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import _common
from _common import machine_line, print_table
from episode_fixtures import make_episodes

from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.sqlite_store import SQLiteStore

_ = _common
BATCH = 100


def chunks(items: list[Any], n: int) -> list[list[Any]]:
    return [items[i : i + n] for i in range(0, len(items), n)]


def parallel(threads: int, parts: list[Any], fn: Callable[[Any], None]) -> None:
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(fn, parts))


def write_modes(threads: int) -> list[tuple[str, Callable[[Any, list[EpisodeLog]], None]]]:
    def put_one(store: Any, logs: list[EpisodeLog]) -> None:
        for log in logs:
            store.put(log)

    def put_threads(store: Any, logs: list[EpisodeLog]) -> None:
        parallel(threads, [logs[i::threads] for i in range(threads)], lambda part: put_one(store, part))

    def many_one(store: Any, logs: list[EpisodeLog]) -> None:
        for part in chunks(logs, BATCH):
            store.put_many(part)

    def many_threads(store: Any, logs: list[EpisodeLog]) -> None:
        parallel(threads, chunks(logs, BATCH), store.put_many)

    return [
        ("put, 1 writer", put_one),
        (f"put, {threads} writer threads", put_threads),
        (f"put_many({BATCH}), 1 writer", many_one),
        (f"put_many({BATCH}), {threads} writer threads", many_threads),
    ]


def read_modes(threads: int, logs: list[EpisodeLog], gets: int) -> list[tuple[str, int, Callable[[Any], int]]]:
    ids = [log.id for log in random.Random(0).sample(logs, min(gets, len(logs)))]
    model = logs[0].models[0]

    def get_one(store: Any) -> int:
        for i in ids:
            store.get(i)
        return len(ids)

    def get_threads(store: Any) -> int:
        parallel(threads, [ids[i::threads] for i in range(threads)], lambda part: [store.get(i) for i in part])
        return len(ids)

    def query_all(store: Any) -> int:
        return len(store.query(tag="bench"))

    def iter_all(store: Any) -> int:
        return sum(1 for _ in store.iter("bench"))

    def query_all_gc_paused(store: Any) -> int:
        gc.disable()  # what a store could do around its bulk parse (see README)
        try:
            return len(store.query(tag="bench"))
        finally:
            gc.enable()

    def page(store: Any) -> int:
        return len(store.query(tag="bench", model=model, limit=50, offset=len(logs) // 4))

    def count(store: Any) -> int:
        store.count(tag="bench")
        return 1

    def combos(store: Any) -> int:
        return len(store.combo_status("bench"))

    return [
        (f"get by id, 1 reader ({len(ids)} ids)", len(ids), get_one),
        (f"get by id, {threads} reader threads", len(ids), get_threads),
        ("query(tag): every episode", len(logs), query_all),
        ("query(tag), GC paused during the call", len(logs), query_all_gc_paused),
        ("iter(tag): every episode, streamed", len(logs), iter_all),
        ("query(tag, model, limit=50, offset)", 50, page),
        ("count(tag)", 1, count),
        ("combo_status(tag) (resume planning)", len(logs), combos),
    ]


@contextmanager
def redis_url() -> Iterator[str | None]:
    """``$REDIS_URL``, or a throwaway local redis-server, or None."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class Stores:
    """Fresh, empty stores of one kind on demand; all removed at the end."""

    def __init__(self, kind: str, url: str | None, tmp: Path) -> None:
        self.kind, self.url, self.tmp = kind, url, tmp
        self.opened: list[Any] = []

    def new(self) -> Any:
        if self.kind == "sqlite":
            store: Any = SQLiteStore(str(self.tmp / f"{uuid.uuid4().hex}.db"))
        else:
            from sotopia_env.episodes.redis_store import RedisStore

            assert self.url is not None
            store = RedisStore(self.url, prefix=f"sotopia-bench-{uuid.uuid4().hex[:8]}")
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            if self.kind == "redis":
                store.clear()
            store.close()


def bench_kind(kind: str, url: str | None, logs: list[EpisodeLog], threads: int, gets: int) -> list[tuple]:
    rows = []
    payload_mb = sum(len(log.model_dump_json()) for log in logs[:200]) / min(200, len(logs)) * len(logs) / 2**20
    with tempfile.TemporaryDirectory() as tmp:
        stores = Stores(kind, url, Path(tmp))
        try:
            last = None
            for name, write in write_modes(threads):
                store = stores.new()
                start = time.perf_counter()
                write(store, logs)
                seconds = time.perf_counter() - start
                assert store.count(tag="bench") == len(logs), (kind, name)
                rows.append((kind, "write", name, len(logs), seconds, len(logs) / seconds, payload_mb / seconds))
                last = store
            for name, n, read in read_modes(threads, logs, gets):
                start = time.perf_counter()
                got = read(last)
                seconds = time.perf_counter() - start
                assert got == n or name.startswith("combo"), (kind, name, got, n)
                rows.append((kind, "read", name, n, seconds, n / seconds, float("nan")))
        finally:
            stores.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--gets", type=int, default=1000, help="episodes read back one by one")
    parser.add_argument("--stores", default="sqlite,redis", help="comma list of: sqlite, redis")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    args = parser.parse_args()
    if args.quick:
        args.episodes, args.gets = 200, 50
    print(f"# Episode stores ({args.episodes:,} episodes)\n\n{machine_line()}")
    start = time.perf_counter()
    logs = make_episodes(args.episodes, tag="bench")
    built = time.perf_counter() - start
    # The 10,000 logs (a million objects) live all through the run; a real writer holds one at a time. Without
    # this, each full garbage collection (~0.5 s here) lands on whichever row happens to trigger it.
    gc.collect()
    gc.freeze()
    sample = logs[: min(500, len(logs))]
    start = time.perf_counter()
    texts = [log.model_dump_json() for log in sample]
    dump_us = (time.perf_counter() - start) / len(sample) * 1e6
    start = time.perf_counter()
    for text in texts:
        EpisodeLog.model_validate_json(text)
    load_us = (time.perf_counter() - start) / len(sample) * 1e6
    size = sum(map(len, texts)) / len(texts)
    print(
        f"\nbuilt {len(logs):,} episodes in {built:.1f} s; one episode is {size / 1024:.1f} KiB of JSON; "
        f"model_dump_json {dump_us:.0f} µs, model_validate_json {load_us:.0f} µs per episode "
        f"(a floor under every put and every read)"
    )
    rows: list[tuple] = []
    kinds = [k.strip() for k in args.stores.split(",") if k.strip()]
    if "sqlite" in kinds:
        rows += bench_kind("sqlite", None, logs, args.threads, args.gets)
    if "redis" in kinds:
        with redis_url() as url:
            if url is None:
                print("\nredis: skipped (no $REDIS_URL and no redis-server on PATH)")
            else:
                rows += bench_kind("redis", url, logs, args.threads, args.gets)
    print_table(
        "write and read rates",
        ["store", "op", "mode", "episodes", "seconds", "episodes / s", "MiB / s"],
        rows,
        note="every write mode starts from an empty store; reads run on the store the last write mode filled.",
    )


if __name__ == "__main__":
    main()
