"""Scenario and character generation: seeds, duplicates, retries, YAML output, loading, and the CLI.

Logic tests use ``ScriptedBackend``; end-to-end tests go through litellm to the loopback OpenAI server.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from loopback_openai import LoopbackOpenAI, Reply
from typer.testing import CliRunner

from sotopia_env.backends.base import ChatRequest
from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.cli.main import app
from sotopia_env.generation.characters import Attributes, character_schema, generate_characters
from sotopia_env.generation.core import InvalidGeneration, RunSettings, load_json_object
from sotopia_env.generation.scenarios import example_json, generate_scenarios, parse_scenario, scenario_schema
from sotopia_env.generation.seeds import USED_SEEDS_FILE, Seed, SeedFileError, dedupe, normalise, read_seeds
from sotopia_env.generation.similarity import DUPLICATE_THRESHOLD, jaccard, scenario_text, shingles
from sotopia_env.library import Library, load_library
from sotopia_env.sampler import eligible_setups, sample_setups

SITUATIONS = [
    "Jordan borrowed Casey's car for the weekend and returned it with an empty tank.",
    "Riley promised to help Sam move apartments but got invited to a concert the same night.",
    "Quinn found out that a coworker took credit for the report they wrote together.",
]

# Distinct, valid replies, one per situation (words chosen so that no two are near-copies).
REPLIES: list[dict[str, Any]] = [
    {
        "codename": "empty_tank_return",
        "scenario": "Two housemates share a driveway. One lent the other a hatchback for a weekend trip; "
        "it came back with the fuel light on and sand all over the floor mats.",
        "goals": [
            "Get your housemate to pay for a full tank and a car wash before Monday.",
            "Avoid paying extra, since you already covered a toll the owner had forgotten about.",
        ],
        "relationship": "friend",
        "constraints": [{"min_age": 18, "max_age": 120}, {"min_age": 18, "max_age": 120}],
    },
    {
        "codename": "moving_day_clash",
        "scenario": "A van is booked for Saturday evening, boxes are stacked in the hallway, and a helper "
        "who promised muscle has just been offered front-row tickets to a sold-out show.",
        "goals": [
            "Keep your helper's promise intact: you cannot lift the sofa alone and the van is non-refundable.",
            "Go to the concert without damaging the friendship; offer an alternative such as Sunday morning.",
        ],
        "relationship": "friend",
        "constraints": None,
    },
    {
        "codename": "stolen_credit",
        "scenario": "After a quarterly meeting, an analyst corners a colleague by the elevators. The "
        "colleague presented their jointly written forecast as a solo effort to the director.",
        "goals": [
            "Have your colleague email the director correcting the record today.",
            "Keep the director's praise for yourself; you did write most of the final draft.",
        ],
        "relationship": "stranger",
        "constraints": None,
    },
]


def _situation(messages: list[dict[str, Any]]) -> str:
    user = next(m["content"] for m in messages if m["role"] == "user")
    return user.rsplit("Situation: ", 1)[1].strip()


def reply_for(messages: list[dict[str, Any]]) -> str:
    situation = _situation(messages)
    index = next(i for i, s in enumerate(SITUATIONS) if normalise(s) == normalise(situation))
    return json.dumps(REPLIES[index])


def write_seeds(path: Path, situations: list[str] = SITUATIONS) -> Path:
    path.write_text("".join(json.dumps({"context": s, "question": "Why?"}) + "\n" for s in situations))
    return path


@pytest.fixture
def seeds(tmp_path: Path) -> list[Seed]:
    return read_seeds(write_seeds(tmp_path / "seeds.jsonl"))


def run_scenarios(backend: Any, seeds: list[Seed], out: Path, library: Library, **kwargs: Any):
    settings = kwargs.pop("settings", RunSettings(attempts=2, concurrency=4))
    return asyncio.run(generate_scenarios(backend, seeds, len(seeds), out, library, settings=settings, **kwargs))


# --- seeds --------------------------------------------------------------------------------------


def test_seeds_normalise_and_dedupe(tmp_path: Path) -> None:
    assert normalise("  Alex  walked, Robin HOME!  ") == "alex walked robin home"
    path = write_seeds(tmp_path / "s.jsonl", ["Alex walked Robin home.", "alex walked robin home", "Other one."])
    seeds = read_seeds(path)
    assert [s.line for s in seeds] == [1, 2, 3]
    assert seeds[0].label == f"{tmp_path.name}/s.jsonl#1: Alex walked Robin home."
    unique, dropped = dedupe(seeds)
    assert [s.line for s in unique] == [1, 3] and dropped == 1


def test_seed_files_csv_text_and_errors(tmp_path: Path) -> None:
    csv_path = tmp_path / "s.csv"
    csv_path.write_text('situation,other\n"A friend, late again",x\n,y\n')
    assert [s.text for s in read_seeds(csv_path, column="situation")] == ["A friend, late again"]
    with pytest.raises(SeedFileError, match="no column 'context'"):
        read_seeds(csv_path)
    txt = tmp_path / "s.txt"
    txt.write_text("one seed\n\n two seed \n")
    assert [s.text for s in read_seeds(txt)] == ["one seed", "two seed"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"context": "ok"}\n{oops\n')
    with pytest.raises(SeedFileError, match=r"bad.jsonl:2: malformed JSON"):
        read_seeds(bad)
    with pytest.raises(SeedFileError, match="no such file"):
        read_seeds(tmp_path / "missing.jsonl")


def test_social_iqa_sample_reads_with_the_default_column() -> None:
    from conftest import SHARED

    path = SHARED / "data" / "social_iqa" / "sample.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    seeds = read_seeds(path)
    assert len(seeds) >= 100 and seeds[0].label.startswith("social_iqa/sample.jsonl#1: ")


# --- similarity -----------------------------------------------------------------------------------


def test_similarity_measure(library: Library) -> None:
    a = shingles("The quick brown fox jumps over the lazy dog")
    assert jaccard(a, a) == 1.0
    assert jaccard(a, shingles("Completely different words in this one here")) == 0.0
    assert 0 < jaccard(a, shingles("The quick brown fox sleeps under the lazy dog")) < DUPLICATE_THRESHOLD
    # The threshold does not flag the hand-written library against itself (a game's instances share the game's
    # text on purpose: they differ in seats, words and reserves).
    texts = [(s.id, shingles(scenario_text(s))) for s in library.scenarios.values() if s.game is None]
    worst = max(jaccard(x, y) for i, (_, x) in enumerate(texts) for _, y in texts[i + 1 :])
    assert worst < DUPLICATE_THRESHOLD


# --- parsing --------------------------------------------------------------------------------------


def test_parse_scenario_valid_and_invalid(seeds: list[Seed], library: Library) -> None:
    s = parse_scenario("```json\n" + json.dumps(REPLIES[0]) + "\n```", seeds[0], "train", library)
    assert s.id.startswith("gen-empty-tank-return-") and s.split == "train" and s.tags == ["generated"]
    assert s.source == seeds[0].label and len(s.goals) == 2 and s.constraints is not None
    one_goal = {**REPLIES[0], "goals": REPLIES[0]["goals"][:1]}
    cases = [
        (one_goal, "exactly two goals, got 1"),
        ({**REPLIES[0], "relationship": "nemesis"}, "unknown relationship"),
        ({**REPLIES[0], "goals": [REPLIES[0]["goals"][0]] * 2}, "goals are the same"),
        ({**REPLIES[0], "scenario": "short"}, "field 'scenario'"),
        ({**REPLIES[0], "constraints": [{"min_age": 90, "max_age": 120}] * 2}, "no library characters fit"),
    ]
    for reply, message in cases:
        with pytest.raises(InvalidGeneration, match=message):
            parse_scenario(json.dumps(reply), seeds[0], "train", library)
    with pytest.raises(InvalidGeneration, match="not a JSON object"):
        load_json_object("I'd rather not.")


def test_examples_match_the_reply_schema(library: Library) -> None:
    import jsonschema

    schema = scenario_schema()
    for reply in REPLIES:
        jsonschema.validate(reply, schema)
    train = sorted((s for s in library.scenarios.values() if s.split == "train"), key=lambda s: s.id)
    data = json.loads(example_json(train[0]))
    assert set(data) == set(schema["properties"])


def test_yaml_output_round_trips_awkward_text(tmp_path: Path) -> None:
    from sotopia_env.generation.core import write_yaml

    texts = [
        "- starts like a list item: then has a colon, a # hash and 'quotes' and \"double quotes\"" * 2,
        "Ünïcödé — dashes… and   several   spaces " * 3,
        "yes",
        "",
    ]
    path = write_yaml(tmp_path / "x.yaml", "scenarios", [{"texts": texts}], header="line one\nline: two")
    assert yaml.safe_load(path.read_text())["scenarios"][0]["texts"] == texts
    assert path.read_text().startswith("# line one\n# line: two\n")
    assert [p.name for p in tmp_path.iterdir()] == ["x.yaml"]


# --- scenario runs (scripted backend) ------------------------------------------------------------------


def scripted(fn: Callable[[ChatRequest], str | Exception]) -> ScriptedBackend:
    return ScriptedBackend(fn)


def test_generate_writes_valid_yaml_that_loads_and_pairs(tmp_path: Path, seeds: list[Seed], library: Library) -> None:
    backend = scripted(lambda r: reply_for(r.messages))
    out = tmp_path / "gen"
    stats = run_scenarios(backend, seeds, out, library, split="dev")
    assert stats.summary() == {
        "requested": 3,
        "generated": 3,
        "duplicates": 0,
        "failed": 0,
        "retries": 0,
        "reused_seeds": 0,
        "repeated_seeds": 0,
    }
    request = backend.requests[0]
    assert request.json_schema == scenario_schema()
    assert "Examples of good scenarios" in request.messages[1]["content"]
    assert len(list(out.glob("*.yaml"))) == 3
    lib = load_library([out])
    generated = [s for s in lib.scenarios.values() if "generated" in s.tags]
    assert len(generated) == 3 and {s.split for s in generated} == {"dev"}
    assert all(s.id not in library.scenarios for s in generated)
    assert {s.source for s in generated} == {seed.label for seed in seeds}
    setups = sample_setups(generated, lib, per_scenario=2, seed=1)
    assert len(setups) == 6
    for setup in setups:
        setup.check()
    records = [json.loads(line) for line in (out / USED_SEEDS_FILE).read_text().splitlines()]
    assert sorted(r["status"] for r in records) == ["generated"] * 3


def test_retry_then_success_and_failure_counted(tmp_path: Path, seeds: list[Seed], library: Library) -> None:
    calls: dict[str, int] = {}

    def fn(request: ChatRequest) -> str | Exception:
        situation = _situation(request.messages)
        calls[situation] = calls.get(situation, 0) + 1
        if situation == SITUATIONS[0]:  # invalid first, then fixed
            if calls[situation] == 1:
                return json.dumps({**REPLIES[0], "goals": ["only one goal here, nothing else at all"]})
            assert "That answer is invalid (expected exactly two goals, got 1)" in request.messages[-1]["content"]
            return reply_for(request.messages)
        if situation == SITUATIONS[1]:  # always a bad relationship
            return json.dumps({**REPLIES[1], "relationship": "rivals"})
        return RuntimeError("HTTP 500 from the provider")  # backend failure every time

    stats = run_scenarios(scripted(fn), seeds, tmp_path / "gen", library, settings=RunSettings(attempts=3))
    assert (stats.generated, stats.failed, stats.duplicates, stats.retries) == (1, 2, 0, 1 + 2 + 2)
    assert calls == {SITUATIONS[0]: 2, SITUATIONS[1]: 3, SITUATIONS[2]: 3}
    assert any("unknown relationship 'rivals'" in e for e in stats.errors)
    assert any("backend error: HTTP 500" in e for e in stats.errors)
    # Failed seeds are not recorded: a later run tries them again.
    again = run_scenarios(scripted(lambda r: reply_for(r.messages)), seeds, tmp_path / "gen", library)
    assert (again.reused_seeds, again.generated) == (1, 2)


def test_a_raising_backend_does_not_crash_the_run(tmp_path: Path, seeds: list[Seed], library: Library) -> None:
    class Broken:
        model = "broken"

        async def generate(self, requests: list[ChatRequest]) -> list[Any]:
            raise ConnectionError("socket closed")

    stats = run_scenarios(Broken(), seeds, tmp_path / "gen", library)
    assert stats.failed == 3 and "ConnectionError: socket closed" in stats.errors[0]


def test_near_copies_are_rejected(tmp_path: Path, seeds: list[Seed], library: Library) -> None:
    original = sorted(library.scenarios.values(), key=lambda s: s.id)[0]
    copy = json.loads(example_json(original))
    copy["scenario"] = copy["scenario"].replace("the", "that")  # a light rewording is still a copy
    stats = run_scenarios(scripted(lambda r: json.dumps(copy)), seeds[:1], tmp_path / "gen", library)
    assert (stats.generated, stats.duplicates) == (0, 1)
    assert not list((tmp_path / "gen").glob("*.yaml"))
    # A copy of another generated scenario (same run) is rejected too; only the first one is kept.
    stats = run_scenarios(scripted(lambda r: json.dumps(REPLIES[2])), seeds[1:], tmp_path / "gen2", library)
    assert (stats.generated, stats.duplicates) == (1, 1)


def test_reused_and_repeated_seeds_are_skipped(tmp_path: Path, seeds: list[Seed], library: Library) -> None:
    out = tmp_path / "gen"
    backend = scripted(lambda r: reply_for(r.messages))
    first = run_scenarios(backend, [*seeds[:2], Seed(seeds[0].text.upper(), "x", 9)], out, library)
    assert (first.generated, first.repeated_seeds, first.requested) == (2, 1, 2)
    lib = load_library([out])  # what the CLI passes: built-in plus the output dir
    second = run_scenarios(backend, seeds, out, lib)
    assert (second.reused_seeds, second.requested, second.generated) == (2, 1, 1)
    assert len(backend.requests) == 3
    third = run_scenarios(backend, seeds, out, load_library([out]))
    assert (third.reused_seeds, third.requested, third.generated) == (3, 0, 0)
    assert len(list(out.glob("*.yaml"))) == 3


def test_test_split_is_refused(tmp_path: Path, seeds: list[Seed], library: Library) -> None:
    with pytest.raises(ValueError, match="not 'test'"):
        run_scenarios(scripted(lambda r: reply_for(r.messages)), seeds, tmp_path, library, split="test")


def test_few_shot_examples_are_train_split_and_seeded(tmp_path: Path, seeds: list[Seed], library: Library) -> None:
    def prompts(seed: int, out: str) -> list[str]:
        backend = scripted(lambda r: reply_for(r.messages))
        run_scenarios(backend, seeds, tmp_path / out, library, settings=RunSettings(seed=seed))
        return sorted(r.messages[1]["content"] for r in backend.requests)

    first = prompts(1, "a")
    assert first == prompts(1, "b") and first != prompts(2, "c")
    codenames = {c for p in first for c in re.findall(r'"codename": "([^"]+)"', p)}
    by_codename = {s.codename: s for s in library.scenarios.values()}
    assert codenames and all(by_codename[c].split == "train" for c in codenames)


# --- characters --------------------------------------------------------------------------------------


def make_character(i: int, attrs: dict[str, Any] | None = None) -> dict[str, Any]:
    names = [("Ingrid", "Vasquez-Holm"), ("Tobias", "Achterberg"), ("Priya", "Lindqvist"), ("Mateo", "Oyelaran")]
    first, last = names[i % len(names)]
    lives = ["restores church organs", "runs a night bakery", "pilots river ferries", "repairs violins"]
    secrets = ["forged a reference", "owes a loan shark", "failed the bar twice", "has a second family"]
    return {
        "first_name": first,
        "last_name": last,
        "age": 40,
        "gender": "woman",
        "pronouns": "she/her",
        "occupation": "organ restorer",
        "public_info": f"{first} {lives[i % 4]} in a small harbour town and sings in a choir on Thursdays.",
        "big_five": dict.fromkeys(
            ["openness", "conscientiousness", "extraversion", "agreeableness", "neuroticism"], "moderate"
        ),
        "moral_values": ["care"],
        "schwartz_values": ["benevolence"],
        "decision_making_style": "analytical",
        "secret": f"{first} {secrets[i % 4]} years ago.",
        **(attrs or {}),
    }


def test_character_attributes_vary_and_steer_the_schema() -> None:
    import random

    rng = random.Random(0)
    drawn = [Attributes.sample(rng) for _ in range(40)]
    assert len({a.age_band for a in drawn}) >= 4 and len({a.occupation_field for a in drawn}) >= 10
    assert len({a.gender for a in drawn}) >= 2
    schema = character_schema(drawn[0])
    low, high = drawn[0].age_band
    assert schema["properties"]["age"] == {"type": "integer", "minimum": low, "maximum": high}
    assert schema["properties"]["pronouns"]["enum"] == [drawn[0].pronouns]


def test_generate_characters(tmp_path: Path, library: Library) -> None:
    replies = iter(
        [
            json.dumps(make_character(0)),
            json.dumps(make_character(1, {"age": 300})),  # invalid, then retried
            json.dumps(make_character(1)),
            json.dumps(make_character(0)),  # same name as the first: duplicate
            json.dumps(make_character(2, {"first_name": "Maya", "last_name": "Okafor"})),  # a library name
        ]
    )
    backend = ScriptedBackend(lambda r: next(replies))
    settings = RunSettings(attempts=2, concurrency=1)
    stats = asyncio.run(generate_characters(backend, 4, tmp_path, library, settings=settings))
    assert (stats.generated, stats.duplicates, stats.failed, stats.retries) == (2, 2, 0, 1)
    assert "field 'age'" in backend.requests[2].messages[-1]["content"]
    lib = load_library([tmp_path])
    new = sorted(c for c in lib.characters if c not in library.characters)
    assert new == ["gen-ingrid-vasquez-holm", "gen-tobias-achterberg"]
    stranger = next(s for s in lib.scenarios.values() if s.relationship.name == "stranger" and not s.constraints)
    seated = {c.id for setup in eligible_setups(stranger, lib) for c in setup.characters}
    assert set(new) <= seated


# --- end to end: litellm to the loopback server, and the CLI --------------------------------------


runner = CliRunner()


def invoke(*args: Any):
    return runner.invoke(app, [str(a) for a in args])


def loopback_scenarios(body: dict[str, Any]) -> Reply:
    return Reply(reply_for(body["messages"]))


def test_cli_generate_scenarios_over_loopback(tmp_path: Path) -> None:
    seeds_path = write_seeds(tmp_path / "seeds.jsonl", [*SITUATIONS, SITUATIONS[0].lower()])
    out = tmp_path / "gen"
    with LoopbackOpenAI(loopback_scenarios) as srv:
        args = ["--from", seeds_path, "--model", "openai/test-model", "--api-base", srv.base_url, "--out", out]
        result = invoke("scenarios", "generate", *args, "--n", 10, "--seed", 3)
        assert result.exit_code == 0, result.output
        assert "generated 3, rejected as duplicates 0, failed 0, skipped as reused seeds 0" in result.output
        assert "repeated seeds dropped 1" in result.output
        body = srv.requests[0]
        assert body["response_format"]["type"] == "json_schema"
        assert body["response_format"]["json_schema"]["schema"] == scenario_schema()
        again = invoke("scenarios", "generate", *args, "--n", 10)
        assert again.exit_code == 0, again.output
        assert "generated 0, rejected as duplicates 0, failed 0, skipped as reused seeds 3" in again.output
        assert len(srv.requests) == 3
    assert invoke("scenarios", "validate", out).exit_code == 0
    listed = invoke("scenarios", "list", "--scenarios-dir", out, "--tag", "generated")
    assert listed.exit_code == 0 and "3 scenarios" in listed.output and "gen-" in listed.output
    ids = [p.stem for p in out.glob("*.yaml")]
    shown = invoke("scenarios", "show", ids[0], "--scenarios-dir", out)
    assert shown.exit_code == 0 and "goal 2:" in shown.output
    entry = yaml.safe_load((out / f"{ids[0]}.yaml").read_text())["scenarios"][0]
    assert entry["split"] == "train" and entry["source"].startswith(f"{tmp_path.name}/seeds.jsonl#")


def test_cli_invalid_and_duplicate_replies_over_loopback(tmp_path: Path, library: Library) -> None:
    seeds_path = write_seeds(tmp_path / "seeds.jsonl")
    copy = example_json(sorted(library.scenarios.values(), key=lambda s: s.id)[0])

    def responder(body: dict[str, Any]) -> Reply:
        situation = _situation(body["messages"])
        if situation == SITUATIONS[0]:
            return Reply(json.dumps({**REPLIES[0], "goals": REPLIES[0]["goals"][:1]}))  # one goal: invalid
        if situation == SITUATIONS[1]:
            return Reply(copy)  # a library scenario: duplicate
        return Reply(reply_for(body["messages"]))

    out = tmp_path / "gen"
    with LoopbackOpenAI(responder) as srv:
        result = invoke(
            "scenarios",
            "generate",
            "--from",
            seeds_path,
            "--model",
            "openai/test-model",
            "--api-base",
            srv.base_url,
            "--out",
            out,
            "--n",
            3,
            "--attempts",
            2,
        )
        assert len(srv.requests) == 2 + 1 + 1
    assert result.exit_code == 0, result.output
    assert "generated 1, rejected as duplicates 1, failed 1" in result.output
    assert "retries 1" in result.output and "expected exactly two goals, got 1" in result.output
    assert len(list(out.glob("*.yaml"))) == 1


def test_cli_generate_refuses_test_split_and_bad_seed_files(tmp_path: Path) -> None:
    seeds_path = write_seeds(tmp_path / "seeds.jsonl")
    result = invoke("scenarios", "generate", "--from", seeds_path, "--out", tmp_path / "o", "--split", "test")
    assert result.exit_code == 1 and "never go into the test split" in result.output
    result = invoke("scenarios", "generate", "--from", seeds_path, "--out", tmp_path / "o", "--column", "text")
    assert result.exit_code == 1 and "no field 'text'" in result.output
    assert not (tmp_path / "o").exists()


def test_cli_generate_characters_over_loopback(tmp_path: Path, library: Library) -> None:
    count = iter(range(100))

    def responder(body: dict[str, Any]) -> Reply:
        return Reply(json.dumps(make_character(next(count))))

    out = tmp_path / "chars"
    with LoopbackOpenAI(responder) as srv:
        result = invoke(
            "characters",
            "generate",
            "--model",
            "openai/test-model",
            "--api-base",
            srv.base_url,
            "--out",
            out,
            "--n",
            3,
            "--seed",
            5,
            "--concurrency",
            2,
        )
        schemas = [b["response_format"]["json_schema"]["schema"] for b in srv.requests]
    assert result.exit_code == 0, result.output
    assert "characters: generated 3, rejected as duplicates 0, failed 0" in result.output
    assert all(s["properties"]["age"]["type"] == "integer" for s in schemas)
    assert invoke("scenarios", "validate", out).exit_code == 0
    listed = invoke("characters", "list", "--scenarios-dir", out)
    assert listed.exit_code == 0 and f"{len(library.characters) + 3} characters" in listed.output
    assert "gen-ingrid-vasquez-holm" in load_library([out]).characters


# --- the embedded model ----------------------------------------------------------------------------------


@pytest.mark.model
def test_embedded_model_on_five_social_iqa_seeds(tmp_path: Path, library: Library) -> None:
    """Every seed ends as a valid YAML file, a rejected duplicate, or a counted failure."""
    from conftest import SHARED

    from sotopia_env.backends.resolve import resolve_backend

    path = SHARED / "data" / "social_iqa" / "sample.jsonl"
    seeds = read_seeds(path)[:5] if path.is_file() else [Seed(s, "inline", i) for i, s in enumerate(SITUATIONS)]
    backend = resolve_backend("smollm2-135m")
    settings = RunSettings(attempts=2, concurrency=5, max_new_tokens=400, seed=0)
    stats = asyncio.run(generate_scenarios(backend, seeds, 5, tmp_path, library, examples=1, settings=settings))
    print(f"embedded model on {len(seeds)} seeds: {stats.summary()} errors={stats.errors}")
    assert stats.generated + stats.duplicates + stats.failed == stats.requested == len(seeds)
    files = list(tmp_path.glob("*.yaml"))
    assert len(files) == stats.generated
    lib = load_library([tmp_path])
    for f in files:
        (scenario,) = [s for s in lib.scenarios.values() if s.id == f.stem]
        assert len(scenario.goals) == 2 and scenario.split == "train" and eligible_setups(scenario, lib)
