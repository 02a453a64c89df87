"""SOTOPIA-EVAL with an LLM judge, through any backend.

The judge sees everything (every profile with its secret, every goal, the
relationship) and the full transcript, and returns, per agent and dimension,
its reasoning and an integer score, as JSON constrained by a schema where the
backend can. Scores are range-checked. After ``max_retries`` failed attempts
the episode is *unrated* with the last error: never a score of 0. A judge whose service failed (a key refused,
a server down: ``Completion.failure``) raises ``ServiceFailure`` at once: ``episodes.runner.rate`` then stores
the episode as failed, to be played again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sotopia_env.backends.base import Backend, GenerationSettings, Usage, raise_service_failure
from sotopia_env.evaluators.base import AgentRating, EpisodeContext, EpisodeRating, SyncFromAsync, validate_scores
from sotopia_env.evaluators.dimensions import SOTOPIA_DIMENSIONS, Dimension
from sotopia_env.limits import ANSWER_RETRIES
from sotopia_env.observation import omniscient_background
from sotopia_env.transcript import render_transcript

INSTRUCTIONS = """You are an impartial judge of a social interaction. You know everything about the \
participants, including their secrets and private goals. Rate each participant on every dimension below, \
giving a short reasoning first, then an integer score within the dimension's range."""


def rating_schema(seats: int, dimensions: tuple[Dimension, ...], max_reasoning: int = 400) -> dict[str, Any]:
    """``{"agent_1": {dim: {"reasoning": str, "score": int}}, ...}`` with ranges as bounds."""

    def dim_schema(d: Dimension) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "reasoning": {"type": "string", "maxLength": max_reasoning},
                "score": {"type": "integer", "minimum": d.low, "maximum": d.high},
            },
            "required": ["reasoning", "score"],
            "additionalProperties": False,
        }

    agent = {
        "type": "object",
        "properties": {d.name: dim_schema(d) for d in dimensions},
        "required": [d.name for d in dimensions],
        "additionalProperties": False,
    }
    keys = [f"agent_{i + 1}" for i in range(seats)]
    return {
        "type": "object",
        "properties": dict.fromkeys(keys, agent),
        "required": keys,
        "additionalProperties": False,
    }


def evaluation_prompt(
    context: EpisodeContext, dimensions: tuple[Dimension, ...], order: Sequence[int] | None = None
) -> list[dict[str, str]]:
    """The judge's messages; ``order``: the seats as the prompt presents them (``agent_1`` first; default as
    seated)."""
    names = presented_names(context, order)
    dims = "\n".join(f"- {d.name} ({d.low} to {d.high}): {d.description}" for d in dimensions)
    who = ", ".join(f"agent_{i + 1} = {n}" for i, n in enumerate(names))
    user = (
        f"{omniscient_background(context.setup, order)}\n\n"
        f"Transcript:\n{render_transcript(context.turns) or '(no turns)'}\n"
        f"The episode ended because: {context.termination_reason}.\n\n"
        f"Dimensions:\n{dims}\n\n"
        f"Participants: {who}.\n"
        'Answer with JSON only: {"agent_1": {"<dimension>": {"reasoning": "...", "score": <int>}, ...}, ...}'
    )
    return [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": user}]


def presented_names(context: EpisodeContext, order: Sequence[int] | None = None) -> list[str]:
    """The agents' names in the order the prompt presents them: ``agent_1`` is the first."""
    names = context.setup.agent_names
    return names if order is None else [names[seat] for seat in order]


def parse_ratings(text: str, names: list[str], dimensions: tuple[Dimension, ...]) -> dict[str, AgentRating]:
    """Validate the judge's JSON; raise ValueError naming the first problem."""
    ratings, missing = parse_each(text, names, dimensions)
    if missing:
        raise ValueError(next(iter(missing.values())))
    return ratings


def parse_each(
    text: str, names: list[str], dimensions: tuple[Dimension, ...]
) -> tuple[dict[str, AgentRating], dict[str, str]]:
    """The agents the reply rates validly, and why each other one is not; ValueError when the reply as a whole
    is not a JSON object."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("the judge's reply holds no JSON object")
    try:
        data = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise ValueError(f"the judge's reply is malformed JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ValueError("the judge's reply is not a JSON object")
    ratings, missing = {}, {}
    for i, name in enumerate(names):
        raw = data.get(f"agent_{i + 1}", data.get(name))
        if not isinstance(raw, dict):
            missing[name] = f"no ratings for agent_{i + 1} ({name})"
            continue
        try:
            ratings[name] = validate_scores(raw, dimensions, name)
        except ValueError as exc:
            missing[name] = str(exc)
    return ratings, missing


PARTIAL_FROM_SEATS = 3  # with two seats an episode is rated whole or not at all, as before


class LLMEvaluator(SyncFromAsync):
    """The SOTOPIA-EVAL judge on any backend: every seat rated on every dimension, in one structured reply.

    A reply that fails validation is retried. With three seats or more, once retries are spent, the best reply's
    valid ratings are kept and the other seats are unrated with the reason (``EpisodeRating.unrated``); with
    two, the episode is unrated. No seat is ever scored 0 for a reply that could not be read.
    """

    def __init__(
        self,
        backend: Backend,
        dimensions: tuple[Dimension, ...] = SOTOPIA_DIMENSIONS,
        max_retries: int = ANSWER_RETRIES,
        settings: GenerationSettings | None = None,
        constrained: bool = True,
        max_reasoning: int = 400,
        reverse_seats: bool = False,
    ) -> None:
        """``max_reasoning`` caps each reasoning (characters) in the constrained schema; the default token budget
        follows it. ``reverse_seats`` presents the seats last to first (``agent_1`` is the last seat), to measure
        a judge's seat bias (``episodes.judge_agreement``); ratings stay keyed by each agent's name."""
        if not dimensions:
            raise ValueError("an evaluator needs at least one dimension")
        self.backend = backend
        self.dimensions = tuple(dimensions)
        self.max_retries = max_retries
        self.max_reasoning = max_reasoning
        per_score = max_reasoning // 3 + 30  # tokens: the reasoning (~3 characters a token) and the JSON around it
        self.settings = settings or GenerationSettings(
            temperature=0.0, max_new_tokens=per_score * len(self.dimensions) * 2
        )
        self.constrained = constrained
        self.reverse_seats = reverse_seats
        self.usage = Usage()

    @property
    def name(self) -> str:
        return f"llm:{self.backend.model}"

    def seat_order(self, seats: int) -> list[int]:
        """The seats in the order the prompt presents them."""
        return list(range(seats))[::-1] if self.reverse_seats else list(range(seats))

    async def aevaluate(self, context: EpisodeContext) -> EpisodeRating:
        order = self.seat_order(len(context.setup.characters))
        names = presented_names(context, order)  # agent_k of the reply is names[k - 1]
        schema = rating_schema(len(names), self.dimensions, self.max_reasoning) if self.constrained else None
        request = self.settings.request(evaluation_prompt(context, self.dimensions, order), schema)
        problems: list[str] = []
        usage = Usage()
        partial: tuple[dict[str, AgentRating], dict[str, str]] = ({}, {})
        for attempt in range(1, self.max_retries + 2):
            (completion,) = await self.backend.generate([request])
            usage.record(completion)
            self.usage.record(completion)
            raise_service_failure(completion)  # the judge's service failed: the episode is failed, never rated
            if completion.error is not None:
                problems.append(f"backend error: {completion.error}")
                continue
            try:
                ratings, missing = parse_each(completion.text, names, self.dimensions)
            except ValueError as exc:
                problems.append(str(exc))
                continue
            if not missing:
                return EpisodeRating(evaluator=self.name, ratings=ratings, attempts=attempt, usage=usage)
            problems.append(next(iter(missing.values())))
            if len(names) >= PARTIAL_FROM_SEATS and len(ratings) > len(partial[0]):
                partial = ratings, missing
        self.usage.errors += 1
        if partial[0]:  # three seats or more: who could be rated is, the others are unrated (never 0)
            unrated = {n: f"no valid rating after {len(problems)} attempts: {why}" for n, why in partial[1].items()}
            return EpisodeRating(
                evaluator=self.name, ratings=partial[0], unrated=unrated, attempts=len(problems), usage=usage
            )
        return EpisodeRating(
            evaluator=self.name,
            error=f"no valid rating after {len(problems)} attempts: {problems[-1]}",
            attempts=len(problems),
            usage=usage,
        )
