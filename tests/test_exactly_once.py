"""Each combination is played once, however many drivers run the same batch on one store (``episodes.claims``).

Against a real SQLite file and a real Redis server: the claim semantics, two drivers in one process, two driver
processes, and a driver SIGKILLed while it holds claims.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import batch_worker
import pytest
from test_stores import redis_url

from sotopia_env.episodes.claims import gone_from_this_host, new_owner
from sotopia_env.episodes.redis_store import RedisStore
from sotopia_env.episodes.runner import run_batch
from sotopia_env.episodes.sqlite_store import SQLiteStore
from sotopia_env.episodes.store import EpisodeStore
from sotopia_env.evaluators import RuleBasedEvaluator

TESTS = Path(__file__).parent
N_SCENARIOS = 6  # one setup each: 6 combinations
ELSEWHERE = "another-host:1:0000"  # a driver on another machine: only its lease's expiry frees its claims


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def where(kind: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``(url, redis prefix)`` of an empty store; each driver opens its own connection to it."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path}/once.db", ""
        return
    prefix = f"sotopia-test-{uuid.uuid4().hex[:12]}"
    yield redis_url(), prefix
    RedisStore(redis_url(), prefix=prefix).clear()


def connect(url: str, prefix: str) -> EpisodeStore:
    return RedisStore(url, prefix=prefix) if prefix else SQLiteStore(url)


def assert_each_once(store: EpisodeStore, tag: str, n: int) -> None:
    keys = Counter(log.combo_key for log in store.iter(tag))
    assert len(keys) == n and max(keys.values()) == 1, keys


# -- the claim itself ---------------------------------------------------------------------------------


def test_a_claim_is_exclusive_until_released_or_lapsed(where: tuple[str, str]) -> None:
    store = connect(*where)
    a, b = new_owner(), new_owner()
    assert store.claim("t", "k", a, 30.0) == "ours"
    assert store.claim("t", "k", a, 30.0) == "ours"  # the holder may take it again (renews)
    assert store.claim("t", "k", b, 30.0) == "held"
    store.release_claim("t", "k", b)  # not b's to release
    assert store.claim("t", "k", b, 30.0) == "held"
    assert store.renew_claims("t", ["k", "other"], a, 30.0) == ["other"]
    store.release_claim("t", "k", a)
    assert store.claim("t", "k", b, 0.3) == "ours"
    time.sleep(0.5)  # b's lease lapses (its driver died)
    assert store.renew_claims("t", ["k"], a, 30.0) == ["k"]
    assert store.claim("t", "k", a, 30.0) == "ours"
    assert store.renew_claims("t", ["k"], b, 30.0) == ["k"]  # b learns it lost the lease


def test_a_stored_combo_is_done_and_a_gone_driver_is_taken_over(where: tuple[str, str]) -> None:
    from episode_fixtures import make_episode

    store = connect(*where)
    log = make_episode(0, tag="t")
    store.put(log)
    assert store.claim("t", log.combo_key, new_owner(), 30.0) == "done"
    assert store.claim("t", log.combo_key, new_owner(), 30.0, expected=log.status) == "ours"  # a rerun's view
    assert store.claim("t", "k", ELSEWHERE, 30.0) == "ours"
    assert store.claim("t", "k", new_owner(), 30.0, stale=gone_from_this_host) == "held"  # another host: wait
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = f"{new_owner().split(':')[0]}:{dead.stdout.strip()}:0000"  # this host, a process that has exited
    assert gone_from_this_host(gone) and not gone_from_this_host(new_owner())
    assert store.claim("t", "j", gone, 30.0) == "ours"
    assert store.claim("t", "j", new_owner(), 30.0, stale=gone_from_this_host) == "ours"


# -- drivers ------------------------------------------------------------------------------------------


def test_two_drivers_in_one_process_split_the_work(where: tuple[str, str]) -> None:
    jobs = batch_worker.jobs(N_SCENARIOS)

    async def both() -> list:
        return await asyncio.gather(
            *(
                run_batch(jobs, connect(*where), "two", RuleBasedEvaluator(), batch_worker.factory(0.05),
                          concurrency=2, progress=False)
                for _ in range(2)
            )
        )  # fmt: skip

    first, second = asyncio.run(both())
    assert first.rated + second.rated == len(jobs)
    assert first.rated > 0 and second.rated > 0, (first, second)  # the work was split
    assert first.skipped + second.skipped == len(jobs)
    assert_each_once(connect(*where), "two", len(jobs))


def worker(url: str, prefix: str, tag: str, delay_s: float, lease_s: float = 60.0) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    args = [url, str(N_SCENARIOS), str(delay_s), tag, str(lease_s), *([prefix] if prefix else [])]
    return subprocess.Popen(
        [sys.executable, str(TESTS / "batch_worker.py"), *args], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def summary_of(proc: subprocess.Popen) -> dict[str, int]:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


def test_two_driver_processes_on_one_store_play_each_combo_once(where: tuple[str, str]) -> None:
    drivers = [worker(*where, "procs", 0.2) for _ in range(2)]  # ~5 s of play each: more than any start-up skew
    first, second = (summary_of(p) for p in drivers)
    assert first["rated"] + second["rated"] == N_SCENARIOS
    assert first["rated"] > 0 and second["rated"] > 0, (first, second)
    assert_each_once(connect(*where), "procs", N_SCENARIOS)


def wait_for(condition, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert proc.poll() is None, proc.stderr.read()[-2000:] if proc.stderr else ""
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def test_a_sigkilled_driver_leaves_its_claims_to_the_other(where: tuple[str, str]) -> None:
    """The killed driver was a process of this host, so its claims are taken over at once; nothing is lost,
    nothing is played twice."""
    store = connect(*where)
    killed = worker(*where, "kill", 0.3)
    wait_for(lambda: store.count(tag="kill") >= 1, killed)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    stored_before = store.count(tag="kill")
    assert stored_before < N_SCENARIOS, "the kill should land mid-batch"
    started = time.monotonic()
    survivor = summary_of(worker(*where, "kill", 0.0))
    assert time.monotonic() - started < 50, "did not wait out the dead driver's 60 s leases"
    assert survivor["rated"] == N_SCENARIOS - stored_before
    assert_each_once(store, "kill", N_SCENARIOS)


def test_a_claim_of_a_driver_elsewhere_is_waited_out_until_its_lease_lapses(where: tuple[str, str]) -> None:
    """A driver on another machine holds one combination (and then dies): the batch plays everything else at
    once, waits for that lease to lapse, then plays the last one."""
    store = connect(*where)
    jobs = batch_worker.jobs(N_SCENARIOS)
    assert store.claim("lapse", jobs[0].key, ELSEWHERE, 1.5) == "ours"
    started = time.monotonic()
    summary = asyncio.run(
        run_batch(jobs, store, "lapse", RuleBasedEvaluator(), batch_worker.factory(0), progress=False, lease_seconds=5)
    )
    assert time.monotonic() - started >= 1.2  # it waited for the other driver's lease
    assert summary.rated == N_SCENARIOS and summary.skipped == 0
    assert_each_once(store, "lapse", N_SCENARIOS)
