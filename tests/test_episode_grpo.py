"""GRPO on whole episodes (training.episode_grpo, ``rl.task: episodes``) on CPU with a tiny random model: the group
advantage by hand, the loss mask, the direction of an update, steps, unrated episodes, resume, the pipeline."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
from test_training_tiny import one_torch_thread, tiny_model_spec  # noqa: F401

from sotopia_env.backends.base import GenerationSettings
from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.env import EnvConfig
from sotopia_env.evaluation import RuleBasedEvaluator
from sotopia_env.prompt import prompt_text
from sotopia_env.training.episode_grpo import Rollout, Sample, group_advantages, pack, play_one, token_logprobs
from sotopia_env.training.grpo import GRPOStageConfig, train_grpo

POLICY_LINES = ["I would love some help with the garden.", "Thanks, that settles it."]


def test_group_advantage_by_hand_with_an_unrated_episode():
    std = math.sqrt((25 + 25 + 0) / 3)  # rated rewards 10, 0, 5: mean 5, population std
    assert group_advantages([10.0, 0.0, None, 5.0]) == pytest.approx([5 / std, -5 / std, None, 0.0])
    assert group_advantages([3.0, 3.0, None]) == [0.0, 0.0, None]  # equal rewards: no signal
    assert group_advantages([None, 7.0]) == [None, 0.0]  # one rated episode: nothing to compare
    assert group_advantages([None, None]) == [None, None]


def test_loss_mask_covers_exactly_the_tokens_the_policy_wrote(tmp_path_factory):
    from transformers import AutoTokenizer

    from sotopia_env.library import load_library
    from sotopia_env.sampler import sample_setup

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_spec(tmp_path_factory))
    setup = sample_setup(load_library(), seed=0)
    replies = [json.dumps({"action_type": "speak", "argument": line}) for line in POLICY_LINES]
    backend = ScriptedBackend(replies)
    rollout = Rollout(
        setups=[setup], seat=0, partner="custom_agents:PoliteAgent", evaluator=RuleBasedEvaluator(),
        env=EnvConfig(max_turns=4), settings=GenerationSettings(max_new_tokens=32),
    )  # fmt: skip
    episode = asyncio.run(play_one(rollout, backend, setup, seed=0, tokenizer=tokenizer))
    assert episode.log is not None and episode.reward is not None
    assert [t.agent for t in episode.log.turns] == [setup.agent_names[i] for i in (0, 1, 0, 1)]
    assert len(episode.samples) == 2 == len(backend.requests)

    batch = pack(episode.samples, pad_id=0)
    width = batch.input_ids.shape[1]
    for row, (sample, request, reply) in enumerate(zip(episode.samples, backend.requests, replies, strict=True)):
        # the prompt is exactly what LLMAgent sent, rendered as the backend renders it
        assert (
            sample.prompt_ids
            == tokenizer(prompt_text(request.messages, tokenizer), add_special_tokens=False)["input_ids"]
        )
        mine = [k for k in range(width) if batch.loss_mask[row, k]]
        assert mine == list(range(width - len(sample.completion_ids), width))
        assert tokenizer.decode(batch.input_ids[row, mine].tolist()) == reply
        others = [k for k in range(width) if batch.attention_mask[row, k] and not batch.loss_mask[row, k]]
        assert batch.input_ids[row, others].tolist() == sample.prompt_ids
    second_prompt = tokenizer.decode(episode.samples[1].prompt_ids)
    assert "After you." in second_prompt and POLICY_LINES[0] in second_prompt  # the partner's turn: masked out


def test_an_update_favours_the_better_episodes_tokens_over_the_worse(tmp_path_factory):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sotopia_env.training.episode_grpo import policy_loss

    spec = tiny_model_spec(tmp_path_factory)
    tokenizer = AutoTokenizer.from_pretrained(spec)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(spec),
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    prompt = tokenizer("Hello, how are you?", add_special_tokens=False)["input_ids"]
    good = Sample(prompt, tokenizer('{"action_type": "speak"}', add_special_tokens=False)["input_ids"])
    bad = Sample(prompt, tokenizer('{"action_type": "leave", "argument": ""}', add_special_tokens=False)["input_ids"])

    def logps() -> list[float]:
        with torch.no_grad():
            batch = pack([good, bad], pad_id=0)
            values = token_logprobs(model, batch) * batch.loss_mask[:, -(batch.keep - 1) :]
            return values.sum(-1).tolist()

    before = logps()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    tokens = len(good.completion_ids) + len(bad.completion_ids)
    loss, kl = policy_loss(model, [good, bad], [1.0, -1.0], beta=0.04, total_tokens=tokens)
    assert kl == pytest.approx(0.0, abs=1e-6)  # a new LoRA starts as the reference model
    loss.backward()
    optimizer.step()
    after = logps()
    # a small gradient step moves log p(good) - log p(bad) by lr * |grad of it|^2 / tokens: up, always
    assert after[0] - after[1] > before[0] - before[1]


def _config(tmp_path: Path, model: str, **kw) -> GRPOStageConfig:
    settings = dict(
        task="episodes", base_model=model, output_dir=str(tmp_path / "rl"), scenarios="verifiable:train",
        partner="rule-partner", evaluator="verifiable", group_size=2, max_steps=2, max_turns=2,
        max_completion_length=8, learning_rate=1e-2, beta=0.04, save_steps=1, progress=False, seed=0,
    )  # fmt: skip
    return GRPOStageConfig(**{**settings, **kw})


def test_episode_grpo_steps_then_resume_continues_the_log(tmp_path, tmp_path_factory):
    spec = tiny_model_spec(tmp_path_factory)
    first = train_grpo(_config(tmp_path, spec))
    assert first.task == "episodes" and first.steps == 2 and first.resumed_from is None
    assert [row["step"] for row in first.log] == [1, 2]
    for row in first.log:
        assert row["episodes"] == 2 and row["unrated"] == 0 and row["reward"] is not None and row["turns"] <= 2
    assert (tmp_path / "rl" / "sotopia_model.json").is_file()
    assert sorted(p.name for p in (tmp_path / "rl" / "checkpoints").iterdir()) == ["step-1", "step-2"]

    again = train_grpo(_config(tmp_path, spec, max_steps=3))
    assert again.resumed_from is not None and again.resumed_from.endswith("step-2")
    assert again.steps == 3 and again.log[:2] == first.log
    assert json.loads((tmp_path / "rl" / "grpo_result.json").read_text())["steps"] == 3


def test_generation_and_updates_share_one_worker_thread(tmp_path, tmp_path_factory, monkeypatch):
    # on CPU, generating on another thread than the one that ran the backward pass was twice as slow
    import threading

    import sotopia_env.training.episode_grpo as episode_grpo
    from sotopia_env.backends.local import LocalBackend

    threads: dict[str, set[int]] = {"generate": set(), "update": set()}
    run_batch, update = LocalBackend._run_batch, episode_grpo.update_policy

    def recorded(kind, fn):
        def wrapper(*args, **kwargs):
            threads[kind].add(threading.get_ident())
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(LocalBackend, "_run_batch", recorded("generate", run_batch))
    monkeypatch.setattr(episode_grpo, "update_policy", recorded("update", update))
    train_grpo(_config(tmp_path, tiny_model_spec(tmp_path_factory)))
    assert len(threads["generate"]) == 1 and threads["generate"] == threads["update"]
    assert threading.get_ident() not in threads["generate"]


def test_unrated_episodes_get_no_advantage_and_are_counted(tmp_path, tmp_path_factory):
    # the verifiable judge cannot rate ordinary scenarios: every episode is unrated, never scored 0
    config = _config(tmp_path, tiny_model_spec(tmp_path_factory), scenarios="exchange", partner="custom_agents:Quiet")
    result = train_grpo(config)
    assert result.none_rewards == 4 and result.unscorable_batches == 2
    assert all(row["reward"] is None and row["trained_sequences"] == 0 for row in result.log)


def test_pipeline_runs_rl_task_episodes_and_evaluates_it(tmp_path, tmp_path_factory):
    from sotopia_env.training.config import parse_config
    from sotopia_env.training.pipeline import run_pipeline

    raw = {
        "output_dir": str(tmp_path / "run"), "base_model": tiny_model_spec(tmp_path_factory),
        "env": {"max_turns": 2}, "generation": {"max_new_tokens": 8}, "evaluator": {"model": "verifiable"},
        "bc": {"enabled": False}, "sr": {"rounds": 0},
        "eval": {"partner": "rule-partner", "scenarios": "verifiable:dev"},
        "rl": {"task": "episodes", "partner": "rule-partner", "group_size": 2, "max_turns": 2,
               "scenarios": "verifiable:train", "max_steps": 1, "max_completion_length": 8, "progress": False},
    }  # fmt: skip
    state, report = run_pipeline(parse_config(raw, "cfg.yaml"), progress=False)
    assert list(state.stages) == ["eval-base", "rl", "eval-rl"]
    assert state.stages["rl"]["dataset"] == "episodes: 24 starts"
    assert [row.model for row in report.rows] == ["base", "rl"]
    finished = dict(state.stages)
    state, _ = run_pipeline(parse_config(raw, "cfg.yaml"), progress=False)  # done: every stage skipped
    assert state.stages == finished


def test_pipeline_bc_warm_start_with_a_partner_trains_only_the_experts_seat(tmp_path, tmp_path_factory):
    """``bc.partner``: the verifiable expert plays seat 1 against the rule partner; only its turns are examples,
    and RL continues the BC adapter. A rule partner on a scenario without hidden facts is one line."""
    from sotopia_env.errors import UserError
    from sotopia_env.training.config import parse_config
    from sotopia_env.training.pipeline import run_pipeline

    raw = {
        "output_dir": str(tmp_path / "run"), "base_model": tiny_model_spec(tmp_path_factory),
        "env": {"max_turns": 6}, "generation": {"max_new_tokens": 8}, "evaluator": {"model": "verifiable"},
        "train": {"max_steps": 1, "batch_size": 2},
        "bc": {"expert": "sotopia_env.training.experts:VerifiableExpert", "partner": "rule-partner",
               "scenarios": "bargaining:train", "episodes_per_scenario": 1, "filter": {"min_goal": 1}},
        "sr": {"rounds": 0}, "eval": {"enabled": False},
        "rl": {"task": "episodes", "partner": "rule-partner", "group_size": 2, "max_turns": 2,
               "scenarios": "bargaining:train", "max_steps": 1, "max_completion_length": 8, "progress": False},
    }  # fmt: skip
    state, _ = run_pipeline(parse_config(raw, "cfg.yaml"), progress=False)
    assert list(state.stages) == ["bc", "rl"]
    rows = [json.loads(line) for line in (tmp_path / "run" / "bc" / "dataset.jsonl").read_text().splitlines()]
    assert (
        rows and {r["seat"] for r in rows} == {0} and {r["scenario_id"].split("-")[1] for r in rows} == {"bargaining"}
    )
    assert any('"I could go up to $' in r["completion"][0]["content"] for r in rows)
    assert state.stages["bc"]["episodes"]["rated"] == 8
    bad = dict(raw, output_dir=str(tmp_path / "bad"), bc={**raw["bc"], "scenarios": "train"})
    with pytest.raises(UserError, match="verifiable") as error:
        run_pipeline(parse_config(bad, "cfg.yaml"), progress=False)
    assert "\n" not in str(error.value)


def test_train_grpo_cli_runs_episodes_and_a_bad_selector_is_one_line(tmp_path, tmp_path_factory):
    import yaml
    from typer.testing import CliRunner

    from sotopia_env.cli.main import app
    from sotopia_env.training.config import load_grpo_config

    example = load_grpo_config(Path(__file__).resolve().parents[1] / "examples" / "grpo-episodes-cpu.yaml")
    assert (example.task, example.partner, example.evaluator) == ("episodes", "rule-partner", "verifiable")
    raw = {
        "task": "episodes", "base_model": tiny_model_spec(tmp_path_factory), "output_dir": str(tmp_path / "rl"),
        "group_size": 2, "max_steps": 1, "max_turns": 2, "max_completion_length": 8,
    }  # fmt: skip
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["train", "grpo", str(tmp_path / "ok.yaml"), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "grpo (episodes: 24 starts)" in result.output and "unrated episodes: 0" in result.output

    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({**raw, "scenarios": "no-such-scenario"}))
    result = CliRunner().invoke(app, ["train", "grpo", str(tmp_path / "bad.yaml"), "--quiet"])
    assert result.exit_code != 0 and "no-such-scenario" in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
