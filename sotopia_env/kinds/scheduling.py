"""Scheduling: a meeting time. The learner knows its own slots; the rule partner hides which days and times of day
it cannot do, drawn anew each episode, and answers only what it is asked.

A slot is a weekday and a time of day ("Thursday afternoon"); its *items* are its day and its time. The partner
has ``blocked`` items (days it cannot do at all, times of day it cannot do on any day): a slot suits it when
neither its day nor its time is blocked. Exactly one of the learner's ``agent_slots`` suits the partner.

- **Draw** (``Kind.draw``, per episode). The shared slot is one of ``agent_slots``, uniformly. Of the items of
  the learner's slots, ``blocked`` holds a subset drawn uniformly among those that leave that slot, and no other
  slot of the learner's, suiting the partner; every other item of ``slots`` is blocked with probability 1/2. The
  order is shuffled (the partner's cue names the first). A scenario may fix ``blocked`` (tests, hand-made cases);
  the shipped ones leave it to the draw, so memorising an instance does not help.
- **Rules** (one learner action, one reply). Case-insensitive, whole words, a hyphen as a space; a slot is
  named when its day and time stand together ("Thursday afternoon"), an item when its day or time does ("Thursday",
  "mornings"), among the days and times of ``slots``.
  - *A proposal*: a speech that names exactly one slot. One that suits the partner is agreed. Otherwise it
    declines ("I can't make that one") and names no other time: a *declined proposal*.
  - *A targeted question*: a speech that names no slot and exactly one item. The partner answers truthfully about
    that item alone: "Thursday is fine for me in general" (the day is not blocked: some time of it may be) or
    "Mornings are out for me, I'm afraid" (blocked on every day).
  - *Several slots*, or no slot and several items (every day in one line): no proposal and no answer; the partner
    asks for one at a time.
  - *Anything else* (no slot and no item: "When are you free?", a greeting): a general question; a partial cue,
    always the same one: the first of its blocked items ("I'm quite booked up; Fridays are out for me, for a
    start"). A non-verbal or physical action gets a nudge with no information.
  Every reply but an agreement uses up a round; the reply to the ``max_rounds``-th learner action without
  agreement is the partner leaving. The partner never names a slot it has not been offered, nor more than one item
  in a line, nor its free times: its whole availability is never said in one line.
- **Judge.** On agreement on a slot of ``agent_slots``: learner = max(1, 10 - 4 * declined proposals - 2 * other
  rounds used) (``DECLINE_COST``, ``ROUND_COST``, ``FLOOR``): every question costs, a wrong guess costs double. An
  agreed slot the learner cannot make, or no agreement: 0. Success = agreement on a slot of ``agent_slots``.
  Partner = 10 on any agreement.
- **Baselines.** *Oracle*: proposes the shared slot at once (10). *Heuristic* (``propose``/``agreed``, also the
  BC expert): reads its slots from its goal and the partner's answers from its words (a reply with "no", "not",
  "out" or "can't" is a no; a reply that repeats its proposed slot an agreement), and plays the plan that
  maximises the expected goal over the draw's distribution (which it can rebuild from its own slots alone): ask
  about the day or time that splits the slots still possible best, propose a slot once it is (nearly) sure
  (exactly for up to 4 slots of its own, the shipped size; one step ahead past that, as the exact plan is slow).
  *Random*: each turn, with even odds, proposes one of its own slots or asks about one of their days or times,
  at random. The *slot lister* (``agents/exploits.py``: its slots in goal order, one per turn) pays 4 a guess
  and scores below the heuristic. Mean goal over 20 draws per instance (``python
  benchmarks/verifiable_baselines.py --kinds scheduling``): dev random 3.3, heuristic 5.9, oracle 10, lister 4.9;
  test 2.9, 5.7, 10 and 4.7.
- **Partial credit** (the dense reward of a failure): the share of the learner's own slots whose fit with the
  partner its targeted questions and proposals have settled (a slot is settled when it was proposed, when its day
  or time was answered "out", or when both were answered "fine"); a general question settles nothing.
"""

from __future__ import annotations

import functools
import itertools
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from sotopia_env.actions import AgentAction
from sotopia_env.kinds.base import Kind, LearnerView, Move, Outcome, Talk, VerifiableFacts, spoken
from sotopia_env.kinds.registry import register_kind

DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
TIMES = ("morning", "lunchtime", "afternoon", "evening", "night")
DECLINE_COST, ROUND_COST, FLOOR = 4, 2, 1  # the judge: a declined proposal, any other round; the floor on agreement
PLAN_ROUNDS = 5  # the rounds the heuristic plans for (the default ``max_rounds``)
EXACT_PLAN_SLOTS = 4  # up to this many slots of its own the heuristic plans exactly (fast); past it, greedily

_SLOT = re.compile(rf"\b(?:{'|'.join(DAYS)})\s+(?:{'|'.join(TIMES)})\b", re.I)
_ITEM = re.compile(rf"\b({'|'.join(DAYS + TIMES)})s?\b", re.I)
_NO = re.compile(r"\b(?:no|not|out|can't|cannot)\b", re.I)


def _flat(text: str) -> str:
    return " ".join(text.lower().replace("-", " ").split())


def split_slot(slot: str) -> tuple[str, str]:
    """A slot's items, lowercase: ("thursday", "afternoon")."""
    day, time = _flat(slot).split()
    return day, time


class SchedulingFacts(VerifiableFacts):
    """A meeting time: ``slots`` are the times the talk may name (the scenario text lists them), each a weekday and
    a time of day.

    The learner's goal states its own ``agent_slots`` (in its order). Hidden and drawn per episode
    (``Kind.draw``): the partner's ``blocked`` days and times of day, which leave exactly one of ``agent_slots``
    suiting it. A scenario may fix ``blocked`` instead (at least one of ``agent_slots`` must then suit it).
    """

    kind: Literal["scheduling"] = "scheduling"
    event: str = Field(min_length=1)  # "the team lunch"
    slots: list[str] = Field(min_length=2)
    agent_slots: list[str] = Field(min_length=1)
    blocked: list[str] | None = None  # hidden, drawn: the partner's blocked days and times, its cue's first
    max_rounds: int = Field(default=PLAN_ROUNDS, ge=1)

    @field_validator("slots")
    @classmethod
    def _slot_names(cls, slots: list[str]) -> list[str]:
        for slot in slots:
            if not _SLOT.fullmatch(_flat(slot)):
                raise ValueError(f"slot {slot!r} is not a weekday and a time of day ({', '.join(TIMES)})")
        return slots

    @model_validator(mode="after")
    def _slots(self) -> SchedulingFacts:
        known = [_flat(s) for s in self.slots]
        if len(set(known)) != len(known):
            raise ValueError("slots must be distinct")
        unknown = [s for s in self.agent_slots if _flat(s) not in known]
        if unknown:
            raise ValueError(f"agent_slots: {unknown[0]!r} is not one of slots")
        if len({_flat(s) for s in self.agent_slots}) != len(self.agent_slots):
            raise ValueError("agent_slots must be distinct")
        if self.blocked is not None:
            items = self.items()
            stray = [b for b in self.blocked if b.lower() not in items]
            if stray:
                raise ValueError(f"blocked: {stray[0]!r} is not a day or time of day of slots")
            if not any(self.suits(s) for s in self.agent_slots):
                raise ValueError("blocked rules out every one of agent_slots")
        return self

    def items(self) -> list[str]:
        """The days and times of day of ``slots``, lowercase, days first, each in order of first appearance."""
        pairs = [split_slot(s) for s in self.slots]
        return list(dict.fromkeys([d for d, _ in pairs] + [t for _, t in pairs]))

    def suits(self, slot: str) -> bool:
        """Whether the partner can do ``slot``: neither its day nor its time is blocked."""
        blocked = {b.lower() for b in self.blocked or ()}
        return not blocked & set(split_slot(slot))

    def shared(self) -> list[str]:
        """The learner's slots that suit the partner, in the learner's order (one, when drawn)."""
        return [s for s in self.agent_slots if self.suits(s)]


@dataclass
class SchedulingTalk(Talk):
    declined: list[str] = field(default_factory=list)  # the learner's declined proposals
    learned: dict[str, bool] = field(default_factory=dict)  # item -> free?, from its targeted questions


def slots_in(text: str, slots: Sequence[str]) -> list[str]:
    """The slots of ``slots`` named in ``text`` (case-insensitive, whole words), in ``slots`` order."""
    flat = _flat(text)
    return [s for s in slots if re.search(rf"\b{re.escape(_flat(s))}\b", flat)]


def items_in(text: str, items: Sequence[str]) -> list[str]:
    """The days and times of ``items`` (lowercase) that ``text`` names ("Thursdays", "mornings"), in text order."""
    found = [m.group(1).lower() for m in _ITEM.finditer(_flat(text))]
    return [i for i in dict.fromkeys(found) if i in items]


def slots_named(text: str) -> list[str]:
    """The day-and-time slots written in ``text`` ("Friday morning"), in order, without repeats (case kept): how
    the expert, which is not told ``slots``, reads them. A bare day is no slot."""
    out: list[str] = []
    for match in _SLOT.finditer(text.replace("-", " ")):
        slot = " ".join(match.group().split())
        if slot.lower() not in {s.lower() for s in out}:
            out.append(slot)
    return out


def _said_item(item: str) -> dict[str, str]:
    """How the partner says an item: "Thursday is", "mornings are"."""
    if item in DAYS:
        return {"item": item.capitalize(), "be": "is"}
    return {"item": item + "s", "be": "are"}


class Scheduling(Kind):
    name = "scheduling"
    facts_model = SchedulingFacts
    talk_model = SchedulingTalk
    LINES: ClassVar[dict[str, tuple[str, ...]]] = {
        "open": (
            "Hi! We still need to find a time for {event}. What did you have in mind?",
            "Hey, good timing. When should we do {event}?",
        ),
        "accept": (
            "{value} works for me. Let's lock it in for {event}.",
            "Yes, I can do {value}. Great, that's settled.",
            "{value} is perfect. I'll put {event} in my calendar.",
        ),
        "decline": (
            "I can't make that one, unfortunately.",
            "That doesn't work for me, sorry.",
            "No, I'm busy then, I'm afraid.",
        ),
        "yes": (
            "{item} {be} fine for me in general.",
            "Yes, {item} {be} fine by me, as a rule.",
        ),
        "no": (
            "{item} {be} out for me, I'm afraid.",
            "No, {item} {be} no good for me at all.",
        ),
        "cue": (
            "I'm quite booked up. {item} {be} out for me, for a start.",
            "My week is pretty full. I can tell you {item} {be} out for me.",
        ),
        "vague": ("I'm fairly flexible. What were you thinking?",),
        "nudge": (
            "So, when would suit you? Ask me about a day, or suggest a time.",
            "Sorry, I'm not sure what you mean. Which time were you thinking of?",
        ),
        "ask_one": (
            "One thing at a time, please. Which one time, or which day, do you mean?",
            "Sorry, that's a lot at once. Could you ask about one day or suggest one time?",
        ),
        "leave": (
            "We can't seem to find a time. Let's try again another week.",
            "This isn't working out, sorry. I have to run, let's talk later.",
        ),
        "goodbye": ("Great, see you then!", "Perfect. Talk to you soon!"),
    }

    # -- the episode's hidden type --------------------------------------------------------------------------------

    def draw(self, facts: SchedulingFacts, rng: random.Random) -> SchedulingFacts:
        """The partner's blocked days and times (see the module docstring); a fixed ``blocked`` stays."""
        if facts.blocked is not None:
            return facts
        shared = rng.choice(facts.agent_slots)
        keep = set(split_slot(shared))
        own = list(dict.fromkeys(i for s in facts.agent_slots for i in split_slot(s)))
        others = [split_slot(s) for s in facts.agent_slots if s != shared]
        choices = [
            set(combo)
            for r in range(len(own) + 1)
            for combo in itertools.combinations([i for i in own if i not in keep], r)
            if all(set(pair) & set(combo) for pair in others)
        ]
        blocked = sorted(rng.choice(choices), key=own.index)
        blocked += [i for i in facts.items() if i not in own and rng.random() < 0.5]
        rng.shuffle(blocked)
        return facts.model_copy(update={"blocked": blocked})

    # -- rules --------------------------------------------------------------------------------------------------

    def respond(self, facts: SchedulingFacts, talk: SchedulingTalk, action: AgentAction) -> Move:
        speech = spoken(action)
        named = slots_in(speech, facts.slots) if speech is not None else []
        if len(named) == 1 and facts.suits(named[0]):
            talk.deal = named[0]
            return Move("accept", named[0], talk.rounds)
        talk.rounds += 1
        if len(named) == 1:
            talk.declined.append(named[0])
        if talk.rounds >= facts.max_rounds:
            return Move("leave", None, talk.rounds)
        if len(named) == 1:
            return Move("decline", named[0], talk.rounds)
        if speech is None:
            return Move("nudge", None, talk.rounds)
        items = items_in(speech, facts.items()) if not named else []
        if named or len(items) > 1:
            return Move("ask_one", None, talk.rounds)
        if len(items) == 1:
            free = items[0] not in {b.lower() for b in facts.blocked or ()}
            talk.learned[items[0]] = free
            return Move("yes" if free else "no", items[0], talk.rounds)
        cue = (facts.blocked or [None])[0]
        return Move("cue" if cue else "vague", cue, talk.rounds)

    def outcome(self, facts: SchedulingFacts, talk: SchedulingTalk) -> Outcome:
        if talk.deal is None:
            return Outcome(False, False, 0, 0, f"no time agreed for {facts.event} after {talk.rounds} rounds")
        if _flat(str(talk.deal)) not in {_flat(s) for s in facts.agent_slots}:
            return Outcome(
                True, False, 0, 10, f"agreed on {talk.deal} for {facts.event}, which the learner cannot make"
            )
        declined = len(talk.declined)
        other = talk.rounds - declined
        goal = max(FLOOR, 10 - DECLINE_COST * declined - ROUND_COST * other)
        return Outcome(
            True,
            True,
            goal,
            10,
            f"agreed on {talk.deal} for {facts.event} after {declined} declined proposal(s) and {other} other "
            f"round(s): max({FLOOR}, 10 - {DECLINE_COST}*{declined} - {ROUND_COST}*{other}) = {goal}",
        )

    # -- partner ------------------------------------------------------------------------------------------------

    def fields(self, facts: SchedulingFacts, move: Move) -> dict[str, str]:
        out = {"event": facts.event, "value": str(move.value or "")}
        if move.act in ("yes", "no", "cue"):
            out.update(_said_item(str(move.value)))
        return out

    # -- the heuristic (the BC expert) ----------------------------------------------------------------------------

    def agreed(self, view: LearnerView) -> bool:
        mine = slots_named(view.said[-1])
        return len(mine) == 1 and [s.lower() for s in slots_named(view.heard[-1])] == [mine[0].lower()]

    def propose(self, view: LearnerView) -> str:
        """The plan of best expected goal (``_plan``) from what the partner's answers have left possible."""
        own = tuple(s.lower() for s in slots_named(view.goal))
        if not own:
            return "When would suit you?"
        seen = _observed(view, own)
        alive = frozenset(i for i, (b, _) in enumerate(_prior(own)) if seen.allows(b))
        plan = _plan if len(own) <= EXACT_PLAN_SLOTS else _greedy
        action = plan(own, alive, seen.declines, seen.others)[1] if alive else None
        if action is None:  # the answers fit no type of the draw's: the first slot not yet ruled out
            left = [s for s in own if not seen.rules_out(s)] or list(own)
            action = ("propose", left[0])
        return _line(action, view.moves)

    # -- the other baselines --------------------------------------------------------------------------------------

    def random_line(self, view: LearnerView, rng: random.Random) -> str:
        """With even odds, one of its own slots proposed, or a question about one of their days or times."""
        own = [s.lower() for s in slots_named(view.goal)]
        if not own:
            return "When would suit you?"
        if rng.random() < 0.5:
            return _line(("propose", rng.choice(own)), view.moves)
        items = list(dict.fromkeys(i for s in own for i in split_slot(s)))
        return _line(("ask", rng.choice(items)), view.moves)

    def oracle_line(self, facts: SchedulingFacts, view: LearnerView) -> str:
        """The shared slot, proposed at once: agreed, 10."""
        return _line(("propose", facts.shared()[0].lower()), view.moves)

    # -- partial credit -----------------------------------------------------------------------------------------

    def partial_credit(self, facts: SchedulingFacts, speeches: Sequence[str], talk: SchedulingTalk) -> float:
        proposed = {_flat(s) for s in talk.declined} | ({_flat(str(talk.deal))} if talk.deal is not None else set())
        no = {i for i, free in talk.learned.items() if not free}
        yes = {i for i, free in talk.learned.items() if free}
        settled = [
            s for s in facts.agent_slots if _flat(s) in proposed or set(split_slot(s)) & no or set(split_slot(s)) <= yes
        ]
        return len(settled) / len(facts.agent_slots)


# -- the heuristic's inference: the draw's distribution rebuilt from the learner's own slots ---------------------


@dataclass
class _Seen:
    """What the learner has learned from the partner's replies."""

    out: set[str] = field(default_factory=set)  # items answered "out"
    fine: set[str] = field(default_factory=set)  # items answered "fine"
    declined: set[str] = field(default_factory=set)  # its proposals declined
    declines: int = 0
    others: int = 0  # rounds used otherwise

    def allows(self, blocked: frozenset[str]) -> bool:
        return (
            self.out <= blocked and not self.fine & blocked and all(set(split_slot(s)) & blocked for s in self.declined)
        )

    def rules_out(self, slot: str) -> bool:
        return slot in self.declined or bool(set(split_slot(slot)) & self.out)


def _observed(view: LearnerView, own: tuple[str, ...]) -> _Seen:
    """The partner's reply to each of the learner's lines (the replies follow its lines; an opening line first)."""
    seen = _Seen()
    offset = max(0, len(view.heard) - len(view.said))
    for line, reply in zip(view.said, view.heard[offset:], strict=False):
        slots = [s.lower() for s in slots_named(line)]
        if len(slots) == 1:
            if [s.lower() for s in slots_named(reply)] != slots:
                seen.declined.add(slots[0])
                seen.declines += 1
            continue
        seen.others += 1
        items = [m.group(1).lower() for m in _ITEM.finditer(line)]
        if not slots and len(set(items)) == 1:
            (seen.out if _NO.search(reply) else seen.fine).add(items[0])
    return seen


@functools.lru_cache(maxsize=256)
def _prior(own: tuple[str, ...]) -> tuple[tuple[frozenset[str], float], ...]:
    """The draw's types over the learner's own items: (blocked items, probability), each leaving exactly one of
    ``own`` free; uniform over the free slot, then over the blocked sets that leave it (as ``Scheduling.draw``)."""
    pairs = [set(split_slot(s)) for s in own]
    items = list(dict.fromkeys(i for s in own for i in split_slot(s)))
    by_free: dict[int, list[frozenset[str]]] = {}
    for r in range(len(items) + 1):
        for combo in itertools.combinations(items, r):
            free = [k for k, pair in enumerate(pairs) if not pair & set(combo)]
            if len(free) == 1:
                by_free.setdefault(free[0], []).append(frozenset(combo))
    return tuple((b, 1 / len(by_free) / len(bs)) for bs in by_free.values() for b in bs)


def _score(declines: int, others: int) -> int:
    return max(FLOOR, 10 - DECLINE_COST * declines - ROUND_COST * others)


@functools.lru_cache(maxsize=65536)
def _plan(own: tuple[str, ...], alive: frozenset[int], declines: int, others: int) -> tuple[float, tuple | None]:
    """The best expected goal (weighted by the types still ``alive``) and the action that reaches it: ("propose",
    slot) or ("ask", item). Ties go to proposals, in goal order, then questions."""
    if declines + others >= PLAN_ROUNDS or not alive:
        return 0.0, None
    prior = _prior(own)
    best: tuple[float, tuple | None] = (0.0, None)
    for slot in own:
        pair = set(split_slot(slot))
        ok = frozenset(i for i in alive if not pair & prior[i][0])
        if not ok:
            continue
        value = sum(prior[i][1] for i in ok) * _score(declines, others)
        value += _plan(own, alive - ok, declines + 1, others)[0] if alive - ok else 0.0
        if value > best[0] + 1e-9:
            best = (value, ("propose", slot))
    for item in dict.fromkeys(i for s in own for i in split_slot(s)):
        free = frozenset(i for i in alive if item not in prior[i][0])
        if not free or free == alive:
            continue
        value = _plan(own, free, declines, others + 1)[0] + _plan(own, alive - free, declines, others + 1)[0]
        if value > best[0] + 1e-9:
            best = (value, ("ask", item))
    return best


def _greedy(own: tuple[str, ...], alive: frozenset[int], declines: int, others: int) -> tuple[float, tuple | None]:
    """``_plan`` for many slots, one step ahead: the likeliest slot once it is free in at least half the types still
    alive, else the question whose answer splits them most evenly (by probability)."""
    prior = _prior(own)
    total = sum(prior[i][1] for i in alive)
    odds = [sum(prior[i][1] for i in alive if not set(split_slot(s)) & prior[i][0]) / total for s in own]
    if max(odds) >= 0.5:
        return max(odds), ("propose", own[odds.index(max(odds))])
    items = list(dict.fromkeys(i for s in own for i in split_slot(s)))
    split = [min(m, total - m) for m in (sum(prior[i][1] for i in alive if item not in prior[i][0]) for item in items)]
    return max(odds), ("ask", items[split.index(max(split))])


def _line(action: tuple, moves: int) -> str:
    """An action of the baselines in words: one slot proposed, or one day or time of day asked about."""
    what, value = action
    if what == "propose":
        slot = " ".join(w.capitalize() if w in DAYS else w for w in value.split())
        return f"Could we do {slot}?" if moves else f"Hi! Would {slot} work for you?"
    if value in DAYS:
        return f"Can you do {value.capitalize()}?" if moves else f"Hi! Can you do {value.capitalize()}?"
    return f"Are {value}s OK for you?" if moves else f"Hi! Are {value}s OK for you?"


KIND = register_kind(Scheduling())
