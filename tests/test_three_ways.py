"""One episode, every way of playing a seat: the same scenario, seed and scripted policy give the same transcript,
the same reward and the same observations (the one typed ``Observation`` the policy acts on) through ``SocialEnv``
driven by hand, through the single-agent Gymnasium env (two seats), through the TRL environment's tools (verl's
loop plays through the same ``SeatSession``), through the OpenEnv server's client, and through the TRL environment
that plays on a remote OpenEnv server (``training.openenv_client``); the two TRL environments also answer the model
with the same text."""

from __future__ import annotations

import asyncio
import json

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
from sotopia_env.prompt import render_prompt  # noqa: E402
from sotopia_env.sampler import sample_setup  # noqa: E402
from sotopia_env.server.openenv_app import SeatAction, SeatClient, as_observation, create_openenv_app  # noqa: E402
from sotopia_env.single_agent import SingleAgentSocialEnv  # noqa: E402
from sotopia_env.training.openenv_client import RemoteSocialToolEnv  # noqa: E402
from sotopia_env.training.seat_rows import SeatRow, SessionMaker  # noqa: E402
from sotopia_env.training.trl_env import SocialToolEnv, tool_call_message  # noqa: E402

MAX_TURNS = 10
CASES = [  # (scenario, seat, seed, partner spec, judge spec)
    ("verifiable-persuasion-garden", 0, 0, "rule-partner", "verifiable"),  # bargaining's partner now leaves at $60
    ("multi-party-grant-committee", 1, 5, "seat_agents:Whisperer", "rule-based"),
]


def by_hand(scenario: str, seat: int, seed: int, partner: str, judge: str):
    """``SocialEnv`` stepped directly: the policy in ``seat``, a fresh ``partner`` agent in every other seat."""
    setup = sample_setup(load_library(), seed=seed, scenario=scenario).drawn_with(seed)  # as play draws it
    env = SocialEnv(setup=setup, evaluator=make_evaluator(judge, "goal"), config=EnvConfig(max_turns=MAX_TURNS))
    mine = env.possible_agents[seat]  # the env's ids are seats
    partners = {}
    for s, agent_id in enumerate(env.possible_agents[: len(setup.characters)]):
        if s != seat:
            partners[agent_id] = Whisperer() if partner.endswith("Whisperer") else load_agent(partner)
            reset_for_episode(partners[agent_id], setup, s, seed)
    obs, infos = env.reset(seed=seed)
    moves, rewards, seen_by_policy = 0, {}, []
    while env.agents:
        actions = {}
        for agent_id in env.agents:
            seen = Observation.from_env(obs[agent_id])
            if not infos[agent_id]["acting"]:
                actions[agent_id] = {"action_type": "none", "argument": ""}
            elif agent_id == mine:
                seen_by_policy.append(seen)
                actions[agent_id], moves = scripted_policy(seen, moves), moves + 1
            else:
                actions[agent_id] = asyncio.run(partners[agent_id].act(seen))
        obs, rewards, _, _, infos = env.step(actions)
    return [t.model_dump(mode="json") for t in env.turns], rewards[mine], seen_by_policy


def through_gym(scenario: str, seat: int, seed: int, partner: str, judge: str):
    """The Gymnasium env (two seats): the policy's moves as action text, the partner fixed."""
    setup = sample_setup(load_library(), seed=seed, scenario=scenario).drawn_with(seed)
    env = SingleAgentSocialEnv(
        partner=load_agent(partner), learner_seat=seat, setup=setup, evaluator=make_evaluator(judge, "goal"),
        config=EnvConfig(max_turns=MAX_TURNS),
    )  # fmt: skip
    text, info = env.reset(seed=seed)
    seen_by_policy, reward, done = [], None, False
    while not done:
        seen_by_policy.append(info["observation"])
        assert info["messages"] == render_prompt(info["observation"])  # the text is a rendering of the observation
        move = scripted_policy(info["observation"], len(seen_by_policy) - 1)
        text, reward, terminated, truncated, info = env.step(json.dumps(move))
        done = terminated or truncated
    env.close()
    return [t.model_dump(mode="json") for t in env.env.turns], reward, seen_by_policy


def play_tools(env: SocialToolEnv, row: dict):
    """The scripted policy through a TRL environment's tools, as TRL calls them: the text the model is given
    (``reset``'s answer, then each tool's) and the observations the policy acted on."""
    texts, seen_by_policy = [env.reset(**row)], []
    while not env.done:
        seen_by_policy.append(env.observation)
        move = scripted_policy(env.observation, len(seen_by_policy) - 1)
        call = tool_call_message(coerce_action(move))["tool_calls"][0]["function"]
        texts.append(getattr(env, call["name"])(**call["arguments"]))
    return texts, seen_by_policy


def row_of(scenario: str, seat: int, seed: int, partner: str, judge: str) -> dict:
    return SeatRow(scenario=scenario, seat=seat, seed=seed, partners=[partner], evaluator=judge,
                   max_turns=MAX_TURNS).model_dump()  # fmt: skip


def through_trl(scenario: str, seat: int, seed: int, partner: str, judge: str):
    logs = []
    env = SocialToolEnv(SessionMaker(), on_episode=lambda log, reward: logs.append(log))
    texts, seen_by_policy = play_tools(env, row_of(scenario, seat, seed, partner, judge))
    reward = env.get_reward()
    return [t.model_dump(mode="json") for t in logs[0].turns], reward, seen_by_policy, texts


def through_remote_trl(url: str, scenario: str, seat: int, seed: int, partner: str, judge: str):
    states = []
    env = RemoteSocialToolEnv(url, on_episode=lambda state, reward: states.append(state))
    texts, seen_by_policy = play_tools(env, row_of(scenario, seat, seed, partner, judge))
    reward = env.get_reward()
    return states[0].transcript, reward, seen_by_policy, texts


def through_openenv(url: str, scenario: str, seat: int, seed: int):
    async def episode():
        async with SeatClient(base_url=url) as env:
            result = await env.reset(scenario=scenario, seat=seat, seed=seed)
            seen_by_policy = []
            while not result.done:
                seen_by_policy.append(as_observation(result.observation))
                result = await env.step(SeatAction(**scripted_policy(result.observation, len(seen_by_policy) - 1)))
            return (await env.state()).transcript, result.reward, seen_by_policy

    return asyncio.run(episode())


@pytest.mark.parametrize("scenario, seat, seed, partner, judge", CASES)
def test_one_episode_four_ways(scenario, seat, seed, partner, judge):
    transcript, reward, seen = by_hand(scenario, seat, seed, partner, judge)
    assert len(transcript) >= 4 and reward == reward and len(seen) >= 3  # several turns and moves; rated (not NaN)
    *trl, texts = through_trl(scenario, seat, seed, partner, judge)
    assert trl == [transcript, reward, seen]
    app = create_openenv_app(scenario, partner=partner, judge=judge, max_turns=MAX_TURNS)
    with server_thread(app) as url:
        assert through_openenv(url, scenario, seat, seed) == (transcript, reward, seen)
        *remote, remote_texts = through_remote_trl(url, scenario, seat, seed, partner, judge)
        assert remote == [transcript, reward, seen]
        assert remote_texts == texts  # what the model reads: the opening, then each tool's answer
    if scenario.startswith("multi-party"):
        assert any(t["action"].get("to") for t in transcript)  # private messages were part of it


@pytest.mark.parametrize("scenario, seat, seed, partner, judge", [c for c in CASES if "multi-party" not in c[0]])
def test_the_gymnasium_env_gives_the_policy_the_same_observations(scenario, seat, seed, partner, judge):
    transcript, reward, seen = by_hand(scenario, seat, seed, partner, judge)
    assert len(seen) >= 3 and all(isinstance(o, Observation) for o in seen)
    assert through_gym(scenario, seat, seed, partner, judge) == (transcript, reward, seen)
    _, _, trl_seen, _ = through_trl(scenario, seat, seed, partner, judge)
    assert trl_seen == seen  # the seat session's Observation (TRL's, OpenEnv's, verl's) is the Gymnasium env's
