"""The fields jobs share, with their defaults and limits declared once: ``run``, ``benchmark`` (the CLI's and
``POST /api/benchmarks``, one ``BenchmarkSpec``) and ``POST /api/simulations`` all take them from here.

The pydantic types (``MaxTurns``, ``Concurrency``, ``Seed``, ``Tag``) check a value where it enters (a spec, an
HTTP body); the CLI's options take their defaults, ranges and help from the same constants. The turn limit and
the concurrency are declared lower still, in ``sotopia_env.limits``, for the env and the generators.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

from sotopia_env.limits import DEFAULT_CONCURRENCY, DEFAULT_MAX_TURNS, MAX_CONCURRENCY, MAX_TURNS_LIMIT
from sotopia_env.specs import DEFAULT_MODEL  # the embedded model: no key, no server (declared once, there)

MAX_SEED = 2**31 - 1
DEFAULT_RETRY_SECONDS = 60.0  # a failed store write is retried this long, then spilled (episodes.store_writer)
MAX_EPISODES_PER_SCENARIO = 10_000  # a benchmark's character pairings per scenario
MAX_CALLS = 1_000_000  # a benchmark's cap on the LLM calls in flight per model
EPISODES_PER_SCENARIO_HELP = "Character pairings per scenario (each in both seats)."
MAX_CALLS_HELP = "Cap the LLM calls in flight per model (for rate-limited APIs). Default: one per episode in flight."
HTTP_MAX_TURNS = 200  # serve's default caps on what an HTTP request may ask (server.caps; serve --max-turns ...)
HTTP_EPISODES_PER_SCENARIO = 100
HTTP_MAX_PER_CLIENT = 64  # simulations and benchmarks queued or running per client (serve --max-per-client)
DEFAULT_TURN_TIMEOUT = 300.0  # seconds a person's seat has for a move, then it is 'none' (serve --turn-timeout)
TAG_PATTERN = r"^[A-Za-z0-9_.:\-]+$"


def not_a_bool(value: object) -> object:
    """Refuse ``true``/``false`` where a number is asked (pydantic would take them as 1 and 0)."""
    if isinstance(value, bool):
        raise ValueError(f"a whole number is expected, not {str(value).lower()}")
    return value


WholeNumber = BeforeValidator(not_a_bool)
# (the validator after the Field: before it, pydantic's JSON schema says "ge"/"le", not "minimum"/"maximum")
MaxTurns = Annotated[
    int, Field(ge=1, le=MAX_TURNS_LIMIT, description="Truncate an episode after this many turns."), WholeNumber
]
Concurrency = Annotated[int, Field(ge=1, le=MAX_CONCURRENCY, description="Episodes in flight at once."), WholeNumber]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED), WholeNumber]
Tag = Annotated[str, Field(min_length=1, max_length=100, pattern=TAG_PATTERN, description="The episodes' tag.")]

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MAX_TURNS",
    "DEFAULT_MODEL",
    "DEFAULT_RETRY_SECONDS",
    "DEFAULT_TURN_TIMEOUT",
    "EPISODES_PER_SCENARIO_HELP",
    "HTTP_EPISODES_PER_SCENARIO",
    "HTTP_MAX_PER_CLIENT",
    "HTTP_MAX_TURNS",
    "MAX_CALLS",
    "MAX_CALLS_HELP",
    "MAX_CONCURRENCY",
    "MAX_EPISODES_PER_SCENARIO",
    "MAX_SEED",
    "MAX_TURNS_LIMIT",
    "Concurrency",
    "MaxTurns",
    "Seed",
    "Tag",
    "WholeNumber",
]
