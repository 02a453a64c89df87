"""``BrowserSeat``: a person plays a seat from the server's play page.

On the seat's turn ``act`` publishes the observation the env gave it (so the person sees exactly what the
seat may see: the visibility rules, only the private messages addressed to it) and waits for ``submit``, up to
``timeout_s``; a silent person's turn is ``none``. ``submit`` checks the move against that observation (an
action type it offers, recipients it lists, a game's choices) and raises ``ValueError`` with one line otherwise.
"""

from __future__ import annotations

import asyncio

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.episodes.job_fields import DEFAULT_TURN_TIMEOUT
from sotopia_env.observation import Observation


class BrowserSeat:
    def __init__(self, timeout_s: float = DEFAULT_TURN_TIMEOUT) -> None:
        self.timeout_s = timeout_s
        self.last_seen: Observation | None = None  # what the page shows between the seat's turns
        self.timed_out = 0
        self._move: asyncio.Future[AgentAction] | None = None

    @property
    def waiting(self) -> bool:
        return self._move is not None and not self._move.done()

    async def act(self, observation: Observation) -> AgentAction:
        obs = Observation.from_env(observation)
        self.last_seen = obs
        self._move = asyncio.get_running_loop().create_future()
        try:
            return await asyncio.wait_for(asyncio.shield(self._move), self.timeout_s)
        except TimeoutError:
            self.timed_out += 1
            return AgentAction(action_type=ActionType.none)
        finally:
            self._move = None

    def submit(self, action: AgentAction) -> None:
        """The person's move for the turn the seat is waiting on."""
        obs = self.last_seen
        if not self.waiting or obs is None:
            raise ValueError("it is not this seat's turn")
        if action.action_type.value not in obs.available_actions:
            raise ValueError(
                f"action_type: {action.action_type.value!r} is not offered now ({', '.join(obs.available_actions)})"
            )
        if action.to is not None:
            absent = [n for n in action.to if n not in obs.recipients]
            if not action.to or absent:
                who = absent[0] if absent else "nobody"
                raise ValueError(f"to: {who!r} cannot be addressed (recipients: {', '.join(obs.recipients) or 'none'})")
        if obs.choices and action.action_type.value == "action" and action.argument not in obs.choices:
            raise ValueError(f"argument: choose one of {', '.join(obs.choices[:12])}")
        assert self._move is not None
        self._move.set_result(action)

    def view(self) -> dict[str, object]:
        """What the play page shows: whose turn, and the seat's own view."""
        obs = self.last_seen
        return {
            "your_turn": self.waiting,
            "timeout_s": self.timeout_s,
            "timed_out": self.timed_out,
            "observation": None
            if obs is None
            else obs.model_dump(
                mode="json", include={"agent", "turn", "text", "available_actions", "recipients", "phase", "choices"}
            ),
        }
