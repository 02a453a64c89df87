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
    kind = action.action_type
    if kind is ActionType.speak:
        return f'{label} said: "{action.argument}"'
    if kind is ActionType.non_verbal:
        return f"{label} [non-verbal communication] {action.argument}"
    if kind is ActionType.action:
        return f"{label} [action] {action.argument}"
    if kind is ActionType.leave:
        return f"{label} left the conversation" + (f": {action.argument}" if action.argument else "")
    return f"{label} did nothing"


def render_transcript(turns: list[Turn], labels: dict[str, str] | None = None) -> str:
    labels = labels or {}
    return "\n".join(f"Turn #{t.turn}: {render_action(labels.get(t.agent, t.agent), t.action)}" for t in turns)
