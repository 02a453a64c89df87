"""The rules protocol that verifiable kinds and games share, and what every verifiable kind is built from.

``RuleSet`` is what the registries hold: a verifiable kind (a ``Kind``, which reads a scenario's ``verifiable``
facts; ``sotopia_env.kinds.registry``) or a game's rule set (``sotopia_env.games.master.GameRules``, which reads
its ``game`` section; ``sotopia_env.games.registry``). Both judge a finished episode exactly (``judge`` ->
``Verdict``), from the seat names and the transcript alone, and both drive the seats that follow rules (a kind's
rule partner, a game's rule players).

A kind is one module with one ``Kind`` subclass: its facts model (a ``VerifiableFacts`` subclass), its rules
(``respond`` and ``outcome``), its partner's lines (``LINES`` and ``fields``), its expert policy (``agreed`` and
``propose``, from what seat 1 is shown) and its partial credit. The replay that partner and judge share
(``step``, ``replay``, ``judge``) is here, so they always agree. ``sotopia_env.kinds.bargaining`` is the
shortest example.

Every kind: each reply that does not agree uses up a round; the reply to the ``max_rounds``-th learner action
without agreement is the partner leaving (the kind's ``respond`` decides when). After agreeing, the partner's
next turn is a goodbye (it leaves). A partner turn with no learner action since its previous one (it opens, or
the order let it act twice) is an opening line, or nothing. A learner that leaves gets a goodbye.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.errors import UserError
from sotopia_env.transcript import Turn

LEARNER_SEAT, PARTNER_SEAT = 0, 1  # a verifiable scenario: seat 1 learns, seat 2 follows the rules
VERIFIABLE, GAME = "verifiable", "game"  # the scenario section a rule set reads
RULE_SET_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")  # a registered kind's or game's name


class KindError(UserError, ValueError):
    """A rule set (a verifiable kind or a game's) that cannot be registered or found; the message names it."""


def load_entry_point_group(group: str, add: Callable[[Any, str], Any]) -> None:
    """Load every entry point of ``group`` and hand each to ``add(found, where)``; one that fails to load is a
    ``KindError`` naming it. The registries load theirs through ``sotopia_env.registry.Registry``; this is the same
    loop (``sotopia_env.registry.load_entry_point_group``), kept for callers of the old helper."""
    from sotopia_env.registry import load_entry_point_group as load

    load(group, lambda found, where, _name: add(found, where), KindError)


_LEAVING = ("leave", "goodbye")


@dataclass(frozen=True)
class Verdict:
    """An exact judgement: per seat name a goal (0..10) and ``success``, with the reasoning; or the ``error`` that
    left the episode without one (a game cut short), never a score of 0."""

    goals: dict[str, int]
    success: dict[str, bool]
    reasoning: str
    error: str | None = None


@runtime_checkable
class RuleSet(Protocol):
    """What the registry holds: a verifiable kind or a game's rule set, by ``name``; ``section`` is the scenario
    field it reads (``verifiable`` facts or the ``game`` section)."""

    name: str
    section: str

    def judge(self, section: Any, names: Sequence[str], turns: Sequence[Turn], ended: str = "") -> Verdict:
        """The exact verdict of a finished episode: ``section`` is what the rule set reads of the scenario (its
        facts, its game spec), ``ended`` the episode's termination reason."""
        ...


class VerifiableFacts(BaseModel):
    """The hidden facts of a verifiable scenario; each kind's facts model subclasses it with ``kind`` its name (a
    ``Literal``) and its own fields and checks. Unknown fields are errors, as everywhere in a scenario."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    kind: str
    # set once the episode's hidden type is drawn (``Kind.draw``, through ``EpisodeSetup.drawn_with``): the seed it
    # was drawn with. A stored episode keeps the drawn facts, so its judge reads what its partner played on.
    hidden_seed: int | None = None


# -- the conversation state ------------------------------------------------------------------------


@dataclass(frozen=True)
class Move:
    """What the partner does on one turn: ``act`` names it, ``value`` is a price or slot where there is one.

    Every kind's acts include ``open``, ``none``, ``accept``, ``leave`` and ``goodbye``; a kind adds its own
    (bargaining: ``counter``, ``ask_price``, ``ask_one``)."""

    act: str
    value: str | int | float | None = None
    round: int = 0  # the rounds used so far, this move's included


@dataclass
class Talk:
    """The state of a rule conversation after some partner turns; a kind that keeps more subclasses it
    (``Kind.talk_model``)."""

    rounds: int = 0
    deal: str | int | float | None = None  # the agreed price or slot, "yes" for persuasion
    closed: bool = False  # the partner left
    moves: list[Move] = field(default_factory=list)


Exchange = tuple[bool, AgentAction]  # (by the partner?, the action), in turn order


@dataclass(frozen=True)
class Outcome:
    agreed: bool
    success: bool  # agreed on terms that meet the learner's goal
    goal: int  # the learner's
    partner_goal: int
    reasoning: str


@dataclass(frozen=True)
class LearnerView:
    """What an expert policy acts on: only what seat 1 is shown."""

    goal: str  # its goal, without the hint sections
    moves: int  # the turns it has taken so far
    said: list[str]  # its own speeches so far
    heard: list[str]  # the partner's speeches so far


def spoken(action: AgentAction) -> str | None:
    """A speech's words; None for any other action."""
    return action.argument if action.action_type is ActionType.speak else None


def ten(fraction: float) -> int:
    """10 * fraction clipped to 0..1, rounded half up."""
    return int(math.floor(10 * min(1.0, max(0.0, fraction)) + 0.5))


class Kind:
    """A verifiable kind. A subclass sets ``name``, ``facts_model`` (and ``talk_model`` if it keeps more state)
    and writes its rules, partner lines, expert policy and partial credit; one instance is registered."""

    name: ClassVar[str]
    section: ClassVar[str] = VERIFIABLE
    facts_model: ClassVar[type[VerifiableFacts]]
    talk_model: ClassVar[type[Talk]] = Talk
    LINES: ClassVar[dict[str, tuple[str, ...]]] = {}  # the partner's variants per move act, ``fields`` fill them
    LEAVING: ClassVar[tuple[str, ...]] = _LEAVING  # the acts after which the partner has left (a kind may add its own)

    # -- the episode's hidden type ----------------------------------------------------------------------------

    def draw(self, facts: Any, rng: random.Random) -> Any:
        """The facts of one episode: the hidden type (a price, a concern, values) drawn from the instance's
        distribution with ``rng``, so that memorising an instance does not help. A kind without a distribution
        returns ``facts`` as they are. ``hidden_seed`` is set by the caller (``drawn_facts``)."""
        return facts

    def drawn_facts(self, facts: Any, seed: int) -> Any:
        """``facts`` with the hidden type drawn for ``seed`` (the same seed, the same draw); facts already drawn
        stay as they are."""
        if facts.hidden_seed is not None:
            return facts
        drawn = self.draw(facts, random.Random(seed))
        return drawn.model_copy(update={"hidden_seed": seed})

    def resolved(self, facts: Any) -> Any:
        """``facts`` as the rules read them: drawn facts as they are; undrawn ones (a scenario judged or played
        outside an episode, which draws) drawn for seed 0."""
        return facts if facts.hidden_seed is not None else self.drawn_facts(facts, 0)

    # -- the rules: each kind writes these two ----------------------------------------------------------------

    def respond(self, facts: Any, talk: Any, action: AgentAction) -> Move:
        """The partner's reply to the learner's ``action`` before agreement; may update ``talk``."""
        raise NotImplementedError

    def outcome(self, facts: Any, talk: Any) -> Outcome:
        """The scores of the conversation in ``talk``."""
        raise NotImplementedError

    # -- the replay that the partner and the judge share -------------------------------------------------------

    def step(self, facts: Any, talk: Talk, pending: AgentAction | None) -> Move:
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
            move = self.respond(facts, talk, pending)
        if move.act in self.LEAVING:
            talk.closed = True
        talk.moves.append(move)
        return move

    def _replay(self, facts: Any, exchanges: Iterable[Exchange]) -> tuple[Talk, AgentAction | None]:
        talk = self.talk_model()
        pending: AgentAction | None = None
        for by_partner, action in exchanges:
            if by_partner:
                self.step(facts, talk, pending)
                pending = None
            elif action.action_type is not ActionType.none:
                pending = action
        return talk, pending

    def replay(self, facts: Any, exchanges: Iterable[Exchange]) -> Talk:
        """The conversation state after every partner turn in ``exchanges``."""
        return self._replay(self.resolved(facts), exchanges)[0]

    def next_move(self, facts: Any, exchanges: Iterable[Exchange]) -> Move:
        """The partner's move now, after ``exchanges`` (its own earlier turns included)."""
        facts = self.resolved(facts)
        return self.step(facts, *self._replay(facts, exchanges))

    def outcome_after(self, facts: Any, exchanges: Iterable[Exchange], action: AgentAction) -> Outcome:
        """The outcome if the learner played ``action`` after ``exchanges``, the partner answered, and the episode
        ended there: a one-step, exact score of a move (``training.rl.social_turns``' ``verifiable_turn``)."""
        answer = (True, AgentAction(action_type=ActionType.none))
        facts = self.resolved(facts)
        return self.outcome(facts, self.replay(facts, [*exchanges, (False, action), answer]))

    def judge(self, section: Any, names: Sequence[str], turns: Sequence[Turn], ended: str = "") -> Verdict:
        """The transcript replayed through the rules (``section``: the facts). It reads the learner's moves and
        when seat 2 answered, not seat 2's words: it assumes seat 2 followed the rules, as the rule partner does."""
        learner, partner = names[LEARNER_SEAT], names[PARTNER_SEAT]
        section = self.resolved(section)
        outcome = self.outcome(section, self.replay(section, ((t.agent == partner, t.action) for t in turns)))
        return Verdict(
            goals={learner: outcome.goal, partner: outcome.partner_goal},
            success={learner: outcome.success, partner: outcome.agreed},
            reasoning=outcome.reasoning,
        )

    # -- the partner (agent spec ``rule-partner``) -----------------------------------------------------------

    def fields(self, facts: Any, move: Move) -> dict[str, str]:
        """The words ``LINES`` fill in for ``move``."""
        return {}

    def say(self, facts: Any, move: Move, turn: int, variety: int) -> AgentAction:
        """``move`` as the partner's action: ``LINES[move.act]``'s variant for this turn and scenario (``variety``)
        filled in; a move without lines is a silent leave (leaving moves) or nothing."""
        leaving = move.act in self.LEAVING
        lines = self.LINES.get(move.act)
        if not lines:
            return AgentAction(action_type=ActionType.leave if leaving else ActionType.none)
        line = lines[(variety + turn // 2) % len(lines)].format(**self.fields(facts, move))
        line = line[0].upper() + line[1:]
        return AgentAction(action_type=ActionType.leave if leaving else ActionType.speak, argument=line)

    # -- the expert (seat 1, from what it is shown) ----------------------------------------------------------

    def agreed(self, view: LearnerView) -> bool:
        """Whether the partner's last words agreed to the expert's last proposal (both have spoken)."""
        raise NotImplementedError(f"kind {self.name!r} has no expert policy")

    def propose(self, view: LearnerView) -> str:
        """The expert's next line before agreement."""
        raise NotImplementedError(f"kind {self.name!r} has no expert policy")

    # -- the baselines (agent specs ``baseline-random``, ``baseline-heuristic``, ``baseline-oracle``) ------------
    #    ``propose`` above is the heuristic: the best short script on what seat 1 is shown (and the BC expert).

    def random_line(self, view: LearnerView, rng: random.Random) -> str:
        """The random baseline's next line: a legal move of this kind drawn at random (an offer, a proposal, a
        question), knowing what seat 1 is shown but choosing blindly."""
        raise NotImplementedError(f"kind {self.name!r} has no random baseline")

    def oracle_line(self, facts: Any, view: LearnerView) -> str:
        """The oracle's next line: it sees the episode's drawn hidden ``facts``; its mean goal is the kind's
        ceiling in practice."""
        raise NotImplementedError(f"kind {self.name!r} has no oracle")

    # -- partial credit (the dense reward) -------------------------------------------------------------------

    def partial_credit(self, facts: Any, speeches: Sequence[str], talk: Any) -> float:
        """0..1 from the learner's ``speeches`` and the replayed ``talk``: progress short of success."""
        raise NotImplementedError(f"kind {self.name!r} gives no partial credit")
