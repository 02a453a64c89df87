"""The record of an episode: who did what on which turn, and who saw it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, model_serializer

from sotopia_env.actions import ActionType, AgentAction

MODERATOR = "Game master"  # a game's announcements are turns of this speaker; no seat has this name


class Turn(BaseModel):
    """One agent's action on one turn. ``agent`` is the true agent name (or ``MODERATOR``).

    ``audience`` lists who observed it (true names), when not everyone did: the author and the ``to`` of an
    addressed move, a team's channel, or the one player a game master's private word went to. The judge sees
    every turn.
    """

    turn: int
    agent: str
    action: AgentAction
    audience: list[str] | None = None

    @model_serializer(mode="wrap")
    def _omit_public(self, handler: Any) -> dict[str, Any]:
        data = handler(self)  # a turn everyone saw stores as it did before audiences existed
        if data.get("audience") is None:
            data.pop("audience", None)
        return data

    def seen_by(self, name: str) -> bool:
        return self.audience is None or name in self.audience


def render_action(label: str, action: AgentAction, to: list[str] | None = None) -> str:
    """One line of transcript, e.g. ``Ana Ruiz said: "Hi."`` (``to``: the labels of an addressed move's
    recipients, ``Ana Ruiz said to Bo Li: "Hi."``)."""
    return render_move(label, action.action_type, action.argument, to)


def render_move(label: str, kind: ActionType, argument: str, to: list[str] | None = None) -> str:
    """``render_action`` from an action's parts (no ``AgentAction`` to build)."""
    whom = f" to {', '.join(to)}" if to else ""
    if kind is ActionType.speak:
        return f'{label} said{whom}: "{argument}"'
    if kind is ActionType.non_verbal:
        return f"{label} [non-verbal communication{whom}] {argument}"
    if kind is ActionType.action:
        return f"{label} [action{whom}] {argument}"
    if kind is ActionType.leave:
        return f"{label} left the conversation" + (f": {argument}" if argument else "")
    return f"{label} did nothing"


def render_transcript(turns: list[Turn], labels: dict[str, str] | None = None) -> str:
    """Every turn, as the judge sees them: an addressed move names its recipients, and a move only some saw
    says who (``[seen by A, B]``)."""
    labels = labels or {}
    lines = []
    for t in turns:
        line = f"Turn #{t.turn}: {render_action(labels.get(t.agent, t.agent), t.action, t.action.to)}"
        if t.audience is not None and not t.action.to:
            line += f" [seen by {', '.join(labels.get(n, n) for n in t.audience)}]"
        lines.append(line)
    return "\n".join(lines)
