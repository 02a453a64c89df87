import json

import gymnasium as gym
from gymnasium.utils.env_checker import check_env

import sotopia_env  # noqa: F401 - registers sotopia_env/Social-v0
from sotopia_env.single_agent import SingleAgentSocialEnv


def test_registered_and_passes_check_env():
    env = gym.make("sotopia_env/Social-v0")
    check_env(env.unwrapped, skip_render_check=True)


def test_text_in_text_out(two_friends):
    env = SingleAgentSocialEnv(setup=two_friends, learner_seat=1)
    obs, _ = env.reset(seed=0)
    assert "Hello." in obs  # the partner (seat 0) spoke first
    obs, reward, terminated, truncated, info = env.step(json.dumps({"action_type": "speak", "argument": "Hi!"}))
    assert info["error"] is None and reward == 0.0 and not terminated
    assert 'said: "Hi!"' in obs and "I see. Tell me more." in obs


def test_invalid_action_text_is_reported_not_raised(two_friends):
    env = SingleAgentSocialEnv(setup=two_friends)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("{broken")
    assert "malformed JSON" in info["error"] or "no JSON object" in info["error"]
    assert terminated and info["termination_reason"] == "agent_error"
    assert isinstance(obs, str)
