"""Our OpenEnv server's wire types and client, and a TRL ``environment_factory`` that plays on a remote server.

``sotopia-env openenv`` (``server.openenv_app``) plays one seat of one episode per WebSocket session. This module
holds what both ends share, so a trainer needs only the client side (``pip install 'sotopia-env[openenv]'``):

- ``SeatAction``, ``SeatObservation``, ``SeatState``: the action, observation and state on the wire (see
  ``server.openenv_app``'s docstring for their fields); ``as_observation`` rebuilds the ``Observation`` our agents
  act on from a ``SeatObservation``.
- ``SeatClient``: OpenEnv's ``EnvClient``, typed for them (``SeatClient.from_docker_image(IMAGE)`` starts the image
  and connects, as any OpenEnv client does).
- ``RemoteSocialToolEnv`` / ``remote_tool_env_factory(URL)``: ``SocialToolEnv``'s tools (``training.trl_env``: the
  same names, docstrings and answers) played over a ``SeatClient`` session, the pattern of TRL's own OpenEnv
  examples: TRL makes one per rollout, ``reset(**row)`` opens a WebSocket session and resets it to the row's
  scenario, seat and seed, each tool call is one ``step``, and ``get_reward`` ends the episode there if the policy
  stopped early (the server fails the seat's pending move, as the local environment does) and returns the judge's
  score (None when unrated, never 0). The partners and the judge are the server's: a row that names others (its
  ``partners``, ``evaluator``, ``max_turns``, ``dense_reward``) or whose prompt's system message is not the seat's
  is refused with one line, so a dataset built for other partners cannot train silently against these.

The same scenario, seed and moves give the same transcript, reward and observations as the local ``SocialToolEnv``
(``tests/test_three_ways.py``).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import Action, State
from openenv.core.env_server.types import Observation as OpenEnvObservation
from pydantic import Field

from sotopia_env.actions import ActionType
from sotopia_env.observation import Observation, ObservationData
from sotopia_env.training.seat_session import BackgroundLoop, SeatTurn
from sotopia_env.training.trl_env import SocialToolEnv

CHECKED_FIELDS = ("partners", "evaluator", "max_turns", "dense_reward")  # a row's fields the server fixes itself


class SeatAction(Action):
    """The seat's move: ``action_type`` (speak, non-verbal communication, action, leave, none), ``argument`` and
    ``to``; or ``text``, a model's reply holding the action JSON; or ``finish``, to end the episode here (the seat's
    pending move fails, as when a policy stops before the end)."""

    action_type: str = ""
    argument: str = ""
    to: list[str] | None = None
    text: str | None = Field(None, description="a model's raw reply with the action JSON, instead of the fields")
    finish: bool = Field(False, description="end the episode now: the seat's pending move fails (an agent error)")

    def move(self) -> Any:
        """The move as ``SeatSession.step`` takes it (``to=[]`` is kept, and refused, as the local env does)."""
        if self.text is not None:
            return self.text
        return {"action_type": self.action_type, "argument": self.argument} | (
            {"to": self.to} if self.to is not None else {}
        )


class SeatObservation(OpenEnvObservation, ObservationData):
    """The OpenEnv payload: a rendering of the seat's ``Observation`` (see ``server.openenv_app``'s docstring).
    Its view's fields are ``ObservationData``'s, as they are (at the end, no ``available_actions``); beside them
    the renderings: ``messages`` (the prompt), ``text`` (what is new to the seat and whose move it is: the tools'
    answer, not the env's ``Observation.text``), and the step's ``error``, ``rated`` and ``termination_reason``;
    OpenEnv's own ``done`` and ``reward``. ``of(turn)`` renders one; ``observation()`` gives the view back."""

    messages: list[dict[str, str]] = Field(default_factory=list)
    text: str = ""
    error: str | None = None
    rated: bool | None = None
    termination_reason: str | None = None

    @classmethod
    def of(cls, turn: SeatTurn) -> SeatObservation:
        """The payload of a seat session's turn."""
        view = turn.observation.model_dump(include=set(ObservationData.model_fields) - {"available_actions"})
        return cls(
            **view,
            available_actions=[] if turn.done else turn.observation.available_actions,
            messages=turn.messages,
            text=turn.update,
            error=turn.error,
            done=turn.done,
            reward=turn.reward,
            rated=(turn.reward is not None) if turn.done else None,
            termination_reason=turn.termination_reason,
        )

    def observation(self) -> Observation:
        """The ``Observation`` the seat acts on, as in our own loop (at the end nothing but ``none`` is
        available); its ``text`` is the env's rendering, rebuilt."""
        view = ObservationData.model_validate(self.model_dump(include=set(ObservationData.model_fields)))
        if not view.available_actions:
            view.available_actions = [ActionType.none.value]
        return Observation.of(view)


def as_observation(seen: SeatObservation) -> Observation:
    """``seen.observation()``: the ``sotopia_env.observation.Observation`` an agent of ours acts on, from a
    client's observation."""
    return seen.observation()


class SeatState(State):
    """The session's episode: which scenario, seat and seed, the server's partners and judge for it, and whether
    it is over."""

    scenario: str | None = None
    seat: int | None = None
    seed: int | None = None
    partners: list[str] = Field(default_factory=list)  # the other seats' agent specs (the server's)
    evaluator: str | None = None  # the judge's spec (the server's)
    max_turns: int | None = None
    dense_reward: float | None = None
    done: bool = False
    reward: float | None = None
    transcript: list[dict[str, Any]] = Field(default_factory=list)  # once done: every turn, for logs (no observation)


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


RemoteEpisodeCallback = Callable[[SeatState, float | None], None]


class RemoteSocialToolEnv(SocialToolEnv):
    """One rollout's episode on a remote OpenEnv server (``base_url``), for TRL's ``environment_factory``; the
    tools are ``SocialToolEnv``'s (see the module docstring). ``on_episode(state, reward)`` gets each finished
    episode's ``SeatState`` (its transcript included)."""

    def __init__(
        self, base_url: str, on_episode: RemoteEpisodeCallback | None = None, message_timeout_s: float = 600.0
    ) -> None:  # no SocialToolEnv.__init__: no local library, partners or judges
        self._url, self._on_remote_episode = base_url, on_episode
        self._message_timeout_s = message_timeout_s  # a step waits for every partner's move (LLM partners: long)
        self._loop = BackgroundLoop.shared()
        self._client: SeatClient | None = None
        self._result: StepResult[SeatObservation] | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def observation(self) -> Observation | None:
        """The seat's current observation (None before ``reset``), as the local environment gives it."""
        return as_observation(self._result.observation) if self._result is not None else None

    @property
    def done(self) -> bool:
        """Whether the episode is over."""
        return self._result is not None and self._result.done

    def reset(self, **row: Any) -> str:
        """Open a session on the server and start the row's episode; the seat's first user message."""
        self._disconnect()
        where = f"row {row.get('scenario')!r} seat {row.get('seat')}"
        client = SeatClient(base_url=self._url, message_timeout_s=self._message_timeout_s)
        self._client = client
        self._finalizer = weakref.finalize(self, _disconnect_quietly, self._loop, client)
        start = {k: row[k] for k in ("scenario", "seat", "seed") if row.get(k) is not None}
        try:
            self._result = self._loop.run(client.reset(**start))
            state = self._loop.run(client.state())
        except (ConnectionError, RuntimeError) as exc:
            self._disconnect()
            raise ValueError(f"{where}: the OpenEnv server at {self._url} refused it: {_one_line(exc)}") from None
        for field in CHECKED_FIELDS:
            if field in row and row[field] != getattr(state, field):
                self._disconnect()
                raise ValueError(
                    f"{where}: the row's {field} is {row[field]!r}, the server at {self._url} plays "
                    f"{getattr(state, field)!r} (build the rows with the server's partners and judge)"
                )
        messages = self._result.observation.messages
        prompt = row.get("prompt")
        if prompt and prompt[0].get("role") == "system" and prompt[0]["content"] != messages[0]["content"]:
            self._disconnect()
            raise ValueError(
                f"{where}: its prompt's system message is not this seat's on the server at {self._url} "
                "(build the dataset with seat_rows.trl_dataset, with the server's prompt)"
            )
        return messages[-1]["content"]

    def get_reward(self) -> float | None:
        """The judge's goal score for the seat (the episode is finished first); None when it could not be rated."""
        if self._client is None or self._result is None:
            return None
        if not self._result.done:
            self._result = self._loop.run(self._client.step(SeatAction(finish=True)))
        reward = self._result.reward
        if self._on_remote_episode is not None:
            self._on_remote_episode(self._loop.run(self._client.state()), reward)
        self._disconnect()  # the episode is over: free the server's session
        return reward

    def _move(self, kind: ActionType, argument: str, to: list[str] | None) -> str:
        if self._client is None or self._result is None:
            return "Your move was not accepted: no episode has started."
        action = SeatAction(action_type=kind.value, argument=argument, to=to)
        self._result = self._loop.run(self._client.step(action))
        return self._result.observation.text

    def _disconnect(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # closes the client once; a later finalize does nothing
        self._client, self._finalizer = None, None


def _disconnect_quietly(loop: BackgroundLoop, client: SeatClient) -> None:
    """Close ``client``'s WebSocket on its loop (scheduled, not awaited, when collected on that loop's thread)."""
    if threading.current_thread() is loop.thread:
        loop.loop.create_task(client.disconnect())
        return
    try:
        loop.run(client.disconnect())
    except Exception:  # a server that went away: nothing to close
        pass


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500]


def remote_tool_env_factory(
    base_url: str, on_episode: RemoteEpisodeCallback | None = None, message_timeout_s: float = 600.0
) -> Callable[[], RemoteSocialToolEnv]:
    """``environment_factory`` for ``GRPOTrainer`` on the OpenEnv server at ``base_url`` (``sotopia-env openenv``
    or its Docker image): one WebSocket session per rollout's episode."""
    return lambda: RemoteSocialToolEnv(base_url, on_episode, message_timeout_s)
