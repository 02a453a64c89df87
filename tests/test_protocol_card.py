"""Protocol cards (``episodes.protocol``): what each episode records, and cards that differ whenever a defining
field does (scenario text, judge prompt or rules, dimensions, seeds, turns, action order, version)."""

from __future__ import annotations

import asyncio
import json
from importlib.metadata import version

import pytest
from episode_fixtures import make_episode

import sotopia_env.evaluators.llm as llm_evaluator
from sotopia_env.agents.scripted import ScriptedAgent
from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.env import EnvConfig
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.protocol import ProtocolCard, cards_of, judge_sha256, judged_by
from sotopia_env.episodes.runner import Job, play, run_batch
from sotopia_env.episodes.sqlite_store import SQLiteStore
from sotopia_env.evaluators import GOAL_ONLY, LLMEvaluator, RuleBasedEvaluator, VerifiableJudge


def episode(setup: EpisodeSetup, config: EnvConfig | None = None, seed: int = 0, judge=None) -> EpisodeLog:
    agents = [ScriptedAgent(["Hi"]), ScriptedAgent(["Hello"])]
    return asyncio.run(play(setup, agents, judge or RuleBasedEvaluator(), config or EnvConfig(max_turns=2), seed=seed))


def card(*logs: EpisodeLog) -> ProtocolCard:
    (only,) = cards_of(logs)
    return only


def test_a_played_episode_records_its_part_of_the_card(two_friends) -> None:
    log = episode(two_friends, EnvConfig(max_turns=3, action_order="random"), seed=7)
    stored = json.loads(log.model_dump_json())["protocol"]
    assert stored["version"] == version("sotopia-env")
    assert (stored["max_turns"], stored["stale_turns"], stored["max_agent_errors"]) == (3, 4, 1)
    assert stored["judge"] == "rule-based" and len(stored["judge_sha256"]) == 64
    assert stored["dimensions"][-1] == "goal" and len(stored["dimensions"]) == 7
    c = card(log)
    assert c.scenario_ids == [two_friends.scenario.id] and c.setups == 1 and c.seeds == [7]
    assert (c.max_turns, c.action_order, c.judge, c.version) == (3, "random", "rule-based", version("sotopia-env"))
    assert c == ProtocolCard.model_validate_json(c.model_dump_json()) and len(c.id) == 12


def test_episodes_without_a_record_load_and_store_as_before() -> None:
    old = make_episode(0)
    data = json.loads(old.model_dump_json())
    assert "protocol" not in data  # two-seat episodes store the keys they always did
    back = EpisodeLog.model_validate(data)
    assert back.protocol is None
    c = card(back)
    assert c.version is None and c.max_turns is None and c.judge == "llm:gpt-4o" and c.judge_sha256 is None
    assert c.dimensions is not None and "goal" in c.dimensions  # from the ratings themselves


def test_same_protocol_same_card_and_every_defining_field_changes_it(two_friends) -> None:
    base = card(episode(two_friends))
    assert card(episode(two_friends)) == base  # deterministic: a rerun has the same card

    edited = two_friends.model_copy(
        update={"scenario": two_friends.scenario.model_copy(update={"scenario": "An edited scenario text."})}
    )
    other_text = card(episode(edited))
    assert other_text.scenario_ids == base.scenario_ids and other_text.scenarios_sha256 != base.scenarios_sha256
    swapped = two_friends.model_copy(update={"characters": two_friends.characters[::-1]})
    changes = {
        "scenario text": other_text,
        "characters": card(episode(swapped)),
        "seed": card(episode(two_friends, seed=1)),
        "max turns": card(episode(two_friends, EnvConfig(max_turns=3))),
        "stale turns": card(episode(two_friends, EnvConfig(max_turns=2, stale_turns=2))),
        "action order": card(episode(two_friends, EnvConfig(max_turns=2, action_order="simultaneous"))),
        "dimensions": card(episode(two_friends, judge=RuleBasedEvaluator(GOAL_ONLY))),
        "version": card(episode(two_friends).model_copy(update={"protocol": None})),
    }
    ids = {name: c.id for name, c in changes.items()}
    assert base.id not in ids.values() and len(set(ids.values())) == len(ids), ids


def test_the_judge_hash_covers_its_prompt_template_and_rules(two_friends, monkeypatch) -> None:
    def judge(**kwargs) -> LLMEvaluator:
        return LLMEvaluator(ScriptedBackend([], model="judge-model"), **kwargs)

    base = judge_sha256(judge())
    assert judge_sha256(judge()) == base  # the template, not the instance
    assert judge_sha256(judge(dimensions=GOAL_ONLY)) != base  # the dimensions are in the prompt
    assert judge_sha256(judge(max_reasoning=100)) != base  # and the reply schema
    monkeypatch.setattr(llm_evaluator, "INSTRUCTIONS", llm_evaluator.INSTRUCTIONS + " Be strict.")
    edited = judge_sha256(judge())
    assert edited != base  # an edited prompt is another card
    rules = {judge_sha256(RuleBasedEvaluator()), judge_sha256(VerifiableJudge())}
    assert len(rules | {base, edited}) == 4

    log = episode(two_friends)
    rejudged = log.model_copy(update={"protocol": judged_by(log.protocol, judge())})
    assert rejudged.protocol is not None and rejudged.protocol.judge == "llm:judge-model"
    assert card(rejudged).id != card(log).id and card(rejudged).judge_sha256 == edited


@pytest.mark.parametrize("crash_seat", [0, 1])
def test_a_failed_episode_stays_on_its_batch_card(tmp_path, two_friends, crash_seat: int) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 'e.db'}")
    specs = ["custom_agents:Quiet", "custom_agents:Quiet"]
    broken = list(specs)
    broken[crash_seat] = "custom_agents:NoAct"  # not an agent: the episode fails before it plays
    jobs = [Job(two_friends, specs), Job(two_friends, broken)]
    summary = asyncio.run(
        run_batch(jobs, store, "t", RuleBasedEvaluator(), config=EnvConfig(max_turns=2), progress=False)
    )
    assert (summary.rated, summary.failed) == (1, 1)
    (only,) = cards_of(store.iter("t"))  # one batch, one card: the failed episode is on it
    assert only.max_turns == 2 and only.judge == "rule-based" and only.seeds == [0]
