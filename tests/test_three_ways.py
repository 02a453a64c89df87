"""One episode, three ways: the same scenario, seed and scripted policy give the same transcript and the same
reward through ``SocialEnv`` driven by hand, through the TRL environment's tools and through the OpenEnv server."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("openenv")

from seat_agents import Whisperer, scripted_policy  # noqa: E402
from server_harness import server_thread  # noqa: E402

from sotopia_env.actions import coerce_action  # noqa: E402
from sotopia_env.agents.loading import load_agent  # noqa: E402
from sotopia_env.env import EnvConfig, SocialEnv  # noqa: E402
from sotopia_env.episode_setup import reset_for_episode  # noqa: E402
from sotopia_env.evaluators import make_evaluator  # noqa: E402
from sotopia_env.library import load_library  # noqa: E402
from sotopia_env.observation import Observation  # noqa: E402
from sotopia_env.sampler import sample_setup  # noqa: E402
from sotopia_env.server.openenv_app import SeatAction, SeatClient, create_openenv_app  # noqa: E402
from sotopia_env.training.seat_rows import SeatRow, SessionMaker  # noqa: E402
from sotopia_env.training.trl_env import SocialToolEnv, tool_call_message  # noqa: E402

MAX_TURNS = 10
CASES = [  # (scenario, seat, seed, partner spec, judge spec)
    ("verifiable-bargaining-bike", 0, 3, "rule-partner", "verifiable"),
    ("multi-party-grant-committee", 1, 5, "seat_agents:Whisperer", "rule-based"),
]


def by_hand(scenario: str, seat: int, seed: int, partner: str, judge: str):
    """``SocialEnv`` stepped directly: the policy in ``seat``, a fresh ``partner`` agent in every other seat."""
    setup = sample_setup(load_library(), seed=seed, scenario=scenario)
    env = SocialEnv(setup=setup, evaluator=make_evaluator(judge, "goal"), config=EnvConfig(max_turns=MAX_TURNS))
    mine = env.possible_agents[seat]  # the env's ids are seats
    partners = {}
    for s, agent_id in enumerate(env.possible_agents[: len(setup.characters)]):
        if s != seat:
            partners[agent_id] = Whisperer() if partner.endswith("Whisperer") else load_agent(partner)
            reset_for_episode(partners[agent_id], setup, s)
    obs, infos = env.reset(seed=seed)
    moves, rewards = 0, {}
    while env.agents:
        actions = {}
        for agent_id in env.agents:
            seen = Observation.from_env(obs[agent_id])
            if not infos[agent_id]["acting"]:
                actions[agent_id] = {"action_type": "none", "argument": ""}
            elif agent_id == mine:
                actions[agent_id], moves = scripted_policy(seen, moves), moves + 1
            else:
                actions[agent_id] = asyncio.run(partners[agent_id].act(seen))
        obs, rewards, _, _, infos = env.step(actions)
    return [t.model_dump(mode="json") for t in env.turns], rewards[mine]


def through_trl(scenario: str, seat: int, seed: int, partner: str, judge: str):
    logs = []
    env = SocialToolEnv(SessionMaker(), on_episode=lambda log, reward: logs.append(log))
    env.reset(**SeatRow(scenario=scenario, seat=seat, seed=seed, partners=[partner], evaluator=judge,
                        max_turns=MAX_TURNS).model_dump())  # fmt: skip
    moves = 0
    while not env.done:
        call = tool_call_message(coerce_action(scripted_policy(env.observation, moves)))["tool_calls"][0]["function"]
        getattr(env, call["name"])(**call["arguments"])
        moves += 1
    reward = env.get_reward()
    return [t.model_dump(mode="json") for t in logs[0].turns], reward


def through_openenv(url: str, scenario: str, seat: int, seed: int):
    async def episode():
        async with SeatClient(base_url=url) as env:
            result = await env.reset(scenario=scenario, seat=seat, seed=seed)
            moves = 0
            while not result.done:
                result = await env.step(SeatAction(**scripted_policy(result.observation, moves)))
                moves += 1
            return (await env.state()).transcript, result.reward

    return asyncio.run(episode())


@pytest.mark.parametrize("scenario, seat, seed, partner, judge", CASES)
def test_one_episode_three_ways(scenario, seat, seed, partner, judge):
    transcript, reward = by_hand(scenario, seat, seed, partner, judge)
    assert len(transcript) >= 4 and reward == reward  # played several turns; rated (not NaN)
    assert through_trl(scenario, seat, seed, partner, judge) == (transcript, reward)
    app = create_openenv_app(scenario, partner=partner, judge=judge, max_turns=MAX_TURNS)
    with server_thread(app) as url:
        assert through_openenv(url, scenario, seat, seed) == (transcript, reward)
    if scenario.startswith("multi-party"):
        assert any(t["action"].get("to") for t in transcript)  # private messages were part of it
