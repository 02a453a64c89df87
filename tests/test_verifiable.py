"""Verifiable scenarios: the rule partners (malformed speech included), the rule judge on hand-built transcripts,
a whole episode through the CLI, and social_turns prompts from stored verifiable episodes."""

import asyncio
import json

import pytest

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.agents.loading import AgentSpecError, load_agent
from sotopia_env.agents.rule_partners import RulePartner
from sotopia_env.agents.rule_specs import check_rule_specs
from sotopia_env.agents.scripted import ScriptedAgent
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import EpisodeContext, VerifiableJudge, aevaluate_safely, make_evaluator
from sotopia_env.kinds import NotVerifiable, kind_for
from sotopia_env.kinds.bargaining import BargainingFacts, numbers_in
from sotopia_env.kinds.base import ten
from sotopia_env.kinds.persuasion import PersuasionFacts, first_person, goal_items, name_words, names, remedies_in
from sotopia_env.kinds.scheduling import SchedulingFacts, items_in, slots_in
from sotopia_env.kinds.split import SplitFacts, pool_in, read_share
from sotopia_env.transcript import Turn

BIKE = "verifiable-bargaining-bike"  # asking 450, budget 400; FIXED_BIKE fixes the draw: reservation 320, 4 rounds
FIXED_BIKE = {"reservation": 320, "style": "steady", "moods": None, "max_rounds": 4, "hidden_seed": 0}


def _setup(library, scenario_id: str, **facts) -> EpisodeSetup:
    from sotopia_env.sampler import sample_setup

    setup = sample_setup(library, seed=0, scenario=scenario_id)
    if facts:
        hidden = setup.scenario.verifiable.model_copy(update=facts)
        setup = setup.model_copy(update={"scenario": setup.scenario.model_copy(update={"verifiable": hidden})})
    return setup


def _play(setup: EpisodeSetup, lines: list, max_turns: int = 20):
    from sotopia_env.env import EnvConfig

    agents = [ScriptedAgent(lines), load_agent("rule-partner")]
    return asyncio.run(play(setup, agents, VerifiableJudge(), EnvConfig(max_turns=max_turns)))


def _partner_lines(log) -> list[tuple[str, str]]:
    partner = log.setup.agent_names[1]
    return [(t.action.action_type.value, t.action.argument) for t in log.turns if t.agent == partner]


def _goal(log, seat: int = 0) -> tuple[int, bool]:
    rating = log.rating.ratings[log.setup.agent_names[seat]]
    return rating.scores["goal"].score, rating.success


# -- the family in the library ---------------------------------------------------------------------


class _Recorder:
    """Wraps an agent and keeps every (observation, action) it saw and gave."""

    def __init__(self, agent) -> None:
        self.agent, self.seen = agent, []

    def reset(self, setup=None, seat=None) -> None:
        self.agent.reset(setup=setup, seat=seat)

    async def act(self, observation):
        action = await self.agent.act(observation)
        self.seen.append((observation, action))
        return action


def _scrambled(setup: EpisodeSetup) -> EpisodeSetup:
    """The same episode with other hidden facts (what seat 1 is shown unchanged)."""
    facts = setup.scenario.verifiable
    if facts.kind == "bargaining":
        hidden = facts.model_copy(update={"reservation": 1, "asking_price": 2, "item": "x"})
    elif facts.kind == "scheduling":
        hidden = facts.model_copy(update={"blocked": facts.items()[:1], "event": "x"})
    elif facts.kind == "split":
        hidden = facts.model_copy(update={"partner_values": facts.partner_values[::-1], "thresholds": [1]})
    else:
        hidden = facts.model_copy(update={"concern": facts.concerns[-1].name, "first_cue": 1, "request": "x"})
    return setup.model_copy(update={"scenario": setup.scenario.model_copy(update={"verifiable": hidden})})


def test_verifiable_expert_wins_every_kind_by_listening_and_never_reads_the_hidden_facts(library):
    """The BC warm-start's demonstrator (``training.experts.VerifiableExpert``, used by
    ``benchmarks/episode_rl.py``) on every train instance: one number or one slot per line, a deal inside the
    episode length the benchmark trains at, then a thank-you, never a leave. In persuasion it asks what is on the
    partner's mind and offers the remedy the cue lines point to, one remedy per line, never a list. It
    acts on what seat 1 is shown: with other hidden facts, the same observations give the same words."""
    from sotopia_env.env import EnvConfig
    from sotopia_env.sampler import sample_setups
    from sotopia_env.training.experts import VerifiableExpert

    scenarios = sorted(library.select("verifiable:train"), key=lambda s: s.id)
    setups = sample_setups(scenarios, library, 1, seed=0)
    assert len(setups) == 32
    wins = {"bargaining": 0, "scheduling": 0, "persuasion": 0, "split": 0}
    for setup in setups:
        expert = _Recorder(VerifiableExpert())
        log = asyncio.run(play(setup, [expert, RulePartner()], VerifiableJudge(), EnvConfig(max_turns=10)))
        goal, success = _goal(log)
        mine = [t.action for t in log.turns if t.agent == log.setup.agent_names[0]]
        facts = setup.scenario.verifiable
        wins[facts.kind] += success
        assert all(a.action_type is ActionType.speak for a in mine)
        blind = VerifiableExpert()
        blind.reset(setup=_scrambled(setup), seat=0)
        assert [asyncio.run(blind.act(obs)) for obs, _ in expert.seen] == [a for _, a in expert.seen], setup.scenario.id
        if facts.kind == "persuasion":
            for action in mine:
                assert len(remedies_in(action.argument, facts)) <= 1, (setup.scenario.id, action.argument)
            continue
        if facts.kind == "split":  # every line before the thanks one valid offer; a deal is not always found
            forms, counts = [(i.name, i.plural) for i in facts.items], facts.counts
            offers = [a.argument for a in mine if a.argument != VerifiableExpert.THANKS]
            assert all(isinstance(read_share(o, forms, counts), tuple) for o in offers), (setup.scenario.id, offers)
            continue
        floor = 1 if facts.kind == "scheduling" else 5  # scheduling: each question costs 2, a wrong guess 4
        assert success and goal >= floor, (setup.scenario.id, goal, [t.action.argument for t in log.turns])
        for action in [a for a in mine if a.argument != VerifiableExpert.THANKS]:  # every one a speech (above)
            if facts.kind == "bargaining":
                assert len(numbers_in(action.argument)) == 1
            if facts.kind == "scheduling":  # one slot proposed, or one day or time asked about
                slots = slots_in(action.argument, facts.slots)
                assert len(slots) == 1 or (not slots and len(items_in(action.argument, facts.items())) == 1)
    assert wins["bargaining"] == wins["scheduling"] == 8 and wins["persuasion"] >= 0.7 * 8  # 8 of 8 today
    assert wins["split"] >= 4  # two offers against a drawn threshold
    with pytest.raises(ValueError, match="seat 1"):
        VerifiableExpert().reset(setup=setups[0], seat=1)


def test_family_ships_with_splits_and_hides_its_facts(library):
    family = library.select("verifiable")
    for kind in ("bargaining", "scheduling", "persuasion", "split"):
        mine = [s for s in family if kind in s.tags]
        counts = {split: sum(s.split == split for s in mine) for split in ("train", "dev", "test")}
        assert counts == {"train": 8, "dev": 4, "test": 12}, (kind, counts)
        assert all(s.verifiable.kind == kind for s in mine)
    for s in family:
        seen = f"{s.scenario} {s.goals[0]}".lower()  # what the learner sees of its own seat
        facts = s.verifiable
        if isinstance(facts, BargainingFacts):
            money = f"{facts.currency}{facts.budget}"
            assert money in s.goals[0] and str(facts.reservation) not in seen, s.id
        elif isinstance(facts, SchedulingFacts):
            assert all(slot in s.goals[0] for slot in facts.agent_slots), s.id
            assert facts.blocked is None and not slots_in(s.goals[1], facts.slots), s.id  # drawn per episode
        elif isinstance(facts, PersuasionFacts):  # seat 1's goal lists every remedy; seat 2's names no concern
            assert len(goal_items(s.goals[0])) == len(facts.concerns) >= 3, s.id
            assert not any(names(s.goals[1], w) for c in facts.concerns for w in name_words(c.name)), s.id
        elif isinstance(facts, SplitFacts):  # seat 1's goal states the pool and its own values; seat 2's no number
            pool = pool_in(s.goals[0])
            assert pool and list(pool.values) == facts.values and not any(ch.isdigit() for ch in s.goals[1]), s.id
    # opt-in: plain selectors and random sampling leave the family out; parts combine
    assert not any("verifiable" in s.tags for s in library.select("all") + library.select("test"))
    assert {s.id for s in library.select("verifiable:bargaining:test")} == {
        s.id for s in family if s.split == "test" and "bargaining" in s.tags
    }
    assert library.select("bargaining") == [s for s in family if "bargaining" in s.tags]


# -- the partners ----------------------------------------------------------------------------------


def test_numbers_and_slots_parsing():
    assert numbers_in("I'll pay $1,200 for it") == [1200.0]
    assert numbers_in("300 or 350? ok 300") == [300.0, 350.0]
    assert numbers_in("99.50, final") == [99.5]
    assert numbers_in("at 3pm, no price yet") == []
    slots = ["Monday morning", "Monday afternoon", "Friday evening"]
    assert slots_in("How about monday-morning?", slots) == ["Monday morning"]
    assert slots_in("Monday afternoon or Friday evening", slots) == ["Monday afternoon", "Friday evening"]


def test_bargaining_partner_counters_then_accepts_and_handles_malformed_speech(library):
    lines = [
        "Hello! Is it still for sale?",  # no number: asked for a price
        "I could pay 200 or maybe 250.",  # several numbers: asked for one
        {"action_type": "non-verbal communication", "argument": "holds up three fingers"},  # no words: no offer
        "How about $300?",  # under the reservation: the 4th round, the partner leaves
    ]
    log = _play(_setup(library, BIKE, **FIXED_BIKE), lines)
    said = _partner_lines(log)
    assert [kind for kind, _ in said] == ["speak", "speak", "speak", "leave"]
    assert "$450" in said[0][1] and "numbers" in said[1][1] and "$" in said[2][1]
    assert _goal(log) == (0, False) and log.termination_reason == "everyone_left"

    log = _play(
        _setup(library, BIKE, **FIXED_BIKE), ["I can offer $250.", "Okay, $300 then.", "Alright, $330.", "Thanks!"]
    )
    said = _partner_lines(log)
    counters = [numbers_in(text)[0] for _, text in said[:2]]
    assert counters[0] > counters[1] >= 320  # comes down, never below the reservation
    assert "deal" in said[2][1] and "330" not in said[2][1] and said[3][0] == "leave"  # accepts, says goodbye
    assert _goal(log) == (9, True)  # (400 - 330) / (400 - 320) = 0.875 -> 9


def test_bargaining_partner_needs_a_verifiable_scenario_and_seat_two(library, two_friends):
    partner = RulePartner()
    with pytest.raises(NotVerifiable, match="not verifiable"):
        partner.reset(setup=two_friends, seat=1)
    with pytest.raises(ValueError, match="seat 2"):
        partner.reset(setup=_setup(library, BIKE), seat=0)
    with pytest.raises(AgentSpecError, match="--agent2"):
        check_rule_specs([library.scenarios[BIKE]], ["rule-partner", "x"], "verifiable")
    with pytest.raises(NotVerifiable, match=two_friends.scenario.id):
        check_rule_specs([two_friends.scenario], ["x", "y"], "verifiable")


def test_scheduling_partner(library):
    sid = "verifiable-scheduling-tutoring"
    setup = _setup(library, sid, blocked=["thursday", "wednesday"])  # the partner can do Friday only
    only_mine, both, only_theirs = "Wednesday afternoon", "Friday afternoon", "Friday morning"
    log = _play(setup, ["When would suit you?", f"{only_mine} or {both}?", f"Could we do {only_mine}?", f"{both}?"])
    said = [text for _, text in _partner_lines(log)]
    assert "Thursday" in said[0] and not slots_in(said[0], setup.scenario.verifiable.slots)  # a cue, no slot
    assert "one" in said[1].lower()  # several slots: asks for one at a time
    assert not slots_in(said[2], setup.scenario.verifiable.slots)  # declines, and names no other time
    assert both in said[3] and _goal(log) == (2, True)  # 10 - 4 (declined) - 2 * 2 (cue, several slots)

    log = _play(setup, [f"Let's do {only_theirs}."])
    assert _goal(log) == (0, False) and _goal(log, 1) == (10, True)  # agreed, but on a slot the learner can't make


def test_persuasion_partner(library):
    sid = "verifiable-persuasion-seat-swap"
    setup = _setup(library, sid, concern="travel sickness", first_cue=0)
    facts: PersuasionFacts = setup.scenario.verifiable
    lines = ["Would you swap seats with me, please?", "I can give you my window seat.", "So, would you swap?"]
    log = _play(setup, lines)
    said = [text for _, text in _partner_lines(log)]
    assert said[0] == facts.concerns[0].cues[0]  # no remedy offered: a cue line of the concern it holds
    assert "actually help" in said[1] or "difference" in said[1]  # the right remedy, no question: reassured
    assert "swap seats with you" in said[2] and _goal(log) == (10 - 2 * 3, True)  # two turns before the deal

    log = _play(setup, [{"action_type": "non-verbal communication", "argument": "smiles at the window"}] * 6)
    assert [k for k, _ in _partner_lines(log)] == ["speak"] * 5 + ["leave"]  # non-verbal never persuades
    assert _goal(log) == (0, False)


def _persuasion(library) -> list[str]:
    return sorted(s.id for s in library.select("verifiable") if s.verifiable.kind == "persuasion")


def test_persuasion_cannot_be_stuffed(library):
    """Issue #29's stuffing, redone for issue #57's remedies: a speech that names several remedies is no offer (the
    partner asks for one thing, and says no cue), in one line or spread over turns, so it wins nothing. The rest of
    the kind's guards (the echo script, wrong remedies, goodwill): ``tests/test_kind_persuasion.py``."""
    keys = sorted({k for s in _persuasion(library) for c in library.scenarios[s].verifiable.concerns for k in c.remedy})
    one_line = "Could you do it? I will take care of " + ", ".join(keys)
    ids = _persuasion(library)
    assert len(ids) == 24
    for sid in ids:
        setup = _setup(library, sid)
        items = [first_person(i) for i in goal_items(setup.scenario.goals[0])]
        spread = [f"I can {a}, or {b}. Would you?" for a, b in zip(items, items[1:] + items[:1], strict=True)]
        for lines in ([one_line], spread):
            log = _play(setup, lines)
            assert _goal(log) == (0, False), (sid, [t.action.argument for t in log.turns])
        stuffed = AgentAction(action_type=ActionType.speak, argument=one_line)
        facts = setup.scenario.verifiable
        assert kind_for(facts).outcome_after(facts, [], stuffed).goal == 0  # the one-step reward too
    said = [text for _, text in _partner_lines(_play(_setup(library, ids[0]), [one_line]))]
    assert "one thing" in said[0] or "really offering" in said[0]


def test_an_honest_offer_of_the_right_remedy_that_asks_wins(library):
    """Listening wins: the remedy of the concern the partner holds, as the goal lists it, asked, on every instance and
    for every concern; offered at once (the oracle's move) it scores 10."""
    for sid in _persuasion(library):
        facts: PersuasionFacts = library.scenarios[sid].verifiable
        items = goal_items(library.scenarios[sid].goals[0])
        for concern, item in zip(facts.concerns, items, strict=True):
            log = _play(_setup(library, sid, concern=concern.name), [f"I can {first_person(item)}. Could you help me?"])
            assert _goal(log) == (10, True), (sid, concern.name)


def test_every_persuasion_instance_is_won_by_listening(library):
    """Every instance, every split, every concern and first cue line can be won from the cues alone: the expert asks,
    hears the concern in the cue lines (asking again while a shared line leaves two remedies tied) and offers its
    remedy, then thanks the partner (a new scenario whose cue lines the expert's table cannot read fails here)."""
    from sotopia_env.training.experts import VerifiableExpert

    for sid in _persuasion(library):
        facts: PersuasionFacts = library.scenarios[sid].verifiable
        for concern in facts.concerns:
            for first in range(len(concern.cues)):
                setup = _setup(library, sid, concern=concern.name, first_cue=first)
                log = asyncio.run(play(setup, [VerifiableExpert(), RulePartner()], VerifiableJudge()))
                mine = [t.action.argument for t in log.turns if t.agent == setup.agent_names[0]]
                assert _goal(log)[1] and _goal(log)[0] >= 4 and mine[-1] == VerifiableExpert.THANKS, (sid, mine)


def test_bargaining_and_scheduling_resist_the_same_tricks(library):
    """What issue #29 asked to try on the other kinds; each holds. The judge pays only for a deal the partner's
    rules accept, and the learner's score is capped by its own constraint (its budget, its slots)."""
    bike = _setup(library, BIKE, **FIXED_BIKE)  # asking 450, budget 400, reservation 320, 4 rounds
    assert _goal(_play(bike, ["I'll pay $1,000,000."])) == (0, False)  # a huge offer: a deal over budget
    assert _goal(_play(bike, ["Fine, $450 then."])) == (0, False)  # the partner's own price: over budget
    every = " ".join(f"${p}" for p in range(0, 1001, 5))
    log = _play(bike, [every, "You said $450; I say $330.", "$330 or $340?"])
    assert [a for a, _ in _partner_lines(log)][:3] == ["speak"] * 3 and _goal(log) == (0, False)  # no offer at all
    log = _play(bike, ["$200", "$220", "$240", "$260", "$280", "$320"])  # offers spread over more rounds than 4
    assert _goal(log) == (0, False) and len(_partner_lines(log)) == 4  # the partner left after its 4th reply
    log = _play(bike, ["$100", "$320"])  # under half the reservation: an insult, and the partner leaves at once
    assert _goal(log) == (0, False) and _partner_lines(log)[0][0] == "leave"
    assert _goal(_play(bike, ["$320"])) == (10, True)  # the ceiling: the reservation itself, found by offering

    setup = _setup(library, "verifiable-scheduling-tutoring")
    facts: SchedulingFacts = setup.scenario.verifiable
    assert _goal(_play(setup, [" or ".join(facts.slots) + "?"])) == (0, False)  # every slot at once: no proposal
    # every slot in turn: agreed on the first the partner can do (its draw), worth something only if the learner can
    # make it, and less for each declined guess (tests/test_kind_scheduling.py holds the lister below the heuristic)
    for sid in sorted(s.id for s in library.select("verifiable") if s.verifiable.kind == "scheduling"):
        f: SchedulingFacts = library.scenarios[sid].verifiable
        log = _play(_setup(library, sid), [f"How about {slot}?" for slot in f.slots])
        drawn: SchedulingFacts = log.setup.scenario.verifiable
        first = next(i for i, slot in enumerate(f.slots) if drawn.suits(slot))
        fits = first < f.max_rounds and f.slots[first] in f.agent_slots
        assert _goal(log) == ((max(1, 10 - 4 * first), True) if fits else (0, False)), sid


def test_gymnasium_env_with_the_rule_partner(library):
    from sotopia_env.single_agent import SingleAgentSocialEnv

    bike = _setup(library, BIKE, **FIXED_BIKE)
    env = SingleAgentSocialEnv(partner=RulePartner(), setup=bike, evaluator=VerifiableJudge())
    env.reset(seed=0)
    text, reward, *_ = env.step('{"action_type": "speak", "argument": "Would you take $280?"}')
    counter = env.env.turns[-1].action.argument  # the partner answered within the step
    assert numbers_in(counter)[0] > 320 and counter in text
    _, reward, terminated, _, info = env.step('{"action_type": "speak", "argument": "Fine, $360."}')
    assert not terminated and reward == 0.0  # the partner accepted; the episode ends when someone leaves
    _, reward, terminated, _, info = env.step('{"action_type": "leave", "argument": "Thanks!"}')
    assert terminated and reward == 5.0 and info["evaluation"]["success"] is True


# -- the judge -------------------------------------------------------------------------------------


def _context(setup: EpisodeSetup, moves: list[str | None], reason: str = "everyone_left") -> EpisodeContext:
    """Learner speech on even turns; ``None`` there is a partner turn slot (its words do not matter to the judge)."""
    learner, partner = setup.agent_names
    turns = []
    for i, text in enumerate(moves):
        agent = learner if i % 2 == 0 else partner
        action = AgentAction(action_type=ActionType.speak, argument=text or "ok")
        turns.append(Turn(turn=i, agent=agent, action=action))
    return EpisodeContext(setup=setup, turns=turns, termination_reason=reason)


def _judge(context: EpisodeContext) -> dict:
    rating = asyncio.run(aevaluate_safely(make_evaluator("verifiable"), context))
    assert rating.rated, rating.error
    return {name: (r.scores["goal"].score, r.success) for name, r in rating.ratings.items()}


def test_judge_scores_bargaining_exactly(library):
    setup = _setup(library, BIKE, **FIXED_BIKE)
    learner, partner = setup.agent_names
    assert _judge(_context(setup, ["$320", None])) == {learner: (10, True), partner: (0, True)}
    assert _judge(_context(setup, ["200", None, "$360", None])) == {learner: (5, True), partner: (3, True)}
    # a deal over budget: agreed, but no success and no surplus
    assert _judge(_context(setup, ["$420", None]))[learner] == (0, False)
    # the offer crosses the reservation, but the episode ended before the partner answered: no deal
    assert _judge(_context(setup, ["200", None, "$360"], "max_turns"))[learner] == (0, False)
    # several numbers are no offer, even when one crosses
    assert _judge(_context(setup, ["300 or 380", None]))[learner] == (0, False)


def test_judge_scheduling_and_persuasion(library):
    setup = _setup(
        library,
        "verifiable-scheduling-tutoring",
        slots=["Monday morning", "Tuesday morning", "Friday evening"],
        agent_slots=["Monday morning", "Tuesday morning"],
        blocked=["monday"],
    )
    learner, _ = setup.agent_names
    # a declined guess costs 4; an agreement on a slot the learner cannot make is 0
    assert _judge(_context(setup, ["Monday morning?", None, "Tuesday morning then", None]))[learner] == (6, True)
    assert _judge(_context(setup, ["Friday evening works", None]))[learner] == (0, False)
    setup = _setup(library, "verifiable-persuasion-poster", concern="paint damage", max_rounds=2)
    assert _judge(_context(setup, ["I'll use removable putty. Could you put it up?", None]))[learner] == (10, True)
    assert _judge(_context(setup, ["Hi!", None, "Putty, then. Please?", None]))[learner] == (7, True)
    assert _judge(_context(setup, ["Could you?", None, "Please?", None]))[learner] == (0, False)


def test_judge_refuses_non_verifiable_scenarios(two_friends):
    context = EpisodeContext(setup=two_friends, turns=[], termination_reason="stale")
    rating = asyncio.run(aevaluate_safely(VerifiableJudge(), context))
    assert not rating.rated and "is not verifiable" in rating.error and "\n" not in rating.error
    with pytest.raises(ValueError, match="goal"):
        make_evaluator("verifiable", "believability")


def test_llm_evaluator_still_rates_verifiable_episodes(library):
    import json

    from sotopia_env.backends.scripted import ScriptedBackend
    from sotopia_env.evaluators import GOAL_ONLY, LLMEvaluator

    log = _play(_setup(library, BIKE), ["$330?"])
    names = log.setup.agent_names
    reply = json.dumps({n: {"goal": {"reasoning": "fine", "score": 6}} for n in names})
    context = EpisodeContext(setup=log.setup, turns=log.turns, termination_reason=log.termination_reason)
    rating = LLMEvaluator(ScriptedBackend([reply], cycle=True), GOAL_ONLY).evaluate(context)
    assert rating.rated, rating.error


# -- through the CLI, stored, and into social_turns -------------------------------------------------


def test_cli_episode_stored_rated_and_social_turns_prompts(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sotopia_env.cli.main import app
    from sotopia_env.episodes.export import export_jsonl
    from sotopia_env.episodes.store import open_store
    from sotopia_env.training.rl import build_task
    from sotopia_env.training.rl.social_turns import turn_dataset, verifiable_turn

    monkeypatch.chdir(tmp_path)
    store = f"sqlite:///{tmp_path / 'e.db'}"
    args = ["run", "--scenario", BIKE, "--agent1", "verifiable_agents:Buyer", "--agent2", "rule-partner"]
    result = CliRunner().invoke(app, [*args, "--evaluator", "verifiable", "--store", store])
    assert result.exit_code == 0, result.output
    assert "deal" in result.output and "success" in result.output
    bad = CliRunner().invoke(
        app, [*args[:2], "conflict-harsh-review", *args[3:], "--evaluator", "verifiable", "--no-store"]
    )
    assert bad.exit_code != 0 and "no 'verifiable' facts" in bad.output and "Traceback" not in bad.output

    bench = ["benchmark", "--model", "verifiable_agents:Buyer", "--partner", "rule-partner", "--evaluator"]
    result = CliRunner().invoke(
        app, [*bench, "verifiable", "--scenarios", "verifiable:bargaining:train", "--store", store]
    )
    assert result.exit_code == 0, result.output
    logs = list(open_store(store).iter())
    run_log = next(log for log in logs if log.tag == "run")
    assert run_log.status == "rated" and run_log.rating.ratings[run_log.setup.agent_names[0]].success is True
    bench_logs = [log for log in logs if log.tag != "run"]
    assert len(bench_logs) == 8 and all(log.agents[1].model == "rule-partner" for log in bench_logs)

    path = tmp_path / "episodes.jsonl"
    export_jsonl(logs, path)
    data = turn_dataset(str(path), None)
    assert set(data["scenario_id"]) == {s.setup.scenario.id for s in bench_logs}
    learners = {log.setup.agent_names[0] for log in logs}
    assert set(data["agent"]) <= learners  # the rule partner's seat gives no prompts
    assert len(data) == sum(1 for log in logs for t in log.turns if t.agent == log.setup.agent_names[0])
    # the first move of a bike episode (budget $400): its prompt states the learner's goal
    row = next(r for r in data if r["turn"] == 0 and r["scenario_id"] == BIKE)
    assert "Your goal: Buy a used road bike" in row["prompt"][0]["content"] + row["prompt"][-1]["content"]

    # the exact one-step reward of candidate first moves, on the facts that episode drew
    reservation = json.loads(row["verifiable_state"])["facts"]["reservation"]
    texts = (f"${reservation}?", f"I can pay ${reservation + 20}", f"${reservation - 1}", "$100")
    moves = [AgentAction(action_type="speak", argument=text).to_json() for text in texts]
    completions = [[{"role": "assistant", "content": m}] for m in [*moves, "no action here"]]
    scores = verifiable_turn([row["prompt"]] * 5, completions, verifiable_state=[row["verifiable_state"]] * 5)
    assert scores == [10.0, float(ten((400 - reservation - 20) / (400 - reservation))), 0.0, 0.0, None]
    assert verifiable_turn([row["prompt"]], completions[:1], verifiable_state=[""]) == [None]  # not verifiable
    task = build_task("social_turns", str(path), options={"judge": "none"})
    assert [getattr(f, "__name__", "") for f in task.rewards] == ["action_valid", "verifiable_turn"]


def test_cli_benchmark_of_the_issue_29_stuffer_wins_nothing(tmp_path, monkeypatch):
    """The exploit as reported: a custom agent, ``--agent2 rule-partner --evaluator verifiable``, every persuasion
    instance; it used to win all of them in one turn."""
    from typer.testing import CliRunner

    from sotopia_env.cli.main import app
    from sotopia_env.episodes.store import open_store

    monkeypatch.chdir(tmp_path)
    store = f"sqlite:///{tmp_path / 'e.db'}"
    args = ["benchmark", "--model", "verifiable_agents:Stuffer", "--partner", "rule-partner"]
    result = CliRunner().invoke(
        app, [*args, "--evaluator", "verifiable", "--scenarios", "verifiable:persuasion", "--store", store]
    )
    assert result.exit_code == 0, result.output
    logs = list(open_store(store).iter())
    assert len(logs) == 24 and all(log.status == "rated" for log in logs)
    assert not any(log.rating.ratings[log.setup.agent_names[0]].success for log in logs)


def test_readme_example_scenario_plays_and_is_judged(tmp_path, library):
    from readme_blocks import blocks

    from sotopia_env.library import load_library

    (yaml_text,) = [body for lang, body in blocks("Verifiable scenarios") if lang == "yaml"]
    (tmp_path / "mine.yaml").write_text(yaml_text)
    lib = load_library([tmp_path])
    assert [s.id for s in lib.select("verifiable") if s.id == "my-bargain"] == ["my-bargain"]
    setup = _setup(lib, "my-bargain")
    log = _play(setup, ["Would you take 50?", "$70 then."])  # $70: above any reservation the range can draw
    reservation = log.setup.scenario.verifiable.reservation
    assert 48 <= reservation <= 66 and _goal(log) == (ten((80 - 70) / (80 - reservation)), True)


def test_bad_hidden_facts_are_one_line_errors(tmp_path):
    from sotopia_env.library import LibraryError, load_library

    entry = """scenarios:
  - id: my-bargain
    codename: my_bargain
    scenario: Two strangers meet at a flea market; a lamp is for sale.
    goals: ["Buy the lamp.", "Sell the lamp."]
    relationship: stranger
    verifiable: {FACTS}
"""
    cases = {
        "{kind: bargaining, item: the lamp, asking_price: 90, budget: 50, reservation: 55}": "below budget 50",
        "{kind: haggling}": "does not match any of the expected tags",
        "{kind: scheduling, event: x, slots: [Monday, Monday morning], agent_slots: [Monday morning]}": (
            "'Monday' is not a weekday and a time of day"
        ),
        "{kind: scheduling, event: x, slots: [Monday morning, Tuesday evening], agent_slots: [Monday morning], "
        "blocked: [monday]}": "rules out every one of agent_slots",
        # persuasion: the cue lines are what a listener has to go on; they hint at a concern, never offer a remedy
        "{kind: persuasion, request: lend you my lamp}": "concerns': Field required",
        "{kind: persuasion, request: x, concerns: [{name: a, cues: [b, c], remedy: [d]}]}": "at least 3 items",
        "{kind: persuasion, request: x, concerns: [{name: dim, cues: [Old., New bulbs are rare.], remedy: [bulb]},"
        " {name: cost, cues: [e, f], remedy: [g]}, {name: heat, cues: [h, i], remedy: [j]}]}": (
            "holds the remedy key phrase 'bulb'"
        ),
    }
    for facts, message in cases.items():
        (tmp_path / "x.yaml").write_text(entry.replace("{FACTS}", facts))
        with pytest.raises(LibraryError, match=message) as info:
            load_library([tmp_path / "x.yaml"])
        assert "x.yaml: scenarios entry 0 (id 'my-bargain'), field 'verifiable" in str(info.value)
        assert "\n" not in str(info.value)
