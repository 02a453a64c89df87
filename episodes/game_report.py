"""Win rates per game role: for each model, game and role it played, the share of rated games it won, with a
Wilson 95% interval (exact outcomes are 0/1, so a t-interval on them would be wrong at small n)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from sotopia_env.episodes.log import EpisodeLog

Z95 = 1.959963984540054


@dataclass
class RoleRow:
    model: str
    game: str  # the rule set: werewolf, undercover, negotiation
    role: str
    games: int  # rated games in this role
    wins: int
    low: float
    high: float

    @property
    def rate(self) -> float:
        return self.wins / self.games if self.games else math.nan

    def to_dict(self) -> dict:
        return asdict(self) | {"rate": None if not self.games else self.rate}


def wilson(wins: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``wins`` successes in ``n`` trials; (nan, nan) when n is 0."""
    if n == 0:
        return math.nan, math.nan
    p = wins / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def role_win_rates(logs: Iterable[EpisodeLog]) -> list[RoleRow]:
    """One row per (model, game, role) over the rated game episodes (``success`` is the win), counted in games: a
    role with several seats in a game (villagers, civilians, wolves) counts that game once, won when its rated
    seats won (the seats of a side win and lose together; counting each seat would count one game 2-4 times and
    narrow the interval by as much). Unrated episodes and unrated seats count nowhere."""
    counts: dict[tuple[str, str, str], list[int]] = {}
    for log in logs:
        game = log.setup.scenario.game
        if game is None or log.rating is None or log.rating.ratings is None:
            continue
        won: dict[tuple[str, str, str], bool] = {}
        for seat, agent in enumerate(log.agents):
            rating = log.rating.of(agent.name)
            if rating is None or rating.success is None:
                continue
            key = (agent.model, game.rules, game.role(seat).name)
            won[key] = won.get(key, True) and bool(rating.success)
        for key, success in won.items():
            cell = counts.setdefault(key, [0, 0])
            cell[0] += 1
            cell[1] += int(success)
    rows = []
    for (model, game_name, role), (n, wins) in sorted(counts.items()):
        rows.append(RoleRow(model, game_name, role, n, wins, *wilson(wins, n)))
    return rows


def with_roles(report: dict, rows: list[RoleRow]) -> dict:
    """A report's JSON with ``roles`` added, where there are game rows."""
    return report | ({"roles": [r.to_dict() for r in rows]} if rows else {})


def print_role_table(rows: list[RoleRow], console) -> None:
    from rich.table import Table

    table = Table("model", "game", "role", "won", "win rate [95% Wilson]", title="game outcomes by role")
    for r in rows:
        table.add_row(r.model, r.game, r.role, f"{r.wins}/{r.games}", f"{r.rate:.2f} [{r.low:.2f}, {r.high:.2f}]")
    console.print(table)
