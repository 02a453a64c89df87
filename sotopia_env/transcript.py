"""The record of an episode: who did what on which turn."""

from __future__ import annotations

from pydantic import BaseModel

from sotopia_env.actions import ActionType, AgentAction


class Turn(BaseModel):
    """One agent's action on one turn. ``agent`` is the true agent name."""

    turn: int
    agent: str
    action: AgentAction


def render_action(label: str, action: AgentAction) -> str:
    """One line of transcript, e.g. ``Ana Ruiz said: "Hi."``."""
    return render_move(label, action.action_type, action.argument)


def render_move(label: str, kind: ActionType, argument: str) -> str:
    """``render_action`` from an action's parts (no ``AgentAction`` to build)."""
    if kind is ActionType.speak:
        return f'{label} said: "{argument}"'
    if kind is ActionType.non_verbal:
        return f"{label} [non-verbal communication] {argument}"
    if kind is ActionType.action:
        return f"{label} [action] {argument}"
    if kind is ActionType.leave:
        return f"{label} left the conversation" + (f": {argument}" if argument else "")
    return f"{label} did nothing"


def render_transcript(turns: list[Turn], labels: dict[str, str] | None = None) -> str:
    labels = labels or {}
    return "\n".join(f"Turn #{t.turn}: {render_action(labels.get(t.agent, t.agent), t.action)}" for t in turns)
