"""The agent protocol. ``Usage`` (LLM cost accounting) lives with the backends."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from sotopia_env.actions import AgentAction
from sotopia_env.backends.base import Usage
from sotopia_env.episode_setup import EpisodeSetup, reset_for_episode
from sotopia_env.observation import Observation


@runtime_checkable
class Agent(Protocol):
    """Anything that can take a seat: given what it observes, it chooses an action."""

    async def act(self, observation: Observation) -> AgentAction: ...


def reset_agent(
    agent: object, setup: EpisodeSetup | None = None, seat: int | None = None, seed: int | None = None
) -> None:
    """Call the agent's optional ``reset``; one that takes ``setup`` and ``seat`` (a rule partner) gets them, and
    the episode's ``seed`` where it takes one (a game's rule player)."""
    reset_for_episode(agent, setup, seat, seed)


__all__ = ["Agent", "Usage", "reset_agent"]
