"""The evaluator interface: what an evaluator sees (``EpisodeContext``), what it returns (``EpisodeRating``), and
the one safe rating call.

An evaluator rates each agent of a finished episode on a set of dimensions (``evaluators.dimensions``).
A rating that could not be obtained is *unrated*: ``EpisodeRating.error`` says
why and ``ratings`` is ``None``. It is never a score of 0.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, Field, model_serializer, model_validator

from sotopia_env.backends.base import ServiceFailure, Usage
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.evaluators.dimensions import Dimension
from sotopia_env.transcript import Turn

T = TypeVar("T")


class DimensionScore(BaseModel):
    score: int
    reasoning: str = ""


class AgentRating(BaseModel):
    scores: dict[str, DimensionScore]
    success: bool | None = None  # set by judges that check an outcome (the verifiable judge), else None

    @property
    def overall(self) -> float:
        return sum(s.score for s in self.scores.values()) / len(self.scores)

    def value(self, dimension: str) -> float:
        if dimension == "overall":
            return self.overall
        return float(self.scores[dimension].score)


class EpisodeRating(BaseModel):
    """Per-agent ratings, or the error that left the episode unrated.

    ``unrated`` names the agents a judge could not rate, with why, when it rated the others (an LLM judge's
    reply that rates some seats validly, with three seats or more): those agents have no entry in ``ratings``.
    """

    evaluator: str
    ratings: dict[str, AgentRating] | None = None
    error: str | None = None
    attempts: int = 1
    usage: Usage = Field(default_factory=Usage)  # this rating's LLM calls, tokens and seconds
    unrated: dict[str, str] | None = None

    @model_validator(mode="after")
    def _one_of(self) -> EpisodeRating:
        if (self.ratings is None) == (self.error is None):
            raise ValueError("an EpisodeRating has either ratings or an error")
        return self

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: Any) -> dict[str, Any]:
        data = handler(self)  # a rating of every seat stores as it did before ``unrated`` existed
        if data.get("unrated") is None:
            data.pop("unrated", None)
        return data

    @property
    def rated(self) -> bool:
        return self.ratings is not None

    def of(self, agent: str) -> AgentRating | None:
        """The agent's rating; None when the episode, or this agent, is unrated."""
        return None if self.ratings is None else self.ratings.get(agent)

    def reward(self, agent: str, dimension: str = "goal") -> float:
        """The agent's score on ``dimension`` (or ``overall``); NaN when unrated."""
        rating = self.of(agent)
        return math.nan if rating is None else rating.value(dimension)


class EpisodeContext(BaseModel):
    """What an evaluator sees: the whole setup (secrets and goals included) and the transcript."""

    setup: EpisodeSetup
    turns: list[Turn]
    termination_reason: str


@runtime_checkable
class Evaluator(Protocol):
    """What rates a finished episode: ``aevaluate(context)`` (or ``evaluate``) returns an ``EpisodeRating``, per
    agent each of ``dimensions`` with its reasoning, or an unrated one with its error, never a silent 0. ``name``
    is stored with the ratings; ``make_evaluator(spec)`` builds the built-in ones."""

    name: str
    dimensions: tuple[Dimension, ...]

    async def aevaluate(self, context: EpisodeContext) -> EpisodeRating: ...

    def evaluate(self, context: EpisodeContext) -> EpisodeRating: ...


def failed_rating(evaluator: object, exc: BaseException) -> EpisodeRating:
    """The unrated result of an evaluator that raised: the episode keeps its transcript, never a score of 0."""
    return EpisodeRating(evaluator=getattr(evaluator, "name", "?"), error=f"{type(exc).__name__}: {exc}")


async def aevaluate_safely(
    evaluator: Evaluator, context: EpisodeContext, raise_service_failures: bool = False
) -> EpisodeRating:
    """The one rating call (``episodes.runner.rate`` and the env's terminal step): never raises, except a
    ``ServiceFailure`` where ``raise_service_failures`` (the runner's: such an episode is failed, not unrated).

    An evaluator that raises leaves the episode unrated with the error, never lost and never a score of 0.
    """
    try:
        return await evaluator.aevaluate(context)
    except Exception as exc:
        if raise_service_failures and isinstance(exc, ServiceFailure):
            raise
        return failed_rating(evaluator, exc)


def evaluate_safely(evaluator: Evaluator, context: EpisodeContext) -> EpisodeRating:
    """``aevaluate_safely`` from synchronous code (``SocialEnv``'s last step), also inside a running event loop."""
    return run_to_completion(aevaluate_safely(evaluator, context))


def run_to_completion(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to its end from synchronous code; inside a running event loop, in a helper thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


class SyncFromAsync:
    """Mixin: ``evaluate`` runs ``aevaluate`` to completion, also from inside a running event loop."""

    def evaluate(self, context: EpisodeContext) -> EpisodeRating:
        return run_to_completion(self.aevaluate(context))  # type: ignore[attr-defined]


def validate_scores(raw: dict, dimensions: tuple[Dimension, ...], agent: str) -> AgentRating:
    """Check one agent's raw ``{dim: {"score", "reasoning"}}``; raise ValueError naming the problem."""
    scores = {}
    for dim in dimensions:
        entry = raw.get(dim.name)
        if not isinstance(entry, dict) or "score" not in entry:
            raise ValueError(f"{agent}: missing dimension '{dim.name}'")
        score = entry["score"]
        if isinstance(score, bool) or not isinstance(score, int | float) or float(score) != int(score):
            raise ValueError(f"{agent}: '{dim.name}' score {score!r} is not an integer")
        if not dim.low <= int(score) <= dim.high:
            raise ValueError(f"{agent}: '{dim.name}' score {score} is outside {dim.low}..{dim.high}")
        scores[dim.name] = DimensionScore(score=int(score), reasoning=str(entry.get("reasoning", "")))
    return AgentRating(scores=scores)
