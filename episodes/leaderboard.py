"""The leaderboard: agents ranked only against results measured under the same protocol card.

``leaderboard(store, tags)`` sorts the stored episodes into cards (``episodes.protocol.group_by_card``) and makes
one ``Board`` per card; episodes of different cards never meet on a board.

- SOTOPIA-EVAL (``Board.rows``): per model, over every seat it played (as ``report`` counts them), the mean goal
  and the mean overall, each with its 95% t-interval and n (``episodes.report.aggregate``), best goal first.
- Won/lost outcomes (``Board.skills``; seats whose rating says ``success``: verifiable scenarios and games): an
  OpenSkill rating per model (Plackett-Luce, the ``openskill`` package). Each such seat is a match of its model
  against the task it faced (``task_of``: the scenario with the seat's game role, or its seat number), won or
  lost by ``success``. The task is the opponent, not the other seats: a model is benchmarked against a rule
  partner or rule players, whose ``success`` (a deal agreed, a teammate's win) says nothing about who beat whom,
  and a self-played game puts one model on both sides. Models measured on the same tasks (the card pins the
  scenario set) are thereby rated on one scale, and a task's own rating absorbs how hard it is. Matches are rated
  in the order they were played. Each row gives mu, sigma and the ordinal mu - 3 sigma (sorted by it), a
  conservative estimate of the skill; the rule agents get rows too, as baselines.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from sotopia_env.episodes.judge_agreement import stored_figures
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.protocol import CardGroup, ProtocolCard, group_by_card
from sotopia_env.episodes.report import Cell, SeatResult, aggregate, json_safe, seat_results
from sotopia_env.episodes.store import EpisodeStore

Match = tuple[str, str, bool]  # (model, task, won)


@dataclass
class EvalRow:
    model: str
    goal: Cell | None
    overall: Cell | None
    rated: int  # seats rated, each one value of the means
    unrated: int
    failed: int


@dataclass
class SkillRow:
    model: str
    mu: float
    sigma: float
    ordinal: float  # mu - 3 sigma
    matches: int
    wins: int


@dataclass
class Board:
    """The ranking under one protocol card."""

    card: ProtocolCard
    tags: list[str]
    episodes: int
    rows: list[EvalRow]
    skills: list[SkillRow]

    @property
    def kind(self) -> str:
        return "outcome" if self.skills else "sotopia-eval"

    def to_dict(self) -> dict[str, Any]:
        return json_safe(
            {
                "card": self.card.model_dump(mode="json"),
                "kind": self.kind,
                "tags": self.tags,
                "episodes": self.episodes,
                "rows": [asdict(r) for r in self.rows],
                "skills": [asdict(s) for s in self.skills],
            }
        )


@dataclass(frozen=True)
class _Kept:
    """What a board needs of one episode."""

    order: tuple[str, str]  # (created_at, id): the order matches are rated in
    seats: tuple[SeatResult, ...]
    matches: tuple[Match, ...]


def task_of(log: EpisodeLog, seat: int) -> str:
    """What a seat was up against: the scenario, with the seat's game role (a game) or its seat number."""
    game = log.setup.scenario.game
    return f"{log.scenario_id} ({game.role(seat).name if game is not None else f'seat {seat + 1}'})"


def matches_of(log: EpisodeLog) -> tuple[Match, ...]:
    """One match per seat whose rating says ``success``: its model against its task (module docstring)."""
    out = []
    for seat, spec in enumerate(log.agents):
        rating = log.rating.of(spec.name) if log.rating is not None else None
        if rating is not None and rating.success is not None:
            out.append((spec.model, task_of(log, seat), rating.success))
    return tuple(out)


def _keep(log: EpisodeLog) -> _Kept:
    return _Kept((log.created_at, log.id), tuple(seat_results(log)), matches_of(log))


def skill_rows(matches: Iterable[Match]) -> list[SkillRow]:
    """OpenSkill (Plackett-Luce) ratings of the models after ``matches``, in order; best ordinal first."""
    from openskill.models import PlackettLuce

    model = PlackettLuce()
    ratings: dict[tuple[str, str], Any] = {}  # ("model" | "task", name): models and tasks never share a rating
    played: dict[str, list[int]] = {}
    for name, task, won in matches:
        players = [("model", name), ("task", task)]
        teams = [[ratings[p] if p in ratings else model.rating(name=p[1])] for p in players]
        rated = model.rate(teams, ranks=[1, 2] if won else [2, 1])
        for player, (rating,) in zip(players, rated, strict=True):
            ratings[player] = rating
        counts = played.setdefault(name, [0, 0])
        counts[0] += 1
        counts[1] += int(won)
    rows = [SkillRow(n, r.mu, r.sigma, r.ordinal(), *played[n]) for (kind, n), r in ratings.items() if kind == "model"]
    return sorted(rows, key=lambda r: (-r.ordinal, r.model))


def eval_rows(seats: Iterable[SeatResult]) -> list[EvalRow]:
    """Mean goal and overall per model with 95% intervals; best mean goal first (no goal last)."""
    rows = [
        EvalRow(r.model, r.cells.get("goal"), r.cells.get("overall"), r.rated, r.unrated, r.failed)
        for r in aggregate(seats).rows
    ]
    return sorted(rows, key=lambda r: (-_mean(r.goal), r.model))


def _mean(cell: Cell | None) -> float:
    return -math.inf if cell is None or math.isnan(cell.mean) else cell.mean


def _board(group: CardGroup[_Kept]) -> Board:
    kept = sorted(group.items, key=lambda k: k.order)
    rows = eval_rows(seat for k in kept for seat in k.seats)
    skills = skill_rows(match for k in kept for match in k.matches)
    return Board(group.card, sorted(group.tags), len(kept), rows, skills)


def boards(logs: Iterable[EpisodeLog]) -> list[Board]:
    """One board per protocol card of ``logs``, the card with the most episodes first."""
    return [_board(group) for group in group_by_card(logs, _keep)]


def leaderboard(store: EpisodeStore, tags: Sequence[str] | None = None) -> list[Board]:
    """The boards of ``store``'s episodes (of ``tags``, when given); ``Board.to_dict`` is their JSON. Each card
    carries the agreement figures stored for its judge (``episodes.judge_agreement``)."""
    chosen = list(dict.fromkeys(tags or []))
    logs = itertools.chain.from_iterable(store.iter(t) for t in chosen) if chosen else store.iter()
    figures = stored_figures(store)
    return [replace(board, card=board.card.with_agreement(figures)) for board in boards(logs)]
