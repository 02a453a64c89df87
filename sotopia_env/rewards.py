"""Ratings into rewards: the one place a rating becomes a reward, for the env and for every trainer.

- ``rating_reward``: the configured dimension's score (or ``overall``); ``None`` when the episode or the agent is
  unrated, never 0. ``SocialEnv``'s last step gives it as its float reward (NaN for ``None``).
- ``episode_reward``: a seat's reward for episode RL (``training.episode_rollouts``): ``rating_reward`` plus an
  optional reward per turn taken and an optional dense part on verifiable scenarios: the whole ``dense_reward``
  for a success (so that success always dominates), ``dense_reward * partial_credit`` for a failure.
- ``partial_credit``: the kind's own (``Kind.partial_credit``), from the replayed transcript.
- ``team_reward``: one reward for a policy that played several seats.

Text-GRPO tasks keep TRL's reward-function form (``training.rewards``, ``training.rl``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sotopia_env.actions import ActionType
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.evaluators.base import EpisodeRating
from sotopia_env.kinds.base import PARTNER_SEAT
from sotopia_env.kinds.registry import kind_for
from sotopia_env.transcript import Turn


class RatedEpisode(Protocol):
    """What a reward reads of a played episode (``episodes.log.EpisodeLog`` has it)."""

    @property
    def setup(self) -> EpisodeSetup: ...
    @property
    def turns(self) -> Sequence[Turn]: ...
    @property
    def rating(self) -> EpisodeRating | None: ...


@dataclass
class Reward:
    value: float | None  # None: unrated (or failed): no advantage
    success: bool | None = None  # the judge's verdict, where it gives one


def rating_reward(rating: EpisodeRating | None, agent: str, dimension: str = "goal") -> float | None:
    """``agent``'s score on ``dimension`` (or ``overall``); None when unrated (no rating, an error, or this agent
    left unrated), never 0."""
    value = math.nan if rating is None else rating.reward(agent, dimension)
    return None if math.isnan(value) else value


def partial_credit(episode: RatedEpisode, seat: int) -> float:
    """0..1 from the transcript alone on a verifiable scenario (0 elsewhere), by the kind's rules: bargaining, the
    learner made a valid offer; scheduling, it proposed one slot that it can make; persuasion, the remedy for the
    partner's concern was offered (0.5) or accepted (1)."""
    facts = episode.setup.scenario.verifiable
    if facts is None:
        return 0.0
    kind = kind_for(facts)
    learner, partner = episode.setup.agent_names[seat], episode.setup.agent_names[PARTNER_SEAT]
    turns = episode.turns
    speeches = [t.action.argument for t in turns if t.agent == learner and t.action.action_type is ActionType.speak]
    facts = kind.resolved(facts)
    talk = kind.replay(facts, ((t.agent == partner, t.action) for t in turns))
    return kind.partial_credit(facts, speeches, talk)


def episode_reward(
    episode: RatedEpisode, seat: int, dimension: str, turn_reward: float = 0.0, dense_reward: float = 0.0
) -> Reward:
    """The evaluator's ``dimension`` for the seat, plus ``turn_reward`` per turn it took, plus the dense part:
    ``dense_reward`` for a success (so that success always dominates), ``dense_reward * partial_credit`` for a
    failure. ``Reward(None)`` when unrated."""
    agent = episode.setup.agent_names[seat]
    value = rating_reward(episode.rating, agent, dimension)
    if value is None or episode.rating is None:
        return Reward(None)
    rated = episode.rating.of(agent)
    success = rated.success if rated is not None else None
    value += turn_reward * sum(t.agent == agent for t in episode.turns)
    if dense_reward:
        value += dense_reward * (1.0 if success else partial_credit(episode, seat))
    return Reward(value, success)


def team_reward(rewards: Sequence[Reward]) -> Reward:
    """The policy's reward over the seats it played: their mean (one seat: its own), its first seat's verdict;
    unrated when any seat is."""
    if any(r.value is None for r in rewards):
        return Reward(None)
    return Reward(statistics.fmean(r.value for r in rewards if r.value is not None), rewards[0].success)
