"""``ScriptedExpert``: a model-free stand-in for an expert LLM, for tests, demos and offline runs.

Use it wherever an agent spec goes: ``sotopia_env.training.experts:ScriptedExpert``. It is
no social genius: it greets, states what it wants (its goal, without the hint
sections), listens, proposes a middle ground, agrees and leaves. That is enough
to give behaviour cloning a consistent, scenario-dependent target.
"""

from __future__ import annotations

from typing import Any

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.episode_setup import EpisodeSetup
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


class VerifiableExpert:
    """Seat 1 of a verifiable scenario (``--scenarios verifiable``, partner ``rule-partner``): a demonstrator for a
    BC warm-start before episode RL (``benchmarks/episode_rl.py``).
    Agent spec ``sotopia_env.training.experts:VerifiableExpert``.

    - bargaining: offers 70%, then 80%, then 90% of its budget (rounded to 5), or the partner's last counter when
      that is lower and within budget; one number per line;
    - scheduling: proposes its own slots one at a time, or a slot the partner named that it can make;
    - persuasion: asks the favour, then answers the partner's doubt in the doubt's own words and asks again. The
      partner's concern is hidden and its doubts only hint at it, so this rarely wins: a BC filter on the goal
      (``min_goal``) drops those episodes rather than teach words seat 1 could not have known.

    Once the partner has agreed (the rules replayed over the conversation) it thanks it and lets the partner
    close; it never leaves first, so its demonstrations never teach leaving. It uses only what seat 1 is told
    (its goal, and the partner's words), besides knowing which kind of scenario it is in. Deterministic: same
    conversation, same words.
    """

    THANKS = "Thank you, that's settled then."  # its line after a deal

    def __init__(self) -> None:
        self.facts: Any = None

    def reset(self, setup: EpisodeSetup | None = None, seat: int | None = None) -> None:
        from sotopia_env.verifiable import LEARNER_SEAT, facts_of

        self.facts = None
        if setup is None:
            return
        if seat is not None and seat != LEARNER_SEAT:
            raise ValueError(f"VerifiableExpert plays seat {LEARNER_SEAT + 1} (agent1), not seat {seat + 1}")
        self.facts = facts_of(setup.scenario)

    async def act(self, observation: Observation | dict) -> AgentAction:
        obs = Observation.from_env(observation)
        if not obs.my_turn:
            return _NONE
        if self.facts is None:
            raise RuntimeError("VerifiableExpert was not reset with the episode's setup (reset(setup=..., seat=0))")
        from sotopia_env.verifiable import replay

        if replay(self.facts, ((h.agent != obs.agent, h.as_action()) for h in obs.history)).deal is not None:
            return _speak(self.THANKS)
        mine = sum(h.agent == obs.agent for h in obs.history)
        heard = [h.argument for h in obs.history if h.agent != obs.agent and h.action_type == ActionType.speak.value]
        last = heard[-1] if heard else ""
        move = {"bargaining": self._bargain, "scheduling": self._schedule, "persuasion": self._persuade}
        return _speak(move[self.facts.kind](mine, last))

    def _bargain(self, mine: int, last: str) -> str:
        from sotopia_env.verifiable import numbers_in

        f = self.facts
        offer = 5 * round(f.budget * (0.7, 0.8, 0.9)[min(mine, 2)] / 5)
        counter = numbers_in(last)
        if len(counter) == 1 and counter[0] <= min(offer, f.budget):
            return f"Alright, {f.currency}{int(counter[0])} works for me."
        lines = ("Would you take {p} for {item}?", "I could go up to {p}.", "My best offer is {p}.")
        return lines[min(mine, 2)].format(p=f"{f.currency}{offer}", item=f.item)

    def _schedule(self, mine: int, last: str) -> str:
        from sotopia_env.verifiable import slots_in

        f = self.facts
        offered = [s for s in slots_in(last, f.slots) if s in f.agent_slots]
        if offered:
            return f"Yes, {offered[0]} works for me."
        slot = f.agent_slots[mine % len(f.agent_slots)]
        return f"Could we do {slot}?" if mine else f"Hi! Would {slot} work for {f.event}?"

    def _persuade(self, mine: int, last: str) -> str:
        if mine == 0 or not last:
            return "Hi, sorry to bother you. I have a small favour to ask, if you don't mind."
        words = [w.strip(".,!?;:'\"").lower() for w in last.split()]
        worry = max((w for w in words if w.isalpha()), key=len, default="that")
        return f"I hear you about the {worry}, and I'll take care of it. Would you do it for me?"
