"""The SOTOPIA-pi loop end to end on CPU: a tiny random model, a scripted expert, the rule-based judge.

eval-base -> BC -> eval-bc -> SR1 (interrupted, then resumed from the CLI) -> eval-sr1. Checks that the
loss goes down, that finished stages are not redone, that SR continues from the BC adapter, and that the
trained adapter plays an episode in the local backend.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
import yaml
from test_training_tiny import one_torch_thread, tiny_model_spec  # noqa: F401
from typer.testing import CliRunner

from sotopia_env.training.config import parse_config
from sotopia_env.training.pipeline import PipelineState, plan

TRAIN_SCENARIOS = "accommodation-drum-practice,collaboration-garden-plot"
EXPERT = "sotopia_env.training.experts:ScriptedExpert"


def _config(tmp_path: Path, base_model: str) -> dict:
    return {
        "output_dir": str(tmp_path / "run"),
        "base_model": base_model,
        "env": {"max_turns": 4},
        "generation": {"temperature": 1.0, "max_new_tokens": 24},
        "evaluator": {"model": "rule-based"},
        "bc": {"expert": EXPERT, "scenarios": TRAIN_SCENARIOS, "episodes_per_scenario": 1},
        "sr": {
            "rounds": 1,
            "scenarios": TRAIN_SCENARIOS,
            "episodes_per_scenario": 1,
            "filter": {"drop_none": False},  # a tiny random policy may fail its turns; still train on something
            "train": {"max_steps": 4},
        },
        "eval": {"partner": EXPERT, "scenarios": "collaboration-demo-bug", "episodes_per_scenario": 1},
        "train": {
            "lora_r": 8,
            "lora_alpha": 16,
            "learning_rate": 1e-2,
            "max_steps": 12,
            "batch_size": 2,
            "save_steps": 4,
            "max_length": 1024,
            "progress": False,
        },
    }


def test_pipeline_trains_resumes_and_the_adapter_plays(tmp_path, tmp_path_factory, monkeypatch):
    import sotopia_env.training.pipeline as pipeline
    from sotopia_env.cli.main import app

    raw = _config(tmp_path, tiny_model_spec(tmp_path_factory))
    config = parse_config(raw, "e2e")
    assert plan(config) == ["eval-base", "bc", "eval-bc", "sr1", "eval-sr1"]

    # 1. first run, interrupted when SR starts
    def interrupted(*args, **kwargs):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(pipeline, "run_sr_round", interrupted)
    with pytest.raises(RuntimeError, match="interrupted"):
        pipeline.run_pipeline(config, progress=False)
    monkeypatch.undo()
    state = PipelineState.load(config.out)
    assert list(state.stages) == ["eval-base", "bc", "eval-bc"]
    bc = state.stages["bc"]
    adapter_file = Path(bc["model"]) / "adapter" / "adapter_model.safetensors"
    adapter_mtime = os.stat(adapter_file).st_mtime_ns
    losses = bc["train"]["losses"]
    assert len(losses) == 12
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3  # the training loss goes down
    assert "4/4 agent-episodes kept" in bc["dataset"]

    # 2. rerun from the CLI: BC is not redone, the rest completes
    config_file = tmp_path / "pipeline.yaml"
    config_file.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["train", "pipeline", str(config_file), "--quiet"])
    assert result.exit_code == 0, result.output
    state = PipelineState.load(config.out)
    assert list(state.stages) == plan(config)
    assert state.stages["bc"]["finished_at"] == bc["finished_at"]
    assert os.stat(adapter_file).st_mtime_ns == adapter_mtime
    assert "bc:" in result.output and "sr1:" in result.output and "loss:" in result.output

    # SR1 continued from the BC adapter: its first loss starts below BC's untrained first loss
    sr1 = state.stages["sr1"]
    assert sr1["train"] is not None and sr1["train"]["steps"] == 4, sr1
    assert sr1["train"]["losses"][0] < losses[0]
    assert Path(sr1["model"], "sotopia_model.json").is_file()

    # 3. one table, one row per stage
    report = json.loads((config.out / "report.json").read_text())
    assert [row["model"] for row in report["rows"]] == ["base", "bc", "sr1"]
    assert all(row["rated"] == 2 for row in report["rows"])

    # 4. the trained model plays an episode through the local backend
    from episode_fixtures import setups

    from sotopia_env.agents.llm import LLMAgent
    from sotopia_env.backends.base import GenerationSettings
    from sotopia_env.backends.local import LocalBackend
    from sotopia_env.env import EnvConfig
    from sotopia_env.episodes.runner import play
    from sotopia_env.evaluators import RuleBasedEvaluator
    from sotopia_env.training.experts import ScriptedExpert

    backend = LocalBackend.from_spec(sr1["model"])
    agent = LLMAgent(backend, GenerationSettings(temperature=1.0, max_new_tokens=24, seed=0))
    log = asyncio.run(play(setups()[0], [agent, ScriptedExpert()], RuleBasedEvaluator(), EnvConfig(max_turns=2)))
    assert log.status == "rated" and log.turns[0].agent == setups()[0].agent_names[0]
    backend.close()

    # 5. status lists every stage as finished
    status = CliRunner().invoke(app, ["train", "status", str(config_file)])
    assert status.exit_code == 0 and "eval-sr1" in status.output


def test_single_stage_commands(tmp_path, tmp_path_factory):
    from sotopia_env.cli.main import app

    raw = _config(tmp_path, tiny_model_spec(tmp_path_factory))
    raw["train"]["max_steps"] = 2
    config_file = tmp_path / "pipeline.yaml"
    config_file.write_text(yaml.safe_dump(raw))
    runner = CliRunner()

    result = runner.invoke(app, ["train", "eval", str(config_file), "--stage", "bc", "--quiet"])
    assert result.exit_code == 1 and "stage 'bc' has not finished yet" in result.output
    result = runner.invoke(app, ["train", "bc", str(config_file), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "bc:" in result.output and "loss:" in result.output
    result = runner.invoke(app, ["train", "eval", str(config_file), "--stage", "base", "--stage", "bc", "--quiet"])
    assert result.exit_code == 0, result.output
    state = PipelineState.load(Path(raw["output_dir"]))
    assert list(state.stages) == ["bc", "eval-base", "eval-bc"]
    report = json.loads((Path(raw["output_dir"]) / "report.json").read_text())
    assert [row["model"] for row in report["rows"]] == ["base", "bc"]
