"""A tiny randomly initialised chat model for the training tests, built in seconds without any download.

``tiny_model_spec`` builds (once per session, with ``tiny_model.make_tiny_model``) a tokenizer trained on
the library's own prompts and a 2-layer Llama of hidden size 64. Other training test modules import it
from here; this module's test checks the model plays.
"""

from __future__ import annotations

import asyncio
from functools import lru_cache
from pathlib import Path

import pytest
from tiny_model import make_tiny_model


def _corpus():
    from sotopia_env.env import SocialEnv
    from sotopia_env.library import load_library
    from sotopia_env.prompt import render_prompt
    from sotopia_env.sampler import eligible_setups

    library = load_library()
    for scenario in sorted(library.scenarios.values(), key=lambda s: s.id):
        for setup in eligible_setups(scenario, library)[:2]:
            observations, _ = SocialEnv(setup=setup).reset()
            for observation in observations.values():
                yield from (m["content"] for m in render_prompt(observation))
    yield '{"action_type": "speak", "argument": "Hi! Do you have a moment?"} {"action_type": "leave", "argument": ""}'


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models gain nothing from threads, and on a busy machine extra threads slow torch down many times over."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@lru_cache(maxsize=1)
def _cached(root: str) -> str:
    return make_tiny_model(
        Path(root) / "tiny-llama", _corpus(), vocab_size=2048, hidden=64, heads=4, kv_heads=2,
        pad_token="<|endoftext|>", tie_embeddings=True,
    )  # fmt: skip


def tiny_model_spec(tmp_path_factory) -> str:
    """One tiny model per test session (pass pytest's ``tmp_path_factory``)."""
    return _cached(str(tmp_path_factory.getbasetemp()))


def test_tiny_model_plays_an_episode(tmp_path_factory):
    from episode_fixtures import setups

    from sotopia_env.agents.llm import LLMAgent
    from sotopia_env.backends.base import GenerationSettings
    from sotopia_env.backends.local import LocalBackend
    from sotopia_env.env import EnvConfig
    from sotopia_env.episodes.runner import play
    from sotopia_env.evaluators import RuleBasedEvaluator
    from sotopia_env.training.experts import ScriptedExpert

    backend = LocalBackend.from_spec(tiny_model_spec(tmp_path_factory))
    agent = LLMAgent(backend, GenerationSettings(temperature=1.0, max_new_tokens=16, seed=0))
    log = asyncio.run(play(setups()[0], [agent, ScriptedExpert()], RuleBasedEvaluator(), EnvConfig(max_turns=2)))
    assert log.status == "rated" and log.turns
    backend.close()
