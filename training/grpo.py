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
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from sotopia_env.model_ref import read_model_ref
from sotopia_env.training.rl.tasks import RewardFunc, build_task
from sotopia_env.training.trainer import (
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

RESULT_FILE = "grpo_result.json"


@dataclass
class GRPOStageConfig:
    """How to run GRPO. ``None`` for ``bf16``/``qlora`` means: decide from the hardware (as ``TrainConfig``)."""

    __pydantic_config__ = {"extra": "forbid"}  # unknown keys in a YAML config are errors

    task: str = "socialiqa"  # a registered task (training.rl.task_names())
    data: str | None = None  # the task's data file
    max_items: int | None = None  # use only the first N items
    task_options: dict[str, Any] = field(default_factory=dict)  # the task's own options (social_turns: judge)
    base_model: str = "smollm2-135m"  # alias, hub id, model dir, or a trained model spec (BC/SR output dir)
    init_adapter: str | None = None  # continue this LoRA adapter (set from a trained model spec)
    output_dir: str = "outputs/grpo"
    lora_r: int = 8
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target_modules: list[str] | str = "all-linear"
    learning_rate: float = 5e-6
    lr_scheduler_type: str = "constant"
    num_epochs: float = 1.0
    max_steps: int = -1  # > 0 overrides num_epochs
    batch_size: int = 4  # completions per device per step; batch_size * grad_accum must divide by num_generations
    grad_accum: int = 1
    num_generations: int = 4  # completions per prompt (the GRPO group)
    beta: float = 0.04  # KL weight (0: no reference model)
    temperature: float = 0.9
    max_completion_length: int = 256
    loss_type: str = "dapo"  # TRL's: grpo, dr_grpo, dapo, bnpo, ...
    use_vllm: bool = False  # generate with vLLM (pip install vllm; CUDA only)
    vllm_mode: Literal["colocate", "server"] = "colocate"  # colocate: in this process; server: `trl vllm-serve`
    seed: int = 0
    gradient_checkpointing: bool = False
    bf16: bool | None = None
    qlora: bool | None = None
    save_steps: int = 50
    save_total_limit: int = 2
    logging_steps: int = 1
    progress: bool = True
    extra_args: dict[str, Any] = field(default_factory=dict)  # any other GRPOConfig field
    # task "episodes" only (training.episode_grpo): whole episodes in SocialEnv as rollouts
    partner: str = "rule-partner"  # any agent spec, or "policy": a frozen copy of the starting policy
    group_size: int = 4  # episodes per group (same start, different sampling seeds)
    groups_per_step: int = 1  # groups (starts) per GRPO step
    max_turns: int = 8  # the env's turn limit
    scenarios: str = "verifiable:train"  # a scenario selector
    scenarios_dir: list[str] = field(default_factory=list)  # extra scenario YAML folders
    evaluator: str = "verifiable"  # an evaluator spec: its goal rating of the policy's seat is the reward
    seat: int = 0  # the policy's seat (0: first)
    turn_reward: float = 0.0  # per-turn shaping, added once per policy turn (negative: shorter episodes)
    constrained: bool = True  # the policy's actions are schema-constrained (as LLMAgent's are by default)
    api_base: str | None = None  # serves the partner and the evaluator (the policy generates locally)

    full_finetune = False  # GRPO trains a LoRA (read by the shared precision/adapter helpers)

    def __post_init__(self) -> None:
        for name in ("lora_r", "batch_size", "grad_accum", "save_steps", "logging_steps", "max_completion_length"):
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
        if self.group_size < 2 or self.groups_per_step < 1 or self.max_turns < 1 or self.seat not in (0, 1):
            raise ValueError("group_size must be at least 2, groups_per_step and max_turns at least 1, seat 0 or 1")
        if self.vllm_mode not in ("colocate", "server"):
            raise ValueError(f"vllm_mode must be 'colocate' or 'server', not {self.vllm_mode!r}")

    def starting_from(self, policy: str) -> GRPOStageConfig:
        """This config starting from ``policy``: a trained model spec continues its adapter."""
        import dataclasses

        base, adapter = read_model_ref(policy)
        return dataclasses.replace(self, base_model=base, init_adapter=adapter)


@dataclass
class GRPOResult:
    model_dir: str  # a model spec
    task: str
    steps: int
    prompts: int
    rewards: list[float | None]  # mean reward of every logged step (None: every reward was None)
    none_rewards: int  # reward values that were None, over the whole run
    unscorable_batches: int  # generation batches where every reward was None (skipped: no gradient)
    seconds: float
    resumed_from: str | None = None
    qlora: bool = False
    bf16: bool = False
    log: list[dict[str, Any]] = field(default_factory=list)  # TRL's log of every step

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2))

    def dataset(self) -> str:
        """What it trained on, in words (task ``episodes``: its ``prompts`` are group starts)."""
        return f"{self.task}: {self.prompts} {'starts' if self.task == 'episodes' else 'prompts'}"

    def none_note(self) -> str:
        """The ``None`` rewards and skipped updates, in words (task ``episodes``: unrated episodes, groups)."""
        if self.task == "episodes":
            return f"unrated episodes: {self.none_rewards}, groups without signal skipped: {self.unscorable_batches}"
        return f"None rewards: {self.none_rewards}, unscorable batches skipped: {self.unscorable_batches}"


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

    if config.task == "episodes":
        from sotopia_env.training.episode_grpo import train_episode_grpo

        return train_episode_grpo(config)
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
    bf16, qlora = decide_precision(config)  # the fields TrainConfig shares
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
