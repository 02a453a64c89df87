"""Rule partners for verifiable scenarios: agents that act on the scenario's hidden facts (agent spec ``rule-partner``).

``RulePartner`` takes seat 2 of a verifiable scenario. At reset it reads the hidden facts
(``Scenario.verifiable``) and picks the partner class of their kind (``PARTNERS``). On each of its turns it
replays the conversation so far through the rules in ``sotopia_env.verifiable`` (the same rules the
``verifiable`` judge replays) and says its move as a natural sentence. The rules, and how they treat malformed
speech (no number, several numbers, non-verbal actions, leaving), are documented in ``sotopia_env.verifiable``.

Lines vary with the turn and the scenario but are deterministic: the same episode gives the same words.
To write a partner for a new kind, subclass ``KindPartner`` with ``LINES`` (one tuple of variants per move) and
``fields`` (the words the lines fill in), and register it in ``PARTNERS``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.observation import Observation
from sotopia_env.profiles import BargainingFacts, PersuasionFacts, Scenario, SchedulingFacts
from sotopia_env.verifiable import PARTNER_SEAT, Move, facts_of, next_move, require_verifiable

_LEAVING = ("leave", "goodbye")


class KindPartner:
    """Says one kind's moves: ``LINES[move.act]`` holds the variants, filled in with ``fields(move)``."""

    LINES: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init__(self, facts: Any, variety: int = 0) -> None:
        self.facts = facts
        self.variety = variety

    def fields(self, move: Move) -> dict[str, str]:
        return {}

    def say(self, move: Move, turn: int) -> AgentAction:
        lines = self.LINES.get(move.act)
        if not lines:
            kind = ActionType.leave if move.act in _LEAVING else ActionType.none
            return AgentAction(action_type=kind)
        line = lines[(self.variety + turn // 2) % len(lines)].format(**self.fields(move))
        line = line[0].upper() + line[1:]
        return AgentAction(action_type=ActionType.leave if move.act in _LEAVING else ActionType.speak, argument=line)


class BargainingPartner(KindPartner):
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

    def fields(self, move: Move) -> dict[str, str]:
        facts: BargainingFacts = self.facts
        price = move.value if move.act in ("counter", "ask_price") else facts.asking_price
        item = facts.item
        return {
            "item": item,
            "Item": item[:1].upper() + item[1:],
            "price": self.money(price),
            "value": self.money(move.value),
        }

    def money(self, value: Any) -> str:
        if not isinstance(value, int | float):
            return ""
        text = f"{value:,.2f}".removesuffix(".00")
        return f"{self.facts.currency}{text}"


class SchedulingPartner(KindPartner):
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

    def fields(self, move: Move) -> dict[str, str]:
        facts: SchedulingFacts = self.facts
        return {"event": facts.event, "value": str(move.value or "")}


class PersuasionPartner(KindPartner):
    """Says the scenario's ``doubts`` (cue lines that hint at its concern) while the concern is open, says so when
    the learner guessed another worry, and, once the learner has named too many other concerns, that it is not
    being listened to (the rules: ``sotopia_env.verifiable``)."""

    LINES: ClassVar[dict[str, tuple[str, ...]]] = {
        "open": ("Hey, what's up?", "Oh, hi! What's on your mind?"),
        "accept": (
            "Okay, you've convinced me. I'll {request}.",
            "Alright, that settles it. Yes, I'll {request}.",
        ),
        "doubt": (  # only for facts built without doubts (the library requires them)
            "I don't know... I'm not comfortable with that yet.",
            "Something about it still bothers me, to be honest.",
        ),
        "unheard": (
            "You keep bringing up things I never mentioned. I don't think you're listening to me.",
            "That's a lot of promises about everything under the sun. Are you even listening?",
        ),
        "reassured": (
            "Okay, that does ease my mind. So what exactly are you asking me?",
            "Well, that helps, honestly. What is it you'd like me to do?",
        ),
        "leave": (
            "Sorry, I'm not going to {request}. I need to get going.",
            "I've thought about it, and the answer is no. I have to go now.",
        ),
        "goodbye": ("See you later!", "Alright, talk soon!"),
    }

    OFF = ("That's not really what bothers me.", "No, that's not it.")  # before a doubt, after a wrong guess

    def say(self, move: Move, turn: int) -> AgentAction:
        """A doubt is the scenario's next cue line (``doubts``, in turn), after a wrong guess (the learner named
        another concern) prefixed with a line that says so."""
        action = super().say(move, turn)
        doubts = self.facts.doubts
        if move.act == "doubt" and doubts:
            action = AgentAction(action_type=ActionType.speak, argument=doubts[(move.round - 1) % len(doubts)])
        if move.act == "doubt" and move.value == "off":
            off = self.OFF[(self.variety + turn // 2) % len(self.OFF)]
            action = AgentAction(action_type=ActionType.speak, argument=f"{off} {action.argument}")
        return action

    def fields(self, move: Move) -> dict[str, str]:
        facts: PersuasionFacts = self.facts
        return {"request": facts.request}


PARTNERS: dict[str, type[KindPartner]] = {
    "bargaining": BargainingPartner,
    "scheduling": SchedulingPartner,
    "persuasion": PersuasionPartner,
}


class RulePartner:
    """The ``rule-partner`` agent: seat 2 of a verifiable scenario, acting on its hidden facts."""

    model = "rule-partner"

    def __init__(self) -> None:
        self.partner: KindPartner | None = None

    def reset(self, setup: EpisodeSetup | None = None, seat: int | None = None) -> None:
        """Read the hidden facts; ``NotVerifiable`` for a scenario without them, ValueError for the wrong seat."""
        self.partner = None
        if setup is None:
            return
        if seat is not None and seat != PARTNER_SEAT:
            raise ValueError(f"rule-partner plays seat {PARTNER_SEAT + 1} (agent2), not seat {seat + 1}")
        facts = facts_of(setup.scenario)
        self.partner = PARTNERS[facts.kind](facts, zlib.crc32(setup.scenario.id.encode()))

    async def act(self, observation: Observation | dict) -> AgentAction:
        obs = Observation.from_env(observation)
        if not obs.my_turn:
            return AgentAction(action_type=ActionType.none)
        if self.partner is None:
            raise RuntimeError("rule-partner was not reset with the episode's setup (reset(setup=..., seat=1))")
        exchanges = [(h.agent == obs.agent, h.as_action()) for h in obs.history]
        return self.partner.say(next_move(self.partner.facts, exchanges), obs.turn)


def check_rule_specs(scenarios: Iterable[Scenario], agent_specs: Sequence[str], evaluator: str) -> None:
    """Before playing: ``rule-partner`` only in seat 2 and on verifiable scenarios, ``rule-player`` only on games,
    and the ``verifiable`` judge only on either. Raises ``NotVerifiable`` or ``AgentSpecError`` with one line."""
    from sotopia_env.agents.loading import RULE_PARTNER, RULE_PLAYER, AgentSpecError
    from sotopia_env.evaluator_spec import VERIFIABLE

    seats = [i for i, spec in enumerate(agent_specs) if spec == RULE_PARTNER]
    if any(seat != PARTNER_SEAT for seat in seats):
        raise AgentSpecError(f"{RULE_PARTNER} plays seat {PARTNER_SEAT + 1} only: pass it as --agent2 (or --partner)")
    if seats:
        require_verifiable(scenarios, RULE_PARTNER)
    if RULE_PLAYER in agent_specs:
        for scenario in scenarios:
            if scenario.game is None:
                raise AgentSpecError(
                    f"{RULE_PLAYER} plays games only, and {scenario.id!r} is not one (--scenarios game)"
                )
    if evaluator.strip().lower() == VERIFIABLE:
        require_verifiable([s for s in scenarios if s.game is None], f"--evaluator {VERIFIABLE}")
