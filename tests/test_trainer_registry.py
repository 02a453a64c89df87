"""A trainer is one module plus one registry line: the toy trainer (``toy_trainer.py``, the one module) is registered
here and runs through the config parsing, the pipeline's ``rl:`` stage and ``sotopia-env train run``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import toy_trainer
import yaml
from typer.testing import CliRunner

from sotopia_env.cli.main import app
from sotopia_env.training import trainers
from sotopia_env.training.config import ConfigError, parse_config, parse_rl_config
from sotopia_env.training.episode_grpo import EpisodeGRPOConfig
from sotopia_env.training.grpo import GRPOStageConfig
from sotopia_env.training.trainers import Trainer, register_trainer, trainer_for_task, trainer_of


@pytest.fixture
def toy() -> Iterator[Trainer]:
    with trainers.TRAINERS.scoped():  # the registry as it was, after the test
        yield register_trainer(Trainer("toy", "the toy", toy_trainer.ToyConfig, toy_trainer.train_toy, ("toy",)))


def test_the_built_in_trainers_are_chosen_by_task():
    assert trainer_for_task("episodes").config is EpisodeGRPOConfig
    assert trainer_for_task("socialiqa").config is GRPOStageConfig and trainer_for_task(None).name == "grpo"
    assert trainer_for_task("toy") is None
    assert trainer_of(GRPOStageConfig()).name == "grpo"


def test_a_registered_trainer_parses_its_own_config_with_one_line_errors(toy):
    config = parse_rl_config({"task": "toy", "rounds": 3, "lora_r": 4}, "t.yaml")
    assert isinstance(config, toy_trainer.ToyConfig) and (config.rounds, config.lora_r) == (3, 4)
    assert trainer_of(config) is toy
    cases = {
        "field '(top level)': rounds must be at least 1, not 0": {"task": "toy", "rounds": 0},
        "field 'partner': only for episode GRPO (task: episodes)": {"task": "toy", "partner": "rule-partner"},
        "field 'rouns'": {"task": "toy", "rouns": 3},
    }
    for message, raw in cases.items():
        with pytest.raises(ConfigError) as error:
            parse_rl_config(raw, "t.yaml")
        assert message in str(error.value) and str(error.value).startswith("t.yaml: ") and "\n" not in str(error.value)
    with pytest.raises(ConfigError, match=r"field 'rounds': only for the toy \(task: toy\)"):
        parse_rl_config({"task": "episodes", "rounds": 3}, "e.yaml")
    with pytest.raises(ConfigError, match=r"^c.yaml: field 'rl.base_model': set by the pipeline"):
        parse_config({"output_dir": "o", "rl": {"task": "toy", "base_model": "x"}}, "c.yaml")


def test_a_task_belongs_to_one_trainer_and_a_trainer_needs_a_task_field(toy):
    with pytest.raises(ValueError, match="task 'toy' is trainer 'toy'"):
        register_trainer(Trainer("toy2", "another toy", toy_trainer.ToyConfig, toy_trainer.train_toy, ("toy",)))
    with pytest.raises(ValueError, match="has no 'task' field"):
        from sotopia_env.training.base_config import BaseTrainConfig

        register_trainer(Trainer("bare", "bare", BaseTrainConfig, toy_trainer.train_toy, ("bare",)))


def test_the_pipelines_rl_stage_and_the_cli_run_a_registered_trainer(toy, tmp_path):
    out, library = tmp_path / "run", tmp_path / "library"
    library.mkdir()
    pipeline = {
        "output_dir": str(out),
        "base_model": "smollm2-135m",
        "seed": 7,
        "api_base": "http://127.0.0.1:9/v1",
        "scenarios_dir": [str(library)],
        "bc": {"enabled": False},
        "sr": {"rounds": 0},
        "eval": {"enabled": False},
        "rl": {"task": "toy", "rounds": 3, "scenarios_dir": ["mine"]},
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(pipeline))
    result = CliRunner().invoke(app, ["train", "rl", str(path), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "rl: smollm2-135m" in result.output and "reward: 0.000 -> 2.000 over 3 steps" in result.output
    state = json.loads((out / "state.json").read_text())["stages"]["rl"]
    assert (state["model"], state["dataset"], state["note"]) == (
        "smollm2-135m",
        "toy: 3 rounds",
        "toy: nothing trained",
    )
    handed = json.loads((out / "rl" / "toy_result.json").read_text())["handed"]
    assert handed["output_dir"] == str((out / "rl").resolve()) and handed["base_model"] == "smollm2-135m"
    assert (handed["seed"], handed["api_base"], handed["progress"]) == (7, "http://127.0.0.1:9/v1", False)
    assert handed["scenarios_dir"] == [str(library), "mine"]

    alone = tmp_path / "toy.yaml"
    alone.write_text(yaml.safe_dump({"task": "toy", "rounds": 2, "output_dir": str(tmp_path / "alone")}))
    result = CliRunner().invoke(app, ["train", "run", str(alone), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "toy (toy: 2 rounds): smollm2-135m" in result.output and "toy: nothing trained" in result.output
    assert json.loads((tmp_path / "alone" / "toy_result.json").read_text())["handed"]["api_base"] is None

    alone.write_text(yaml.safe_dump({"task": "toy", "rounds": "many"}))
    result = CliRunner().invoke(app, ["train", "run", str(alone)])
    assert result.exit_code == 1 and f"{alone}: field 'rounds'" in result.output and "Traceback" not in result.output


def test_train_run_and_grpo_have_help():
    for command in ("run", "grpo"):
        result = CliRunner().invoke(app, ["train", command, "--help"])
        assert result.exit_code == 0 and "task" in result.output


def test_an_unknown_task_names_the_tasks_there_are(tmp_path):
    path = Path(tmp_path / "g.yaml")
    path.write_text("task: nope\n")
    result = CliRunner().invoke(app, ["train", "run", str(path)])
    assert result.exit_code == 1 and "field 'task': unknown RL task 'nope' (tasks: episodes, " in result.output
