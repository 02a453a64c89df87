"""What a game's rule player is: moves from what its seat observes and its own random draws, one subclass per
rule set.

The ``rule-player`` agent (``sotopia_env.agents.game_players.RulePlayer``) asks the game's rule set for the
player of its seat (``GameRules.player``) and, on each of its turns, for a choice (``choose``) when the phase
offers choices, else for a line (``say``).

Information hiding: a player keeps its own role, the names, and its team only where its role ``knows_team``
(werewolves know each other; a villager knows only itself). Nothing else of the spec's hidden roles is kept, so
its moves depend on what it observes and on ``rng`` alone. ``rng`` is seeded by the episode (its seed, its
pairing and the seat: ``player_rng``), so the same episode replays the same game and other seeds play others.

Oracle players (agent spec ``oracle-player``, ``GameRules.oracle_player``) are the ceiling beside that heuristic:
each rule set's ``GameOracle`` subclass is handed every player's role (``hidden_roles``: team, role, secret word,
reserve) explicitly at reset, and plays on it; each module says what its oracles do with it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Protocol

from sotopia_env.games.spec import GameSpec, Role


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


def player_rng(seed: int | None, pairing: str, seat: int) -> random.Random:
    """A seat's own random stream for one episode: the same (seed, pairing, seat), the same draws."""
    return random.Random(f"{seed}|{pairing}|{seat}")


class GamePlayer:
    """One seat's rule player: its role, its name, the players, the teammates it knows (all of its team where its
    role ``knows_team``, else itself) and its random stream."""

    def __init__(self, spec: GameSpec, names: Sequence[str], seat: int, rng: random.Random | None = None) -> None:
        self.role = spec.role(seat)
        self.names = list(names)
        self.me = self.names[seat]
        same = [n for s, n in enumerate(self.names) if spec.role(s).team == self.role.team]
        self.team = same if self.role.knows_team else [self.me]
        self.rng = rng or player_rng(None, "|".join(self.names), seat)

    def say(self, seen: Seen) -> str:
        """Its line in a phase of talk."""
        raise NotImplementedError

    def choose(self, seen: Seen) -> str:
        """One of ``seen.choices``, in a phase that offers them."""
        raise NotImplementedError


def hidden_roles(spec: GameSpec, names: Sequence[str]) -> dict[str, Role]:
    """Every player's role, by name: the hidden facts an oracle seat is given (a rule player is given none)."""
    return {name: spec.role(seat) for seat, name in enumerate(names)}


class GameOracle(GamePlayer):
    """An oracle seat: a rule player that is also handed ``roles`` (``hidden_roles``), every player's role."""

    def __init__(
        self,
        spec: GameSpec,
        names: Sequence[str],
        seat: int,
        rng: random.Random | None = None,
        *,
        roles: Mapping[str, Role],
    ) -> None:
        super().__init__(spec, names, seat, rng)
        self.roles = dict(roles)

    def with_team(self, team: str, among: Sequence[str]) -> list[str]:
        """The players of ``among`` on ``team``, in their order."""
        return [n for n in among if self.roles[n].team == team]
