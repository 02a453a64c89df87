"""The leaderboard (``episodes.leaderboard``, ``sotopia-env leaderboard``, the viewer's ``/leaderboard``), the card
in ``report`` and ``benchmark``, and ``benchmark --protocol``: results with different protocol cards never share
a board."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from episode_fixtures import make_episode, setups
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from sotopia_env.cli.main import app
from sotopia_env.episodes.leaderboard import leaderboard, skill_rows
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.sotopia_format import export_sotopia
from sotopia_env.episodes.sotopia_protocol import parse_env_ids, protocols
from sotopia_env.episodes.sqlite_store import SQLiteStore
from sotopia_env.server.viewer import create_app

POLITE, QUIET = "custom_agents:PoliteAgent", "custom_agents:Quiet"
SCENARIOS = "accommodation-drum-practice,accommodation-late-rent"
BIKE = "verifiable-bargaining-bike"  # verifiable_agents:Buyer closes the deal within budget; Quiet never does


def invoke(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def bench(store: str, tag: str, *extra: object, model: str = POLITE, partner: str = QUIET, scenarios=SCENARIOS):
    args = ["benchmark", "--model", model, "--partner", partner, "--scenarios", scenarios, "--store", store]
    result = invoke(*args, "--tag", tag, *extra)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def two_cards(tmp_path_factory) -> str:
    """Polite vs Quiet (rule-based judge: goal 2 per spoken turn) at 2 turns under tags a and a2 (one card), and
    at 4 turns under tag b (another card): Polite's mean goal is 2 on the first card and 4 on the second."""
    store = f"sqlite:///{tmp_path_factory.mktemp('lb') / 'e.db'}"
    bench(store, "a", "--evaluator", "rule-based", "--max-turns", 2)
    bench(store, "a2", "--evaluator", "rule-based", "--max-turns", 2)
    bench(store, "b", "--evaluator", "rule-based", "--max-turns", 4)
    return store


def test_rows_with_different_cards_are_never_mixed(two_cards: str) -> None:
    boards = leaderboard(SQLiteStore(two_cards))
    assert len(boards) == 2 and boards[0].card.id != boards[1].card.id
    by_turns = {b.card.max_turns: b for b in boards}
    short, long = by_turns[2], by_turns[4]
    assert short.tags == ["a", "a2"] and long.tags == ["b"]  # equal cards share a board, others never
    assert (short.episodes, long.episodes) == (8, 4)
    for board, goal in ((short, 2.0), (long, 4.0)):
        polite, quiet = board.rows  # best mean goal first
        assert polite.model == POLITE and quiet.model == QUIET and board.kind == "sotopia-eval"
        assert polite.goal is not None and polite.goal.mean == goal  # pooled across cards it would be 8/3
        assert polite.goal.n == polite.rated == board.episodes and quiet.goal is not None and quiet.goal.mean == 0
        assert polite.overall is not None and polite.overall.n == polite.rated
    assert [b.card.id for b in leaderboard(SQLiteStore(two_cards), ["b"])] == [long.card.id]


def test_report_and_benchmark_print_the_card_and_store_it(two_cards: str, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = invoke("report", "--tag", "b", "--store", two_cards, "--json", out)
    assert result.exit_code == 0, result.output
    (c,) = json.loads(out.read_text())["cards"]
    assert c["max_turns"] == 4 and c["judge"] == "rule-based" and c["scenario_ids"] == sorted(SCENARIOS.split(","))
    assert f"card       {c['id']}" in result.output and "max turns 4" in result.output

    mixed = SQLiteStore(f"sqlite:///{tmp_path / 'mixed.db'}")  # one tag, episodes of two cards
    mixed.put_many(
        [log.model_copy(update={"tag": "mixed"}) for t in ("a", "b") for log in SQLiteStore(two_cards).iter(t)]
    )
    result = invoke("report", "--tag", "mixed", "--store", mixed.url)
    assert result.exit_code == 0 and "mixes 2 protocol cards" in result.output
    assert len(leaderboard(mixed)) == 2

    out = tmp_path / "bench.json"
    result = bench(two_cards, "b", "--evaluator", "rule-based", "--max-turns", 4, "--json", out)
    assert "4 already done" in result.output and json.loads(out.read_text())["cards"] == [c]


def test_leaderboard_command(two_cards: str, tmp_path: Path) -> None:
    out = tmp_path / "boards.json"
    result = invoke("leaderboard", "--store", two_cards, "--json", out)
    assert result.exit_code == 0, result.output
    boards = json.loads(out.read_text())["boards"]
    assert len(boards) == 2 and all(f"board {b['card']['id']}" in result.output for b in boards)
    assert "SOTOPIA-EVAL" in result.output and "OpenSkill" not in result.output
    result = invoke("leaderboard", "--store", two_cards, "--tag", "a2")
    assert result.exit_code == 0 and result.output.count("board ") == 1
    result = invoke("leaderboard", "--store", two_cards, "--tag", "nothing")
    assert result.exit_code == 1 and result.output.strip().splitlines() == [
        f"error: no episodes with tag 'nothing' in {two_cards}"
    ]


def test_viewer_leaderboard_page_and_json(two_cards: str) -> None:
    with TestClient(create_app(two_cards), base_url="http://127.0.0.1") as client:
        page = client.get("/leaderboard")
        assert page.status_code == 200 and "<script" not in page.text
        assert "default-src 'none'" in page.headers["content-security-policy"]
        ids = [b.card.id for b in leaderboard(SQLiteStore(two_cards))]
        assert all(f"<code>{i}</code>" in page.text for i in ids) and POLITE in page.text
        data = client.get("/api/leaderboard", params={"tag": "b"}).json()
        assert [b["card"]["id"] for b in data["boards"]] == [ids[1]] and data["boards"][0]["rows"][0]["rated"] == 4
        assert "No episodes with this tag" in client.get("/leaderboard", params={"tag": "none"}).text


def test_openskill_ranks_a_consistent_winner_above_a_loser(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'v.db'}"
    common = ["--partner", "rule-partner", "--evaluator", "verifiable", "--episodes-per-scenario", 3]
    bench(store, "buyer", *common, model="verifiable_agents:Buyer", partner="rule-partner", scenarios=BIKE)
    bench(store, "quiet", *common, model=QUIET, partner="rule-partner", scenarios=BIKE)
    (board,) = leaderboard(SQLiteStore(store))  # same scenario, pairings, judge and turns: one card
    assert board.kind == "outcome" and board.tags == ["buyer", "quiet"]
    skills = {s.model: s for s in board.skills}
    buyer, quiet = skills["verifiable_agents:Buyer"], skills[QUIET]
    assert (buyer.matches, buyer.wins, quiet.matches, quiet.wins) == (3, 3, 3, 0)
    assert buyer.ordinal > quiet.ordinal and buyer.mu > 25 > quiet.mu
    assert buyer.ordinal == pytest.approx(buyer.mu - 3 * buyer.sigma) and buyer.sigma < 25 / 3
    assert board.skills.index(buyer) < board.skills.index(quiet)
    result = invoke("leaderboard", "--store", store)
    assert result.exit_code == 0 and "OpenSkill" in result.output


def test_skill_rows_order_and_counts() -> None:
    matches = [("a", "t1", True), ("b", "t1", False), ("a", "t2", True), ("b", "t2", True), ("c", "t1", False)]
    rows = skill_rows(matches)
    assert [r.model for r in rows] == ["a", "b", "c"]
    assert [(r.matches, r.wins) for r in rows] == [(2, 2), (2, 1), (1, 0)]


# -- benchmark --protocol ----------------------------------------------------------------------------------


def test_the_shipped_id_lists_are_sotopia_rl_s() -> None:
    hard, every = protocols()["sotopia-hard"], protocols()["sotopia-all"]
    assert len(hard.scenario_ids) == 14 and len(every.scenario_ids) == 90
    assert set(hard.scenario_ids) <= set(every.scenario_ids) and "01h7vfhnv13mhn97gah73e3km8" in hard.scenario_ids
    assert parse_env_ids('X-Y:\n"01AB", "02CD"\n') == {"X-Y": ("01ab", "02cd")}


def test_protocol_fails_in_one_line_when_sotopia_is_not_imported(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'empty.db'}"
    result = invoke("benchmark", "--protocol", "sotopia-hard", "--model", POLITE, "--partner", QUIET, "--store", store)
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: --protocol sotopia-hard: 14 of its 14 SOTOPIA scenarios")
    assert "sotopia-env episodes import PATH --format sotopia" in line
    result = invoke("benchmark", "--protocol", "sotopia-hard", "--max-turns", 5, "--store", store)
    assert result.exit_code == 1 and "fixes --max-turns" in result.output
    assert "expected sotopia-hard or sotopia-all" in invoke("benchmark", "--protocol", "bogus").output


def sotopia_import(scenario_ids: tuple[str, ...]) -> list[EpisodeLog]:
    """SOTOPIA episodes as an import of its scenarios gives them: 5 character pairings per scenario, each played
    twice; the first scenario also has a sixth pairing, played once (not one of its 5 most frequent)."""
    pool = setups()
    casts = list({tuple(c.id for c in s.characters): i for i, s in enumerate(pool)}.values())
    logs = []
    for i, sid in enumerate(scenario_ids):
        scenario = pool[i].scenario.model_copy(update={"id": sid, "constraints": None})
        for k in [*range(5), *range(5), *([5] if i == 0 else [])]:
            log = make_episode(len(logs), setup_index=casts[(i + k) % len(casts)])
            logs.append(log.model_copy(update={"setup": log.setup.model_copy(update={"scenario": scenario})}))
    return logs


def test_protocol_plays_the_five_imported_pairings_in_both_seats(tmp_path: Path) -> None:
    hard = protocols()["sotopia-hard"].scenario_ids
    imported = sotopia_import(hard)
    export_sotopia(imported, tmp_path / "sotopia")
    store = f"sqlite:///{tmp_path / 'p.db'}"
    result = invoke("episodes", "import", tmp_path / "sotopia", "--format", "sotopia", "--store", store)
    assert result.exit_code == 0, result.output
    out = tmp_path / "p.json"
    args = ["benchmark", "--protocol", "sotopia-hard", "--model", POLITE, "--partner", QUIET]
    result = invoke(*args, "--evaluator", "rule-based", "--store", store, "--json", out)
    assert result.exit_code == 0, result.output
    assert "140 episodes: 0 already done, 140 rated" in result.output and "14 (sotopia-hard)" in result.output
    (c,) = json.loads(out.read_text())["cards"]
    assert c["scenario_ids"] == sorted(hard) and c["setups"] == 70 and c["max_turns"] == 20
    played = list(SQLiteStore(store).iter(f"benchmark-sotopia-hard-{POLITE}-vs-{QUIET}"))
    first = [log for log in played if log.scenario_id == hard[0]]
    assert len(first) == 10 and sorted(log.agents[0].model for log in first) == [POLITE] * 5 + [QUIET] * 5
    counts = Counter(log.setup.pairing_key for log in imported if log.scenario_id == hard[0])
    assert len(counts) == 6 and {log.setup.pairing_key for log in first} == {k for k, n in counts.items() if n == 2}
