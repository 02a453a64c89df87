"""Profiles: characters, scenarios and the relationships between characters.

Everything here is a pydantic v2 model, validated on construction. The
built-in library (``sotopia_env/data``) is YAML that loads into these models.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import IntEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_serializer, model_validator

from sotopia_env.games.spec import GameSpec


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


class BargainingFacts(_Strict):
    """A sale: the learner (seat 1) buys ``item`` from the rule partner (seat 2), who hides ``reservation``.

    The learner's goal states its ``budget``; the scenario text may state the ``asking_price``. The partner
    accepts the first offer of at least ``reservation`` and leaves after ``max_rounds`` offers without a deal.
    """

    kind: Literal["bargaining"] = "bargaining"
    item: str = Field(min_length=1)  # as the partner says it: "the bike"
    asking_price: int = Field(gt=0)
    budget: int = Field(gt=0)
    reservation: int = Field(gt=0)  # hidden: the lowest price the partner accepts
    max_rounds: int = Field(default=4, ge=1)
    currency: str = "$"

    @model_validator(mode="after")
    def _prices(self) -> BargainingFacts:
        if not self.reservation < self.budget:
            raise ValueError(f"reservation {self.reservation} must be below budget {self.budget}")
        if not self.reservation < self.asking_price:
            raise ValueError(f"reservation {self.reservation} must be below asking_price {self.asking_price}")
        return self


class SchedulingFacts(_Strict):
    """A meeting time: ``slots`` are the times the talk may name (the scenario text lists them).

    The learner's goal states its own ``agent_slots``; the partner hides ``partner_slots`` (in the order it
    offers them) and agrees to a proposed slot it can do. At least one slot must suit both.
    """

    kind: Literal["scheduling"] = "scheduling"
    event: str = Field(min_length=1)  # "the team lunch"
    slots: list[str] = Field(min_length=2)
    agent_slots: list[str] = Field(min_length=1)
    partner_slots: list[str] = Field(min_length=1)  # hidden
    max_rounds: int = Field(default=5, ge=1)

    @model_validator(mode="after")
    def _slots(self) -> SchedulingFacts:
        known = {s.lower() for s in self.slots}
        if len(known) != len(self.slots):
            raise ValueError("slots must be distinct")
        for a in known:
            if any(a != b and re.search(rf"\b{re.escape(a)}\b", b) for b in known):
                raise ValueError(f"slot {a!r} is part of another slot's name; slots must not contain each other")
        for name in ("agent_slots", "partner_slots"):
            unknown = [s for s in getattr(self, name) if s.lower() not in known]
            if unknown:
                raise ValueError(f"{name}: {unknown[0]!r} is not one of slots")
        if not {s.lower() for s in self.agent_slots} & {s.lower() for s in self.partner_slots}:
            raise ValueError("agent_slots and partner_slots share no slot")
        return self


def concern_hits(text: str, words: Sequence[str]) -> list[str]:
    """The ``words`` that occur in ``text`` at the start of a word (case-insensitive, spaces normalised):
    ``insur`` occurs in "insurance", ``pay you back`` in "I'll pay you back", ``list`` not in "a playlist"."""
    flat = flat_text(text)
    return [w for w in words if re.search(rf"\b{re.escape(flat_text(w))}", flat)]


def flat_text(text: str) -> str:
    """Lower case, curly apostrophes straightened, runs of white space as one space."""
    return " ".join(text.lower().replace("\u2019", "'").split())


class PersuasionFacts(_Strict):
    """A request: the partner agrees to ``request`` only once the learner's speech has addressed its hidden
    ``concern`` (any of these words, matched at the start of a word) and the learner then asks.

    ``doubts`` are what the partner says while the concern is open, in turn: at least two, each a cue to the
    concern as a real objection is ("I really need to be able to see outside" for a window seat), never naming
    it (no concern word in a doubt: a learner must infer the concern, not echo it). The rules that stop a
    learner from naming every concern at once are in ``sotopia_env.verifiable``.
    """

    kind: Literal["persuasion"] = "persuasion"
    request: str = Field(min_length=1)  # as the partner says it: "lend you my car"
    concern: list[str] = Field(min_length=1)  # hidden
    doubts: list[str] = Field(min_length=2)  # cues to the concern, said in turn while it is open
    max_rounds: int = Field(default=5, ge=1)

    @field_validator("concern")
    @classmethod
    def _concern(cls, words: list[str]) -> list[str]:
        flat = [flat_text(w) for w in words]
        if any(not w or not re.match(r"\w", w) for w in flat):
            raise ValueError("concern words must be non-empty and start with a letter or digit")
        if len(set(flat)) != len(flat):
            raise ValueError("concern words must be distinct")
        return words

    @field_validator("doubts")
    @classmethod
    def _doubts(cls, doubts: list[str], info: ValidationInfo) -> list[str]:
        concern = info.data.get("concern") or []
        for i, doubt in enumerate(doubts):
            if not doubt.strip():
                raise ValueError(f"doubt {i} is empty")
            named = concern_hits(doubt, concern)
            if named:
                raise ValueError(
                    f"doubt {i} names the concern ({named[0]!r}); a doubt hints at the concern, never names it"
                )
        return doubts


VerifiableFacts = Annotated[BargainingFacts | SchedulingFacts | PersuasionFacts, Field(discriminator="kind")]

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
    verifiable: VerifiableFacts | None = None  # hidden facts of a verifiable scenario (seat 1 learns, seat 2 rules)
    relationships: list[list[Relationship]] | None = None  # seat x seat, where pairs differ (``relationship_at``)
    game: GameSpec | None = None  # roles, phases and rules of a game (``sotopia_env.games``)

    @field_validator("relationship", mode="before")
    @classmethod
    def _relationship(cls, value: object) -> Relationship:
        return Relationship.parse(value)  # type: ignore[arg-type]

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
