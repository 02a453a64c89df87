"""What one agent observes at one turn.

The env returns observations as plain dicts that live in ``observation_space``
(PettingZoo/Gymnasium need that); ``Observation`` is the same data as a typed
model, which agents receive. ``Observation.from_env(obs)`` converts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel

from sotopia_env.actions import ACTION_TYPES, ActionType, AgentAction
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.profiles import Relationship
from sotopia_env.transcript import Turn, render_action, render_move
from sotopia_env.visibility import describe, display_name


class HistoryEntry(BaseModel):
    turn: int
    agent: str  # as the viewer knows them
    action_type: str
    argument: str

    def render(self) -> str:
        return f"Turn #{self.turn}: " + render_move(self.agent, ActionType(self.action_type), self.argument)

    def as_action(self) -> AgentAction:
        return AgentAction(action_type=ActionType(self.action_type), argument=self.argument)


class Observation(BaseModel):
    agent: str
    turn: int
    background: str
    history: list[HistoryEntry]
    available_actions: list[str]
    text: str

    @classmethod
    def from_env(cls, obs: dict[str, Any] | Observation) -> Observation:
        if isinstance(obs, Observation):
            return obs
        # model_construct: every field is coerced to its type right here, so pydantic's validation per past
        # turn (for every agent's every move) would only repeat it.
        history = [
            HistoryEntry.model_construct(
                turn=int(h["turn"]),
                agent=str(h["agent"]),
                action_type=ACTION_TYPES[int(h["action_type"])],
                argument=str(h["argument"]),
            )
            for h in obs["history"]
        ]
        available = [a for a, on in zip(ACTION_TYPES, obs["available_actions"], strict=True) if on]
        return cls(
            agent=obs["agent"],
            turn=int(obs["turn"]),
            background=obs["background"],
            history=history,
            available_actions=available,
            text=obs["text"],
        )

    @property
    def my_turn(self) -> bool:
        return self.available_actions != [ActionType.none.value]


_RELATION_PHRASES = {
    Relationship.stranger: "a stranger to you",
    Relationship.know_by_name: "whom you know by name only",
    Relationship.acquaintance: "an acquaintance of yours",
    Relationship.friend: "your friend",
    Relationship.romantic_relationship: "your romantic partner",
    Relationship.family_member: "a member of your family",
}


def relationship_of(setup: EpisodeSetup) -> Relationship:
    if setup.relationship is not None:
        return setup.relationship.relationship
    return setup.scenario.relationship


def background_for(setup: EpisodeSetup, seat: int) -> str:
    """The background one agent sees: scenario, itself, what it may know of the others, its goal."""
    me = setup.characters[seat]
    rel = relationship_of(setup)
    lines = [
        f"Scenario: {setup.scenario.scenario}",
        "",
        f"You are {me.name}. {describe(me, None)}",
    ]
    for other_seat, other in enumerate(setup.characters):
        if other_seat == seat:
            continue
        label = display_name(other, rel, other_seat, len(setup.characters))
        lines.append(f"The other participant ({label}), {_RELATION_PHRASES[rel]}: {describe(other, rel)}")
    if setup.relationship is not None and setup.relationship.background_story and rel >= Relationship.acquaintance:
        lines.append(f"Your shared history: {setup.relationship.background_story}")
    lines += ["", f"Your goal: {setup.scenario.goals[seat]}"]
    return "\n".join(lines)


def omniscient_background(setup: EpisodeSetup) -> str:
    """Everything: every profile with its secret, the relationship and every goal (for the evaluator)."""
    rel = relationship_of(setup)
    lines = [f"Scenario: {setup.scenario.scenario}", f"Relationship: {rel.name}"]
    if setup.relationship is not None and setup.relationship.background_story:
        lines.append(f"Shared history: {setup.relationship.background_story}")
    for seat, c in enumerate(setup.characters):
        lines.append(f"Participant {seat + 1}: {describe(c, None)}")
        lines.append(f"{c.name}'s goal: {setup.scenario.goals[seat]}")
    return "\n".join(lines)


def labels_for(setup: EpisodeSetup, seat: int) -> dict[str, str]:
    """Agent name -> how the viewer in ``seat`` refers to them."""
    rel = relationship_of(setup)
    n = len(setup.characters)
    return {c.name: c.name if s == seat else display_name(c, rel, s, n) for s, c in enumerate(setup.characters)}


def history_line(turn: int, label: str, action: AgentAction) -> str:
    """One past turn as an agent sees it, e.g. ``Turn #3: Ana said: "Hi."``."""
    return f"Turn #{turn}: " + render_action(label, action)


def render_text(lines: list[str], background: str, turn: int, available: list[str]) -> str:
    parts = [background, "", "Conversation so far:"]
    parts += lines or ["(nothing yet)"]
    if available == [ActionType.none.value]:
        parts += ["", f"Turn #{turn}: it is not your turn."]
    else:
        parts += ["", f"Turn #{turn}: it is your turn. Available actions: {', '.join(available)}."]
    return "\n".join(parts)


def build_observation(
    name: str, background: str, labels: dict[str, str], turns: list[Turn], turn: int, available: list[str]
) -> dict[str, Any]:
    """The observation dict (a member of ``observation_space``) for agent ``name``.

    ``background`` and ``labels`` come from ``background_for`` and ``labels_for``. The env keeps a ``SeatView``
    per seat instead, which renders each past turn once.
    """
    return SeatView(name, background, labels).observe(turns, turn, available)


class SeatView:
    """What one seat has seen so far, rendered once per turn: ``observe`` renders only the turns that are new
    since its last call (re-rendering the whole history for every agent at every step made an env step
    quadratic in the episode's length). ``turns`` must only grow between calls, as an episode's do."""

    def __init__(self, name: str, background: str, labels: dict[str, str]) -> None:
        self.name, self.background, self.labels = name, background, labels
        self._entries: list[dict[str, Any]] = []
        self._lines: list[str] = []

    def observe(self, turns: list[Turn], turn: int, available: list[str]) -> dict[str, Any]:
        if len(turns) < len(self._entries):
            raise ValueError(f"{self.name}'s history shrank ({len(self._entries)} -> {len(turns)} turns)")
        for t in turns[len(self._entries) :]:
            label = self.labels[t.agent]
            self._entries.append(
                {
                    "turn": t.turn,
                    "agent": label,
                    "action_type": ACTION_TYPES.index(t.action.action_type.value),
                    "argument": t.action.argument,
                }
            )
            self._lines.append(history_line(t.turn, label, t.action))
        return {
            "agent": self.name,
            "turn": turn,
            "background": self.background,
            "history": tuple(dict(e) for e in self._entries),  # copies: a caller may edit what it was given
            "available_actions": np.array([a in available for a in ACTION_TYPES], dtype="int8"),
            "text": render_text(self._lines, self.background, turn, available),
        }
