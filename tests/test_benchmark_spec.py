"""One benchmark spec (issue #41): ``BenchmarkSpec`` is both ``POST /api/benchmarks``' body and what the CLI's
``benchmark`` options parse into, and both run it through ``run_benchmark``; the turn and concurrency limits are
declared once; the model servers are parsed once at the edge and reach the endpoint pool unchanged."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError
from typer.main import get_command
from typer.testing import CliRunner

from sotopia_env.backends.endpoints import ModelServers
from sotopia_env.backends.resolve import resolve_backend
from sotopia_env.cli.main import app as cli
from sotopia_env.episodes.benchmark import BenchmarkSpec, plan_benchmark, run_benchmark
from sotopia_env.episodes.job_fields import MAX_CONCURRENCY, MAX_TURNS_LIMIT
from sotopia_env.episodes.sqlite_store import SQLiteStore
from sotopia_env.library import load_library

GAMES = {"model": "rule-player", "partner": "rule-player", "evaluator": "verifiable", "scenarios": "werewolf:test"}


def test_the_cli_and_the_server_run_one_spec_to_the_same_episodes_and_report(tmp_path: Path) -> None:
    pytest.importorskip("fastapi", reason="the server needs the 'view' extra (fastapi)")
    from server_harness import server_thread

    from sotopia_env.server import create_server

    out = tmp_path / "cli.json"
    args = ["benchmark", "--model", "rule-player", "--partner", "rule-player", "--evaluator", "verifiable"]
    args += ["--scenarios", "werewolf:test", "--tag", "same", "--max-turns", "40", "--seed", "2"]
    result = CliRunner().invoke(cli, [*args, "--store", f"sqlite:///{tmp_path / 'cli.db'}", "--json", str(out)])
    assert result.exit_code == 0, result.output
    by_cli = json.loads(out.read_text())

    store = SQLiteStore(f"sqlite:///{tmp_path / 'http.db'}")
    body = GAMES | {"tag": "same", "max_turns": 40, "seed": 2}
    with server_thread(create_server(store, library_dir=tmp_path / "lib")) as base:
        with httpx.Client(base_url=base, timeout=30) as client:
            bench = client.post("/api/benchmarks", json=body).json()
            deadline = time.monotonic() + 120
            while bench["status"] == "running" and time.monotonic() < deadline:
                time.sleep(0.2)
                bench = client.get(f"/api/benchmarks/{bench['id']}").json()
    assert bench["status"] == "done", bench
    assert bench["report"] == {k: v for k, v in by_cli.items() if k != "cards"}  # rows and roles, equal
    cli_store = SQLiteStore(f"sqlite:///{tmp_path / 'cli.db'}")
    played = {(log.combo_key, log.setup.scenario.id) for log in cli_store.iter("same")}
    assert played == {(log.combo_key, log.setup.scenario.id) for log in store.iter("same")} and len(played) == 3


def test_run_benchmark_reports_each_episode_and_resumes_under_its_tag(tmp_path: Path) -> None:
    import asyncio

    store = SQLiteStore(f"sqlite:///{tmp_path / 'b.db'}")
    spec = BenchmarkSpec.model_validate(GAMES | {"tag": "resume"})
    seen: list[str] = []
    first = asyncio.run(run_benchmark(spec, store, lambda log: seen.append(log.id)))
    assert first.summary.total == 3 and first.summary.skipped == 0 and sorted(seen) == sorted(first.summary.episode_ids)
    again = asyncio.run(run_benchmark(spec, store, plan=plan_benchmark(spec, load_library(), store)))
    assert again.summary.skipped == 3 and again.to_dict() == first.to_dict()


def test_limits_are_declared_once_for_run_benchmark_and_the_server() -> None:
    pytest.importorskip("fastapi", reason="the server needs the 'view' extra (fastapi)")
    from sotopia_env.server.requests import SimulationRequest

    command = get_command(cli)
    options = {
        name: {p.name: p for p in command.commands[name].params}  # type: ignore[attr-defined]
        for name in ("run", "benchmark")
    }
    for name in ("run", "benchmark"):
        turns = options[name]["max_turns"]
        assert (turns.min, turns.max) == (1, MAX_TURNS_LIMIT), name
    assert options["benchmark"]["concurrency"].max == MAX_CONCURRENCY
    for model in (SimulationRequest, BenchmarkSpec):
        model.model_validate({"max_turns": MAX_TURNS_LIMIT})
        with pytest.raises(ValidationError, match="max_turns"):
            model.model_validate({"max_turns": MAX_TURNS_LIMIT + 1})
    BenchmarkSpec.model_validate({"concurrency": MAX_CONCURRENCY})
    with pytest.raises(ValidationError, match="concurrency"):
        BenchmarkSpec.model_validate({"concurrency": MAX_CONCURRENCY + 1})


def test_a_spec_names_fields_in_a_body_and_options_on_the_command_line() -> None:
    with pytest.raises(ValidationError, match="protocol sotopia-hard fixes max_turns, dimensions"):
        BenchmarkSpec.model_validate({"protocol": "sotopia-hard", "max_turns": 5, "dimensions": "goal"})
    with pytest.raises(ValidationError, match="--protocol sotopia-hard fixes --max-turns"):
        BenchmarkSpec.model_validate({"protocol": "sotopia-hard", "max_turns": 5}, context={"flags": True})
    with pytest.raises(ValidationError, match="unknown dimension 'kindness'"):
        BenchmarkSpec.model_validate({"dimensions": "goal,kindness"})
    with pytest.raises(ValidationError, match="extra"):
        BenchmarkSpec.model_validate({"api_key": "sk-x"})
    result = CliRunner().invoke(cli, ["benchmark", "--tag", "a tag with spaces", "--evaluator", "none"])
    (line,) = result.output.strip().splitlines()
    assert result.exit_code == 1 and line.startswith("error: --tag: String should match pattern")


def test_model_servers_are_parsed_once_and_reach_the_pool_unchanged() -> None:
    servers = ModelServers.parse(["http://127.0.0.1:9/v1,http://127.0.0.1:10/v1", "http://127.0.0.1:9/v1"])
    assert servers is not None and ModelServers.parse(servers) is servers
    spec = BenchmarkSpec.model_validate({"api_base": servers})
    assert spec.api_base is servers  # validation passes the parsed value on as it is
    backend = resolve_backend("spec-test", api_base=spec.api_base)
    assert backend.api_base is servers  # type: ignore[attr-defined]
    assert [e.url for e in backend.endpoints.endpoints] == list(servers.urls)  # type: ignore[attr-defined]
    assert resolve_backend("spec-test", api_base="http://127.0.0.1:9/v1,http://127.0.0.1:10/v1") is backend
    body = BenchmarkSpec.model_validate_json('{"api_base": "http://127.0.0.1:9/v1, http://127.0.0.1:10/v1"}')
    assert body.api_base == servers and BenchmarkSpec.model_validate(body.model_dump(mode="json")) == body
    with pytest.raises(ValidationError, match="api_base 'ftp://x': not an http"):
        BenchmarkSpec.model_validate({"api_base": ["http://127.0.0.1:9/v1", "ftp://x"]})
