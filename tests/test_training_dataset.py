"""The dataset builder: prompts identical to inference, filters, refusals, and completion-only loss."""

from __future__ import annotations

import asyncio
import json

import pytest
from episode_fixtures import make_episode, setups

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.agents.llm import LLMAgent
from sotopia_env.backends.base import ChatRequest
from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import AgentRating, DimensionScore, EpisodeRating, RuleBasedEvaluator
from sotopia_env.training.dataset import (
    FilterConfig,
    ReplayError,
    Sample,
    TestSplitError,
    balance_roles,
    build_dataset,
    collect_examples,
    drop_none,
    min_goal,
    played_by,
    top1_per_scenario_role,
)

_MOVES = [
    '{"action_type": "speak", "argument": "Hello, neighbour."}',
    '{"action_type": "non-verbal communication", "argument": "waves"}',
    '{"action_type": "none", "argument": ""}',
    '{"action_type": "action", "argument": "hands over a cup of tea"}',
    '{"action_type": "speak", "argument": "Deal: \\"Saturday\\" it is."}',
    '{"action_type": "leave", "argument": "Bye"}',
]


def _played_episode(setup) -> tuple[EpisodeLog, list[ChatRequest]]:
    backend = ScriptedBackend(_MOVES)
    agents = [LLMAgent(backend), LLMAgent(backend)]
    log = asyncio.run(play(setup, agents, RuleBasedEvaluator(), EnvConfig(max_turns=10), specs=["m", "m"]))
    return log, backend.requests


def test_prompts_are_exactly_what_the_agent_saw():
    setup = next(s for s in setups() if s.scenario.split == "train")
    log, requests = _played_episode(setup)
    assert len(log.turns) == len(_MOVES)
    examples, stats = collect_examples([log])
    assert stats.examples == len(_MOVES) and stats.skipped_failed == stats.skipped_unrated == 0
    examples.sort(key=lambda e: e.turn)
    for example, request, move in zip(examples, requests, _MOVES, strict=True):
        assert example.prompt == request.messages  # the same render_prompt output, byte for byte
        assert [m["role"] for m in example.prompt] == ["system", "user"]
        assert example.completion == [{"role": "assistant", "content": AgentAction.model_validate_json(move).to_json()}]
        assert json.loads(example.completion[0]["content"]) == json.loads(move)
    assert {e.seat for e in examples} == {0, 1}


def test_dataset_rows_are_trl_prompt_completion():
    from trl.data_utils import is_conversational

    dataset, _ = build_dataset([make_episode(0)])
    row = dataset[0]
    assert is_conversational(row)
    assert set(row) >= {"prompt", "completion", "episode_id", "scenario_id", "seat", "turn", "goal"}


def test_test_split_episodes_are_refused():
    test_setup_index = next(i for i, s in enumerate(setups()) if s.scenario.split == "test")
    log = make_episode(3, setup_index=test_setup_index, episode_id="ep-test-1")
    with pytest.raises(TestSplitError) as err:
        collect_examples([make_episode(0), log])
    message = str(err.value)
    assert "\n" not in message and "ep-test-1" in message and log.scenario_id in message


def test_unrated_and_failed_episodes_are_skipped_and_counted():
    logs = [make_episode(0), make_episode(1, status="unrated"), make_episode(2, status="failed")]
    examples, stats = collect_examples(logs)
    assert (stats.episodes, stats.skipped_unrated, stats.skipped_failed) == (3, 1, 1)
    assert {e.episode_id for e in examples} == {"ep-00000"}
    assert "1 failed and 1 unrated skipped" in stats.summary()


def _rated(index: int, goals: tuple[int, int], overall_bonus: int = 0, setup_index: int = 0) -> EpisodeLog:
    log = make_episode(index, setup_index=setup_index, episode_id=f"ep-{index}")
    ratings = {}
    for seat, name in enumerate(log.setup.agent_names):
        scores = {"goal": DimensionScore(score=goals[seat]), "believability": DimensionScore(score=overall_bonus)}
        ratings[name] = AgentRating(scores=scores)
    return log.model_copy(update={"rating": EpisodeRating(evaluator="t", ratings=ratings)})


def test_top1_per_scenario_and_role_ranks_by_goal_then_overall():
    logs = [_rated(0, (3, 9)), _rated(1, (8, 2)), _rated(2, (8, 5), overall_bonus=4), _rated(3, (1, 1), setup_index=1)]
    samples = [Sample(log, seat) for log in logs for seat in (0, 1)]
    kept = {(s.log.id, s.seat) for s in top1_per_scenario_role(samples)}
    # scenario of setup 0: seat 0 -> ep-2 (goal 8 tie, better overall), seat 1 -> ep-0 (goal 9); setup 1 alone.
    assert kept == {("ep-2", 0), ("ep-0", 1), ("ep-3", 0), ("ep-3", 1)}
    examples, stats = collect_examples(logs, [top1_per_scenario_role])
    assert stats.samples == 8 and stats.samples_kept == 4
    assert {(e.episode_id, e.seat) for e in examples} == kept


def test_goal_threshold_model_filter_and_drop_none():
    logs = [_rated(0, (3, 9)), _rated(1, (8, 2))]
    samples = [Sample(log, seat) for log in logs for seat in (0, 1)]
    assert {(s.log.id, s.seat) for s in min_goal(8)(samples)} == {("ep-0", 1), ("ep-1", 0)}
    assert played_by("gpt-4o-mini")(samples) == [s for s in samples if s.seat == 1]
    examples, _ = collect_examples(logs, example_filters=[drop_none])
    assert examples and all(e.action_type != ActionType.none.value for e in examples)
    everything, _ = collect_examples(logs)
    assert any(e.action_type == ActionType.none.value for e in everything)


def test_balance_roles_is_equal_per_seat_and_deterministic():
    examples, _ = collect_examples([make_episode(i, n_turns=7, setup_index=0) for i in range(4)])
    seat0 = sum(e.seat == 0 for e in examples)
    assert seat0 != len(examples) - seat0  # the fixture episodes are unbalanced (seat 1 takes the extra turn)
    once = balance_roles(seed=7)(examples)
    assert sum(e.seat == 0 for e in once) == sum(e.seat == 1 for e in once) == min(seat0, len(examples) - seat0)
    assert [(e.episode_id, e.turn) for e in once] == [(e.episode_id, e.turn) for e in balance_roles(seed=7)(examples)]
    samples, example_filters = FilterConfig(top1_per_scenario_role=False, balance_roles=True).build(seed=7)
    assert samples == [] and len(example_filters) == 2


def test_replay_refuses_an_episode_the_env_cannot_reproduce():
    log = make_episode(0)
    swapped = [t.model_copy(update={"agent": log.setup.agent_names[(i + 1) % 2]}) for i, t in enumerate(log.turns)]
    with pytest.raises(ReplayError, match="turn 0 was played by"):
        collect_examples([log.model_copy(update={"turns": swapped})])


def test_loss_is_on_the_completion_only(tmp_path_factory, tmp_path):
    """SFTTrainer's prepared labels mask every prompt token; the unmasked tokens are the action JSON + end of turn."""
    from test_training_tiny import tiny_model_spec
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    from sotopia_env.training.sft import SFTTrainConfig, sft_config

    spec = tiny_model_spec(tmp_path_factory)
    dataset, _ = build_dataset([make_episode(0)])
    tokenizer = AutoTokenizer.from_pretrained(spec)
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(spec),
        args=sft_config(SFTTrainConfig(base_model=spec), tmp_path, bf16=False),
        train_dataset=dataset.select_columns(["prompt", "completion"]),
        processing_class=tokenizer,
    )
    for row, source in zip(trainer.train_dataset, dataset, strict=True):
        labels, ids = row["labels"], row["input_ids"]
        prompt_len = len(tokenizer.apply_chat_template(source["prompt"], add_generation_prompt=True)["input_ids"])
        assert all(label == -100 for label in labels[:prompt_len])
        assert all(label == token for label, token in zip(labels[prompt_len:], ids[prompt_len:], strict=True))
        trained_text = tokenizer.decode([t for t in labels if t != -100])
        assert trained_text.startswith(source["completion"][0]["content"])
        assert "<|im_end|>" in trained_text  # the model learns to stop


def test_random_order_episodes_replay_from_their_seed(two_friends):
    import asyncio

    from sotopia_env.agents.scripted import ScriptedAgent
    from sotopia_env.env import EnvConfig
    from sotopia_env.episodes.runner import play
    from sotopia_env.training.dataset import replay

    agents = [ScriptedAgent([f"a{i}" for i in range(6)]), ScriptedAgent([f"b{i}" for i in range(6)])]
    log = asyncio.run(play(two_friends, agents, None, EnvConfig(action_order="random", max_turns=8), seed=5))
    assert log.action_order == "random" and log.seed == 5
    replayed = [turn for turn, _ in replay(log)]
    assert replayed == log.turns
