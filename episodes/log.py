"""``EpisodeLog``: everything about one episode, as stored."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, Field, model_serializer

from sotopia_env.backends.base import Usage
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.evaluators import EpisodeRating
from sotopia_env.transcript import Turn

SCHEMA_VERSION = 1
Status = Literal["rated", "unrated", "failed"]
STATUSES: tuple[str, ...] = ("rated", "unrated", "failed")


class AgentSpec(BaseModel):
    """Who played a seat: the character's name, the model spec (if any) and the agent class."""

    name: str
    model: str
    agent_class: str


class EpisodeProtocol(BaseModel):
    """What an episode's result depends on besides its setup, agents and seed, recorded when it is played
    (``episodes.runner.play``) and rated (``episodes.runner.rate``): its part of a protocol card
    (``episodes.protocol``). None where not known (an episode stored before this record existed, or imported)."""

    version: str | None = None  # the sotopia-env that played it
    max_turns: int | None = None
    stale_turns: int | None = None
    max_agent_errors: int | None = None
    judge: str | None = None  # the evaluator's name (``llm:MODEL``, ``verifiable``, ...)
    judge_sha256: str | None = None  # its prompt template, or its rules (``episodes.protocol.judge_sha256``)
    dimensions: list[str] | None = None  # the judge's dimensions


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class EpisodeLog(BaseModel):
    """One episode. ``status`` is ``rated`` (ratings present), ``unrated`` (the
    evaluator failed; ``rating.error`` says why) or ``failed`` (the episode itself
    broke; ``error`` says why)."""

    schema_version: int = SCHEMA_VERSION
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    tag: str = ""
    combo_key: str = ""
    setup: EpisodeSetup
    agents: list[AgentSpec]
    turns: list[Turn] = Field(default_factory=list)
    termination_reason: str | None = None
    action_order: str = "round-robin"
    seed: int | None = None  # the env's reset seed (what a random action order drew from)
    rating: EpisodeRating | None = None
    status: Status
    error: str | None = None
    agent_errors: dict[str, int] = Field(default_factory=dict)
    usage: dict[str, Usage] = Field(default_factory=dict)  # per seat name, and "evaluator"
    created_at: str = Field(default_factory=_now)
    wall_seconds: float = 0.0
    protocol: EpisodeProtocol | None = None

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: Any) -> dict[str, Any]:
        data = handler(self)  # an episode without a protocol record stores as it did before the record existed
        if data.get("protocol") is None:
            data.pop("protocol", None)
        return data

    @property
    def scenario_id(self) -> str:
        return self.setup.scenario.id

    @property
    def models(self) -> list[str]:
        return [a.model for a in self.agents]

    def score(self, agent: str, dimension: str) -> float | None:
        """The agent's score on a dimension (or ``overall``); None when unrated."""
        rating = self.rating.of(agent) if self.rating is not None else None
        return None if rating is None else rating.value(dimension)


def combo_key(setup: EpisodeSetup, models: list[str], repeat: int = 0) -> str:
    """What makes two episodes 'the same job' for resuming: scenario, characters, models, repeat index."""
    return f"{setup.pairing_key}|{'|'.join(models)}#{repeat}"
