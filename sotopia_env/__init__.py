"""sotopia-env: the world. Profiles, scenarios, the env, the evaluator, LLM backends.

The front door to the Python API::

    from sotopia_env import (
        SocialEnv, EnvConfig, AgentAction, load_library, sample_setup, make_evaluator, run_episode, open_store
    )

Every name is loaded on first use (a module ``__getattr__``, PEP 562), so ``import sotopia_env`` stays light. Two
come from a higher layer, ``episodes/`` (``run_episode``, ``open_store``): this lazy re-export is the one import
that goes up the layers, and ``tests/test_imports.py`` allows exactly the modules of ``_LAZY``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it
_LAZY = {
    "SocialEnv": "sotopia_env.env",
    "EnvConfig": "sotopia_env.env",
    "AgentAction": "sotopia_env.actions",
    "load_library": "sotopia_env.library",
    "sample_setup": "sotopia_env.sampler",
    "make_evaluator": "sotopia_env.evaluators",
    "run_episode": "sotopia_env.episodes.runner",
    "open_store": "sotopia_env.episodes.store",
}
__all__ = [  # the names of _LAZY (tests/test_imports.py checks that the two agree)
    "__version__",
    "SocialEnv",
    "EnvConfig",
    "AgentAction",
    "load_library",
    "sample_setup",
    "make_evaluator",
    "run_episode",
    "open_store",
]

if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ loads them
    from sotopia_env.actions import AgentAction
    from sotopia_env.env import EnvConfig, SocialEnv
    from sotopia_env.episodes.runner import run_episode
    from sotopia_env.episodes.store import open_store
    from sotopia_env.evaluators import make_evaluator
    from sotopia_env.library import load_library
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
