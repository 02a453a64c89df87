"""One cap on the model calls the server has in flight: ``serve --concurrency``, across every simulation and every
benchmark together.

A benchmark's own ``concurrency`` (episodes in flight) is at most the same number (``caps.HttpCaps``), but four
benchmarks and some simulations would multiply it; ``ModelCalls`` is the one semaphore they all share. Every
agent that may call a model (not a human seat or a rule agent) takes a slot for each move it makes, and every
judge that may call one for each rating: one ``act`` or ``aevaluate`` is one model call at a time (retries
included), so the slots held are the calls in flight. A slot is held only for the call, never for a whole episode:
a person thinking over a move, or an episode waiting for the store, holds none, and no two slots are ever nested.

The cap is put on the agent objects themselves (their ``act``, the judge's ``aevaluate``), so that everything
else the runner reads from them (their class name, prompt and usage) stays as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from sotopia_env.agents.base import Agent
from sotopia_env.agents.loading import NO_MODEL_SPECS
from sotopia_env.episodes.plan import calls_a_model as calls_a_model  # one rule for the cap and the preflight

NO_MODEL_AGENTS = NO_MODEL_SPECS


class ModelCalls:
    """The server's slots for model calls; ``peak`` is the most ever held at once."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._slots = asyncio.Semaphore(self.limit)
        self.in_flight = 0
        self.peak = 0

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self._slots:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            try:
                yield
            finally:
                self.in_flight -= 1

    def _capped(self, call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def in_a_slot(*args: Any, **kwargs: Any) -> Any:
            async with self.slot():
                return await call(*args, **kwargs)

        return in_a_slot

    def agent(self, spec: str, agent: Agent) -> Agent:
        """``agent`` (built from ``spec``), its moves taking a slot each when it may call a model."""
        if calls_a_model(spec):
            try:
                agent.act = self._capped(agent.act)  # type: ignore[method-assign]
            except AttributeError:  # a class with __slots__: wrapped instead
                return _Capped(agent, self._capped(agent.act))
        return agent

    def agents(self, factory: Callable[[str, int], Agent]) -> Callable[[str, int], Agent]:
        """An agent factory whose agents are capped (``agent``)."""
        return lambda spec, seat: self.agent(spec, factory(spec, seat))

    def judge(self, spec: str, judge: Any) -> Any:
        """``judge`` (built from ``spec``; None for none), its ratings taking a slot each when it may call a model."""
        if judge is not None and calls_a_model(spec):
            judge.aevaluate = self._capped(judge.aevaluate)
        return judge


class _Capped:
    """An agent whose ``act`` takes a slot; everything else is the agent's."""

    def __init__(self, agent: Agent, act: Callable[..., Awaitable[Any]]) -> None:
        self._agent, self.act = agent, act

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agent, name)
