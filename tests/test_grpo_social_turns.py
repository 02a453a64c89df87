"""The ``social_turns`` RL task: per-turn prompts of stored rated train-split episodes, an LLM utterance judge
(scripted backend here; batched, cached, None when it cannot rate) and an action-validity reward."""

from __future__ import annotations

from pathlib import Path

import pytest
from episode_fixtures import make_episode, make_episodes
from test_grpo import _config
from test_training_tiny import one_torch_thread  # noqa: F401

from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.training.grpo import train_grpo
from sotopia_env.training.rl import RLTask, TaskError, build_task, register_task
from sotopia_env.training.rl.social_turns import SCORE_SCHEMA, UtteranceJudge, action_valid, state_text, turn_dataset

SPEAK = '{"action_type": "speak", "argument": "Could we split the cost?"}'
LEAVE = '{"action_type": "leave", "argument": ""}'


@pytest.fixture
def episodes_file(tmp_path) -> Path:
    from sotopia_env.episodes.export import export_jsonl

    logs = [*make_episodes(6), make_episode(7, status="unrated")]
    path = tmp_path / "episodes.jsonl"
    export_jsonl(logs, path)
    return path


def test_turn_prompts_are_what_the_agents_saw_on_train_scenarios_only(episodes_file):
    from sotopia_env.episodes.export import import_jsonl
    from sotopia_env.training.dataset import build_dataset

    dataset = turn_dataset(str(episodes_file), None)
    logs = import_jsonl(episodes_file)
    train = [log for log in logs if log.status == "rated" and log.setup.scenario.split == "train"]
    assert train and len(train) < len(logs)  # the fixture holds other splits and an unrated episode
    expected, _ = build_dataset(train)
    assert dataset["prompt"] == expected["prompt"] and set(dataset["episode_id"]) == {log.id for log in train}
    assert "completion" not in dataset.column_names  # GRPO samples its own
    assert len(turn_dataset(str(episodes_file), 3)) == 3


def test_the_judge_is_batched_cached_and_none_when_it_cannot_rate():
    replies = {"A": '{"score": 7}', "B": '{"score": 11}', "C": "not json", "D": RuntimeError("backend down")}
    backend = ScriptedBackend(lambda request: replies[request.messages[0]["content"].split("Could we ")[-1][0]])
    judge = UtteranceJudge(backend)
    state = [{"role": "system", "content": "Your goal: share the bill."}, {"role": "user", "content": "Turn 3."}]
    moves = [SPEAK.replace("Could we ", f"Could we {x}") for x in "ABCD"]
    completions = [[{"role": "assistant", "content": m}] for m in [*moves, moves[0], "nonsense"]]
    scores = judge([state] * 6, completions)
    assert scores == [7.0, None, None, None, 7.0, None]  # out of range, not JSON, failed, no action: None, never 0
    assert len(backend.requests) == 4  # one per distinct (state, action): not the repeat, not "nonsense"
    request = backend.requests[0]
    assert request.json_schema == SCORE_SCHEMA and "Your goal: share the bill." in request.messages[0]["content"]
    assert judge([state], completions[:1]) == [7.0] and len(backend.requests) == 4  # cached
    assert judge([state], completions[3:4]) == [None] and len(backend.requests) == 5  # failures are retried
    assert state_text(state).startswith("Your goal")


def test_action_validity():
    assert action_valid([None] * 3, [SPEAK, LEAVE, "I would say hi"]) == [1.0, 1.0, 0.0]


def test_two_grpo_steps_on_social_turns_with_a_scripted_judge(episodes_file, tmp_path, tiny_model_dir):
    backend = ScriptedBackend(['{"score": 6}'], cycle=True)

    @register_task("test-social-turns")
    def build(data, max_items):
        return RLTask("social_turns", turn_dataset(data, max_items), [action_valid, UtteranceJudge(backend)])

    config = _config(tmp_path, tiny_model_dir, "test-social-turns", data=str(episodes_file), max_items=4)
    result = train_grpo(config)
    assert result.steps == 2 and result.prompts == 4
    steps = [h for h in result.log if "reward" in h]
    assert all("rewards/action_valid/mean" in h and "rewards/utterance_score/none" in h for h in steps)
    # a random tiny model writes no valid action: validity 0, the judge is never asked and says None
    assert result.none_rewards == 4 and backend.requests == [] and result.unscorable_batches == 0


def test_social_turns_errors_are_one_line(tmp_path):
    with pytest.raises(TaskError, match="needs a data file"):
        build_task("social_turns")
    with pytest.raises(TaskError, match=r"task 'socialiqa': bad task_options .*judge"):
        build_task("socialiqa", "x.jsonl", options={"judge": "gpt-4o"})
    bad = tmp_path / "episodes.jsonl"
    bad.write_text('{"id": "x"}\n')
    with pytest.raises(TaskError) as info:
        build_task("social_turns", str(bad), options={"judge": "smollm2-135m"})
    assert str(info.value).startswith(f"{bad}:1") and "\n" not in str(info.value)
