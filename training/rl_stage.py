"""The pipeline's RL stage (``rl:`` in the config): GRPO on social rewards, starting from the last trained policy.

The stage chooses the trainer by the config's type (``train_rl``): ``EpisodeGRPOConfig`` (``task: episodes``)
runs ``training.episode_grpo``, ``GRPOStageConfig`` (a text task) runs ``training.grpo`` on TRL. Either
continues the policy's LoRA adapter (or starts a new one on an untrained base) under ``OUTPUT_DIR/rl``
(resuming from its last checkpoint), and the stage is then evaluated like the BC and SR stages (``eval-rl``, a
row in the one report table). The pipeline's ``seed`` is the stage's unless ``rl.seed`` is set.

With ``task: social_turns`` and no ``data``, the prompts come from this run's own rated episodes: those of the
BC and SR stages are exported to ``OUTPUT_DIR/rl/episodes.jsonl`` (the task keeps the train-split ones).
The judge reaches API models through the pipeline's ``api_base`` unless ``task_options`` names another.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict
from pathlib import Path

from sotopia_env.training.config import ConfigError, RLConfig
from sotopia_env.training.context import StageContext, StageResult, release_backends
from sotopia_env.training.distributed import main_process_first
from sotopia_env.training.episode_grpo import EpisodeGRPOConfig, train_episode_grpo
from sotopia_env.training.grpo import train_grpo
from sotopia_env.training.rl.registry import TaskError
from sotopia_env.training.rl_result import GRPOResult
from sotopia_env.training.stages import trained_stages

STAGE = "rl"


def run_rl(ctx: StageContext, policy: str) -> StageResult:
    c = ctx.config
    assert c.rl is not None
    out = (c.out / STAGE).resolve()
    config = dataclasses.replace(
        c.rl.starting_from(policy), output_dir=str(out), progress=ctx.progress and c.rl.progress
    )
    if isinstance(config, EpisodeGRPOConfig):  # the pipeline's server and scenario folders: partner and starts
        folders = [*c.scenarios_dir, *config.scenarios_dir]
        config = dataclasses.replace(config, api_base=config.api_base or c.api_base, scenarios_dir=folders)
    elif config.task == "social_turns":
        options = {"api_base": c.api_base, **config.task_options}
        config = dataclasses.replace(config, data=config.data or own_episodes(ctx, out), task_options=options)
    try:
        result = train_rl(config)
    except TaskError as exc:
        raise ConfigError(f"{c.source}: field 'rl': {exc}") from None
    finally:
        if not isinstance(config, EpisodeGRPOConfig) and "judge" in config.task_options:
            release_backends({config.task_options["judge"]}, keep=ctx.evaluator)
    return StageResult(
        name=STAGE, model=result.model_dir, dataset=result.dataset(), train=asdict(result), note=result.none_note()
    )


def train_rl(config: RLConfig) -> GRPOResult:
    """The trainer for the config: GRPO on whole episodes, or text GRPO on TRL."""
    if isinstance(config, EpisodeGRPOConfig):
        return train_episode_grpo(config)
    return train_grpo(config)


def own_episodes(ctx: StageContext, out: Path) -> str:
    """The BC and SR stages' episodes, exported to ``out/episodes.jsonl``; its path."""
    from sotopia_env.episodes.export import export_jsonl

    tags = [ctx.tag(stage) for stage in trained_stages(ctx.config) if stage not in ("base", STAGE)]
    path = out / "episodes.jsonl"
    with main_process_first() as main:  # the other ranks read the file the main process wrote
        if main:
            out.mkdir(parents=True, exist_ok=True)
            export_jsonl((log for tag in tags for log in ctx.store.iter(tag)), path)
    return str(path)
