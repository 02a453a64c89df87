"""Scripted experts: model-free demonstrators for tests, demos, offline runs and BC warm-starts.

``ScriptedExpert`` (agent spec ``sotopia_env.training.experts:ScriptedExpert``) stands in for an expert LLM. It
is no social genius: it greets, states what it wants (its goal, without the hint sections), listens, proposes a
middle ground, agrees and leaves. That is enough to give behaviour cloning a consistent, scenario-dependent
target.

``VerifiableExpert`` plays seat 1 of the verifiable scenarios against the rule partner, from what seat 1 is
shown: each kind's expert policy (``sotopia_env.kinds``), played by one generic agent.
"""

from __future__ import annotations

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.agents.baselines import THANKS, KindPolicy, goal_of
from sotopia_env.observation import Observation

_NONE = AgentAction(action_type=ActionType.none)


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


class VerifiableExpert(KindPolicy):
    """Seat 1 of a verifiable scenario (``--scenarios verifiable``, partner ``rule-partner``): a demonstrator for a
    BC warm-start before episode RL (``benchmarks/episode_rl.py``).
    Agent spec ``sotopia_env.training.experts:VerifiableExpert``; the same policy as ``baseline-heuristic``.

    It acts only on what seat 1 is shown: its goal and the scenario text (the observation's background) and the
    partner's words. Of the hidden facts it reads nothing but their kind (which the scenario's tags say too), and
    plays the kind's heuristic (``Kind.propose``; each kind's module says how).

    Once the partner has agreed (``Kind.agreed``) it thanks it and lets the partner close; it never leaves first,
    so its demonstrations never teach leaving. Deterministic: same conversation, same words.
    """

    THANKS = THANKS

    def __init__(self) -> None:
        super().__init__("heuristic")
