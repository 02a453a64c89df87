"""The fields jobs share, with their defaults and limits declared once: ``run``, ``benchmark`` (the CLI's and
``POST /api/benchmarks``, one ``BenchmarkSpec``) and ``POST /api/simulations`` all take them from here.

The pydantic types (``MaxTurns``, ``Concurrency``, ``Seed``, ``Tag``) check a value where it enters (a spec, an
HTTP body); the CLI's options take their defaults and ranges from the same constants.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sotopia_env.limits import DEFAULT_MAX_TURNS, MAX_TURNS_LIMIT

DEFAULT_MODEL = "smollm2-135m"  # the embedded model: no key, no server
DEFAULT_CONCURRENCY = 8  # episodes in flight at once
MAX_CONCURRENCY = 100_000
MAX_SEED = 2**31 - 1
TAG_PATTERN = r"^[A-Za-z0-9_.:\-]+$"

MaxTurns = Annotated[int, Field(ge=1, le=MAX_TURNS_LIMIT, description="Truncate an episode after this many turns.")]
Concurrency = Annotated[int, Field(ge=1, le=MAX_CONCURRENCY, description="Episodes in flight at once.")]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
Tag = Annotated[str, Field(min_length=1, max_length=100, pattern=TAG_PATTERN, description="The episodes' tag.")]

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MAX_TURNS",
    "DEFAULT_MODEL",
    "MAX_CONCURRENCY",
    "MAX_SEED",
    "MAX_TURNS_LIMIT",
    "Concurrency",
    "MaxTurns",
    "Seed",
    "Tag",
]
