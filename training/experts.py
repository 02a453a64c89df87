"""``ScriptedExpert``: a model-free stand-in for an expert LLM, for tests, demos and offline runs.

Use it wherever an agent spec goes: ``training.experts:ScriptedExpert``. It is
no social genius: it greets, states what it wants (its goal, without the hint
sections), listens, proposes a middle ground, agrees and leaves. That is enough
to give behaviour cloning a consistent, scenario-dependent target.
"""

from __future__ import annotations

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.observation import Observation
from sotopia_env.profiles import strip_hints

_NONE = AgentAction(action_type=ActionType.none)


def goal_of(observation: Observation) -> str:
    """The agent's goal as the background states it, without ``<extra_info>``/``<strategy_hint>`` sections."""
    for line in observation.background.splitlines():
        if line.startswith("Your goal:"):
            return strip_hints(line.removeprefix("Your goal:"))
    return "find a solution that works for both of us"


def _speak(text: str) -> AgentAction:
    return AgentAction(action_type=ActionType.speak, argument=text)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


class ScriptedExpert:
    """Plays a fixed, goal-aware script on its turns; the same observation always gives the same action."""

    def __init__(self) -> None:
        self.moves = 0

    def reset(self) -> None:
        self.moves = 0

    async def act(self, observation: Observation) -> AgentAction:
        obs = Observation.from_env(observation)
        if not obs.my_turn:
            return _NONE
        goal = goal_of(obs).rstrip(".")
        script = [
            _speak("Hi! Do you have a moment? I'd like to talk something through."),
            _speak(f"Here is where I stand: I want to {_lower_first(goal)}."),
            AgentAction(action_type=ActionType.non_verbal, argument="nods and listens carefully"),
            _speak("I see your side too. What if we meet in the middle, so we both get what matters most?"),
            _speak("Great, then we have a plan. Thank you for working it out."),
        ]
        self.moves += 1
        if self.moves > len(script):
            return AgentAction(action_type=ActionType.leave, argument="Thanks, talk soon.")
        return script[self.moves - 1]
