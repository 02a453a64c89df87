"""Self-play in episode GRPO (``Rollout.self_play`` / ``EpisodeGRPOConfig.self_play``): the policy in every seat of
a SOTOPIA scenario, each seat's turns its own samples, each seat's reward its own rating, and the group advantage
computed per (start, seat). A scripted policy and a scripted judge (test doubles: no model can be made to say
given numbers), the real rollout and grouping code."""

from __future__ import annotations

import json
import re

import pytest
from test_episode_grpo import IdsBackend, _tokenizer
from test_training_tiny import tiny_model_spec  # noqa: F401

from sotopia_env.backends.base import GenerationSettings
from sotopia_env.env import EnvConfig
from sotopia_env.evaluators.base import EpisodeContext, EpisodeRating, SyncFromAsync, validate_scores
from sotopia_env.evaluators.dimensions import GOAL_ONLY
from sotopia_env.rewards import Reward
from sotopia_env.training.episode_grpo import EpisodeGRPOConfig, play_groups, step_advantages
from sotopia_env.training.episode_rollouts import Episode, Rollout, SeatPart, StartPicker, by_seat

NUMBER = re.compile(r"my number is (\d+)")


class NumberJudge(SyncFromAsync):
    """Scripted rewards: each agent's goal is the number it said last (mod 11); 0 when it said none."""

    name = "number-judge"
    dimensions = GOAL_ONLY

    async def aevaluate(self, context: EpisodeContext) -> EpisodeRating:
        ratings = {}
        for name in context.setup.agent_names:
            said = [NUMBER.search(t.action.argument) for t in context.turns if t.agent == name]
            value = int(said[-1].group(1)) % 11 if said and said[-1] else 0
            ratings[name] = validate_scores({"goal": {"score": value}}, self.dimensions, name)
        return EpisodeRating(evaluator=self.name, ratings=ratings)


def speak_seeded(request) -> str:
    """A move that names the request's sampling seed (it differs per seat and per episode)."""
    return json.dumps({"action_type": "speak", "argument": f"my number is {request.seed}"})


def _sotopia_setup():
    from sotopia_env.library import load_library
    from sotopia_env.sampler import sample_setups

    library = load_library()
    scenario = sorted(library.select("train"), key=lambda s: s.id)[0]
    assert scenario.num_agents == 2 and scenario.verifiable is None and scenario.game is None
    return sample_setups([scenario], library, 1, seed=0)[0]


def _self_play(setup, **kw) -> Rollout:
    settings = dict(
        setups=[setup], seat=0, partner="rule-partner", evaluator=NumberJudge(), env=EnvConfig(max_turns=4),
        settings=GenerationSettings(max_new_tokens=32), self_play=True,
    )  # fmt: skip
    return Rollout(**{**settings, **kw})


def test_every_seat_is_the_policy_and_carries_its_own_reward_and_turns(tmp_path_factory):
    import asyncio

    from sotopia_env.training.episode_rollouts import play_one

    tokenizer = _tokenizer(tmp_path_factory)
    setup = _sotopia_setup()
    rollout = _self_play(setup)
    assert rollout.learner_seats(setup) == [0, 1]
    backend = IdsBackend(speak_seeded, tokenizer)
    episode = asyncio.run(play_one(rollout, backend, setup, seed=3))
    log = episode.log
    assert log is not None, episode.error
    assert [a.model for a in log.agents] == ["scripted", "scripted"]  # no partner anywhere
    assert sorted(episode.seats) == [0, 1]
    rewards = []
    for seat, part in episode.seats.items():
        name = setup.agent_names[seat]
        own = [t.action.argument for t in log.turns if t.agent == name]
        assert own, f"seat {seat} never moved"
        expected = int(NUMBER.search(own[-1]).group(1)) % 11
        assert part.reward.value == expected == log.rating.reward(name)  # its own rating, not the team's
        decoded = [json.loads(tokenizer.decode(s.completion_ids))["argument"] for s in part.samples]
        assert decoded == own  # exactly this seat's moves are this seat's samples
        assert part.calls == len(own)
        rewards.append(expected)
    assert rewards[0] != rewards[1]  # the seats' rewards differ, so mixing them up would show
    assert len(episode.samples) == sum(len(p.samples) for p in episode.seats.values())


def _episode(rewards: list[float | None]) -> Episode:
    parts = {seat: SeatPart(Reward(r), [], 1) for seat, r in enumerate(rewards)}
    return Episode(None, Reward(None), [], 2, seats=parts)


def test_the_group_advantage_is_computed_per_seat():
    group = [_episode([10.0, 0.0]), _episode([0.0, 2.0]), _episode([5.0, 1.0])]
    seats = by_seat(group)
    assert [[e.reward.value for e in g] for g in seats] == [[10.0, 0.0, 5.0], [0.0, 2.0, 1.0]]
    advantages = step_advantages([[e.reward.value for e in g] for g in seats], "group")
    assert advantages[0] == pytest.approx([1.2247, -1.2247, 0.0], abs=1e-4)  # seat 1 against seat 1 only
    assert advantages[1] == pytest.approx([-1.2247, 1.2247, 0.0], abs=1e-4)
    # pooled over both seats (the mistake self-play must not make), seat 2's best episode would look poor
    pooled = step_advantages([[10.0, 0.0, 5.0, 0.0, 2.0, 1.0]], "group")[0]
    assert pooled[4] < 0 < advantages[1][1]
    assert by_seat([Episode(None, Reward(3.0), [], 1)]) == [[Episode(None, Reward(3.0), [], 1)]]  # one seat: as is


def test_play_groups_keys_groups_by_start_and_seat(tmp_path_factory):
    tokenizer = _tokenizer(tmp_path_factory)
    setup = _sotopia_setup()
    rollout = _self_play(setup)
    config = EpisodeGRPOConfig(
        base_model="tiny", self_play=True, group_size=3, groups_per_step=1, dynamic_sampling=False, max_turns=4
    )
    picker = StartPicker([0], dynamic=False)
    groups, skipped, played = play_groups(config, rollout, picker, IdsBackend(speak_seeded, tokenizer), step=1)
    assert played == len(groups) == 2 and skipped == 0  # one start, two seats
    for seat, (group, signal) in enumerate(groups):
        assert len(group) == 3 and signal
        for episode in group:
            name = setup.agent_names[seat]
            assert episode.reward.value == episode.log.rating.reward(name)
            own = [t.action.argument for t in episode.log.turns if t.agent == name]
            assert [json.loads(tokenizer.decode(s.completion_ids))["argument"] for s in episode.samples] == own


def test_self_play_and_a_role_are_refused_together():
    with pytest.raises(ValueError, match="self_play plays every seat: drop role"):
        EpisodeGRPOConfig(base_model="tiny", self_play=True, role="wolves")
