"""What one agent observes at one turn.

The env returns observations as plain dicts that live in ``observation_space``
(PettingZoo/Gymnasium need that); ``Observation`` is the same data as a typed
model, which agents receive. ``Observation.from_env(obs)`` converts.

``Observation`` is the one typed view of a seat, under every way of playing one (``SocialEnv``, the Gymnasium
env, TRL's environment, verl's loop, the OpenEnv server). Everything else is a rendering of it: its ``text`` (the
env's), the prompt messages (``sotopia_env.prompt.render_prompt``), the tools' answers (what is new since the
seat's last move) and the OpenEnv payload (``training.openenv_client.SeatObservation``: ``ObservationData``,
the view without its ``text``, plus those renderings).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel

from sotopia_env.actions import ACTION_TYPES, ActionType, AgentAction
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.profiles import Relationship
from sotopia_env.transcript import MODERATOR, Turn, render_action, render_move
from sotopia_env.visibility import describe, display_name


class HistoryEntry(BaseModel):
    turn: int
    agent: str  # as the viewer knows them
    action_type: str
    argument: str
    to: list[str] = []  # an addressed move's recipients, as the viewer knows them

    def render(self) -> str:
        return f"Turn #{self.turn}: " + render_move(self.agent, ActionType(self.action_type), self.argument, self.to)

    def as_action(self) -> AgentAction:
        return AgentAction(action_type=ActionType(self.action_type), argument=self.argument)


class ObservationData(BaseModel):
    """One agent's view at one turn, as data: an ``Observation`` without its text rendering (the fields the
    OpenEnv payload carries as they are). ``recipients``: whom it may address (``AgentAction.to``), given where two
    or more others are present; ``phase`` and ``choices``: a game's phase and the arguments its move must take
    one of (a vote: ``vote for <name>``), empty outside games."""

    agent: str
    turn: int
    background: str
    history: list[HistoryEntry]
    available_actions: list[str]
    recipients: list[str] = []
    phase: str = ""
    choices: list[str] = []
    topic: str = ""  # what the scenario is about, in a few words (``Scenario.topic``); empty where unknown


class Observation(ObservationData):
    """One agent's view at one turn (``ObservationData``'s fields) and ``text``, the env's rendering of it: the
    background, the conversation so far and whose turn it is (``render_text``)."""

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
                to=list(h.get("to", ())),
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
            recipients=list(obs.get("recipients", ())),
            phase=str(obs.get("phase", "")),
            choices=list(obs.get("choices", ())),
            topic=str(obs.get("topic", "")),
        )

    @classmethod
    def of(cls, data: ObservationData) -> Observation:
        """``data``'s view with its text, rendered as the env renders it."""
        lines = [entry.render() for entry in data.history]
        text = render_text(lines, data.background, data.turn, data.available_actions, data.choices)
        return cls(**data.model_dump(include=set(ObservationData.model_fields)), text=text)

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
    """The relationship of a two-seat setup (of seats 1 and 2 in a larger one)."""
    return setup.relationship_between(0, 1)


def background_for(setup: EpisodeSetup, seat: int) -> str:
    """The background one agent sees: scenario, itself, what it may know of each other seat (following their
    pair's relationship), its game role where there is one, its goal."""
    me = setup.characters[seat]
    n = len(setup.characters)
    lines = [
        f"Scenario: {setup.scenario.scenario}",
        "",
        f"You are {me.name}. {describe(me, None)}",
    ]
    who = "The other participant" if n == 2 else "Another participant"
    for other_seat, other in enumerate(setup.characters):
        if other_seat == seat:
            continue
        rel = setup.relationship_between(seat, other_seat)
        label = display_name(other, rel, other_seat, n)
        lines.append(f"{who} ({label}), {_RELATION_PHRASES[rel]}: {describe(other, rel)}")
        profile = setup.profile_between(seat, other_seat)
        if profile is not None and profile.background_story and rel >= Relationship.acquaintance:
            lines.append(f"Your shared history{'' if n == 2 else f' with {label}'}: {profile.background_story}")
    if setup.scenario.game is not None:
        lines += ["", *role_lines(setup, seat)]
    lines += ["", f"Your goal: {setup.scenario.goals[seat]}"]
    return "\n".join(lines)


def role_lines(setup: EpisodeSetup, seat: int) -> list[str]:
    """What a game tells one player in private: its role and team, its teammates where the role knows them,
    its secret (a word game's word) and its reserve (a negotiation's)."""
    game = setup.scenario.game
    assert game is not None
    role = game.role(seat)
    lines = [f"Your role: {role.name} (team {role.team})."]
    if role.knows_team:
        mates = [c.name for s, c in enumerate(setup.characters) if s != seat and game.role(s).team == role.team]
        lines.append(f"Your teammates: {', '.join(mates)}." if mates else "You have no teammates.")
    if role.secret:
        lines.append(f"Your secret word: {role.secret}.")
    if role.reserve is not None:
        lines.append(f"Without a deal you get {role.reserve} (your reserve; the others do not know it).")
    return lines


def omniscient_background(setup: EpisodeSetup, order: Sequence[int] | None = None) -> str:
    """Everything: every profile with its secret, the relationships, every goal and role (for the evaluator).
    ``order``: the seats in the order they are presented (default: as seated)."""
    n = len(setup.characters)
    seats = list(range(n)) if order is None else list(order)
    lines = [f"Scenario: {setup.scenario.scenario}"]
    if n == 2:
        lines.append(f"Relationship: {relationship_of(setup).name}")
        if setup.relationship is not None and setup.relationship.background_story:
            lines.append(f"Shared history: {setup.relationship.background_story}")
    else:
        names = setup.agent_names
        pairs = [
            f"{names[a]} and {names[b]}: {setup.relationship_between(a, b).name}"
            for i, a in enumerate(seats)
            for b in seats[i + 1 :]
        ]
        lines.append(f"Relationships: {'; '.join(pairs)}")
    for position, seat in enumerate(seats):
        c = setup.characters[seat]
        lines.append(f"Participant {position + 1}: {describe(c, None)}")
        if setup.scenario.game is not None:
            lines.append(f"{c.name}'s role: " + " ".join(role_lines(setup, seat)))
        lines.append(f"{c.name}'s goal: {setup.scenario.goals[seat]}")
    return "\n".join(lines)


def labels_for(setup: EpisodeSetup, seat: int) -> dict[str, str]:
    """Agent name -> how the viewer in ``seat`` refers to them (a game's master is ``MODERATOR`` to all)."""
    n = len(setup.characters)
    labels = {
        c.name: c.name if s == seat else display_name(c, setup.relationship_between(seat, s), s, n)
        for s, c in enumerate(setup.characters)
    }
    return labels | {MODERATOR: MODERATOR}


def history_line(turn: int, label: str, action: AgentAction, to: list[str] | None = None) -> str:
    """One past turn as an agent sees it, e.g. ``Turn #3: Ana said: "Hi."``."""
    return f"Turn #{turn}: " + render_action(label, action, to)


def render_text(lines: list[str], background: str, turn: int, available: list[str], choices: Sequence[str] = ()) -> str:
    parts = [background, "", "Conversation so far:"]
    parts += lines or ["(nothing yet)"]
    if available == [ActionType.none.value]:
        parts += ["", f"Turn #{turn}: it is not your turn."]
    else:
        parts += ["", f"Turn #{turn}: it is your turn. Available actions: {', '.join(available)}."]
        if choices:
            parts.append(f"Choose one of: {'; '.join(choices)}.")
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

    def __init__(self, name: str, background: str, labels: dict[str, str], topic: str = "") -> None:
        self.name, self.background, self.labels, self.topic = name, background, labels, topic
        self._entries: list[dict[str, Any]] = []
        self._lines: list[str] = []
        self._seen = 0  # turns looked at (some may not have been observed)

    @classmethod
    def of(cls, setup: EpisodeSetup, seat: int) -> SeatView:
        """The view of ``seat`` in ``setup``: its name, background, labels for the others, and the topic."""
        name = setup.agent_names[seat]
        return cls(name, background_for(setup, seat), labels_for(setup, seat), setup.scenario.topic)

    def observe(
        self,
        turns: list[Turn],
        turn: int,
        available: list[str],
        recipients: Sequence[str] = (),
        phase: str = "",
        choices: Sequence[str] = (),
    ) -> dict[str, Any]:
        """``recipients`` and ``choices`` are as this seat knows the others (labels)."""
        if len(turns) < self._seen:
            raise ValueError(f"{self.name}'s history shrank ({self._seen} -> {len(turns)} turns)")
        for t in turns[self._seen :]:
            if not t.seen_by(self.name):
                continue  # a move addressed to others, or another team's channel: never observed
            label = self.labels[t.agent]
            to = [self.labels[n] for n in t.action.to or ()]
            self._entries.append(
                {
                    "turn": t.turn,
                    "agent": label,
                    "action_type": ACTION_TYPES.index(t.action.action_type.value),
                    "argument": t.action.argument,
                    "to": tuple(to),
                }
            )
            self._lines.append(history_line(t.turn, label, t.action, to))
        self._seen = len(turns)
        return {
            "agent": self.name,
            "turn": turn,
            "background": self.background,
            "history": tuple(dict(e) for e in self._entries),  # copies: a caller may edit what it was given
            "available_actions": np.array([a in available for a in ACTION_TYPES], dtype="int8"),
            "text": render_text(self._lines, self.background, turn, available, choices),
            "recipients": tuple(recipients),
            "phase": phase,
            "choices": tuple(choices),
            "topic": self.topic,
        }
