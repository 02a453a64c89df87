"""A broken key or server never becomes a score.

A preflight finds a key refused, a server down or a model not served before the first episode: exit 1 within
seconds, one line naming the model, the endpoint and the fix, nothing stored (``episodes.preflight``). Mid-run,
a seat or a judge whose service fails makes the episode ``failed`` (never rated), and ``--rerun-failed`` replays
exactly those; a model that answered without a valid action stays the agent's error, and is rated.
"""

from __future__ import annotations

import asyncio
import json
import time

import batch_worker
import pytest
from conftest import free_port
from loopback_openai import LoopbackOpenAI, Reply
from typer.testing import CliRunner

from sotopia_env.agents.llm import LLMAgent
from sotopia_env.backends.base import ServiceFailure
from sotopia_env.backends.openai_http import OpenAIHTTPBackend
from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.cli.main import app
from sotopia_env.episodes.preflight import PreflightFailed, check_services
from sotopia_env.episodes.rate import rate_stored
from sotopia_env.episodes.runner import run_batch, run_episode
from sotopia_env.episodes.store import open_store
from sotopia_env.evaluators import LLMEvaluator, RuleBasedEvaluator

SPEAK = json.dumps({"action_type": "speak", "argument": "Could we agree on this?"})
LEAVE = json.dumps({"action_type": "leave", "argument": ""})


def invoke(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_line_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return lines[0]


@pytest.fixture
def refusing_server():
    with LoopbackOpenAI(lambda body: Reply.fail(401, "Incorrect API key provided: sk-wr***")) as srv:
        yield srv


def test_a_wrong_key_is_one_line_and_exit_1_before_anything_is_stored(tmp_path, refusing_server):
    db = tmp_path / "eps.db"
    started = time.monotonic()
    result = invoke(
        "run", "--agent1", "loopback", "--agent2", "loopback", "--evaluator", "none", "--max-turns", "2",
        "--api-base", refusing_server.base_url, "--store", db,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert result.exit_code == 1, result.output
    line = one_line_error(result.output)
    assert "'loopback'" in line and refusing_server.base_url in line and "SOTOPIA_API_KEY" in line, line
    assert "refused" in line and elapsed < 10
    assert len(refusing_server.requests) == 1  # one probe, no retry of a 401
    assert open_store(str(db)).count() == 0


def test_nothing_listening_is_one_line_and_exit_1(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    db = tmp_path / "eps.db"
    started = time.monotonic()
    result = invoke(
        "benchmark", "--model", "loopback", "--partner", "loopback", "--evaluator", "rule-based",
        "--scenarios", "hard", "--api-base", url, "--store", db, "--tag", "dead",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    line = one_line_error(result.output)
    assert url in line and "nothing answers" in line and "--api-base" in line, line
    assert time.monotonic() - started < 10
    assert open_store(str(db)).count() == 0


def test_a_missing_provider_key_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = invoke(
        "run", "--agent1", "gpt-4o-mini", "--agent2", "gpt-4o-mini", "--evaluator", "none", "--store", tmp_path / "e.db"
    )
    assert result.exit_code == 1, result.output
    line = one_line_error(result.output)
    assert "gpt-4o-mini" in line and "OPENAI_API_KEY" in line and "openai's own endpoint" in line, line


def test_a_model_the_server_does_not_serve_is_named(tmp_path):
    def responder(body):
        return Reply.fail(404, f"The model `{body['model']}` does not exist.")

    with LoopbackOpenAI(responder) as srv:
        with pytest.raises(PreflightFailed) as caught:
            check_services([OpenAIHTTPBackend("no-such-model", api_base=srv.base_url)])
    assert caught.value.kind == "model_not_found"
    assert "'no-such-model'" in str(caught.value) and "/models" in str(caught.value)


def test_a_service_that_answers_passes_and_rate_limits_do_not_block():
    with LoopbackOpenAI(lambda body: Reply.fail(429, "slow down")) as limited, LoopbackOpenAI() as fine:
        backends = [OpenAIHTTPBackend("a", api_base=limited.base_url), OpenAIHTTPBackend("b", api_base=fine.base_url)]
        assert check_services([LLMAgent(b) for b in backends]) == 2
        assert len(limited.requests) == len(fine.requests) == 1


# -- mid-run ------------------------------------------------------------------------------------------------------


def _loopback_agents(url: str):
    def make(spec, seat):
        return LLMAgent(OpenAIHTTPBackend(spec, api_base=url, max_retries=2, backoff_base_s=0.01), max_retries=1)

    return make


def test_a_server_failing_mid_batch_fails_those_episodes_and_rerun_replays_exactly_them(tmp_path):
    jobs = batch_worker.jobs(4)
    broken = {jobs[1].setup.scenario.scenario, jobs[3].setup.scenario.scenario}
    healthy = False

    def responder(body):
        prompt = " ".join(m["content"] for m in body["messages"])
        turns = prompt.count("Could we agree")
        if not healthy and any(text in prompt for text in broken) and turns >= 2:
            return Reply.fail(503, "upstream overloaded")  # fails mid-episode, after two turns were played
        return Reply(LEAVE if turns >= 4 else SPEAK)

    store = open_store(str(tmp_path / "eps.db"))
    with LoopbackOpenAI(responder) as srv:
        agents = _loopback_agents(srv.base_url)
        summary = asyncio.run(run_batch(jobs, store, "t", RuleBasedEvaluator(), agents, progress=False))
        assert (summary.rated, summary.failed) == (2, 2)
        failed = store.query(tag="t", status="failed")
        assert {log.setup.scenario.scenario for log in failed} == broken
        for log in failed:
            assert log.rating is None and "server_error" in log.error and "503" in log.error, log.error
        rated_before = {log.id: log.model_dump() for log in store.query(tag="t", status="rated")}

        healthy = True
        srv.reset()
        redo = asyncio.run(run_batch(jobs, store, "t", RuleBasedEvaluator(), agents, rerun_failed=True, progress=False))
    assert (redo.rated, redo.skipped) == (2, 2)
    assert set(redo.episode_ids) == {log.id for log in failed}  # replayed in place, exactly those
    assert {log.id: log.model_dump() for log in store.query(tag="t") if log.id in rated_before} == rated_before
    played = {text for body in srv.requests for text in broken if text in json.dumps(body)}
    assert played == broken  # only the failed scenarios were asked for again


def test_a_model_that_answered_badly_is_still_the_agents_error_and_rated(tmp_path):
    store = open_store(str(tmp_path / "eps.db"))
    (job,) = batch_worker.jobs(1)
    agents = lambda spec, seat: LLMAgent(ScriptedBackend(["not json at all"], cycle=True))  # noqa: E731
    log = asyncio.run(run_episode(job, RuleBasedEvaluator(), store, agents=agents, tag="bad"))
    assert log.status == "rated" and log.termination_reason == "agent_error"


def test_a_seat_whose_service_fails_fails_the_episode_not_the_agent(tmp_path):
    store = open_store(str(tmp_path / "eps.db"))
    (job,) = batch_worker.jobs(1)
    down = ServiceFailure("m: HTTP 401 AuthenticationError: bad key", "auth")
    agents = lambda spec, seat: LLMAgent(ScriptedBackend([SPEAK, down], cycle=True))  # noqa: E731
    log = asyncio.run(run_episode(job, RuleBasedEvaluator(), store, agents=agents, tag="down"))
    assert log.status == "failed" and log.rating is None
    assert "model service failed (auth)" in log.error and store.get(log.id).status == "failed"


def test_a_judge_whose_service_fails_fails_the_episode_and_rerating_keeps_what_is_stored(tmp_path):
    store = open_store(str(tmp_path / "eps.db"))
    (job,) = batch_worker.jobs(1)
    down = LLMEvaluator(ScriptedBackend([ServiceFailure("judge: connection refused", "unreachable")], cycle=True))
    log = asyncio.run(run_episode(job, down, store, agents=batch_worker.factory(0), tag="j"))
    assert log.status == "failed" and log.rating is None and "judge" in log.error and log.turns
    assert len(down.backend.requests) == 1  # the judge did not retry what cannot work

    good = asyncio.run(run_episode(job, RuleBasedEvaluator(), store, agents=batch_worker.factory(0), tag="k"))
    assert good.status == "rated"
    assert asyncio.run(rate_stored(store, down, tag="k", only_unrated=False)) == {"rated": 0, "unrated": 0, "failed": 1}
    assert store.get(good.id).status == "rated" and store.get(good.id).rating == good.rating  # nothing lost


def test_a_benchmark_with_failed_episodes_exits_1_and_rerun_failed_replays_them(tmp_path, library):
    ids = sorted(s.id for s in library.select("hard"))[:3]
    down = library.scenarios[ids[1]].scenario
    healthy = False

    def responder(body):
        if not healthy and any(down in m["content"] for m in body["messages"]):  # one scenario's episodes: a 5xx
            return Reply.fail(500, "internal error")
        return Reply(LEAVE)

    db = tmp_path / "eps.db"
    args = ("benchmark", "--model", "m", "--partner", "m", "--evaluator", "rule-based", "--scenarios", ",".join(ids),
            "--episodes-per-scenario", "1", "--max-turns", "2", "--store", db, "--tag", "outage")  # fmt: skip
    with LoopbackOpenAI(responder) as srv:
        result = invoke(*args, "--api-base", srv.base_url)
        store = open_store(str(db))
        failed = store.query(tag="outage", status="failed")
        assert result.exit_code == 1, result.output
        total = store.count(tag="outage")
        assert {log.scenario_id for log in failed} == {ids[1]} and total == 3  # the same model in both seats: once
        assert f"1 of {total} episodes" in result.output and "--rerun-failed" in result.output
        healthy = True
        again = invoke(*args, "--api-base", srv.base_url, "--rerun-failed")
    assert again.exit_code == 0, again.output
    assert store.count(tag="outage", status="rated") == total
    assert {log.id for log in store.query(tag="outage", scenario=ids[1])} == {log.id for log in failed}


# -- the same through the server --------------------------------------------------------------------------------


def test_the_server_answers_a_wrong_key_or_a_dead_server_with_a_4xx_and_queues_nothing(tmp_path, refusing_server):
    pytest.importorskip("fastapi", reason="the server needs the 'view' extra (fastapi)")
    import httpx
    from server_harness import server_thread

    from sotopia_env.server import create_server

    dead = f"http://127.0.0.1:{free_port()}/v1"
    store = open_store(str(tmp_path / "eps.db"))
    app = create_server(store, allowed_api_bases=[refusing_server.base_url, dead])
    sim = {"scenario": "accommodation-drum-practice", "agents": ["loopback"], "evaluator": "rule-based"}
    bench = {"model": "loopback", "partner": "loopback", "evaluator": "rule-based", "scenarios": "hard"}
    with server_thread(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        for body, path in ((sim, "/api/simulations"), (bench, "/api/benchmarks")):
            refused = client.post(path, json=body | {"api_base": refusing_server.base_url})
            assert refused.status_code == 424, refused.text
            detail = refused.json()["detail"]
            assert "'loopback'" in detail and "refused" in detail and "SOTOPIA_API_KEY" in detail, detail
            down = client.post(path, json=body | {"api_base": dead})
            assert down.status_code == 424 and "nothing answers" in down.json()["detail"], down.text
    assert store.queue_items("simulations") == {} and store.queue_items("benchmarks") == {} and store.count() == 0
