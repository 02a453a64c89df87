"""Store faults while episodes are played: a real redis-server SIGKILLed mid-batch, a locked and a
read-only SQLite file, and stores that are down before anything is played.

The rule: a store that is back within the retry window loses nothing; one that stays down costs no
finished episode (they go to a spill file that ``episodes import`` restores) and ends the command with
one line. The Redis tests start their own ``redis-server`` (AOF, fsync on every write) and skip loudly
when it is not on PATH.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import batch_worker
import pytest
from conftest import start_redis_server
from typer.testing import CliRunner

from sotopia_env.cli.main import app
from sotopia_env.episodes.export import import_jsonl
from sotopia_env.episodes.redis_store import RedisStore
from sotopia_env.episodes.runner import run_batch
from sotopia_env.episodes.sqlite_store import SQLiteStore
from sotopia_env.episodes.store import EpisodeStore
from sotopia_env.episodes.store_writer import EpisodesSpilled, StoreWriter
from sotopia_env.evaluators import RuleBasedEvaluator

TESTS = Path(__file__).parent
TAG = batch_worker.TAG
N = 8  # episodes per batch


def free_port() -> int:
    for port in range(6390, 6400):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip("no free port in 6390-6399 for a test redis-server")


class RedisServer:
    """A redis-server of our own in a temp dir: append-only file, fsync on every write."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = start_redis_server(self.port, str(self.folder), "--appendonly", "yes", "--appendfsync", "always")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not on PATH: the store-fault tests with a real Redis are SKIPPED")
    folder = tmp_path / "redis"
    folder.mkdir()
    server = RedisServer(folder)
    server.start()
    yield server
    if server.proc is not None:
        server.kill()


def wait_until(condition: Callable[[], bool], proc: subprocess.Popen | None = None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the batch ended before the fault: {proc.communicate()}")
        time.sleep(0.02)


def stored_count(store: EpisodeStore, tag: str) -> Callable[[], int]:
    return lambda: store.count(tag=tag)


def assert_complete(store: EpisodeStore, tag: str, n: int) -> None:
    """Every episode stored exactly once."""
    logs = list(store.iter(tag))
    assert len(logs) == n
    assert Counter(log.combo_key for log in logs).most_common(1)[0][1] == 1


def batch(store: EpisodeStore, retry_seconds: float, spill_dir: Path, delay_s: float = 0.05):
    return run_batch(
        batch_worker.jobs(N),
        store,
        TAG,
        RuleBasedEvaluator(),
        batch_worker.factory(delay_s),
        concurrency=2,
        progress=False,
        retry_seconds=retry_seconds,
        spill_dir=spill_dir,
    )


def in_background(action: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=action, daemon=True)
    thread.start()
    return thread


# -- Redis --------------------------------------------------------------------------------------------


def test_redis_killed_mid_batch_and_back_within_the_window_loses_nothing(redis_server: RedisServer, tmp_path: Path):
    store = RedisStore(redis_server.url)
    watcher = RedisStore(redis_server.url)
    seen: dict[str, int] = {}

    def outage() -> None:
        wait_until(lambda: watcher.count(tag=TAG) >= 2)
        seen["stored_before_kill"] = watcher.count(tag=TAG)
        redis_server.kill()
        time.sleep(1.5)  # episodes end (about 0.35 s each) while the server is gone
        redis_server.start()

    thread = in_background(outage)
    summary = asyncio.run(batch(store, retry_seconds=20, spill_dir=tmp_path / "spill"))
    thread.join()
    assert 2 <= seen["stored_before_kill"] < N - 2, "the kill should land mid-batch"
    assert summary.rated == N
    assert_complete(store, TAG, N)
    assert not (tmp_path / "spill").exists()


def test_redis_down_for_good_spills_the_rest_and_import_completes_the_set(
    redis_server: RedisServer, tmp_path: Path, library
):
    ids = ",".join(sorted(library.scenarios)[:4])  # 4 scenarios x both seats = 8 episodes
    args = ["benchmark", "--model", "custom_agents:SlowPolite", "--partner", "custom_agents:Quiet"]
    args += ["--evaluator", "none", "--scenarios", ids, "--max-turns", "4", "--concurrency", "2"]
    args += ["--store", redis_server.url, "--tag", "down", "--store-retry-seconds", "2"]
    data_home = tmp_path / "data"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    env["XDG_DATA_HOME"] = str(data_home)
    cli = [sys.executable, "-c", "from sotopia_env.cli.main import app; app()", *args]
    proc = subprocess.Popen(cli, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watcher = RedisStore(redis_server.url)
    wait_until(lambda: watcher.count(tag="down") >= 2, proc)
    redis_server.kill()
    _, err = proc.communicate(timeout=120)

    assert proc.returncode == 1 and "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert line.startswith("error:") and "could not be stored in redis://127.0.0.1" in line
    assert "sotopia-env episodes import" in line
    match = re.search(r"saved in (\S+\.jsonl)\.", line)
    assert match, line
    spill = Path(match.group(1))
    assert spill.parent == data_home / "sotopia-env" / "spill"
    spilled = {log.id for log in import_jsonl(spill)}

    redis_server.start()  # the AOF brings back what was stored before the kill
    store = RedisStore(redis_server.url)
    stored = {log.id for log in store.iter("down")}
    assert len(stored) >= 2 and len(spilled) >= 1
    assert len(stored | spilled) == N  # nothing finished was dropped
    result = CliRunner().invoke(app, ["episodes", "import", str(spill), "--store", redis_server.url])
    assert result.exit_code == 0, result.output
    assert_complete(store, "down", N)


def test_a_record_that_cannot_be_written_is_spilled_at_once(redis_server: RedisServer, tmp_path: Path):
    from episode_fixtures import make_episode

    store = RedisStore(redis_server.url)
    log = make_episode(0)
    store._redis.set(f"sotopia:ep:{log.id}", "{not json")  # a corrupt record where this episode goes
    writer = StoreWriter(store, "corrupt", retry_seconds=30, spill_dir=tmp_path)
    started = time.monotonic()
    assert asyncio.run(writer.put(log)) is False
    assert time.monotonic() - started < 5, "a permanent error must not be retried for the whole window"
    with pytest.raises(EpisodesSpilled) as info:
        writer.finish()
    assert "is corrupt" in str(info.value) and [e.id for e in import_jsonl(info.value.path)] == [log.id]


# -- SQLite -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def write_lock(path: Path) -> Iterator[None]:
    """Another process-like writer holding the database's write lock."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def test_sqlite_locked_for_a_moment_loses_nothing(tmp_path: Path):
    db = tmp_path / "eps.db"
    store = SQLiteStore(str(db), timeout=0.2)

    def hold() -> None:
        wait_until(lambda: store.count(tag=TAG) >= 2)
        with write_lock(db):
            time.sleep(1.5)

    thread = in_background(hold)
    summary = asyncio.run(batch(store, retry_seconds=20, spill_dir=tmp_path / "spill"))
    thread.join()
    assert summary.rated == N
    assert_complete(store, TAG, N)
    assert not (tmp_path / "spill").exists()


def test_the_batch_keeps_playing_while_a_write_is_retried(tmp_path: Path):
    """A write stuck on a locked file holds no concurrency slot: every episode starts while the lock is held."""
    db = tmp_path / "eps.db"
    store = SQLiteStore(str(db), timeout=0.2)
    seats_built: list[str] = []
    make = batch_worker.factory(0.02)

    def factory(spec: str, seat: int):
        seats_built.append(spec)
        return make(spec, seat)

    locked: dict[str, int] = {}

    def hold() -> None:
        wait_until(lambda: store.count(tag=TAG) >= 1)
        with write_lock(db):
            locked["stored"] = store.count(tag=TAG)
            with contextlib.suppress(AssertionError):
                wait_until(lambda: len(seats_built) == 2 * N, timeout=10)
            locked["started"] = len(seats_built) // 2

    thread = in_background(hold)
    summary = asyncio.run(
        run_batch(batch_worker.jobs(N), store, TAG, None, factory, concurrency=2, progress=False, retry_seconds=30)
    )
    thread.join()
    assert locked["stored"] < N - 2 and locked["started"] == N  # all started while nothing could be stored
    assert summary.unrated == N
    assert_complete(store, TAG, N)


def test_sqlite_locked_for_good_spills_then_import_completes(tmp_path: Path):
    db = tmp_path / "eps.db"
    store = SQLiteStore(str(db), timeout=0.2)
    release = threading.Event()

    def hold() -> None:
        wait_until(lambda: store.count(tag=TAG) >= 2)
        with write_lock(db):
            release.wait(60)

    thread = in_background(hold)
    try:
        with pytest.raises(EpisodesSpilled) as info:
            asyncio.run(batch(store, retry_seconds=1, spill_dir=tmp_path / "spill"))
    finally:
        release.set()
        thread.join()
    message = str(info.value)
    assert "\n" not in message and "database is locked" in message and str(info.value.path) in message
    assert info.value.path.parent == tmp_path / "spill"
    assert store.count(tag=TAG) + info.value.count == N
    store.put_many(import_jsonl(info.value.path))
    assert_complete(store, TAG, N)


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make ``path`` really read-only: chmod for a user, the immutable flag for root (who ignores modes)."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
        pytest.skip("running as root without a working 'chattr +i': cannot make a file read-only; SKIPPED")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_sqlite_read_only_file_is_retried_then_spilled(tmp_path: Path):
    db = tmp_path / "eps.db"
    store = SQLiteStore(str(db))  # opened writable; the batch's writer threads open the file anew
    with read_only(db), pytest.raises(EpisodesSpilled) as info:
        asyncio.run(batch(store, retry_seconds=1, spill_dir=tmp_path / "spill", delay_s=0))
    message = str(info.value)
    assert "\n" not in message and "readonly database" in message and f"{N} finished episode(s)" in message
    assert store.count() == 0
    store.put_many(import_jsonl(info.value.path))
    assert_complete(store, TAG, N)


def test_sqlite_read_only_then_writable_again_within_the_window_loses_nothing(tmp_path: Path):
    from episode_fixtures import make_episode

    db = tmp_path / "eps.db"
    store = SQLiteStore(str(db))
    writer = StoreWriter(store, "ro", retry_seconds=20, spill_dir=tmp_path / "spill")
    results: list[bool] = []

    async def write_all() -> None:
        results.extend(await asyncio.gather(*(writer.put(make_episode(i)) for i in range(3))))

    with read_only(db):
        thread = in_background(lambda: asyncio.run(write_all()))
        time.sleep(1.0)
        assert store.count() == 0 and thread.is_alive(), "writes to a read-only file wait and retry"
    thread.join(30)
    assert results == [True, True, True]
    assert store.count() == 3 and writer.spilled == 0


# -- stores that are down before anything is played ----------------------------------------------------


def invoke(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


POLITE = ["--agent1", "custom_agents:PoliteAgent", "--agent2", "custom_agents:PoliteAgent", "--evaluator", "none"]


def test_run_with_an_unreachable_store_plays_nothing():
    result = invoke("run", *POLITE, "--store", "redis://127.0.0.1:1/0")
    assert result.exit_code == 1
    assert result.output.strip() == "error: cannot reach Redis at redis://127.0.0.1:1: Connection refused"


def test_benchmark_with_an_unreachable_store_plays_nothing(library):
    args = ["benchmark", "--model", "custom_agents:PoliteAgent", "--partner", "custom_agents:Quiet"]
    result = invoke(
        *args, "--evaluator", "none", "--scenarios", sorted(library.scenarios)[0], "--store", "redis://127.0.0.1:1/0"
    )
    assert result.exit_code == 1
    assert result.output.strip() == "error: cannot reach Redis at redis://127.0.0.1:1: Connection refused"


def test_run_with_a_read_only_sqlite_store_plays_nothing(tmp_path: Path):
    db = tmp_path / "ro.db"
    SQLiteStore(str(db)).close()
    with read_only(db):
        result = invoke("run", *POLITE, "--store", f"sqlite:///{db}")
    assert result.exit_code == 1 and "After you." not in result.output
    (line,) = result.output.strip().splitlines()
    assert str(db) in line and "readonly database" in line


def test_run_records_its_seed_and_stores_once(tmp_path: Path):
    store = f"sqlite:///{tmp_path}/eps.db"
    result = invoke("run", *POLITE, "--max-turns", "2", "--seed", "7", "--store", store, "--tag", "seeded")
    assert result.exit_code == 0, result.output
    (log,) = SQLiteStore(store).query(tag="seeded")
    assert log.seed == 7 and f"stored episode {log.id}" in result.output


def test_sqlite_thread_reconnects_after_a_read_only_fault(tmp_path: Path):
    from episode_fixtures import make_episode

    from sotopia_env.episodes.store import StoreUnavailable

    db = tmp_path / "eps.db"
    SQLiteStore(str(db)).close()
    store = SQLiteStore(str(db))
    store.close()  # this thread opens the file anew while it is read-only
    with read_only(db), pytest.raises(StoreUnavailable, match="readonly database"):
        store.put(make_episode(0))
    store.put(make_episode(0))  # same thread, file writable again: a new connection, not the read-only one
    assert store.count() == 1
