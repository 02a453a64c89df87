"""Our worlds on OpenEnv's protocol: ``create_openenv_app(...)`` is ``openenv-core``'s ``create_app`` over
``SocialOpenEnv``, an OpenEnv ``Environment`` that plays one seat of one episode per session
(``training.seat_session``): ``sotopia-env openenv`` serves it (``pip install 'sotopia-env[openenv]'``), and so
does the Docker image of the repository's ``Dockerfile``; ``openenv.yaml`` names this module's ``app``. The wire
types and the client live in ``training.openenv_client`` (with the TRL factory for a remote server).

- **Sessions.** OpenEnv makes one environment per WebSocket (``/ws``, what its ``EnvClient`` speaks), so each
  client plays its own episode, up to ``max_sessions`` at once. Its HTTP ``/reset`` and ``/step`` are stateless by
  OpenEnv's design (a fresh environment per request): ``/reset`` answers a seat's opening, whole episodes go over
  the WebSocket. ``/health``, ``/schema``, ``/metadata`` and ``/state`` are OpenEnv's own.
- **Reset.** ``reset(scenario=ID, seat=N, seed=S)``: the scenario must be one the server serves (its
  ``--scenarios`` selector; without one, the ``seed``-th of them), the seat one its rows allow (seat 0 on
  verifiable scenarios). Partners and the judge are the server's, never the client's: a client cannot make the
  server load a model or code.
- **Observation** (``SeatObservation.of(turn)``: a rendering of the seat's ``Observation``): the view's own fields
  (``ObservationData``: ``agent``, ``turn``, ``background``, ``history``, the seat's ``available_actions``,
  ``recipients`` (whom it may address), a game's ``phase`` and ``choices``, ``topic``), and its renderings:
  ``messages``, the prompt an ``LLMAgent`` in the seat would get now (``render_prompt``); ``text``, what is new to
  the seat since its last move and whose move it is; ``error`` when the last action was refused (the seat moves
  again); at the end ``done``, ``reward`` (the judge's goal score for the seat, None when unrated: never 0),
  ``rated`` and ``termination_reason``. ``SeatObservation.observation()`` (``as_observation``) gives back the
  ``Observation`` our agents act on, so any agent of ours can play a client's seat.
- **Action** (``SeatAction``): ``action_type``, ``argument`` and optional ``to``, or ``text``, a model's raw reply
  (parsed as an ``LLMAgent`` parses it); or ``finish``, which ends the episode there (the seat's pending move
  fails, as when a policy stops early). A malformed one comes back as ``error`` in the observation.
- **State** (``SeatState``): the scenario, seat and seed, the server's partners, judge, turn limit and partial
  credit for it (a remote client checks its dataset row against them), and once done the reward and transcript.
- **Refusals.** A ``/reset`` naming a scenario or seat the server does not serve is a 422; HTTP's ``/step`` and
  ``/state`` (stateless: a fresh environment per request, so never an episode) a 409 whatever the body, each
  ``{"detail": "<one line>"}`` naming the WebSocket. In front of it all, the main server's
  checks: ``Host`` and ``Origin`` (``security.HostCheck``) and the body's size (``security.BodyLimit``: 413 over
  ``max_body_bytes``, 411 without a ``Content-Length``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from sotopia_env.backends.endpoints import ApiBase
from sotopia_env.limits import DEFAULT_MAX_SESSIONS, DEFAULT_MAX_TURNS
from sotopia_env.server.security import DEFAULT_MAX_BODY, LOOPBACK_HOSTS, BodyLimit, HostCheck
from sotopia_env.training.openenv_client import (  # the wire types live with the client; re-exported here
    SeatAction,
    SeatClient,
    SeatObservation,
    SeatState,
    as_observation,
)
from sotopia_env.training.seat_rows import SeatRow, SeatRowError, SessionMaker, seat_rows
from sotopia_env.training.seat_session import BackgroundLoop, SeatSession

__all__ = [
    "SeatAction", "SeatClient", "SeatObservation", "SeatState", "SocialOpenEnv", "as_observation", "create_openenv_app",
]  # fmt: skip

ENV_NAME = "sotopia_env"


class NoEpisode(RuntimeError):
    """A step in a session that has no episode (HTTP's ``/step`` is stateless: a fresh environment each time)."""


STATELESS = (
    "{route} over HTTP has no episode: OpenEnv's HTTP routes make a fresh environment per request, so an episode "
    "lives on the WebSocket /ws (OpenEnv's EnvClient: SeatClient, or training.openenv_client's TRL factory)"
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
        self._state = SeatState(
            episode_id=episode_id, **row.model_dump(include={"scenario", "seat", "seed", "partners", "evaluator"}),
            max_turns=row.max_turns, dense_reward=row.dense_reward,
        )  # fmt: skip
        return SeatObservation.of(await self.session.start())

    async def step_async(self, action: SeatAction, timeout_s: float | None = None, **kwargs: Any) -> SeatObservation:
        if self.session is None:
            raise NoEpisode(
                "step before reset: reset starts an episode (over HTTP, /reset and /step are stateless; "
                "play an episode over the WebSocket /ws)"
            )
        if action.finish:  # the caller stops here (TRL's get_reward): the seat's pending move fails, as locally
            await self.session.finish()
            turn = self.session.turn
            assert turn is not None
        else:
            turn = await self.session.step(action.move())
        if turn.error is None:
            self._state.step_count += 1
        self._state.done = turn.done
        if turn.done:
            log = self.session.log
            self._state.reward = turn.reward
            self._state.transcript = [t.model_dump(mode="json") for t in log.turns] if log is not None else []
        return SeatObservation.of(turn)

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


def create_openenv_app(
    scenarios: str = "verifiable",
    partner: str | None = None,
    judge: str | None = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
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
    _answer_stateless(app, ("/step", "POST"), ("/state", "GET"))
    app.add_middleware(BodyLimit, max_body_bytes=max_body_bytes)
    app.add_middleware(HostCheck, hosts=list(allowed_hosts), origins=list(allowed_origins))  # added last: runs first
    return app


def _answer_stateless(app: Any, *routes: tuple[str, str]) -> None:
    """OpenEnv's HTTP ``/step`` and ``/state`` run on a fresh environment each time, so they can never see an
    episode: each is a 409 with one line pointing at the WebSocket, whatever its body (they stay in the OpenAPI
    document, as OpenEnv's ``validate`` expects of a simulation-mode server)."""
    for path, method in routes:
        for route in app.router.routes:
            if getattr(route, "path", None) == path and method in getattr(route, "methods", ()):
                message = STATELESS.format(route=f"{method} {path}")

                async def refuse(request: Request, message: str = message) -> JSONResponse:
                    return JSONResponse({"detail": message}, status_code=409)

                route.endpoint = refuse
                route.app = Route(path, refuse, methods=[method]).app


def __getattr__(name: str) -> Any:
    """``app`` (PEP 562, built on first use): the app ``openenv.yaml`` names (``uvicorn
    sotopia_env.server.openenv_app:app``), serving ``$SOTOPIA_ENV_OPENENV_SCENARIOS`` (default ``verifiable``) with
    the default partners and judge; ``$SOTOPIA_ENV_OPENENV_ALLOWED_HOSTS`` (comma-separated) adds ``Host`` names
    to loopback's. ``sotopia-env openenv`` (the Docker image's command) takes every option instead."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import os

    extra = [h.strip() for h in os.environ.get("SOTOPIA_ENV_OPENENV_ALLOWED_HOSTS", "").split(",") if h.strip()]
    built = create_openenv_app(
        os.environ.get("SOTOPIA_ENV_OPENENV_SCENARIOS", "verifiable"), allowed_hosts=[*LOOPBACK_HOSTS, *extra]
    )
    globals()["app"] = built
    return built


def _refused(status: int):
    async def answer(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status)

    return answer
