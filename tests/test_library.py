from pathlib import Path

import pytest

from sotopia_env.library import LibraryError, load_library, parse_file
from sotopia_env.profiles import Relationship, strip_hints
from sotopia_env.sampler import eligible_setups

KINDS = [
    "negotiation",
    "persuasion",
    "collaboration",
    "accommodation",
    "exchange",
    "competition",
    "relationship",
    "conflict",
    "secret",
]


def test_builtin_library_size_and_coverage(library):
    assert len(library.scenarios) >= 40
    assert len(library.characters) >= 30
    tags = {t for s in library.scenarios.values() for t in s.tags}
    for kind in KINDS:
        assert any(t.startswith(kind) for t in tags), f"no scenario tagged {kind}"
    assert sum(s.hard for s in library.scenarios.values()) >= 10
    assert {s.split for s in library.scenarios.values()} == {"train", "dev", "test"}
    assert all(len(s.goals) == 2 for s in library.select("all"))  # the opt-in families stay out of "all"
    many = library.select("multi-party")
    assert len([s for s in many if s.game is None]) >= 3 and all(3 <= len(s.goals) <= 8 for s in many)
    assert {s.game.rules for s in library.select("game")} == {"werewolf", "undercover", "negotiation"}
    games = library.select("game")
    assert all("verifiable" in s.tags for s in games)  # judged exactly, so tagged verifiable too ...
    assert library.select("game:verifiable") == games
    for selector in ("verifiable", "verifiable:train", "verifiable:test"):  # ... yet the two-seat family stays apart
        assert all(s.game is None and s.verifiable is not None for s in library.select(selector)), selector
    assert any("<extra_info>" in g or "<strategy_hint>" in g for s in library.scenarios.values() for g in s.goals)


def test_every_scenario_can_be_cast(library):
    for scenario in library.scenarios.values():
        setups = eligible_setups(scenario, library)
        assert setups, scenario.id
        for setup in setups[:5]:
            setup.check()
            if scenario.num_agents == 2 and scenario.relationship != Relationship.stranger:
                assert setup.relationship is not None
                assert setup.relationship.relationship == scenario.relationship


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    return path


def test_missing_field_names_file_entry_and_field(tmp_path):
    path = _write(
        tmp_path,
        """
scenarios:
  - id: ok-one
    codename: ok
    scenario: "A perfectly fine scenario text."
    goals: ["a", "b"]
    relationship: friend
  - id: broken-one
    codename: broken
    scenario: "Another scenario with a problem."
    goals: ["only one goal"]
    relationship: friend
""",
    )
    with pytest.raises(LibraryError) as err:
        parse_file(path)
    msg = str(err.value)
    assert str(path) in msg and "entry 1 (id 'broken-one')" in msg and "field 'goals'" in msg
    assert "\n" not in msg


@pytest.mark.parametrize(
    "body, field",
    [
        ("relationship: cousins", "relationship"),
        ("relationship: friend\n    split: holdout", "split"),
        ("relationship: friend\n    constraints: [{min_age: 50, max_age: 20}, {}]", "constraints.0"),
        ("relationship: friend\n    surprise: 1", "surprise"),
    ],
)
def test_bad_values_are_named(tmp_path, body, field):
    path = _write(
        tmp_path,
        f"""
scenarios:
  - id: bad
    codename: bad
    scenario: "A scenario that is long enough."
    goals: ["a", "b"]
    {body}
""",
    )
    with pytest.raises(LibraryError, match=f"field '{field}"):
        parse_file(path)


def test_invalid_yaml_and_duplicates(tmp_path):
    with pytest.raises(LibraryError, match=r"broken.yaml: line \d+ invalid YAML"):
        parse_file(_write(tmp_path, "scenarios:\n  - id: [unclosed\n"))
    dup = tmp_path / "dup.yaml"
    lib = load_library()
    some_id = next(iter(lib.characters))
    dup.write_text(f"characters:\n  - {lib.characters[some_id].model_dump_json()}\n")
    with pytest.raises(LibraryError, match="duplicate id"):
        load_library([dup])


def test_relationship_parse_and_hints():
    assert Relationship.parse("family member") is Relationship.family_member
    assert Relationship.parse(2) is Relationship.acquaintance
    with pytest.raises(ValueError, match="unknown relationship"):
        Relationship.parse("nemesis")
    goal = "Get the ladder. <extra_info>He needs it Saturday.</extra_info> <strategy_hint>Offer help.</strategy_hint>"
    assert strip_hints(goal) == "Get the ladder."


def test_unknown_scenario_id(library):
    with pytest.raises(LibraryError, match="unknown scenario id 'nope'"):
        library.select("nope")
    assert {s.split for s in library.select("test")} == {"test"}
    assert all(s.hard for s in library.select("hard"))
