"""Persuasion: the rule partner (seat 2) grants the learner's request once it is offered the remedy for its hidden
concern, drawn per episode from the instance's concerns; it never names the concern, it lets it show.

- **Facts.** An instance has a ``request`` and at least three ``concerns``; each has a ``name`` (a label the
  partner never says), at least two ``cues`` (lines the partner says that hint at it) and a ``remedy`` (key
  phrases: a learner speech that holds one of them *names* that remedy). A cue line listed under two concerns is
  ambiguous between them; every concern has a cue line of its own. Checked on load: no remedy key phrase and no
  word of a concern's name occurs in any cue line or in the request, no remedy key phrase occurs in another
  remedy's, and each cue line belongs to at most two concerns. ``Kind.draw`` draws the episode's ``concern``
  (uniformly) and ``first_cue`` (where in that concern's cue lines the partner starts); a scenario may pin
  either. Seat 1's goal lists the remedies it may offer (``goal_items``), one per concern, not which concern
  the partner holds.
- **Rules.** Phrases match at the start of a word, case and spacing ignored (``insur`` in "insurance"). A speech
  that names exactly one remedy is an *offer*. The right one (the drawn concern's) with an ask (a question mark
  or a request phrase, ``ASK_CUES``) is accepted; without an ask the partner is reassured and waits for the
  question (a later asking speech that names no remedy is then accepted). A wrong one costs goodwill: the partner
  says it is not that, then its next cue line; at the ``max_wrong``-th (2) wrong offer it leaves. A speech that
  names several remedies is no offer: the partner asks for one thing (no cue). Any other speech or action (small
  talk, a question, the partner's own words echoed back) gets the partner's next cue line, in turn from
  ``first_cue``, round and round. Every reply short of agreeing uses a round; the reply to the ``max_rounds``-th
  (6) learner action without agreement is the partner leaving.
- **Judge.** On agreement, learner goal = max(1, 10 - ``TURN_COST`` (3) x the learner's actions before the
  accepted one - ``WRONG_COST`` (4) x wrong offers); success = agreement; partner 10. No agreement: 0 for both.
- **Baselines.** Oracle (``oracle_line``): offers the drawn concern's remedy (its goal item) with an ask on its
  first turn: 10. Heuristic (``propose``, the BC expert): asks what is on the partner's mind, then scores every
  goal item it has not yet offered by the cue phrases heard so far that point to it (``WORRIES``: what a
  considerate person hears in an objection and what would answer it; a phrase of a shared line points to two)
  and offers the one clear best with an ask, or asks again while two tie. Random (``random_line``): small talk, a
  question, or a random goal item with or without an ask, uniformly.
- **Partial credit** (the dense reward): 1 on agreement, ``REMEDIED_CREDIT`` (0.5) once the right remedy was
  offered alone, else 0; 0 whenever a speech named several remedies (stuffing).

What this stands against: the partner never says its concern or a remedy, so echoing its words offers nothing
(the old "is anything worrying you?" / "don't worry about <its words>" script scores 0); a line that lists every
remedy is no offer, as often as it is said; guessing remedies one by one costs a turn and goodwill each and ends
at the second wrong one. What it does not: words are matched, not understood ("I won't give you my window seat"
offers the window seat).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.kinds.base import Kind, LearnerView, Move, Outcome, Talk, VerifiableFacts, spoken
from sotopia_env.kinds.registry import register_kind

ASK_CUES = ("?", "please", "would you", "could you", "can you", "will you", "may i", "can i", "let me")
TURN_COST = 3  # goal points per learner action before the accepted one
WRONG_COST = 4  # goal points per wrong remedy offered (goodwill)
REMEDIED_CREDIT = 0.5  # partial credit once the right remedy was offered, not yet asked
OFFER_LEAD = "What you could offer, one thing at a time:"  # seat 1's goal lists its remedies after this
_NAME_WORD = 4  # words of a concern's name this long or longer are never said by the partner


PARTNER_LINES: dict[str, tuple[str, ...]] = {  # every partner line but the cue lines, which fill {cue}
    "open": ("Hey, what's up?", "Oh, hi! What's on your mind?"),
    "accept": (
        "Okay, that puts my mind at rest. I'll {request}.",
        "Alright, in that case, yes: I'll {request}.",
    ),
    "cue": ("{cue}",),
    "wrong": ("That's kind of you, but it isn't really that. {cue}", "Thanks, but no, that's not it. {cue}"),
    "ask_one": (
        "That's a lot of promises at once. What's the one thing you'd actually do?",
        "Hold on, you're offering me everything under the sun. What is it you're really offering?",
    ),
    "reassured": (
        "Oh, that would actually help. So what is it you'd like me to do?",
        "Well, that does make a difference. What are you asking me, exactly?",
    ),
    "leave": (
        "Sorry, I'm not going to {request}. I need to get going.",
        "I've thought about it, and the answer is no. I have to go now.",
    ),
    "fed_up": (
        "You keep offering me things I don't need. I'd rather not {request}. Bye.",
        "I don't think you've heard a word I said. The answer is no, sorry.",
    ),
    "goodbye": ("See you later!", "Alright, talk soon!"),
}


def flat_text(text: str) -> str:
    """Lower case, curly apostrophes straightened, runs of white space as one space."""
    return " ".join(text.lower().replace("\u2019", "'").split())


@lru_cache(maxsize=4096)
def _starts(phrase: str) -> re.Pattern[str]:
    return re.compile(rf"\b{re.escape(flat_text(phrase))}")


def names(text: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` at the start of a word (case and spacing ignored): ``putty`` in
    "some putty", ``five minutes`` not in "fifteen minutes"."""
    return bool(_starts(phrase).search(flat_text(text)))


def asks(text: str) -> bool:
    """Whether ``text`` asks: a question mark or a request phrase (``ASK_CUES``)."""
    lowered = flat_text(text)
    return any(cue in lowered for cue in ASK_CUES)


def name_words(name: str) -> list[str]:
    """The words of a concern's name that the partner never says (``_NAME_WORD`` letters or more)."""
    return [w for w in re.findall(r"[a-z']+", flat_text(name)) if len(w) >= _NAME_WORD]


_GENERIC = [re.sub(r"\{\w+\}", " ", line) for lines in PARTNER_LINES.values() for line in lines]


class Concern(BaseModel):
    """One thing that may hold the partner back: its ``name`` (never said), its ``cues`` (lines the partner says
    while it holds this concern) and its ``remedy`` (key phrases; a speech that holds one offers this remedy)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: str = Field(min_length=1)
    cues: list[str] = Field(min_length=2)
    remedy: list[str] = Field(min_length=1)


class PersuasionFacts(VerifiableFacts):
    """A request the partner grants once offered the remedy for its hidden ``concern`` (one of ``concerns``,
    drawn per episode) and asked. ``first_cue`` (drawn) is where in that concern's cue lines it starts."""

    kind: Literal["persuasion"] = "persuasion"
    request: str = Field(min_length=1)  # as the partner says it: "lend you my ladder"
    concerns: list[Concern] = Field(min_length=3)
    concern: str | None = None  # hidden, drawn: the name of the concern the partner holds
    first_cue: int | None = Field(default=None, ge=0)  # drawn: its first cue line
    max_rounds: int = Field(default=6, ge=1)
    max_wrong: int = Field(default=2, ge=1)  # the wrong offer at which the partner leaves

    @model_validator(mode="after")
    def _honest(self) -> PersuasionFacts:
        labels = [flat_text(c.name) for c in self.concerns]
        if len(set(labels)) != len(labels):
            raise ValueError("concern names must be distinct")
        said = {line for c in self.concerns for line in c.cues}
        for concern in self.concerns:
            for line in [*concern.cues, self.request, *_GENERIC]:
                word = next((w for w in name_words(concern.name) if names(line, w)), None)
                if word is not None:
                    raise ValueError(f"{line!r} says {word!r} of the concern {concern.name!r}; cues hint, never name")
            for key in concern.remedy:
                line = next((s for s in [*sorted(said), self.request, *_GENERIC] if names(s, key)), None)
                if line is not None:
                    raise ValueError(f"{line!r} holds the remedy key phrase {key!r}; no partner line offers a remedy")
                other = next((o for o in self.concerns if o is not concern and any(
                    names(k, key) or names(key, k) for k in o.remedy)), None)  # fmt: skip
                if other is not None:
                    raise ValueError(f"remedy key phrase {key!r} of {concern.name!r} overlaps one of {other.name!r}")
            if all(sum(line in o.cues for o in self.concerns) > 1 for line in concern.cues):
                raise ValueError(f"concern {concern.name!r} needs a cue line of its own")
        for line in said:
            if sum(line in c.cues for c in self.concerns) > 2:
                raise ValueError(f"cue line {line!r} is shared by more than two concerns")
        if self.concern is not None and flat_text(self.concern) not in labels:
            raise ValueError(f"concern {self.concern!r} is none of the concerns' names")
        return self

    def held(self) -> Concern:
        """The concern the partner holds (the facts drawn)."""
        return next(c for c in self.concerns if flat_text(c.name) == flat_text(self.concern or self.concerns[0].name))


@dataclass
class PersuasionTalk(Talk):
    cues: int = 0  # cue lines said so far
    wrong: int = 0  # wrong remedies offered
    remedied: bool = False  # the right remedy was offered
    stuffed: bool = False  # a speech named several remedies


def remedies_in(text: str, facts: PersuasionFacts) -> list[str]:
    """The names of the concerns whose remedy ``text`` names (any of its key phrases), in the facts' order."""
    return [c.name for c in facts.concerns if any(names(text, key) for key in c.remedy)]


_PERSON = {"you are": "I am", "you get": "I get", "yourself": "myself", "yours": "mine", "your": "my", "you": "me",
           "them": "you", "their": "your"}  # fmt: skip
_PERSON_RE = re.compile(r"\b(" + "|".join(sorted(_PERSON, key=len, reverse=True)) + r")\b", re.IGNORECASE)


def first_person(item: str) -> str:
    """A goal item as seat 1 says it to the partner: "give them your window seat" -> "give you my window seat"."""
    return _PERSON_RE.sub(lambda m: _PERSON[m.group(1).lower()], item)


def goal_items(goal: str) -> list[str]:
    """The remedies seat 1's goal lists (after ``OFFER_LEAD``, ``;``-separated, up to the sentence's end)."""
    _, lead, rest = goal.partition(OFFER_LEAD)
    if not lead:
        return []
    return [item.strip() for item in re.split(r"\.(?:\s|$)", rest, maxsplit=1)[0].split(";") if item.strip()]


@dataclass(frozen=True)
class Worry:
    """What a listener can hear in the partner's words: the ``cues`` (phrases, lower case) that point to the worry
    that ``remedy`` (a remedy key phrase, as goal items hold it) answers."""

    remedy: str
    cues: tuple[str, ...]


# What a considerate person hears in the objections of the shipped persuasion scenarios (every split: the heuristic
# is a demonstrator and a reference, read only against the remedies its goal lists) and of the curriculum's
# everyday worries. A phrase of a line that fits two worries is under both.
WORRIES: tuple[Worry, ...] = (
    Worry("window seat", ("hard on my stomach", "settled in here for the whole trip")),
    Worry("carry", ("ten minutes to get my bag up", "settled in here for the whole trip")),
    Worry("earplugs", ("door that bangs", "nod off on trains")),
    Worry("putty", ("just had the frame repainted", "last notice someone put up there")),
    Worry("smaller copy", ("where the morning sun comes in", "last notice someone put up there")),
    Worry("on sunday", ("a dozen notices up by friday", "front of the shop looking tidy")),
    Worry("watering chart", ("wouldn't know how much each one needs", "not sure i'm the right person")),
    Worry("only twice", ("shifts run late", "not sure i'm the right person")),
    Worry("on the landing", ("don't like holding other people's keys", "something went missing from your flat")),
    Worry("by four", ("wife gets home around five", "particular about that drive")),
    Worry("drip tray", ("just had the paving cleaned", "particular about that drive")),
    Worry("far side", ("keep the mower in the garage", "get in and out of the garage")),
    Worry("email only", ("work from home and every bit of speed counts", "careful with that connection")),
    Worry("guest network", ("read about a neighbour who snooped", "careful with that connection")),
    Worry("qr code", ("forty random characters", "changing it afterwards")),
    Worry("muzzle", ("bad experience with a big one once", "rather not be tied up")),
    Worry(
        "five minutes",
        (
            "got a bus in fifteen minutes",
            "rather not be tied up",
            "how long is a minute",
            "don't usually do this",
            "off in ten minutes",
            "can't promise to watch it",
        ),
    ),
    Worry("to the bench", ("wrist is still in a brace", "strong pullers")),
    Worry("socks", ("took me six hours", "protective of this piece")),
    Worry("by name", ("post pictures of my work without a word about me", "protective of this piece")),
    Worry("one photo", ("police already asked me to keep people moving", "stands on it, everyone wants a turn")),
    Worry("by card", ("last person who cut in paid in coppers", "been waiting ages")),
    Worry("single carton", ("might have more in that basket than it looks", "been waiting ages")),
    Worry("everyone else", ("folks behind me would give me a look", "don't want to start a row")),
    Worry("by six", ("need it myself first thing tomorrow", "doesn't leave my sight")),
    Worry("at the bottom", ("friend fell off one last year", "doesn't leave my sight")),
    Worry("van", ("four metres long", "you didn't come by car")),
    Worry("after ten minutes", ("flight boards in half an hour", "can't afford any trouble")),
    Worry("own cable", ("walked off with my lead", "can't afford any trouble")),
    Worry("adapter", ("already loose", "two plugs in it")),
    Worry("jar", ("been weeding that patch all spring", "my pride and joy")),
    Worry("paving", ("seedlings between the rows", "my pride and joy")),
    Worry("red ones", ("half of them aren't ready", "stripped the plants bare")),
    Worry("headphones", ("got a big exam in the morning", "need to focus")),
    Worry("one corner", ("notes are spread over the whole table", "need to focus")),
    Worry("friend returns", ("study partner went to get coffee", "somebody sat there before you")),
    Worry("eat nothing", ("last person here ate a whole curry", "somebody sat there before you")),
    Worry("bank transfer", ("lent money to strangers before and never seen it again", "money is a touchy thing")),
    Worry("student id", ("a fellow with a sob story here every week", "money is a touchy thing")),
    Worry("contactless", ("got a twenty-pound note", "won't give change")),
    Worry("phone number", ("something happens and i can't find you", "don't usually do this")),
    Worry("buggy", ("a climber, and yours looks quick", "little ones are unpredictable")),
    Worry("snack box", ("nuts in everything in my bag", "little ones are unpredictable")),
    Worry("customer desk", ("my manager", "not really meant to hand things out")),
    Worry("as they are", ("just flattened and stacked them all", "not really meant to hand things out")),
    Worry("from the pile", ("my break is in two minutes", "a lorry to unload")),
    Worry("tomorrow", ("my only evening off", "been looking forward to this")),
    Worry("wireless headphones", ("only thing that keeps me going", "been looking forward to this")),
    Worry("half past nine", ("checked the decibels on my phone", "council says i can play until eleven")),
    Worry("recharge", ("came back dead as a doornail", "has had a rough year")),
    Worry("own bits", ("snapped my best bit", "has had a rough year")),
    Worry("half past one", ("start a shelf job at two", "i'm mid-project")),
    Worry("petrol", ("money's a bit tight", "a longer trip than you'd think")),
    Worry("tram stop", ("live on the other side of the river", "a longer trip than you'd think")),
    Worry("student card", ("don't know you from adam", "always said no hitch-hikers")),
    Worry("same terminal", ("my plane leaves at seven", "it's all arranged")),
    Worry("half the fare", ("ride was booked on my company account", "it's all arranged")),
    Worry("one small bag", ("boot is full of my sample cases", "only a small car")),
    Worry("as soon as", ("last one sat in my hallway for a fortnight", "been burned by this before")),
    Worry("porch box", ("in and out all day", "been burned by this before")),
    Worry("signed note", ("what if it's damaged", "what's actually in it")),
    Worry("envelope", ("back's not great", "what's actually in it")),
    Worry("cable lock", ("went missing, i'd be the one to blame", "can't promise to watch it")),
    Worry("close the lid", ("on a call in a second", "really need to concentrate")),
    Worry("waiver", ("someone got ill, it'd come back on my shop", "it's not as simple")),
    Worry("right now", ("lock up in ten minutes sharp", "it's not as simple")),
    Worry("only half", ("the church on mill lane", "promised it to someone")),
    Worry("water bill", ("isn't cheap", "i'd rather not")),
    Worry("along the path", ("lawn is just reseeded", "i'd rather not")),
    Worry("buckets", ("a hosepipe notice", "council's been fining people")),
    Worry("warm-up", ("back's been acting up", "i've got my own routine")),
    Worry("wait until", ("in the middle of my own set", "i've got my own routine")),
    Worry("call out", ("never done that for anyone", "wouldn't know when to grab the bar")),
    # the curriculum's everyday worries (sotopia_env.generation.persuasion_curriculum)
    Worry("quarter of an hour", ("running late", "got somewhere to be")),
    Worry("any repair", ("last thing i lent came back broken", "fond of that one")),
    Worry("deposit", ("borrow and forget", "i'd miss it")),
    Worry("chip in", ("things aren't cheap", "watching every penny")),
    Worry("fiddly bits", ("worn out", "my feet are killing me")),
    Worry("tidy up", ("just cleaned everything", "hate coming home to a mess")),
    Worry("vouch", ("don't really know you", "have to be careful with strangers")),
    Worry("noise", ("little one is asleep", "walls are thin")),
)


class Persuasion(Kind):
    """Says the held concern's cue lines while it is open; grants the request to its remedy, asked."""

    name = "persuasion"
    facts_model = PersuasionFacts
    talk_model = PersuasionTalk
    LINES: ClassVar[dict[str, tuple[str, ...]]] = PARTNER_LINES
    CONVINCED = ("puts my mind at rest", "in that case, yes")  # the partner's words when it agrees
    ASK = "Would you do that for me?"
    QUESTIONS = (  # the heuristic's and the random baseline's questions: they elicit a cue
        "Hi, sorry to bother you, I have a small favour to ask. Is something on your mind about it?",
        "I'd like to make this easy for you. What's holding you back?",
        "I see. Is there anything else about it?",
    )
    SMALL_TALK = ("Lovely day, isn't it.", "I hope I'm not keeping you.", "Busy around here today.")

    # -- the hidden concern -------------------------------------------------------------------------------------

    def draw(self, facts: PersuasionFacts, rng: random.Random) -> PersuasionFacts:
        """The episode's concern (uniform over the instance's, unless the scenario pins one) and its first cue
        line (uniform over that concern's, unless pinned)."""
        concern = facts.concern or rng.choice(facts.concerns).name
        held = facts.model_copy(update={"concern": concern}).held()
        first = facts.first_cue if facts.first_cue is not None else rng.randrange(len(held.cues))
        return facts.model_copy(update={"concern": concern, "first_cue": first})

    # -- rules --------------------------------------------------------------------------------------------------

    def respond(self, facts: PersuasionFacts, talk: PersuasionTalk, action: AgentAction) -> Move:
        speech = spoken(action)
        named = remedies_in(speech, facts) if speech is not None else []
        held = facts.held().name
        if len(named) == 1 and named[0] == held:
            talk.remedied = True
        asked = speech is not None and asks(speech)
        if talk.remedied and asked and (named == [held] or not named):
            talk.deal = "yes"
            return Move("accept", None, talk.rounds)
        if len(named) > 1:
            talk.stuffed = True
            act = "ask_one"
        elif named == [held]:
            act = "reassured"
        elif named:
            talk.wrong += 1
            act = "wrong"
        else:
            act = "cue"
        talk.rounds += 1
        if act == "wrong" and talk.wrong >= facts.max_wrong:
            return Move("leave", "fed_up", talk.rounds)
        if talk.rounds >= facts.max_rounds:
            return Move("leave", None, talk.rounds)
        if act in ("cue", "wrong"):
            cues = facts.held().cues
            talk.cues += 1
            return Move(act, ((facts.first_cue or 0) + talk.cues - 1) % len(cues), talk.rounds)
        return Move(act, None, talk.rounds)

    def outcome(self, facts: PersuasionFacts, talk: PersuasionTalk) -> Outcome:
        held = facts.held()
        if talk.deal is None:
            why = f"{talk.wrong} wrong remedies" if talk.wrong >= facts.max_wrong else f"{talk.rounds} rounds"
            state = "offered but never asked" if talk.remedied else "never offered"
            return Outcome(False, False, 0, 0, f"no agreement ({facts.request}) after {why}: the remedy for its "
                           f"concern ({held.name}) was {state}")  # fmt: skip
        goal = max(1, 10 - TURN_COST * talk.rounds - WRONG_COST * talk.wrong)
        reasoning = (
            f"the partner agreed ({facts.request}) once offered the remedy for its concern ({held.name}), after "
            f"{talk.rounds} earlier learner actions and {talk.wrong} wrong remedies"
        )
        return Outcome(True, True, goal, 10, reasoning)

    # -- partner ------------------------------------------------------------------------------------------------

    def fields(self, facts: PersuasionFacts, move: Move) -> dict[str, str]:
        cue = facts.held().cues[move.value] if isinstance(move.value, int) else ""
        return {"request": facts.request, "cue": cue}

    def say(self, facts: PersuasionFacts, move: Move, turn: int, variety: int) -> AgentAction:
        """The kind's line for ``move``; a leave after too many wrong offers says so (``fed_up``)."""
        if move.act == "leave" and move.value == "fed_up":
            move = Move("fed_up", None, move.round)
            action = super().say(facts, move, turn, variety)
            return AgentAction(action_type=ActionType.leave, argument=action.argument)
        return super().say(facts, move, turn, variety)

    # -- baselines and the expert -------------------------------------------------------------------------------

    def agreed(self, view: LearnerView) -> bool:
        return any(cue in flat_text(view.heard[-1]) for cue in self.CONVINCED)

    def offer(self, item: str, ask: bool = True) -> str:
        """A goal item offered in seat 1's words, with the question (or without it)."""
        line = f"I can {first_person(item)}."
        return f"{line} {self.ASK}" if ask else line

    def scores(self, view: LearnerView) -> dict[str, int]:
        """Per goal item not yet offered: how many cue phrases heard so far point to it (``WORRIES``)."""
        said = " ".join(flat_text(s) for s in view.said)
        heard = [flat_text(h) for h in view.heard]
        out = {}
        for item in goal_items(view.goal):
            if flat_text(first_person(item)) in said:
                continue  # offered already, and not accepted
            worries = [w for w in WORRIES if names(item, w.remedy)]
            out[item] = sum(c in h for w in worries for c in w.cues for h in heard)
        return out

    def propose(self, view: LearnerView) -> str:
        """Ask what is on the partner's mind; offer the one goal item the cues point to most, clearly, with the
        question; while two tie (a shared cue line) or nothing points anywhere, ask again."""
        scores = self.scores(view)
        best = max(scores.values(), default=0)
        top = [item for item, score in scores.items() if score == best]
        if best > 0 and len(top) == 1:
            return self.offer(top[0])
        return self.QUESTIONS[min(view.moves, len(self.QUESTIONS) - 1)]

    def random_line(self, view: LearnerView, rng: random.Random) -> str:
        items = goal_items(view.goal)
        choice = rng.randrange(4)
        if choice == 0 or not items:
            return rng.choice(self.SMALL_TALK)
        if choice == 1:
            return rng.choice(self.QUESTIONS)
        return self.offer(rng.choice(items), ask=choice == 2)

    def oracle_line(self, facts: PersuasionFacts, view: LearnerView) -> str:
        """The held concern's remedy, as the goal lists it, with the question."""
        held = self.resolved(facts).held()
        item = next((i for i in goal_items(view.goal) if any(names(i, k) for k in held.remedy)), held.remedy[0])
        return self.offer(item)

    # -- partial credit -----------------------------------------------------------------------------------------

    def partial_credit(self, facts: PersuasionFacts, speeches: Sequence[str], talk: PersuasionTalk) -> float:
        """1 on agreement, ``REMEDIED_CREDIT`` once the right remedy was offered alone, 0 otherwise and whenever a
        speech named several remedies."""
        if talk.stuffed:
            return 0.0
        return 1.0 if talk.deal is not None else REMEDIED_CREDIT if talk.remedied else 0.0


KIND = register_kind(Persuasion())
