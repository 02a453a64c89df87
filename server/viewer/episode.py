"""What the episode page shows, as plain data: seats, transcript lines, and scores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sotopia_env.actions import ActionType
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.evaluators import SOTOPIA_DIMENSIONS
from sotopia_env.observation import background_for
from sotopia_env.transcript import Turn
from sotopia_env.visibility import describe

RANGES = {d.name: (d.low, d.high) for d in SOTOPIA_DIMENSIONS}
ACTION_CLASSES = {
    ActionType.speak: "speak",
    ActionType.non_verbal: "nonverbal",
    ActionType.action: "action",
    ActionType.leave: "leave",
    ActionType.none: "none",
}


@dataclass
class Seat:
    number: int
    name: str
    model: str
    agent_class: str
    profile: str  # everything about the character, secret included
    goal: str
    background: str  # exactly what this agent was shown: scenario, itself, the others as it knew them, its goal


@dataclass
class Line:
    turn: int
    seat: int  # 1-based; 0 for a game's master
    agent: str
    kind: str  # a CSS class: speak, nonverbal, action, leave, none
    argument: str
    heard_by: str = ""  # "to Bo Li", or "seen by Ana Ruiz, Bo Li": who heard it, where not everyone did

    @property
    def text(self) -> str:
        if self.kind == "none":
            return "did nothing"
        if self.kind == "leave" and not self.argument:
            return "left the conversation"
        return f"({self.heard_by}) {self.argument}" if self.heard_by else self.argument


@dataclass
class ScoreCell:
    score: int | None
    reasoning: str


@dataclass
class ScoreRow:
    dimension: str
    range: str
    cells: list[ScoreCell]


def seats(log: EpisodeLog) -> list[Seat]:
    setup = log.setup
    out = []
    for i, character in enumerate(setup.characters):
        spec = log.agents[i] if i < len(log.agents) else None
        out.append(
            Seat(
                number=i + 1,
                name=character.name,
                model=spec.model if spec else "",
                agent_class=spec.agent_class if spec else "",
                profile=describe(character, None),
                goal=setup.scenario.goals[i] if i < len(setup.scenario.goals) else "",
                background=background_for(setup, i),
            )
        )
    return out


def transcript(log: EpisodeLog) -> list[Line]:
    seat_of = {name: i + 1 for i, name in enumerate(log.setup.agent_names)}
    return [
        Line(
            t.turn, seat_of.get(t.agent, 0), t.agent, ACTION_CLASSES[t.action.action_type], t.action.argument, heard(t)
        )
        for t in log.turns
    ]


def heard(turn: Turn) -> str:
    if turn.action.to:
        return f"to {', '.join(turn.action.to)}"
    if turn.audience is not None:
        return f"seen by {', '.join(turn.audience)}"
    return ""


def score_rows(log: EpisodeLog) -> list[ScoreRow]:
    """One row per dimension (then ``overall``), one cell per seat; empty when unrated."""
    if log.rating is None or log.rating.ratings is None:
        return []
    ratings = [log.rating.ratings.get(a.name) for a in log.agents]
    dims: list[str] = []
    for rating in ratings:
        dims += [d for d in (rating.scores if rating else {}) if d not in dims]
    rows = []
    for dim in dims:
        cells = []
        for rating in ratings:
            entry = rating.scores.get(dim) if rating else None
            cells.append(ScoreCell(entry.score if entry else None, entry.reasoning if entry else ""))
        low, high = RANGES.get(dim, (None, None))
        rows.append(ScoreRow(dim, f"{low}..{high}" if low is not None else "", cells))
    return rows


def overall(log: EpisodeLog) -> list[float | None]:
    if log.rating is None or log.rating.ratings is None:
        return []
    return [r.overall if (r := log.rating.ratings.get(a.name)) else None for a in log.agents]


def episode_json(log: EpisodeLog) -> dict[str, Any]:
    """The stored episode, plus what each seat saw (``backgrounds``) and each seat's ``overall``."""
    return {
        "episode": log.model_dump(mode="json"),
        "backgrounds": [background_for(log.setup, i) for i in range(len(log.setup.characters))],
        "overall": {a.name: v for a, v in zip(log.agents, overall(log), strict=False)},
    }
