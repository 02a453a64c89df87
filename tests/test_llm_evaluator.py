import asyncio
import json

import pytest

from sotopia_env.agents.scripted import ScriptedAgent
from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import GOAL_ONLY, SOTOPIA_DIMENSIONS, Dimension, EpisodeContext, dimensions_from_config
from sotopia_env.evaluators.llm import LLMEvaluator, evaluation_prompt, rating_schema


def reply(dims=SOTOPIA_DIMENSIONS, scores=None, agents=2):
    scores = scores or {}
    return json.dumps(
        {
            f"agent_{i + 1}": {
                d.name: {"reasoning": f"why {d.name}", "score": scores.get(d.name, d.high)} for d in dims
            }
            for i in range(agents)
        }
    )


def context(setup):
    log = asyncio.run(play(setup, [ScriptedAgent(["Hi"]), ScriptedAgent(["Hello"])]))
    return EpisodeContext(setup=setup, turns=log.turns, termination_reason=log.termination_reason)


def test_valid_rating_all_seven(two_friends):
    backend = ScriptedBackend([reply(scores={"goal": 7, "secret": -3})])
    rating = LLMEvaluator(backend).evaluate(context(two_friends))
    a, b = two_friends.agent_names
    assert rating.rated and rating.attempts == 1
    assert rating.ratings[a].scores["goal"].score == 7 and rating.ratings[a].scores["goal"].reasoning == "why goal"
    assert rating.ratings[b].scores["secret"].score == -3
    assert rating.ratings[a].overall == (10 + 5 + 10 - 3 + 0 + 5 + 7) / 7
    request = backend.requests[0]
    assert request.json_schema == rating_schema(2, SOTOPIA_DIMENSIONS)
    prompt = request.messages[1]["content"]
    for c in two_friends.characters:  # omniscient: secrets and both goals
        assert c.secret in prompt
    assert all(g in prompt for g in two_friends.scenario.goals)
    assert 'said: "Hi"' in prompt


def test_out_of_range_is_retried_then_accepted(two_friends):
    backend = ScriptedBackend([reply(scores={"goal": 11}), "not json at all", reply()])
    rating = LLMEvaluator(backend, max_retries=2).evaluate(context(two_friends))
    assert rating.rated and rating.attempts == 3 and len(backend.requests) == 3


@pytest.mark.parametrize(
    "bad, message",
    [
        (reply(scores={"goal": 11}), "outside 0..10"),
        (reply(scores={"goal": 2.5}), "not an integer"),
        (reply(dims=GOAL_ONLY), "missing dimension 'believability'"),
        (reply(agents=1), "no ratings for agent_2"),
        ('{"agent_1": {]}', "malformed JSON"),
        (RuntimeError("HTTP 500"), "backend error: HTTP 500"),
    ],
)
def test_exhausted_retries_leave_it_unrated_with_the_error(two_friends, bad, message):
    rating = LLMEvaluator(ScriptedBackend([bad], cycle=True), max_retries=1).evaluate(context(two_friends))
    assert not rating.rated and rating.ratings is None
    assert message in rating.error and "after 2 attempts" in rating.error
    assert rating.usage.calls == 2


def test_goal_only_and_custom_dimensions(two_friends):
    rating = LLMEvaluator(ScriptedBackend([reply(dims=GOAL_ONLY, scores={"goal": 4})]), GOAL_ONLY).evaluate(
        context(two_friends)
    )
    assert list(rating.ratings[two_friends.agent_names[0]].scores) == ["goal"]
    custom = (Dimension(name="warmth", description="How warm?", low=1, high=5),)
    rating = LLMEvaluator(ScriptedBackend([reply(dims=custom, scores={"warmth": 3})]), custom).evaluate(
        context(two_friends)
    )
    assert rating.reward(two_friends.agent_names[1], "warmth") == 3
    assert "warmth (1 to 5): How warm?" in evaluation_prompt(context(two_friends), custom)[1]["content"]
    assert dimensions_from_config("goal") == GOAL_ONLY
    assert [d.name for d in dimensions_from_config([{"name": "x", "description": "d", "low": 0, "high": 3}])] == ["x"]
    with pytest.raises(ValueError, match="unknown dimension 'charm'"):
        dimensions_from_config("goal,charm")
    with pytest.raises(ValueError, match="low 5 must be below high 5"):
        Dimension(name="flat", description="", low=5, high=5)
