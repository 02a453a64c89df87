"""The nudge toward a seat's topic words (``sotopia_env.topic``, ``backends/topic_bias.py``): the words are the
seat's own scenario and goal (never the partner's goal), the agent sends them under ``run``'s chat settings only,
the processor raises exactly their first tokens, and on the embedded model the nudge keeps a default episode on
its scenario where the same episode without it drifts."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
import torch

from sotopia_env.agents.llm import CHAT_SETTINGS, LLMAgent
from sotopia_env.backends.base import GenerationSettings
from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.backends.topic_bias import TopicBias, favoured_tokens
from sotopia_env.env import EnvConfig, SocialEnv
from sotopia_env.episodes.runner import play
from sotopia_env.observation import Observation
from sotopia_env.prompt import seat_brief
from sotopia_env.topic import TOPIC_BIAS, content_words, seat_topic_words

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from episode_quality import talk_figures  # noqa: E402  (the benchmark's own measure)


def first_observations(setup) -> dict[str, Observation]:
    """Each seat's first observation, by character name."""
    env = SocialEnv(setup=setup)
    obs, _ = env.reset(seed=0)
    return {env.name_of(seat): Observation.from_env(o) for seat, o in obs.items()}


def test_a_seats_topic_words_are_its_scenario_and_own_goal(two_friends) -> None:
    me, other = (c.name for c in two_friends.characters)
    seen = first_observations(two_friends)
    mine = seat_topic_words(seen[me])
    assert mine == tuple(sorted(mine)) and all(len(w) >= 4 and w.islower() for w in mine)
    assert content_words(two_friends.scenario.scenario) <= set(mine)
    goal = content_words(seat_brief(seen[me].background)["goal"])
    assert goal and goal <= set(mine)
    only_theirs = content_words(seat_brief(seen[other].background)["goal"]) - set(mine)
    assert only_theirs and not only_theirs & set(mine)  # the partner's goal never leaks into the nudge
    assert "about" not in content_words("We talked about the cabin") and "cabin" in content_words("the Cabin's")


def test_the_agent_sends_its_topic_words_under_the_chat_settings_only(two_friends) -> None:
    me = two_friends.characters[0].name
    obs = first_observations(two_friends)[me]
    reply = json.dumps({"action_type": "speak", "argument": "Shall we plan it?"})
    for settings, words, bias in [
        (GenerationSettings(seed=0, **CHAT_SETTINGS), seat_topic_words(obs), TOPIC_BIAS),
        (GenerationSettings(seed=0), (), 0.0),
    ]:
        backend = ScriptedBackend([reply])
        asyncio.run(LLMAgent(backend, settings).act(obs))
        (request,) = backend.requests
        assert (request.favour_words, request.favour_bias) == (words, bias)
    assert TOPIC_BIAS > 0 and seat_topic_words(obs)
    game_turn = obs.model_copy(update={"phase": "vote", "choices": ["Ann", "Bo"]})  # a game's choice is the model's
    backend = ScriptedBackend([json.dumps({"action_type": "action", "argument": "Ann"})])
    asyncio.run(LLMAgent(backend, GenerationSettings(seed=0, **CHAT_SETTINGS)).act(game_turn))
    assert backend.requests[0].favour_words == ()


def test_the_processor_raises_the_words_first_tokens_only(embedded_model_path: str) -> None:
    from transformers import AutoTokenizer

    embedded_tokenizer = AutoTokenizer.from_pretrained(embedded_model_path)
    tokens = favoured_tokens(embedded_tokenizer, ("cabin", "sublet"))
    assert tokens and all(embedded_tokenizer.decode([t]).strip().lower()[:1] in "cs" for t in tokens)
    assert embedded_tokenizer(" cabin", add_special_tokens=False)["input_ids"][0] in tokens
    scores = torch.randn(2, len(embedded_tokenizer))
    scores[0, tokens[0]] = float("-inf")  # masked by the grammar: stays masked
    before = scores.clone()
    after = TopicBias([tokens, []], [2.0, 2.0])(torch.zeros(2, 3, dtype=torch.long), scores)
    changed = (after[0] != before[0]).nonzero().flatten().tolist()
    assert sorted(changed) == sorted(tokens[1:]) and torch.allclose(after[0, tokens[1:]], before[0, tokens[1:]] + 2)
    assert after[0, tokens[0]] == float("-inf") and torch.equal(after[1], before[1])


@pytest.mark.model
def test_the_nudge_keeps_the_embedded_models_episode_on_its_scenario(embedded_model_path: str, library) -> None:
    """``run``'s default episode on a collaboration, 8 turns, with and without the nudge (the control): by the
    benchmark's own measure, the nudged one is on topic more often, and no turn is meta-talk."""
    from sotopia_env.agents.loading import load_agent
    from sotopia_env.cli.run_cmd import DEFAULT_MODEL
    from sotopia_env.sampler import sample_setup

    setup = sample_setup(library, seed=0, scenario="collaboration-demo-bug")
    shares, transcripts = {}, {}
    for bias in (TOPIC_BIAS, 0.0):
        settings = GenerationSettings(seed=0, **{**CHAT_SETTINGS, "topic_bias": bias})
        agents = [load_agent(DEFAULT_MODEL, settings=settings) for _ in range(2)]
        log = asyncio.run(play(setup, agents, None, EnvConfig(max_turns=8), seed=0))
        figures, transcripts[bias] = talk_figures([log]), [t.action.argument for t in log.turns]
        assert figures["speech turns"] >= 6 and figures["meta-talk"] == 0, transcripts[bias]
        shares[bias] = figures["on topic"]
    assert shares[TOPIC_BIAS] > shares[0.0], transcripts
