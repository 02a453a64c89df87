"""Running at scale on one machine: a per-model call limit that follows the requested concurrency (or
``--max-calls``), and calls spread over several model servers, a crashed one rested and its calls retried on the
others. Real loopback OpenAI-compatible servers throughout (three in their own processes for the crash test)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from loopback_openai import LoopbackOpenAI, Reply
from typer.testing import CliRunner

sys.path.insert(0, str(REPO / "benchmarks"))
from _common import LoopbackProcess, two_seat_setups  # noqa: E402
from _loopback_server import respond  # noqa: E402  (valid actions and ratings for any of our schemas)

from sotopia_env.backends.endpoints import EndpointPool, ModelServers, endpoint_share, share_of  # noqa: E402
from sotopia_env.backends.resolve import release_backends, resolve_backend  # noqa: E402
from sotopia_env.cli.main import app  # noqa: E402
from sotopia_env.env import EnvConfig  # noqa: E402
from sotopia_env.episodes.gc_tuning import BATCH_THRESHOLDS  # noqa: E402
from sotopia_env.episodes.runner import Job, calls_in_flight, default_agent_factory, run_batch  # noqa: E402
from sotopia_env.episodes.store import open_store  # noqa: E402
from sotopia_env.evaluators import make_evaluator  # noqa: E402
from sotopia_env.training.config import ConfigError, parse_config  # noqa: E402


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


@pytest.fixture(autouse=True)
def _fresh_backends():
    release_backends()
    yield
    release_backends()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- the pool: least outstanding first, cool-down -------------------------------------------------------------------


def test_pool_picks_the_server_with_fewest_calls_outstanding() -> None:
    pool = EndpointPool(["a", "b", "c"])
    first = [pool.acquire().url for _ in range(3)]
    assert first == ["a", "b", "c"]  # ties go to the one picked least
    b = pool.endpoints[1]
    pool.release(b, server_failed=False)  # b answered: it now has the fewest outstanding
    assert pool.acquire().url == "b"
    for e in pool.endpoints:
        e.outstanding = 0
    pool.endpoints[0].outstanding = 5
    assert {pool.acquire().url for _ in range(4)} == {"b", "c"}  # a stays busiest until 4 more went elsewhere


def test_pool_rests_a_failing_server_then_tries_it_again() -> None:
    clock = Clock()
    pool = EndpointPool(["a", "b"], fail_threshold=3, cooldown_s=5.0, max_cooldown_s=60.0, clock=clock)
    a, b = pool.endpoints
    for _ in range(2):
        pool.release(pool.acquire(avoid=b), server_failed=True)
    assert a.resting_until == 0.0  # two failures in a row: still in
    pool.release(pool.acquire(avoid=b), server_failed=True)
    assert a.resting_until == 105.0
    assert [pool.acquire().url for _ in range(5)] == ["b"] * 5  # resting: every call goes to b
    assert pool.acquire(avoid=b).url == "b"  # avoid b only if another is up
    clock.now = 105.0
    assert pool.acquire().url == "a"  # back: one call tries it ...
    assert pool.acquire().url == "b"  # ... and only one at a time, until it answers
    pool.release(a, server_failed=True)  # the probe failed: rested twice as long
    assert a.resting_until == 115.0
    clock.now = 115.0
    pool.release(pool.acquire(avoid=b), server_failed=False)  # a probe that works: fully back
    assert (a.failures, a.resting_until) == (0, 0.0)
    assert a.outstanding == 0


def test_pool_with_every_server_resting_uses_the_one_back_soonest() -> None:
    clock = Clock()
    pool = EndpointPool(["a", "b"], fail_threshold=1, cooldown_s=10.0, clock=clock)
    a, b = pool.endpoints
    pool.release(pool.acquire(), server_failed=True)  # a rests until 110
    clock.now = 101.0
    pool.release(pool.acquire(), server_failed=True)  # b rests until 111
    assert pool.acquire().url == "a"
    assert len(EndpointPool([])) == 1 and EndpointPool([]).acquire().url is None  # no api_base: the provider's own


def test_api_base_lists() -> None:
    servers = ModelServers.parse(["http://a/v1, http://b/v1", "http://a/v1", " "])
    assert servers is not None and servers.urls == ("http://a/v1", "http://b/v1")
    assert str(ModelServers.parse(["http://a/v1", "https://b/v1,http://c"])) == "http://a/v1,https://b/v1,http://c"
    assert ModelServers.parse(None) is None and ModelServers.parse("") is None
    assert ModelServers.parse(servers) is servers  # parsed once: passed on as it is
    assert ModelServers.model_validate_json('"http://a/v1,http://b/v1"') == servers  # an HTTP body's comma list
    assert ModelServers.model_validate(servers.model_dump(mode="json")) == servers  # as a queued request keeps it
    with pytest.raises(ValueError, match="api_base 'localhost:8000': not an http"):
        ModelServers.parse("http://a/v1,localhost:8000")


def test_a_pinned_worker_resolves_only_its_share_of_the_servers() -> None:
    urls = [f"http://s{i}/v1" for i in range(5)]
    assert [share_of(urls, i, 2) for i in range(2)] == [urls[0::2], urls[1::2]]  # disjoint, every server used
    assert [share_of(urls[:2], i, 5) for i in range(5)] == [[urls[0]], [urls[1]], [urls[0]], [urls[1]], [urls[0]]]
    assert share_of(urls[:1], 3, 4) == urls[:1] and share_of(urls, 0, 1) == urls
    with pytest.raises(ValueError, match=r"worker index 2 is not in 0\.\.1"):
        with endpoint_share(2, 2):
            pass
    api_base = ",".join(urls[:3])
    with endpoint_share(1, 3):
        pinned = resolve_backend("openai/m", api_base=api_base)
    assert [e.url for e in pinned.endpoints.endpoints] == [urls[1]]
    assert [e.url for e in resolve_backend("openai/m", api_base=api_base).endpoints.endpoints] == urls[:3]


def test_calls_in_flight_follow_concurrency() -> None:
    jobs = [Job(s, ["a", "b"]) for s in two_seat_setups(3)]
    assert calls_in_flight(jobs, 256) == 256
    assert calls_in_flight(jobs, 256, EnvConfig(action_order="simultaneous")) == 512


def test_pipeline_config_takes_a_list_of_servers_and_max_calls(tmp_path: Path) -> None:
    raw = {"output_dir": str(tmp_path), "api_base": ["http://a:8000/v1", "http://b:8000/v1"], "max_calls": 16}
    config = parse_config(raw, "p.yaml")
    assert str(config.api_base) == "http://a:8000/v1,http://b:8000/v1" and config.max_calls == 16
    with pytest.raises(ConfigError, match=r"p.yaml: field 'max_calls': must be at least 1, not 0"):
        parse_config({**raw, "max_calls": 0}, "p.yaml")
    with pytest.raises(ConfigError, match=r"p.yaml: field 'api_base': api_base 'a:8000': not an http"):
        parse_config({**raw, "api_base": "a:8000"}, "p.yaml")


# -- the call limit follows the concurrency; --max-calls caps it ----------------------------------------------------


def _agent_turn(body: dict[str, Any]) -> bool:
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    return "agent_1" not in (schema.get("properties") or {})


def test_80_episodes_in_flight_make_80_calls_at_once(tmp_path: Path) -> None:
    """Above the backend's default of 64: every one of 80 episodes' first calls must be at the server together
    (the server holds each until all 80 have arrived)."""
    barrier = threading.Barrier(80, timeout=15)

    def hold_first_turns(body: dict[str, Any]) -> Reply:
        if _agent_turn(body):
            barrier.wait()
        return respond(body)

    jobs = [Job(s, ["loopback", "loopback"], repeat=i) for i, s in enumerate(two_seat_setups(80))]
    with LoopbackOpenAI(hold_first_turns) as srv:
        store = open_store(str(tmp_path / "eps.db"))
        judge = make_evaluator("loopback", "goal", srv.base_url)
        factory = default_agent_factory(api_base=srv.base_url)
        batch = run_batch(jobs, store, "wide", judge, factory, 80, EnvConfig(max_turns=1), progress=False)
        summary = asyncio.run(batch)
    assert summary.rated == 80 and srv.max_in_flight == 80


def test_benchmark_prints_its_limits_and_max_calls_caps_them(tmp_path: Path, library: Any) -> None:
    """...and tunes the garbage collector for the batch (``episodes/gc_tuning.py``), which CPython's defaults
    made take a tenth of a 256-episode batch."""
    ids = ",".join(sorted(library.scenarios)[:6])
    thresholds = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    gc.unfreeze()
    with LoopbackOpenAI(respond, latency_s=0.05) as srv:
        args = ["benchmark", "--model", "loopback", "--partner", "loopback", "--evaluator", "loopback"]
        args += ["--scenarios", ids, "--max-turns", "2", "--concurrency", "6", "--api-base", srv.base_url]
        args += ["--store", f"sqlite:///{tmp_path}/b.db"]
        result = invoke(*args, "--max-calls", "2", "--tag", "capped")
        assert result.exit_code == 0, result.output
        assert "concurrency 6 episodes · up to 2 calls per model (capped by --max-calls)" in result.output
        assert "6 episodes: 0 already done, 6 rated" in result.output
        assert gc.get_threshold() == BATCH_THRESHOLDS and gc.get_freeze_count() > 0
        gc.set_threshold(*thresholds)
        assert srv.max_in_flight == 2  # one model (agents and judge): 6 episodes, 2 calls at a time
        srv.reset()
        result = invoke(*args, "--tag", "free")
        assert "concurrency 6 episodes · up to 6 calls per model (--max-calls to cap)" in result.output
        assert srv.max_in_flight > 2
    result = invoke(*args[:-4], "--api-base", "localhost:8000")
    shown = " ".join(result.output.replace("│", " ").split())  # the usage error's box, unwrapped
    assert result.exit_code == 2 and "api_base 'localhost:8000': not an http:// or https:// URL" in shown


# -- several servers -------------------------------------------------------------------------------------------------


def test_calls_spread_over_servers_given_as_repeated_flags(tmp_path: Path, library: Any) -> None:
    ids = ",".join(sorted(library.scenarios)[:4])
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(LoopbackOpenAI(respond, latency_s=0.02)) for _ in range(3)]
        bases = ["--api-base", servers[0].base_url, "--api-base", f"{servers[1].base_url},{servers[2].base_url}"]
        result = invoke(
            "benchmark", "--model", "loopback", "--partner", "loopback", "--evaluator", "loopback", "--scenarios", ids,
            "--max-turns", "3", "--concurrency", "4", *bases, "--store", f"sqlite:///{tmp_path}/b.db",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        probes = [sum(r.get("max_tokens") == 1 for r in s.requests) for s in servers]
        counts = [len(s.requests) - n for s, n in zip(servers, probes, strict=True)]
    assert probes == [1, 1, 1]  # the preflight asks each server once (agents and judge share the model)
    assert sum(counts) == 4 * 4  # 4 episodes x (3 turns + the judge)
    assert min(counts) >= 3, counts  # least outstanding first: each server takes a fair share


def test_three_servers_one_killed_mid_batch_loses_nothing(tmp_path: Path) -> None:
    """One of three servers is SIGKILLed while the batch runs: its calls in flight and the next ones fail, are
    retried on the other two, it is rested, and every episode is played in full, rated and stored once."""
    n = 24
    jobs = [Job(s, ["loopback", "loopback"], repeat=i) for i, s in enumerate(two_seat_setups(n))]
    store = open_store(str(tmp_path / "eps.db"))
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(LoopbackProcess(latency_s=0.03)) for _ in range(3)]
        api_base = ",".join(s.base_url for s in servers)
        judge = make_evaluator("loopback", "goal", api_base)
        pool = resolve_backend("loopback", api_base=api_base).endpoints
        victim = pool.endpoints[0]

        async def batch_with_a_crash() -> Any:
            factory = default_agent_factory(api_base=api_base)
            config = EnvConfig(max_turns=6)
            batch = asyncio.ensure_future(run_batch(jobs, store, "crash", judge, factory, 8, config, progress=False))
            while victim.picks < 12 and not batch.done():
                await asyncio.sleep(0.002)
            servers[0].kill()
            return await batch

        summary = asyncio.run(batch_with_a_crash())
        survivors = [s.stats()["requests"] for s in servers[1:]]
    logs = list(store.iter("crash"))
    assert (summary.rated, summary.unrated, summary.failed) == (n, 0, 0)
    assert len(logs) == n and len({log.combo_key for log in logs}) == n  # every episode stored once
    assert [(len(log.turns), sum(log.agent_errors.values())) for log in logs] == [(6, 0)] * n  # no call was lost
    assert victim.picks >= 12 and victim.resting_until > 0  # it served, failed and was rested
    assert sum(survivors) >= n * 7 - victim.picks and min(survivors) > 0
