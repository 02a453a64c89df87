"""Shared fixtures. Embedded-model tests are marked ``model``; Redis tests skip loudly without REDIS_URL."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("SOTOPIA_SHARED", REPO.parent / "shared"))


@pytest.fixture(scope="session")
def embedded_model_path() -> str:
    """The embedded SmolLM2-135M, pulled into the cache on first use (about a minute, once)."""
    from sotopia_env.models import resolve_model_path

    return resolve_model_path("smollm2-135m", progress=False)


@pytest.fixture(scope="session")
def library():
    from sotopia_env.library import load_library

    return load_library()


@pytest.fixture
def two_friends(library):
    """A setup whose relationship is ``friend``."""
    from sotopia_env.sampler import eligible_setups

    scenario = next(
        s for s in sorted(library.scenarios.values(), key=lambda s: s.id) if s.relationship.name == "friend"
    )
    return eligible_setups(scenario, library)[0]


@pytest.fixture
def setup_at():
    """Build a setup for a scenario whose relationship is overridden (for visibility tests)."""

    def build(library, relationship: str):
        from sotopia_env.profiles import Relationship
        from sotopia_env.sampler import EpisodeSetup

        scenario = sorted(library.scenarios.values(), key=lambda s: s.id)[0]
        scenario = scenario.model_copy(update={"relationship": Relationship.parse(relationship), "constraints": None})
        chars = sorted(library.characters.values(), key=lambda c: c.id)[:2]
        return EpisodeSetup(scenario=scenario, characters=chars)

    return build


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer llama with random weights (peaked logits: greedy choices are far from ties) and a 300-token
    byte-level BPE tokenizer, saved as a model dir."""
    from tiny_model import make_tiny_model

    corpus = ['Hello, how are you today? {"action_type": "speak", "argument": "hi there"}'] * 5
    path = tmp_path_factory.mktemp("tiny-llama")
    make_tiny_model(
        path, corpus, vocab_size=320, hidden=32, heads=2, kv_heads=1, pad_token="<|im_end|>", max_positions=512,
        initializer_range=0.2,
    )  # fmt: skip
    return path
