import asyncio
import json
import math

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import sotopia_env  # noqa: F401 - registers sotopia_env/Social-v0
from sotopia_env.agents.llm import LLMAgent
from sotopia_env.agents.scripted import ScriptedAgent
from sotopia_env.backends.base import GenerationSettings
from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import GOAL_ONLY, LLMEvaluator, RuleBasedEvaluator
from sotopia_env.observation import Observation
from sotopia_env.prompt import prompt_text, render_prompt
from sotopia_env.single_agent import CannedPartner, SingleAgentSocialEnv

PARTNER_LINES = CannedPartner().lines


def speak(text: str) -> str:
    return json.dumps({"action_type": "speak", "argument": text})


def goal_reply(first: int, second: int) -> str:
    """A judge's reply giving seat 0 and seat 1 different goal scores (so a seat mix-up shows)."""
    scores = enumerate([first, second])
    return json.dumps({f"agent_{i + 1}": {"goal": {"reasoning": "r", "score": s}} for i, s in scores})


def play_through(env: SingleAgentSocialEnv, action: str = speak("Fine."), seed: int = 0):
    """Reset, then the same action until the episode ends. Returns the list of step results."""
    env.reset(seed=seed)
    steps = [env.step(action)]
    while not (steps[-1][2] or steps[-1][3]):
        steps.append(env.step(action))
    return steps


def test_registered_and_passes_check_env():
    env = gym.make("sotopia_env/Social-v0")
    check_env(env.unwrapped, skip_render_check=True)
    rated = gym.make("sotopia_env/Social-v0", evaluator=RuleBasedEvaluator(), reward_fns=[lambda o, a, i: 0.5])
    check_env(rated.unwrapped, skip_render_check=True)


def test_sampled_actions_are_valid_and_seeded(two_friends):
    env = SingleAgentSocialEnv(setup=two_friends)
    env.action_space.seed(3)
    first = [env.action_space.sample() for _ in range(20)]
    env.action_space.seed(3)
    assert first == [env.action_space.sample() for _ in range(20)]
    assert all(env.action_space.contains(a) for a in first)
    types = {json.loads(a)["action_type"] for a in first}
    assert "leave" not in types and len(types) > 1
    env.reset(seed=0)
    *_, info = env.step(first[0])
    assert info["error"] is None


def test_text_in_text_out(two_friends):
    env = SingleAgentSocialEnv(setup=two_friends, learner_seat=1)
    obs, info = env.reset(seed=0)
    assert "Hello." in obs and obs == prompt_text(info["messages"])  # the partner (seat 0) spoke first
    assert obs.startswith("system: You are playing") and obs.endswith("assistant: ")
    obs, reward, terminated, truncated, info = env.step(speak("Hi!"))
    assert info["error"] is None and reward == 0.0 and info["rated"] and not terminated
    assert 'said: "Hi!"' in obs and "I see. Tell me more." in obs


def test_invalid_action_text_is_reported_not_raised(two_friends):
    env = SingleAgentSocialEnv(setup=two_friends)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("{broken")
    assert "malformed JSON" in info["error"] or "no JSON object" in info["error"]
    assert terminated and info["termination_reason"] == "agent_error"
    assert isinstance(obs, str)


@pytest.mark.parametrize(
    "seat, order", [(0, "round-robin"), (1, "round-robin"), (1, "simultaneous"), (0, "random"), (1, "random")]
)
def test_observation_is_exactly_what_an_llm_agent_sends(two_friends, seat, order):
    """The learner's policy is an LLMAgent; the env's observations equal what it sent to its backend at every
    turn, and what the same LLMAgent sends when the episode is played by the runner (no gym env at all)."""
    config = EnvConfig(max_turns=7, action_order=order)
    replies = [speak(f"Line {i}.") for i in range(8)]

    env = SingleAgentSocialEnv(setup=two_friends, learner_seat=seat, config=config)
    backend = ScriptedBackend(replies)
    learner = LLMAgent(backend, max_retries=0)
    obs, info = env.reset(seed=5)
    seen, done = [], False
    while not done:
        seen.append((obs, info["messages"]))
        action = asyncio.run(learner.act(Observation.from_env(env.env.observe(env.learner))))
        obs, _, terminated, truncated, info = env.step(action.model_dump_json())
        assert info["error"] is None
        done = terminated or truncated
    sent = [r.messages for r in backend.requests]
    assert len(sent) == len(seen) >= 2
    assert [messages for _, messages in seen] == sent
    assert [text for text, _ in seen] == [prompt_text(m) for m in sent]

    runner_backend = ScriptedBackend(replies)
    agents = [LLMAgent(runner_backend, max_retries=0), ScriptedAgent(PARTNER_LINES)]
    log = asyncio.run(play(two_friends, agents if seat == 0 else agents[::-1], config=config, seed=5))
    assert [r.messages for r in runner_backend.requests] == sent
    assert [t.action for t in log.turns] == [t.action for t in env.env.turns]


def test_tokenizer_renders_its_chat_template(two_friends):
    class Template:
        chat_template = "x"

        def apply_chat_template(self, messages, add_generation_prompt, tokenize):
            assert add_generation_prompt and not tokenize
            return "|".join(m["role"] + ">" + m["content"] for m in messages) + "|assistant>"

    env = SingleAgentSocialEnv(setup=two_friends, tokenizer=Template())
    obs, info = env.reset(seed=0)
    system, user = render_prompt(Observation.from_env(env.env.observe(env.learner)))
    assert info["messages"] == [system, user]
    assert obs == f"system>{system['content']}|user>{user['content']}|assistant>"


def test_terminal_reward_is_the_evaluators_score_for_the_learner(two_friends):
    for seat, expected in ((0, 3.0), (1, 8.0)):
        judge = LLMEvaluator(ScriptedBackend([goal_reply(3, 8)]), GOAL_ONLY)
        env = SingleAgentSocialEnv(setup=two_friends, learner_seat=seat, evaluator=judge)
        steps = play_through(env)
        *middle, (obs, reward, terminated, truncated, info) = steps
        assert middle and all(s[1] == 0.0 and s[4]["rated"] for s in middle)
        assert reward == expected and info["env_reward"] == expected and info["rated"]
        assert info["evaluation"]["goal"] == {"score": int(expected), "reasoning": "r"}
        assert terminated and info["termination_reason"] == "everyone_left"  # the canned partner left


@pytest.mark.parametrize(
    "evaluator, error",
    [
        (None, "no evaluator configured"),
        (LLMEvaluator(ScriptedBackend(["not json"], cycle=True), GOAL_ONLY, max_retries=1), "no valid rating"),
    ],
)
def test_unrated_is_nan_never_zero(two_friends, evaluator, error):
    env = SingleAgentSocialEnv(setup=two_friends, evaluator=evaluator, reward_fns=[lambda o, a, i: 1.0])
    *middle, (obs, reward, terminated, truncated, info) = play_through(env)
    assert all(s[1] == 1.0 and s[4]["rated"] for s in middle)
    assert math.isnan(reward) and math.isnan(info["env_reward"])  # shaping never hides the missing rating
    assert info["rated"] is False and info["shaping"] == [1.0]
    assert error in info["evaluation"]["error"]


def test_shaping_hooks_are_summed_and_unrated_ones_skipped(two_friends):
    calls = []

    def record(obs, action, info):
        calls.append((obs, action, dict(info)))
        return None

    def length_penalty(obs, action, info):
        return -0.01 * len(json.loads(action)["argument"])

    judge = LLMEvaluator(ScriptedBackend([goal_reply(6, 2)]), GOAL_ONLY)
    fns = [lambda o, a, i: 1.0, record, lambda o, a, i: math.nan, length_penalty]
    env = SingleAgentSocialEnv(setup=two_friends, evaluator=judge, reward_fns=fns)
    steps = play_through(env, speak("Twelve chars"))
    for _, reward, _, _, info in steps[:-1]:
        assert info["shaping"] == [1.0, None, None, pytest.approx(-0.12)]
        assert reward == pytest.approx(0.88) and info["env_reward"] == 0.0 and info["rated"]
    obs, reward, _, _, info = steps[-1]
    assert reward == pytest.approx(6.88) and info["env_reward"] == 6.0 and info["rated"]
    assert [c[0] for c in calls] == [s[0] for s in steps] and {c[1] for c in calls} == {speak("Twelve chars")}
    assert "evaluation" in calls[-1][2] and calls[-1][2]["messages"] == info["messages"]

    only_none = SingleAgentSocialEnv(setup=two_friends, reward_fns=[lambda o, a, i: None])
    only_none.reset(seed=0)
    _, reward, _, _, info = only_none.step(speak("Hi"))
    assert reward == 0.0 and info["shaping"] == [None] and info["rated"]  # mid-episode: no rating is due yet


@pytest.mark.model
def test_real_embedded_llm_agent_as_learner(embedded_model_path, two_friends):
    from sotopia_env.backends.resolve import resolve_backend

    class Recording:
        def __init__(self, inner):
            self.inner, self.model, self.requests = inner, inner.model, []

        async def generate(self, requests):
            self.requests += requests
            return await self.inner.generate(requests)

    local = resolve_backend("smollm2-135m")
    backend = Recording(local)
    learner = LLMAgent(backend, settings=GenerationSettings(temperature=0.0, max_new_tokens=60), max_retries=0)
    config = EnvConfig(max_turns=4)  # the learner (seat 0) acts on turns 0 and 2 unless someone leaves first
    env = SingleAgentSocialEnv(setup=two_friends, config=config, tokenizer=local.tokenizer)
    obs, info = env.reset(seed=0)
    done = False
    while not done:
        action = asyncio.run(learner.act(Observation.from_env(env.env.observe(env.learner))))
        sent = backend.requests[-1].messages
        assert info["messages"] == sent and obs == prompt_text(sent, local.tokenizer)
        assert obs.startswith("<|im_start|>system") and obs.endswith("<|im_start|>assistant\n")
        obs, _, terminated, truncated, info = env.step(action.model_dump_json())
        done = terminated or truncated
    assert len(backend.requests) == sum(t.agent == env.learner_name for t in env.env.turns) >= 1


def test_an_async_partner_inside_a_running_event_loop(two_friends):
    """The episode runs on the env's own event loop (``seat_driver.drive``, as ``play``'s): an async partner is
    awaited there, and the env works when called from inside a running loop (a notebook's)."""

    async def main():
        env = SingleAgentSocialEnv(partner=ScriptedAgent(PARTNER_LINES), setup=two_friends, learner_seat=1)
        obs, info = env.reset(seed=0)
        assert "Hello." in obs and info["observation"].my_turn
        obs, reward, terminated, truncated, info = env.step(speak("Hi!"))
        assert info["error"] is None and "I see. Tell me more." in obs and not terminated
        env.close()

    asyncio.run(main())
