"""Verifiable scenarios: the rules a rule partner follows, and the judge that scores the outcome exactly.

A verifiable scenario (``Scenario.verifiable``, see ``sotopia_env.profiles``) holds hidden facts: a reservation
price, acceptable slots, a concern. Seat 1 is the learner, seat 2 the rule partner (``agents.rule_partners``).
The rules here are pure functions of the facts and the transcript, so the partner (on its turn) and the judge
(after the episode) replay the same conversation to the same state.

The rules, per partner turn, on the learner's latest action since the partner's previous turn:

- bargaining: an offer is the one number in the learner's speech (``$1,200``, ``350``, ``99.50``; digits only).
  An offer of at least the reservation price is accepted at that price. Otherwise the partner counters (its
  price comes down evenly from the asking price towards, never below, the reservation). Speech with no number
  or with several different numbers, and non-verbal or physical actions, are no offer: the partner asks for
  one price.
- scheduling: a proposal is the one slot named in the learner's speech (case-insensitive, as written in
  ``slots``). A slot the partner can do is agreed; otherwise the partner declines and names the next of its
  slots it has not named yet. No slot named (or no speech): the partner names its next slot. Several slots: the
  partner asks for one.
- persuasion: the concern is addressed once any learner speech contains a concern word at the start of a word
  (``insur`` matches "insurance"). The partner agrees when the concern has been addressed (in that speech or
  earlier) and that speech asks: it has a question mark or a request phrase (``ASK_CUES``). Otherwise it
  raises a doubt (or, once reassured, waits for the question).

Every kind: each reply that does not agree uses up a round; the reply to the ``max_rounds``-th learner action
without agreement is the partner leaving. After agreeing, the partner's next turn is a goodbye (it leaves). A
partner turn with no learner action since its previous one (it opens, or the order let it act twice) is an
opening line, or nothing.

Scores (``VerifiableJudge``, the goal dimension, 0..10, rounded half up):

- bargaining: learner = 10 * clip((budget - price) / (budget - reservation), 0, 1); success = a deal at a price
  within budget. Partner = 10 * clip((price - reservation) / (asking_price - reservation), 0, 1).
- scheduling: learner = 10 when both agreed on a slot in ``agent_slots`` (success), else 0; partner = 10 on any
  agreement.
- persuasion: 10 for both on agreement (success), else 0.

No agreement scores 0: a rated outcome, not an error. A scenario without hidden facts cannot be judged
(``NotVerifiable``). The judge reads the learner's moves and when seat 2 answered, not seat 2's words: it
assumes seat 2 followed the rules, as the rule partner does (with another partner, use an LLM evaluator).

To add a kind: a facts model in ``profiles.VerifiableFacts``, a ``Rules`` class registered in ``RULES``, and a
partner class in ``agents.rule_partners.PARTNERS``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.errors import UserError
from sotopia_env.evaluation import (
    GOAL_ONLY,
    AgentRating,
    Dimension,
    DimensionScore,
    EpisodeContext,
    EpisodeRating,
    SyncFromAsync,
)
from sotopia_env.profiles import BargainingFacts, PersuasionFacts, Scenario, SchedulingFacts

LEARNER_SEAT, PARTNER_SEAT = 0, 1
ASK_CUES = ("?", "please", "would you", "could you", "can you", "will you", "may i", "can i", "let me")
_NUMBER = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w])|(?<![\w.,])\d+(?:\.\d+)?(?![\w])")


class NotVerifiable(UserError, ValueError):
    """A scenario without hidden facts where a verifiable one is needed."""


def facts_of(scenario: Scenario) -> Any:
    """The scenario's hidden facts; ``NotVerifiable`` (one line, naming the scenario) when it has none."""
    if scenario.verifiable is None:
        raise NotVerifiable(
            f"scenario {scenario.id!r} is not verifiable (it has no 'verifiable' facts); "
            "pick one with --scenarios verifiable, or use another evaluator/partner"
        )
    return scenario.verifiable


def require_verifiable(scenarios: Iterable[Scenario], who: str) -> None:
    """Raise ``NotVerifiable`` naming the first scenario without hidden facts, for ``who`` (e.g. the partner)."""
    for scenario in scenarios:
        if scenario.verifiable is None:
            raise NotVerifiable(
                f"{who} needs verifiable scenarios, but {scenario.id!r} has no 'verifiable' facts "
                "(select them with --scenarios verifiable)"
            )


# -- the conversation state ------------------------------------------------------------------------


@dataclass(frozen=True)
class Move:
    """What the partner does on one turn: ``act`` names it, ``value`` is a price or slot where there is one."""

    act: str  # open none accept counter ask_price ask_one decline propose no_more doubt reassured leave goodbye
    value: str | int | float | None = None
    round: int = 0  # the rounds used so far, this move's included


@dataclass
class Talk:
    """The state of a rule conversation after some partner turns."""

    rounds: int = 0
    deal: str | int | float | None = None  # the agreed price or slot, "yes" for persuasion
    closed: bool = False  # the partner left
    addressed: bool = False
    named: list[str] = field(default_factory=list)  # scheduling: the slots the partner has named
    moves: list[Move] = field(default_factory=list)


Exchange = tuple[bool, AgentAction]  # (by the partner?, the action), in turn order


class Rules(Protocol):
    def respond(self, facts: Any, talk: Talk, action: AgentAction) -> Move:
        """The partner's reply to the learner's ``action`` before agreement; may update ``talk``."""
        ...

    def outcome(self, facts: Any, talk: Talk) -> Outcome: ...


@dataclass(frozen=True)
class Outcome:
    agreed: bool
    success: bool  # agreed on terms that meet the learner's goal
    goal: int  # the learner's
    partner_goal: int
    reasoning: str


def numbers_in(text: str) -> list[float]:
    """The distinct numbers written in digits in ``text``, in order (``$1,200`` -> 1200)."""
    out: list[float] = []
    for match in _NUMBER.finditer(text):
        value = float(match.group().replace(",", ""))
        if value not in out:
            out.append(value)
    return out


def _spoken(action: AgentAction) -> str | None:
    return action.argument if action.action_type is ActionType.speak else None


def _ten(fraction: float) -> int:
    """10 * fraction clipped to 0..1, rounded half up."""
    return int(math.floor(10 * min(1.0, max(0.0, fraction)) + 0.5))


def _price(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


class BargainingRules:
    def counter(self, facts: BargainingFacts, round_: int) -> int:
        """The partner's price after ``round_`` rounds: even steps from the asking price towards the reservation,
        rounded up to a multiple of 5 (never below the reservation)."""
        gap = facts.asking_price - facts.reservation
        price = facts.reservation + gap * (facts.max_rounds - round_) / facts.max_rounds
        return max(facts.reservation, int(math.ceil(price / 5) * 5))

    def respond(self, facts: BargainingFacts, talk: Talk, action: AgentAction) -> Move:
        speech = _spoken(action)
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
        goal = _ten((facts.budget - price) / (facts.budget - facts.reservation))
        partner = _ten((price - facts.reservation) / (facts.asking_price - facts.reservation))
        success = price <= facts.budget
        reasoning = (
            f"deal on {facts.item} at {facts.currency}{talk.deal} (budget {facts.budget}, "
            f"reservation {facts.reservation}, asking {facts.asking_price})" + ("" if success else ": over the budget")
        )
        return Outcome(True, success, goal, partner, reasoning)


def slots_in(text: str, slots: Sequence[str]) -> list[str]:
    """The slots of ``slots`` named in ``text`` (case-insensitive, whole words), in ``slots`` order."""
    flat = " ".join(text.lower().replace("-", " ").split())
    return [s for s in slots if re.search(rf"\b{re.escape(' '.join(s.lower().replace('-', ' ').split()))}\b", flat)]


class SchedulingRules:
    def respond(self, facts: SchedulingFacts, talk: Talk, action: AgentAction) -> Move:
        speech = _spoken(action)
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


def addresses(text: str, concern: Sequence[str]) -> bool:
    """Whether ``text`` has a word that starts with one of the ``concern`` words (case-insensitive)."""
    return any(re.search(rf"\b{re.escape(word.lower())}", text.lower()) for word in concern)


def asks(text: str) -> bool:
    lowered = text.lower()
    return any(cue in lowered for cue in ASK_CUES)


class PersuasionRules:
    def respond(self, facts: PersuasionFacts, talk: Talk, action: AgentAction) -> Move:
        speech = _spoken(action)
        if speech is not None and addresses(speech, facts.concern):
            talk.addressed = True
        if talk.addressed and speech is not None and asks(speech):
            talk.deal = "yes"
            return Move("accept", None, talk.rounds)
        talk.rounds += 1
        if talk.rounds >= facts.max_rounds:
            return Move("leave", None, talk.rounds)
        return Move("reassured" if talk.addressed else "doubt", None, talk.rounds)

    def outcome(self, facts: PersuasionFacts, talk: Talk) -> Outcome:
        if talk.deal is None:
            left = "addressed but never asked" if talk.addressed else "never addressed"
            return Outcome(False, False, 0, 0, f"the partner did not agree ({facts.request}): its concern was {left}")
        return Outcome(True, True, 10, 10, f"the partner agreed ({facts.request}) once its concern was addressed")


RULES: dict[str, Rules] = {
    "bargaining": BargainingRules(),
    "scheduling": SchedulingRules(),
    "persuasion": PersuasionRules(),
}


def rules_for(facts: Any) -> Rules:
    return RULES[facts.kind]


def step(facts: Any, talk: Talk, pending: AgentAction | None) -> Move:
    """The partner's move on its turn, given the learner's latest action since its previous turn (or None)."""
    if talk.closed:
        move = Move("none", None, talk.rounds)
    elif talk.deal is not None:
        move = Move("goodbye", talk.deal, talk.rounds)
    elif pending is None:
        move = Move("open" if not talk.moves else "none", None, talk.rounds)
    elif pending.action_type is ActionType.leave:
        move = Move("goodbye", None, talk.rounds)
    else:
        move = rules_for(facts).respond(facts, talk, pending)
    if move.act in ("leave", "goodbye"):
        talk.closed = True
    talk.moves.append(move)
    return move


def _replay(facts: Any, exchanges: Iterable[Exchange]) -> tuple[Talk, AgentAction | None]:
    talk = Talk()
    pending: AgentAction | None = None
    for by_partner, action in exchanges:
        if by_partner:
            step(facts, talk, pending)
            pending = None
        elif action.action_type is not ActionType.none:
            pending = action
    return talk, pending


def replay(facts: Any, exchanges: Iterable[Exchange]) -> Talk:
    """The conversation state after every partner turn in ``exchanges``."""
    return _replay(facts, exchanges)[0]


def next_move(facts: Any, exchanges: Iterable[Exchange]) -> Move:
    """The partner's move now, after ``exchanges`` (its own earlier turns included)."""
    return step(facts, *_replay(facts, exchanges))


def outcome_after(facts: Any, exchanges: Iterable[Exchange], action: AgentAction) -> Outcome:
    """The outcome if the learner played ``action`` after ``exchanges``, the partner answered, and the episode
    ended there: a one-step, exact score of a move (``training.rl.social_turns``' ``verifiable_turn`` reward)."""
    answer = (True, AgentAction(action_type=ActionType.none))
    talk = replay(facts, [*exchanges, (False, action), answer])
    return rules_for(facts).outcome(facts, talk)


# -- the judge ---------------------------------------------------------------------------------------


def judge_outcome(context: EpisodeContext) -> tuple[Outcome, Talk]:
    """Replay the episode's transcript through the rules: the outcome and the final state."""
    facts = facts_of(context.setup.scenario)
    partner = context.setup.agent_names[PARTNER_SEAT]
    talk = replay(facts, ((t.agent == partner, t.action) for t in context.turns))
    return rules_for(facts).outcome(facts, talk), talk


class VerifiableJudge(SyncFromAsync):
    """The rule judge: the goal dimension, scored exactly from the transcript; ``success`` per agent.

    It rates ``goal`` only (other SOTOPIA dimensions need an LLM judge). A scenario without hidden facts is
    unrated with a one-line error (``NotVerifiable``), never scored 0.
    """

    name = "verifiable"

    def __init__(self, dimensions: tuple[Dimension, ...] = GOAL_ONLY) -> None:
        if "goal" not in {d.name for d in dimensions}:
            raise ValueError("the verifiable judge rates the goal dimension; include 'goal' in --dimensions")
        self.dimensions = GOAL_ONLY

    async def aevaluate(self, context: EpisodeContext) -> EpisodeRating:
        outcome, _ = judge_outcome(context)
        learner, partner = context.setup.agent_names[LEARNER_SEAT], context.setup.agent_names[PARTNER_SEAT]
        ratings = {
            learner: _rating(outcome.goal, outcome.reasoning, outcome.success),
            partner: _rating(outcome.partner_goal, outcome.reasoning, outcome.agreed),
        }
        return EpisodeRating(evaluator=self.name, ratings=ratings)


def _rating(goal: int, reasoning: str, success: bool) -> AgentRating:
    return AgentRating(scores={"goal": DimensionScore(score=goal, reasoning=reasoning)}, success=success)
