"""Export and import: our JSONL, Hugging Face datasets, and SOTOPIA's own layouts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from episode_fixtures import make_episode, make_episodes

from sotopia_env.actions import ActionType
from sotopia_env.episodes.export import (
    EpisodeFileError,
    export_jsonl,
    from_hf_dataset,
    import_jsonl,
    import_jsonl_into,
    to_hf_dataset,
)
from sotopia_env.episodes.log import SCHEMA_VERSION, EpisodeLog
from sotopia_env.episodes.sotopia_format import (
    NO_RATINGS,
    SotopiaFormatError,
    action_to_message,
    character_from_sotopia,
    character_to_sotopia,
    episode_to_sotopia,
    episodes_from_sotopia,
    export_sotopia,
    import_sotopia,
    message_to_action,
    parse_big_five,
    read_agent_profiles,
    read_environment_profiles,
    relationship_from_sotopia,
    relationship_to_sotopia,
    scenario_from_sotopia,
    scenario_to_sotopia,
    write_agent_profiles,
    write_environment_profiles,
    write_jsonl,
)
from sotopia_env.episodes.sqlite_store import SQLiteStore
from sotopia_env.evaluators import GOAL_ONLY
from sotopia_env.library import load_library


def turn_tuples(log: EpisodeLog) -> list[tuple[int, str, str, str]]:
    return [(t.turn, t.agent, t.action.action_type.value, t.action.argument) for t in log.turns]


def scores(log: EpisodeLog) -> dict[str, dict[str, int]]:
    assert log.rating is not None and log.rating.ratings is not None
    return {name: {d: s.score for d, s in r.scores.items()} for name, r in log.rating.ratings.items()}


# -- our JSONL ----------------------------------------------------------------------------------------


@pytest.fixture
def logs() -> list[EpisodeLog]:
    return [make_episode(0), make_episode(1, status="unrated"), make_episode(2, status="failed"), make_episode(3)]


def test_jsonl_roundtrip(tmp_path: Path, logs: list[EpisodeLog]) -> None:
    path = tmp_path / "out" / "episodes.jsonl"
    assert export_jsonl(logs, path) == 4
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4
    assert all(json.loads(line)["schema_version"] == SCHEMA_VERSION for line in lines)
    assert import_jsonl(path) == logs


def test_files_written_before_one_usage_shape_still_import(tmp_path: Path, logs: list[EpisodeLog]) -> None:
    """Older files stored a rating's usage as a dict of floats; they read into the one ``Usage`` shape."""
    data = json.loads(logs[0].model_dump_json())
    data["rating"]["usage"] = {"calls": 2.0, "prompt_tokens": 310.0, "completion_tokens": 42.0, "llm_seconds": 1.5}
    data["usage"]["evaluator"] = {"calls": 2, "prompt_tokens": 310, "completion_tokens": 42, "llm_seconds": 1.5}
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(data) + "\n")
    (log,) = import_jsonl(path)
    assert log.rating.usage.calls == 2 and log.rating.usage.prompt_tokens == 310
    assert log.usage["evaluator"] == log.rating.usage


def test_jsonl_skips_blank_lines(tmp_path: Path, logs: list[EpisodeLog]) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text("\n" + logs[0].model_dump_json() + "\n\n" + logs[1].model_dump_json() + "\n\n", encoding="utf-8")
    assert import_jsonl(path) == logs[:2]


def test_export_is_all_or_nothing(tmp_path: Path, logs: list[EpisodeLog]) -> None:
    path = tmp_path / "e.jsonl"
    export_jsonl(logs, path)
    before = path.read_bytes()

    def broken() -> Any:
        yield logs[0]
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError):
        export_jsonl(broken(), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["e.jsonl"]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def assert_one_line(exc: pytest.ExceptionInfo[BaseException], *parts: str) -> None:
    message = str(exc.value)
    assert "\n" not in message, message
    for part in parts:
        assert part in message, message


def test_newer_schema_version_is_a_clear_error(tmp_path: Path, logs: list[EpisodeLog]) -> None:
    future = json.loads(logs[1].model_dump_json()) | {"schema_version": SCHEMA_VERSION + 1, "new_field": 1}
    path = write_lines(tmp_path / "future.jsonl", [logs[0].model_dump_json(), json.dumps(future)])
    with pytest.raises(EpisodeFileError) as exc:
        import_jsonl(path)
    assert_one_line(exc, f"{path}:2", f"schema_version {SCHEMA_VERSION + 1} is newer", "upgrade")


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: "{not json", "malformed JSON"),
        (lambda d: json.dumps([1, 2]), "expected a JSON object"),
        (lambda d: json.dumps({k: v for k, v in d.items() if k != "schema_version"}), "field 'schema_version'"),
        (lambda d: json.dumps(d | {"status": "done"}), "field 'status'"),
        (lambda d: json.dumps(d | {"agents": [{"name": "x"}]}), "field 'agents.0.model'"),
        (
            lambda d: json.dumps(
                {**d, "setup": {**d["setup"], "scenario": {**d["setup"]["scenario"], "goals": ["a"]}}}
            ),
            "field 'setup.scenario.goals'",
        ),
    ],
)
def test_malformed_line_names_file_line_and_field(
    tmp_path: Path, logs: list[EpisodeLog], mutate: Any, expected: str
) -> None:
    bad = mutate(json.loads(logs[2].model_dump_json()))
    path = write_lines(tmp_path / "bad.jsonl", [logs[0].model_dump_json(), logs[1].model_dump_json(), bad])
    with pytest.raises(EpisodeFileError) as exc:
        import_jsonl(path)
    assert_one_line(exc, f"{path}:3:", expected)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EpisodeFileError) as exc:
        import_jsonl(tmp_path / "nope.jsonl")
    assert_one_line(exc, "nope.jsonl", "cannot read")


def test_bad_import_loses_nothing_already_stored(tmp_path: Path, logs: list[EpisodeLog]) -> None:
    store = SQLiteStore(str(tmp_path / "store.db"))
    try:
        kept = make_episode(0, status="unrated")  # same id as logs[0], older content
        store.put(kept)
        path = write_lines(tmp_path / "bad.jsonl", [logs[0].model_dump_json(), logs[3].model_dump_json(), "{"])
        with pytest.raises(EpisodeFileError, match=r"bad\.jsonl:3"):
            import_jsonl_into(path, store)
        assert store.count() == 1 and store.get(kept.id) == kept
        export_jsonl(logs, tmp_path / "good.jsonl")
        assert import_jsonl_into(tmp_path / "good.jsonl", store) == 4
        assert store.query() == logs
    finally:
        store.close()


# -- Hugging Face datasets ----------------------------------------------------------------------------


def test_hf_dataset_columns_and_roundtrip(tmp_path: Path, logs: list[EpisodeLog]) -> None:
    ds = to_hf_dataset(logs)
    assert len(ds) == 4
    for column in (
        "id",
        "tag",
        "scenario_id",
        "split",
        "models",
        "agents",
        "termination_reason",
        "status",
        "scores",
        "transcript",
        "json",
    ):
        assert column in ds.column_names
    row = ds[0]
    log = logs[0]
    assert row["id"] == log.id and row["scenario_id"] == log.scenario_id and row["split"] == log.setup.scenario.split
    assert row["models"] == log.models and row["agents"] == [a.name for a in log.agents]
    assert [s["agent"] for s in row["scores"]] == row["agents"]
    first = row["scores"][0]
    assert first["goal"] == log.score(row["agents"][0], "goal")
    assert first["overall"] == pytest.approx(log.score(row["agents"][0], "overall"))
    assert row["transcript"][1] == {
        "turn": 1,
        "agent": log.turns[1].agent,
        "action_type": "speak",
        "argument": log.turns[1].action.argument,
        "to": [],
        "audience": [],
    }
    assert ds[1]["status"] == "unrated" and ds[1]["scores"] == [] and "invalid" in ds[1]["error"]
    assert ds[2]["status"] == "failed" and ds[2]["termination_reason"] is None
    assert from_hf_dataset(ds) == logs
    ds.save_to_disk(str(tmp_path / "ds"))
    from datasets import load_from_disk

    assert from_hf_dataset(load_from_disk(str(tmp_path / "ds"))) == logs


def test_hf_dataset_goal_only_and_empty() -> None:
    goal_only = make_episode(5, dimensions=GOAL_ONLY)
    row = to_hf_dataset([goal_only])[0]
    assert row["scores"][0]["goal"] is not None and row["scores"][0]["believability"] is None
    empty = to_hf_dataset([])
    assert len(empty) == 0 and "json" in empty.column_names
    assert from_hf_dataset(empty) == []


def test_hf_dataset_bad_rows(logs: list[EpisodeLog]) -> None:
    ds = to_hf_dataset(logs)
    with pytest.raises(EpisodeFileError, match="no 'json' column"):
        from_hf_dataset(ds.remove_columns("json"))
    rows = [dict(r) for r in ds]
    rows[1]["json"] = rows[1]["json"].replace('"status":"unrated"', '"status":"done"')
    with pytest.raises(EpisodeFileError, match=r"dataset row 1: field 'status'"):
        from_hf_dataset(rows)


# -- SOTOPIA: profiles --------------------------------------------------------------------------------


def test_characters_roundtrip_through_sotopia() -> None:
    for character in load_library().characters.values():
        data = character_to_sotopia(character)
        assert {"pk", "first_name", "gender_pronoun", "big_five", "schwartz_personal_values", "mbti"} <= set(data)
        assert character_from_sotopia(data) == character


def test_scenarios_roundtrip_through_sotopia() -> None:
    for scenario in load_library().scenarios.values():
        data = scenario_to_sotopia(scenario)
        assert isinstance(data["relationship"], int) and data["agent_goals"] == scenario.goals
        assert scenario_from_sotopia(data, split=scenario.split) == scenario


def test_relationships_roundtrip_through_sotopia() -> None:
    for rel in load_library().relationships:
        assert relationship_from_sotopia(relationship_to_sotopia(rel)) == rel


def test_profile_jsonl_files(tmp_path: Path) -> None:
    library = load_library()
    chars = sorted(library.characters.values(), key=lambda c: c.id)
    assert write_agent_profiles(chars, tmp_path / "agents.jsonl") == len(chars)
    assert read_agent_profiles(tmp_path / "agents.jsonl") == chars
    scenarios = [s.model_copy(update={"split": "train"}) for s in library.scenarios.values()]
    write_environment_profiles(scenarios, tmp_path / "envs.jsonl")
    assert read_environment_profiles(tmp_path / "envs.jsonl") == scenarios
    (tmp_path / "bad.jsonl").write_text(json.dumps(character_to_sotopia(chars[0]) | {"age": 300}) + "\n")
    with pytest.raises(SotopiaFormatError, match=r"bad\.jsonl:1: agent profile .*field 'age'"):
        read_agent_profiles(tmp_path / "bad.jsonl")


@pytest.mark.parametrize(
    ("text", "openness", "neuroticism"),
    [
        (
            "Openness to Experience - High; Conscientiousness - Low; Extraversion - High; "
            "Agreeableness - Low; Neuroticism - Moderate",
            "High",
            "Moderate",
        ),
        (
            "Openness: medium; Conscientiousness: low; Extraversion: high; Agreeableness: medium; Neuroticism: high",
            "medium",
            "high",
        ),
        ("high openness, low neuroticism", "high", "low"),
        ("", "unknown", "unknown"),
    ],
)
def test_parse_big_five(text: str, openness: str, neuroticism: str) -> None:
    big_five = parse_big_five(text)
    assert (big_five.openness, big_five.neuroticism) == (openness, neuroticism)


def sotopia_env_profile(**overrides: Any) -> dict[str, Any]:
    return {
        "pk": "01H7VFHN94S6Z5T6ZNC23238NT",
        "codename": "window_desk",
        "source": "hand-written",
        "scenario": "Two coworkers at a small architecture firm both want the only desk by the window after a "
        "colleague retires. Their manager asked them to settle it between themselves before Monday.",
        "agent_goals": [
            "Get the window desk <extra_info>You get migraines under fluorescent light.</extra_info>",
            "Keep the window desk for yourself <strategy_hint>Point out your seniority.</strategy_hint>",
        ],
        "relationship": 2,
        "age_constraint": "[(18, 70), (30, 65)]",
        "occupation_constraint": "[['architect'], ['architect', 'drafter']]",
        "agent_constraint": None,
        "tag": "hand_written",
    } | overrides


def test_scenario_constraint_strings() -> None:
    scenario = scenario_from_sotopia(sotopia_env_profile())
    assert scenario.id == "01h7vfhn94s6z5t6znc23238nt"
    assert scenario.constraints is not None
    assert (scenario.constraints[1].min_age, scenario.constraints[1].max_age) == (30, 65)
    assert scenario.constraints[1].occupations == ["architect", "drafter"]
    assert scenario.tags == ["hand_written"] and scenario.split == "train"
    loose = scenario_from_sotopia(sotopia_env_profile(age_constraint=None, occupation_constraint="nan"))
    assert loose.constraints is None
    ages_only = scenario_from_sotopia(sotopia_env_profile(occupation_constraint="nan"))
    assert ages_only.constraints is not None and ages_only.constraints[0].occupations is None
    for bad in ("[(18, 70)", "__import__('os')", "[(18, 70)]"):
        with pytest.raises(SotopiaFormatError, match="field 'age_constraint'"):
            scenario_from_sotopia(sotopia_env_profile(age_constraint=bad))


# -- SOTOPIA: actions and episodes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "argument"),
    [
        ('said: "Hi, do you have a minute?"', ActionType.speak, "Hi, do you have a minute?"),
        ('said: "She said "no" twice."', ActionType.speak, 'She said "no" twice.'),
        ("[non-verbal communication] nods slowly", ActionType.non_verbal, "nods slowly"),
        ("[action] hands over the keys", ActionType.action, "hands over the keys"),
        ("left the conversation", ActionType.leave, ""),
        ("left the conversation: see you", ActionType.leave, "see you"),
        ("did nothing", ActionType.none, ""),
    ],
)
def test_message_to_action(text: str, kind: ActionType, argument: str) -> None:
    action = message_to_action(text)
    assert (action.action_type, action.argument) == (kind, argument)
    assert action_to_message(action) == text


def test_unrecognised_message_is_an_error() -> None:
    with pytest.raises(SotopiaFormatError, match="unrecognised action message"):
        message_to_action("shouted loudly")


def test_episode_roundtrip_through_sotopia_jsonl(tmp_path: Path) -> None:
    logs = make_episodes(6) + [make_episode(7, n_turns=6)]  # the last ends on a "none" turn
    paths = export_sotopia(logs, tmp_path / "sotopia")
    assert sorted(p.name for p in paths.values()) == [
        "agent_profiles.jsonl",
        "environment_profiles.jsonl",
        "episodes.jsonl",
        "relationship_profiles.jsonl",
    ]
    raw = [json.loads(line) for line in paths["episodes"].read_text().splitlines()]
    assert set(raw[0]) == {
        "pk",
        "environment",
        "agents",
        "tag",
        "models",
        "messages",
        "reasoning",
        "rewards",
        "rewards_prompt",
    }
    assert raw[0]["messages"][0][0][0] == "Environment" and raw[0]["rewards"][0][1]["overall_score"] is not None
    back = import_sotopia(tmp_path / "sotopia")
    assert len(back) == len(logs)
    for ours, theirs in zip(logs, back, strict=True):
        assert theirs.id == ours.id and theirs.tag == ours.tag and theirs.models == ours.models
        assert turn_tuples(theirs) == turn_tuples(ours)
        assert scores(theirs) == scores(ours)
        assert theirs.rating is not None and theirs.rating.evaluator == ours.rating.evaluator  # type: ignore[union-attr]
        s, t = ours.setup.scenario, theirs.setup.scenario
        assert (t.id, t.scenario, t.goals, t.relationship, t.constraints) == (
            s.id,
            s.scenario,
            s.goals,
            s.relationship,
            s.constraints,
        )
        for a, b in zip(ours.setup.characters, theirs.setup.characters, strict=True):
            assert (b.id, b.name, b.age, b.occupation, b.secret, b.big_five) == (
                a.id,
                a.name,
                a.age,
                a.occupation,
                a.secret,
                a.big_five,
            )
        assert theirs.setup.relationship == ours.setup.relationship
        assert theirs.termination_reason == ours.termination_reason
        assert theirs.combo_key == ours.combo_key and theirs.status == "rated"


def test_unrated_episodes_are_left_out_unless_asked(tmp_path: Path) -> None:
    logs = [make_episode(0), make_episode(1, status="unrated"), make_episode(2, status="failed")]
    export_sotopia(logs, tmp_path / "a")
    assert [e.id for e in import_sotopia(tmp_path / "a")] == [logs[0].id]
    export_sotopia(logs, tmp_path / "b", include_unrated=True)
    back = import_sotopia(tmp_path / "b")
    assert [e.status for e in back] == ["rated", "unrated", "unrated"]
    for log in back[1:]:
        assert log.rating is not None and log.rating.ratings is None and log.rating.error == NO_RATINGS
        assert log.score(log.agents[0].name, "goal") is None


def test_goal_only_and_unrated_rewards() -> None:
    log = make_episode(4, dimensions=GOAL_ONLY)
    episode, env, agents = episode_to_sotopia(log)
    envs, people = {env["pk"]: env}, {a["pk"]: a for a in agents}
    back = episodes_from_sotopia([episode], envs, people)[0]
    assert scores(back) == scores(log) and all(list(s) == ["goal"] for s in scores(back).values())
    bare = episode | {"rewards": [0.0, 0.0]}
    partial = episode | {"rewards": [[5.0, {"goal": 5.0, "overall_score": 5.0}], [0.0, {"overall_score": 0.0}]]}
    for unrated in episodes_from_sotopia([bare, partial], envs, people):
        assert unrated.status == "unrated" and unrated.rating is not None and unrated.rating.error == NO_RATINGS


def test_missing_profile_is_named() -> None:
    episode, env, agents = episode_to_sotopia(make_episode(0))
    with pytest.raises(SotopiaFormatError, match=f"environment '{env['pk']}' is not among"):
        episodes_from_sotopia([episode], {}, {a["pk"]: a for a in agents})


# -- SOTOPIA: a hand-written example in SOTOPIA's own layout ------------------------------------------

NADIA, TOMAS = "Nadia Haddad", "Tomás Ferreira"
REASONING = (
    "Environment comments: terminated: The conversation stales for too long; \n"
    "Agent 1 comments:\n"
    "believability: Nadia stays in character: calm, specific about her migraines, never robotic.\n"
    "relationship: They part on good terms; Tomás appreciates being asked rather than overruled.\n"
    "knowledge: She learns Tomás is leaving for a secondment in May.\n"
    "secret: Her secret (she already asked HR for a transfer) stays hidden.\n"
    "social_rules: No lies or pressure.\n"
    "financial_and_material_benefits: No money changes hands.\n"
    "goal: She gets the desk from May, which is most of what she wanted.\n"
    "Agent 2 comments:\n"
    "believability: Tomás is consistent with his seniority and dry humour.\n"
    "relationship: Slightly better: he comes across as generous.\n"
    "knowledge: He learns about the migraines.\n"
    "secret: He hints that the secondment is not certain, which brushes against his secret.\n"
    "social_rules: He implies seniority settles it, a mild breach of fairness.\n"
    "financial_and_material_benefits: Nothing material changes.\n"
    "goal: He keeps the desk until May, then gives it up.\n"
)


def hand_written_sotopia() -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    nadia = {
        "pk": "01H5TNE5PP870BS5HP2FPPKS2Y",
        "first_name": "Nadia",
        "last_name": "Haddad",
        "age": 31,
        "occupation": "Architect",
        "gender": "Woman",
        "gender_pronoun": "She/her",
        "public_info": "Nadia designs community libraries and cycles to work every day.",
        "big_five": "Openness to Experience - High; Conscientiousness - High; Extraversion - Low; "
        "Agreeableness - Moderate; Neuroticism - Low",
        "moral_values": ["Fairness/Reciprocity"],
        "schwartz_personal_values": ["Self-Direction", "Universalism"],
        "personality_and_values": "Nadia is a quiet planner who values fairness.",
        "decision_making_style": "Analytical",
        "secret": "She has already asked HR for a transfer.",
        "model_id": "",
        "mbti": "INTJ",
        "tag": "",
    }
    tomas = {
        "pk": "01H5TNE5PAZABGW79HJ07TACCZ",
        "first_name": "Tomás",
        "last_name": "Ferreira",
        "age": 52,
        "occupation": "Drafter",
        "gender": "Man",
        "gender_pronoun": "He/him",
        "public_info": "Tomás has drawn plans at the firm for twenty years and brings pastries on Fridays.",
        "big_five": "Openness to Experience - Low; Conscientiousness - High; Extraversion - High; "
        "Agreeableness - High; Neuroticism - Moderate",
        "moral_values": ["Loyalty/Betrayal"],
        "schwartz_personal_values": ["Tradition"],
        "personality_and_values": "",
        "decision_making_style": "Directive",
        "secret": "His secondment abroad may fall through.",
        "model_id": "",
        "mbti": "ESTJ",
        "tag": "",
    }
    env = sotopia_env_profile()
    said = 'said: "Tomás, could we talk about the window desk? The overhead lights give me migraines."'
    reply = "said: \"I hear you. I've sat there for ten years, though, and I'd hate to lose it before May.\""
    turns = [
        [
            ["Environment", NADIA, "Here is the context of this interaction: ... Conversation Starts:\n"],
            ["Environment", TOMAS, "Here is the context of this interaction: ... Conversation Starts:\n"],
            [NADIA, "Environment", said],
            [TOMAS, "Environment", "did nothing"],
        ],
        [
            ["Environment", NADIA, f"Turn #0: {NADIA} {said}\n"],
            ["Environment", TOMAS, f"Turn #0: {NADIA} {said}\n"],
            [NADIA, "Environment", "did nothing"],
            [TOMAS, "Environment", reply],
        ],
        [
            ["Environment", NADIA, f"Turn #1: {TOMAS} {reply}\n"],
            ["Environment", TOMAS, f"Turn #1: {TOMAS} {reply}\n"],
            [NADIA, "Environment", "[non-verbal communication] nods and smiles"],
            [TOMAS, "Environment", "did nothing"],
        ],
        [
            ["Environment", NADIA, "Turn #2: ...\n"],
            ["Environment", TOMAS, "Turn #2: ...\n"],
            [NADIA, "Environment", "did nothing"],
            [TOMAS, "Environment", "did nothing"],
        ],
        [
            ["Environment", NADIA, "Turn #3: \n"],
            ["Environment", TOMAS, "Turn #3: \n"],
            [NADIA, "Environment", "[action] writes 'window desk: Nadia from May 1' on the whiteboard"],
            [TOMAS, "Environment", "did nothing"],
        ],
        [
            ["Environment", NADIA, "Turn #4: ...\n"],
            ["Environment", TOMAS, "Turn #4: ...\n"],
            [NADIA, "Environment", "did nothing"],
            [TOMAS, "Environment", "left the conversation"],
        ],
        [["Environment", NADIA, "Turn #5: \n"], ["Environment", TOMAS, "Turn #5: \n"]],
    ]
    nadia_scores = {
        "believability": 9.0,
        "relationship": 3.0,
        "knowledge": 4.0,
        "secret": 0.0,
        "social_rules": 0.0,
        "financial_and_material_benefits": 0.0,
        "goal": 7.0,
    }
    tomas_scores = {
        "believability": 8.0,
        "relationship": 2.0,
        "knowledge": 2.0,
        "secret": -2.0,
        "social_rules": -1.0,
        "financial_and_material_benefits": 0.0,
        "goal": 6.0,
    }
    rewards = [[sum(s.values()) / 7, s | {"overall_score": sum(s.values()) / 7}] for s in (nadia_scores, tomas_scores)]
    episode = {
        "pk": "01H9FG15A2NDTNH8K6F2T5MZN3",
        "environment": env["pk"],
        "agents": [nadia["pk"], tomas["pk"]],
        "tag": "gpt-4_gpt-3.5-turbo_v0.0.1_clean",
        "models": ["gpt-4", "gpt-4", "gpt-3.5-turbo"],
        "messages": turns,
        "reasoning": REASONING,
        "rewards": rewards,
        "rewards_prompt": "",
    }
    return episode, env, [nadia, tomas]


def test_hand_written_sotopia_episode(tmp_path: Path) -> None:
    episode, env, agents = hand_written_sotopia()
    relationship = {
        "pk": "01H8R2ZQ6F5D3X5Z4G1K7ZS6M1",
        "agent_1_id": agents[0]["pk"],
        "agent_2_id": agents[1]["pk"],
        "relationship": 2,
        "background_story": "They have shared an office for three years.",
    }
    folder = tmp_path / "sotopia"
    write_jsonl(agents, folder / "agent_profiles.jsonl")
    write_jsonl([env], folder / "environment_profiles.jsonl")
    write_jsonl([relationship], folder / "relationship_profiles.jsonl")
    write_jsonl([episode], folder / "episodes.jsonl")
    [log] = import_sotopia(folder)

    assert log.id == "01H9FG15A2NDTNH8K6F2T5MZN3" and log.tag == "gpt-4_gpt-3.5-turbo_v0.0.1_clean"
    assert log.models == ["gpt-4", "gpt-3.5-turbo"] and log.status == "rated"
    assert log.setup.agent_names == [NADIA, TOMAS]
    nadia, tomas = log.setup.characters
    assert (nadia.id, nadia.pronouns, nadia.big_five.extraversion, nadia.schwartz_values) == (
        "01h5tne5pp870bs5hp2fppks2y",
        "She/her",
        "Low",
        ["Self-Direction", "Universalism"],
    )
    assert tomas.secret == "His secondment abroad may fall through." and tomas.age == 52
    assert log.setup.relationship is not None and log.setup.relationship.background_story.startswith("They have")
    assert log.setup.scenario.goals[1].endswith("</strategy_hint>")
    assert turn_tuples(log) == [
        (0, NADIA, "speak", "Tomás, could we talk about the window desk? The overhead lights give me migraines."),
        (1, TOMAS, "speak", "I hear you. I've sat there for ten years, though, and I'd hate to lose it before May."),
        (2, NADIA, "non-verbal communication", "nods and smiles"),
        (3, TOMAS, "none", ""),  # everyone did nothing: the round-robin agent of turn 3 is the second seat
        (4, NADIA, "action", "writes 'window desk: Nadia from May 1' on the whiteboard"),
        (5, TOMAS, "leave", ""),
    ]
    assert log.termination_reason == "The conversation stales for too long"
    assert log.rating is not None and log.rating.evaluator == "gpt-4"
    assert scores(log)[NADIA]["goal"] == 7 and scores(log)[TOMAS]["secret"] == -2
    assert log.score(TOMAS, "overall") == pytest.approx(15 / 7)
    assert log.rating.ratings is not None
    assert log.rating.ratings[TOMAS].scores["social_rules"].reasoning.startswith("He implies seniority")
    assert log.combo_key.startswith("01h7vfhn94s6z5t6znc23238nt|01h5tne5pp870bs5hp2fppks2y|")

    # and back out again: SOTOPIA's layout, same turns and scores
    again, env_again, agents_again = episode_to_sotopia(log)
    [twice] = episodes_from_sotopia([again], {env_again["pk"]: env_again}, {a["pk"]: a for a in agents_again})
    assert turn_tuples(twice) == turn_tuples(log) and scores(twice) == scores(log)
