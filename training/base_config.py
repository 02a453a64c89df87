"""The fields every trainer shares: the model, the LoRA, the optimiser and its schedule, precision, checkpoints.

``SFTTrainConfig`` (SFT, ``training.sft``), ``GRPOStageConfig`` (text GRPO on TRL, ``training.grpo``) and
``EpisodeGRPOConfig`` (GRPO on whole episodes, ``training.episode_grpo``) extend ``BaseTrainConfig``, as TRL's
configs extend ``TrainingArguments``. A subclass may change a default (GRPO trains a smaller LoRA at a lower
learning rate); it never copies a field.

``GRPOBaseConfig`` is what the two GRPO trainers share, each name declared once with one default: the sampling
temperature, the KL weight ``beta`` and the advantages' ``scale_rewards``, whose defaults are TRL's own
``GRPOConfig`` defaults (``tests/test_registries.py`` holds them to TRL's), and the small LoRA with a constant
schedule. Only the fields in ``GRPOBaseConfig.PER_TRAINER`` have a default of each trainer's own (a run's length,
its learning rate, how long one completion may be).

``PipelineInputs`` is what the pipeline hands the trainer of its ``rl:`` stage (``training.trainers``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, get_args

from sotopia_env.backends.endpoints import ApiBase
from sotopia_env.backends.resolve import prompt_for_model
from sotopia_env.model_ref import read_model_ref


@dataclass
class BaseTrainConfig:
    """What every trainer needs. ``None`` for ``bf16``/``qlora`` means: decide from the hardware (bf16 on CUDA;
    4-bit QLoRA on CUDA when bitsandbytes is there)."""

    __pydantic_config__ = {"extra": "forbid"}  # unknown keys in a YAML config are errors

    base_model: str = "smollm2-135m"  # alias, hub id, model dir, or a trained model spec (continued)
    output_dir: str = "outputs/train"
    init_adapter: str | None = None  # continue this LoRA adapter (set from a trained model spec)
    # The prompt (sotopia_env.prompt) the model is trained on and that its model directory records, so that it is
    # prompted with it ever after; None: the starting model's own (``trained_prompt``).
    prompt: str | None = None
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target_modules: list[str] | str = "all-linear"
    learning_rate: float = 1e-4
    lr_scheduler_type: str = "linear"
    max_steps: int = -1  # > 0: the number of optimiser steps
    seed: int = 0
    gradient_checkpointing: bool = True  # recompute each layer in the backward: 4.4 of a BC step's 5.4 GB otherwise
    bf16: bool | None = None
    qlora: bool | None = None
    save_steps: int = 50
    save_total_limit: int = 2
    logging_steps: int = 1
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("lora_r", "save_steps", "save_total_limit", "logging_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.learning_rate < 0:
            raise ValueError(f"learning_rate must not be negative, not {self.learning_rate}")

    def starting_from(self, policy: str) -> Any:
        """This config starting from ``policy``: a trained model spec continues its adapter, and its prompt."""
        base, adapter = read_model_ref(policy)
        return dataclasses.replace(self, base_model=base, init_adapter=adapter, prompt=self.prompt_for(policy))

    def prompt_for(self, policy: str) -> str:
        """The prompt a model trained from ``policy`` is trained on: ``prompt`` if set, else ``policy``'s own."""
        return self.prompt or prompt_for_model(policy)

    @property
    def trained_prompt(self) -> str:
        """The prompt the model is trained on and recorded with (``prompt``, else ``base_model``'s own)."""
        return self.prompt_for(self.base_model)


ScaleRewards = Literal["group", "batch", "none"]  # the advantages' divisor: the group's std, the step's, or none


@dataclass
class GRPOBaseConfig(BaseTrainConfig):
    """The fields both GRPO trainers share (text GRPO on TRL, ``training.grpo.GRPOStageConfig``; GRPO on whole
    episodes, ``training.episode_grpo.EpisodeGRPOConfig``), one default each. ``beta``, ``temperature`` and
    ``scale_rewards`` are TRL ``GRPOConfig`` fields, with TRL's defaults."""

    # the fields a GRPO trainer gives a default of its own; every other shared name has the one default here
    PER_TRAINER: ClassVar[tuple[str, ...]] = (
        "task",
        "output_dir",
        "learning_rate",
        "max_steps",
        "max_completion_length",
    )

    lora_r: int = 8
    lr_scheduler_type: str = "constant"
    beta: float = 0.0  # KL weight towards the starting policy (a frozen copy of a continued adapter); 0: none
    temperature: float = 1.0  # the rollouts' sampling temperature (the update scores the same distribution)
    scale_rewards: ScaleRewards = "group"  # divide the centred rewards by the group's std, the step's, or nothing

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.beta < 0 or self.temperature <= 0:
            raise ValueError(f"beta must be 0 or more and temperature positive, not {self.beta} and {self.temperature}")
        if self.scale_rewards not in get_args(ScaleRewards):
            raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', not {self.scale_rewards!r}")


@dataclass
class PipelineInputs:
    """What the pipeline offers the trainer of its ``rl:`` stage, beyond the policy to start from and the output dir.

    ``fill`` applies the convention every trainer gets for free: a config field ``api_base`` left unset takes the
    pipeline's (as the comma list of its servers: a trainer's config holds plain data), and a field
    ``scenarios_dir`` gets the pipeline's scenario folders first. A trainer that needs more (text GRPO's
    ``social_turns`` reads the run's own episodes) says so in its ``in_pipeline`` hook."""

    api_base: ApiBase = None
    scenarios_dir: list[str] = field(default_factory=list)
    episodes_file: Callable[[], str] | None = None  # exports the BC and SR stages' episodes (JSONL); its path

    def fill(self, config: Any) -> Any:
        fields = config.__dataclass_fields__
        changes: dict[str, Any] = {}
        if "api_base" in fields and config.api_base is None:
            changes["api_base"] = None if self.api_base is None else str(self.api_base)
        if "scenarios_dir" in fields:
            changes["scenarios_dir"] = [*self.scenarios_dir, *config.scenarios_dir]
        return dataclasses.replace(config, **changes) if changes else config
