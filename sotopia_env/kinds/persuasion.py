"""Persuasion: the rule partner agrees to a request only once the learner has answered its hidden concern.

- **Rules.** A speech *names* a word when one of its words starts with it (``insur``: "insurance"; case and
  spacing ignored). A learner speech *addresses* the partner's concern when (1) it names a word of the concern,
  (2) it holds at most ``MAX_CONCERN_WORDS`` (5) concern words in all (distinct words of the speech at which a
  word of any shipped concern, or of this one, begins), and (3) the learner's speeches so far, this one included,
  have named at most ``MAX_FOREIGN`` (2) *other* concerns of the library. The library's concerns
  (``library_concerns()``) are those of the shipped persuasion scenarios, every split; a speech names another
  concern by one of that concern's words that is not one of this concern's, found once every word that starts
  with one of this concern's words is blanked. (A scenario of your own is judged against the shipped concerns
  and its own; adding a shipped persuasion scenario changes the vocabulary, so compare scores under one library
  version.) Past ``MAX_FOREIGN`` the partner stops listening for the rest of the conversation: nothing
  addresses its concern any more, an address made earlier included. The partner agrees when the concern has
  been addressed (in that speech or earlier) and that speech asks: it has a question mark or a request phrase
  (``ASK_CUES``). Otherwise it says its next doubt (after "that's not it" when the speech named other concerns
  but not its own), or, once reassured, waits for the question, or, past ``MAX_FOREIGN``, says the learner is
  not listening. The doubts are the scenario's cue lines: they hint at the concern and never name it (checked
  on load), so a learner wins by hearing the worry in them and answering it. A learner may also *ask after the
  worry* (``asks_after_worry``: a question with a worry word, "what would worry you about it?"): a scenario with
  a ``worry`` (the concern in the partner's own words, naming it) then has the partner say it ("Since you ask,
  what worries me is the cost of the petrol."), for a round, so a learner can answer in the partner's words.
- **Judge.** 10 for both on agreement (success), else 0.
- **Expert.** Opens by asking what would worry the partner. When the partner says its worry, the expert answers
  it in the partner's own words (``echo``) and asks in the same line; otherwise it listens to the doubts and
  answers the worry it hears in them (``WORRIES``: cue phrases and a one-sentence reassurance that names that
  worry only). A worry it tried and that did not land is not tried again; when it hears no cue it asks what
  would help.
- **Partial credit** (the dense reward): ``REVEALED_CREDIT`` (0.5) once the learner asked after the worry and the
  partner said it, 1 once the concern was addressed (as the rules replay it); 0 once the partner stopped
  listening (past ``MAX_FOREIGN``), whatever came before.

What the rules stand against, by design and in ``tests/test_verifiable.py``: a line that asks and names every
concern word of the library, or the same words spread over several turns, wins no persuasion instance (asking
after the worry first changes nothing, and earns no partial credit); guessing one concern per turn gets at most
``MAX_FOREIGN + 1`` guesses per conversation. What they do not stand against: words are matched, not understood
("I won't go near your window" names the window), and a learner that asks after the worry and then repeats it
with a question ("The cost of the petrol? Could you?") is heard as answering it: the ``worry`` is there to be
answered in the partner's own words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import ClassVar, Literal

import yaml
from pydantic import Field, ValidationInfo, field_validator

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.kinds.base import Kind, LearnerView, Move, Outcome, Talk, VerifiableFacts, spoken

ASK_CUES = ("?", "please", "would you", "could you", "can you", "will you", "may i", "can i", "let me")
# a question with one of these asks after the partner's worry (``asks_after_worry``)
WORRY_CUES = ("worr", "bother", "concern", "mind at rest", "what would help", "hesita", "problem", "what's wrong")
REVEALED_CREDIT = 0.5  # partial credit once the learner asked after the worry and heard it
MAX_FOREIGN = 2  # the library's other concerns a conversation may name before the partner stops listening
MAX_CONCERN_WORDS = 5  # the concern words one speech may hold and still address the concern


def flat_text(text: str) -> str:
    """Lower case, curly apostrophes straightened, runs of white space as one space."""
    return " ".join(text.lower().replace("\u2019", "'").split())


def concern_hits(text: str, words: Sequence[str]) -> list[str]:
    """The ``words`` that occur in ``text`` at the start of a word (case-insensitive, spaces normalised):
    ``insur`` occurs in "insurance", ``pay you back`` in "I'll pay you back", ``list`` not in "a playlist"."""
    flat = flat_text(text)
    return [w for w in words if re.search(rf"\b{re.escape(flat_text(w))}", flat)]


class PersuasionFacts(VerifiableFacts):
    """A request: the partner agrees to ``request`` only once the learner's speech has addressed its hidden
    ``concern`` (any of these words, matched at the start of a word) and the learner then asks.

    ``doubts`` are what the partner says while the concern is open, in turn: at least two, each a cue to the
    concern as a real objection is ("I really need to be able to see outside" for a window seat), never naming
    it (no concern word in a doubt: a learner must infer the concern, not echo it).
    """

    kind: Literal["persuasion"] = "persuasion"
    request: str = Field(min_length=1)  # as the partner says it: "lend you my car"
    concern: list[str] = Field(min_length=1)  # hidden
    doubts: list[str] = Field(min_length=2)  # cues to the concern, said in turn while it is open
    worry: str | None = None  # the concern in the partner's own words, said when the learner asks after it
    max_rounds: int = Field(default=5, ge=1)

    @field_validator("concern")
    @classmethod
    def _concern(cls, words: list[str]) -> list[str]:
        flat = [flat_text(w) for w in words]
        if any(not w or not re.match(r"\w", w) for w in flat):
            raise ValueError("concern words must be non-empty and start with a letter or digit")
        if len(set(flat)) != len(flat):
            raise ValueError("concern words must be distinct")
        return words

    @field_validator("doubts")
    @classmethod
    def _doubts(cls, doubts: list[str], info: ValidationInfo) -> list[str]:
        concern = info.data.get("concern") or []
        for i, doubt in enumerate(doubts):
            if not doubt.strip():
                raise ValueError(f"doubt {i} is empty")
            named = concern_hits(doubt, concern)
            if named:
                raise ValueError(
                    f"doubt {i} names the concern ({named[0]!r}); a doubt hints at the concern, never names it"
                )
        return doubts

    @field_validator("worry")
    @classmethod
    def _worry(cls, worry: str | None, info: ValidationInfo) -> str | None:
        if worry is None:
            return None
        concern = info.data.get("concern") or []
        named = concern_hits(worry, concern)
        if concern and not named:
            raise ValueError(f"the worry {worry!r} names no concern word; it is the concern in the partner's words")
        if len(named) > MAX_CONCERN_WORDS:
            raise ValueError(f"the worry {worry!r} names more than {MAX_CONCERN_WORDS} concern words")
        if re.search(r"[.?!]\s*$", worry):
            raise ValueError(f"the worry {worry!r} ends a line of the partner's: a phrase without end punctuation")
        return worry


@dataclass
class PersuasionTalk(Talk):
    addressed: bool = False
    revealed: bool = False  # the partner said its worry, asked
    foreign: list[tuple[str, ...]] = field(default_factory=list)  # other concerns named so far


@lru_cache(maxsize=1)
def library_concerns() -> tuple[tuple[str, ...], ...]:
    """The concerns of the shipped persuasion scenarios (``sotopia_env/data``, every split), each as its sorted
    words (lower case): the vocabulary that tells a speech that names other concerns from one that listened.
    Read from the shipped YAML itself (the library is loaded a layer above the kinds)."""
    data = Path(str(resources.files("sotopia_env") / "data"))
    found = set()
    for path in sorted([*data.rglob("*.yaml"), *data.rglob("*.yml")]):
        for entry in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("scenarios") or []:
            facts = entry.get("verifiable") or {}
            if facts.get("kind") == PersuasionFacts.model_fields["kind"].default:
                concern = PersuasionFacts.model_validate(facts).concern
                found.add(tuple(sorted({flat_text(w) for w in concern})))
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
    *addresses* the concern also depends on what else it names (``hear``, ``Persuasion.respond``)."""
    return bool(concern_hits(text, concern))


def asks(text: str) -> bool:
    lowered = text.lower()
    return any(cue in lowered for cue in ASK_CUES)


def asks_after_worry(text: str) -> bool:
    """Whether ``text`` asks what worries the partner: a question (``asks``) with a worry word (``WORRY_CUES``:
    "Is anything worrying you about it?", "What would put your mind at rest?")."""
    flat = flat_text(text)
    return asks(flat) and any(cue in flat for cue in WORRY_CUES)


@dataclass(frozen=True)
class Worry:
    """A worry a listener can hear in the partner's objections: the ``cues`` (phrases, lower case) that betray it,
    and the ``reassurance`` that answers it, naming the concern in ordinary words."""

    name: str
    cues: tuple[str, ...]
    reassurance: str


# What a considerate person hears in the objections of the shipped persuasion scenarios (every split: the expert is
# a demonstrator and a ceiling for listening, never evaluated as the learner) and how they would answer. Each
# answer names one worry in a sentence; none lists words (the rules above check both).
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


class Persuasion(Kind):
    """Says the scenario's ``doubts`` (cue lines that hint at its concern) while the concern is open, says so when
    the learner guessed another worry, and, once the learner has named too many other concerns, that it is not
    being listened to."""

    name = "persuasion"
    facts_model = PersuasionFacts
    talk_model = PersuasionTalk
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
        "reveal": (  # the scenario's ``worry``, asked; the two variants end alike (``REVEALED``, what ``echo`` reads)
            "Since you ask, what worries me is {worry}.",
            "Well, since you ask, what worries me is {worry}.",
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
    OPENER = "Hi, sorry to bother you. I have a small favour to ask. Is there anything that would worry you about it?"
    REVEALED = re.compile(r"what worries me is (?P<worry>.+?)\.?$", re.IGNORECASE)  # the reveal line's worry
    PROBE = "I'd really like to make this easy for you. What would put your mind at rest?"
    ASK = "Would you do it for me?"
    CONVINCED = ("convinced me", "settles it")  # the partner's words when it agrees to a request

    # -- rules --------------------------------------------------------------------------------------------------

    def respond(self, facts: PersuasionFacts, talk: PersuasionTalk, action: AgentAction) -> Move:
        speech = spoken(action)
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
        if facts.worry is not None and speech is not None and asks_after_worry(speech):
            talk.revealed = True
            return Move("reveal", None, talk.rounds)
        return Move("doubt", "off" if off else None, talk.rounds)

    def outcome(self, facts: PersuasionFacts, talk: PersuasionTalk) -> Outcome:
        if talk.deal is None:
            if len(talk.foreign) > MAX_FOREIGN:
                named = ", ".join(c[0] for c in talk.foreign)
                left = f"never addressed: the learner named {len(talk.foreign)} other concerns ({named}...)"
            else:
                left = "addressed but never asked" if talk.addressed else "never addressed"
                left += ", though it said its worry when asked" if talk.revealed and not talk.addressed else ""
            return Outcome(False, False, 0, 0, f"the partner did not agree ({facts.request}): its concern was {left}")
        return Outcome(True, True, 10, 10, f"the partner agreed ({facts.request}) once its concern was addressed")

    # -- partner ------------------------------------------------------------------------------------------------

    def fields(self, facts: PersuasionFacts, move: Move) -> dict[str, str]:
        return {"request": facts.request, "worry": facts.worry or ""}

    def say(self, facts: PersuasionFacts, move: Move, turn: int, variety: int) -> AgentAction:
        """A doubt is the scenario's next cue line (``doubts``, in turn), after a wrong guess (the learner named
        another concern) prefixed with a line that says so."""
        action = super().say(facts, move, turn, variety)
        doubts = facts.doubts
        if move.act == "doubt" and doubts:
            action = AgentAction(action_type=ActionType.speak, argument=doubts[(move.round - 1) % len(doubts)])
        if move.act == "doubt" and move.value == "off":
            off = self.OFF[(variety + turn // 2) % len(self.OFF)]
            action = AgentAction(action_type=ActionType.speak, argument=f"{off} {action.argument}")
        return action

    # -- expert -------------------------------------------------------------------------------------------------

    def agreed(self, view: LearnerView) -> bool:
        return any(cue in view.heard[-1].lower() for cue in self.CONVINCED)

    def echo(self, worry: str) -> str:
        """The answer to a worry the partner said, in its own words, and the question."""
        return f"Don't worry about {worry}, I'll take care of it. {self.ASK}"

    def propose(self, view: LearnerView) -> str:
        if view.moves == 0 or not view.heard:
            return self.OPENER
        revealed = self.REVEALED.search(view.heard[-1].strip())
        if revealed and self.echo(revealed["worry"]) not in view.said:
            return self.echo(revealed["worry"])
        tried = {w.name for w in WORRIES if any(w.reassurance in line for line in view.said)}
        latest, everything = view.heard[-1].lower(), " ".join(view.heard).lower()

        def rank(worry: Worry) -> tuple[int, int]:
            return sum(c in latest for c in worry.cues), sum(c in everything for c in worry.cues)

        candidates = [w for w in WORRIES if w.name not in tried and rank(w) > (0, 0)]
        if not candidates:
            return self.PROBE
        best = max(candidates, key=rank)  # the first of the best, in table order
        return f"{best.reassurance} {self.ASK}"

    # -- partial credit -----------------------------------------------------------------------------------------

    def partial_credit(self, facts: PersuasionFacts, speeches: Sequence[str], talk: PersuasionTalk) -> float:
        """1 once the concern was addressed, ``REVEALED_CREDIT`` once the learner asked after the worry and heard
        it, 0 otherwise and once the partner stopped listening (stuffing earns nothing, asked or not)."""
        if len(talk.foreign) > MAX_FOREIGN:
            return 0.0
        return 1.0 if talk.addressed else REVEALED_CREDIT if talk.revealed else 0.0


KIND = Persuasion()
