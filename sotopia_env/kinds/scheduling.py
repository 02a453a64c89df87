"""Scheduling: a meeting time. The learner knows its own slots; the rule partner hides the ones it can do.

- **Rules.** A proposal is the one slot named in the learner's speech (case-insensitive, as written in
  ``slots``). A slot the partner can do is agreed; otherwise the partner declines and names the next of its
  slots it has not named yet. No slot named (or no speech): the partner names its next slot. Several slots: the
  partner asks for one. The reply to the ``max_rounds``-th proposal without agreement is the partner leaving.
- **Judge.** Learner = 10 when both agreed on a slot in ``agent_slots`` (success), else 0; partner = 10 on any
  agreement.
- **Expert.** Reads its slots from its goal ("Friday morning"); proposes them one at a time, or a slot the
  partner named that it can make.
- **Partial credit.** 1 once the learner proposed one slot that it can make.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from sotopia_env.actions import AgentAction
from sotopia_env.kinds.base import Kind, LearnerView, Move, Outcome, Talk, VerifiableFacts, spoken

_SLOT = re.compile(
    r"\b(?:mon|tues|wednes|thurs|fri|satur|sun)day(?:\s+(?:morning|lunchtime|afternoon|evening|night))?\b", re.I
)


class SchedulingFacts(VerifiableFacts):
    """A meeting time: ``slots`` are the times the talk may name (the scenario text lists them).

    The learner's goal states its own ``agent_slots``; the partner hides ``partner_slots`` (in the order it
    offers them) and agrees to a proposed slot it can do. At least one slot must suit both.
    """

    kind: Literal["scheduling"] = "scheduling"
    event: str = Field(min_length=1)  # "the team lunch"
    slots: list[str] = Field(min_length=2)
    agent_slots: list[str] = Field(min_length=1)
    partner_slots: list[str] = Field(min_length=1)  # hidden
    max_rounds: int = Field(default=5, ge=1)

    @model_validator(mode="after")
    def _slots(self) -> SchedulingFacts:
        known = {s.lower() for s in self.slots}
        if len(known) != len(self.slots):
            raise ValueError("slots must be distinct")
        for a in known:
            if any(a != b and re.search(rf"\b{re.escape(a)}\b", b) for b in known):
                raise ValueError(f"slot {a!r} is part of another slot's name; slots must not contain each other")
        for name in ("agent_slots", "partner_slots"):
            unknown = [s for s in getattr(self, name) if s.lower() not in known]
            if unknown:
                raise ValueError(f"{name}: {unknown[0]!r} is not one of slots")
        if not {s.lower() for s in self.agent_slots} & {s.lower() for s in self.partner_slots}:
            raise ValueError("agent_slots and partner_slots share no slot")
        return self


@dataclass
class SchedulingTalk(Talk):
    named: list[str] = field(default_factory=list)  # the slots the partner has named


def slots_in(text: str, slots: Sequence[str]) -> list[str]:
    """The slots of ``slots`` named in ``text`` (case-insensitive, whole words), in ``slots`` order."""
    flat = " ".join(text.lower().replace("-", " ").split())
    return [s for s in slots if re.search(rf"\b{re.escape(' '.join(s.lower().replace('-', ' ').split()))}\b", flat)]


def slots_named(text: str) -> list[str]:
    """The day-and-time slots written in ``text`` ("Friday morning"), in order, without repeats (case kept): how
    the expert, which is not told ``slots``, reads them."""
    out: list[str] = []
    for match in _SLOT.finditer(text):
        slot = " ".join(match.group().split())
        if slot.lower() not in {s.lower() for s in out}:
            out.append(slot)
    return out


class Scheduling(Kind):
    name = "scheduling"
    facts_model = SchedulingFacts
    talk_model = SchedulingTalk
    LINES: ClassVar[dict[str, tuple[str, ...]]] = {
        "open": (
            "Hi! We still need to find a time for {event}. When works for you?",
            "Hey, good timing. When should we do {event}?",
        ),
        "accept": (
            "{value} works for me. Let's lock it in for {event}.",
            "Yes, I can do {value}. Great, that's settled.",
            "{value} is perfect. I'll put {event} in my calendar.",
        ),
        "decline": (
            "I can't make that one, unfortunately. Could you do {value}?",
            "That doesn't work for me, sorry. How about {value}?",
            "No, I'm busy then. I could do {value} though.",
        ),
        "propose": (
            "I could do {value}.",
            "How about {value}? That works on my side.",
            "{value} would suit me.",
        ),
        "no_more": (
            "I can't do that one either, and I've told you all the times I have.",
            "That one's out for me too, I'm afraid. I don't have anything else.",
        ),
        "ask_one": (
            "Which one time should we go with? Just pick one for me.",
            "Sorry, I need a single time. Which one do you want?",
        ),
        "leave": (
            "We can't seem to find a time. Let's try again another week.",
            "This isn't working out, sorry. I have to run, let's talk later.",
        ),
        "goodbye": ("Great, see you then!", "Perfect. Talk to you soon!"),
    }

    # -- rules --------------------------------------------------------------------------------------------------

    def respond(self, facts: SchedulingFacts, talk: SchedulingTalk, action: AgentAction) -> Move:
        speech = spoken(action)
        named = slots_in(speech, facts.slots) if speech is not None else []
        partner_ok = {s.lower() for s in facts.partner_slots}
        if len(named) == 1 and named[0].lower() in partner_ok:
            talk.deal = named[0]
            return Move("accept", named[0], talk.rounds)
        talk.rounds += 1
        if talk.rounds >= facts.max_rounds:
            return Move("leave", None, talk.rounds)
        if len(named) > 1:
            return Move("ask_one", None, talk.rounds)
        fresh = [s for s in facts.partner_slots if s not in talk.named]
        if not fresh:
            return Move("no_more" if named else "ask_one", named[0] if named else None, talk.rounds)
        talk.named.append(fresh[0])
        return Move("decline" if named else "propose", fresh[0], talk.rounds)

    def outcome(self, facts: SchedulingFacts, talk: Talk) -> Outcome:
        if talk.deal is None:
            return Outcome(False, False, 0, 0, f"no time agreed for {facts.event} after {talk.rounds} rounds")
        fits = str(talk.deal).lower() in {s.lower() for s in facts.agent_slots}
        why = "which suits the learner" if fits else "which the learner cannot make"
        return Outcome(True, fits, 10 if fits else 0, 10, f"agreed on {talk.deal} for {facts.event}, {why}")

    # -- partner ------------------------------------------------------------------------------------------------

    def fields(self, facts: SchedulingFacts, move: Move) -> dict[str, str]:
        return {"event": facts.event, "value": str(move.value or "")}

    # -- expert -------------------------------------------------------------------------------------------------

    def agreed(self, view: LearnerView) -> bool:
        mine = slots_named(view.said[-1])
        return len(mine) == 1 and [s.lower() for s in slots_named(view.heard[-1])] == [s.lower() for s in mine]

    def propose(self, view: LearnerView) -> str:
        free = slots_named(view.goal)
        if not free:
            return "When would suit you?"
        ok = {s.lower() for s in free}
        offered = [s for s in slots_named(view.heard[-1] if view.heard else "") if s.lower() in ok]
        if offered:
            return f"Yes, {offered[0]} works for me."
        slot = free[view.moves % len(free)]
        return f"Could we do {slot}?" if view.moves else f"Hi! Would {slot} work for you?"

    # -- partial credit -----------------------------------------------------------------------------------------

    def partial_credit(self, facts: SchedulingFacts, speeches: Sequence[str], talk: Talk) -> float:
        mine = {s.lower() for s in facts.agent_slots}
        return float(any(len(n) == 1 and n[0].lower() in mine for n in (slots_in(s, facts.slots) for s in speeches)))


KIND = Scheduling()
