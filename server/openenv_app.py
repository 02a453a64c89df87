"""Our worlds on OpenEnv's protocol: ``create_openenv_app(...)`` is ``openenv-core``'s ``create_app`` over
``SocialOpenEnv``, an OpenEnv ``Environment`` that plays one seat of one episode per session
(``training.seat_session``): ``sotopia-env openenv`` serves it (``pip install 'sotopia-env[openenv]'``).

- **Sessions.** OpenEnv makes one environment per WebSocket (``/ws``, what its ``EnvClient`` speaks), so each
  client plays its own episode, up to ``max_sessions`` at once. Its HTTP ``/reset`` and ``/step`` are stateless by
  OpenEnv's design (a fresh environment per request): ``/reset`` answers a seat's opening, whole episodes go over
  the WebSocket. ``/health``, ``/schema``, ``/metadata`` and ``/state`` are OpenEnv's own.
- **Reset.** ``reset(scenario=ID, seat=N, seed=S)``: the scenario must be one the server serves (its
  ``--scenarios`` selector; without one, the ``seed``-th of them), the seat one its rows allow (seat 0 on
  verifiable scenarios). Partners and the judge are the server's, never the client's: a client cannot make the
  server load a model or code.
- **Observation** (``SeatObservation``): ``messages``, the prompt an ``LLMAgent`` in the seat would get now
  (``render_prompt``); ``text``, what is new to the seat since its last move and whose move it is; the seat's
  ``available_actions``, ``recipients`` (whom it may address), a game's ``phase`` and ``choices``; ``error`` when
  the last action was refused (the seat moves again); at the end ``done``, ``reward`` (the judge's goal score for
  the seat, None when unrated: never 0), ``rated`` and ``termination_reason``.
  ``background`` and ``history`` carry the same as data (``as_observation`` rebuilds the ``Observation`` our agents
  act on, so any agent of ours can play a client's seat).
- **Action** (``SeatAction``): ``action_type``, ``argument`` and optional ``to``, or ``text``, a model's raw reply
  (parsed as an ``LLMAgent`` parses it). A malformed one comes back as ``error`` in the observation.
- **Refusals.** A ``/reset`` naming a scenario or seat the server does not serve is a 422, a ``/step`` without an
  episode (HTTP is stateless) a 409, each ``{"detail": "<one line>"}``. In front of it all, the main server's
  checks: ``Host`` and ``Origin`` (``security.HostCheck``) and the body's size (``security.BodyLimit``: 413 over
  ``max_body_bytes``, 411 without a ``Content-Length``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse

from sotopia_env.backends.endpoints import ApiBase
from sotopia_env.observation import Observation as SeatView
from sotopia_env.server.security import DEFAULT_MAX_BODY, LOOPBACK_HOSTS, BodyLimit, HostCheck
from sotopia_env.training.seat_rows import SeatRow, SeatRowError, SessionMaker, seat_rows
from sotopia_env.training.seat_session import BackgroundLoop, SeatSession, SeatTurn

ENV_NAME = "sotopia_env"


class NoEpisode(RuntimeError):
    """A step in a session that has no episode (HTTP's ``/step`` is stateless: a fresh environment each time)."""


class SeatAction(Action):
    """The seat's move: ``action_type`` (speak, non-verbal communication, action, leave, none), ``argument`` and
    ``to``; or ``text``, a model's reply holding the action JSON."""

    action_type: str = ""
    argument: str = ""
    to: list[str] | None = None
    text: str | None = Field(None, description="a model's raw reply with the action JSON, instead of the fields")

    def move(self) -> Any:
        if self.text is not None:
            return self.text
        return {"action_type": self.action_type, "argument": self.argument, **({"to": self.to} if self.to else {})}


class SeatObservation(Observation):
    """What the seat observes (see the module docstring)."""

    messages: list[dict[str, str]] = Field(default_factory=list)
    text: str = ""
    agent: str = ""
    turn: int = 0
    background: str = ""  # what the seat knows (scenario, itself, the others as far as it may see, its goal)
    history: list[dict[str, Any]] = Field(default_factory=list)  # what it has observed, one entry per move
    available_actions: list[str] = Field(default_factory=list)
    recipients: list[str] = Field(default_factory=list)
    phase: str = ""
    choices: list[str] = Field(default_factory=list)
    topic: str = ""  # what the scenario is about, in a few words
    error: str | None = None
    rated: bool | None = None
    termination_reason: str | None = None


def as_observation(seen: SeatObservation) -> SeatView:
    """The ``sotopia_env.observation.Observation`` an agent of ours acts on, from a client's observation."""
    return SeatView(**seen.model_dump(include=set(SeatView.model_fields)))


class SeatState(State):
    """The session's episode: which scenario, seat and seed, and whether it is over."""

    scenario: str | None = None
    seat: int | None = None
    seed: int | None = None
    done: bool = False
    reward: float | None = None
    transcript: list[dict[str, Any]] = Field(default_factory=list)  # once done: every turn, for logs (no observation)


def _observation(turn: SeatTurn) -> SeatObservation:
    shared = turn.observation.model_dump(include=set(SeatView.model_fields) - {"text", "available_actions"})
    return SeatObservation(
        **shared,
        messages=turn.messages,
        text=turn.update,
        available_actions=[] if turn.done else turn.observation.available_actions,
        error=turn.error,
        done=turn.done,
        reward=turn.reward,
        rated=(turn.reward is not None) if turn.done else None,
        termination_reason=turn.termination_reason,
    )


class SocialOpenEnv(Environment[SeatAction, SeatObservation, SeatState]):
    """One seat of one episode per OpenEnv session; ``rows`` are the starts the server serves."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, maker: SessionMaker, rows: list[SeatRow]) -> None:
        super().__init__()
        self.maker, self.rows = maker, rows
        self.session: SeatSession | None = None
        self._state = SeatState()

    def _row(self, scenario: str | None, seat: int | None, seed: int | None) -> SeatRow:
        seed = 0 if seed is None else seed
        if scenario is not None and not isinstance(scenario, str):
            raise SeatRowError(f"scenario: {str(scenario)[:100]!r} is not a scenario id")
        if seat is not None and (not isinstance(seat, int) or isinstance(seat, bool)):
            raise SeatRowError(f"seat: {str(seat)[:100]!r} is not a seat number")
        if scenario is None:
            scenarios = sorted({r.scenario for r in self.rows})
            scenario = scenarios[seed % len(scenarios)]
        mine = [r for r in self.rows if r.scenario == scenario]
        if not mine:
            raise SeatRowError(f"scenario {scenario[:200]!r} is not served here")
        seats = sorted({r.seat for r in mine})
        seat = seats[0] if seat is None else seat
        if seat not in seats:
            raise SeatRowError(f"scenario {scenario!r}: seat {seat} is not served (seats: {seats})")
        return mine[0].model_copy(update={"seat": seat, "seed": seed})

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        scenario: str | None = None,
        seat: int | None = None,
        **kwargs: Any,
    ) -> SeatObservation:
        if self.session is not None:
            self.session.close()
        row = self._row(scenario, seat, seed)
        self.session = self.maker.open(row)
        self._state = SeatState(episode_id=episode_id, scenario=row.scenario, seat=row.seat, seed=row.seed)
        return _observation(await self.session.start())

    async def step_async(self, action: SeatAction, timeout_s: float | None = None, **kwargs: Any) -> SeatObservation:
        if self.session is None:
            raise NoEpisode(
                "step before reset: reset starts an episode (over HTTP, /reset and /step are stateless; "
                "play an episode over the WebSocket /ws)"
            )
        turn = await self.session.step(action.move())
        if turn.error is None:
            self._state.step_count += 1
        self._state.done = turn.done
        if turn.done:
            log = self.session.log
            self._state.reward = turn.reward
            self._state.transcript = [t.model_dump(mode="json") for t in log.turns] if log is not None else []
        return _observation(turn)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> SeatObservation:
        """In-process use without a server: runs on the shared background loop."""
        return BackgroundLoop.shared().run(self.reset_async(seed, episode_id, **kwargs))

    def step(self, action: SeatAction, timeout_s: float | None = None, **kwargs: Any) -> SeatObservation:
        return BackgroundLoop.shared().run(self.step_async(action, timeout_s))

    @property
    def state(self) -> SeatState:
        return self._state

    def close(self) -> None:
        if self.session is not None:
            self.session.close()


class SeatClient(EnvClient[SeatAction, SeatObservation, SeatState]):
    """OpenEnv's client for this server, typed: ``async with SeatClient(base_url=URL) as env: await env.reset(...)``
    (or ``SeatClient(base_url=URL).sync()``)."""

    def _step_payload(self, action: SeatAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True, exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[SeatObservation]:
        observation = SeatObservation(
            **payload.get("observation", {}), done=payload.get("done", False), reward=payload.get("reward")
        )
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> SeatState:
        return SeatState(**payload)


def create_openenv_app(
    scenarios: str = "verifiable",
    partner: str | None = None,
    judge: str | None = None,
    max_turns: int = 20,
    max_sessions: int = 64,
    api_base: ApiBase = None,
    maker: SessionMaker | None = None,
    allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
    allowed_origins: Sequence[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY,
):
    """The OpenEnv FastAPI app serving ``scenarios`` (a selector) against ``partner`` with ``judge`` (the
    ``seat_rows`` defaults: rule partners or rule players and the exact judge where the family has them).

    In front of it, ``security.HostCheck``, as in front of ``serve``: only the ``Host`` names ``allowed_hosts``
    lists are answered (400 otherwise, WebSockets included), and a WebSocket or unsafe method from a foreign
    ``Origin`` is a 403, so a page the user visits cannot drive episodes (partners and a judge that may run on
    the operator's keys) through DNS rebinding. A body over ``max_body_bytes`` is a 413, as in ``serve``."""
    maker = maker or SessionMaker(api_base=api_base)
    rows = seat_rows(scenarios, seeds=1, partner=partner, judge=judge, max_turns=max_turns, library=maker.library)
    app = create_app(
        lambda: SocialOpenEnv(maker, rows),
        SeatAction,
        SeatObservation,
        env_name=ENV_NAME,
        max_concurrent_envs=max_sessions,
    )
    app.add_exception_handler(SeatRowError, _refused(422))
    app.add_exception_handler(NoEpisode, _refused(409))
    app.add_middleware(BodyLimit, max_body_bytes=max_body_bytes)
    app.add_middleware(HostCheck, hosts=list(allowed_hosts), origins=list(allowed_origins))  # added last: runs first
    return app


def _refused(status: int):
    async def answer(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status)

    return answer
