"""The names of the pipeline's stages: which policies a config trains, in order."""

from __future__ import annotations

from sotopia_env.training.config import PipelineConfig


def stage_name(round_: int) -> str:
    """The name of SR round ``round_``: ``sr1``, ``sr2``, ..."""
    return f"sr{round_}"


def trained_stages(config: PipelineConfig) -> list[str]:
    """``base``, then ``bc`` (if enabled), ``sr1`` .. ``srN``, ``rl`` (with an rl section): the policies made."""
    return [
        "base",
        *(["bc"] if config.bc.enabled else []),
        *(stage_name(k) for k in range(1, config.sr.rounds + 1)),
        *(["rl"] if config.rl is not None else []),
    ]
