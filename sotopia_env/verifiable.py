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
- persuasion: a speech *names* a word when one of its words starts with it (``insur``: "insurance"; case and
  spacing ignored). A learner speech *addresses* the partner's concern when (1) it names a word of the concern,
  (2) it holds at most ``MAX_CONCERN_WORDS`` (5) concern words in all (distinct words of the speech at which a
  word of any shipped concern, or of this one, begins), and (3) the learner's speeches so far, this one included,
  have named at most ``MAX_FOREIGN`` (2) *other* concerns of the library. The library's concerns
  (``library_concerns()``) are those of the shipped persuasion scenarios, every split; a speech names another
  concern by one of that concern's words that is not one of this concern's, found once every word that starts
  with one of this concern's words is blanked. (A scenario of your own is judged against the shipped concerns
  and its own; adding a shipped persuasion scenario changes the vocabulary, so compare scores under one library
  version.) Past ``MAX_FOREIGN`` the partner stops listening for the rest of
  the conversation: nothing addresses its concern any more, an address made earlier included. The partner agrees
  when the concern has been addressed (in that speech or earlier) and that speech asks: it has a question mark or
  a request phrase (``ASK_CUES``). Otherwise it says its next doubt (after "that's not it" when the speech named
  other concerns but not its own), or, once reassured, waits for the question, or, past ``MAX_FOREIGN``, says
  the learner is not listening. The doubts are the scenario's cue lines: they hint at the concern and never name
  it (checked on load), so a learner wins by hearing the worry in them and answering it.

What the rules stand against, by design and in ``tests/test_verifiable.py``: a line that asks and names every
concern word of the library, or the same words spread over several turns, wins no persuasion instance; guessing
one concern per turn gets at most ``MAX_FOREIGN + 1`` guesses per conversation. Several numbers or slots in one
speech are no offer; a huge offer or the partner's own asking price is a deal over budget (0); offers or slots
spread over turns use up rounds and score only by the learner's own budget and slots. What they do not stand
against: words are matched, not understood ("I won't go near your window" names the window), and the bargaining
partner's concessions are a fixed schedule, so its first counter gives its reservation away (to within rounding)
to a learner that does the arithmetic: the partner tells it, and the score stays capped at the reservation.

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
from functools import lru_cache
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
from sotopia_env.games.judge import rate_game
from sotopia_env.profiles import (
    BargainingFacts,
    PersuasionFacts,
    Scenario,
    SchedulingFacts,
    concern_hits,
    flat_text,
)

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

    act: str  # open none accept counter ask_price ask_one decline propose no_more doubt reassured unheard leave
    # goodbye
    value: str | int | float | None = None
    round: int = 0  # the rounds used so far, this move's included


@dataclass
class Talk:
    """The state of a rule conversation after some partner turns."""

    rounds: int = 0
    deal: str | int | float | None = None  # the agreed price or slot, "yes" for persuasion
    closed: bool = False  # the partner left
    addressed: bool = False
    foreign: list[tuple[str, ...]] = field(default_factory=list)  # persuasion: other concerns named so far
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


MAX_FOREIGN = 2  # the library's other concerns a conversation may name before the partner stops listening
MAX_CONCERN_WORDS = 5  # the concern words one speech may hold and still address the concern


@lru_cache(maxsize=1)
def library_concerns() -> tuple[tuple[str, ...], ...]:
    """The concerns of the shipped persuasion scenarios (``sotopia_env/data``, every split), each as its sorted
    words (lower case): the vocabulary that tells a speech that names other concerns from one that listened."""
    from sotopia_env.library import load_library  # the library imports profiles, never this module

    found = {
        tuple(sorted({flat_text(w) for w in s.verifiable.concern}))
        for s in load_library().scenarios.values()
        if isinstance(s.verifiable, PersuasionFacts)
    }
    return tuple(sorted(found))


_WORD = re.compile(r"[\w']*")


def _any(words: Iterable[str], lookahead: bool = False) -> re.Pattern[str] | None:
    """``\\b`` then any of ``words`` (longest first); zero-width with ``lookahead``, to find every start."""
    alternatives = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    if not alternatives:
        return None
    return re.compile(rf"\b(?=(?:{alternatives}))" if lookahead else rf"\b(?:{alternatives})")


@lru_cache(maxsize=4096)
def _starts(word: str) -> re.Pattern[str]:
    return re.compile(rf"\b{re.escape(flat_text(word))}")


@dataclass(frozen=True)
class _Ear:
    """The compiled patterns that hear speech for one concern (its words, flattened)."""

    blank: re.Pattern[str] | None  # a word that starts with one of the concern's words, to the word's end
    foreign: dict[str, tuple[tuple[str, ...], ...]]  # each other concern's words, but this concern's: their concerns
    scan: re.Pattern[str] | None  # every place where one of ``foreign``'s words begins
    starts: re.Pattern[str] | None  # every place where a concern word of the library or of this concern begins


@lru_cache(maxsize=256)
def _ear(mine: frozenset[str]) -> _Ear:
    blank = _any(mine)
    blank = re.compile(blank.pattern + r"[\w']*") if blank is not None else None
    foreign: dict[str, tuple[tuple[str, ...], ...]] = {}
    for concern in library_concerns():
        if set(concern) != mine:
            for word in concern:
                if word not in mine:
                    foreign[word] = (*foreign.get(word, ()), concern)
    everything = mine.union(*library_concerns())
    return _Ear(blank, foreign, _any(foreign, lookahead=True), _any(everything, lookahead=True))


@dataclass(frozen=True)
class Heard:
    """What one learner speech says to the persuasion partner (``hear``)."""

    own: tuple[str, ...]  # the words of the partner's concern it names
    foreign: tuple[tuple[str, ...], ...]  # the library's other concerns it names
    words: int  # its concern words: distinct words of the speech at which a concern word of the library (or of
    # this concern) begins

    def addresses(self) -> bool:
        """Whether this speech, on its own, addresses the concern (the conversation's count of foreign concerns
        aside): it names the concern and holds at most ``MAX_CONCERN_WORDS`` concern words."""
        return bool(self.own) and self.words <= MAX_CONCERN_WORDS


def hear(text: str, concern: Sequence[str]) -> Heard:
    """Which concerns ``text`` names. A concern word is named when a word of the text starts with it
    (``insur``: "insurance"). A library concern other than this one is named by one of its words that is not
    a word of this concern, found in the text once every word that starts with a word of this concern is blanked
    (so "charged", for a concern with the word ``charged``, does not also name another concern's ``charge``)."""
    return _hear(text, tuple(concern))


@lru_cache(maxsize=4096)
def _hear(text: str, concern: tuple[str, ...]) -> Heard:
    flat = flat_text(text)
    ear = _ear(frozenset(flat_text(w) for w in concern))
    own = tuple(w for w in concern if _starts(w).search(flat))
    rest = ear.blank.sub(" ", flat) if ear.blank is not None else flat
    named: set[tuple[str, ...]] = set()
    for match in ear.scan.finditer(rest) if ear.scan is not None else ():
        named.update(
            c for word, concerns in ear.foreign.items() if rest.startswith(word, match.start()) for c in concerns
        )
    foreign = tuple(c for c in library_concerns() if c in named)
    starts = ear.starts.finditer(flat) if ear.starts is not None else ()
    words = {_WORD.match(flat, m.start()).group() for m in starts}  # type: ignore[union-attr]
    return Heard(own, foreign, len(words))


def addresses(text: str, concern: Sequence[str]) -> bool:
    """Whether ``text`` has a word that starts with one of the ``concern`` words (case-insensitive); whether it
    *addresses* the concern also depends on what else it names (``hear``, ``PersuasionRules``)."""
    return bool(concern_hits(text, concern))


def asks(text: str) -> bool:
    lowered = text.lower()
    return any(cue in lowered for cue in ASK_CUES)


class PersuasionRules:
    def respond(self, facts: PersuasionFacts, talk: Talk, action: AgentAction) -> Move:
        speech = _spoken(action)
        off = False  # this speech named other concerns and not this one: a wrong guess
        if speech is not None:
            heard = hear(speech, facts.concern)
            talk.foreign += [c for c in heard.foreign if c not in talk.foreign]
            off = bool(heard.foreign) and not heard.own
            if len(talk.foreign) > MAX_FOREIGN:
                talk.addressed = False  # it stopped listening, and an earlier address no longer counts
            elif heard.addresses():
                talk.addressed = True
        deaf = len(talk.foreign) > MAX_FOREIGN
        if talk.addressed and speech is not None and asks(speech):
            talk.deal = "yes"
            return Move("accept", None, talk.rounds)
        talk.rounds += 1
        if talk.rounds >= facts.max_rounds:
            return Move("leave", None, talk.rounds)
        if deaf:
            return Move("unheard", None, talk.rounds)
        if talk.addressed:
            return Move("reassured", None, talk.rounds)
        return Move("doubt", "off" if off else None, talk.rounds)

    def outcome(self, facts: PersuasionFacts, talk: Talk) -> Outcome:
        if talk.deal is None:
            if len(talk.foreign) > MAX_FOREIGN:
                named = ", ".join(c[0] for c in talk.foreign)
                left = f"never addressed: the learner named {len(talk.foreign)} other concerns ({named}...)"
            else:
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

    It rates ``goal`` only (other SOTOPIA dimensions need an LLM judge). A game is judged by its rules
    (``sotopia_env.games.judge``). A scenario without hidden facts is unrated with a one-line error
    (``NotVerifiable``), never scored 0.
    """

    name = "verifiable"

    def __init__(self, dimensions: tuple[Dimension, ...] = GOAL_ONLY) -> None:
        if "goal" not in {d.name for d in dimensions}:
            raise ValueError("the verifiable judge rates the goal dimension; include 'goal' in --dimensions")
        self.dimensions = GOAL_ONLY

    async def aevaluate(self, context: EpisodeContext) -> EpisodeRating:
        if context.setup.scenario.game is not None:
            return rate_game(context, self.name)
        outcome, _ = judge_outcome(context)
        learner, partner = context.setup.agent_names[LEARNER_SEAT], context.setup.agent_names[PARTNER_SEAT]
        ratings = {
            learner: _rating(outcome.goal, outcome.reasoning, outcome.success),
            partner: _rating(outcome.partner_goal, outcome.reasoning, outcome.agreed),
        }
        return EpisodeRating(evaluator=self.name, ratings=ratings)


def _rating(goal: int, reasoning: str, success: bool) -> AgentRating:
    return AgentRating(scores={"goal": DimensionScore(score=goal, reasoning=reasoning)}, success=success)
