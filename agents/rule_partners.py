"""Rule partners for verifiable scenarios: agents that act on the scenario's hidden facts (agent spec ``rule-partner``).

``RulePartner`` takes seat 2 of a verifiable scenario. At reset it reads the hidden facts
(``Scenario.verifiable``) and finds their kind in the registry (``sotopia_env.kinds``). On each of its turns it
replays the conversation so far through the kind's rules (the same rules the ``verifiable`` judge replays) and
says its move as a natural sentence, in the kind's own lines. The rules, and how they treat malformed speech (no
number, several numbers, non-verbal actions, leaving), are documented in each kind's module.

Lines vary with the turn and the scenario but are deterministic: the same episode gives the same words.
"""

from __future__ import annotations

import zlib
from typing import Any

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.kinds import PARTNER_SEAT, Kind, facts_of, kind_for
from sotopia_env.observation import Observation


class RulePartner:
    """The ``rule-partner`` agent: seat 2 of a verifiable scenario, acting on its hidden facts."""

    model = "rule-partner"

    def __init__(self) -> None:
        self.kind: Kind | None = None
        self.facts: Any = None
        self.variety = 0

    def reset(self, setup: EpisodeSetup | None = None, seat: int | None = None) -> None:
        """Read the hidden facts; ``NotVerifiable`` for a scenario without them, ValueError for the wrong seat."""
        self.kind = None
        if setup is None:
            return
        if seat is not None and seat != PARTNER_SEAT:
            raise ValueError(f"rule-partner plays seat {PARTNER_SEAT + 1} (agent2), not seat {seat + 1}")
        self.kind = kind_for(facts_of(setup.scenario))
        self.facts = self.kind.resolved(facts_of(setup.scenario))  # the episode's draw (EpisodeSetup.drawn_with)
        self.variety = zlib.crc32(setup.scenario.id.encode())

    async def act(self, observation: Observation | dict) -> AgentAction:
        obs = Observation.from_env(observation)
        if not obs.my_turn:
            return AgentAction(action_type=ActionType.none)
        if self.kind is None:
            raise RuntimeError("rule-partner was not reset with the episode's setup (reset(setup=..., seat=1))")
        exchanges = [(h.agent == obs.agent, h.as_action()) for h in obs.history]
        move = self.kind.next_move(self.facts, exchanges)
        return self.kind.say(self.facts, move, obs.turn, self.variety)
