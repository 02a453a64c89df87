"""More persuasion training instances, built from a word list disjoint from the held-out ones (issue #44, part 4).

The 8 shipped train instances of the persuasion kind share no concern word with the 12 test ones, so a policy
cloned from 8 demonstrations learns their words, not the skill. The skill the kind rewards is to ask after the
partner's worry and answer it in the partner's own words (``sotopia_env.kinds.persuasion``: a scenario's
``worry``, said when asked). ``curriculum_scenarios`` makes many instances of that skill from ``FAVOURS``, a
list written for this project: each a request, the partner's worry in its words and the concern words that
worry names. Their doubts are cue-free lines (``DOUBTS``), so a learner wins them only by asking.

Honesty checks, made on every build (``check_curriculum``, one-line ``ValueError`` naming the favour): no concern
word of a favour is, starts with, or is the start of a concern word of a shipped dev or test instance; the
worry names its own concern and no shipped concern; what the learner is shown (scenario text, its goal) names
no concern at all. Every instance is ``split: train`` with the tags ``verifiable``, ``persuasion`` and
``curriculum``, so ``verifiable:persuasion:train`` selects them with the shipped train instances, and
``curriculum`` alone selects them. They are not shipped (``write_curriculum`` writes them to a folder that
``load_library([folder])`` or ``EpisodeGRPOConfig.scenarios_dir`` adds), so the judge's vocabulary
(``library_concerns()``) stays the shipped one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from sotopia_env.generation.core import write_yaml
from sotopia_env.generation.scenarios import scenario_entry
from sotopia_env.kinds.persuasion import PersuasionFacts, flat_text, hear
from sotopia_env.library import Library, load_library
from sotopia_env.profiles import Scenario

CURRICULUM_TAG = "curriculum"
FILE_NAME = "persuasion_curriculum.yaml"
DOUBTS = (  # what the partner says while its concern is open: no cue, so asking is the way in
    "Hmm, I'm not sure about that.",
    "I'd have to think about it.",
    "Something about it makes me a little uneasy.",
    "I don't know, to be honest.",
)
ASK_TAIL = "The other person may have a worry; find out what it is, put their mind at rest, and then ask them clearly."


@dataclass(frozen=True)
class Favour:
    """One request: ``setting`` (third person), ``ask`` (the learner's goal, "get ... to ..."), ``request`` (as
    the partner says it: "lend you my tent"), ``worry`` (the concern in the partner's words) and ``concern``
    (its words, matched at the start of a word)."""

    name: str
    setting: str
    ask: str
    request: str
    worry: str
    concern: tuple[str, ...]


FAVOURS: tuple[Favour, ...] = (
    Favour("umbrella", "At a bus shelter in a downpour, one stranger turns to another.",
           "get the stranger to walk you to the corner under their umbrella", "share my umbrella with you",
           "getting soaked in the rain", ("soak", "rain", "drench")),
    Favour("cool-box", "Two neighbours are packing their cars for the same summer picnic.",
           "borrow the neighbour's cool box for the picnic", "lend you my cool box",
           "everything melting in the heat", ("melt", "thaw", "heat")),
    Favour("pump", "A cyclist with a soft tyre stops beside someone pumping up their own bike.",
           "borrow the other cyclist's pump", "lend you my pump",
           "a broken valve on the pump", ("valve", "nozzle", "broken")),
    Favour("piano", "A music student knocks on the door of the flat with a piano.",
           "get the owner to let you practise on their piano", "let you practise on my piano",
           "the piano going out of tune", ("tune", "tuning", "pitch")),
    Favour("sofa", "After a party, a guest asks the host for a place to stay.",
           "get the host to let you stay on their sofa", "let you crash on my sofa",
           "crumbs all over the cushions", ("crumb", "cushion", "spill")),
    Favour("spare-key", "A neighbour about to go travelling talks to the person across the landing.",
           "get the neighbour to hold on to your spare key", "hold on to your spare key",
           "losing track of a spare key", ("losing", "lost", "track")),
    Favour("cat", "A pet owner catches the neighbour in the stairwell.",
           "get the neighbour to feed your cat for two days", "feed your cat for two days",
           "a cat that scratches strangers", ("scratch", "claw", "hiss")),
    Favour("textbook", "Two classmates meet at the school gate before a test.",
           "borrow the classmate's textbook", "lend you my textbook",
           "highlighter all over the pages", ("highlight", "scribbl", "page")),
    Favour("camera", "A friend getting ready for a beach wedding visits a photographer friend.",
           "borrow the photographer's camera for the wedding", "lend you my camera",
           "sand getting into the lens", ("lens", "sand", "dust")),
    Favour("oven", "A neighbour with a broken cooker knocks next door on a holiday morning.",
           "get the neighbour to let you use their oven", "let you use my oven",
           "a burnt smell in the kitchen", ("burn", "smoke", "scorch")),
    Favour("hose", "One gardener calls over the fence to the next.",
           "borrow the neighbour's garden hose", "lend you my garden hose",
           "kinks and leaks in the hose", ("kink", "leak", "drip")),
    Favour("helmet", "Two colleagues unlock their bikes in the office car park.",
           "borrow the colleague's spare helmet", "lend you my spare helmet",
           "a helmet that no longer fits snugly", ("fits", "snug", "strap")),
    Favour("tent", "Two friends plan their camping trips over coffee.",
           "borrow the friend's tent", "lend you my tent",
           "mud and mould inside the tent", ("mud", "mould", "damp")),
    Favour("boots", "Two hikers chat at the start of a mountain trail.",
           "borrow the hiker's spare boots", "lend you my spare boots",
           "blisters from boots that are not worn in", ("blister", "worn in", "insole")),
    Favour("record-player", "A student drops by the flat of a neighbour who owns old records.",
           "get the neighbour to let you use their record player", "let you use my record player",
           "the needle wearing down the vinyl", ("needle", "stylus", "vinyl")),
    Favour("desk", "In a busy reading room, one student stands beside another's desk.",
           "get the student to let you share their desk", "let you share my desk",
           "elbows crowding the desk", ("elbow", "crowd", "cramp")),
    Favour("calculator", "Two students wait outside an exam hall.",
           "borrow the student's spare calculator", "lend you my calculator",
           "the memory of the calculator being wiped", ("memory", "wipe", "erase")),
    Favour("car-seat", "A parent at the nursery gate speaks to another parent.",
           "borrow the other parent's spare car seat", "lend you my spare car seat",
           "a buckle that sticks", ("buckle", "clasp", "latch")),
    Favour("guitar", "A musician whose guitar broke asks another musician backstage.",
           "borrow the musician's guitar for one song", "lend you my guitar",
           "strings snapping before the show", ("string", "snap", "fret")),
    Favour("paddle-board", "Two holidaymakers meet on a lake shore.",
           "borrow the holidaymaker's paddle board", "lend you my paddle board",
           "dings and dents on the board", ("ding", "dent", "scrape")),
    Favour("printer", "A neighbour with a job application due rings the doorbell next door.",
           "get the neighbour to let you use their printer", "let you use my printer",
           "running out of ink", ("ink", "cartridge", "toner")),
    Favour("drone", "Two hobbyists meet in a park on a windy afternoon.",
           "borrow the hobbyist's drone for a flight", "lend you my drone",
           "a crash into the trees", ("crash", "tree", "propell")),
    Favour("costume", "Two friends get ready for a fancy-dress party.",
           "borrow the friend's costume for the party", "lend you my costume",
           "makeup stains on the collar", ("stain", "makeup", "collar")),
    Favour("board-game", "Two neighbours chat by the letterboxes on a rainy Sunday.",
           "borrow the neighbour's board game", "lend you my board game",
           "missing pieces from the set", ("piece", "missing", "mislaid")),
    Favour("sewing-machine", "A student making a costume visits a tailor upstairs.",
           "get the tailor to let you use their sewing machine", "let you use my sewing machine",
           "a tangled bobbin thread", ("bobbin", "thread", "tangle")),
    Favour("telescope", "An astronomy fan visits a neighbour with a telescope on a clear evening.",
           "get the neighbour to let you look through their telescope", "let you look through my telescope",
           "fingerprints on the eyepiece", ("fingerprint", "eyepiece", "smear")),
    Favour("wheelbarrow", "Two allotment holders meet by the compost heaps.",
           "borrow the allotment holder's wheelbarrow", "lend you my wheelbarrow",
           "a tyre that goes flat", ("tyre", "tire", "inflat")),
    Favour("blender", "A flatmate finds another flatmate in the shared kitchen.",
           "get the flatmate to let you use their blender", "let you use my blender",
           "a loud noise in the early morning", ("noise", "loud", "early")),
    Favour("fridge", "A new flatmate asks the old one about the shared kitchen.",
           "get the flatmate to let you keep food in their fridge", "let you keep food in my fridge",
           "strong smells in the fridge", ("smell", "odour", "stink")),
    Favour("hammock", "Two campers meet between the trees of a campsite.",
           "get the camper to let you try their hammock", "let you try my hammock",
           "the ropes fraying", ("rope", "fray", "knot")),
    Favour("skates", "Two friends arrive at an ice rink, one without skates.",
           "borrow the friend's spare skates", "lend you my spare skates",
           "blades going dull", ("blade", "dull", "sharpen")),
    Favour("microwave", "Two colleagues stand in the office kitchen at lunchtime.",
           "get the colleague to let you heat your lunch first", "let you heat your lunch first",
           "a queue building up behind", ("queue", "line up", "waiting")),
    Favour("dress", "Two cousins get ready for a family gala.",
           "borrow the cousin's dress for the gala", "lend you my dress",
           "the hem getting torn", ("hem", "torn", "tear")),
    Favour("rose-cutting", "A passer-by admires the roses in a front garden and speaks to the gardener.",
           "get the gardener to let you take a cutting of their rose", "let you take a cutting of my rose",
           "damage to the rose bush", ("damag", "prune", "bush")),
    Favour("library-card", "Two students stand at the library desk.",
           "borrow the student's library card", "lend you my library card",
           "overdue fees on the card", ("overdue", "fee", "penalt")),
    Favour("coffee-machine", "A visitor eyes the coffee machine in a friend's kitchen.",
           "get the friend to let you use their coffee machine", "let you use my coffee machine",
           "limescale building up in the machine", ("limescale", "descal", "scale")),
    Favour("hairdryer", "A hotel guest knocks on the door of the next room.",
           "borrow the guest's hairdryer", "lend you my hairdryer",
           "a fuse blowing in the old wiring", ("fuse", "wiring", "plug")),
    Favour("garage", "A neighbour with three new bikes speaks to the neighbour with a garage.",
           "get the neighbour to let you store your bikes in their garage", "let you store your bikes in my garage",
           "clutter blocking the garage door", ("clutter", "block", "door")),
    Favour("pan", "Two flatmates cook dinner side by side.",
           "borrow the flatmate's cast-iron pan", "lend you my cast-iron pan",
           "rust on the pan", ("rust", "soap", "season")),
    Favour("garden-path", "A walker asks a homeowner for a way through the garden.",
           "get the homeowner to let you walk through their garden", "let you walk through my garden",
           "trampled flower beds", ("trampl", "flower bed", "stomp")),
)  # fmt: skip


def _clashes(word: str, other: str) -> bool:
    """Whether two concern words overlap as the judge matches words: one is the other's start, word by word."""
    a, b = flat_text(word), flat_text(other)
    return a.startswith(b) or b.startswith(a)


def favour_scenario(favour: Favour, doubts: tuple[str, str]) -> Scenario:
    """``favour`` as a verifiable persuasion scenario (``split: train``, tagged ``curriculum``)."""
    facts = PersuasionFacts(
        request=favour.request, concern=list(favour.concern), doubts=list(doubts), worry=favour.worry, max_rounds=5
    )
    return Scenario(
        id=f"curriculum-persuasion-{favour.name}",
        codename=f"curriculum_{favour.name.replace('-', '_')}",
        scenario=favour.setting,
        goals=[
            f"Politely {favour.ask}. {ASK_TAIL}",
            f"You are asked to {favour.request}. You would do it, but you worry about {favour.worry}. You say yes "
            "only once that worry has been dealt with and you are asked; you say what the worry is if asked.",
        ],
        relationship="stranger",
        tags=["verifiable", "persuasion", CURRICULUM_TAG],
        split="train",
        source="sotopia-env persuasion curriculum",
        verifiable=facts,
    )


def check_curriculum(scenarios: list[Scenario], library: Library | None = None) -> None:
    """``ValueError`` naming the first instance that is not disjoint from the held-out ones (see the module)."""
    library = library or load_library()
    held_out = [
        (s.id, w)
        for s in library.scenarios.values()
        if isinstance(s.verifiable, PersuasionFacts) and s.split in ("dev", "test")
        for w in s.verifiable.concern
    ]
    for scenario in scenarios:
        facts = scenario.verifiable
        assert isinstance(facts, PersuasionFacts)
        for word in facts.concern:
            clash = next(((sid, w) for sid, w in held_out if _clashes(word, w)), None)
            if clash is not None:
                raise ValueError(f"{scenario.id}: concern word {word!r} overlaps {clash[1]!r} of {clash[0]}")
        heard = hear(facts.worry or "", facts.concern)
        if not heard.addresses() or heard.foreign:
            raise ValueError(f"{scenario.id}: the worry {facts.worry!r} must name its concern and no shipped one")
        seen = hear(f"{scenario.scenario} {scenario.goals[0]}", facts.concern)
        if seen.own or seen.foreign:
            raise ValueError(f"{scenario.id}: what the learner is shown names a concern ({seen})")


def curriculum_scenarios(count: int | None = None, seed: int = 0) -> list[Scenario]:
    """``count`` favours (all when None) as scenarios, in an order and with doubts drawn by ``seed``; checked
    (``check_curriculum``)."""
    rng = random.Random(seed)
    favours = list(FAVOURS)
    rng.shuffle(favours)
    if count is not None and not 1 <= count <= len(favours):
        raise ValueError(f"count must be 1 to {len(favours)}, not {count}")
    chosen = favours[: count or len(favours)]
    scenarios = [favour_scenario(f, tuple(rng.sample(DOUBTS, 2))) for f in chosen]  # type: ignore[arg-type]
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
