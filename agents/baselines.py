"""The baselines of the verifiable kinds, as agent specs anyone can run in seat 1 against ``rule-partner``.

- ``baseline-random``: a legal move of the kind drawn at random each turn (``Kind.random_line``), seeded by the
  episode, so a run is reproducible;
- ``baseline-heuristic``: the best short script we could write on what seat 1 is shown (``Kind.propose``; the
  BC expert, ``sotopia_env.training.experts:VerifiableExpert``, plays the same policy);
- ``baseline-oracle``: reads the episode's drawn hidden facts (``Kind.oracle_line``); its mean is the kind's
  ceiling in practice.

Every table of a verifiable kind prints the three beside its learned rows (``benchmarks/verifiable_baselines.py``,
``benchmarks/_stages.py``). Once the partner has agreed (``Kind.agreed``), each thanks it and lets it close.
"""

from __future__ import annotations

import random
from typing import Any

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.kinds import LEARNER_SEAT, Kind, LearnerView, facts_of, kind_for
from sotopia_env.observation import Observation
from sotopia_env.profiles import strip_hints

BASELINES = ("random", "heuristic", "oracle")
PREFIX = "baseline-"
SPECS = tuple(PREFIX + b for b in BASELINES)  # the agent specs (``agents.loading`` builds them)
THANKS = "Thank you, that's settled then."  # the line after the partner agreed
_NONE = AgentAction(action_type=ActionType.none)


def goal_of(observation: Observation) -> str:
    """The agent's goal as the background states it, without ``<extra_info>``/``<strategy_hint>`` sections."""
    for line in observation.background.splitlines():
        if line.startswith("Your goal:"):
            return strip_hints(line.removeprefix("Your goal:"))
    return "find a solution that works for both of us"


def learner_view(observation: Observation) -> LearnerView:
    """What seat 1 is shown, as a kind's policies read it: its goal and the speeches so far."""
    spoken = [h for h in observation.history if h.action_type == ActionType.speak.value]
    return LearnerView(
        goal=goal_of(observation),
        moves=sum(h.agent == observation.agent for h in observation.history),
        said=[h.argument for h in spoken if h.agent == observation.agent],
        heard=[h.argument for h in spoken if h.agent != observation.agent],
    )


class KindPolicy:
    """Seat 1 of a verifiable scenario, played by one of its kind's policies: ``random``, ``heuristic`` or
    ``oracle``. Only the oracle keeps the hidden facts; the others keep the kind alone (which the scenario's tags
    say too). Deterministic: the same episode (seed) gives the same words."""

    def __init__(self, policy: str = "heuristic") -> None:
        if policy not in BASELINES:
            raise ValueError(f"unknown baseline {policy!r} (known: {', '.join(BASELINES)})")
        self.policy = policy
        self.model = PREFIX + policy
        self.kind: Kind | None = None
        self._facts: Any = None  # the oracle's only
        self._rng = random.Random(0)

    def reset(self, setup: EpisodeSetup | None = None, seat: int | None = None, seed: int | None = None) -> None:
        self.kind = self._facts = None
        if setup is None:
            return
        if seat is not None and seat != LEARNER_SEAT:
            raise ValueError(f"{self.model} plays seat {LEARNER_SEAT + 1} (agent1), not seat {seat + 1}")
        facts = facts_of(setup.scenario)
        self.kind = kind_for(facts)
        if self.policy == "oracle":
            self._facts = self.kind.resolved(facts)
        self._rng = random.Random(f"{setup.pairing_key}|{seed}")

    async def act(self, observation: Observation | dict) -> AgentAction:
        obs = Observation.from_env(observation)
        if not obs.my_turn:
            return _NONE
        if self.kind is None:
            raise RuntimeError(f"{self.model} was not reset with the episode's setup (reset(setup=..., seat=0))")
        view = learner_view(obs)
        if view.said and view.heard and self.kind.agreed(view):
            return AgentAction(action_type=ActionType.speak, argument=THANKS)
        return AgentAction(action_type=ActionType.speak, argument=self.line(view))

    def line(self, view: LearnerView) -> str:
        assert self.kind is not None
        if self.policy == "random":
            return self.kind.random_line(view, self._rng)
        if self.policy == "oracle":
            return self.kind.oracle_line(self._facts, view)
        return self.kind.propose(view)


def is_baseline_spec(spec: str) -> bool:
    return spec in SPECS


def load_baseline(spec: str) -> KindPolicy:
    """The agent for ``baseline-random``, ``baseline-heuristic`` or ``baseline-oracle``."""
    return KindPolicy(spec.removeprefix(PREFIX))
