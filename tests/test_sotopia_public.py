"""SOTOPIA's public, self-contained episode layout (``episodes_to_jsonl``, the released SOTOPIA / SOTOPIA-pi data)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from episode_fixtures import make_episode
from typer.testing import CliRunner

from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.sotopia_format import NO_RATINGS, SotopiaFormatError
from sotopia_env.episodes.sotopia_public import (
    PUBLIC_FIELDS,
    episode_from_public,
    episode_to_public,
    export_public,
    messages_from_interactions,
    read_sotopia,
)
from sotopia_env.visibility import describe

DATA = Path(__file__).parent / "data"
PUBLIC = DATA / "sotopia_public_episodes.jsonl"  # sotopia 0.1.5's TwoAgentEpisodeWithScenarioBackgroundGoals
PI = DATA / "sotopia_pi_episodes.json"  # SOTOPIA-pi's six fields, as a JSON array
NADIA, TOMAS = "Nadia Haddad", "Tomás Ferreira"


def turn_tuples(log: EpisodeLog) -> list[tuple[int, str, str, str]]:
    return [(t.turn, t.agent, t.action.action_type.value, t.action.argument) for t in log.turns]


def scores(log: EpisodeLog) -> dict[str, dict[str, int]] | None:
    if log.rating is None or log.rating.ratings is None:
        return None
    return {name: {d: s.score for d, s in r.scores.items()} for name, r in log.rating.ratings.items()}


def setup_text(log: EpisodeLog) -> tuple[Any, ...]:
    s = log.setup.scenario
    return (s.id, s.codename, s.scenario, s.goals, [describe(c, None) for c in log.setup.characters])


def rows_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write_rows(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


# -- round trip ---------------------------------------------------------------------------------------


def test_export_import_round_trip(tmp_path: Path) -> None:
    logs = [make_episode(i) for i in range(3)] + [make_episode(3, status="unrated")]
    path = tmp_path / "public.jsonl"
    assert export_public(logs, path) == 3  # the unrated one is left out, as in the other SOTOPIA layout
    rows = rows_of(path)
    assert all(tuple(row) == PUBLIC_FIELDS for row in rows)
    back = read_sotopia(path)
    assert [b.id for b in back] == [log.id for log in logs[:3]]
    for ours, theirs in zip(logs, back, strict=False):
        assert turn_tuples(theirs) == turn_tuples(ours)
        assert scores(theirs) == scores(ours) and theirs.status == "rated"
        assert setup_text(theirs) == setup_text(ours)
        assert theirs.models == ours.models and theirs.tag == ours.tag
        assert [c.id for c in theirs.setup.characters] == [c.id for c in ours.setup.characters]
        again = episode_to_public(theirs)
        for name in ("agents_background", "social_goals", "social_interactions", "rewards", "reasoning"):
            assert again[name] == episode_to_public(ours)[name], name
    # a row without raw_messages reads the same turns from social_interactions
    pi_rows = [{k: row[k] for k in ("episode_id", "scenario", "codename", "agents_background", "social_goals",
                                    "social_interactions")} for row in rows]  # fmt: skip
    for row, ours in zip(pi_rows, logs, strict=False):
        log = episode_from_public(row)
        assert turn_tuples(log) == turn_tuples(ours) and setup_text(log)[1:] == setup_text(ours)[1:]


# -- hand-written fixtures ----------------------------------------------------------------------------


def test_sotopia_public_fixture() -> None:
    rated, placeholder = read_sotopia(PUBLIC)
    assert rated.id == "01H9FG15A2NDTNH8K6F2T5MZN3" and rated.tag == "gpt-4_gpt-3.5-turbo_v0.0.1_clean"
    assert rated.models == ["gpt-4", "gpt-3.5-turbo"] and rated.rating is not None and rated.rating.evaluator == "gpt-4"
    assert rated.setup.agent_names == [NADIA, TOMAS]
    assert rated.setup.scenario.id == "01h7vfhn94s6z5t6znc23238nt" and rated.setup.scenario.codename == "window_desk"
    nadia, tomas = rated.setup.characters
    assert (nadia.id, nadia.age, nadia.gender, nadia.pronouns, nadia.occupation) == (
        "01h5tne5pp870bs5hp2fppks2y",
        31,
        "Woman",
        "She/her",
        "architect",
    )
    assert nadia.public_info == "Nadia designs community libraries and cycles to work every day."
    assert tomas.secret == "His secondment abroad may fall through." and tomas.age == 52
    assert rated.setup.scenario.goals[1].endswith("</strategy_hint>")
    assert turn_tuples(rated) == [
        (0, NADIA, "speak", "Tomás, could we talk about the window desk? The overhead lights give me migraines."),
        (1, TOMAS, "speak", "I hear you. I've sat there for ten years, though. Could it wait until May?"),
        (2, NADIA, "non-verbal communication", "nods slowly"),
        (3, TOMAS, "none", ""),
        (4, NADIA, "action", "writes 'window desk: Nadia from May 1' on the whiteboard"),
        (5, TOMAS, "leave", ""),
    ]
    assert rated.termination_reason == "Agent 2 is leaving"
    assert scores(rated) is not None and scores(rated)[TOMAS]["goal"] == 9 and scores(rated)[TOMAS]["secret"] == -2
    assert rated.rating.ratings is not None
    assert rated.rating.ratings[NADIA].scores["goal"].reasoning == "She gets the desk from May."
    # all-zero rewards with an empty reasoning: SOTOPIA's placeholder, so unrated, never a score of 0
    assert placeholder.status == "unrated" and placeholder.rating is not None
    assert placeholder.rating.ratings is None and placeholder.rating.error == NO_RATINGS
    assert placeholder.score(NADIA, "goal") is None
    # the same row without raw_messages: social_interactions gives the same turns
    row = rows_of(PUBLIC)[0]
    del row["raw_messages"]
    assert turn_tuples(episode_from_public(row)) == turn_tuples(rated)


def test_sotopia_pi_fixture() -> None:
    fridge, piano, budget = read_sotopia(PI)
    for log in (fridge, piano, budget):
        assert log.status == "unrated" and log.rating is not None and log.rating.error == NO_RATINGS
        assert log.setup.scenario.split == "train" and log.setup.relationship is None
    assert fridge.id == "01HER8PQ5ZK3M0X7N2T9YQW4AB" and fridge.setup.scenario.codename == "fridge_space_1"
    assert fridge.setup.scenario.id.startswith("fridge_space_1-")  # codenames repeat; the text tells them apart
    other = episode_from_public(json.loads(PI.read_text(encoding="utf-8"))[0] | {"scenario": "Another kitchen story."})
    assert other.setup.scenario.id != fridge.setup.scenario.id
    mia, liam = fridge.setup.characters
    assert (mia.id, mia.name, mia.age, mia.gender, liam.occupation) == ("mia-davis", "Mia Davis", 29, "Woman", "chef")
    assert mia.secret == "She has been eating her housemate's yoghurt for weeks."
    assert turn_tuples(fridge) == [
        (0, "Mia Davis", "speak", "Hi Liam, could we sort out the fridge? I've got five shifts in a row this week."),
        (
            1,
            "Liam Johnson",
            "speak",
            "Sure. I bring leftovers home most nights, though, and I hate throwing food away.",
        ),
        (2, "Mia Davis", "non-verbal communication", "nods and opens the fridge door"),
        (3, "Liam Johnson", "action", "moves his leftovers onto the top shelf"),
        (4, "Mia Davis", "speak", "Two shelves for me, the top one for you, and we eat the leftovers first?\nDeal?"),
        (5, "Liam Johnson", "speak", "Deal."),
        (6, "Mia Davis", "leave", ""),
    ]
    # "did nothing", an empty paragraph (a turn left out) and two turns in a row by one agent
    assert [(t.turn, t.agent, t.action.action_type.value) for t in piano.turns] == [
        (0, "Noah Kim", "speak"),
        (1, "Emma Rossi", "none"),
        (2, "Noah Kim", "speak"),
        (3, "Emma Rossi", "none"),
        (4, "Noah Kim", "action"),
        (5, "Emma Rossi", "speak"),
    ]
    assert budget.turns[-1].action.action_type.value == "leave"


def test_interactions_follow_the_seats_round_robin() -> None:
    names = ["Ana Ruiz", "Ben Ode"]
    text = 'Ben Ode said: "Hi."\n\nBen Ode: [action] waves\n\nAna Ruiz left the conversation'
    assert messages_from_interactions(text, names) == [
        [["Ana Ruiz", "Environment", "did nothing"]],
        [["Ben Ode", "Environment", 'said: "Hi."']],
        [["Ana Ruiz", "Environment", "did nothing"]],
        [["Ben Ode", "Environment", "[action] waves"]],
        [["Ana Ruiz", "Environment", "left the conversation"]],
    ]
    perspectives = "Ana Ruiz's perspective (i.e., what Ana Ruiz knows before the episode starts): ...\n"
    assert messages_from_interactions(perspectives + "Conversation Starts:\n\n" + text, names)[1:2] == [
        [["Ben Ode", "Environment", 'said: "Hi."']]
    ]


# -- other containers ---------------------------------------------------------------------------------


def test_json_array_jsonl_and_saved_dataset_read_alike(tmp_path: Path) -> None:
    from datasets import Dataset

    rows = json.loads(PI.read_text(encoding="utf-8")) + rows_of(PUBLIC)
    expected = [turn_tuples(log) for log in read_sotopia(PI) + read_sotopia(PUBLIC)]
    assert [turn_tuples(log) for log in read_sotopia(write_rows(tmp_path / "all.jsonl", rows))] == expected
    # a saved datasets table keeps every name of every row in one struct (nulls elsewhere), in no seat order
    pi_rows = json.loads(PI.read_text(encoding="utf-8"))
    for row in pi_rows[1:]:
        row["agents_background"] = dict(reversed(row["agents_background"].items()))
        row["social_goals"] = dict(reversed(row["social_goals"].items()))
    Dataset.from_list(pi_rows).save_to_disk(str(tmp_path / "pi"))
    pi = read_sotopia(tmp_path / "pi")
    assert [log.setup.agent_names for log in pi] == [log.setup.agent_names for log in read_sotopia(PI)]
    assert [turn_tuples(log) for log in pi] == expected[:3]
    # Arrow cannot hold [score, {dimension: score}]: such columns travel as JSON text
    public_rows = rows_of(PUBLIC)
    for row in public_rows:
        for name in ("raw_messages", "raw_rewards", "rewards"):
            row[name] = json.dumps(row[name])
    Dataset.from_list(public_rows).save_to_disk(str(tmp_path / "public"))
    public = read_sotopia(tmp_path / "public")
    assert [turn_tuples(log) for log in public] == expected[3:]
    assert [scores(log) for log in public] == [scores(log) for log in read_sotopia(PUBLIC)]
    assert [log.setup.agent_names for log in public] == [[NADIA, TOMAS]] * 2


def test_sotopia_pi_readme_spelling() -> None:
    row = json.loads(PI.read_text(encoding="utf-8"))[0]
    row["epsiode_id"] = row.pop("episode_id")  # as SOTOPIA-pi's dataset card spells it
    assert episode_from_public(row).id == "01HER8PQ5ZK3M0X7N2T9YQW4AB"


# -- bad input ----------------------------------------------------------------------------------------


def assert_one_line(exc: pytest.ExceptionInfo[BaseException], *parts: str) -> None:
    message = str(exc.value)
    assert "\n" not in message, message
    for part in parts:
        assert part in message, message


def _pi_row() -> dict[str, Any]:
    return json.loads(PI.read_text(encoding="utf-8"))[0]


MIA_ONLY = {"Mia": "x", "Liam Johnson": "y"}
BAD_ROWS = [
    ({"social_goals": None}, ("field 'social_goals'", "Field required")),
    ({"social_goals": {"Mia Davis": "x"}}, ("field 'social_goals'", "do not match")),
    ({"scenario": 3}, ("field 'scenario'",)),
    ({"social_interactions": "Mia Davis: [dance] spins"}, ("field 'social_interactions'", "[dance]")),
    ({"social_interactions": "Hello there"}, ("field 'social_interactions'", "no action of")),
    ({"raw_messages": [[["Mia Davis", "Environment"]]]}, ("field 'raw_messages.0.0.2'", "Field required")),
    ({"raw_messages": [[["Mia Davis", "Environment", "sings"]]]}, ("field 'raw_messages.0'", "unrecognised")),
    ({"rewards": [[5.0, {"goal": 5}]]}, ("field 'rewards'", "one entry per agent")),
    ({"agents_background": MIA_ONLY, "social_goals": MIA_ONLY}, ("field 'agents_background'", "no last name")),
]


@pytest.mark.parametrize(("change", "parts"), BAD_ROWS)
def test_malformed_rows_name_file_line_and_field(
    tmp_path: Path, change: dict[str, Any], parts: tuple[str, ...]
) -> None:
    bad = {k: v for k, v in (_pi_row() | change).items() if v is not None}
    path = write_rows(tmp_path / "bad.jsonl", [_pi_row(), bad])
    with pytest.raises(SotopiaFormatError) as exc:
        read_sotopia(path)
    assert_one_line(exc, f"{path}:2", *parts)


def test_malformed_containers(tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(_pi_row()) + "\n{oops\n", encoding="utf-8")
    with pytest.raises(SotopiaFormatError) as exc:
        read_sotopia(broken)
    assert_one_line(exc, f"{broken}:2", "malformed JSON")
    array = tmp_path / "a.json"
    array.write_text(json.dumps([_pi_row(), "not a row"]), encoding="utf-8")
    with pytest.raises(SotopiaFormatError) as exc:
        read_sotopia(array)
    assert_one_line(exc, f"{array}: row 1", "expected a JSON object")
    episode_log_row = write_rows(tmp_path / "episodes.jsonl", [{"pk": "x", "environment": "e", "messages": []}])
    with pytest.raises(SotopiaFormatError) as exc:
        read_sotopia(episode_log_row)
    assert_one_line(exc, ":1", "not SOTOPIA's public layout", "environment_profiles.jsonl")
    with pytest.raises(SotopiaFormatError) as exc:
        read_sotopia(tmp_path / "missing.json")
    assert_one_line(exc, "missing.json", "no such file")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(SotopiaFormatError) as exc:
        read_sotopia(tmp_path / "empty_dir")
    assert_one_line(exc, "empty_dir", "neither")


def test_cli_export_and_import_and_bad_file_stores_nothing(tmp_path: Path) -> None:
    from sotopia_env.cli.main import app
    from sotopia_env.episodes.sqlite_store import SQLiteStore

    runner = CliRunner()
    source = f"sqlite:///{tmp_path / 'a.db'}"
    store = SQLiteStore(source)
    store.put_many([make_episode(0), make_episode(1), make_episode(2, status="failed")])
    store.close()
    out = tmp_path / "public.jsonl"
    result = runner.invoke(app, ["episodes", "export", str(out), "--format", "sotopia-public", "--store", source])
    assert result.exit_code == 0, result.output
    assert "exported 2 episodes" in result.output and len(rows_of(out)) == 2

    target = f"sqlite:///{tmp_path / 'b.db'}"
    args = ["episodes", "import", "--format", "sotopia", "--store", target]
    assert runner.invoke(app, [*args[:2], str(out), *args[2:]]).exit_code == 0
    result = runner.invoke(app, [*args[:2], str(PI), *args[2:], "--tag", "sotopia-pi"])
    assert result.exit_code == 0 and "imported 3 episodes" in result.output, result.output
    bad = _pi_row() | {"episode_id": "new", "social_interactions": "Mia Davis: [dance] spins"}
    broken = write_rows(tmp_path / "broken.jsonl", [_pi_row() | {"episode_id": "fine"}, bad])
    result = runner.invoke(app, [*args[:2], str(broken), *args[2:]])
    assert result.exit_code == 1 and f"{broken}:2" in result.output and "social_interactions" in result.output
    check = SQLiteStore(target)
    assert check.count() == 5 and check.count(tag="sotopia-pi") == 3
    assert "fine" not in {log.id for log in check.iter()}
    check.close()
