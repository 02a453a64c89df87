"""The agent protocol. ``Usage`` (LLM cost accounting) lives with the backends."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from sotopia_env.actions import AgentAction
from sotopia_env.backends.base import Usage
from sotopia_env.observation import Observation


@runtime_checkable
class Agent(Protocol):
    """Anything that can take a seat: given what it observes, it chooses an action."""

    async def act(self, observation: Observation) -> AgentAction: ...


def reset_agent(agent: object) -> None:
    reset = getattr(agent, "reset", None)
    if callable(reset):
        reset()


__all__ = ["Agent", "Usage", "reset_agent"]
