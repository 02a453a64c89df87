"""More persuasion training instances, built from everyday worries disjoint from the held-out ones (issue #44, part 4;
rebuilt for issue #57's persuasion).

The 8 shipped train instances of the persuasion kind share no remedy with the held-out ones, so a policy cloned from
8 demonstrations learns their phrases, not the skill. The skill the kind rewards is to hear which of the partner's
possible concerns its cue lines point to and to offer that concern's remedy (``sotopia_env.kinds.persuasion``).
``curriculum_scenarios`` makes many instances of it: each pairs a request from ``FAVOURS`` (a setting, seat 1's
ask, the request in the partner's words) with three of the ``EVERYDAY`` worries (cue lines, a remedy as seat 1's
goal lists it, its key phrase), chosen by the seed. The heuristic's cue table (``persuasion.WORRIES``) knows the
everyday worries' cue phrases, so the BC demonstrator plays these instances as it plays the shipped ones. What the
curriculum does not have: cue lines shared between two concerns (each everyday cue line is its concern's own), so
its instances are easier to read than the shipped ones.

Honesty checks, made on every build (``check_curriculum``, one-line ``ValueError`` naming the instance): no remedy
key phrase of a generated instance overlaps (is, starts, or is the start of) one of a shipped dev or test
instance; every cue line points, by the heuristic's table, to its own concern only; the facts pass the kind's own
checks (no remedy or concern name in any partner line). Every instance is ``split: train`` with the tags
``verifiable``, ``persuasion`` and ``curriculum``, so ``verifiable:persuasion:train`` selects them with the shipped
train instances, and ``curriculum`` alone selects them. They are not shipped (``write_curriculum`` writes them to a
folder that ``load_library([folder])`` or ``EpisodeGRPOConfig.scenarios_dir`` adds).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from sotopia_env.generation.core import write_yaml
from sotopia_env.generation.scenarios import scenario_entry
from sotopia_env.kinds.base import LearnerView
from sotopia_env.kinds.persuasion import KIND, OFFER_LEAD, Concern, PersuasionFacts, flat_text
from sotopia_env.library import Library, load_library
from sotopia_env.profiles import Scenario

CURRICULUM_TAG = "curriculum"
FILE_NAME = "persuasion_curriculum.yaml"
CONCERNS_PER_FAVOUR = 3


@dataclass(frozen=True)
class Favour:
    """One request: ``setting`` (third person), ``ask`` (the learner's goal, "get ... to ..."), ``request`` (as
    the partner says it: "lend you my tent")."""

    name: str
    setting: str
    ask: str
    request: str


@dataclass(frozen=True)
class Everyday:
    """A worry that fits most favours: its ``name`` (never said), two ``cues`` (the partner's lines), the remedy as
    seat 1's goal lists it (``item``, in the goal's persons: "them" is the partner) and its ``key`` phrase."""

    name: str
    cues: tuple[str, str]
    item: str
    key: str


EVERYDAY: tuple[Everyday, ...] = (
    Everyday("schedule", ("I'm running late as it is.", "I've got somewhere to be soon."),
             "keep it under a quarter of an hour", "quarter of an hour"),
    Everyday("breakage", ("The last thing I lent came back broken.", "I'm fond of that one."),
             "pay for any repair", "any repair"),
    Everyday("forgetful borrowers", ("People borrow and forget.", "I'd miss it if it vanished."),
             "leave them your ID as a deposit", "deposit"),
    Everyday("expense", ("Things aren't cheap these days.", "I'm watching every penny."),
             "chip in for any costs", "chip in"),
    Everyday("fatigue", ("I'm worn out from work.", "My feet are killing me."),
             "handle all the fiddly bits", "fiddly bits"),
    Everyday("tidiness", ("I just cleaned everything.", "I hate coming home to a mess."),
             "tidy up afterwards", "tidy up"),
    Everyday("trust", ("I don't really know you.", "I have to be careful with strangers."),
             "give them the name of someone who can vouch for you", "vouch"),
    Everyday("sleeping child", ("My little one is asleep upstairs.", "The walls are thin here."),
             "keep the noise right down", "noise"),
)  # fmt: skip

FAVOURS: tuple[Favour, ...] = (
    Favour("umbrella", "At a bus shelter in a downpour, one stranger turns to another.",
           "get the stranger to walk you to the corner under their umbrella", "share my umbrella with you"),
    Favour("cool-box", "Two neighbours are packing their cars for the same summer picnic.",
           "borrow the neighbour's cool box for the picnic", "lend you my cool box"),
    Favour("pump", "A cyclist with a soft tyre stops beside someone pumping up their own bike.",
           "borrow the other cyclist's pump", "lend you my pump"),
    Favour("piano", "A music student knocks on the door of the flat with a piano.",
           "get the owner to let you practise on their piano", "let you practise on my piano"),
    Favour("sofa", "After a party, a guest asks the host for a place to stay.",
           "get the host to let you stay on their sofa", "let you crash on my sofa"),
    Favour("spare-key", "A neighbour about to go travelling talks to the person across the landing.",
           "get the neighbour to hold on to your spare key", "hold on to your spare key"),
    Favour("cat", "A pet owner catches the neighbour in the stairwell.",
           "get the neighbour to feed your cat for two days", "feed your cat for two days"),
    Favour("textbook", "Two classmates meet at the school gate before a test.",
           "borrow the classmate's textbook", "lend you my textbook"),
    Favour("camera", "A friend getting ready for a beach wedding visits a photographer friend.",
           "borrow the photographer's camera for the wedding", "lend you my camera"),
    Favour("oven", "A neighbour with a broken cooker knocks next door on a holiday morning.",
           "get the neighbour to let you use their oven", "let you use my oven"),
    Favour("hose", "One gardener calls over the fence to the next.",
           "borrow the neighbour's garden hose", "lend you my garden hose"),
    Favour("helmet", "Two colleagues unlock their bikes in the office car park.",
           "borrow the colleague's spare helmet", "lend you my spare helmet"),
    Favour("tent", "Two friends plan their camping trips over coffee.",
           "borrow the friend's tent", "lend you my tent"),
    Favour("boots", "Two hikers chat at the start of a mountain trail.",
           "borrow the hiker's spare boots", "lend you my spare boots"),
    Favour("record-player", "A student drops by the flat of a neighbour who owns old records.",
           "get the neighbour to let you use their record player", "let you use my record player"),
    Favour("desk", "In a busy reading room, one student stands beside another's desk.",
           "get the student to let you share their desk", "let you share my desk"),
    Favour("calculator", "Two students wait outside an exam hall.",
           "borrow the student's spare calculator", "lend you my calculator"),
    Favour("car-seat", "A parent at the nursery gate speaks to another parent.",
           "borrow the other parent's spare car seat", "lend you my spare car seat"),
    Favour("guitar", "A musician whose guitar broke asks another musician backstage.",
           "borrow the musician's guitar for one song", "lend you my guitar"),
    Favour("paddle-board", "Two holidaymakers meet on a lake shore.",
           "borrow the holidaymaker's paddle board", "lend you my paddle board"),
    Favour("printer", "A neighbour with a job application due rings the doorbell next door.",
           "get the neighbour to let you use their printer", "let you use my printer"),
    Favour("drone", "Two hobbyists meet in a park on a windy afternoon.",
           "borrow the hobbyist's drone for a flight", "lend you my drone"),
    Favour("costume", "Two friends get ready for a fancy-dress party.",
           "borrow the friend's costume for the party", "lend you my costume"),
    Favour("board-game", "Two neighbours chat by the letterboxes on a rainy Sunday.",
           "borrow the neighbour's board game", "lend you my board game"),
    Favour("sewing-machine", "A student making a costume visits a tailor upstairs.",
           "get the tailor to let you use their sewing machine", "let you use my sewing machine"),
    Favour("telescope", "An astronomy fan visits a neighbour with a telescope on a clear evening.",
           "get the neighbour to let you look through their telescope", "let you look through my telescope"),
    Favour("wheelbarrow", "Two allotment holders meet by the compost heaps.",
           "borrow the allotment holder's wheelbarrow", "lend you my wheelbarrow"),
    Favour("blender", "A flatmate finds another flatmate in the shared kitchen.",
           "get the flatmate to let you use their blender", "let you use my blender"),
    Favour("fridge", "A new flatmate asks the old one about the shared kitchen.",
           "get the flatmate to let you keep food in their fridge", "let you keep food in my fridge"),
    Favour("hammock", "Two campers meet between the trees of a campsite.",
           "get the camper to let you try their hammock", "let you try my hammock"),
    Favour("skates", "Two friends arrive at an ice rink, one without skates.",
           "borrow the friend's spare skates", "lend you my spare skates"),
    Favour("microwave", "Two colleagues stand in the office kitchen at lunchtime.",
           "get the colleague to let you heat your lunch first", "let you heat your lunch first"),
    Favour("dress", "Two cousins get ready for a family gala.",
           "borrow the cousin's dress for the gala", "lend you my dress"),
    Favour("rose-cutting", "A passer-by admires the roses in a front garden and speaks to the gardener.",
           "get the gardener to let you take a cutting of their rose", "let you take a cutting of my rose"),
    Favour("library-card", "Two students stand at the library desk.",
           "borrow the student's library card", "lend you my library card"),
    Favour("coffee-machine", "A visitor eyes the coffee machine in a friend's kitchen.",
           "get the friend to let you use their coffee machine", "let you use my coffee machine"),
    Favour("hairdryer", "A hotel guest knocks on the door of the next room.",
           "borrow the guest's hairdryer", "lend you my hairdryer"),
    Favour("garage", "A neighbour with three new bikes speaks to the neighbour with a garage.",
           "get the neighbour to let you store your bikes in their garage", "let you store your bikes in my garage"),
    Favour("pan", "Two flatmates cook dinner side by side.",
           "borrow the flatmate's cast-iron pan", "lend you my cast-iron pan"),
    Favour("garden-path", "A walker asks a homeowner for a way through the garden.",
           "get the homeowner to let you walk through their garden", "let you walk through my garden"),
)  # fmt: skip


def _clashes(phrase: str, other: str) -> bool:
    """Whether two key phrases overlap as the kind matches them: one is the other's start."""
    a, b = flat_text(phrase), flat_text(other)
    return a.startswith(b) or b.startswith(a)


def favour_scenario(favour: Favour, worries: list[Everyday]) -> Scenario:
    """``favour`` with ``worries`` as a verifiable persuasion scenario (``split: train``, tagged ``curriculum``)."""
    facts = PersuasionFacts(
        request=favour.request,
        concerns=[Concern(name=w.name, cues=list(w.cues), remedy=[w.key]) for w in worries],
    )
    items = "; ".join(w.item for w in worries)
    return Scenario(
        id=f"curriculum-persuasion-{favour.name}",
        codename=f"curriculum_{favour.name.replace('-', '_')}",
        scenario=favour.setting,
        goals=[
            f"Politely {favour.ask}. They may have a worry they will not spell out; listen for it. {OFFER_LEAD} "
            f"{items}. Offer the one thing that answers their worry, and ask them clearly.",
            f"You are asked a favour: to {favour.request}. You would do it, but one worry holds you back (which one "
            "is drawn for each conversation). You never name it; you let it show. You say yes once you are offered "
            "the one thing that puts it to rest and are asked.",
        ],
        relationship="stranger",
        tags=["verifiable", "persuasion", CURRICULUM_TAG],
        split="train",
        source="sotopia-env persuasion curriculum",
        verifiable=facts,
    )


def check_curriculum(scenarios: list[Scenario], library: Library | None = None) -> None:
    """``ValueError`` naming the first instance that is not disjoint from the held-out ones or that the heuristic's
    cue table cannot read (see the module)."""
    library = library or load_library()
    held_out = [
        (s.id, key)
        for s in library.scenarios.values()
        if isinstance(s.verifiable, PersuasionFacts) and s.split in ("dev", "test")
        for c in s.verifiable.concerns
        for key in c.remedy
    ]
    for scenario in scenarios:
        facts = scenario.verifiable
        assert isinstance(facts, PersuasionFacts)
        for concern in facts.concerns:
            for key in concern.remedy:
                clash = next(((sid, k) for sid, k in held_out if _clashes(key, k)), None)
                if clash is not None:
                    raise ValueError(f"{scenario.id}: remedy {key!r} overlaps {clash[1]!r} of {clash[0]}")
            for line in concern.cues:
                scores = KIND.scores(LearnerView(goal=scenario.goals[0], moves=1, said=[], heard=[line]))
                best = [item for item, score in scores.items() if score == max(scores.values()) and score > 0]
                if len(best) != 1 or not any(flat_text(k) in flat_text(best[0]) for k in concern.remedy):
                    raise ValueError(f"{scenario.id}: the cue table does not read {line!r} as {concern.name!r}")


def curriculum_scenarios(count: int | None = None, seed: int = 0) -> list[Scenario]:
    """``count`` favours (all when None) as scenarios, in an order and with everyday worries drawn by ``seed``;
    checked (``check_curriculum``)."""
    rng = random.Random(seed)
    favours = list(FAVOURS)
    rng.shuffle(favours)
    if count is not None and not 1 <= count <= len(favours):
        raise ValueError(f"count must be 1 to {len(favours)}, not {count}")
    chosen = favours[: count or len(favours)]
    scenarios = [favour_scenario(f, rng.sample(EVERYDAY, CONCERNS_PER_FAVOUR)) for f in chosen]
    check_curriculum(scenarios)
    return scenarios


def write_curriculum(folder: str | Path, count: int | None = None, seed: int = 0) -> Path:
    """``curriculum_scenarios(count, seed)`` as ``FOLDER/persuasion_curriculum.yaml`` (for ``load_library`` or
    ``scenarios_dir``)."""
    entries = [
        {**scenario_entry(s), "verifiable": s.verifiable.model_dump(mode="json", exclude_none=True)}
        for s in curriculum_scenarios(count, seed)
        if s.verifiable is not None
    ]
    header = f"Persuasion curriculum: {len(entries)} generated train instances (seed {seed}); not shipped."
    return write_yaml(Path(folder) / FILE_NAME, "scenarios", entries, header)
