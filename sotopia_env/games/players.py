"""What a game's rule player is: deterministic moves from what its seat observes, one subclass per rule set.

The ``rule-player`` agent (``sotopia_env.agents.game_players.RulePlayer``) asks the game's rule set for the
player of its seat (``GameRules.player``) and, on each of its turns, for a choice (``choose``) when the phase
offers choices, else for a line (``say``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sotopia_env.games.spec import GameSpec


class Said(Protocol):
    """One entry of what a player observed (``sotopia_env.observation.HistoryEntry``)."""

    @property
    def agent(self) -> str: ...
    @property
    def argument(self) -> str: ...


class Seen(Protocol):
    """What a player reads of its observation (``sotopia_env.observation.Observation``)."""

    @property
    def choices(self) -> Sequence[str]: ...
    @property
    def history(self) -> Sequence[Said]: ...


class GamePlayer:
    """One seat's rule player: its role, its name, the players and its team (``spec``'s roles, in seat order)."""

    def __init__(self, spec: GameSpec, names: Sequence[str], seat: int) -> None:
        self.role = spec.role(seat)
        self.names = list(names)
        self.me = self.names[seat]
        self.team = [n for s, n in enumerate(self.names) if spec.role(s).team == self.role.team]

    def say(self, seen: Seen) -> str:
        """Its line in a phase of talk."""
        raise NotImplementedError

    def choose(self, seen: Seen) -> str:
        """One of ``seen.choices``, in a phase that offers them."""
        raise NotImplementedError
