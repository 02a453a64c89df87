"""The pipeline's RL stage (``rl:`` in the config): GRPO on social rewards, starting from the last trained policy.

The stage continues the policy's LoRA adapter (or starts a new one on an untrained base), trains it with
``training.grpo.train_grpo`` under ``OUTPUT_DIR/rl`` (resuming from its last checkpoint), and is then
evaluated like the BC and SR stages (``eval-rl``, a row in the one report table).
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict

from training.config import ConfigError
from training.context import StageContext, StageResult
from training.grpo import train_grpo
from training.rl.tasks import TaskError

STAGE = "rl"


def run_rl(ctx: StageContext, policy: str) -> StageResult:
    c = ctx.config
    assert c.rl is not None
    out = (c.out / STAGE).resolve()
    config = dataclasses.replace(
        c.rl.starting_from(policy), output_dir=str(out), progress=ctx.progress and c.rl.progress
    )
    try:
        result = train_grpo(config)
    except TaskError as exc:
        raise ConfigError(f"{c.source}: field 'rl': {exc}") from None
    return StageResult(
        name=STAGE,
        model=result.model_dir,
        dataset=f"{result.task}: {result.prompts} prompts",
        train=asdict(result),
        note=f"{result.none_rewards} None rewards, {result.unscorable_batches} unscorable batches skipped",
    )
