"""The pipeline with an ``rl:`` section: BC -> SR -> RL (GRPO), each evaluated, resumable, on CPU with a tiny model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from test_training_e2e import _config as pipeline_config
from test_training_tiny import one_torch_thread, tiny_model_spec  # noqa: F401
from typer.testing import CliRunner

from sotopia_env.training.config import ConfigError, load_config, parse_config
from sotopia_env.training.pipeline import PipelineState, plan

ROOT = Path(__file__).resolve().parents[1]
SOCIALIQA = str(ROOT / "examples" / "data" / "socialiqa-tiny.jsonl")
RL = {
    "task": "socialiqa", "data": SOCIALIQA, "max_items": 2, "num_generations": 2, "batch_size": 2,
    "max_completion_length": 8, "max_steps": 2, "learning_rate": 1e-2, "save_steps": 50, "progress": False,
}  # fmt: skip


def test_bc_sr_rl_end_to_end_then_resume_skips_finished_stages(tmp_path, tmp_path_factory):
    from sotopia_env.cli.main import app

    raw = pipeline_config(tmp_path, tiny_model_spec(tmp_path_factory))
    raw["train"]["max_steps"] = 2
    raw["sr"]["train"]["max_steps"] = 2
    # SOTOPIA-RL's task on the run's own BC and SR episodes (the tiny policy writes no valid action, so its
    # judge, the tiny model, is never asked; test_grpo_social_turns covers the judge)
    raw["rl"] = {**RL, "task": "social_turns", "data": None, "task_options": {"judge": raw["base_model"]}}
    config = parse_config(raw, "e2e")
    assert plan(config) == ["eval-base", "bc", "eval-bc", "sr1", "eval-sr1", "rl", "eval-rl"]
    config_file = tmp_path / "pipeline.yaml"
    config_file.write_text(yaml.safe_dump(raw))

    result = CliRunner().invoke(app, ["train", "pipeline", str(config_file), "--quiet"])
    assert result.exit_code == 0, result.output
    state = PipelineState.load(config.out)
    assert list(state.stages) == plan(config)
    rl = state.stages["rl"]
    assert rl["train"]["steps"] == 2 and rl["dataset"] == "social_turns: 2 prompts"
    exported = (config.out / "rl" / "episodes.jsonl").read_text().splitlines()
    assert len(exported) == 4  # bc and sr1: one episode per train scenario each
    assert "rl:" in result.output and "reward:" in result.output
    # RL continued the SR adapter: same base, a new adapter under rl/
    sr_ref = json.loads(Path(state.stages["sr1"]["model"], "sotopia_model.json").read_text())
    rl_ref = json.loads(Path(rl["model"], "sotopia_model.json").read_text())
    assert rl_ref["base"] == sr_ref["base"] and Path(rl["model"]).name == "rl"
    report = json.loads((config.out / "report.json").read_text())
    assert [row["model"] for row in report["rows"]] == ["base", "bc", "sr1", "rl"]

    # a rerun skips every finished stage; `train rl --force` redoes only RL
    adapter = Path(rl["model"], "adapter", "adapter_model.safetensors")
    mtime = os.stat(adapter).st_mtime_ns
    result = CliRunner().invoke(app, ["train", "pipeline", str(config_file), "--quiet"])
    assert result.exit_code == 0 and os.stat(adapter).st_mtime_ns == mtime
    assert PipelineState.load(config.out).stages["rl"]["finished_at"] == rl["finished_at"]
    result = CliRunner().invoke(app, ["train", "rl", str(config_file), "--force", "--quiet"])
    assert result.exit_code == 0, result.output
    assert PipelineState.load(config.out).stages["rl"]["finished_at"] != rl["finished_at"]


@pytest.mark.parametrize(
    ("rl", "field"),
    [
        ({"num_generation": 4}, "rl.num_generation"),
        ({"base_model": "x"}, "rl.base_model"),
        ({"output_dir": "x"}, "rl.output_dir"),
        ({"num_generations": 1}, "rl"),
        ({"vllm_mode": "remote"}, "rl"),
    ],
)
def test_bad_rl_fields_give_one_line_naming_file_and_field(rl, field):
    with pytest.raises(ConfigError) as err:
        parse_config({"output_dir": "out", "rl": rl}, "my.yaml")
    message = str(err.value)
    assert message.startswith(f"my.yaml: field '{field}") and "\n" not in message


def test_example_configs_with_rl():
    gpu = load_config(ROOT / "examples" / "pipeline-7b-gpu.yaml")
    assert gpu.rl is not None and gpu.rl.task == "social_turns"
    assert (gpu.rl.learning_rate, gpu.rl.num_generations, gpu.rl.beta) == (5e-6, 16, 0.04)
    assert gpu.rl.temperature == 0.9
    assert (gpu.train.lora_r, gpu.train.lora_alpha, gpu.train.learning_rate) == (8, 32, 5e-5)
    assert plan(gpu)[-2:] == ["rl", "eval-rl"]
    from sotopia_env.training.config import load_rl_config

    cpu = load_rl_config(ROOT / "examples" / "grpo-socialiqa-cpu.yaml")
    assert cpu.task == "socialiqa" and Path(ROOT / cpu.data).is_file()
