"""Profiles: characters, scenarios and the relationships between characters.

Everything here is a pydantic v2 model, validated on construction. The
built-in library (``sotopia_env/data``) is YAML that loads into these models.
"""

from __future__ import annotations

import re
from enum import IntEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, field_validator, model_serializer, model_validator

from sotopia_env.games.spec import GameSpec
from sotopia_env.kinds.base import VerifiableFacts
from sotopia_env.kinds.registry import validate_facts


class Relationship(IntEnum):
    """How well two characters know each other (SOTOPIA's 0..5 scale)."""

    stranger = 0
    know_by_name = 1
    acquaintance = 2
    friend = 3
    romantic_relationship = 4
    family_member = 5

    @classmethod
    def parse(cls, value: int | str | Relationship) -> Relationship:
        """Accept a member, its integer value or its name."""
        if isinstance(value, cls):
            return value
        if isinstance(value, int):
            return cls(value)
        key = str(value).strip().lower().replace(" ", "_").replace("-", "_")
        if key.isdigit():
            return cls(int(key))
        try:
            return cls[key]
        except KeyError:
            names = ", ".join(m.name for m in cls)
            raise ValueError(f"unknown relationship {value!r} (expected one of: {names})") from None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class BigFive(_Strict):
    """Big Five personality, each trait a short free-text level ("high", "low", ...)."""

    openness: str
    conscientiousness: str
    extraversion: str
    agreeableness: str
    neuroticism: str


class Character(_Strict):
    """A person who can take a seat in a scenario."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    first_name: str = Field(min_length=1)
    last_name: str = Field(min_length=1)
    age: int = Field(ge=0, le=120)
    gender: str
    pronouns: str
    occupation: str
    public_info: str = ""
    big_five: BigFive
    moral_values: list[str] = Field(default_factory=list)
    schwartz_values: list[str] = Field(default_factory=list)
    decision_making_style: str = ""
    secret: str = ""

    @property
    def name(self) -> str:
        return f"{self.first_name} {self.last_name}"


class AgentConstraint(_Strict):
    """Who may take one seat of a scenario. Ages are inclusive."""

    min_age: int = Field(default=0, ge=0)
    max_age: int = Field(default=120, le=120)
    occupations: list[str] | None = None

    @model_validator(mode="after")
    def _age_range(self) -> AgentConstraint:
        if self.min_age > self.max_age:
            raise ValueError(f"min_age {self.min_age} > max_age {self.max_age}")
        return self

    def admits(self, character: Character) -> bool:
        if not self.min_age <= character.age <= self.max_age:
            return False
        if self.occupations is None:
            return True
        wanted = {o.lower() for o in self.occupations}
        return character.occupation.lower() in wanted


Split = Literal["train", "dev", "test"]
MAX_SEATS = 8
VERIFIABLE_TAG = "verifiable"
MULTI_PARTY_TAG = "multi-party"  # every scenario with three seats or more carries it (checked on load)
GAME_TAG = "game"  # every scenario with a game section carries it (checked on load)


_HINT_TAGS = ("extra_info", "strategy_hint")


class Scenario(_Strict):
    """A situation with one private goal per seat.

    Goals may carry ``<extra_info>`` and ``<strategy_hint>`` sections; a goal is
    only ever shown to its own agent (and to the evaluator).
    """

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    codename: str
    scenario: str = Field(min_length=10)
    goals: list[str] = Field(min_length=2)
    relationship: Relationship
    constraints: list[AgentConstraint] | None = None
    source: str = "sotopia-env"
    tags: list[str] = Field(default_factory=list)
    split: Split = "train"
    verifiable: SerializeAsAny[VerifiableFacts] | None = None  # hidden facts: seat 1 learns, seat 2 follows rules
    relationships: list[list[Relationship]] | None = None  # seat x seat, where pairs differ (``relationship_at``)
    game: GameSpec | None = None  # roles, phases and rules of a game (``sotopia_env.games``)

    @property
    def topic(self) -> str:
        """What the scenario is about, in a few words (its codename as words: ``inherited lake cabin``)."""
        return self.codename.replace("_", " ").strip()

    @field_validator("relationship", mode="before")
    @classmethod
    def _relationship(cls, value: object) -> Relationship:
        return Relationship.parse(value)  # type: ignore[arg-type]

    @field_validator("verifiable", mode="before")
    @classmethod
    def _facts(cls, value: object) -> object:
        return validate_facts(value)  # the model of its kind, from the registry (``sotopia_env.kinds``)

    @field_validator("relationships", mode="before")
    @classmethod
    def _matrix(cls, value: object) -> object:
        if isinstance(value, list):
            return [[Relationship.parse(v) for v in row] if isinstance(row, list) else row for row in value]
        return value

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: Any) -> dict[str, Any]:
        data = handler(self)  # a two-seat scenario stores as it did before these fields existed
        for key in ("relationships", "game"):
            if data.get(key) is None:
                data.pop(key, None)
        return data

    @field_validator("goals")
    @classmethod
    def _goals(cls, goals: list[str]) -> list[str]:
        for i, goal in enumerate(goals):
            if not goal.strip():
                raise ValueError(f"goal {i} is empty")
            for tag in _HINT_TAGS:
                if goal.count(f"<{tag}>") != goal.count(f"</{tag}>"):
                    raise ValueError(f"goal {i} has an unbalanced <{tag}> tag")
        return goals

    @model_validator(mode="after")
    def _constraints_per_seat(self) -> Scenario:
        if self.constraints is not None and len(self.constraints) != len(self.goals):
            raise ValueError(f"constraints has {len(self.constraints)} entries but there are {len(self.goals)} goals")
        if self.verifiable is not None and len(self.goals) != 2:
            raise ValueError("a verifiable scenario has exactly two seats (the learner, then the rule partner)")
        if len(self.goals) > MAX_SEATS:
            raise ValueError(f"goals: at most {MAX_SEATS} seats, not {len(self.goals)}")
        n = len(self.goals)
        if (n >= 3) != (MULTI_PARTY_TAG in self.tags):
            raise ValueError(f"tags: '{MULTI_PARTY_TAG}' is for scenarios of three seats or more (this has {n})")
        if (self.game is not None) != (GAME_TAG in self.tags):
            raise ValueError(f"tags: '{GAME_TAG}' goes with a 'game' section, and only with one")
        if self.relationships is not None:
            if len(self.relationships) != n or any(len(row) != n for row in self.relationships):
                raise ValueError(f"relationships: must be a {n} x {n} matrix, one row and column per seat")
            for a in range(n):
                for b in range(a + 1, n):
                    if self.relationships[a][b] != self.relationships[b][a]:
                        raise ValueError(f"relationships: seats {a} and {b} differ ({a},{b} vs {b},{a})")
        if self.game is not None:
            if len(self.game.seats) != n:
                raise ValueError(f"game.seats: {len(self.game.seats)} roles for {n} seats (one goal per seat)")
            if (
                min(self.relationship_at(a, b) for a in range(n) for b in range(n) if a != b)
                < Relationship.know_by_name
            ):
                raise ValueError("relationship: a game's players know each other by name at least (know_by_name)")
        return self

    def relationship_at(self, a: int, b: int) -> Relationship:
        """How seats ``a`` and ``b`` know each other: the matrix's entry, else ``relationship``."""
        return self.relationship if self.relationships is None else self.relationships[a][b]

    @property
    def num_agents(self) -> int:
        return len(self.goals)

    @property
    def hard(self) -> bool:
        return "hard" in self.tags


def strip_hints(goal: str) -> str:
    """The goal without its ``<extra_info>``/``<strategy_hint>`` sections."""
    for tag in _HINT_TAGS:
        goal = re.sub(rf"<{tag}>.*?</{tag}>", "", goal, flags=re.S)
    return " ".join(goal.split())


class RelationshipProfile(_Strict):
    """Two characters who know each other, how, and their shared story."""

    characters: tuple[str, str]
    relationship: Relationship
    background_story: str = ""

    @field_validator("relationship", mode="before")
    @classmethod
    def _relationship(cls, value: object) -> Relationship:
        return Relationship.parse(value)  # type: ignore[arg-type]

    @field_validator("characters")
    @classmethod
    def _distinct(cls, pair: tuple[str, str]) -> tuple[str, str]:
        if pair[0] == pair[1]:
            raise ValueError(f"a character cannot be in a relationship with itself ({pair[0]})")
        return pair

    def involves(self, a: str, b: str) -> bool:
        return {a, b} == set(self.characters)
