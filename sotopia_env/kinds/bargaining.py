"""Bargaining: the learner (seat 1) buys ``item`` from the rule partner (seat 2), who hides its reservation price.

- **Rules.** An offer is the one number in the learner's speech (``$1,200``, ``350``, ``99.50``; digits only).
  An offer of at least the reservation price is accepted at that price. Otherwise the partner counters (its
  price comes down evenly from the asking price towards, never below, the reservation). Speech with no number
  or with several different numbers, and non-verbal or physical actions, are no offer: the partner asks for
  one price. The reply to the ``max_rounds``-th offer without a deal is the partner leaving.
- **Judge.** Learner = 10 * clip((budget - price) / (budget - reservation), 0, 1); success = a deal at a price
  within budget. Partner = 10 * clip((price - reservation) / (asking_price - reservation), 0, 1). No deal: 0.
- **Expert.** Reads its budget from its goal ("at most $400"); offers 70%, then 80%, then 90% of it (rounded
  to 5), or the partner's last counter when that is lower and within budget; one number per line.
- **Partial credit.** 1 once the learner made a valid offer (one number in a speech).

A huge offer or the partner's own asking price is a deal over budget (0). The partner's concessions are a fixed
schedule, so its first counter gives its reservation away (to within rounding) to a learner that does the
arithmetic: the partner tells it, and the score stays capped at the reservation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from sotopia_env.actions import AgentAction
from sotopia_env.kinds.base import Kind, LearnerView, Move, Outcome, Talk, VerifiableFacts, spoken, ten

_NUMBER = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w])|(?<![\w.,])\d+(?:\.\d+)?(?![\w])")
_MONEY = re.compile(r"([$€£])\s?(\d[\d,]*(?:\.\d+)?)")


class BargainingFacts(VerifiableFacts):
    """A sale: the learner (seat 1) buys ``item`` from the rule partner (seat 2), who hides ``reservation``.

    The learner's goal states its ``budget``; the scenario text may state the ``asking_price``. The partner
    accepts the first offer of at least ``reservation`` and leaves after ``max_rounds`` offers without a deal.
    """

    kind: Literal["bargaining"] = "bargaining"
    item: str = Field(min_length=1)  # as the partner says it: "the bike"
    asking_price: int = Field(gt=0)
    budget: int = Field(gt=0)
    reservation: int = Field(gt=0)  # hidden: the lowest price the partner accepts
    max_rounds: int = Field(default=4, ge=1)
    currency: str = "$"

    @model_validator(mode="after")
    def _prices(self) -> BargainingFacts:
        if not self.reservation < self.budget:
            raise ValueError(f"reservation {self.reservation} must be below budget {self.budget}")
        if not self.reservation < self.asking_price:
            raise ValueError(f"reservation {self.reservation} must be below asking_price {self.asking_price}")
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


class Bargaining(Kind):
    name = "bargaining"
    facts_model = BargainingFacts
    LINES: ClassVar[dict[str, tuple[str, ...]]] = {
        "open": (
            "Hi there! Are you here about {item}? I'm asking {price} for it.",
            "Hello! Yes, {item} is still for sale. The price is {price}.",
        ),
        "accept": (
            "{value}? Alright, you've got a deal. {Item} is yours.",
            "I can live with {value}. Deal, let's shake on it.",
            "Okay, {value} it is. It's a deal.",
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
        "leave": (
            "I don't think we're going to agree on a price. I'll keep {item} for now, thanks anyway.",
            "We're too far apart, I'm afraid. I'll wait for another buyer. Take care.",
        ),
        "goodbye": (
            "Great doing business with you. Enjoy {item}!",
            "Pleasure! I hope {item} serves you well.",
        ),
    }

    # -- rules --------------------------------------------------------------------------------------------------

    def counter(self, facts: BargainingFacts, round_: int) -> int:
        """The partner's price after ``round_`` rounds: even steps from the asking price towards the reservation,
        rounded up to a multiple of 5 (never below the reservation)."""
        gap = facts.asking_price - facts.reservation
        price = facts.reservation + gap * (facts.max_rounds - round_) / facts.max_rounds
        return max(facts.reservation, int(math.ceil(price / 5) * 5))

    def respond(self, facts: BargainingFacts, talk: Talk, action: AgentAction) -> Move:
        speech = spoken(action)
        numbers = numbers_in(speech) if speech is not None else []
        if len(numbers) == 1 and numbers[0] >= facts.reservation:
            talk.deal = _price(numbers[0])
            return Move("accept", talk.deal, talk.rounds)
        talk.rounds += 1
        if talk.rounds >= facts.max_rounds:
            return Move("leave", None, talk.rounds)
        if len(numbers) == 1:
            return Move("counter", self.counter(facts, talk.rounds), talk.rounds)
        return Move("ask_price" if not numbers else "ask_one", self.counter(facts, talk.rounds - 1), talk.rounds)

    def outcome(self, facts: BargainingFacts, talk: Talk) -> Outcome:
        if talk.deal is None:
            return Outcome(False, False, 0, 0, f"no deal on {facts.item} after {talk.rounds} rounds")
        price = float(talk.deal)
        goal = ten((facts.budget - price) / (facts.budget - facts.reservation))
        partner = ten((price - facts.reservation) / (facts.asking_price - facts.reservation))
        success = price <= facts.budget
        reasoning = (
            f"deal on {facts.item} at {facts.currency}{talk.deal} (budget {facts.budget}, "
            f"reservation {facts.reservation}, asking {facts.asking_price})" + ("" if success else ": over the budget")
        )
        return Outcome(True, success, goal, partner, reasoning)

    # -- partner ------------------------------------------------------------------------------------------------

    def fields(self, facts: BargainingFacts, move: Move) -> dict[str, str]:
        price = move.value if move.act in ("counter", "ask_price") else facts.asking_price
        item = facts.item
        return {
            "item": item,
            "Item": item[:1].upper() + item[1:],
            "price": _money(facts, price),
            "value": _money(facts, move.value),
        }

    # -- expert -------------------------------------------------------------------------------------------------

    def agreed(self, view: LearnerView) -> bool:
        mine = numbers_in(view.said[-1])
        return len(mine) == 1 and numbers_in(view.heard[-1]) == mine

    def propose(self, view: LearnerView) -> str:
        money = _MONEY.search(view.goal)
        currency, budget = (money.group(1), float(money.group(2).replace(",", ""))) if money else ("$", 0.0)
        offer = 5 * round(budget * (0.7, 0.8, 0.9)[min(view.moves, 2)] / 5)
        counter = numbers_in(view.heard[-1]) if view.heard else []
        if len(counter) == 1 and counter[0] <= min(offer, budget):
            return f"Alright, {currency}{int(counter[0])} works for me."
        lines = ("Would you take {p} for it?", "I could go up to {p}.", "My best offer is {p}.")
        return lines[min(view.moves, 2)].format(p=f"{currency}{offer}")

    # -- partial credit -----------------------------------------------------------------------------------------

    def partial_credit(self, facts: BargainingFacts, speeches: Sequence[str], talk: Talk) -> float:
        return float(any(len(numbers_in(s)) == 1 for s in speeches))


def _money(facts: BargainingFacts, value: Any) -> str:
    if not isinstance(value, int | float):
        return ""
    text = f"{value:,.2f}".removesuffix(".00")
    return f"{facts.currency}{text}"


KIND = Bargaining()
