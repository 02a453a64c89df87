"""The goals a seat-1 policy reaches on a verifiable kind's instances, over drawn hidden types: what every table of
a verifiable kind prints beside its learned rows, and what the headroom tests check (``tests/test_worlds.py``).

``instance_goals`` plays a policy (``baseline-random``, ``baseline-heuristic``, ``baseline-oracle``, an exploit
script, any agent spec that needs no model) in seat 1 against ``rule-partner`` on each instance of a kind and split,
once per seed (each seed draws the partner's hidden type anew: ``EpisodeSetup.drawn_with``), judged by the
``verifiable`` evaluator; it returns each instance's mean goal. No model is called: a table of all kinds takes
seconds.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sotopia_env.agents.base import Agent
from sotopia_env.agents.loading import RULE_PARTNER, load_agent
from sotopia_env.env import EnvConfig
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import VerifiableJudge
from sotopia_env.library import Library
from sotopia_env.limits import DEFAULT_MAX_TURNS
from sotopia_env.sampler import sample_setup

AgentMaker = Callable[[], Agent]


@dataclass(frozen=True)
class KindGoals:
    """A policy's goals on one kind and split: per instance (scenario id) the mean over its seeds."""

    policy: str
    kind: str
    split: str
    per_instance: dict[str, float]
    episodes: int

    @property
    def mean(self) -> float:
        return statistics.fmean(self.per_instance.values()) if self.per_instance else float("nan")


def kind_setups(library: Library, kind: str, split: str) -> list[EpisodeSetup]:
    """One setup per instance of ``kind`` in ``split`` (the first pairing of each), in id order."""
    chosen = [s for s in library.select(f"verifiable:{kind}") if s.split == split and s.verifiable is not None]
    return [sample_setup(library, seed=0, scenario=s.id) for s in sorted(chosen, key=lambda s: s.id)]


async def _goal(setup: EpisodeSetup, policy: Agent, seed: int, max_turns: int) -> float:
    seats = [policy, load_agent(RULE_PARTNER)]
    log = await play(setup, seats, VerifiableJudge(), EnvConfig(max_turns=max_turns), seed=seed)
    learner = setup.agent_names[0]
    if log.agent_errors.get(learner):  # a policy that cannot play the kind is a bug, never a low score
        raise RuntimeError(f"{type(policy).__name__} made no valid move on {setup.scenario.id} (seed {seed})")
    rating = log.rating.ratings[learner] if log.rating is not None else None
    if rating is None or "goal" not in rating.scores:
        raise RuntimeError(f"episode on {setup.scenario.id} (seed {seed}) was not judged: {log.error or log.status}")
    return float(rating.scores["goal"].score)


def instance_goals(
    library: Library,
    kind: str,
    split: str,
    policy: str | AgentMaker,
    seeds: Sequence[int] = range(20),
    max_turns: int = DEFAULT_MAX_TURNS,
    name: str | None = None,
) -> KindGoals:
    """``policy`` (an agent spec that calls no model, or a maker of fresh agents) in seat 1 of every instance of
    ``kind`` in ``split``, once per seed; each instance's mean goal."""
    make: AgentMaker = (lambda: load_agent(policy)) if isinstance(policy, str) else policy
    label = name or (policy if isinstance(policy, str) else getattr(policy, "__name__", "policy"))

    async def run() -> dict[str, float]:
        out: dict[str, float] = {}
        for setup in kind_setups(library, kind, split):
            goals = [await _goal(setup, make(), seed, max_turns) for seed in seeds]
            out[setup.scenario.id] = statistics.fmean(goals)
        return out

    per_instance = asyncio.run(run())
    return KindGoals(label, kind, split, per_instance, len(per_instance) * len(list(seeds)))
