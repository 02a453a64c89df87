"""Bargaining: the learner (seat 1) buys ``item`` from the rule partner (seat 2), whose price floor, style and
patience are hidden and drawn anew each episode.

- **Hidden, drawn per episode** (``Bargaining.draw``): the ``reservation`` (uniform over the instance's
  ``reservation_range``), a ``style`` (``firm``, ``steady``, ``eager``: the share of its remaining margin it gives
  up per round), a mood per round (a factor of 0.4..1.6 on that share) and its patience (``max_rounds``, drawn
  from ``patience``). Memorising an instance does not help, and two counters do not solve for the reservation.
- **Rules.** An offer is the one number in the learner's speech (``$1,200``, ``350``, ``99.50``; digits only).
  An offer of at least the reservation is accepted at that price. An offer below half the reservation insults
  the partner: it leaves. Otherwise it counters: its price comes down by its style's share (times the round's
  mood) of the margin above its reservation, plus half of the learner's own raise since its last offer
  (concessions answer the learner's, they are no schedule), rounded up to 5 and always above the reservation,
  so no line of the partner's ever states it. Speech with no number or several, and non-verbal or physical
  actions, are no offer: the partner asks for one price, at its current price. The reply to the
  ``max_rounds``-th round without a deal is the partner leaving.
- **Judge.** Learner = 10 * the share of the zone of agreement it captured, clip((budget - price) / (budget -
  reservation), 0, 1); success = a deal within budget. Partner = 10 * clip((price - reservation) / (asking_price
  - reservation), 0, 1). No deal: 0.
- **Baselines** (``agents.baselines``): random offers a price uniform up to its budget (one line in five no
  offer); the heuristic (the BC expert, ``propose``) opens at 60% of the asking price and splits the difference
  with the counters; the oracle offers the drawn reservation and gets 10.
- **Partial credit.** 1 once the learner made a valid offer that did not insult the partner.

What stands against scripts (``tests/test_worlds.py``): the old fixed-schedule exploit ($1, $2, then invert the
two counters) insults the partner and scores 0; a stuffed line with many numbers is no offer; solving two
counters for the reservation misses by the moods.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from sotopia_env.actions import AgentAction
from sotopia_env.kinds.base import Kind, LearnerView, Move, Outcome, Talk, VerifiableFacts, spoken, ten
from sotopia_env.kinds.registry import register_kind

_NUMBER = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w])|(?<![\w.,])\d+(?:\.\d+)?(?![\w])")
_MONEY = re.compile(r"([$€£])\s?(\d[\d,]*(?:\.\d+)?)")


STYLES = {"firm": 0.15, "steady": 0.3, "eager": 0.45}  # a style: the share of its remaining margin it gives up
RECIPROCITY = 0.5  # the share of the buyer's own raise that the partner matches, on top of its style's concession
MOOD = (0.4, 1.6)  # the range of a round's factor on the style's concession: people are not metronomes
LOWBALL = 0.5  # an offer below this share of the reservation insults the partner: it leaves


class BargainingFacts(VerifiableFacts):
    """A sale: the learner (seat 1) buys ``item`` from the rule partner (seat 2).

    The learner's goal states its ``budget``; the scenario text may state the ``asking_price``. Hidden, and drawn
    per episode (``Kind.draw``): the partner's ``reservation`` (uniform over ``reservation_range``) and its
    ``style`` (one of ``styles``). A scenario may fix ``reservation`` instead of a range (then the style alone is
    drawn).
    """

    kind: Literal["bargaining"] = "bargaining"
    item: str = Field(min_length=1)  # as the partner says it: "the bike"
    asking_price: int = Field(gt=0)
    budget: int = Field(gt=0)
    reservation_range: tuple[int, int] | None = None  # hidden: the reservation's distribution (both ends included)
    styles: list[Literal["firm", "steady", "eager"]] = Field(default_factory=lambda: list(STYLES), min_length=1)
    reservation: int | None = Field(default=None, gt=0)  # hidden, drawn: the lowest price the partner accepts
    style: Literal["firm", "steady", "eager"] | None = None  # hidden, drawn: how fast it concedes
    moods: list[float] | None = None  # hidden, drawn: per round, the factor on its style's concession (0.4..1.6)
    max_rounds: int = Field(default=5, ge=1)  # the offers it hears before it leaves (drawn from ``patience``)
    patience: list[int] | None = Field(default=None, min_length=1)  # hidden: the max_rounds to draw from
    currency: str = "$"

    @model_validator(mode="after")
    def _prices(self) -> BargainingFacts:
        if self.reservation_range is None and self.reservation is None:
            raise ValueError("give reservation_range (drawn per episode) or a fixed reservation")
        low, high = self.reservation_range or (self.reservation, self.reservation)
        if not 0 < low <= high:
            raise ValueError(f"reservation_range {list(self.reservation_range or ())} must be two prices, low first")
        if not high < self.budget:
            raise ValueError(f"the reservation ({high} at most) must be below budget {self.budget}")
        if not high < self.asking_price:
            raise ValueError(f"the reservation ({high} at most) must be below asking_price {self.asking_price}")
        return self


def numbers_in(text: str) -> list[float]:
    """The distinct numbers written in digits in ``text``, in order (``$1,200`` -> 1200)."""
    out: list[float] = []
    for match in _NUMBER.finditer(text):
        value = float(match.group().replace(",", ""))
        if value not in out:
            out.append(value)
    return out


def _price(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


@dataclass
class BargainingTalk(Talk):
    ask: float | None = None  # the partner's current price (None: the asking price)
    offer: float | None = None  # the learner's last valid offer


class Bargaining(Kind):
    name = "bargaining"
    facts_model = BargainingFacts
    talk_model = BargainingTalk
    LINES: ClassVar[dict[str, tuple[str, ...]]] = {
        "open": (
            "Hi there! Are you here about {item}? I'm asking {price} for it.",
            "Hello! Yes, {item} is still for sale. The price is {price}.",
        ),
        "accept": (  # never the price: a deal at the reservation would say it
            "Alright, you've got a deal. {Item} is yours.",
            "I can live with that. Deal, let's shake on it.",
            "Okay, it's a deal.",
        ),
        "counter": (
            "That's lower than I can go. How about {price}?",
            "Hmm, I can't let {item} go for that. {price} is the best I can do right now.",
            "I'd need more than that. Meet me at {price}?",
            "No, sorry, that's too low. I could come down to {price}.",
        ),
        "ask_price": (
            "So what would you offer for {item}? I'm at {price} right now.",
            "What are you willing to pay? I'm asking {price}.",
            "Make me an offer. I'm at {price} at the moment.",
        ),
        "ask_one": (
            "You mentioned a few numbers there. Which price are you actually offering?",
            "Sorry, I'm confused by all those numbers. What's your one offer?",
        ),
        "insulted": (
            "That's not a serious offer. I don't think we have anything to talk about. Goodbye.",
            "Come on, that's insulting for {item}. I'll sell it to someone else.",
        ),
        "leave": (
            "I don't think we're going to agree on a price. I'll keep {item} for now, thanks anyway.",
            "We're too far apart, I'm afraid. I'll wait for another buyer. Take care.",
        ),
        "goodbye": (
            "Great doing business with you. Enjoy {item}!",
            "Pleasure! I hope {item} serves you well.",
        ),
    }
    LEAVING = (*Kind.LEAVING, "insulted")
    OFFERS = ("Would you take {p} for it?", "I could go up to {p}.", "How about {p}?", "My offer is {p}.")

    # -- the episode's hidden type ------------------------------------------------------------------------------

    def draw(self, facts: BargainingFacts, rng: random.Random) -> BargainingFacts:
        low, high = facts.reservation_range or (facts.reservation, facts.reservation)
        rounds = rng.choice(facts.patience) if facts.patience else facts.max_rounds
        moods = [round(rng.uniform(*MOOD), 3) for _ in range(rounds)]
        drawn = {"reservation": rng.randint(low, high), "style": rng.choice(facts.styles), "moods": moods}
        return facts.model_copy(update={**drawn, "max_rounds": rounds})

    # -- rules --------------------------------------------------------------------------------------------------

    def counter(self, facts: BargainingFacts, talk: BargainingTalk, offer: float) -> int:
        """The partner's next price after ``offer``: its style's share of the margin left above its reservation,
        plus ``RECIPROCITY`` of the buyer's raise since its last offer, rounded up to a multiple of 5 and always
        above the reservation (so no counter says it)."""
        ask = facts.asking_price if talk.ask is None else talk.ask
        margin = ask - facts.reservation
        raised = max(0.0, offer - talk.offer) if talk.offer is not None else 0.0
        mood = facts.moods[min(talk.rounds, len(facts.moods)) - 1] if facts.moods else 1.0
        price = ask - mood * STYLES[facts.style or "steady"] * margin - RECIPROCITY * raised
        floor = 5 * (facts.reservation // 5 + 1)  # the first multiple of 5 above the reservation
        return int(min(ask, max(floor, 5 * math.ceil(price / 5))))

    def respond(self, facts: BargainingFacts, talk: BargainingTalk, action: AgentAction) -> Move:
        reservation = float(facts.reservation or 0)
        speech = spoken(action)
        numbers = numbers_in(speech) if speech is not None else []
        if len(numbers) == 1 and numbers[0] >= reservation:
            talk.deal = _price(numbers[0])
            return Move("accept", talk.deal, talk.rounds)
        talk.rounds += 1
        if len(numbers) == 1 and numbers[0] < LOWBALL * reservation:
            return Move("insulted", None, talk.rounds)
        if talk.rounds >= facts.max_rounds:
            return Move("leave", None, talk.rounds)
        current = facts.asking_price if talk.ask is None else talk.ask
        if len(numbers) != 1:
            return Move("ask_price" if not numbers else "ask_one", current, talk.rounds)
        talk.ask = self.counter(facts, talk, numbers[0])
        talk.offer = numbers[0]
        return Move("counter", talk.ask, talk.rounds)

    def outcome(self, facts: BargainingFacts, talk: Talk) -> Outcome:
        reservation = facts.reservation or 0
        if talk.deal is None:
            insulted = any(m.act == "insulted" for m in talk.moves)
            why = "the partner left over a lowball offer" if insulted else f"no deal after {talk.rounds} rounds"
            return Outcome(False, False, 0, 0, f"no deal on {facts.item}: {why}")
        price = float(talk.deal)
        goal = ten((facts.budget - price) / (facts.budget - reservation))
        partner = ten((price - reservation) / (facts.asking_price - reservation))
        success = price <= facts.budget
        captured = (facts.budget - price) / (facts.budget - reservation)
        reasoning = (
            f"deal on {facts.item} at {facts.currency}{talk.deal}: {captured:.0%} of the zone of agreement "
            f"(budget {facts.budget}, drawn reservation {reservation}, {facts.style} seller, asking "
            f"{facts.asking_price})" + ("" if success else ": over the budget")
        )
        return Outcome(True, success, goal, partner, reasoning)

    # -- partner ------------------------------------------------------------------------------------------------

    def fields(self, facts: BargainingFacts, move: Move) -> dict[str, str]:
        price = move.value if move.act in ("counter", "ask_price", "ask_one") else facts.asking_price
        item = facts.item
        return {"item": item, "Item": item[:1].upper() + item[1:], "price": _money(facts, price)}

    # -- baselines: the heuristic (the BC expert), random and the oracle ----------------------------------------

    def agreed(self, view: LearnerView) -> bool:
        return "deal" in view.heard[-1].lower() and "not" not in view.heard[-1].lower()

    def propose(self, view: LearnerView) -> str:
        """Opens at 60% of the asking price (never a lowball: a reservation is above half of it), then splits the
        difference between its last offer and the partner's counter, never above its budget; takes the partner's
        counter (within budget) from its fourth offer on, or once the two are within 10, since it cannot know when
        the partner's patience runs out. Chosen on dev among splitting 35/50/65% of the difference and taking the
        counter from the third/fourth/fifth offer."""
        budget, currency = _budget(view.goal)
        asking = next((n[0] for n in map(numbers_in, view.heard) if len(n) == 1), None)
        mine = [n[0] for n in map(numbers_in, view.said) if len(n) == 1]
        counters = [n[0] for n in map(numbers_in, view.heard[1:]) if len(n) == 1]
        if not mine or asking is None:
            offer = 0.6 * (asking or budget)
        elif counters and (view.moves >= 3 or counters[-1] - mine[-1] <= 10):
            offer = counters[-1]
        else:
            offer = (mine[-1] + (counters[-1] if counters else asking)) / 2
        return self.OFFERS[min(view.moves, 3)].format(p=f"{currency}{int(5 * round(min(offer, budget) / 5))}")

    def random_line(self, view: LearnerView, rng: random.Random) -> str:
        """An offer uniform between nothing and the budget, or, one time in five, a line with no offer."""
        budget, currency = _budget(view.goal)
        if rng.random() < 0.2:
            return rng.choice(("Tell me more about it.", "Is it in good condition?", "Hmm, let me think."))
        return self.OFFERS[rng.randrange(len(self.OFFERS))].format(p=f"{currency}{rng.randint(1, int(budget))}")

    def oracle_line(self, facts: BargainingFacts, view: LearnerView) -> str:
        """Offers the drawn reservation itself: accepted at once, the whole zone of agreement."""
        return self.OFFERS[0].format(p=_money(facts, facts.reservation))

    # -- partial credit -----------------------------------------------------------------------------------------

    def partial_credit(self, facts: BargainingFacts, speeches: Sequence[str], talk: Talk) -> float:
        """1 once the learner made a valid offer (one number in a speech) that did not insult the partner."""
        if any(m.act == "insulted" for m in talk.moves):
            return 0.0
        return float(any(len(numbers_in(s)) == 1 for s in speeches))


def _budget(goal: str) -> tuple[float, str]:
    """The budget and currency a buyer's goal states ("at most $400")."""
    money = _MONEY.search(goal)
    return (float(money.group(2).replace(",", "")), money.group(1)) if money else (0.0, "$")


def _money(facts: BargainingFacts, value: Any) -> str:
    if not isinstance(value, int | float):
        return ""
    text = f"{value:,.2f}".removesuffix(".00")
    return f"{facts.currency}{text}"


KIND = register_kind(Bargaining())
