"""BC -> SR -> RL (GRPO) under ``accelerate launch`` with two processes on CPU (DDP over gloo), on the tiny model.

The main process plays and stores every episode and writes every file; the other rank waits, loads the datasets
it wrote and trains alongside it. Both ranks must end each stage with the same weights, and the loss must fall.

accelerate 1.x starts one process for ``--cpu --num_processes 2`` (multi-CPU goes through mpirun), so the test
launches ``--multi_gpu --num_processes 2`` with ``ACCELERATE_USE_CPU=true``: torchrun starts two processes, and
accelerate and the trainers run them as ``MULTI_CPU`` (gloo).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import free_port
from test_grpo_pipeline import RL
from test_training_e2e import _config as pipeline_config
from test_training_tiny import one_torch_thread, tiny_model_spec  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).resolve().parent / "accelerate_pipeline.py"
ACCELERATE = Path(sys.executable).with_name("accelerate")
STAGES = ["bc", "sr1", "rl"]


def test_two_processes_train_the_same_weights_and_only_the_main_one_plays(tmp_path, tmp_path_factory):
    from sotopia_env.episodes.store import open_store

    raw = pipeline_config(tmp_path, tiny_model_spec(tmp_path_factory))
    raw["eval"] = {"enabled": False}
    raw["train"].update(max_steps=8, batch_size=2)  # per process: 4 examples a step over both
    raw["sr"]["train"] = {"max_steps": 2}
    # 2 processes x 2 completions: one group of num_generations=2 each; the tiny policy earns no reward spread, so
    # its weights move through the KL term alone (beta, 0 by default since the GRPO defaults became TRL's)
    raw["rl"] = {**RL, "batch_size": 2, "beta": 0.04}
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(raw))
    report = tmp_path / "report"
    report.mkdir()

    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    launch = [
        str(ACCELERATE), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
        str(SCRIPT), str(config), str(report),
    ]  # fmt: skip
    done = subprocess.run(launch, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]

    # both ranks trained every stage to the same weights
    for stage in STAGES:
        ranks = [(report / f"weights-{stage}-rank{rank}.txt").read_text() for rank in (0, 1)]
        assert ranks[0] == ranks[1], stage
    assert len({(report / f"weights-{stage}-rank0.txt").read_text() for stage in STAGES}) == 3  # each stage moved

    # only the main process played, and every episode is stored once
    assert (report / "played-rank0.txt").read_text().split() == ["run/bc", "2", "run/sr1", "2"]
    assert not (report / "played-rank1.txt").exists()
    run = tmp_path / "run"
    store = open_store(f"sqlite:///{run / 'episodes.db'}")
    assert [len(list(store.iter(f"run/{stage}"))) for stage in ("bc", "sr1")] == [2, 2]
    store.close()

    # one state.json, the loss falls, and each stage is a model spec the local backend can play
    state = json.loads((run / "state.json").read_text())["stages"]
    assert list(state) == STAGES
    losses = state["bc"]["train"]["losses"]
    assert len(losses) == 8 and sum(losses[-3:]) / 3 < sum(losses[:3]) / 3, losses
    assert state["rl"]["train"]["steps"] == 2
    for stage in STAGES:
        assert (run / stage / "sotopia_model.json").is_file()
        assert (run / stage / "adapter" / "adapter_model.safetensors").is_file()


def test_the_example_accelerate_configs_load():
    from accelerate.commands.config.config_args import load_config_from_file

    zero2 = load_config_from_file(str(ROOT / "examples" / "accelerate" / "zero2.yaml"))
    assert zero2.distributed_type == "DEEPSPEED" and zero2.deepspeed_config["zero_stage"] == 2
    fsdp = load_config_from_file(str(ROOT / "examples" / "accelerate" / "fsdp.yaml"))
    assert fsdp.distributed_type == "FSDP" and fsdp.fsdp_config["fsdp_state_dict_type"] == "FULL_STATE_DICT"


def test_episode_grpo_under_two_processes_trains_on_the_main_one_only(tmp_path, tmp_path_factory):
    """Our own loop has no data parallelism: under ``accelerate launch`` the main process trains, the other rank
    waits and then reports the main process's result (both would otherwise play and write into one output_dir)."""
    config = tmp_path / "episodes.yaml"
    settings = dict(
        task="episodes", base_model=tiny_model_spec(tmp_path_factory), output_dir=str(tmp_path / "rl"),
        scenarios="verifiable:train", partner="rule-partner", evaluator="verifiable", group_size=2, groups_per_step=1,
        max_steps=1, max_turns=2, max_completion_length=8, dynamic_sampling=False, seed=0,
    )  # fmt: skip
    config.write_text(yaml.safe_dump(settings))
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    launch = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()), str(Path(sys.executable).with_name("sotopia-env")), "train", "run",
        str(config),
    ]  # fmt: skip
    done = subprocess.run(launch, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    assert output.count("episode GRPO") == 1, output[-5000:]  # one progress bar: one rank played and trained
    assert output.count(f"model spec in {tmp_path / 'rl'}") == 2  # both ranks end with its result
    result = json.loads((tmp_path / "rl" / "grpo_result.json").read_text())
    assert result["steps"] == 1 and [row["step"] for row in result["log"]] == [1]
