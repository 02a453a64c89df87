"""Reinforcement learning on social rewards: TRL's ``GRPOTrainer`` with a LoRA, after BC and SR.

``train_grpo(GRPOStageConfig(...))`` reads top to bottom:

1. build the task (``training.rl``): a chat-form prompt dataset and TRL reward functions; each reward is
   wrapped to count its ``None`` results (logged per step as ``rewards/<name>/none``);
2. decide precision and quantization, load the tokenizer and the base model, and wrap it in a new LoRA or
   the adapter being continued (a BC/SR output dir): the same decisions as ``training.trainer``;
3. train with GRPO (``num_generations`` completions per prompt, group-relative advantages, a KL term of
   weight ``beta``), resuming from the last checkpoint in ``output_dir/checkpoints``. TRL logs the reward
   (mean, std, per function), ``kl``, completion lengths and ``clip_ratio`` every ``logging_steps``;
   a generation batch in which every reward of every completion is ``None`` carries no learning signal:
   its loss is zeroed (no gradient) and it is counted (``unscorable_batches``);
4. save a model spec: ``output_dir/sotopia_model.json`` and ``output_dir/adapter`` (``write_model_ref``).

Every logged step is kept in ``output_dir/grpo_result.json`` (``GRPOResult.log``).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sotopia_env.training.base_config import BaseTrainConfig
from sotopia_env.training.model_setup import (
    CHECKPOINTS_DIR,
    adapter_setup,
    decide_precision,
    finish,
    last_checkpoint,
    load_model,
    load_tokenizer,
    release_memory,
    save_adapter_spec,
    training_args,
)
from sotopia_env.training.rl.tasks import RewardFunc, build_task
from sotopia_env.training.rl_result import RESULT_FILE, GRPOResult


@dataclass
class GRPOStageConfig(BaseTrainConfig):
    """Text GRPO on TRL's ``GRPOTrainer``: the shared fields of ``BaseTrainConfig`` and these. GRPO on whole
    episodes is another trainer with its own config (``training.episode_grpo.EpisodeGRPOConfig``)."""

    output_dir: str = "outputs/grpo"
    task: str = "socialiqa"  # a registered task (training.rl.task_names())
    data: str | None = None  # the task's data file
    max_items: int | None = None  # use only the first N items
    task_options: dict[str, Any] = field(default_factory=dict)  # the task's own options (social_turns: judge)
    lora_r: int = 8
    learning_rate: float = 5e-6
    lr_scheduler_type: str = "constant"
    num_epochs: float = 1.0  # max_steps > 0 overrides it
    batch_size: int = 4  # completions per device per step; batch_size * grad_accum must divide by num_generations
    grad_accum: int = 1
    num_generations: int = 4  # completions per prompt (the GRPO group)
    beta: float = 0.04  # KL weight towards the starting policy (a frozen copy of a continued adapter); 0: none
    temperature: float = 0.9
    max_completion_length: int = 256
    loss_type: str = "dapo"  # TRL's: grpo, dr_grpo, dapo, bnpo, ...
    scale_rewards: str = "group"  # TRL's: group, batch or none
    use_vllm: bool = False  # generate with vLLM (pip install vllm; CUDA only)
    vllm_mode: Literal["colocate", "server"] = "colocate"  # colocate: in this process; server: `trl vllm-serve`
    extra_args: dict[str, Any] = field(default_factory=dict)  # any other GRPOConfig field

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task == "episodes":
            raise ValueError("task 'episodes' is episode GRPO: use training.episode_grpo.EpisodeGRPOConfig")
        for name in ("batch_size", "grad_accum", "max_completion_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.num_generations < 2:
            raise ValueError(f"num_generations must be at least 2 (GRPO compares a group), not {self.num_generations}")
        if (self.batch_size * self.grad_accum) % self.num_generations:
            raise ValueError(
                f"batch_size * grad_accum ({self.batch_size * self.grad_accum}) must be a multiple of "
                f"num_generations ({self.num_generations})"
            )
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be positive, not {self.learning_rate}")
        if self.beta < 0 or self.temperature <= 0:
            raise ValueError("beta must be 0 or more and temperature positive")
        if self.scale_rewards not in ("group", "batch", "none"):
            raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', not {self.scale_rewards!r}")
        if self.vllm_mode not in ("colocate", "server"):
            raise ValueError(f"vllm_mode must be 'colocate' or 'server', not {self.vllm_mode!r}")


@dataclass
class NoneTally:
    """``None`` rewards counted by the wrapped reward functions, per generation batch and in total."""

    total: int = 0
    batch: list[tuple[int, int]] = field(default_factory=list)  # (None count, size) per reward call

    def start_batch(self) -> None:
        self.batch.clear()

    def batch_unscorable(self) -> bool:
        return bool(self.batch) and all(nones == size for nones, size in self.batch)


def counting_nones(func: RewardFunc, tally: NoneTally) -> RewardFunc:
    """``func`` with its ``None`` results counted in ``tally`` and logged (TRL's ``log_metric``)."""

    @functools.wraps(func)
    def reward(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float | None]:
        values = func(prompts, completions, **columns)
        nones = sum(v is None for v in values)
        tally.total += nones
        tally.batch.append((nones, len(values)))
        if "log_metric" in columns:
            columns["log_metric"](f"rewards/{func.__name__}/none", float(nones))
        return values

    return reward


def train_grpo(config: GRPOStageConfig) -> GRPOResult:
    """GRPO on ``config.task``; see the module docstring."""
    from sotopia_env.embedded_models import resolve_model_path

    started = time.perf_counter()
    if config.init_adapter is None:
        config = config.starting_from(config.base_model)  # a BC/SR output dir: continue its adapter
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    checkpoints = out / CHECKPOINTS_DIR

    # 1. the task, its rewards counting their Nones
    task = build_task(config.task, config.data, config.max_items, config.task_options)
    tally = NoneTally()
    rewards = [counting_nones(func, tally) for func in task.rewards]

    # 2. precision, tokenizer, the model to train (a new LoRA or the adapter being continued)
    bf16, qlora = decide_precision(config)
    base_path = resolve_model_path(config.base_model)
    tokenizer = load_tokenizer(base_path, config.init_adapter)
    model = load_model(base_path, bf16, qlora, config.gradient_checkpointing)
    model, peft_config = adapter_setup(model, config)

    # 3. GRPO, resuming from the last checkpoint if a previous run left one
    trainer = _trainer_class()(
        tally,
        model=model,
        reward_funcs=rewards,
        args=grpo_config(config, checkpoints, bf16),
        train_dataset=task.dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    resume = last_checkpoint(checkpoints)
    trainer.train(resume_from_checkpoint=resume)
    log = [h for h in trainer.state.log_history if "reward" in h or "loss" in h]

    # 4. save a model spec
    save_adapter_spec(trainer, out, config.base_model)
    result = GRPOResult(
        model_dir=str(out),
        task=task.name,
        steps=int(trainer.state.global_step),
        prompts=len(task.dataset),
        rewards=[h.get("reward") for h in log if "reward" in h],
        none_rewards=tally.total,
        unscorable_batches=trainer.unscorable_batches,
        seconds=round(time.perf_counter() - started, 2),
        resumed_from=resume,
        qlora=qlora,
        bf16=bf16,
        log=log,
    )
    finish(trainer, result, out / RESULT_FILE)
    del trainer, model
    release_memory()
    return result


def grpo_config(config: GRPOStageConfig, output_dir: Path, bf16: bool):
    """TRL's ``GRPOConfig`` for ``config``: the stages' common arguments and the GRPO knobs."""
    from trl import GRPOConfig

    return GRPOConfig(
        **training_args(GRPOConfig, config, output_dir, bf16),
        num_generations=config.num_generations,
        beta=config.beta,
        temperature=config.temperature,
        max_completion_length=config.max_completion_length,
        loss_type=config.loss_type,
        scale_rewards=config.scale_rewards,
        use_vllm=config.use_vllm,
        vllm_mode=config.vllm_mode,
        **config.extra_args,
    )


@functools.lru_cache(maxsize=1)
def _trainer_class():
    """``GRPOTrainer`` that skips the updates of generation batches no reward could score, and counts them.

    TRL gives a completion every reward left ``None`` a zero advantage; the KL term (``beta > 0``) and the
    optimizer's momentum would still move the policy on such a batch. Here its loss is zeroed, and an
    optimizer step whose accumulation window held nothing scorable gets no gradients at all (``None``), so
    the optimizer leaves every weight and its state as they were."""
    from trl import GRPOTrainer

    class SkippingGRPOTrainer(GRPOTrainer):
        def __init__(self, tally: NoneTally, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.tally = tally
            self.unscorable_batches = 0
            self._batch_unscorable = False
            self._window_scorable = False

        def _generate_and_score_completions(self, inputs):
            self.tally.start_batch()
            output = super()._generate_and_score_completions(inputs)
            if self.model.training:
                self._batch_unscorable = self.tally.batch_unscorable()
                self.unscorable_batches += self._batch_unscorable
                self._metrics["train"]["unscorable_batches"].append(float(self.unscorable_batches))
            return output

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            return loss * 0.0 if self._batch_unscorable else loss

        def training_step(self, model, inputs, num_items_in_batch):
            accumulation = self.current_gradient_accumulation_steps
            if self._step % accumulation == 0:
                self._window_scorable = False
            loss = super().training_step(model, inputs, num_items_in_batch)  # generates when due; counts _step
            self._window_scorable |= not self._batch_unscorable
            if self._step % accumulation == 0 and not self._window_scorable:
                model.zero_grad(set_to_none=True)  # the optimizer skips parameters without a gradient
            return loss

    return SkippingGRPOTrainer
