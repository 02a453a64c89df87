"""Episode batches on Ray actors (``episodes.ray_batch``), on one local cluster for the module (``num_cpus=2``).

Scripted agents, no model. Every batch is checked in the store itself: each combo stored exactly once, including
after one actor is ``ray.kill``-ed and the other's worker process gets SIGKILL mid-batch. Redis runs at REDIS_URL
(skipped loudly without it, like the other Redis tests); SQLite for the local cases.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from functools import partial

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]'): the Ray batch tests skip")

import batch_worker  # noqa: E402

from sotopia_env.episodes.ray_batch import (  # noqa: E402
    WORKER_PREFIX,
    BatchRecipe,
    RayConfig,
    RayStoreError,
    check_store,
    run_batch_on_ray,
)
from sotopia_env.episodes.store import open_store  # noqa: E402
from sotopia_env.evaluators import RuleBasedEvaluator  # noqa: E402

N_SCENARIOS = 8  # one setup each: 8 episodes of 8 scripted calls
DELAY_S = 0.05  # per call: about 0.4 s an episode, one in flight per worker: 4 in a row per shard


@pytest.fixture(scope="module")
def cluster():
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/episodes.db"
        return
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set: the Ray batch test on Redis skipped")
    yield url


@pytest.fixture
def tag():
    return f"ray-test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def cleanup(store_url, tag):
    yield
    store = open_store(store_url)
    for log in store.query(tag=tag):
        store.delete(log.id)
    store.close()


def recipe(store_url: str, tag: str, delay_s: float = DELAY_S) -> BatchRecipe:
    return BatchRecipe(store_url, tag, partial(batch_worker.factory, delay_s), RuleBasedEvaluator, concurrency=2)


def assert_stored_once(store_url: str, tag: str, jobs) -> None:
    logs = open_store(store_url).query(tag=tag)
    keys = Counter(log.combo_key for log in logs)
    assert set(keys) == {job.key for job in jobs}
    assert max(keys.values()) == 1, f"stored twice: {[k for k, n in keys.items() if n > 1]}"
    assert {log.status for log in logs} == {"rated"}


def test_sharded_batch_stores_every_episode_once_and_resumes(cluster, store_url, tag, cleanup):
    jobs = batch_worker.jobs(N_SCENARIOS)
    store = open_store(store_url)
    summary = run_batch_on_ray(jobs, store, recipe(store_url, tag), RayConfig(num_workers=2), progress=False)
    assert (summary.total, summary.skipped, summary.rated, summary.failed) == (len(jobs), 0, len(jobs), 0)
    assert len(set(summary.episode_ids)) == len(jobs)
    assert_stored_once(store_url, tag, jobs)
    again = run_batch_on_ray(jobs, store, recipe(store_url, tag), RayConfig(num_workers=2), progress=False)
    assert (again.skipped, again.rated) == (len(jobs), 0)


def test_workers_killed_mid_batch_lose_and_double_nothing(cluster, store_url, tag, cleanup):
    """Once two episodes are stored, shard 0's actor is ``ray.kill``-ed (gone for good: its shard goes to a new
    actor) and shard 1's worker process gets SIGKILL (Ray restarts the actor and retries its shard)."""
    jobs = batch_worker.jobs(N_SCENARIOS)
    store = open_store(store_url)
    out: dict = {}

    def batch() -> None:
        try:
            out["summary"] = run_batch_on_ray(jobs, store, recipe(store_url, tag), RayConfig(), progress=False)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            out["error"] = exc

    thread = threading.Thread(target=batch)
    thread.start()
    names: set[str] = set()
    killed = False
    deadline = time.monotonic() + 90
    while thread.is_alive() and time.monotonic() < deadline:
        names |= {n for n in ray.util.list_named_actors() if n.startswith(WORKER_PREFIX)}
        if not killed and store.count(tag=tag) >= 2 and len(names) == 2:
            first, second = (ray.get_actor(n) for n in sorted(names))
            os.kill(ray.get(second.pid.remote()), signal.SIGKILL)
            ray.kill(first)
            killed = True
            assert store.count(tag=tag) < len(jobs), "the batch ended before the kills: make it slower"
        time.sleep(0.05)
    thread.join(timeout=5)
    assert killed and "error" not in out, out.get("error")
    summary = out["summary"]
    assert (summary.rated, summary.failed) == (len(jobs), 0)
    assert_stored_once(store_url, tag, jobs)
    replaced = sorted(n.rsplit("-", 2)[1] for n in names if not n.endswith("-0"))  # shard of each replacement
    assert replaced == ["0"], f"expected one new actor, for shard 0 (shard 1 restarted by Ray): {sorted(names)}"


def test_more_workers_than_the_cluster_holds_is_a_one_line_error(cluster, tmp_path):
    from sotopia_env.episodes.ray_batch import RayError

    store_url = f"sqlite:///{tmp_path}/e.db"
    with pytest.raises(RayError, match=r"^3 Ray workers need 3 CPUs and 0 GPUs; the cluster has 2 CPUs and 0 GPUs"):
        run_batch_on_ray(batch_worker.jobs(2), open_store(store_url), recipe(store_url, "t"), RayConfig(num_workers=3))
    with pytest.raises(RayError, match=r"need 2 CPUs and 2 GPUs; the cluster has 2 CPUs and 0 GPUs"):
        run_batch_on_ray(
            batch_worker.jobs(2), open_store(store_url), recipe(store_url, "t"), RayConfig(gpus_per_worker=1)
        )
    assert open_store(store_url).count() == 0


def test_sqlite_is_refused_for_a_remote_cluster(cluster, tmp_path):
    with pytest.raises(RayStoreError, match=r"--store sqlite:///.*: an SQLite file cannot be shared.*redis://"):
        check_store(ray, f"sqlite:///{tmp_path}/e.db", RayConfig(address="ray://head:10001"))
    check_store(ray, f"sqlite:///{tmp_path}/e.db", RayConfig())  # this machine alone: fine
    check_store(ray, "redis://head:6379/0", RayConfig(address="ray://head:10001"))


def test_benchmark_cli_with_ray(cluster, tmp_path, library):
    from typer.testing import CliRunner

    from sotopia_env.cli.main import app

    store = f"sqlite:///{tmp_path}/b.db"
    ids = ",".join(sorted(library.scenarios)[:2])
    args = ["benchmark", "--model", "custom_agents:PoliteAgent", "--partner", "custom_agents:Quiet"]
    args += ["--evaluator", "rule-based", "--scenarios", ids, "--max-turns", "2", "--store", store, "--tag", "b"]
    result = CliRunner().invoke(app, [*args, "--ray", "local", "--ray-workers", "1", "--ray-pin-endpoints"])
    assert result.exit_code == 0, result.output
    assert "4 episodes: 0 already done, 4 rated" in result.output
    assert Counter(log.combo_key for log in open_store(store).query(tag="b")).most_common(1)[0][1] == 1


def test_pipeline_stage_plays_its_jobs_on_ray(cluster, tmp_path, library):
    from sotopia_env.episodes.jobs import self_play_jobs
    from sotopia_env.training.config import parse_config
    from sotopia_env.training.context import StageContext

    raw = {"output_dir": str(tmp_path / "run"), "ray": {"num_workers": 1}, "concurrency": 4, "env": {"max_turns": 2}}
    ctx = StageContext.open(parse_config(raw), progress=False)
    scenarios = sorted(library.scenarios.values(), key=lambda s: s.id)[:3]
    jobs = self_play_jobs(scenarios, library, "custom_agents:PoliteAgent", 1)
    summary = ctx.run_jobs(jobs, ctx.tag("eval-base"))
    assert (summary.total, summary.rated) == (len(jobs), len(jobs))
    assert sorted(log.combo_key for log in ctx.store.query(tag=ctx.tag("eval-base"))) == sorted(j.key for j in jobs)


def test_ray_config_section_is_checked():
    from sotopia_env.training.config import ConfigError, parse_config

    assert parse_config({"output_dir": "o", "ray": {"address": "auto"}}).ray == RayConfig(address="auto")
    pinned = parse_config({"output_dir": "o", "ray": {"pin_endpoints": True}}).ray
    assert pinned == RayConfig(pin_endpoints=True)
    with pytest.raises(ConfigError, match=r"field 'ray.num_workers': must be at least 1"):
        parse_config({"output_dir": "o", "ray": {"num_workers": 0}})
    with pytest.raises(ConfigError, match=r"ray"):
        parse_config({"output_dir": "o", "ray": {"adress": "auto"}})


def test_without_ray_installed_the_error_is_one_line(monkeypatch):
    from sotopia_env.episodes.ray_batch import RayError, connect

    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets where the extra is not installed
    with pytest.raises(RayError, match=r"^--ray needs Ray: pip install 'sotopia-env\[ray\]'$"):
        connect(RayConfig())


def test_an_unreachable_cluster_is_a_one_line_error(tmp_path):
    """Through the CLI in a fresh process (this one has its Ray already): no minutes of Ray's retries."""
    import subprocess

    from conftest import free_port

    port = free_port()
    cli = [
        sys.executable,
        "-c",
        "from sotopia_env.cli.main import app; app()",
        "benchmark",
        "--evaluator",
        "rule-based",
    ]
    cli += ["--scenarios", "test", "--store", str(tmp_path / "e.db"), "--ray", f"127.0.0.1:{port}"]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: cannot reach the Ray cluster at 127.0.0.1:{port}: Connection refused"


def test_pinned_workers_each_call_only_their_own_server(cluster, tmp_path):
    """Two workers, two loopback servers, ``pin_endpoints``: every call for shard 0's episodes (jobs 0, 2, ...)
    reaches the first server and every call for shard 1's the second. (Unpinned, which server an episode's calls
    reach depends on timing, so that case has no fixed answer to check.)"""
    import contextlib

    from conftest import REPO
    from loopback_openai import LoopbackOpenAI

    sys.path.insert(0, str(REPO / "benchmarks"))
    from _loopback_server import respond

    from sotopia_env.env import EnvConfig
    from sotopia_env.episodes.runner import Job, default_agent_factory

    jobs = [Job(j.setup, ["openai/loopback", "openai/loopback"]) for j in batch_worker.jobs(4)]

    store_url = f"sqlite:///{tmp_path}/pin.db"
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(LoopbackOpenAI(respond, latency_s=0.01)) for _ in range(2)]
        make_agents = partial(default_agent_factory, api_base=",".join(s.base_url for s in servers))
        rec = BatchRecipe(store_url, "pin", make_agents, RuleBasedEvaluator, 4, EnvConfig(max_turns=4))
        summary = run_batch_on_ray(jobs, open_store(store_url), rec, RayConfig(pin_endpoints=True), progress=False)
        assert summary.rated == len(jobs)
        seen = []
        for server in servers:
            prompts = [json.dumps(body["messages"]) for body in server.requests]
            assert prompts, "a server got no call"
            seen.append({j.key for j in jobs for p in prompts if json.dumps(j.setup.scenario.scenario)[1:-1] in p})

    shard0, shard1 = {j.key for j in jobs[0::2]}, {j.key for j in jobs[1::2]}
    assert seen == [shard0, shard1]
