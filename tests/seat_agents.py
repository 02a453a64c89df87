"""Deterministic agents for the seat-session tests (loaded as ``seat_agents:Class`` specs; this folder is on
sys.path under pytest)."""

from __future__ import annotations

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.observation import Observation


class Whisperer:
    """On its turns it whispers to one of those it can address (a different one each turn), speaks where it can
    address nobody, and leaves after ``lines`` moves."""

    def __init__(self, lines: int = 3) -> None:
        self.lines, self.moves = lines, 0

    def reset(self) -> None:
        self.moves = 0

    async def act(self, observation: Observation) -> AgentAction:
        obs = Observation.from_env(observation)
        if not obs.my_turn:
            return AgentAction(action_type=ActionType.none)
        self.moves += 1
        if self.moves > self.lines:
            return AgentAction(action_type=ActionType.leave, argument="I have to go.")
        if not obs.recipients:
            return AgentAction(action_type=ActionType.speak, argument=f"Line {self.moves} from {obs.agent}.")
        to = obs.recipients[self.moves % len(obs.recipients)]
        return AgentAction(
            action_type=ActionType.speak, argument=f"Psst {to}, {obs.agent} here ({self.moves}).", to=[to]
        )


def scripted_policy(observation: Observation, move: int) -> dict:
    """The policy the seat tests drive: speaks, then whispers to its first recipient where it has some, offers a
    number on verifiable scenarios (so the rule partner answers), and leaves at its fourth move."""
    if move >= 3:
        return {"action_type": "leave", "argument": "Goodbye."}
    if observation.recipients and move == 1:
        return {"action_type": "speak", "argument": "Just between us.", "to": [observation.recipients[0]]}
    return {"action_type": "speak", "argument": f"How about ${60 + 20 * move}?"}
