"""The pipeline's RL stage (``rl:`` in the config): GRPO on social rewards, starting from the last trained policy.

The stage continues the policy's LoRA adapter (or starts a new one on an untrained base), trains it with
``training.grpo.train_grpo`` under ``OUTPUT_DIR/rl`` (resuming from its last checkpoint), and is then
evaluated like the BC and SR stages (``eval-rl``, a row in the one report table).

With ``task: social_turns`` and no ``data``, the prompts come from this run's own rated episodes: those of the
BC and SR stages are exported to ``OUTPUT_DIR/rl/episodes.jsonl`` (the task keeps the train-split ones).
The judge reaches API models through the pipeline's ``api_base`` unless ``task_options`` names another.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict
from pathlib import Path

from sotopia_env.training.config import ConfigError
from sotopia_env.training.context import StageContext, StageResult, release_backends
from sotopia_env.training.distributed import main_process_first
from sotopia_env.training.grpo import train_grpo
from sotopia_env.training.rl.tasks import TaskError

STAGE = "rl"


def run_rl(ctx: StageContext, policy: str) -> StageResult:
    c = ctx.config
    assert c.rl is not None
    out = (c.out / STAGE).resolve()
    config = dataclasses.replace(
        c.rl.starting_from(policy), output_dir=str(out), progress=ctx.progress and c.rl.progress
    )
    if config.task == "social_turns":
        options = {"api_base": c.api_base, **config.task_options}
        config = dataclasses.replace(config, data=config.data or own_episodes(ctx, out), task_options=options)
    if config.task == "episodes":  # the pipeline's server and scenario folders serve the partner and the starts
        folders = [*c.scenarios_dir, *config.scenarios_dir]
        config = dataclasses.replace(config, api_base=config.api_base or c.api_base, scenarios_dir=folders)
    try:
        result = train_grpo(config)
    except TaskError as exc:
        raise ConfigError(f"{c.source}: field 'rl': {exc}") from None
    finally:
        if "judge" in config.task_options:
            release_backends({config.task_options["judge"]}, keep=ctx.evaluator)
    return StageResult(
        name=STAGE, model=result.model_dir, dataset=result.dataset(), train=asdict(result), note=result.none_note()
    )


def own_episodes(ctx: StageContext, out: Path) -> str:
    """The BC and SR stages' episodes, exported to ``out/episodes.jsonl``; its path."""
    from sotopia_env.episodes.export import export_jsonl
    from sotopia_env.training.pipeline import trained_stages

    tags = [ctx.tag(stage) for stage in trained_stages(ctx.config) if stage not in ("base", STAGE)]
    path = out / "episodes.jsonl"
    with main_process_first() as main:  # the other ranks read the file the main process wrote
        if main:
            out.mkdir(parents=True, exist_ok=True)
            export_jsonl((log for tag in tags for log in ctx.store.iter(tag)), path)
    return str(path)
