"""Split: a multi-issue split with private values (the Deal-or-No-Deal / CaSiNo family).

A pool of a few item types with counts (3 books, 2 hats, 1 ball) is split between the learner (seat 1) and the
rule partner (seat 2). Each side scores its share with its own per-item values, which sum to 10 over the whole
pool (the DoND convention), so every utility is 0..10. The learner's values are in its goal; the partner's values
and the least it accepts (its threshold) are hidden and drawn per episode from the instance's candidates
(``Kind.draw``), so memorising an instance does not help. The sides' values conflict on some item types and not on
others: the best deal comes only to a learner that finds out which.

- **Rules.** An offer is a speech that states the learner's own share of every item type with a count: a number
  in digits or a word (``zero`` .. ``ten``, or ``no``) right before the item's name, singular or plural ("I take
  2 books, 1 hat and 0 balls"). Every count is read as the learner's share; the partner gets the rest. A speech
  with no count, with some item type left out, with two different counts for one type, or with more of a type
  than the pool holds is no offer: the partner asks for one concrete split. An offer whose rest is worth at least
  the partner's threshold to it is accepted. Otherwise the partner refuses with two cues: the item type it needs
  most (its top value per item, whatever the offer) and whether the offer was ``close`` (its rest within
  ``CLOSE`` of the threshold) or ``far``. It never states a value. The reply to the ``max_rounds``-th learner
  action without agreement is the partner leaving (2 by default: one probe, then one last offer).
- **Judge.** Learner = 10 * clip(U_learner / U_best), where U_best is the learner's best utility among the splits
  the partner would accept (exact, from the drawn facts); no deal: 0; success = a deal. Partner = its own utility
  of the deal (0..10). The reasoning states the joint efficiency: (U_learner + U_partner) / the best sum.
- **Baselines.** Random: a uniformly random split each turn. Heuristic (``propose``/``agreed``, on the goal and
  the partner's words only): opens by keeping the types it values most and leaving the partner half of the items
  (its least valued); after a refusal it concedes the type the partner needs (one item if "close", all of it if
  "far"; if that type is all the partner's already, its own least valued items). Oracle: offers the U_best split
  on its first turn. The exploit kept as a test (ask for everything, then concede one item per turn in a fixed
  order) scores below the heuristic.
- **Partial credit.** 0.5 once the learner made a valid offer, 1 on agreement.

A line that holds every item name and every number ("0 1 2 3 books hats balls") names no count before each item
type, or several counts for one, so it is no offer and wins nothing.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sotopia_env.actions import AgentAction
from sotopia_env.kinds.base import Kind, LearnerView, Move, Outcome, Talk, VerifiableFacts, spoken, ten
from sotopia_env.kinds.registry import register_kind

TOTAL = 10  # each side's values sum to this over the whole pool
_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
_COUNT = r"(\d+|" + "|".join(_WORDS) + r"|no)"
Share = tuple[int, ...]  # the learner's count of each item type


class SplitItem(BaseModel):
    """One item type of the pool: its name (singular and plural, as the talk says them) and how many there are."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: str = Field(min_length=1, pattern=r"^[a-z][a-z ]*$")  # "book"
    plural: str = Field(default="", pattern=r"^([a-z][a-z ]*)?$")  # "books"; default name + "s"
    count: int = Field(ge=1, le=5)

    @model_validator(mode="after")
    def _plural(self) -> SplitItem:
        if not self.plural:
            self.plural = self.name + "s"
        return self


class SplitFacts(VerifiableFacts):
    """A pool split: ``items`` with counts, the learner's per-item ``values`` (its goal states them) and the
    partner's hidden type: ``partner_values`` (candidate value vectors) and ``thresholds`` (candidate least
    utilities it accepts), one of each drawn per episode into ``partner`` and ``threshold``.

    Every value vector sums to 10 over the pool; every drawn pair leaves the learner some split worth more than 0
    that the partner accepts.
    """

    kind: Literal["split"] = "split"
    items: list[SplitItem] = Field(min_length=2, max_length=4)
    values: list[int]  # the learner's, per item of each type
    partner_values: list[list[int]] = Field(min_length=2)  # hidden: the candidates drawn from
    thresholds: list[int] = Field(min_length=1)  # hidden: the candidates drawn from
    max_rounds: int = Field(default=2, ge=1)
    partner: list[int] | None = None  # drawn (``Kind.draw``)
    threshold: int | None = None  # drawn

    @model_validator(mode="after")
    def _split(self) -> SplitFacts:
        names = [w for item in self.items for w in (item.name, item.plural)]
        for a in names:
            if any(a != b and re.search(rf"\b{re.escape(a)}\b", b) for b in names if b not in _forms(a, self)):
                raise ValueError(f"item name {a!r} is part of another item's name; names must not contain each other")
        _vector("values", self.values, self.items)
        for i, vector in enumerate(self.partner_values):
            _vector(f"partner_values[{i}]", vector, self.items)
        if len({tuple(v) for v in self.partner_values}) != len(self.partner_values):
            raise ValueError("partner_values must be distinct")
        for t in self.thresholds:
            if not 1 <= t <= TOTAL:
                raise ValueError(f"thresholds: {t} must be within 1..{TOTAL}")
        if self.partner is not None:
            _vector("partner", self.partner, self.items)
        for vector in self.partner_values:
            for t in self.thresholds:
                if best_share(self.counts, self.values, vector, t)[1] <= 0:
                    raise ValueError(f"partner_values {vector} with threshold {t} leave the learner nothing")
        return self

    @property
    def counts(self) -> Share:
        return tuple(item.count for item in self.items)


def _forms(name: str, facts: SplitFacts) -> tuple[str, ...]:
    return next(((i.name, i.plural) for i in facts.items if name in (i.name, i.plural)), (name,))


def _vector(field: str, vector: Sequence[int], items: Sequence[SplitItem]) -> None:
    if len(vector) != len(items):
        raise ValueError(f"{field}: {len(vector)} values for {len(items)} item types")
    if any(v < 0 for v in vector):
        raise ValueError(f"{field}: values must be 0 or more")
    total = sum(v * item.count for v, item in zip(vector, items, strict=True))
    if total != TOTAL:
        raise ValueError(f"{field}: the pool is worth {total} with these values, not {TOTAL}")


# -- the arithmetic --------------------------------------------------------------------------------------------


def utility(values: Sequence[int], share: Sequence[int]) -> int:
    """What ``share`` (a count per item type) is worth with ``values``."""
    return sum(v * n for v, n in zip(values, share, strict=True))


def rest(counts: Sequence[int], share: Sequence[int]) -> Share:
    """The other side's share when one side takes ``share``."""
    return tuple(c - n for c, n in zip(counts, share, strict=True))


def shares(counts: Sequence[int]) -> list[Share]:
    """Every split of the pool, as the learner's share, in a fixed order."""
    return [tuple(s) for s in itertools.product(*(range(c + 1) for c in counts))]


def best_share(counts: Share, mine: Sequence[int], theirs: Sequence[int], threshold: int) -> tuple[Share, int]:
    """The learner's best share among those the partner accepts (its rest worth ``threshold`` or more) and what it
    is worth to the learner; among equals, the one best for the partner, then the first."""
    ok = [s for s in shares(counts) if utility(theirs, rest(counts, s)) >= threshold]
    best = max(ok, key=lambda s: (utility(mine, s), utility(theirs, rest(counts, s))))
    return best, utility(mine, best)


def best_sum(counts: Share, mine: Sequence[int], theirs: Sequence[int]) -> int:
    """The most the two sides' utilities can add up to."""
    return max(utility(mine, s) + utility(theirs, rest(counts, s)) for s in shares(counts))


# -- reading and saying a split ---------------------------------------------------------------------------------


def _count(word: str) -> int:
    word = word.lower()
    if word == "no":
        return 0
    return _WORDS.index(word) if word in _WORDS else int(word)


def counts_named(text: str, forms: Sequence[tuple[str, str]]) -> list[list[int]]:
    """Per item type (``forms``: singular and plural), every count written right before its name in ``text``."""
    found: list[list[int]] = []
    for singular, plural in forms:
        names = "|".join(re.escape(n).replace(r"\ ", r"\s+") for n in sorted({singular, plural}, key=len, reverse=True))
        pattern = re.compile(rf"(?<![\w.]){_COUNT}\s+(?:{names})\b", re.I)
        found.append([_count(m.group(1)) for m in pattern.finditer(text)])
    return found


def read_share(text: str, forms: Sequence[tuple[str, str]], counts: Sequence[int]) -> Share | str:
    """The learner's share that ``text`` offers, or why it is no offer: ``none`` (no count), ``partial`` (some item
    type without one), ``conflict`` (two different counts for a type) or ``impossible`` (more than the pool)."""
    found = counts_named(text, forms)
    if not any(found):
        return "none"
    if not all(found):
        return "partial"
    if any(len(set(c)) > 1 for c in found):
        return "conflict"
    share = tuple(c[0] for c in found)
    if any(n > c for n, c in zip(share, counts, strict=True)):
        return "impossible"
    return share


def say_share(share: Sequence[int], forms: Sequence[tuple[str, str]]) -> str:
    """``share`` in words with a count for every item type: "2 books, 1 hat and 0 balls"."""
    parts = [f"{n} {singular if n == 1 else plural}" for n, (singular, plural) in zip(share, forms, strict=True)]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


# -- what seat 1 is shown: its goal ----------------------------------------------------------------------------

_WORTH = re.compile(r"\beach ([a-z]+(?: [a-z]+)?) (?:is worth )?(\d+) points?\b", re.I)


@dataclass(frozen=True)
class Pool:
    """The pool and the learner's values as its goal states them ("The pool is 3 books, 2 hats and 1 ball. Each
    book is worth 2 points to you, each hat 1 point and each ball 2 points.")."""

    forms: tuple[tuple[str, str], ...]
    counts: Share
    values: tuple[int, ...]


def pool_in(goal: str) -> Pool | None:
    """The pool and values the learner's goal states, or None when it states none. The pool comes first ("3
    books, 2 hats and 1 ball"); each plural is read where the goal writes a count other than 1 before it (the pool,
    or the example offer); else it is the name + "s"."""
    worth = _WORTH.findall(goal)
    if not worth:
        return None
    forms, counts, values = [], [], []
    for name, value in worth:
        name = name.lower()
        named = [
            (int(m.group(1)), m.group(2).lower()) for m in re.finditer(rf"\b(\d+) ({re.escape(name)}\w*)\b", goal, re.I)
        ]
        count = named[0][0] if named else 0
        plural = next((word for n, word in named if n != 1), name + "s")  # "0 atlases" in the goal's example
        if not count:
            return None
        forms.append((name, plural))
        counts.append(count)
        values.append(int(value))
    return Pool(tuple(forms), tuple(counts), tuple(values))


# -- the kind ---------------------------------------------------------------------------------------------------

CLOSE = 2  # an offer that leaves the partner within this of its threshold is "close"


@dataclass
class SplitTalk(Talk):
    share: Share | None = None  # the agreed learner's share
    offered: bool = False  # the learner made a valid offer


class Split(Kind):
    name = "split"
    facts_model = SplitFacts
    talk_model = SplitTalk
    LINES: ClassVar[dict[str, tuple[str, ...]]] = {
        "open": (
            "Hi! So, how do we split all this? Tell me how many of each you'd take.",
            "Hello! Let's divide these up. What share would you like?",
        ),
        "accept": (
            "Alright, deal: you get {share}, and I keep the rest.",
            "That works for me. Deal: {share} for you, the rest for me.",
        ),
        "far": (
            "No, that leaves me far too little. I really need {insist}.",
            "That's nowhere near enough for me. I need {insist} most of all.",
            "Not a chance, sorry. Without {insist} this is no good to me.",
        ),
        "close": (
            "Hmm, close, but not quite. I'd need more of {insist}.",
            "We're nearly there. Could you leave me more of {insist}?",
            "Almost. Give me a bit more of {insist} and we can talk.",
        ),
        "ask": (
            "Could you make me a concrete offer? Say how many of each you'd take.",
            "What split do you have in mind? Give me a number for each thing.",
        ),
        "ask_all": (
            "You didn't say how many {missing} you want. Give me a number for each thing.",
            "And how many {missing} would you take? I need a number for each.",
        ),
        "ask_one": (
            "I'm not sure what you're offering. One number for each thing, please.",
            "That doesn't add up for me. What's your one offer, with a number for each?",
        ),
        "leave": (
            "I don't think we'll agree on this. Let's leave it here.",
            "We're too far apart. I'll stop here, thanks anyway.",
        ),
        "goodbye": (
            "Good, glad we sorted it out. Take care!",
            "Great, enjoy your share. Bye!",
        ),
    }

    # -- the hidden type ---------------------------------------------------------------------------------------

    def draw(self, facts: SplitFacts, rng: random.Random) -> SplitFacts:
        """One of the candidate partner value vectors and one of the thresholds."""
        return facts.model_copy(
            update={"partner": list(rng.choice(facts.partner_values)), "threshold": rng.choice(facts.thresholds)}
        )

    # -- rules --------------------------------------------------------------------------------------------------

    def _drawn(self, facts: SplitFacts) -> tuple[list[int], int]:
        partner = facts.partner if facts.partner is not None else facts.partner_values[0]
        threshold = facts.threshold if facts.threshold is not None else facts.thresholds[0]
        return partner, threshold

    def insists(self, facts: SplitFacts) -> int:
        """The item type the partner says it needs: the one worth most to it per item (the first among equals),
        whatever the offer. It tells the learner its top type, never how much it is worth, nor the second."""
        partner, _ = self._drawn(facts)
        return max(range(len(partner)), key=lambda i: (partner[i], -i))

    def closeness(self, facts: SplitFacts, offer: Share) -> str:
        """``close`` when what ``offer`` leaves the partner is within ``CLOSE`` of its threshold, else ``far``."""
        partner, threshold = self._drawn(facts)
        return "close" if utility(partner, rest(facts.counts, offer)) >= threshold - CLOSE else "far"

    def respond(self, facts: SplitFacts, talk: SplitTalk, action: AgentAction) -> Move:
        speech = spoken(action)
        forms = [(i.name, i.plural) for i in facts.items]
        share = read_share(speech, forms, facts.counts) if speech is not None else "none"
        partner, threshold = self._drawn(facts)
        if isinstance(share, tuple):
            talk.offered = True
            if utility(partner, rest(facts.counts, share)) >= threshold:
                talk.share = share
                talk.deal = ",".join(map(str, share))
                return Move("accept", talk.deal, talk.rounds)
        talk.rounds += 1
        if talk.rounds >= facts.max_rounds:
            return Move("leave", None, talk.rounds)
        if isinstance(share, tuple):
            return Move(self.closeness(facts, share), self.insists(facts), talk.rounds)
        if share == "partial":
            missing = [i for i, c in enumerate(counts_named(speech or "", forms)) if not c]
            return Move("ask_all", missing[0], talk.rounds)
        return Move("ask" if share == "none" else "ask_one", None, talk.rounds)

    def outcome(self, facts: SplitFacts, talk: SplitTalk) -> Outcome:
        partner, threshold = self._drawn(facts)
        counts = facts.counts
        _, top = best_share(counts, facts.values, partner, threshold)
        if talk.share is None:
            return Outcome(False, False, 0, 0, f"no deal after {talk.rounds} rounds (the best deal was worth {top})")
        mine, theirs = utility(facts.values, talk.share), utility(partner, rest(counts, talk.share))
        efficiency = (mine + theirs) / best_sum(counts, facts.values, partner)
        forms = [(i.name, i.plural) for i in facts.items]
        reasoning = (
            f"deal: the learner takes {say_share(talk.share, forms)}, worth {mine} to it (the best the partner "
            f"accepts: {top}) and {theirs} to the partner (threshold {threshold}); joint efficiency {efficiency:.2f}"
        )
        return Outcome(True, True, ten(mine / top), theirs, reasoning)

    # -- partner ------------------------------------------------------------------------------------------------

    def fields(self, facts: SplitFacts, move: Move) -> dict[str, str]:
        forms = [(i.name, i.plural) for i in facts.items]
        out = {"share": "", "insist": "", "missing": ""}
        if move.act == "accept" and isinstance(move.value, str):
            out["share"] = say_share(_share(move.value), forms)
        if move.act in ("far", "close") and isinstance(move.value, int):
            out["insist"] = "the " + forms[move.value][0 if facts.counts[move.value] == 1 else 1]
        if move.act == "ask_all" and isinstance(move.value, int):
            out["missing"] = forms[move.value][1]
        return out

    # -- expert -------------------------------------------------------------------------------------------------

    def agreed(self, view: LearnerView) -> bool:
        pool = pool_in(view.goal)
        if pool is None:
            return False
        mine = read_share(view.said[-1], pool.forms, pool.counts)
        return isinstance(mine, tuple) and read_share(view.heard[-1], pool.forms, pool.counts) == mine

    def propose(self, view: LearnerView) -> str:
        pool = pool_in(view.goal)
        if pool is None:
            return "How would you like to split things?"
        return f"I'd like {say_share(heuristic_share(pool, view), pool.forms)}, and you keep the rest."

    # -- baselines ----------------------------------------------------------------------------------------------

    def random_line(self, view: LearnerView, rng: random.Random) -> str:
        pool = pool_in(view.goal)
        if pool is None:
            return "How would you like to split things?"
        return f"I take {say_share(rng.choice(shares(pool.counts)), pool.forms)}."

    def oracle_line(self, facts: SplitFacts, view: LearnerView) -> str:
        partner, threshold = self._drawn(facts)
        share, _ = best_share(facts.counts, facts.values, partner, threshold)
        return f"I take {say_share(share, [(i.name, i.plural) for i in facts.items])}."

    # -- partial credit -----------------------------------------------------------------------------------------

    def partial_credit(self, facts: SplitFacts, speeches: Sequence[str], talk: SplitTalk) -> float:
        return 1.0 if talk.share is not None else 0.5 if talk.offered else 0.0


def _share(text: str) -> Share:
    return tuple(int(n) for n in text.split(","))


def opening(pool: Pool) -> Share:
    """The heuristic's first share: it keeps the types it values most and leaves the partner its least valued
    items, half of all items (rounded up)."""
    share = list(pool.counts)
    give = (sum(pool.counts) + 1) // 2
    for i in sorted(range(len(share)), key=lambda i: (pool.values[i], -i)):
        while share[i] and give:
            share[i] -= 1
            give -= 1
    return tuple(share)


def reaction(line: str, pool: Pool) -> tuple[int, bool] | None:
    """The partner's reaction to a refused offer: the item type it says it needs and whether it said the offer
    was close; None for any other line."""
    close = bool(re.search(r"\b(?:close|nearly|almost)\b", line, re.I))
    if not close and not re.search(r"\b(?:far too little|nowhere near|not a chance)\b", line, re.I):
        return None
    for i, form in enumerate(pool.forms):
        if re.search(rf"\bthe (?:{'|'.join(re.escape(n) for n in form)})\b", line, re.I):
            return i, close
    return None


def heuristic_share(pool: Pool, view: LearnerView) -> Share:
    """The heuristic's next share, from the goal and the partner's words alone: the opening, then after each
    refusal its last offer with the type the partner needs conceded (one item when it said "close", all of them
    when it said the offer was far off)."""
    said = [s for s in (read_share(x, pool.forms, pool.counts) for x in view.said) if isinstance(s, tuple)]
    heard = reaction(view.heard[-1], pool) if view.heard else None
    if not said:
        return opening(pool)
    share = list(said[-1])
    if heard is None:
        return tuple(share)
    need, close = heard
    if share[need]:
        share[need] = max(0, share[need] - 1) if close else 0
        return tuple(share)
    for _ in range(1 if close else 2):  # the type it needs is all its own: give up what is worth least to me
        kept = [i for i, n in enumerate(share) if n]
        if kept:
            share[min(kept, key=lambda i: (pool.values[i], -i))] -= 1
    return tuple(share)


KIND = register_kind(Split())
