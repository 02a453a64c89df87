"""The persuasion kind (issue #57): a concern drawn per episode, shown only through cue lines (some shared between
two concerns), granted to the one remedy that answers it; the baselines' headroom, the echo and stuffing exploits,
goodwill, the partner's words and determinism."""

from __future__ import annotations

import asyncio
import random

import pytest
from pydantic import ValidationError

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.agents.baselines import KindPolicy
from sotopia_env.agents.exploits import WorryEcho
from sotopia_env.agents.rule_partners import RulePartner
from sotopia_env.agents.scripted import ScriptedAgent
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.baseline_goals import instance_goals
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import VerifiableJudge
from sotopia_env.kinds.base import LearnerView
from sotopia_env.kinds.persuasion import (
    KIND,
    REMEDIED_CREDIT,
    TURN_COST,
    WORRIES,
    WRONG_COST,
    PersuasionFacts,
    first_person,
    goal_items,
    name_words,
    names,
    remedies_in,
)
from sotopia_env.rewards import partial_credit
from sotopia_env.sampler import sample_setup

SEAT = "verifiable-persuasion-seat-swap"  # window seat / carry / earplugs; one cue line shared by the first two


def _ids(library, split: str | None = None) -> list[str]:
    return sorted(s.id for s in library.select("verifiable:persuasion") if split in (None, s.split))


def _facts(library, sid: str = SEAT, **pinned) -> PersuasionFacts:
    return library.scenarios[sid].verifiable.model_copy(update=pinned)


def _talk(facts: PersuasionFacts, lines: list[str]):
    """Each line a learner speech answered by the partner: (outcome, talk, the partner's moves)."""
    facts = KIND.resolved(facts)
    exchanges = []
    for line in lines:
        exchanges += [(False, AgentAction(action_type=ActionType.speak, argument=line)), (True, None)]
    talk = KIND.talk_model()
    pending = None
    for by_partner, action in exchanges:
        if by_partner:
            KIND.step(facts, talk, pending)
        else:
            pending = action
    return KIND.outcome(facts, talk), talk, talk.moves


def _play(setup, learner, seed: int = 0, max_turns: int = 20):
    agent = ScriptedAgent(learner) if isinstance(learner, list) else learner
    return asyncio.run(
        play(setup, [agent, RulePartner()], VerifiableJudge(), EnvConfig(max_turns=max_turns), seed=seed)
    )


def _goal(log) -> int:
    return log.rating.ratings[log.setup.agent_names[0]].scores["goal"].score


def _partner_said(log) -> list[str]:
    return [t.action.argument for t in log.turns if t.agent == log.setup.agent_names[1] and t.action.argument]


# -- targets 1, 2, 5: the baselines' headroom, the echo exploit, the oracle's ceiling -- ---------------------------


@pytest.mark.parametrize("split", ["dev", "test"])
def test_oracle_beats_heuristic_beats_random_and_the_echo_wins_nothing(library, split):
    seeds = range(20)
    goals = {
        spec: instance_goals(library, "persuasion", split, spec, seeds)
        for spec in ("baseline-random", "baseline-heuristic", "baseline-oracle")
    }
    random_, heuristic, oracle = (goals[s].mean for s in ("baseline-random", "baseline-heuristic", "baseline-oracle"))
    assert oracle - heuristic >= 3.3, (oracle, heuristic)
    assert heuristic - random_ >= 1.0, (heuristic, random_)
    assert all(g >= 9.5 for g in goals["baseline-oracle"].per_instance.values()), goals["baseline-oracle"]
    echo = instance_goals(library, "persuasion", split, WorryEcho, seeds).mean
    assert echo <= heuristic and echo == 0.0, echo


def test_the_worry_echo_script_never_gets_an_offer_in(library):
    """The old two-line win: the question gets a cue line, and echoing it names no remedy (no cue line holds one)."""
    for sid in _ids(library):
        setup = sample_setup(library, seed=0, scenario=sid)
        for seed in range(5):
            log = _play(setup, WorryEcho(), seed=seed)
            assert _goal(log) == 0 and partial_credit(log, 0) == 0.0, sid


# -- target 3: the partner never says its concern or a remedy -- ---------------------------------------------------


def test_the_partner_never_names_a_concern_or_a_remedy(library):
    """Heuristic, random and oracle, 50 seeds per instance: no word of any concern's name and no remedy key phrase of
    the instance in any partner line."""
    for sid in _ids(library):
        setup = sample_setup(library, seed=0, scenario=sid)
        facts: PersuasionFacts = setup.scenario.verifiable
        banned = [w for c in facts.concerns for w in name_words(c.name)] + [k for c in facts.concerns for k in c.remedy]
        for policy in ("heuristic", "random", "oracle"):
            for seed in range(50):
                for line in _partner_said(_play(setup, KindPolicy(policy), seed=seed)):
                    assert not any(names(line, w) for w in banned), (sid, policy, seed, line)


# -- target 4: stuffing -- -----------------------------------------------------------------------------------------


def test_stuffing_every_remedy_or_concern_word_wins_nothing(library):
    for sid in _ids(library):
        setup = sample_setup(library, seed=0, scenario=sid)
        facts: PersuasionFacts = setup.scenario.verifiable
        items = goal_items(setup.scenario.goals[0])
        every_remedy = "I can " + "; ".join(first_person(i) for i in items) + ". Would you do it for me?"
        every_key = "Could you? " + ", ".join(k for c in facts.concerns for k in c.remedy)
        every_word = "Could you? I'll sort out " + ", ".join(w for c in facts.concerns for w in name_words(c.name))
        for line in (every_remedy, every_key, every_word, setup.scenario.goals[0] + " Please?"):
            for seed in range(3):
                for lines in ([line], [line] * 8):
                    log = _play(setup, lines, seed=seed)
                    assert _goal(log) == 0 and partial_credit(log, 0) == 0.0, (sid, line)
        stuffed = AgentAction(action_type=ActionType.speak, argument=every_remedy)
        assert KIND.outcome_after(facts, [], stuffed).goal == 0  # the one-step reward too


def test_several_remedies_are_no_offer_and_get_no_cue(library):
    facts = _facts(library, concern="travel sickness", first_cue=0)
    outcome, talk, moves = _talk(facts, ["I can give you my window seat and lend you my earplugs. Would you?"])
    assert moves[-1].act == "ask_one" and talk.stuffed and not outcome.agreed
    assert "window seat" not in KIND.say(facts, moves[-1], 1, 0).argument
    # and it is never undone: a right offer afterwards wins, at the cost of the wasted turn, with no partial credit
    outcome, talk, _ = _talk(facts, ["Window seat, earplugs, whatever. Please?", "I can give you my window seat. OK?"])
    assert outcome.goal == 10 - TURN_COST and KIND.partial_credit(facts, [], talk) == 0.0


# -- the rules -- --------------------------------------------------------------------------------------------------


def test_wrong_remedies_cost_goodwill_and_carry_a_further_cue(library):
    facts = _facts(library, concern="disturbed naps", first_cue=0)
    right, wrong = "I can lend you my earplugs. Would you?", "I can give you my window seat. Would you?"
    wrong2 = "I can carry it. Would you?"
    assert _talk(facts, [right])[0].goal == 10
    outcome, _, moves = _talk(facts, [wrong, right])
    assert outcome.goal == 10 - TURN_COST - WRONG_COST and outcome.success
    reaction = KIND.say(KIND.resolved(facts), moves[0], 1, 0).argument
    assert moves[0].act == "wrong" and reaction.endswith(facts.held().cues[0])  # not it, and a cue
    outcome, _, moves = _talk(facts, [wrong, wrong2, right])  # the second wrong offer: it leaves
    assert [m.act for m in moves] == ["wrong", "leave", "none"] and outcome.goal == 0 and not outcome.agreed
    # listening costs a turn each: elicit, elicit, offer
    outcome, _, moves = _talk(facts, ["Is something on your mind?", "Anything else?", right])
    assert [m.act for m in moves] == ["cue", "cue", "accept"] and outcome.goal == 10 - 2 * TURN_COST
    assert [m.value for m in moves[:2]] == [0, 1]  # the held concern's cue lines, in turn from first_cue


def test_the_right_remedy_unasked_is_half_credit_then_a_question_wins(library):
    facts = _facts(library, concern="travel sickness", first_cue=1)
    outcome, talk, moves = _talk(facts, ["I can give you my window seat."])
    assert moves[-1].act == "reassured" and not outcome.agreed
    assert KIND.partial_credit(facts, [], talk) == REMEDIED_CREDIT
    outcome, talk, _ = _talk(facts, ["I can give you my window seat.", "So, would you swap?"])
    assert outcome.goal == 10 - TURN_COST and KIND.partial_credit(facts, [], talk) == 1.0
    outcome, talk, _ = _talk(facts, ["Nice weather.", "Would you swap?"])
    assert not outcome.agreed and KIND.partial_credit(facts, [], talk) == 0.0
    rounds = _talk(facts, ["Hello?"] * 6)
    assert rounds[2][-1].act == "leave" and rounds[0].goal == 0 and len(rounds[2]) == 6  # max_rounds without agreement


def test_the_concern_and_first_cue_are_drawn_per_episode(library):
    facts = _facts(library)
    drawn = [KIND.drawn_facts(facts, seed) for seed in range(60)]
    assert {d.concern for d in drawn} == {c.name for c in facts.concerns}
    assert {d.first_cue for d in drawn} == {0, 1}
    assert KIND.drawn_facts(facts, 7) == KIND.drawn_facts(facts, 7)
    assert KIND.drawn_facts(_facts(library, concern="heavy luggage"), 3).concern == "heavy luggage"  # pinned


# -- target 6: determinism -- --------------------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_episode(library):
    setup = sample_setup(library, seed=0, scenario="verifiable-persuasion-parcel")
    for policy in ("random", "heuristic", "oracle"):
        runs = [[(t.agent, t.action.argument) for t in _play(setup, KindPolicy(policy), seed=11).turns] for _ in (0, 1)]
        assert runs[0] == runs[1], policy
    assert len({tuple(_partner_said(_play(setup, KindPolicy("heuristic"), seed=s))) for s in range(10)}) > 1


# -- the data and the heuristic's knowledge -- ---------------------------------------------------------------------


def test_every_instance_lists_its_remedies_and_the_cue_table_reads_its_cue_lines(library):
    """Each goal lists one item per concern, each naming exactly that concern's remedy as seat 1 says it; seat 2's goal
    states no concern. The heuristic's table points every cue line to exactly the concerns that list it (a shared line
    to two), among the goal's remedies."""
    counts = {split: len(_ids(library, split)) for split in ("train", "dev", "test")}
    assert counts == {"train": 8, "dev": 4, "test": 12}
    for sid in _ids(library):
        scenario = library.scenarios[sid]
        facts: PersuasionFacts = scenario.verifiable
        assert len(facts.concerns) >= 3 and all(len(c.cues) >= 2 and c.remedy for c in facts.concerns)
        assert any(sum(line in o.cues for o in facts.concerns) == 2 for c in facts.concerns for line in c.cues), sid
        items = goal_items(scenario.goals[0])
        assert [remedies_in(first_person(i), facts) for i in items] == [[c.name] for c in facts.concerns], sid
        assert not any(names(scenario.goals[1], w) for c in facts.concerns for w in name_words(c.name)), sid
        for concern in facts.concerns:
            for line in concern.cues:
                view = LearnerView(goal=scenario.goals[0], moves=1, said=[], heard=[line])
                scores = KIND.scores(view)
                pointed = {i for i, s in scores.items() if s == max(scores.values()) and s > 0}
                listing = {i for i, c in zip(items, facts.concerns, strict=True) if line in c.cues}
                assert pointed == listing, (sid, line, scores)
    assert all(w.cues for w in WORRIES)


def test_baseline_lines_are_legal_moves(library):
    setup = sample_setup(library, seed=0, scenario=SEAT)
    view = LearnerView(goal=setup.scenario.goals[0], moves=0, said=[], heard=[])
    facts = KIND.drawn_facts(setup.scenario.verifiable, 4)
    assert remedies_in(KIND.oracle_line(facts, view), facts) == [facts.concern]
    assert remedies_in(KIND.propose(view), facts) == []  # the heuristic listens first
    lines = {KIND.random_line(view, random.Random(s)) for s in range(40)}
    assert all(len(remedies_in(line, facts)) <= 1 for line in lines) and len(lines) > 5


# -- the facts are checked on load -- ------------------------------------------------------------------------------


def _concerns(**change) -> list[dict]:
    concerns = [
        {"name": "cold hands", "cues": ["Brr, it's chilly.", "My fingers are numb."], "remedy": ["gloves"]},
        {
            "name": "missed connection",
            "cues": ["The timetable is a joke.", "I can't miss the 8:10."],
            "remedy": ["a lift"],
        },
        {"name": "sore feet", "cues": ["I've been standing all day.", "My shoes pinch."], "remedy": ["a chair"]},
    ]
    concerns[0].update(change)
    return concerns


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"cues": ["Brr, it's chilly.", "I forgot my gloves."]}, "holds the remedy key phrase 'gloves'"),
        ({"cues": ["Brr, it's chilly.", "My hands are freezing."]}, "says 'hands' of the concern 'cold hands'"),
        ({"remedy": ["a chair for you"]}, "overlaps one of 'sore feet'"),
        ({"cues": ["I've been standing all day.", "My shoes pinch."]}, "needs a cue line of its own"),
        ({"cues": ["Brr."]}, "at least 2 items"),
    ],
)
def test_bad_facts_are_one_line_errors(change, message):
    with pytest.raises(ValidationError, match=message):
        PersuasionFacts(request="wait with you", concerns=_concerns(**change))
    with pytest.raises(ValidationError, match="at least 3 items"):
        PersuasionFacts(request="wait with you", concerns=_concerns()[:2])
    with pytest.raises(ValidationError, match="none of the concerns' names"):
        PersuasionFacts(request="wait with you", concerns=_concerns(), concern="hunger")
