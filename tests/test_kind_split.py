"""The split kind (``sotopia_env.kinds.split``): a pool divided with private values, the partner's values and
threshold drawn per episode. The baselines' headroom on dev and test, the old-style exploit, the partner's lines
(no value ever said), stuffing, determinism, parsing and the facts' validation."""

import asyncio
import re
import statistics

import pytest

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.agents.exploits import ConcedeInOrder
from sotopia_env.agents.loading import load_agent
from sotopia_env.agents.scripted import ScriptedAgent
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.baseline_goals import instance_goals, kind_setups
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import VerifiableJudge
from sotopia_env.kinds import LearnerView, kind_for
from sotopia_env.kinds.split import KIND, SplitFacts, best_share, pool_in, read_share

FORMS = [("book", "books"), ("hat", "hats"), ("ball", "balls")]
COUNTS = (3, 2, 1)
BASELINES = ("baseline-random", "baseline-heuristic", "baseline-oracle")


def _facts(**update) -> SplitFacts:
    base = {
        "kind": "split",
        "items": [{"name": "book", "count": 3}, {"name": "hat", "count": 2}, {"name": "ball", "count": 1}],
        "values": [2, 1, 2],
        "partner_values": [[0, 2, 6], [1, 3, 1]],
        "thresholds": [6, 7],
    }
    return SplitFacts(**{**base, **update})


def _play(setup, agent, seed: int):
    agents = [agent, load_agent("rule-partner")]
    return asyncio.run(play(setup, agents, VerifiableJudge(), EnvConfig(max_turns=20), seed=seed))


def _goal(log) -> int:
    return log.rating.ratings[log.setup.agent_names[0]].scores["goal"].score


# -- the targets on the shipped instances --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def goals():
    from sotopia_env.library import load_library

    library = load_library()
    seeds = range(20)
    out = {}
    for split in ("dev", "test"):
        for spec in BASELINES:
            out[split, spec] = instance_goals(library, "split", split, spec, seeds)
        out[split, "exploit"] = instance_goals(library, "split", split, ConcedeInOrder, seeds, name="exploit")
    return out


@pytest.mark.parametrize("split", ["dev", "test"])
def test_the_oracle_has_headroom_over_the_heuristic_and_the_heuristic_over_random(goals, split):
    random_, heuristic, oracle = (goals[split, s] for s in BASELINES)
    assert len(heuristic.per_instance) == {"dev": 4, "test": 12}[split]
    assert oracle.mean - heuristic.mean >= 3.3, (oracle.mean, heuristic.mean)
    assert heuristic.mean - random_.mean >= 1.0, (heuristic.mean, random_.mean)
    assert all(goal >= 9.5 for goal in oracle.per_instance.values()), oracle.per_instance  # near 10 everywhere


@pytest.mark.parametrize("split", ["dev", "test"])
def test_asking_for_everything_then_conceding_in_a_fixed_order_is_no_better_than_the_heuristic(goals, split):
    assert goals[split, "exploit"].mean <= goals[split, "baseline-heuristic"].mean


def test_the_partner_never_says_a_value(library):
    """50 seeds per instance, each baseline: every number the partner says is a count right before an item's name
    (a split it accepts), and it never speaks of worth, points or values."""
    for split in ("train", "dev", "test"):
        for setup in kind_setups(library, "split", split):
            facts = setup.scenario.verifiable
            names = "|".join(re.escape(n) for i in facts.items for n in (i.name, i.plural))
            count = re.compile(rf"\b\d+\s+(?:{names})\b", re.I)
            for spec in BASELINES:
                for seed in range(50):
                    log = _play(setup, load_agent(spec), seed)
                    for turn in log.turns:
                        if turn.agent != setup.agent_names[1] or not turn.action.argument:
                            continue
                        line = turn.action.argument
                        assert not re.search(r"worth|point|valu", line, re.I), line
                        assert not re.search(r"\d", count.sub("", line)), line


# -- stuffing, determinism, the draw --------------------------------------------------------------------------------


def test_a_line_with_every_item_and_every_number_wins_nothing(library):
    for setup in kind_setups(library, "split", "test"):
        facts = setup.scenario.verifiable
        names = " ".join(n for i in facts.items for n in (i.name, i.plural))
        numbers = " ".join(str(n) for n in range(11))
        stuffed = [f"{numbers} {names}", " ".join(f"{n} {name}" for n in range(6) for name in names.split())]
        for line in stuffed:
            assert not isinstance(read_share(line, [(i.name, i.plural) for i in facts.items], facts.counts), tuple)
            for seed in range(3):
                log = _play(setup, ScriptedAgent([line] * 10), seed)
                assert _goal(log) == 0, (setup.scenario.id, line)
                assert KIND.partial_credit(KIND.resolved(facts), [line], KIND.talk_model()) == 0


def test_the_same_seed_gives_the_same_episode_and_seeds_draw_different_partners(library):
    for setup in kind_setups(library, "split", "dev"):
        first, again = (_play(setup, load_agent("baseline-heuristic"), 7) for _ in range(2))
        assert [t.action for t in first.turns] == [t.action for t in again.turns]
        assert first.setup.scenario.verifiable == again.setup.scenario.verifiable
        drawn = {
            (tuple(f.partner), f.threshold) for f in (setup.drawn_with(seed).scenario.verifiable for seed in range(20))
        }
        assert len(drawn) >= 4, (setup.scenario.id, drawn)  # memorising the instance does not help


def test_the_family_ships_with_its_splits_and_the_goals_state_only_what_seat_1_may_know(library):
    mine = [s for s in library.select("verifiable") if "split" in s.tags]
    assert {sp: sum(s.split == sp for s in mine) for sp in ("train", "dev", "test")} == {
        "train": 8,
        "dev": 4,
        "test": 12,
    }
    for s in mine:
        facts = s.verifiable
        assert s.id.startswith("verifiable-split-") and facts.kind == "split" and facts.partner is None
        pool = pool_in(s.goals[0])  # what the heuristic reads: the pool and its own values, exactly
        assert pool is not None, s.id
        assert pool.counts == facts.counts and list(pool.values) == facts.values, s.id
        assert pool.forms == tuple((i.name, i.plural) for i in facts.items), s.id
        assert not re.search(r"\d", s.goals[1]), s.id  # the partner's goal names no drawn number
        assert 5 <= sum(facts.counts) <= 7


# -- the judge and the partial credit ------------------------------------------------------------------------------


def test_the_judge_scores_against_the_best_split_the_partner_accepts():
    facts = KIND.drawn_facts(_facts(), 0).model_copy(update={"partner": [0, 2, 6], "threshold": 6})
    best, top = best_share(facts.counts, facts.values, facts.partner, 6)
    assert (best, top) == ((3, 2, 0), 8)  # the partner needs the ball; the learner keeps books and hats
    view = LearnerView(goal="", moves=0, said=[], heard=[])
    assert KIND.oracle_line(facts, view) == "I take 3 books, 2 hats and 0 balls."

    def outcome(*lines):
        exchanges = []
        for line in lines:
            exchanges += [(False, AgentAction(action_type=ActionType.speak, argument=line))]
            exchanges += [(True, AgentAction(action_type=ActionType.none))]
        return KIND.outcome(facts, KIND.replay(facts, exchanges))

    oracle = outcome("I take 3 books, 2 hats and 0 balls.")
    assert (oracle.goal, oracle.partner_goal, oracle.success) == (10, 6, True)
    assert "joint efficiency 0.88" in oracle.reasoning  # 8 + 6 of the best sum 16 (books; hats and ball)
    modest = outcome("I take 2 books, 1 hat and 0 balls.")  # accepted, worth 5 of the 8 on offer
    assert (modest.goal, modest.partner_goal) == (6, 8) and "joint efficiency" in modest.reasoning
    refused = outcome("I take 3 books, 2 hats and 1 ball.", "I take 3 books, 1 hat and 1 ball.")
    assert (refused.goal, refused.partner_goal, refused.agreed) == (0, 0, False)
    talk = KIND.replay(facts, [(False, AgentAction(action_type=ActionType.speak, argument="Hello")), (True, None)])
    assert KIND.partial_credit(facts, ["Hello"], talk) == 0.0
    talk = KIND.replay(
        facts,
        [(False, AgentAction(action_type=ActionType.speak, argument="I take 3 books, 2 hats and 1 ball."))]
        + [(True, AgentAction(action_type=ActionType.none))],
    )
    assert KIND.partial_credit(facts, ["I take 3 books, 2 hats and 1 ball."], talk) == 0.5
    talk = KIND.replay(
        facts,
        [(False, AgentAction(action_type=ActionType.speak, argument="I take 3 books, 2 hats and 0 balls."))]
        + [(True, AgentAction(action_type=ActionType.none))],
    )
    assert KIND.partial_credit(facts, [], talk) == 1.0


def test_a_refusal_gives_cues_and_the_last_one_is_leaving():
    facts = KIND.drawn_facts(_facts(), 0).model_copy(update={"partner": [0, 2, 6], "threshold": 6})
    talk = KIND.talk_model()
    move = KIND.step(
        facts, talk, AgentAction(action_type=ActionType.speak, argument="I take 3 books, 2 hats and 1 ball.")
    )
    assert move.act == "far" and move.value == 2  # it needs the ball
    line = KIND.say(facts, move, 1, 0).argument
    assert "the ball" in line and not re.search(r"\d", line)
    move = KIND.step(
        facts, talk, AgentAction(action_type=ActionType.speak, argument="I take 3 books, 1 hat and 1 ball.")
    )
    assert move.act == "leave" and talk.closed


# -- parsing ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I take 2 books, 1 hat and 0 balls.", (2, 1, 0)),
        ("I'll have three books, no hats and one ball, you keep the rest", (3, 0, 1)),
        ("1 ball, 2 hats, 0 books for me", (0, 2, 1)),
        ("I take 2 books, 1 hat and 0 balls. So: 2 books, 1 hat, 0 balls.", (2, 1, 0)),  # the same offer twice
        ("Hello! How shall we split this?", "none"),
        ("I take 2 books and 1 hat.", "partial"),
        ("I take 2 books, 1 hat and 0 balls, or maybe 3 books.", "conflict"),
        ("I take 4 books, 1 hat and 0 balls.", "impossible"),
        ("0 1 2 3 books hats balls", "partial"),
        ("I take the books and the hats but not the ball", "none"),
    ],
)
def test_reading_an_offer(text, expected):
    assert read_share(text, FORMS, COUNTS) == expected


def test_the_heuristic_reads_its_goal_and_the_partner_and_agrees_when_the_partner_repeats_its_offer():
    goal = (
        "Split 3 books, 2 hats and 1 ball with your cousin. To you, each book is worth 2 points, each hat 1 point "
        'and each ball 2 points (10 in all). Offer like "I take 1 book, 0 hats and 1 ball".'
    )
    pool = pool_in(goal)
    assert (pool.forms, pool.counts, pool.values) == (tuple(FORMS), COUNTS, (2, 1, 2))
    first = KIND.propose(LearnerView(goal=goal, moves=0, said=[], heard=[]))
    assert read_share(first, FORMS, COUNTS) == (3, 0, 0)  # keeps its best, leaves half of the items
    refused = "Hmm, close, but not quite. I'd need more of the books."
    second = KIND.propose(LearnerView(goal=goal, moves=1, said=[first], heard=[refused]))
    assert read_share(second, FORMS, COUNTS) == (2, 0, 0)
    accept = "Alright, deal: you get 2 books, 0 hats and 0 balls, and I keep the rest."
    assert KIND.agreed(LearnerView(goal=goal, moves=2, said=[first, second], heard=[refused, accept]))
    assert not KIND.agreed(LearnerView(goal=goal, moves=1, said=[first], heard=[refused]))


# -- the facts' validation ------------------------------------------------------------------------------------------


def test_facts_that_do_not_add_up_are_one_line_errors_naming_the_field(tmp_path):
    from sotopia_env.library import LibraryError, load_library

    with pytest.raises(ValueError, match="values: the pool is worth 11 with these values, not 10"):
        _facts(values=[2, 1, 3])
    with pytest.raises(ValueError, match=r"partner_values\[1\]: 3 values for 3 item types|partner_values\[1\]"):
        _facts(partner_values=[[0, 2, 6], [1, 3]])
    with pytest.raises(ValueError, match="leave the learner nothing"):
        _facts(partner_values=[[0, 2, 6], [2, 1, 2]], thresholds=[10])
    source = tmp_path / "ok.yaml"
    text = (library_yaml := _one_yaml()).replace("values: [2, 1, 2]", "values: [2, 1, 3]")
    source.write_text(text)
    with pytest.raises(
        LibraryError, match=r"entry 0 \(id 'my-split'\), field 'verifiable.split'.*values: the pool is worth 11"
    ) as error:
        load_library([source])
    assert "\n" not in str(error.value)
    source.write_text(library_yaml)
    assert kind_for(load_library([source]).scenarios["my-split"].verifiable).name == "split"


def _one_yaml() -> str:
    return """scenarios:
- id: my-split
  codename: my_split
  scenario: Two friends share a box of 3 books, 2 hats and 1 ball.
  goals:
  - Split 3 books, 2 hats and 1 ball. Each book is worth 2 points to you, each hat 1 point and each ball 2 points.
  - Keep what matters to you.
  relationship: acquaintance
  tags: [verifiable, split]
  split: train
  verifiable:
    kind: split
    items: [{name: book, count: 3}, {name: hat, count: 2}, {name: ball, count: 1}]
    values: [2, 1, 2]
    partner_values: [[0, 2, 6], [1, 3, 1]]
    thresholds: [6, 7]
"""


def test_the_goals_mean_is_reported(goals):
    """Not a target: the table the module docstring and docs quote, printed for the record."""
    for split in ("dev", "test"):
        row = {s: round(goals[split, s].mean, 2) for s in (*BASELINES, "exploit")}
        print(split, row, statistics.fmean(goals[split, "baseline-heuristic"].per_instance.values()))
