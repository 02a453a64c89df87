"""The one episode loop, and a seat driven from outside it: the core under every way of playing a seat.

``drive(env, agents, obs, infos)`` plays a reset ``SocialEnv`` to its end: at each step every acting seat's agent
is asked for its move on its ``Observation`` (one agent awaited directly, several at once together), the others
pass (``none``). ``episodes.runner.play`` is ``drive`` plus the episode's log and rating; the single-agent
Gymnasium env (``sotopia_env.single_agent``) is ``drive`` with the learner's seat driven.

``DrivenSeat`` is the driven seat: an agent whose ``act`` hands its observation out on ``asked`` and waits for
the caller's move on ``moves``. The caller outside the loop waits for the next observation (or the end of the
episode), then puts the seat's move. ``training.seat_session.SeatSession`` (under TRL's environment, the OpenEnv
server and verl's agent loop) drives its seats this way inside ``play``; ``SingleAgentSocialEnv`` inside ``drive``
on an event loop of its own, for Gymnasium's synchronous ``reset`` and ``step``.

This module sits in the world (``sotopia_env``), below agents, episodes and training, so that all of them and the
Gymnasium env can share it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.env import SocialEnv
from sotopia_env.observation import Observation

Move = AgentAction | str | dict[str, Any]  # what ``SocialEnv.step`` takes for a seat (text and dicts coerced there)
Step = tuple[dict, dict, dict, dict, dict]  # ``SocialEnv.step``'s (observations, rewards, terms, truncs, infos)
Act = Callable[[Any, Observation], Awaitable[Move]]
PASS = AgentAction(action_type=ActionType.none)  # a seat's move when it is not its turn


async def act(agent: Any, observation: Observation) -> Move:
    """``agent.act(observation)``, awaited when it is a coroutine (an agent may be sync or async)."""
    move = agent.act(observation)
    return await move if inspect.isawaitable(move) else move


async def drive(
    env: SocialEnv,
    agents: Sequence[Any],
    obs: dict[str, Any],
    infos: dict[str, Any],
    act: Act = act,
    on_step: Callable[[Step], None] | None = None,
) -> Step | None:
    """Play ``env`` (just reset: ``obs`` and ``infos`` are what ``reset`` returned) to its end with ``agents``
    (one per seat, in seat order), each move asked of its agent through ``act``. ``on_step`` gets every step's
    result; the last one is returned (None when the episode had no step)."""
    by_seat = dict(zip(env.agents, agents, strict=True))  # the env's ids are seats: agent_0, agent_1, ...
    result: Step | None = None
    while env.agents:
        acting = [seat for seat in env.agents if infos[seat]["acting"]]
        if len(acting) == 1:  # round-robin: one agent, awaited directly (a task per turn is CPU at scale)
            chosen = [await act(by_seat[acting[0]], Observation.from_env(obs[acting[0]]))]
        else:
            chosen = await asyncio.gather(*(act(by_seat[s], Observation.from_env(obs[s])) for s in acting))
        actions: dict[str, Any] = dict.fromkeys(env.agents, PASS) | dict(zip(acting, chosen, strict=True))
        result = env.step(actions)
        obs, infos = result[0], result[4]
        if on_step is not None:
            on_step(result)
    return result


class DrivenSeat:
    """A seat moved from outside the loop: each observation it is asked to act on goes out on ``asked``, and the
    move it returns is the next one put on ``moves`` (an ``AgentAction``, its dict or its JSON text)."""

    def __init__(self) -> None:
        self.asked: asyncio.Queue[Observation] = asyncio.Queue(maxsize=1)
        self.moves: asyncio.Queue[Move] = asyncio.Queue(maxsize=1)

    async def act(self, observation: Observation) -> Move:
        await self.asked.put(Observation.from_env(observation))
        return await self.moves.get()

    async def next(self, episode: asyncio.Future[Any]) -> Observation | None:
        """The seat's next observation to act on, or None once ``episode`` (the task playing it) has ended; what
        broke the episode is raised here."""
        asked = asyncio.ensure_future(self.asked.get())
        await asyncio.wait({asked, episode}, return_when=asyncio.FIRST_COMPLETED)
        if asked.done():
            return asked.result()
        asked.cancel()
        episode.result()  # raises what broke it
        return None


__all__ = ["Act", "DrivenSeat", "Move", "PASS", "Step", "act", "drive"]
