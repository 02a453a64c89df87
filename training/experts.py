"""Scripted experts: model-free demonstrators for tests, demos, offline runs and BC warm-starts.

``ScriptedExpert`` (agent spec ``sotopia_env.training.experts:ScriptedExpert``) stands in for an expert LLM. It
is no social genius: it greets, states what it wants (its goal, without the hint sections), listens, proposes a
middle ground, agrees and leaves. That is enough to give behaviour cloning a consistent, scenario-dependent
target.

``VerifiableExpert`` plays seat 1 of the verifiable scenarios against the rule partner, from what seat 1 is
shown (see its docstring).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Worry:
    """A worry a listener can hear in the partner's objections: the ``cues`` (phrases, lower case) that betray it,
    and the ``reassurance`` that answers it, naming the concern in ordinary words."""

    name: str
    cues: tuple[str, ...]
    reassurance: str


# What a considerate person hears in the objections of the shipped persuasion scenarios (every split: the expert is
# a demonstrator and a ceiling for listening, never evaluated as the learner) and how they would answer. Each
# answer names one worry in a sentence; none lists words (the rules in ``sotopia_env.verifiable`` check both).
WORRIES: tuple[Worry, ...] = (
    Worry(
        "motion sickness",
        ("long rides", "rough on me", "see outside", "trips like this"),
        "You'd have my seat by the window, so you can watch the view the whole way.",
    ),
    Worry(
        "marks on the paintwork",
        ("made a real mess", "redone", "frame"),
        "I'll use removable putty instead of tape, so it won't leave a mark on the paint.",
    ),
    Worry(
        "not knowing how to care for plants",
        ("drown them", "plants and i", "what each one needs"),
        "I'll leave you a written note with how much water each one needs.",
    ),
    Worry(
        "needing the driveway later",
        ("about this evening", "get in later", "my wife"),
        "I'll move it out by four o'clock, well before five.",
    ),
    Worry(
        "a slow connection",
        ("connection", "fragile", "every bit of it"),
        "I'll only check my email, no streaming or downloads, so it won't slow you down.",
    ),
    Worry(
        "fear of strange dogs",
        ("wary of dogs", "experience with a dog", "dogs i don't know"),
        "He's very gentle and calm, and he's trained; he has never tried to bite anyone.",
    ),
    Worry(
        "damage to the drawing",
        ("six hours", "chalk", "delicate"),
        "I'll take my shoes off and step in my socks, so nothing will smudge.",
    ),
    Worry(
        "a long wait at the till",
        ("be quick", "how quick"),
        "It really is just this carton of milk, a single item.",
    ),
    Worry(
        "getting the ladder back in time",
        ("need it myself", "the timing"),
        "I'll bring it back by six tonight, long before you need it.",
    ),
    Worry(
        "losing the charge before a flight",
        ("boarding", "lose my spot", "need this charge"),
        "I only need a few minutes, just enough to send one message.",
    ),
    Worry(
        "getting nothing for the fruit",
        ("all spring", "what do i get"),
        "I'll give you a jar of the jam in return.",
    ),
    Worry(
        "a noisy neighbour before an exam",
        ("big exam", "concentrate"),
        "I'll be completely quiet, with my headphones on the whole time.",
    ),
    Worry(
        "never seeing the money again",
        ("sort it out later", "burned"),
        "I'll pay you back today with a bank transfer.",
    ),
    Worry(
        "being left alone with a child",
        ("while you're gone", "how to find you"),
        "Here's my phone number, and I'll stay right there within sight the whole time.",
    ),
    Worry(
        "breaking the shop's rules",
        ("supposed to", "my boss"),
        "I checked with your manager, and she said it's allowed.",
    ),
    Worry(
        "losing a rare evening of music",
        ("only evening", "to relax", "looking forward"),
        "I have an early start, but you could play it as loud as you like tomorrow or at the weekend.",
    ),
    Worry(
        "a drill that comes back flat",
        ("came back useless", "working when i get it back"),
        "I'll recharge the battery before I give it back.",
    ),
    Worry(
        "the cost of the drive",
        ("isn't free", "money's a bit tight"),
        "I'll pay for the petrol, of course.",
    ),
    Worry(
        "a long ride before a flight",
        ("late for my flight", "all over town"),
        "I'm going to the same terminal, so it's right on the way, with no detour at all.",
    ),
    Worry(
        "a parcel left for weeks",
        ("hallway", "sat there", "two weeks"),
        "I'll collect it as soon as I get home, first thing.",
    ),
    Worry(
        "blame for a theft",
        ("went missing", "responsible", "chase a thief"),
        "It's locked and insured, so nothing would ever fall on you.",
    ),
    Worry(
        "blame for someone falling ill",
        ("fell ill", "health inspector", "come back on my shop"),
        "Our kitchen is licensed and has a food safety certificate.",
    ),
    Worry(
        "the water bill",
        ("isn't cheap", "water company"),
        "I'll read your meter before and after and cover the cost of every drop.",
    ),
    Worry(
        "a bad back",
        ("acting up", "heavy bar"),
        "It's only a light warm-up set, nothing you'd have to catch.",
    ),
)

_SLOT = re.compile(
    r"\b(?:mon|tues|wednes|thurs|fri|satur|sun)day(?:\s+(?:morning|lunchtime|afternoon|evening|night))?\b", re.I
)
_MONEY = re.compile(r"([$€£])\s?(\d[\d,]*(?:\.\d+)?)")


def slots_named(text: str) -> list[str]:
    """The day-and-time slots written in ``text`` ("Friday morning"), in order, without repeats (case kept)."""
    out: list[str] = []
    for match in _SLOT.finditer(text):
        slot = " ".join(match.group().split())
        if slot.lower() not in {s.lower() for s in out}:
            out.append(slot)
    return out


class VerifiableExpert:
    """Seat 1 of a verifiable scenario (``--scenarios verifiable``, partner ``rule-partner``): a demonstrator for a
    BC warm-start before episode RL (``benchmarks/episode_rl.py``).
    Agent spec ``sotopia_env.training.experts:VerifiableExpert``.

    It acts only on what seat 1 is shown: its goal and the scenario text (the observation's background) and the
    partner's words. Of the hidden facts it reads nothing but their kind (which the scenario's tags say too).

    - bargaining: reads its budget from its goal ("at most $400"); offers 70%, then 80%, then 90% of it (rounded
      to 5), or the partner's last counter when that is lower and within budget; one number per line;
    - scheduling: reads its slots from its goal ("Friday morning"); proposes them one at a time, or a slot the
      partner named that it can make;
    - persuasion: opens, listens to the partner's doubts, and answers the worry it hears in them (``WORRIES``:
      cue phrases and a one-sentence reassurance that names that worry only), asking in the same line. A worry it
      tried and that did not land is not tried again; when it hears no cue it asks what would help.

    Once the partner has agreed (it repeated the offer or slot, or said it is convinced) it thanks it and lets
    the partner close; it never leaves first, so its demonstrations never teach leaving. Deterministic: same
    conversation, same words.
    """

    THANKS = "Thank you, that's settled then."  # its line after a deal
    OPENER = "Hi, sorry to bother you. I have a small favour to ask, if you don't mind."
    PROBE = "I'd really like to make this easy for you. What would put your mind at rest?"
    ASK = "Would you do it for me?"
    CONVINCED = ("convinced me", "settles it")  # the rule partner's words when it agrees to a request

    def __init__(self) -> None:
        self.kind: str | None = None

    def reset(self, setup: EpisodeSetup | None = None, seat: int | None = None) -> None:
        from sotopia_env.verifiable import LEARNER_SEAT, facts_of

        self.kind = None
        if setup is None:
            return
        if seat is not None and seat != LEARNER_SEAT:
            raise ValueError(f"VerifiableExpert plays seat {LEARNER_SEAT + 1} (agent1), not seat {seat + 1}")
        self.kind = facts_of(setup.scenario).kind  # the kind only: the rest of the facts stay hidden

    async def act(self, observation: Observation | dict) -> AgentAction:
        obs = Observation.from_env(observation)
        if not obs.my_turn:
            return _NONE
        if self.kind is None:
            raise RuntimeError("VerifiableExpert was not reset with the episode's setup (reset(setup=..., seat=0))")
        spoken = [h for h in obs.history if h.action_type == ActionType.speak.value]
        said = [h.argument for h in spoken if h.agent == obs.agent]
        heard = [h.argument for h in spoken if h.agent != obs.agent]
        if self._agreed(said, heard):
            return _speak(self.THANKS)
        mine = sum(h.agent == obs.agent for h in obs.history)
        move = {"bargaining": self._bargain, "scheduling": self._schedule, "persuasion": self._persuade}
        return _speak(move[self.kind](obs, mine, said, heard))

    def _agreed(self, said: list[str], heard: list[str]) -> bool:
        """Whether the partner's last words agreed to the expert's last proposal."""
        from sotopia_env.verifiable import numbers_in

        if not said or not heard:
            return False
        mine, theirs = said[-1], heard[-1]
        if self.kind == "bargaining":
            return len(numbers_in(mine)) == 1 and numbers_in(theirs) == numbers_in(mine)
        if self.kind == "scheduling":
            return len(slots_named(mine)) == 1 and [s.lower() for s in slots_named(theirs)] == [
                s.lower() for s in slots_named(mine)
            ]
        return any(cue in theirs.lower() for cue in self.CONVINCED)

    def _bargain(self, obs: Observation, mine: int, said: list[str], heard: list[str]) -> str:
        from sotopia_env.verifiable import numbers_in

        money = _MONEY.search(goal_of(obs))
        currency, budget = (money.group(1), float(money.group(2).replace(",", ""))) if money else ("$", 0.0)
        offer = 5 * round(budget * (0.7, 0.8, 0.9)[min(mine, 2)] / 5)
        counter = numbers_in(heard[-1]) if heard else []
        if len(counter) == 1 and counter[0] <= min(offer, budget):
            return f"Alright, {currency}{int(counter[0])} works for me."
        lines = ("Would you take {p} for it?", "I could go up to {p}.", "My best offer is {p}.")
        return lines[min(mine, 2)].format(p=f"{currency}{offer}")

    def _schedule(self, obs: Observation, mine: int, said: list[str], heard: list[str]) -> str:
        free = slots_named(goal_of(obs))
        if not free:
            return "When would suit you?"
        ok = {s.lower() for s in free}
        offered = [s for s in slots_named(heard[-1] if heard else "") if s.lower() in ok]
        if offered:
            return f"Yes, {offered[0]} works for me."
        slot = free[mine % len(free)]
        return f"Could we do {slot}?" if mine else f"Hi! Would {slot} work for you?"

    def _persuade(self, obs: Observation, mine: int, said: list[str], heard: list[str]) -> str:
        if mine == 0 or not heard:
            return self.OPENER
        tried = {w.name for w in WORRIES if any(w.reassurance in line for line in said)}
        latest, everything = heard[-1].lower(), " ".join(heard).lower()

        def rank(worry: Worry) -> tuple[int, int]:
            return sum(c in latest for c in worry.cues), sum(c in everything for c in worry.cues)

        candidates = [w for w in WORRIES if w.name not in tried and rank(w) > (0, 0)]
        if not candidates:
            return self.PROBE
        best = max(candidates, key=rank)  # the first of the best, in table order
        return f"{best.reassurance} {self.ASK}"
