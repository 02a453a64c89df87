"""Generating new scenarios (from seed situations) and characters with an LLM.

- ``seeds``: reading seed situations, normalising and hashing them, the used-seed record.
- ``similarity``: the near-duplicate measure (Jaccard of word 3-shingles, threshold 0.5).
- ``core``: settings, counts, the bounded retry loop, ids and YAML output.
- ``scenarios`` / ``characters``: prompts, schemas, validation and the concurrent runs.
"""

from sotopia_env.generation.characters import generate_characters
from sotopia_env.generation.core import GenerationStats, Outcome, RunSettings
from sotopia_env.generation.scenarios import generate_scenarios
from sotopia_env.generation.seeds import Seed, SeedFileError, read_seeds
from sotopia_env.generation.similarity import DUPLICATE_THRESHOLD

__all__ = [
    "DUPLICATE_THRESHOLD",
    "GenerationStats",
    "Outcome",
    "RunSettings",
    "Seed",
    "SeedFileError",
    "generate_characters",
    "generate_scenarios",
    "read_seeds",
]
