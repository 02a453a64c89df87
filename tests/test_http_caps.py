"""A server caps what an HTTP request may ask by its operator's settings (``server.caps``, #45): a benchmark's
concurrency at most ``serve --concurrency``, turns at most ``--max-turns``, ``episodes_per_scenario`` at most
``--max-episodes-per-scenario``; over a cap is a 422 naming the field and the cap, the OpenAPI document declares
the caps as maxima, a field left to its default is lowered to the cap, and the CLI's own (wider) limits stay."""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server needs the 'view' extra (fastapi)")

from server_harness import server_thread  # noqa: E402

from sotopia_env.episodes.benchmark import BenchmarkSpec  # noqa: E402
from sotopia_env.episodes.sqlite_store import SQLiteStore  # noqa: E402
from sotopia_env.server import create_server  # noqa: E402

GAME = {"model": "rule-player", "partner": "rule-player", "evaluator": "verifiable", "scenarios": "werewolf:test"}


def test_requests_over_the_servers_caps_get_a_422_naming_field_and_cap(tmp_path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 'e.db'}")
    app = create_server(store, concurrency=2, max_turns=30, max_episodes_per_scenario=3)
    with server_thread(app) as base, httpx.Client(base_url=base, timeout=60) as client:
        for body, field, cap, option in [
            ({**GAME, "concurrency": 3}, "concurrency", 2, "--concurrency"),
            ({**GAME, "max_turns": 31}, "max_turns", 30, "--max-turns"),
            ({**GAME, "episodes_per_scenario": 4}, "episodes_per_scenario", 3, "--max-episodes-per-scenario"),
        ]:
            refused = client.post("/api/benchmarks", json=body)
            assert refused.status_code == 422, refused.text
            assert (
                refused.json()["detail"]
                == f"{field}: {body[field]} is over this server's cap of {cap} (serve {option})"
            )
        simulation = {"scenario": "accommodation-drum-practice", "agents": ["rule-partner"], "max_turns": 31}
        refused = client.post("/api/simulations", json=simulation)
        assert refused.status_code == 422 and refused.json()["detail"].startswith("max_turns: 31 is over"), refused.text
        at_caps = client.post("/api/benchmarks", json={**GAME, "concurrency": 2, "max_turns": 30})
        assert at_caps.status_code == 202, at_caps.text
        defaults = client.post("/api/benchmarks", json=GAME)  # its default concurrency (8) is lowered to the cap
        assert defaults.status_code == 202, defaults.text
        assert app.app.state.benchmarks[defaults.json()["id"]].request.concurrency == 2
        schemas = client.get("/api/openapi.json").json()["components"]["schemas"]
    assert schemas["BenchmarkRequest"]["properties"]["concurrency"]["maximum"] == 2
    assert schemas["BenchmarkRequest"]["properties"]["episodes_per_scenario"]["maximum"] == 3
    assert schemas["SimulationRequest"]["properties"]["max_turns"]["maximum"] == 30
    assert BenchmarkSpec(concurrency=1000, max_turns=500).concurrency == 1000  # the CLI's limits are its own
