import asyncio
import math
import warnings

import pytest
from pettingzoo.test import parallel_api_test

from sotopia_env.actions import ACTION_TYPES, AgentAction
from sotopia_env.agents.scripted import ScriptedAgent
from sotopia_env.env import EnvConfig, SocialEnv
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import EpisodeRating, RuleBasedEvaluator
from sotopia_env.observation import Observation, background_for, build_observation, labels_for

NONE = {"action_type": "none", "argument": ""}


def test_parallel_api(library):
    env = SocialEnv(evaluator=RuleBasedEvaluator(), library=library)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PettingZoo reports API slips as warnings
        parallel_api_test(env, num_cycles=200)


def test_observations_live_in_their_space(two_friends):
    env = SocialEnv(setup=two_friends)
    obs, _ = env.reset()
    a, b = env.possible_agents
    for _ in range(5):
        for agent in env.agents:
            assert env.observation_space(agent).contains(obs[agent])
        obs, *_ = env.step(
            {a: {"action_type": "speak", "argument": "héllo ✓"}, b: {"action_type": 1, "argument": "hi"}}
        )
    parsed = Observation.from_env(obs[a])
    assert parsed.turn == 5 and len(parsed.history) == 5
    assert parsed.history[0].argument == "héllo ✓"


def test_observation_rendered_turn_by_turn_equals_one_rendered_whole(two_friends):
    """The env renders each past turn once per seat; what it returns must be what rendering the whole history
    at that step gives, for every seat and step, and a caller editing its copy changes nothing later."""
    env = SocialEnv(setup=two_friends, config=EnvConfig(stale_turns=10))
    env.reset()
    a, b = env.possible_agents
    for step, kind in enumerate(["speak", "non-verbal communication", "action", "speak", "action", "speak"]):
        moves = {seat: NONE for seat in env.agents} | {
            seat: {"action_type": kind, "argument": f"m{step}"} for seat in env.acting
        }
        obs, *_ = env.step(moves)
        for index, seat in enumerate(env.possible_agents):
            available = [t for t, on in zip(ACTION_TYPES, obs[seat]["available_actions"], strict=True) if on]
            background, labels = background_for(two_friends, index), labels_for(two_friends, index)
            whole = build_observation(env.name_of(seat), background, labels, env.turns, env.turn, available)
            assert obs[seat]["text"] == whole["text"] and obs[seat]["history"] == whole["history"]
            assert len(whole["history"]) == step + 1
        obs[a]["history"][0]["argument"] = "edited by the caller"
    assert env.observe(a)["history"][0]["argument"] == "m0"
    assert '"m5"' in env.observe(b)["text"]


def run(setup, actions_a, actions_b, config=None, evaluator=None):
    agents = [ScriptedAgent(actions_a), ScriptedAgent(actions_b)]
    return asyncio.run(play(setup, agents, evaluator or RuleBasedEvaluator(), config))


def test_terminates_when_everyone_left(two_friends):
    log = run(two_friends, ["Hi", "Bye"], ["Hello"])
    assert log.termination_reason == "everyone_left"
    assert [t.action.action_type.value for t in log.turns] == ["speak", "speak", "speak", "leave"]
    assert log.status == "rated"


def test_stale_talk(two_friends):
    log = run(two_friends, [NONE] * 10, [NONE] * 10, EnvConfig(stale_turns=3))
    assert log.termination_reason == "stale"
    assert len(log.turns) == 3


def test_agent_error_is_not_stale(two_friends):
    broken = AgentAction.failed("model produced garbage")
    log = run(two_friends, ["Hi", broken, broken], ["Hello"] * 5, EnvConfig(stale_turns=1, max_agent_errors=2))
    assert log.termination_reason == "agent_error"
    assert log.agent_errors[two_friends.agent_names[0]] == 2


def test_truncation_at_max_turns(two_friends):
    env = SocialEnv(setup=two_friends, config=EnvConfig(max_turns=4), evaluator=RuleBasedEvaluator())
    env.reset()
    a, b = env.possible_agents
    for i in range(4):
        obs, rewards, terms, truncs, infos = env.step({a: {"action_type": "speak", "argument": f"line {i}"}, b: NONE})
    assert truncs == {a: True, b: True} and terms == {a: False, b: False}
    assert infos[a]["termination_reason"] == "max_turns"
    assert rewards[a] == infos[a]["evaluation"]["goal"]["score"] == 4
    assert env.agents == []
    with pytest.raises(RuntimeError, match="finished episode"):
        env.step({})


def test_round_robin_ignores_the_idle_agent(two_friends):
    env = SocialEnv(setup=two_friends)
    _, infos = env.reset()
    a, b = env.possible_agents
    assert infos[a]["acting"] and not infos[b]["acting"]
    _, _, _, _, infos = env.step({a: {"action_type": "speak", "argument": "x"}, b: {"action_type": "leave"}})
    assert [t.agent for t in env.turns] == [env.name_of(a)]  # the transcript keeps the characters' names
    assert infos[b]["acting"]


def test_simultaneous_and_random_orders(two_friends):
    env = SocialEnv(setup=two_friends, config=EnvConfig(action_order="simultaneous"))
    env.reset()
    a, b = env.possible_agents
    env.step({a: {"action_type": "speak", "argument": "1"}, b: {"action_type": "speak", "argument": "2"}})
    assert [t.agent for t in env.turns] == two_friends.agent_names

    def actors(seed):
        env = SocialEnv(setup=two_friends, config=EnvConfig(action_order="random"))
        _, infos = env.reset(seed=seed)
        out = []
        for _ in range(12):
            acting = [n for n in env.agents if infos[n]["acting"]]
            out += acting
            _, _, _, _, infos = env.step({n: {"action_type": "speak", "argument": "."} for n in env.agents})
        return out

    assert actors(1) == actors(1)
    assert set(actors(1)) == {a, b}
    assert actors(1) != [a, b] * 6 or actors(2) != [a, b] * 6
    with pytest.raises(ValueError, match="action_order"):
        EnvConfig(action_order="alphabetical")


def test_invalid_action_counts_as_error(two_friends):
    env = SocialEnv(setup=two_friends, config=EnvConfig(max_agent_errors=2))
    env.reset()
    a, b = env.possible_agents
    _, _, terms, _, infos = env.step({a: "not json", b: NONE})
    assert infos[a]["agent_errors"] == 1 and "no JSON object" in infos[a]["last_error"]
    assert not terms[a]
    with pytest.raises(ValueError, match="no action given"):
        env.step({a: NONE})


class ExplodingEvaluator(RuleBasedEvaluator):
    async def aevaluate(self, context) -> EpisodeRating:
        raise RuntimeError("judge offline")


def test_failed_evaluation_is_nan_not_zero(two_friends):
    env = SocialEnv(setup=two_friends, evaluator=ExplodingEvaluator(), config=EnvConfig(max_turns=1))
    env.reset()
    a, b = env.possible_agents
    _, rewards, _, _, infos = env.step({a: {"action_type": "speak", "argument": "x"}, b: NONE})
    assert math.isnan(rewards[a]) and math.isnan(rewards[b])
    assert "judge offline" in infos[a]["evaluation"]["error"]


def _background(setup, seat=0):
    env = SocialEnv(setup=setup)
    obs, _ = env.reset()
    return obs[f"agent_{seat}"]["text"]


@pytest.mark.parametrize(
    "relationship, sees_name, sees_public, sees_personality",
    [
        ("stranger", False, False, False),
        ("know_by_name", True, False, False),
        ("acquaintance", True, True, False),
        ("friend", True, True, True),
        ("family_member", True, True, True),
    ],
)
def test_visibility_follows_relationship(library, setup_at, relationship, sees_name, sees_public, sees_personality):
    setup = setup_at(library, relationship)
    me, other = setup.characters
    text = _background(setup)
    assert (other.name in text) == sees_name
    assert (other.public_info in text) == sees_public
    assert (f"openness {other.big_five.openness}" in text) == sees_personality
    assert other.secret not in text  # never the partner's secret
    assert me.secret in text  # always one's own
    assert setup.scenario.goals[0] in text and setup.scenario.goals[1] not in text


def test_stranger_history_hides_the_name(library, setup_at):
    setup = setup_at(library, "stranger")
    env = SocialEnv(setup=setup)
    env.reset()
    a, b = env.possible_agents
    obs, *_ = env.step({a: {"action_type": "speak", "argument": "hello"}, b: NONE})
    assert env.name_of(a) not in obs[b]["text"]
    assert Observation.from_env(obs[b]).history[0].agent == "the other person"


def test_env_rates_through_the_same_call_as_the_episode_runner(two_friends):
    """The env's terminal reward comes from ``aevaluate_safely`` (as ``episodes.runner.rate``), never a second
    sync copy; it works from inside a running event loop too."""
    import asyncio

    from sotopia_env.episodes.runner import play

    class AsyncOnly(RuleBasedEvaluator):
        def evaluate(self, context):
            raise AssertionError("the env must rate through aevaluate_safely")

    def last_step() -> tuple[dict, dict]:
        env = SocialEnv(setup=two_friends, evaluator=AsyncOnly(), config=EnvConfig(max_turns=1))
        env.reset()
        a, _ = env.possible_agents
        _, rewards, _, _, infos = env.step({a: {"action_type": "speak", "argument": "x"}, env.possible_agents[1]: NONE})
        return rewards, infos

    async def inside_a_loop() -> tuple[dict, dict]:
        return last_step()

    for rewards, infos in (last_step(), asyncio.run(inside_a_loop())):
        assert rewards == {"agent_0": 2.0, "agent_1": 0.0}
        assert infos["agent_0"]["evaluation"]["goal"]["score"] == 2
    from sotopia_env.agents.scripted import ScriptedAgent

    log = asyncio.run(play(two_friends, [ScriptedAgent(["x"]), ScriptedAgent([])], AsyncOnly(), EnvConfig(max_turns=1)))
    assert log.score(two_friends.agent_names[0], "goal") == rewards["agent_0"]  # stored ratings keep names
