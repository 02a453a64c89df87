"""sotopia-env: the world. Profiles, scenarios, the env, the evaluator, LLM backends.

The front door to the Python API: everything the docs' examples use::

    from sotopia_env import (
        SocialEnv, EnvConfig, AgentAction, Observation, load_library, sample_setup, make_evaluator, Evaluator,
        resolve_backend, Agent, LLMAgent, Job, run_episode, EpisodeLog, open_store
    )

Every name is loaded on first use (a module ``__getattr__``, PEP 562), so ``import sotopia_env`` stays light. Some
come from higher layers, ``agents/`` (``Agent``, ``LLMAgent``) and ``episodes/`` (``Job``, ``run_episode``,
``EpisodeLog``, ``open_store``): these lazy re-exports are the only imports that go up the layers, and
``tests/test_imports.py`` allows exactly the ones it lists, none from above ``episodes/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it
_LAZY = {
    "SocialEnv": "sotopia_env.env",
    "EnvConfig": "sotopia_env.env",
    "AgentAction": "sotopia_env.actions",
    "Observation": "sotopia_env.observation",
    "load_library": "sotopia_env.library",
    "sample_setup": "sotopia_env.sampler",
    "make_evaluator": "sotopia_env.evaluators",
    "Evaluator": "sotopia_env.evaluators.base",
    "resolve_backend": "sotopia_env.backends.resolve",
    "Agent": "sotopia_env.agents.base",
    "LLMAgent": "sotopia_env.agents.llm",
    "Job": "sotopia_env.episodes.runner",
    "run_episode": "sotopia_env.episodes.runner",
    "EpisodeLog": "sotopia_env.episodes.log",
    "open_store": "sotopia_env.episodes.store",
}
__all__ = [  # the names of _LAZY (tests/test_imports.py checks that the two agree)
    "__version__",
    "SocialEnv",
    "EnvConfig",
    "AgentAction",
    "Observation",
    "load_library",
    "sample_setup",
    "make_evaluator",
    "Evaluator",
    "resolve_backend",
    "Agent",
    "LLMAgent",
    "Job",
    "run_episode",
    "EpisodeLog",
    "open_store",
]

if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ loads them
    from sotopia_env.actions import AgentAction
    from sotopia_env.agents.base import Agent
    from sotopia_env.agents.llm import LLMAgent
    from sotopia_env.backends.resolve import resolve_backend
    from sotopia_env.env import EnvConfig, SocialEnv
    from sotopia_env.episodes.log import EpisodeLog
    from sotopia_env.episodes.runner import Job, run_episode
    from sotopia_env.episodes.store import open_store
    from sotopia_env.evaluators import make_evaluator
    from sotopia_env.evaluators.base import Evaluator
    from sotopia_env.library import load_library
    from sotopia_env.observation import Observation
    from sotopia_env.sampler import sample_setup


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'sotopia_env' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(_LAZY[name]), name)
    globals()[name] = value  # the next lookup skips __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def _register_gymnasium_env() -> None:
    from gymnasium.envs.registration import register, registry

    if "sotopia_env/Social-v0" not in registry:
        register(id="sotopia_env/Social-v0", entry_point="sotopia_env.single_agent:SingleAgentSocialEnv")


_register_gymnasium_env()
