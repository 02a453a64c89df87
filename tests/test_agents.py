import asyncio
import io
import json

import pytest

from sotopia_env.actions import ActionType, AgentAction, action_json_schema
from sotopia_env.agents.human import HumanAgent
from sotopia_env.agents.llm import LLMAgent
from sotopia_env.agents.loading import AgentSpecError, is_custom_spec, load_agent
from sotopia_env.agents.scripted import ReplayAgent, ScriptedAgent
from sotopia_env.backends.base import GenerationSettings
from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.env import SocialEnv
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import RuleBasedEvaluator
from sotopia_env.observation import Observation
from sotopia_env.prompt import render_prompt


def first_observation(setup, seat=0):
    env = SocialEnv(setup=setup)
    obs, _ = env.reset()
    return Observation.from_env(obs[f"agent_{seat}"])


def say(text):
    return json.dumps({"action_type": "speak", "argument": text})


def test_llm_agent_parses_and_retries(two_friends):
    backend = ScriptedBackend(["I think I'll say hi", '{"action_type": "dance", "argument": ""}', say("Hi!")])
    agent = LLMAgent(backend, max_retries=2)
    action = asyncio.run(agent.act(first_observation(two_friends)))
    assert action.action_type is ActionType.speak and action.argument == "Hi!"
    assert agent.usage.calls == 3 and agent.usage.errors == 0
    request = backend.requests[0]
    assert request.json_schema == action_json_schema(first_observation(two_friends).available_actions)
    assert request.messages == render_prompt(first_observation(two_friends))


def test_llm_agent_gives_up_with_an_error_not_silence(two_friends):
    agent = LLMAgent(ScriptedBackend(["nope"], cycle=True), max_retries=1)
    action = asyncio.run(agent.act(first_observation(two_friends)))
    assert action.action_type is ActionType.none and "no valid action after 2 attempts" in action.error
    log = asyncio.run(play(two_friends, [agent, ScriptedAgent(["hi"])], RuleBasedEvaluator()))
    assert log.termination_reason == "agent_error"


def test_llm_agent_waits_when_not_its_turn(two_friends):
    backend = ScriptedBackend([])
    action = asyncio.run(LLMAgent(backend).act(first_observation(two_friends, seat=1)))
    assert action.action_type is ActionType.none and backend.requests == []


def test_prompt_shows_own_goal_and_secret_only(two_friends):
    system, user = render_prompt(first_observation(two_friends))
    me, other = two_friends.characters
    assert two_friends.scenario.goals[0] in system["content"]
    assert two_friends.scenario.goals[1] not in system["content"] + user["content"]
    assert me.secret in system["content"] and other.secret not in system["content"]
    assert '"action_type"' in system["content"] and user["content"].startswith("Conversation so far:\n")
    assert f"your move, {me.name}. Choose one action: speak," in user["content"]


def test_next_prompt_extends_the_last_one_but_for_the_ask(two_friends):
    """The system message (the ask included) stays and the conversation only grows, so prefix caches reuse all
    but the last line."""
    env = SocialEnv(setup=two_friends)
    obs, _ = env.reset(seed=0)
    first, second = env.agents  # seat ids
    before = render_prompt(obs[first])
    speak = AgentAction(action_type=ActionType.speak, argument="Hello there")
    wait = AgentAction(action_type=ActionType.none)
    obs, *_ = env.step({first: speak, second: wait})
    obs, *_ = env.step({first: wait, second: speak.model_copy(update={"argument": "Hi!"})})
    after = render_prompt(obs[first])
    assert after[0] == before[0]  # the same system message
    kept = before[1]["content"].split("\n\nIt is turn #")[0].replace("(The conversation has not started yet.)", "")
    assert after[1]["content"].startswith(kept)
    assert "Hello there" in after[1]["content"] and "Hi!" in after[1]["content"]


def test_scripted_episode_with_llm_agents_end_to_end(two_friends):
    a = LLMAgent(ScriptedBackend([say("Hello"), json.dumps({"action_type": "leave", "argument": ""})]))
    b = LLMAgent(ScriptedBackend([say("Hi back")]))
    log = asyncio.run(play(two_friends, [a, b], RuleBasedEvaluator(), specs=["m1", "m2"]))
    assert [t.action.argument for t in log.turns] == ["Hello", "Hi back", ""]
    assert log.usage[two_friends.agent_names[0]].calls == 2
    assert [s.model for s in log.agents] == ["m1", "m2"]


def test_replay_agent_replays(two_friends):
    log = asyncio.run(play(two_friends, [ScriptedAgent(["a", "b"]), ScriptedAgent(["c"])]))
    name = two_friends.agent_names[0]
    replay = asyncio.run(play(two_friends, [ReplayAgent(log.turns, name), ScriptedAgent(["c"])]))
    assert [t.action for t in replay.turns] == [t.action for t in log.turns]
    with pytest.raises(ValueError, match="no turns by"):
        ReplayAgent(log.turns, "Nobody")


def test_custom_agent_specs():
    assert is_custom_spec("custom_agents:PoliteAgent") and not is_custom_spec("openai/gpt-4o")
    assert not is_custom_spec("local:some/path")
    agent = load_agent("custom_agents:PoliteAgent")
    assert type(agent).__name__ == "PoliteAgent"
    with pytest.raises(AgentSpecError, match="module 'no_such_module' not found"):
        load_agent("no_such_module:Agent")
    with pytest.raises(AgentSpecError, match="has no attribute 'Missing'"):
        load_agent("custom_agents:Missing")
    with pytest.raises(AgentSpecError, match="has no act"):
        load_agent("custom_agents:NoAct")


def test_crashing_custom_agent_is_an_agent_error(two_friends):
    log = asyncio.run(play(two_friends, [load_agent("custom_agents:Crashing"), ScriptedAgent(["x"])]))
    assert log.termination_reason == "agent_error"
    assert "ZeroDivisionError" in log.turns[0].action.error


def test_human_agent_reads_piped_stdin(two_friends):
    out = io.StringIO()
    agent = HumanAgent(stdin=io.StringIO("shout\n1\nHello there\n"), stdout=out)
    action = asyncio.run(agent.act(first_observation(two_friends)))
    assert action.action_type is ActionType.speak and action.argument == "Hello there"
    assert "unknown action 'shout'" in out.getvalue()
    assert two_friends.scenario.goals[0] in out.getvalue()
    eof = asyncio.run(HumanAgent(stdin=io.StringIO(""), stdout=io.StringIO()).act(first_observation(two_friends)))
    assert eof.action_type is ActionType.leave


def test_llm_agent_retries_a_verbatim_repeat_sampled_and_keeps_it_if_nothing_better(two_friends):
    env = SocialEnv(setup=two_friends)
    obs, _ = env.reset()
    first, second = env.agents
    obs, *_ = env.step({first: say("Hi there!"), second: {"action_type": "none", "argument": ""}})
    seen = Observation.from_env(obs[second])
    greedy = GenerationSettings(temperature=0.0, avoid_repeats=True)

    agent = LLMAgent(ScriptedBackend([say("Hi there!"), say("Hello, you.")]), settings=greedy)
    action = asyncio.run(agent.act(seen))
    assert action.argument == "Hello, you." and agent.usage.calls == 2 and agent.usage.errors == 0
    assert [r.temperature for r in agent.backend.requests] == [0.0, greedy.retry_temperature]
    assert agent.backend.requests[0].avoid_copying == ("Hi there!",)  # the local backend won't copy it

    stuck = LLMAgent(ScriptedBackend([say("Hi there!")], cycle=True), settings=greedy, max_retries=1)
    action = asyncio.run(stuck.act(seen))
    assert action.argument == "Hi there!" and action.error is None and stuck.usage.calls == 2

    off = LLMAgent(ScriptedBackend([say("Hi there!")], cycle=True), settings=GenerationSettings(temperature=0.0))
    assert asyncio.run(off.act(seen)).argument == "Hi there!" and off.usage.calls == 1
