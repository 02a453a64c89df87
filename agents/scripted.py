"""Agents that need no model: fixed lines, or a replay of a stored episode."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sotopia_env.actions import ActionType, AgentAction, coerce_action
from sotopia_env.observation import Observation
from sotopia_env.transcript import Turn

_NONE = AgentAction(action_type=ActionType.none)


class ScriptedAgent:
    """Plays its actions in order on its turns, then ``after`` (default: leave).

    Each item may be an AgentAction, an action dict, or a plain string (spoken).
    """

    def __init__(self, actions: Iterable[AgentAction | dict | str], after: AgentAction | None = None) -> None:
        self.actions = [
            AgentAction(action_type=ActionType.speak, argument=a)
            if isinstance(a, str) and not a.lstrip().startswith("{")
            else coerce_action(a)
            for a in actions
        ]
        self.after = after or AgentAction(action_type=ActionType.leave)
        self._i = 0

    def reset(self) -> None:
        self._i = 0

    async def act(self, observation: Observation) -> AgentAction:
        if not Observation.from_env(observation).my_turn:
            return _NONE
        if self._i >= len(self.actions):
            return self.after
        self._i += 1
        return self.actions[self._i - 1]


class ReplayAgent(ScriptedAgent):
    """Replays one agent's actions from a stored episode's turns."""

    def __init__(self, turns: Sequence[Turn], agent: str) -> None:
        mine = [t.action for t in turns if t.agent == agent]
        if not mine:
            raise ValueError(f"the episode has no turns by {agent!r}")
        super().__init__(mine, after=AgentAction(action_type=ActionType.leave))
