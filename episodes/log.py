"""``EpisodeLog``: everything about one episode, as stored."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, Field

from sotopia_env.backends.base import Usage
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.evaluation import EpisodeRating
from sotopia_env.transcript import Turn

SCHEMA_VERSION = 1
Status = Literal["rated", "unrated", "failed"]
STATUSES: tuple[str, ...] = ("rated", "unrated", "failed")


class AgentSpec(BaseModel):
    """Who played a seat: the character's name, the model spec (if any) and the agent class."""

    name: str
    model: str
    agent_class: str


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
