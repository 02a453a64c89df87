"""End to end with the real embedded SmolLM2-135M: agents, judge, the CLI. Slow on CPU; marked ``model``."""

import asyncio
import json

import pytest
from typer.testing import CliRunner

from sotopia_env.agents.llm import LLMAgent
from sotopia_env.backends.base import GenerationSettings
from sotopia_env.backends.resolve import resolve_backend
from sotopia_env.cli.main import app
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.runner import play
from sotopia_env.episodes.store import open_store
from sotopia_env.evaluators import GOAL_ONLY, LLMEvaluator

pytestmark = pytest.mark.model
GREEDY = GenerationSettings(temperature=0.0, max_new_tokens=80)


def test_real_two_agent_episode_every_action_parses(embedded_model_path, two_friends):
    backend = resolve_backend("smollm2-135m")
    agents = [LLMAgent(backend, settings=GREEDY, max_retries=0) for _ in range(2)]
    log = asyncio.run(play(two_friends, agents, None, EnvConfig(max_turns=4)))
    assert log.termination_reason in ("max_turns", "everyone_left", "stale")
    assert log.turns and all(t.action.error is None for t in log.turns)
    assert all(n == 0 for n in log.agent_errors.values())
    assert sum(u.calls for u in log.usage.values()) == len(log.turns)
    assert all(u.completion_tokens > 0 for u in log.usage.values() if u.calls)


def test_real_judge_gives_valid_or_honestly_unrated(embedded_model_path, two_friends):
    from sotopia_env.agents.scripted import ScriptedAgent

    backend = resolve_backend("smollm2-135m")
    judge = LLMEvaluator(backend, GOAL_ONLY, max_retries=1)
    log = asyncio.run(play(two_friends, [ScriptedAgent(["Can you help me?"]), ScriptedAgent(["Yes."])], judge))
    if log.rating.rated:
        for rating in log.rating.ratings.values():
            assert 0 <= rating.scores["goal"].score <= 10
    else:
        assert log.status == "unrated" and log.rating.error


def test_benchmark_end_to_end_with_the_embedded_model(embedded_model_path, tmp_path, library):
    store = f"sqlite:///{tmp_path}/b.db"
    scenario = sorted(s.id for s in library.select("test"))[0]
    result = CliRunner().invoke(
        app,
        [
            "benchmark",
            "--scenarios",
            scenario,
            "--max-turns",
            "2",
            "--dimensions",
            "goal",
            "--concurrency",
            "2",
            "--store",
            store,
            "--tag",
            "e2e",
            "--json",
            str(tmp_path / "r.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    logs = open_store(store).query(tag="e2e")
    # the model is its own partner, so both seat orders are one and the same episode
    assert len(logs) == 1 and {log.status for log in logs} <= {"rated", "unrated"}
    for log in logs:
        if log.status == "unrated":
            assert log.rating.error
        else:
            assert all(0 <= r.scores["goal"].score <= 10 for r in log.rating.ratings.values())
    report = json.loads((tmp_path / "r.json").read_text())
    rated = sum(log.status == "rated" for log in logs)
    assert sum(row["rated"] for row in report["rows"]) == 2 * rated  # two seats per rated episode


def test_eval_socialiqa_constrained_is_always_well_formed(embedded_model_path, tmp_path):
    from conftest import SHARED

    data = SHARED / "data" / "social_iqa" / "sample.jsonl"
    if not data.exists():
        pytest.skip(f"{data} not found: Social IQa sample missing")
    out = tmp_path / "items.jsonl"
    args = ["eval", "socialiqa", "--data", str(data), "--limit", "3", "--max-new-tokens", "96", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--constrained"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 and all(r["format_valid"] for r in rows)
    assert "format-valid 1.000" in " ".join(result.output.split())


def test_social_r1_llm_judge_with_the_embedded_model(embedded_model_path):
    from sotopia_env.training.rewards import JudgeError, LLMSIPJudge, SocialR1Config, make_social_r1_reward

    judge = LLMSIPJudge(resolve_backend("smollm2-135m"), max_new_tokens=160)
    completion = (
        "<think>Cues: Alex looks away. Interpretation: Alex feels guilty. Goal: Alex wants forgiveness. "
        "Response: apologise.</think><answer>(A) apologise</answer>"
    )
    reward = make_social_r1_reward(SocialR1Config(on_judge_error="outcome_only"), judge)
    try:
        judgement = judge.judge("Alex broke a vase.", completion)
    except JudgeError as exc:  # an honest failure, never a silent 0
        assert str(exc)
    else:
        assert 0.0 <= judgement.stages_in_order <= 1.0
        assert all(0.0 <= v <= 1.0 for v in judgement.stage_scores.values())
    (value,) = reward(["Alex broke a vase."], [completion], label=["1"])
    assert isinstance(value, float) and value > 0  # correct answer, valid format: the outcome term counts


def test_default_run_episode_is_a_conversation(embedded_model_path, tmp_path):
    """``sotopia-env run`` as a new user runs it (seed 0, both seats and settings as run builds them), judge
    skipped: every speak / non-verbal / action turn carries words, and nobody walks out at once."""
    store = f"sqlite:///{tmp_path}/run.db"
    args = ["run", "--seed", "0", "--max-turns", "6", "--evaluator", "none", "--store", store, "--tag", "q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (log,) = open_store(store).query(tag="q")
    assert len(log.turns) >= 4, result.output
    worded = [
        t.action for t in log.turns if t.action.action_type.value != "none" and t.action.action_type.value != "leave"
    ]
    assert worded and all(a.argument.strip(" .…!?,;:-\"'") for a in worded), result.output
    assert all(t.action.error is None for t in log.turns), result.output
