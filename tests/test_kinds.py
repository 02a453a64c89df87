"""The registry of verifiable kinds, extended from outside: a toy kind in a temporary folder (one module plus one
scenario YAML) plays against its own rule partner and is judged exactly, through ``run_episode`` and the CLI, as
a user would, registered from Python and by an entry point."""

from __future__ import annotations

import asyncio
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sotopia_env.kinds import KindError, register_kind, rule_set, rule_sets, unregister_kind

EXPERT = "sotopia_env.training.experts:VerifiableExpert"

GUESS_KIND = '''
"""A toy kind: the learner finds the partner's hidden number; the partner says higher or lower."""

import re
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from sotopia_env.kinds import Kind, LearnerView, Move, Outcome, Talk, VerifiableFacts, register_kind
from sotopia_env.kinds.base import spoken, ten


class GuessFacts(VerifiableFacts):
    kind: Literal["guess"] = "guess"
    high: int = Field(ge=2)  # the number is one of 1..high (the learner's goal says so)
    secret: int = Field(ge=1)  # hidden
    max_rounds: int = Field(default=6, ge=1)

    @model_validator(mode="after")
    def _in_range(self):
        if self.secret > self.high:
            raise ValueError(f"secret {self.secret} must be at most high {self.high}")
        return self


class Guess(Kind):
    name = "guess"
    facts_model = GuessFacts
    LINES: ClassVar[dict[str, tuple[str, ...]]] = {
        "open": ("Guess my number, from 1 to {high}.",),
        "higher": ("Higher than {value}.",),
        "lower": ("Lower than {value}.",),
        "ask": ("Say one number, please.",),
        "accept": ("{value}! You got it.",),
        "leave": ("Out of guesses, sorry.",),
        "goodbye": ("Well played!",),
    }

    def respond(self, facts, talk: Talk, action) -> Move:
        numbers = [int(n) for n in re.findall(r"\\d+", spoken(action) or "")]
        if numbers == [facts.secret]:
            talk.deal = facts.secret
            return Move("accept", facts.secret, talk.rounds)
        talk.rounds += 1
        if talk.rounds >= facts.max_rounds:
            return Move("leave", None, talk.rounds)
        if len(numbers) != 1:
            return Move("ask", None, talk.rounds)
        return Move("higher" if numbers[0] < facts.secret else "lower", numbers[0], talk.rounds)

    def outcome(self, facts, talk: Talk) -> Outcome:
        if talk.deal is None:
            return Outcome(False, False, 0, 0, f"not found after {talk.rounds} wrong guesses")
        goal = ten(1 - talk.rounds / facts.max_rounds)
        return Outcome(True, True, goal, 10, f"found {facts.secret} after {talk.rounds} wrong guesses")

    def fields(self, facts, move: Move) -> dict[str, str]:
        return {"high": str(facts.high), "value": str(move.value)}

    def agreed(self, view: LearnerView) -> bool:
        return "got it" in view.heard[-1]

    def propose(self, view: LearnerView) -> str:
        low, high = 1, int(re.search(r"1 to (\\d+)", view.goal).group(1))
        for line in view.heard:
            if hint := re.match(r"(Higher|Lower) than (\\d+)", line):
                n = int(hint.group(2))
                low, high = (n + 1, high) if hint.group(1) == "Higher" else (low, n - 1)
        return f"Is it {(low + high) // 2}?"

    def partial_credit(self, facts, speeches, talk: Talk) -> float:
        return float(any(move.act in ("higher", "lower") for move in talk.moves))  # one valid guess


KIND = register_kind(Guess())
'''

GUESS_YAML = """
scenarios:
  - id: guess-number
    codename: guess_number
    scenario: Two friends pass the time on a long train ride with a guessing game; one thinks of a number.
    goals:
      - "Find the number your friend is thinking of, from 1 to 20, in as few guesses as you can."
      - "You think of the number 13 and answer each guess with higher or lower."
    relationship: friend
    tags: [verifiable, guess]
    split: train
    verifiable: {kind: guess, high: 20, secret: 13}
"""


@pytest.fixture
def guess_folder(tmp_path: Path) -> Path:
    """The user's folder: the kind's module and a scenario that names it."""
    (tmp_path / "guess_kind.py").write_text(GUESS_KIND)
    (tmp_path / "guess.yaml").write_text(GUESS_YAML)
    return tmp_path


@pytest.fixture
def guess_kind(guess_folder: Path, monkeypatch: pytest.MonkeyPatch):
    """The toy kind, registered from Python by importing its module; forgotten afterwards."""
    monkeypatch.syspath_prepend(str(guess_folder))
    module = importlib.import_module("guess_kind")
    yield module
    unregister_kind("guess")
    sys.modules.pop("guess_kind", None)


def _play(folder: Path, learner, store_url: str | None = None, max_turns: int = 20):
    from sotopia_env.agents.loading import load_agent
    from sotopia_env.env import EnvConfig
    from sotopia_env.episodes.runner import Job, run_episode
    from sotopia_env.episodes.store import open_store
    from sotopia_env.episodes.store_writer import StoreWriter
    from sotopia_env.evaluators import make_evaluator
    from sotopia_env.library import load_library
    from sotopia_env.sampler import sample_setup

    setup = sample_setup(load_library([folder / "guess.yaml"]), seed=0, scenario="guess-number")
    writer = StoreWriter(open_store(store_url), "toy") if store_url else None
    agents = [learner if not isinstance(learner, str) else load_agent(learner), load_agent("rule-partner")]
    job = Job(setup, [learner if isinstance(learner, str) else "learner", "rule-partner"])
    config = EnvConfig(max_turns=max_turns)
    return asyncio.run(run_episode(job, make_evaluator("verifiable", "goal"), writer, agents=agents, config=config))


def _spoken(log, seat: int) -> list[str]:
    name = log.setup.agent_names[seat]
    return [t.action.argument for t in log.turns if t.agent == name]


def test_a_kind_of_ones_own_plays_against_its_partner_and_is_judged_exactly(guess_kind, guess_folder, tmp_path):
    from sotopia_env.agents.scripted import ScriptedAgent
    from sotopia_env.episodes.store import open_store
    from sotopia_env.evaluators import VerifiableJudge
    from sotopia_env.rewards import episode_reward

    assert rule_set("guess") is guess_kind.KIND
    store = f"sqlite:///{tmp_path / 'e.db'}"
    log = _play(guess_folder, EXPERT, store)  # the generic expert plays the kind's expert policy: a binary search
    assert _spoken(log, 0) == ["Is it 10?", "Is it 15?", "Is it 12?", "Is it 13?", "Thank you, that's settled then."]
    assert _spoken(log, 1) == [
        "Higher than 10.",
        "Lower than 15.",
        "Higher than 12.",
        "13! You got it.",
        "Well played!",
    ]
    learner = log.rating.ratings[log.setup.agent_names[0]]
    assert (learner.scores["goal"].score, learner.success) == (5, True)  # 3 wrong guesses of 6: 10 * (1 - 3/6)
    assert learner.scores["goal"].reasoning == "found 13 after 3 wrong guesses"
    assert episode_reward(log, 0, "goal", dense_reward=2.0).value == 5 + 2.0  # a success takes the whole dense part

    stored = next(iter(open_store(store).iter()))  # stored and read back: its facts validate as the toy kind's
    assert type(stored.setup.scenario.verifiable) is guess_kind.GuessFacts and stored.rating == log.rating
    assert "guess_kind" in VerifiableJudge().rule_modules  # the protocol card hashes the kind's rules too

    wrong = _play(guess_folder, ScriptedAgent(["One or two?", "Is it 1?", "Is it 2?", "3?", "4?", "5?"]))
    rating = wrong.rating.ratings[wrong.setup.agent_names[0]]
    assert (rating.scores["goal"].score, rating.success) == (0, False)
    assert _spoken(wrong, 1)[:3] == ["Say one number, please.", "Higher than 1.", "Higher than 2."]
    assert _spoken(wrong, 1)[-1] == "Out of guesses, sorry." and wrong.termination_reason == "everyone_left"
    assert episode_reward(wrong, 0, "goal", dense_reward=2.0).value == 0 + 2.0 * 1  # partial credit: a valid guess


def test_a_kind_of_ones_own_errors_are_one_line_and_names_are_guarded(guess_kind, guess_folder):
    from sotopia_env.kinds.bargaining import KIND as BARGAINING
    from sotopia_env.library import LibraryError, load_library

    (guess_folder / "bad.yaml").write_text(GUESS_YAML.replace("secret: 13", "secret: 30").replace("guess-number", "g2"))
    with pytest.raises(
        LibraryError, match=r"bad.yaml: scenarios entry 0 \(id 'g2'\), field 'verifiable.guess': secret 30"
    ):
        load_library([guess_folder / "bad.yaml"])
    with pytest.raises(KindError, match="'bargaining' is taken"):
        register_kind(type("Bargaining2", (type(BARGAINING),), {})())
    assert register_kind(BARGAINING) is BARGAINING  # the same kind again is no conflict
    with pytest.raises(KindError, match="'kind' defaulting to 'other'"):
        register_kind(type("Other", (type(guess_kind.KIND),), {"name": "other"})())
    with pytest.raises(KindError, match="unknown verifiable kind 'nope'"):
        rule_set("nope", "verifiable")


def test_the_cli_finds_a_kind_by_its_entry_point(guess_folder):
    """An installed package's entry point (here a dist-info in the folder on PYTHONPATH): ``sotopia-env run``
    plays and judges the toy kind with no Python of the user's besides the kind's module."""
    dist = guess_folder / "guess_kind-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: guess-kind\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[sotopia_env.kinds]\nguess = guess_kind:KIND\n")
    script = str(Path(sys.executable).parent / "sotopia-env")
    env = os.environ | {"PYTHONPATH": str(guess_folder)}
    args = ["run", "--scenarios-dir", str(guess_folder / "guess.yaml"), "--scenario", "guess-number"]
    args += ["--agent1", EXPERT, "--agent2", "rule-partner", "--evaluator", "verifiable", "--no-store"]
    result = subprocess.run(
        [str(script), *args], cwd=guess_folder, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "13! You got it." in result.stdout
    assert any(line.split()[1:2] == ["success"] and "True" in line for line in result.stdout.splitlines())


def test_a_model_plays_a_kind_of_ones_own(guess_kind, guess_folder, tiny_model_dir):
    """A real (tiny, random) model in seat 1: whatever it says, the partner answers by the rules and the judge
    rates it exactly, never leaving it unrated."""
    from sotopia_env.agents.llm import LLMAgent
    from sotopia_env.backends.base import GenerationSettings
    from sotopia_env.backends.resolve import resolve_backend

    agent = LLMAgent(resolve_backend(str(tiny_model_dir)), settings=GenerationSettings(max_new_tokens=24, seed=0))
    log = _play(guess_folder, agent, max_turns=6)
    assert log.rating.rated, log.rating.error
    goal = log.rating.ratings[log.setup.agent_names[0]].scores["goal"].score
    hints = ("Higher than", "Lower than", "Say one number", "Out of guesses", "You got it", "Well played")
    assert 0 <= goal <= 10 and all(line.startswith(hints) or "You got it" in line for line in _spoken(log, 1))


def test_a_broken_entry_point_is_a_one_line_error_on_every_lookup(monkeypatch):
    from importlib.metadata import EntryPoint

    import sotopia_env.registry
    from sotopia_env.kinds import registry

    broken = EntryPoint(name="broken", value="no_such_module:KIND", group=registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(sotopia_env.registry, "entry_points", lambda group: [broken])  # every registry loads so
    where = r"entry point 'broken' \(no_such_module:KIND, group sotopia_env.kinds\) failed to load: ModuleNotFound"
    with registry.KINDS.scoped(fresh=True):  # a fresh process's registry, restored afterwards
        for _ in range(2):  # not only the first lookup: the registry never goes on without it
            with pytest.raises(KindError, match=where):
                rule_set("bargaining")


def test_games_have_a_registry_of_their_own(monkeypatch):
    """Games register in ``sotopia_env.games.registry`` (a call, or an entry point in ``sotopia_env.games``), which
    ``rule_set`` consults; ``register_kind`` passes a game's rule set on; a kind and a game may not share a name."""
    import types
    from importlib.metadata import EntryPoint

    import sotopia_env.registry
    from sotopia_env.games import registry as games
    from sotopia_env.games.werewolf import RULES as WEREWOLF

    with games.GAMES.scoped():  # restored afterwards
        assert rule_set("werewolf") is WEREWOLF is games.game_rules("werewolf") is rule_set("werewolf", "game")
        assert [r.name for r in games.game_rule_sets()] == ["negotiation", "undercover", "werewolf"]
        with pytest.raises(KindError, match="unknown verifiable kind 'werewolf'"):
            rule_set("werewolf", "verifiable")

        plugin = types.ModuleType("toy_game")
        plugin.RULES = type("ToyWolf", (type(WEREWOLF),), {"name": "toy-wolf"})()
        monkeypatch.setitem(sys.modules, "toy_game", plugin)
        point = EntryPoint(name="toy-wolf", value="toy_game:RULES", group=games.ENTRY_POINT_GROUP)
        points = {games.ENTRY_POINT_GROUP: [point]}
        monkeypatch.setattr(sotopia_env.registry, "entry_points", lambda group: points.get(group, []))
        games.GAMES._loaded = False  # as in a fresh process (restored by the scope)
        assert rule_set("toy-wolf") is plugin.RULES and "toy-wolf" in [r.name for r in rule_sets("game")]

        passed_on = register_kind(type("ToyWolf2", (type(WEREWOLF),), {"name": "toy-wolf-2"})())
        assert games.game_rules("toy-wolf-2") is passed_on
        games.register_game(type("Clash", (type(WEREWOLF),), {"name": "bargaining"})())
        with pytest.raises(KindError, match="'bargaining' is both a verifiable kind and a game's rule set"):
            rule_set("bargaining")
        assert rule_set("bargaining", "verifiable").name == "bargaining"
