"""The pipeline's RL stage (``rl:`` in the config): a registered trainer, starting from the last trained policy.

The config's ``task`` chose the trainer (``training.trainers``: GRPO on whole episodes for ``task: episodes``,
text GRPO on TRL for a text task, or any trainer registered since). The stage hands it the policy (a trained model
spec continues its LoRA adapter, an untrained base starts a new one), ``OUTPUT_DIR/rl`` (where it resumes from its
last checkpoint) and what the pipeline offers (``PipelineInputs``: its ``api_base``, its scenario folders, its own
episodes); then the stage is evaluated like the BC and SR stages (``eval-rl``, a row in the one report table). The
pipeline's ``seed`` is the stage's unless ``rl.seed`` is set. Afterwards every model the trainer loaded (a judge, a
partner) is released, except the pipeline's evaluator.

With ``task: social_turns`` and no ``data``, the prompts come from this run's own rated episodes: those of the
BC and SR stages are exported to ``OUTPUT_DIR/rl/episodes.jsonl`` (the task keeps the train-split ones).
The judge reaches API models through the pipeline's ``api_base`` unless ``task_options`` names another.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict
from pathlib import Path

from sotopia_env.training.base_config import PipelineInputs
from sotopia_env.training.config import ConfigError
from sotopia_env.training.context import StageContext, StageResult, release_backends
from sotopia_env.training.distributed import main_process_first
from sotopia_env.training.rl.registry import TaskError
from sotopia_env.training.stages import trained_stages
from sotopia_env.training.trainers import trainer_of

STAGE = "rl"


def run_rl(ctx: StageContext, policy: str) -> StageResult:
    c = ctx.config
    assert c.rl is not None
    trainer = trainer_of(c.rl)
    out = (c.out / STAGE).resolve()
    config = dataclasses.replace(
        c.rl.starting_from(policy), output_dir=str(out), progress=ctx.progress and c.rl.progress
    )
    pipeline = PipelineInputs(c.api_base, list(c.scenarios_dir), lambda: own_episodes(ctx, out))
    config = pipeline.fill(config)
    if trainer.in_pipeline is not None:
        config = trainer.in_pipeline(config, pipeline)
    try:
        result = trainer.train(config)
    except TaskError as exc:
        raise ConfigError(f"{c.source}: field 'rl': {exc}") from None
    finally:
        release_backends(None, keep=ctx.evaluator)  # whatever it loaded; the evaluator rates eval-rl next
    return StageResult(
        name=STAGE, model=result.model_dir, dataset=result.dataset(), train=asdict(result), note=result.note()
    )


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
