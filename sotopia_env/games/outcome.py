"""What a game master says (``Announcement``) and how a game ended (``GameOutcome``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Announcement:
    """What the game master says; ``audience`` None means everyone."""

    text: str
    audience: list[str] | None = None


@dataclass
class GameOutcome:
    """The exact result: per player a goal (0..10) and ``success`` (a win, or a deal above one's reserve), the
    payoffs of a negotiation, and the game's own counts."""

    goals: dict[str, int]
    success: dict[str, bool]
    reasoning: str
    cycles: int
    votes: int
    eliminated: list[str] = field(default_factory=list)
    payoffs: dict[str, int] | None = None
