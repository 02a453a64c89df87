"""N seats and private messages: who observes an addressed move, per-pair relationships, what is stored."""

from __future__ import annotations

import asyncio
import json

import pytest

from sotopia_env.actions import AgentAction, action_json_schema, parse_action
from sotopia_env.agents.scripted import ScriptedAgent
from sotopia_env.env import EnvConfig, SocialEnv
from sotopia_env.episodes.export import export_jsonl, from_hf_dataset, import_jsonl, to_hf_dataset
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import RuleBasedEvaluator
from sotopia_env.observation import Observation, background_for
from sotopia_env.profiles import Relationship
from sotopia_env.prompt import render_prompt
from sotopia_env.sampler import sample_setups
from sotopia_env.training.dataset import Sample, sample_examples

WHISPER = "Between us, I will not clean on Thursdays."


@pytest.fixture
def three(library):
    (scenario,) = library.select(["multi-party-chore-rota"])
    return sample_setups([scenario], library, 1, seed=0)[0]


SEATS = ("agent_0", "agent_1", "agent_2")


def _say(text: str, to: list[str] | None = None) -> AgentAction:
    return AgentAction(action_type="speak", argument=text, to=to)


def test_a_whisper_reaches_only_its_recipients_and_never_leaks(three) -> None:
    a, b, c = three.agent_names  # the characters: ``to`` and the transcript name them
    sa, sb, sc = SEATS  # the env's ids
    env = SocialEnv(setup=three, config=EnvConfig(max_turns=6))
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step({sa: _say(WHISPER, to=[b]), sb: {"action_type": "none"}, sc: {"action_type": "none"}})
    assert env.turns[-1].audience == [a, b] and env.turns[-1].action.to == [b]
    for seat in (sa, sb):
        assert WHISPER in obs[seat]["text"]
        assert f"said to {b}" in obs[seat]["text"]
    assert WHISPER not in obs[sc]["text"] and not obs[sc]["history"]
    obs, *_ = env.step({sa: {"action_type": "none"}, sb: _say("Sure, noted."), sc: {"action_type": "none"}})
    assert "Sure, noted." in obs[sc]["text"] and WHISPER not in obs[sc]["text"]  # later public talk does not leak it
    for seat, seen in ((sa, True), (sb, True), (sc, False)):
        prompt = render_prompt(Observation.from_env(obs[seat]))
        assert (WHISPER in prompt[1]["content"]) is seen
        assert all(WHISPER not in m["content"] for m in prompt if m["role"] == "system")


def test_training_examples_of_a_non_recipient_never_hold_the_whisper(three) -> None:
    a, b, c = three.agent_names
    agents = [
        ScriptedAgent([_say(WHISPER, to=[b]), "Shall we agree on Monday?"]),
        ScriptedAgent(["I'm fine with that.", "Monday works."]),
        ScriptedAgent(["What about the bins?", "Good."]),
    ]
    log = asyncio.run(play(three, agents, RuleBasedEvaluator(), EnvConfig(max_turns=6)))
    assert log.rating is not None and log.rating.rated and set(log.rating.ratings) == {a, b, c}  # everyone rated
    seen = {}
    for seat, name in enumerate(three.agent_names):
        examples = sample_examples(Sample(log=log, seat=seat))
        assert examples, name
        seen[name] = any(WHISPER in m["content"] for e in examples for m in e.prompt)
    assert seen == {a: True, b: True, c: False}  # a's second turn and b's turns saw it; c's never did


def test_a_to_that_names_nobody_someone_absent_or_oneself_is_an_agent_error(three) -> None:
    a, b, c = three.agent_names
    sa, sb, sc = SEATS
    for to, reason in (([], "names nobody"), (["Nobody Here"], "'Nobody Here' is not someone"), ([a], "is not")):
        env = SocialEnv(setup=three, config=EnvConfig(max_turns=6, max_agent_errors=3))
        env.reset(seed=0)
        _, _, _, _, infos = env.step({sa: _say("Hi", to=to), sb: {"action_type": "none"}, sc: {"action_type": "none"}})
        assert env.errors[a] == 1 and reason in infos[sa]["last_error"], infos[sa]["last_error"]
        assert env.turns[-1].action.error and env.turns[-1].audience is None
    env = SocialEnv(setup=three, config=EnvConfig(max_turns=6, max_agent_errors=3))
    env.reset(seed=0)
    env.step({sa: AgentAction(action_type="leave"), sb: {"action_type": "none"}, sc: {"action_type": "none"}})
    env.step({sa: {"action_type": "none"}, sb: _say("Bye", to=[a]), sc: {"action_type": "none"}})  # a has left
    assert env.errors[b] == 1 and "is not someone" in env._last_error[b]


def test_the_schema_lists_only_who_can_be_addressed(three) -> None:
    a, b, c = three.agent_names
    sa, sb, sc = SEATS
    env = SocialEnv(setup=three)
    obs, _ = env.reset(seed=0)
    first = Observation.from_env(obs[sa])
    assert first.recipients == [b, c] and Observation.from_env(obs[sb]).recipients == []  # not b's turn
    schema = action_json_schema(first.available_actions, first.recipients)
    for branch in schema["anyOf"]:
        assert branch["properties"]["to"]["items"]["enum"] == [b, c] and "to" not in branch["required"]
    assert all("to" not in b["properties"] for b in action_json_schema()["anyOf"])  # two seats: as before
    assert parse_action(json.dumps({"action_type": "speak", "argument": "Hi", "to": [c]})).to == [c]
    env.step({sa: AgentAction(action_type="leave"), sb: {"action_type": "none"}, sc: {"action_type": "none"}})
    assert Observation.from_env(env.observe(sb)).recipients == []  # one other left: nothing to choose between


def test_each_pair_has_its_own_relationship(library) -> None:
    (scenario,) = library.select(["multi-party-family-holiday"])
    setup = sample_setups([scenario], library, 1, seed=0)[0]
    parent, child, partner = setup.characters
    assert setup.relationship_between(0, 2) == Relationship.acquaintance
    assert setup.relationship_between(1, 2) == Relationship.romantic_relationship
    seen_by_parent = background_for(setup, 0)
    assert f"({partner.name}), an acquaintance of yours" in seen_by_parent
    assert f"({child.name}), a member of your family" in seen_by_parent
    assert partner.big_five.openness and "Personality" in background_for(setup, 1).split(partner.name, 2)[-1]
    line_about_partner = next(
        line for line in seen_by_parent.splitlines() if line.startswith(f"Another participant ({partner.name})")
    )
    assert "Personality" not in line_about_partner  # an acquaintance sees public facts only


def test_two_seat_episodes_store_no_new_keys(two_friends) -> None:
    log = asyncio.run(
        play(two_friends, [ScriptedAgent(["Hi"]), ScriptedAgent(["Hello"])], None, EnvConfig(max_turns=2))
    )
    stored = json.loads(log.model_dump_json())
    assert not {"pair_relationships"} & set(stored["setup"])
    assert not {"game", "relationships"} & set(stored["setup"]["scenario"])
    assert all(set(t) == {"turn", "agent", "action"} and "to" not in t["action"] for t in stored["turns"])


def test_export_then_import_keeps_who_heard_what(three, tmp_path) -> None:
    a, b, c = three.agent_names
    agents = [ScriptedAgent([_say(WHISPER, to=[b])]), ScriptedAgent(["Hm."]), ScriptedAgent(["Hello all."])]
    log = asyncio.run(play(three, agents, None, EnvConfig(max_turns=3)))
    path = tmp_path / "episodes.jsonl"
    export_jsonl([log], path)
    (back,) = list(import_jsonl(path))
    assert back.turns == log.turns and back.setup == log.setup
    assert back.turns[0].audience == [a, b] and back.turns[0].action.to == [b]
    row = to_hf_dataset([log])[0]["transcript"][0]
    assert row["to"] == [b] and row["audience"] == [a, b]
    assert from_hf_dataset(to_hf_dataset([log]))[0].turns == log.turns


def test_the_llm_judge_rates_every_seat_and_leaves_an_unreadable_one_unrated(three) -> None:
    import math

    from sotopia_env.backends.scripted import ScriptedBackend
    from sotopia_env.evaluators import GOAL_ONLY, EpisodeContext
    from sotopia_env.evaluators.llm import LLMEvaluator, evaluation_prompt

    a, b, c = three.agent_names
    log = asyncio.run(
        play(three, [ScriptedAgent([_say(WHISPER, to=[b])]), ScriptedAgent(["Ok."]), ScriptedAgent(["Hi."])])
    )
    context = EpisodeContext(setup=three, turns=log.turns, termination_reason=log.termination_reason)
    prompt = evaluation_prompt(context, GOAL_ONLY)[1]["content"]
    assert f"said to {b}" in prompt and WHISPER in prompt  # the judge sees everything, and who heard it
    assert all(g in prompt for g in three.scenario.goals)

    def goal(score) -> dict:
        return {"goal": {"reasoning": "because", "score": score}}

    whole = json.dumps({"agent_1": goal(7), "agent_2": goal(4), "agent_3": goal(9)})
    rating = LLMEvaluator(ScriptedBackend([whole]), GOAL_ONLY).evaluate(context)
    assert [rating.reward(n) for n in (a, b, c)] == [7, 4, 9] and rating.unrated is None
    broken = json.dumps({"agent_1": goal(7), "agent_2": goal(11), "agent_3": goal(9)})  # 11 is out of range
    rating = LLMEvaluator(ScriptedBackend([broken], cycle=True), GOAL_ONLY, max_retries=1).evaluate(context)
    assert rating.rated and rating.reward(a) == 7 and rating.reward(c) == 9 and math.isnan(rating.reward(b))
    assert (
        list(rating.unrated) == [b] and "outside 0..10" in rating.unrated[b] and "after 2 attempts" in rating.unrated[b]
    )
    assert "unrated" in json.loads(rating.model_dump_json()) and b not in rating.ratings


def test_benchmark_jobs_rotate_the_model_through_every_seat(library) -> None:
    from sotopia_env.episodes.jobs import versus_jobs

    scenarios = library.select(["multi-party-grant-committee"])
    jobs = versus_jobs(scenarios, library, "model", "partner", 1)
    assert sorted(tuple(j.agent_specs) for j in jobs) == sorted(
        tuple("model" if seat == k else "partner" for seat in range(4)) for k in range(4)
    )
    assert len(versus_jobs(scenarios, library, "model", "model", 1)) == 1
