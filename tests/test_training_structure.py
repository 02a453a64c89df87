"""The shape of training/: one config per trainer on a shared base, the RL section's trainer chosen by its task,
old keys named in one line, and the pipeline's seed reaching the RL stage. (No import circles: test_imports.py.)"""

from __future__ import annotations

import pytest

from sotopia_env.training.base_config import BaseTrainConfig
from sotopia_env.training.config import ConfigError, parse_config, parse_rl_config
from sotopia_env.training.episode_grpo import EpisodeGRPOConfig
from sotopia_env.training.grpo import GRPOStageConfig
from sotopia_env.training.sft import SFTTrainConfig


def test_every_trainer_has_its_own_config_on_the_shared_base():
    for config in (SFTTrainConfig, GRPOStageConfig, EpisodeGRPOConfig):
        assert issubclass(config, BaseTrainConfig)
        assert set(BaseTrainConfig.__dataclass_fields__) <= set(config.__dataclass_fields__)
    assert "partner" not in GRPOStageConfig.__dataclass_fields__  # episode fields live with their trainer
    assert "num_generations" not in EpisodeGRPOConfig.__dataclass_fields__
    assert "full_finetune" not in GRPOStageConfig.__dataclass_fields__
    assert (SFTTrainConfig().lora_r, GRPOStageConfig().lora_r, GRPOStageConfig().learning_rate) == (16, 8, 5e-6)
    with pytest.raises(ValueError, match="EpisodeGRPOConfig"):
        GRPOStageConfig(task="episodes")


def test_the_rl_section_picks_its_trainer_by_task_and_names_old_or_foreign_keys():
    assert isinstance(parse_rl_config({"task": "episodes"}, "g.yaml"), EpisodeGRPOConfig)
    assert isinstance(parse_rl_config({"task": "socialiqa"}, "g.yaml"), GRPOStageConfig)
    cases = {
        "field 'batch_size': renamed to 'micro_batch_size' for task: episodes": {"task": "episodes", "batch_size": 4},
        "field 'num_generations': renamed to 'group_size' for task: episodes": {"task": "episodes",
                                                                                  "num_generations": 4},
        "field 'loss_type': only for text GRPO (task: item_selection, social_r1, ": {"task": "episodes",
                                                                                     "loss_type": "dapo"},
        "field 'partner': only for episode GRPO (task: episodes)": {"task": "socialiqa", "partner": "rule-partner"},
        "field 'task': unknown RL task 'nope' (tasks: episodes, item_selection, ": {"task": "nope"},
        "field 'nonsense'": {"task": "episodes", "nonsense": 1},
    }  # fmt: skip
    for message, raw in cases.items():
        with pytest.raises(ConfigError) as error:
            parse_rl_config(raw, "g.yaml")
        assert str(error.value).startswith(f"g.yaml: {message}") and "\n" not in str(error.value)
    with pytest.raises(ConfigError, match=r"^cfg.yaml: field 'rl.batch_size': renamed to 'micro_batch_size'"):
        parse_config({"output_dir": "x", "rl": {"task": "episodes", "batch_size": 4}}, "cfg.yaml")
    with pytest.raises(ConfigError, match=r"^cfg.yaml: field 'rl': group_size must be at least 2"):
        parse_config({"output_dir": "x", "rl": {"task": "episodes", "group_size": 1}}, "cfg.yaml")


def test_the_pipelines_seed_reaches_the_rl_stage_unless_rl_sets_its_own():
    config = parse_config({"output_dir": "x", "seed": 7, "rl": {"task": "episodes"}}, "cfg.yaml")
    assert config.rl is not None and config.rl.seed == 7
    config = parse_config({"output_dir": "x", "seed": 7, "rl": {"task": "socialiqa", "seed": 3}}, "cfg.yaml")
    assert config.rl is not None and config.rl.seed == 3
