"""Persuasion that can be learnt (issue #44, part 4, rebuilt for issue #57): the dense reward pays for offering the
right remedy and for winning, never for stuffing; the BC demonstrator listens before it offers; and the curriculum of
generated train instances is disjoint from the held-out remedies and read by the demonstrator's cue table. The
rules themselves, the baselines and the exploits: ``tests/test_kind_persuasion.py``."""

from __future__ import annotations

import asyncio

import pytest
from test_training_tiny import one_torch_thread, tiny_model_spec  # noqa: F401

from sotopia_env.agents.rule_partners import RulePartner
from sotopia_env.agents.scripted import ScriptedAgent
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import VerifiableJudge
from sotopia_env.generation.persuasion_curriculum import (
    CURRICULUM_TAG,
    EVERYDAY,
    FAVOURS,
    check_curriculum,
    curriculum_scenarios,
    favour_scenario,
    write_curriculum,
)
from sotopia_env.kinds.persuasion import KIND, REMEDIED_CREDIT, TURN_COST, PersuasionFacts, remedies_in
from sotopia_env.rewards import episode_reward, partial_credit
from sotopia_env.sampler import sample_setup, sample_setups
from sotopia_env.training.experts import VerifiableExpert


def _pinned(library, sid: str, concern: str):
    setup = sample_setup(library, seed=0, scenario=sid)
    facts = setup.scenario.verifiable.model_copy(update={"concern": concern, "first_cue": 0})
    return setup.model_copy(update={"scenario": setup.scenario.model_copy(update={"verifiable": facts})})


def _play(setup, learner, max_turns: int = 20, seed: int = 0):
    agents = [learner if not isinstance(learner, list) else ScriptedAgent(learner), RulePartner()]
    return asyncio.run(play(setup, agents, VerifiableJudge(), EnvConfig(max_turns=max_turns), seed=seed))


def _said(log, seat: int) -> list[str]:
    return [t.action.argument for t in log.turns if t.agent == log.setup.agent_names[seat]]


def _won(log) -> bool:
    return bool(log.rating.ratings[log.setup.agent_names[0]].success)


def test_the_dense_reward_pays_for_the_right_remedy_then_for_winning_and_success_dominates(library):
    setup = _pinned(library, "verifiable-persuasion-car-ride", "petrol cost")
    cases = [
        (["Hello there, lovely day."], 0.0, False),  # nothing
        (["I can show you my student card from the class. Could you?"], 0.0, False),  # the wrong remedy
        (["I can pay for the petrol."], REMEDIED_CREDIT, False),  # the right remedy, never asked
        (["I can pay for the petrol. Could you?"], 1.0, True),  # offered and asked: a win
        (["I can pay for the petrol or get dropped at the tram stop. Could you?"], 0.0, False),  # stuffing
    ]
    for lines, credit, won in cases:
        log = _play(setup, lines, max_turns=2 * len(lines))
        assert (partial_credit(log, 0), _won(log)) == (credit, won), lines
        reward = episode_reward(log, 0, "goal", dense_reward=2.0)
        assert reward.value == (10.0 + 2.0 if won else 2.0 * credit), lines
    # a failure's dense part (at most 2 x REMEDIED_CREDIT) stays below the least win (goal floored at 1, plus 2)
    assert 2.0 * REMEDIED_CREDIT < 1 + 2.0 and 10 - 3 * TURN_COST >= 1


def test_the_expert_listens_then_offers_one_remedy_and_asks(library):
    """The BC demonstrator on every instance, 5 draws each: it asks first, every offer names one remedy, and it wins
    every episode (it asks again while a shared cue line leaves two remedies tied)."""
    for s in sorted(library.select("verifiable:persuasion"), key=lambda s: s.id):
        setup = sample_setup(library, seed=0, scenario=s.id)
        for seed in range(5):
            log = _play(setup, VerifiableExpert(), max_turns=10, seed=seed)
            mine = _said(log, 0)
            facts: PersuasionFacts = log.setup.scenario.verifiable
            assert _won(log) and remedies_in(mine[0], facts) == [], (s.id, mine)
            assert all(len(remedies_in(line, facts)) <= 1 for line in mine), (s.id, mine)


def test_the_curriculum_is_disjoint_from_the_held_out_remedies_and_won_by_listening(library, tmp_path):
    from sotopia_env.library import load_library

    scenarios = curriculum_scenarios()
    assert len(scenarios) == len(FAVOURS) >= 40 and len({s.id for s in scenarios}) == len(scenarios)
    held_out = {
        k.lower()
        for s in library.scenarios.values()
        if isinstance(s.verifiable, PersuasionFacts) and s.split in ("dev", "test")
        for c in s.verifiable.concerns
        for k in c.remedy
    }
    for s in scenarios:
        assert s.split == "train" and CURRICULUM_TAG in s.tags and len(s.verifiable.concerns) == 3
        for key in (k for c in s.verifiable.concerns for k in c.remedy):
            assert not any(key.startswith(h) or h.startswith(key) for h in held_out), (s.id, key)
    assert [s.id for s in curriculum_scenarios(5, seed=3)] == [s.id for s in curriculum_scenarios(5, seed=3)]
    assert [s.id for s in curriculum_scenarios(5, seed=3)] != [s.id for s in curriculum_scenarios(5, seed=4)]

    write_curriculum(tmp_path, seed=0)
    extended = load_library([tmp_path])
    assert len(extended.select("verifiable:persuasion:train")) == 8 + len(FAVOURS)
    assert len(extended.select("verifiable:persuasion:test")) == 12
    setups = sample_setups(sorted(extended.select(CURRICULUM_TAG), key=lambda s: s.id), extended, 1, seed=0)
    for setup in setups:
        assert _won(_play(setup, VerifiableExpert(), max_turns=10)), setup.scenario.id

    clash = EVERYDAY[0].__class__(**{**EVERYDAY[0].__dict__, "key": "petrol", "item": "buy them petrol"})
    with pytest.raises(ValueError, match="'petrol' overlaps 'petrol' of verifiable-persuasion-car-ride"):
        check_curriculum([favour_scenario(FAVOURS[0], [clash, *EVERYDAY[1:3]])], library)
    assert KIND.name == "persuasion"


def test_curriculum_rollouts_with_the_dense_reward_on_a_real_model(tmp_path, tmp_path_factory):
    """Episode GRPO's rollouts (``make_rollout`` with ``scenarios_dir``, ``play_many``) on curriculum starts, a tiny
    random model in seat 1: every episode rated, its reward the win's 10 + dense part or the dense part times the
    kind's partial credit of its transcript."""
    from sotopia_env.backends.local import LocalBackend
    from sotopia_env.training.episode_grpo import EpisodeGRPOConfig, make_rollout
    from sotopia_env.training.episode_rollouts import play_many

    write_curriculum(tmp_path, count=3, seed=0)
    spec = tiny_model_spec(tmp_path_factory)
    config = EpisodeGRPOConfig(
        base_model=spec, scenarios=CURRICULUM_TAG, scenarios_dir=[str(tmp_path)], max_turns=4,
        max_completion_length=12, dense_reward=2.0, seed=0,
    )  # fmt: skip
    rollout = make_rollout(config, spec)
    assert len(rollout.setups) == 3 and all(CURRICULUM_TAG in s.scenario.tags for s in rollout.setups)
    backend = LocalBackend.from_spec(spec)
    try:
        episodes = asyncio.run(play_many(rollout, backend, [(s, seed) for s in rollout.setups for seed in (1, 2)]))
    finally:
        backend.close()
    assert len(episodes) == 6
    for episode in episodes:
        assert episode.log is not None and episode.reward.value is not None
        expected = 12.0 if episode.reward.success else 2.0 * partial_credit(episode.log, 0)
        assert episode.reward.value == expected
