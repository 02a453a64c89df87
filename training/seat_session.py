"""One seat of one episode, moved from outside: the core that TRL's environment, the OpenEnv server and verl's
agent loop adapt (``training.trl_env``, ``server.openenv_app``, ``training.verl_loop``).

A ``SeatSession`` plays one episode of a scenario (a setup, a seed) in which one seat is driven by the caller and
every other seat by its partner agent (rule partners, rule players, or any agent spec, API models included). It
does not run an episode loop of its own: it runs ``episodes.runner.play``, the one loop every command and stage
uses, with a ``DrivenSeat`` in the caller's seat, an agent whose ``act`` hands its observation out and waits for
the caller's move. So partners' moves, private messages (``to``), games' phases and choices, termination and the
judge's rating are exactly those of our own episodes.

- ``DrivenSeat`` (``sotopia_env.seat_driver``) is the caller's seat inside ``play``.
- ``start()`` plays the partners up to the seat's first move and returns a ``SeatTurn``: the seat's observation
  as ``render_prompt`` messages (what an ``LLMAgent`` in that seat would be prompted with), and ``update``, the
  lines that are new to the seat since its last move plus whose move it is (what a multi-turn chat appends).
- ``step(action)`` makes the seat's move (an ``AgentAction``, its dict or JSON text) and plays the partners up to
  the seat's next move or the end. A move the seat cannot make (no JSON, an action type it may not take now, a
  ``to`` naming someone it cannot address, a game move outside its choices) is refused with the reason and the
  seat moves again, as an ``LLMAgent`` retries malformed output; after ``max_retries`` refusals in a row the move
  is the seat's failed action (an agent error, which ends the episode), as an ``LLMAgent``'s is.
- ``finish()`` ends an episode the caller stopped driving (the seat's pending move fails) and returns the rated
  log. ``reward`` is then the judge's score of the seat (``episode_rollouts.episode_reward``): None when the
  judge could not rate it, never 0.

``BackgroundLoop`` runs sessions for synchronous callers (TRL calls ``reset`` and tools synchronously): one event
loop on a daemon thread, shared by every session of the process. Partners' and judges' calls overlap only when the
caller has several sessions waiting at once: ``training.trl_rollouts`` gathers a whole batch's moves; TRL's
``environment_factory`` calls one sample's tools after another's, so there each call waits on the previous one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from sotopia_env.actions import ActionType, AgentAction, InvalidAction, coerce_action
from sotopia_env.agents.base import Agent
from sotopia_env.env import EnvConfig
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.evaluators import Evaluator
from sotopia_env.limits import ANSWER_RETRIES
from sotopia_env.observation import Observation, SeatView
from sotopia_env.prompt import SOTOPIA, prompt_function, render_prompt
from sotopia_env.rewards import episode_reward
from sotopia_env.seat_driver import DrivenSeat

T = TypeVar("T")
MAX_RETRIES = ANSWER_RETRIES  # as LLMAgent's: a seat gets three tries at a move


@dataclass
class SeatTurn:
    """What the seat observes now: at its move, or at the end (``done``)."""

    messages: list[dict[str, str]]  # render_prompt of the seat's observation: the prompt an LLMAgent would get
    update: str  # the lines new to the seat since its last move, then whose move it is (or that the episode ended)
    observation: Observation
    done: bool = False
    error: str | None = None  # why the last move was refused (the seat moves again), or why the episode broke
    reward: float | None = None  # at the end: the judge's score of the seat; None when unrated
    termination_reason: str | None = None


def move_problem(action: AgentAction, observation: Observation) -> str | None:
    """Why the seat cannot make ``action`` now (the checks an ``LLMAgent`` applies to a reply), or None."""
    if action.action_type.value not in observation.available_actions:
        return f"action_type {action.action_type.value!r} is not available now (available: " + (
            ", ".join(observation.available_actions) + ")"
        )
    if observation.choices and action.action_type is ActionType.action and action.argument not in observation.choices:
        return f"argument {action.argument!r} is not one of the choices: {'; '.join(observation.choices)}"
    if action.to is not None and not (action.to and set(action.to) <= set(observation.recipients)):
        can = ", ".join(observation.recipients) or "nobody (everyone present hears you)"
        return f"to {action.to!r} names someone you cannot address (you can address: {can})"
    return None


def _user_tail(messages: list[dict[str, str]]) -> str:
    """The last paragraph of the prompt's user message: whose move it is (and a game's choices)."""
    return messages[-1]["content"].rpartition("\n\n")[2]


class _Episode:
    """The one ``play`` that every driven seat of an episode shares (one session alone, or a self-play set)."""

    def __init__(self, agents: list[Agent]) -> None:
        self.agents = agents
        self.task: asyncio.Task[EpisodeLog] | None = None


class SeatSession:
    """One episode with the caller in ``seat`` and ``partners`` (one agent per other seat, in seat order) in the
    others; rated by ``evaluator`` at the end (None: unrated). ``SeatSession.together`` opens one session per seat
    of a self-play set: the caller drives several seats of one episode."""

    def __init__(
        self,
        setup: EpisodeSetup,
        seat: int,
        partners: Sequence[Agent],
        evaluator: Evaluator | None,
        config: EnvConfig | None = None,
        seed: int | None = None,
        specs: Sequence[str] | None = None,
        dense_reward: float = 0.0,
        max_retries: int = MAX_RETRIES,
        prompt: str = SOTOPIA,
    ) -> None:
        seats = setup.scenario.num_agents
        if not 0 <= seat < seats:
            raise ValueError(f"scenario {setup.scenario.id!r} has no seat {seat + 1} (it has {seats})")
        if len(partners) != seats - 1:
            raise ValueError(f"scenario {setup.scenario.id!r} needs {seats - 1} partner(s), got {len(partners)}")
        self.setup, self.seat, self.evaluator, self.seed = setup, seat, evaluator, seed
        self.config = config or EnvConfig()
        self.dense_reward, self.max_retries = dense_reward, max_retries
        self.prompt = prompt  # the prompt (sotopia_env.prompt) the seat's messages are rendered in: its model's
        prompt_function(prompt)  # an unknown name fails here
        self.driven = DrivenSeat()
        others = iter(partners)
        self._episode = _Episode([self.driven if s == seat else next(others) for s in range(seats)])
        self._started = False
        self.specs = list(specs) if specs is not None else None
        self.name = setup.agent_names[seat]
        self.log: EpisodeLog | None = None
        self.turn: SeatTurn | None = None
        self._view = SeatView.of(setup, seat)
        self._seen = 0  # history entries the seat has been shown
        self._refused = 0

    @classmethod
    def together(
        cls,
        setup: EpisodeSetup,
        seats: Sequence[int],
        partners: Sequence[Agent],
        evaluator: Evaluator | None,
        **settings: Any,
    ) -> list[SeatSession]:
        """One session per seat in ``seats`` (in that order), all in one episode: the caller drives each of them
        (self-play), ``partners`` the other seats (in seat order); ``settings`` are every session's (``config``,
        ``seed``, ``specs``, ``dense_reward``, ``max_retries``, ``prompt``). Each session sees, is refused and is
        rated as a lone session in its seat would be; the episode moves on when the seat whose turn it is moves."""
        n = setup.scenario.num_agents
        if len(set(seats)) != len(seats) or not seats:
            raise ValueError(f"scenario {setup.scenario.id!r}: driven seats {list(seats)} must be distinct, at least 1")
        if len(partners) != n - len(seats):
            raise ValueError(
                f"scenario {setup.scenario.id!r} needs {n - len(seats)} partner(s) beside {len(seats)} driven "
                f"seat(s), got {len(partners)}"
            )
        placeholders = [cast(Agent, None)] * (n - 1)  # each session's own episode, replaced by the shared one below
        sessions = [cls(setup, s, placeholders, evaluator, **settings) for s in seats]
        driven = {session.seat: session.driven for session in sessions}
        others = iter(partners)
        episode = _Episode([driven[s] if s in driven else next(others) for s in range(n)])
        for session in sessions:
            session._episode = episode
        return sessions

    @property
    def agents(self) -> list[Agent]:
        """Every seat's agent, in seat order (the driven ones are ``DrivenSeat``s)."""
        return self._episode.agents

    @property
    def _task(self) -> asyncio.Task[EpisodeLog] | None:
        return self._episode.task

    @property
    def done(self) -> bool:
        return self.turn is not None and self.turn.done

    @property
    def reward(self) -> float | None:
        return self.turn.reward if self.turn is not None and self.turn.done else None

    async def start(self) -> SeatTurn:
        from sotopia_env.episodes.runner import play

        if self._started:
            raise RuntimeError("this session has started already; open a new one for another episode")
        self._started = True
        if self._episode.task is None:  # the first of a self-play set to start plays the episode for all
            self._episode.task = asyncio.ensure_future(
                play(self.setup, self.agents, self.evaluator, self.config, self.specs, seed=self.seed)
            )
        return await self._next()

    async def step(self, action: Any) -> SeatTurn:
        if self.turn is None:
            raise RuntimeError("step() before start()")
        if self.turn.done:
            return self._refuse("the episode is over; start a new one")
        try:
            move = coerce_action(action)
            problem = move_problem(move, self.turn.observation)
        except InvalidAction as exc:
            move, problem = None, str(exc)
        if problem is not None:
            self._refused += 1
            if self._refused <= self.max_retries:
                return self._refuse(problem)
            move = AgentAction.failed(f"no valid move after {self._refused} attempts: {problem}")
        self._refused = 0
        assert move is not None
        await self.driven.moves.put(move)
        return await self._next()

    async def finish(self) -> EpisodeLog | None:
        """Play the episode to its end if the caller stopped before it (each pending move of the seat fails) and
        return its rated log (None when it could not be played)."""
        while self.turn is not None and not self.turn.done:
            await self.driven.moves.put(AgentAction.failed("the policy stopped before the episode ended"))
            await self._next()
        return self.log

    def close(self) -> None:
        """Abandon the episode (a client that went away): stops playing it, rates nothing."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def _refuse(self, problem: str) -> SeatTurn:
        assert self.turn is not None
        update = f"Your move was not accepted: {problem}." + ("" if self.turn.done else " It is still your move.")
        self.turn = SeatTurn(
            self.turn.messages, update, self.turn.observation, self.turn.done, problem, self.turn.reward,
            self.turn.termination_reason,
        )  # fmt: skip
        return self.turn

    async def _next(self) -> SeatTurn:
        """The seat's next observation: at its next move, or once ``play`` has ended and rated the episode."""
        assert self._task is not None
        try:
            observation = await self.driven.next(self._task)
        except Exception as exc:  # a partner or judge that broke the episode: unrated, reported
            observation = self.turn.observation if self.turn is not None else self._final_observation([])
            error = f"the episode could not be played: {type(exc).__name__}: {exc}"
            self.turn = SeatTurn(render_prompt(observation, self.prompt), error, observation, True, error)
            return self.turn
        if observation is not None:
            messages = render_prompt(observation, self.prompt)
            tail = _user_tail(render_prompt(observation, SOTOPIA))  # whose move it is, whichever the prompt
            self.turn = SeatTurn(messages, self._news(observation, tail), observation)
            return self.turn
        self.log = self._task.result()
        observation = self._final_observation(self.log.turns)
        reason = self.log.termination_reason
        reward = episode_reward(self.log, self.seat, self.config.reward_dimension, dense_reward=self.dense_reward)
        rated = "" if reward.value is not None else " It could not be rated."
        update = self._news(observation, f"The episode is over ({reason}).{rated}")
        messages = render_prompt(observation, self.prompt)
        self.turn = SeatTurn(messages, update, observation, True, None, reward.value, reason)
        return self.turn

    def _news(self, observation: Observation, tail: str) -> str:
        """The history entries the seat has not been shown yet, as its prompt renders them, then ``tail``."""
        new = [h.render() for h in observation.history[self._seen :]]
        self._seen = len(observation.history)
        return "\n".join([*new, "", tail]) if new else tail

    def _final_observation(self, turns: list) -> Observation:
        """The seat's view of the whole transcript, with nothing left to do."""
        end = max((t.turn for t in turns), default=-1) + 1
        return Observation.from_env(self._view.observe(turns, end, [ActionType.none.value]))


class BackgroundLoop:
    """One asyncio loop on a daemon thread, for synchronous callers: ``run(coro)`` runs a coroutine there and
    waits for its result. ``shared()`` is the process's one loop."""

    _shared: BackgroundLoop | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="sotopia-seat-sessions", daemon=True)
        self.thread.start()

    @classmethod
    def shared(cls) -> BackgroundLoop:
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on this loop and return at once: its (thread-safe) future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on this loop from another loop (e.g. TRL's async tool loop)."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))
