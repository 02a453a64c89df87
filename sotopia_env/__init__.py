"""sotopia-env: the world. Profiles, scenarios, the env, the evaluator, LLM backends."""

from __future__ import annotations

__version__ = "0.1.0"


def _register_gymnasium_env() -> None:
    from gymnasium.envs.registration import register, registry

    if "sotopia_env/Social-v0" not in registry:
        register(id="sotopia_env/Social-v0", entry_point="sotopia_env.single_agent:SingleAgentSocialEnv")


_register_gymnasium_env()
