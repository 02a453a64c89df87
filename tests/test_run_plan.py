"""One planner (issue #58): ``sotopia-env run`` and ``POST /api/simulations`` build the same ``RunSpec`` and play it
through the one ``plan_episodes``, so the same spec gives the same episode either way (same seed, rule agents, an
exact judge: no model anywhere). The benchmark command's options are the ``BenchmarkSpec``'s fields, limits and help.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.main import get_command
from typer.testing import CliRunner

from sotopia_env.cli.main import app as cli
from sotopia_env.episodes.benchmark import BenchmarkSpec
from sotopia_env.episodes.job_fields import MAX_CALLS, MAX_EPISODES_PER_SCENARIO, MAX_SEED, MAX_TURNS_LIMIT
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.plan import RunSpec, SeatsMismatch, plan_episodes
from sotopia_env.episodes.sqlite_store import SQLiteStore
from sotopia_env.library import load_library

SPECS = {
    # a game: rule players in its six seats, the default judge switched to the game's exact outcome
    "game": RunSpec(scenario="werewolf-hollins", agents=["rule-player"], seed=5, max_turns=40, tag="same"),
    # a verifiable scenario: seat 1 named, the partner in the others (the CLI's --agent1/--agent2)
    "partner": RunSpec(
        scenario="verifiable-bargaining-cello",
        agents=["baseline-heuristic"],
        partner="rule-partner",
        evaluator="verifiable",
        seed=3,
        max_turns=12,
        tag="same",
    ),
}


def cli_args(spec: RunSpec) -> list[str]:
    """``run``'s options for ``spec``."""
    agents = ["--agent1", spec.agents[0], "--agent2", spec.partner] if spec.partner else ["--agents", *spec.agents]
    args = ["run", "--scenario", str(spec.scenario), *agents, "--evaluator", spec.evaluator]
    return args + ["--seed", str(spec.seed), "--max-turns", str(spec.max_turns), "--tag", spec.tag]


def played(log: EpisodeLog) -> dict[str, Any]:
    """What an episode played and how it was judged, without its ids and timings."""
    ratings = log.rating.ratings if log.rating is not None else None
    return {
        "scenario": log.setup.scenario.id,
        "agents": [(a.name, a.model) for a in log.agents],
        "turns": [turn.model_dump(mode="json", exclude={"at", "seconds", "usage"}) for turn in log.turns],
        "end": log.termination_reason,
        "status": log.status,
        "ratings": ratings and {k: v.model_dump(mode="json") for k, v in ratings.items()},
    }


def by_cli(spec: RunSpec, db: Path) -> dict[str, Any]:
    result = CliRunner().invoke(cli, [*cli_args(spec), "--store", f"sqlite:///{db}"])
    assert result.exit_code == 0, result.output
    (log,) = SQLiteStore(f"sqlite:///{db}").iter(spec.tag)
    return played(log)


@pytest.mark.parametrize("case", sorted(SPECS))
def test_the_cli_and_the_server_play_one_run_spec_to_the_same_episode(tmp_path: Path, case: str) -> None:
    pytest.importorskip("fastapi", reason="the server needs the 'view' extra (fastapi)")
    from server_harness import server_thread, wait_until_ended

    from sotopia_env.server import create_server

    spec = SPECS[case]
    cli_episode = by_cli(spec, tmp_path / "cli.db")

    store = SQLiteStore(f"sqlite:///{tmp_path / 'http.db'}")
    body = spec.model_dump(mode="json", exclude_none=True)
    with server_thread(create_server(store, library_dir=tmp_path / "lib")) as base:
        with httpx.Client(base_url=base, timeout=30) as client:
            answer = client.post("/api/simulations", json=body)
            assert answer.status_code == 202, answer.text
            sim = wait_until_ended(client, answer.json()["id"], timeout_s=120)
    assert sim["status"] == "done", sim
    http_episode = played(store.get(sim["episode_id"]))

    assert cli_episode["turns"], "nothing was played"
    assert http_episode == cli_episode
    if case == "game":  # the judge a game needs: its exact outcome, on both sides
        assert cli_episode["ratings"] is not None and sim["evaluator"] == "verifiable"
    # the comparison can fail: another seed is another episode
    other = by_cli(spec.model_copy(update={"seed": spec.seed + 1}), tmp_path / "other.db")
    assert other["turns"] != cli_episode["turns"] or other["agents"] != cli_episode["agents"]


def test_one_planner_expands_seats_and_picks_a_games_judge() -> None:
    library = load_library()
    game = plan_episodes(SPECS["game"], library)
    assert game.specs == ["rule-player"] * 6 and game.evaluator == "verifiable"
    named = plan_episodes(SPECS["game"].model_copy(update={"evaluator": "none"}), library)
    assert named.evaluator == "none"  # another judge named: kept
    partner = plan_episodes(SPECS["partner"], library)
    assert partner.specs == ["baseline-heuristic", "rule-partner"] and partner.jobs[0].seed == 3
    with pytest.raises(SeatsMismatch, match="--agents: 3 specs for 2 seats"):
        plan_episodes(
            SPECS["partner"].model_copy(update={"agents": ["a", "b", "c"], "partner": None}), library, flags=True
        )


def test_the_benchmark_options_are_the_specs_fields() -> None:
    params = {p.name: p for p in get_command(cli).commands["benchmark"].params}  # type: ignore[attr-defined]
    per_scenario, calls = params["episodes_per_scenario"], params["max_calls"]
    assert (per_scenario.min, per_scenario.max) == (1, MAX_EPISODES_PER_SCENARIO)  # type: ignore[attr-defined]
    assert (calls.min, calls.max) == (1, MAX_CALLS)  # type: ignore[attr-defined]
    for name in ("model", "partner", "evaluator", "scenarios", "episodes_per_scenario", "tag", "dimensions"):
        field = BenchmarkSpec.model_fields[name]
        assert params[name].help == field.description, name
        assert params[name].default == field.default, name
    run = {p.name: p for p in get_command(cli).commands["run"].params}  # type: ignore[attr-defined]
    assert (run["seed"].min, run["seed"].max, run["max_turns"].max) == (0, MAX_SEED, MAX_TURNS_LIMIT)  # type: ignore[attr-defined]
