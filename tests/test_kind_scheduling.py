"""Scheduling with hidden constraints (issue #57): the partner's blocked days and times are drawn per episode, it
answers only a targeted question, and the judge charges every round, a declined proposal double. The targets: the
oracle well above the heuristic, the heuristic above random and above the slot lister, no line that says the
partner's whole availability, no win by stuffing, the oracle at 10, and the same seed the same episode."""

from __future__ import annotations

import asyncio
import random
import statistics
from collections import Counter

import pytest

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.agents.exploits import SlotLister
from sotopia_env.agents.loading import load_agent
from sotopia_env.agents.scripted import ScriptedAgent
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.baseline_goals import instance_goals
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import VerifiableJudge
from sotopia_env.kinds import LearnerView
from sotopia_env.kinds.base import Move
from sotopia_env.kinds.scheduling import (
    DAYS,
    KIND,
    TIMES,
    SchedulingFacts,
    SchedulingTalk,
    items_in,
    slots_in,
    slots_named,
    split_slot,
)
from sotopia_env.sampler import sample_setup

TUTORING = "verifiable-scheduling-tutoring"  # Wednesday afternoon, Thursday morning/afternoon, Friday afternoon
SEEDS = range(20)
DAYS_AND_TIMES = DAYS + TIMES


def _setup(library, sid: str = TUTORING, **facts):
    setup = sample_setup(library, seed=0, scenario=sid)
    if facts:
        hidden = setup.scenario.verifiable.model_copy(update=facts)
        setup = setup.model_copy(update={"scenario": setup.scenario.model_copy(update={"verifiable": hidden})})
    return setup


def _play(setup, learner, seed: int = 0, max_turns: int = 20):
    agent = ScriptedAgent(learner) if isinstance(learner, list) else learner
    return asyncio.run(
        play(setup, [agent, load_agent("rule-partner")], VerifiableJudge(), EnvConfig(max_turns=max_turns), seed=seed)
    )


def _goal(log) -> tuple[int, bool]:
    rating = log.rating.ratings[log.setup.agent_names[0]]
    return rating.scores["goal"].score, rating.success


def _partner(log) -> list[tuple[str, str]]:
    name = log.setup.agent_names[1]
    return [(t.action.action_type.value, t.action.argument) for t in log.turns if t.agent == name]


def _ids(library, *splits: str) -> list[str]:
    return sorted(s.id for s in library.select("verifiable:scheduling") if s.split in splits)


@pytest.fixture(scope="module")
def means(library):
    """Per split: the mean goal of each baseline and of the slot lister over 20 draws per instance."""
    out = {}
    for split in ("dev", "test"):
        specs = ("baseline-random", "baseline-heuristic", "baseline-oracle")
        found = {p: instance_goals(library, "scheduling", split, p, SEEDS) for p in specs}
        found["lister"] = instance_goals(library, "scheduling", split, SlotLister, SEEDS)
        out[split] = {p.removeprefix("baseline-"): g for p, g in found.items()}
    return out


# -- targets 1, 2, 5: where the baselines are ------------------------------------------------------------------


@pytest.mark.parametrize("split", ["dev", "test"])
def test_the_oracle_is_far_above_the_heuristic_and_the_heuristic_above_random(means, split):
    got = {p: g.mean for p, g in means[split].items()}
    assert got["oracle"] - got["heuristic"] >= 3.3, got  # 4.1 on dev, 4.3 on test today
    assert got["heuristic"] - got["random"] >= 1.0, got  # 2.6 and 2.9 today


@pytest.mark.parametrize("split", ["dev", "test"])
def test_slot_listing_scores_at_most_the_heuristic(means, split):
    """Proposing its own slots in goal order, one per turn, won every instance when the partner agreed to any slot
    it could do and named its next free one; now each declined guess costs 4, and it stays below the heuristic."""
    assert means[split]["lister"].mean <= means[split]["heuristic"].mean - 0.5, means[split]["lister"].mean


@pytest.mark.parametrize("split", ["dev", "test"])
def test_the_oracle_reaches_ten_on_every_instance(means, split):
    assert set(means[split]["oracle"].per_instance.values()) == {10.0}


# -- the draw ---------------------------------------------------------------------------------------------------


def test_shipped_instances_draw_their_partner_and_leave_exactly_one_shared_slot(library):
    for sid in _ids(library, "train", "dev", "test"):
        scenario = library.scenarios[sid]
        facts: SchedulingFacts = scenario.verifiable
        assert facts.blocked is None, sid  # drawn per episode, never fixed: memorising an instance does not help
        assert slots_named(scenario.goals[0]) == facts.agent_slots, sid  # the learner's goal: its slots, in order
        assert not slots_named(scenario.goals[1]) and not items_in(scenario.goals[1], facts.items()), sid
        shared = Counter()
        for seed in range(200):
            drawn = KIND.drawn_facts(facts, seed)
            assert len(drawn.shared()) == 1, (sid, seed, drawn.blocked)
            shared[drawn.shared()[0]] += 1
        assert set(shared) == set(facts.agent_slots) and min(shared.values()) >= 25, (sid, shared)  # ~uniform


# -- target 6: deterministic ----------------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_episode(library):
    setup = _setup(library)
    for spec in ("baseline-random", "baseline-heuristic", "baseline-oracle"):
        runs = [_play(setup, load_agent(spec), seed=7) for _ in range(2)]
        assert [t.action for t in runs[0].turns] == [t.action for t in runs[1].turns], spec
        assert runs[0].setup.scenario.verifiable == runs[1].setup.scenario.verifiable
    draws = {tuple(KIND.drawn_facts(setup.scenario.verifiable, s).blocked) for s in range(20)}
    assert len(draws) > 5  # and other seeds draw other partners


# -- the rules: questions, proposals, general talk -----------------------------------------------------------------


def test_targeted_questions_get_true_answers_about_that_day_or_time_alone(library):
    setup = _setup(library, blocked=["thursday", "morning"])  # free: Wednesday afternoon, Friday afternoon
    lines = ["Can you do Thursday?", "Are afternoons OK for you?", "Hmm, and Wednesdays?", "Mornings?"]
    said = [text for _, text in _partner(_play(setup, lines))]
    assert "Thursday" in said[0] and ("out" in said[0] or "no good" in said[0])
    assert "afternoons" in said[1].lower() and "fine" in said[1]
    assert "Wednesday" in said[2] and "fine" in said[2]
    assert "mornings" in said[3].lower() and "fine" not in said[3]
    for line in said:  # one item per answer, no slot, never the list of its free times
        assert not slots_in(line, setup.scenario.verifiable.slots) and len(items_in(line, DAYS_AND_TIMES)) <= 1


def test_a_decline_names_no_other_time_and_questions_cost_a_round(library):
    setup = _setup(library, blocked=["thursday", "morning"])
    log = _play(setup, ["Could we do Thursday afternoon?", "Are afternoons OK?", "Wednesday afternoon, then?"])
    said = [text for _, text in _partner(log)]
    assert not slots_in(said[0], setup.scenario.verifiable.slots) and not items_in(said[0], DAYS_AND_TIMES)
    assert _goal(log) == (4, True)  # 10 - 4 (one declined) - 2 (one question)
    assert _goal(_play(setup, ["Wednesday afternoon?"])) == (10, True)
    assert _goal(_play(setup, ["Mondays?", "Fridays?", "Wednesday afternoon?"])) == (6, True)
    assert _goal(_play(setup, ["Friday afternoon?", "Thanks!"])) == (10, True)
    log = _play(setup, ["Thursday morning?"] * 3 + ["Friday afternoon?"])
    assert _goal(log) == (1, True)  # 10 - 12, floored at 1 on an agreement


def test_general_talk_gets_one_partial_cue_and_several_items_get_one_at_a_time(library):
    setup = _setup(library, blocked=["friday", "morning", "evening"])
    said = [t for _, t in _partner(_play(setup, ["When are you free?", "Anything else?", "Hello there!"]))]
    assert all("Fridays" in s or "Friday" in s for s in said)  # always its first blocked item, nothing more
    log = _play(setup, ["Can you do Wednesday or Thursday?", "Mornings, afternoons, evenings?"])
    said = [t for _, t in _partner(log)]
    assert all("one" in s.lower() and not items_in(s, DAYS_AND_TIMES) for s in said)
    log = _play(setup, [{"action_type": "non-verbal communication", "argument": "points at Thursday"}])
    assert not items_in(_partner(log)[0][1], DAYS_AND_TIMES)
    talk = SchedulingTalk()
    move = KIND.respond(KIND.resolved(setup.scenario.verifiable), talk, _say("Wednesday afternoon? Or Friday?"))
    assert move == Move("accept", "Wednesday afternoon", 0)  # one slot named: a proposal, other days aside


def _say(text: str) -> AgentAction:
    return AgentAction(action_type=ActionType.speak, argument=text)


def test_agreeing_a_slot_the_learner_cannot_make_scores_zero_and_the_partner_leaves_after_max_rounds(library):
    setup = _setup(library, blocked=["thursday", "morning"])
    log = _play(setup, ["Wednesday evening works for me."])  # the partner can, the learner can't
    assert _goal(log) == (0, False)
    log = _play(setup, ["Thursday morning?"] * 6)
    assert [a for a, _ in _partner(log)][-1] == "leave" and len(_partner(log)) == 5 and _goal(log) == (0, False)


# -- target 4: stuffing ----------------------------------------------------------------------------------------


def test_stuffing_every_slot_day_and_time_wins_nothing(library):
    for sid in _ids(library, "dev", "test"):
        facts: SchedulingFacts = library.scenarios[sid].verifiable
        every_slot = "Could we do " + ", ".join(facts.slots) + "?"
        every_item = "Can you do " + ", ".join(i.capitalize() for i in facts.items()) + "?"
        both = every_slot + " " + every_item
        for line in (every_slot, every_item, both):
            for seed in range(5):
                log = _play(_setup(library, sid), [line] * 8, seed=seed)
                assert _goal(log) == (0, False), (sid, line)
                for _, said in _partner(log):  # and no answer about any of it
                    assert not slots_in(said, facts.slots) and not items_in(said, facts.items()), (sid, said)


# -- target 3: the partner never says its availability -----------------------------------------------------------


def test_the_partner_never_states_its_availability(library):
    """Over 50 draws per instance and the three baselines, no partner line names more than one slot, and none but
    an agreement names more than one day or time of day: the hidden blocked set is never said whole."""
    for sid in _ids(library, "dev", "test"):
        setup = _setup(library, sid)
        facts: SchedulingFacts = setup.scenario.verifiable
        for spec in ("baseline-random", "baseline-heuristic", "baseline-oracle"):
            for seed in range(50):
                log = _play(setup, load_agent(spec), seed=seed)
                drawn: SchedulingFacts = log.setup.scenario.verifiable
                for _, said in _partner(log):
                    slots = slots_in(said, facts.slots)
                    assert len(slots) <= 1, (sid, said)
                    assert len(items_in(said, facts.items())) <= (2 if slots else 1), (sid, said)
                    assert not slots or drawn.suits(slots[0]), (sid, said)  # only the slot it agrees to


# -- the heuristic reads only what seat 1 is shown ---------------------------------------------------------------


def test_the_heuristic_acts_on_the_view_alone_and_asks_before_it_guesses(library):
    setup = _setup(library)
    goal = setup.scenario.goals[0]
    view = LearnerView(goal=goal, moves=0, said=[], heard=[])
    first = KIND.propose(view)
    assert not slots_in(first, setup.scenario.verifiable.slots) and len(items_in(first, DAYS_AND_TIMES)) == 1
    # the answers narrow it down to the one slot left, which it proposes
    view = LearnerView(
        goal=goal,
        moves=2,
        said=["Hi! Can you do Thursday?", "Are afternoons OK for you?"],
        heard=["Thursday is out for me, I'm afraid.", "Afternoons are out for me, I'm afraid."],
    )
    assert len(slots_in(KIND.propose(view), setup.scenario.verifiable.agent_slots)) == 1  # no type fits: its first
    view = LearnerView(
        goal=goal,
        moves=2,
        said=["Hi! Can you do Thursday?", "Are afternoons OK for you?"],
        heard=["Thursday is out for me, I'm afraid.", "Yes, afternoons are fine by me, as a rule."],
    )
    assert len(slots_in(KIND.propose(view), ["Wednesday afternoon", "Friday afternoon"])) == 1
    rng = random.Random(0)
    lines = [KIND.random_line(LearnerView(goal=goal, moves=1, said=[], heard=[]), rng) for _ in range(40)]
    assert all(
        len(slots_in(x, setup.scenario.verifiable.agent_slots)) + len(items_in(x, DAYS_AND_TIMES)) for x in lines
    )


def test_the_heuristic_wins_every_drawn_episode_on_train(library):
    """Always an agreement on one of its own slots, in at most 4 moves; mean near 6 per instance."""
    for sid in _ids(library, "train"):
        goals = []
        for seed in SEEDS:
            log = _play(_setup(library, sid), load_agent("baseline-heuristic"), seed=seed)
            goal, success = _goal(log)
            assert success, (sid, seed)
            goals.append(goal)
        assert 4.5 <= statistics.fmean(goals) <= 7.5, (sid, goals)


# -- partial credit ------------------------------------------------------------------------------------------------


def test_partial_credit_is_the_share_of_its_slots_it_has_settled(library):
    setup = _setup(library, blocked=["thursday", "morning"])
    facts = KIND.resolved(setup.scenario.verifiable)

    def credit(lines: list[str]) -> float:
        talk = SchedulingTalk()
        for line in lines:
            KIND.respond(facts, talk, _say(line))
        return KIND.partial_credit(facts, lines, talk)

    assert credit(["Hello there, how are you?", "When are you free?"]) == 0.0  # general talk settles nothing
    assert credit(["Can you do Thursday?"]) == 0.5  # Thursday morning and afternoon ruled out
    assert credit(["Can you do Thursday?", "Are afternoons OK?"]) == 0.5  # "fine" alone settles no slot
    assert credit(["Can you do Thursday?", "Are afternoons OK?", "Wednesdays?", "Fridays?"]) == 1.0
    assert credit(["Thursday morning?"]) == 0.25


# -- the facts ------------------------------------------------------------------------------------------------------


def test_facts_are_checked(library):
    base = {"kind": "scheduling", "event": "x", "slots": ["Monday morning", "Tuesday evening"]}
    with pytest.raises(ValueError, match="not a weekday and a time of day"):
        SchedulingFacts(**{**base, "slots": ["Monday", "Monday morning"]}, agent_slots=["Monday morning"])
    with pytest.raises(ValueError, match="not one of slots"):
        SchedulingFacts(**base, agent_slots=["Friday morning"])
    with pytest.raises(ValueError, match="rules out every one of agent_slots"):
        SchedulingFacts(**base, agent_slots=["Monday morning"], blocked=["morning"])
    with pytest.raises(ValueError, match="not a day or time of day of slots"):
        SchedulingFacts(**base, agent_slots=["Monday morning"], blocked=["sunday"])
    assert split_slot("Monday-morning") == ("monday", "morning")
