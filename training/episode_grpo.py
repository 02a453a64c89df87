"""GRPO on whole episodes: the policy plays its seat in ``SocialEnv`` to the end of each episode, and the episode's
rating is the reward of the moves it made. ``train_episode_grpo(EpisodeGRPOConfig(...))`` is the entry point.

Why not TRL's ``GRPOTrainer`` with a ``rollout_func`` (TRL 1.16)? Its rollout function returns one
``(prompt_ids, completion_ids, env_mask)`` row per generation: an episode would have to be one growing chat in
which the environment's text is appended (and masked) between the policy's turns. Our agents are not prompted
that way: ``LLMAgent`` renders a fresh prompt every turn (``sotopia_env.prompt.render_prompt``), so turn k's
prompt is not turn k-1's prompt plus its reply, and an episode is a variable number of separate (prompt,
completion) pairs sharing one reward. So this is the smallest loop on PEFT/torch building blocks, CleanRL
style. One step:

1. pick the step's group starts (``StartPicker``: kinds interleaved, so a step mixes kinds; with dynamic sampling
   a start whose last group all won or all lost rests a few steps);
2. play ``group_size`` episodes per start concurrently (``episode_rollouts``): the policy is an ``LLMAgent`` on a
   ``LocalBackend`` over the model being trained, which records the ids it sampled and their log-probabilities;
   only the completions that became moves before the outcome was decided are kept (retries never);
3. rewards (``None`` when unrated: no advantage, never 0); a group whose rewards are all equal has no signal;
   with dynamic sampling, more groups are played (at most ``max_resample_groups``) until ``groups_per_step``
   groups carry signal;
4. advantages: reward minus its group's mean, divided by the group's std (``scale_rewards: group``), the whole
   step's std (``batch``) or nothing (``none``); with ``shuffle_rewards`` (a control that can fail) the rewards
   are first permuted within each group, so the update costs the same and carries no signal;
5. ``num_iterations`` passes over the samples, each one AdamW step. Samples sharing a prompt prefix (the turns
   of one group) run up to ``prefix_batch`` at a time with the prefix run once (``shared_prefix``: the same loss
   and gradient as one at a time), the others alone (``prefix_batch: 1``: micro-batches of
   ``micro_batch_size``). The loss is PPO's clipped surrogate on the sampled ids with the rollout log-probs as
   the old policy (``epsilon`` below, ``epsilon_high`` above: DAPO's clip-higher), times a truncated importance
   weight ``min(pi_rollout / sampler, importance_sampling_cap)`` that corrects for the grammar mask (the sampler
   draws from the masked distribution; the loss differentiates the unmasked policy); logits are divided by
   the rollout temperature and dropout is off, so the loss scores the distribution that sampled;
   ``+ beta * KL`` (k3) towards the policy the run started from (a frozen ``ref`` copy of a continued adapter;
   the adapter-free model only for a new LoRA, where the two are equal); token-level mean over the step (DAPO);
6. log per step: reward, success rate, ``approx_kl`` (rollout vs train, CleanRL's; about 0 on the first pass),
   ``clipfrac``, token ``entropy``, ``kl_ref``, the mean importance weight, the zero-variance group share, the
   skipped starts, and the step's peak RSS; a checkpoint every ``save_steps``; a rerun resumes from the last.

Generation and the update run on one worker thread: on CPU, generating on another thread than the one that ran
the backward pass was twice as slow, and slower each step. The policy generates locally even when ``api_base``
is set (its weights change every step); ``api_base`` serves the partner and the evaluator.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shutil
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sotopia_env.backends.base import GenerationSettings
from sotopia_env.backends.resolve import release_backends
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.progress import progress_bar
from sotopia_env.profiles import MAX_SEATS
from sotopia_env.training.base_config import GRPOBaseConfig
from sotopia_env.training.episode_rollouts import (
    Episode,
    Rollout,
    Sample,
    StartPicker,
    by_seat,
    has_signal,
    interleaved,
    play_many,
    policy_backend,
)
from sotopia_env.training.model_setup import (
    CHECKPOINTS_DIR,
    cpu_autocast,
    release_memory,
    save_model_spec,
    weights_placement,
)
from sotopia_env.training.policy_server import template_problem
from sotopia_env.training.rl.registry import TaskError
from sotopia_env.training.rl_result import RESULT_FILE, GRPOResult
from sotopia_env.training.rss import peak_rss_mb, reset_peak_rss, trim_heap
from sotopia_env.training.served_policy import RolloutServer, RolloutServerConfig
from sotopia_env.training.shared_prefix import packed_logprobs, prefix_batches, scored

FROZEN_POLICY = "policy"  # the partner spec for a frozen copy of the starting policy
STATE_FILE = "state.json"
REF_ADAPTER = "ref"


@dataclass
class EpisodeGRPOConfig(GRPOBaseConfig):
    """GRPO on whole episodes: the shared fields of ``BaseTrainConfig`` and ``GRPOBaseConfig`` (``beta``,
    ``temperature``, ``scale_rewards``: one default for both GRPO trainers) and these (``task: episodes`` in YAML)."""

    task: Literal["episodes"] = "episodes"
    output_dir: str = "outputs/episode-grpo"
    learning_rate: float = 2e-4  # 0: a control that plays and scores like a run but changes no weight
    max_steps: int = 8
    # the rollouts
    scenarios: str = "verifiable:train"  # a scenario selector: the group starts
    scenarios_dir: list[str] = field(default_factory=list)  # extra scenario YAML folders
    partner: str = "rule-partner"  # any agent spec, or "policy": a frozen copy of the starting policy
    evaluator: str = "verifiable"  # an evaluator spec: its rating of the policy's seat is the reward
    seat: int = 0  # the policy's seat (0: first)
    role: str | None = None  # games: the policy plays every seat of this role or team instead of ``seat``
    self_play: bool = False  # the policy in every seat, each seat's reward its own rating, groups per (start, seat)
    max_turns: int = 8  # the env's turn limit
    group_size: int = 4  # episodes per start (different sampling seeds)
    groups_per_step: int = 4  # starts per step, their kinds interleaved
    max_completion_length: int = 64  # tokens per policy turn
    constrained: bool = True  # the policy's actions are schema-constrained (as LLMAgent's are by default)
    api_base: str | None = None  # serves the partner and the evaluator
    rollout_server: RolloutServerConfig | None = None  # the policy's turns on a vLLM server (``served_policy``)
    # the signal (scale_rewards: the group's std, the step's or none; GRPOBaseConfig's)
    dynamic_sampling: bool = True  # rest starts without signal; play more groups until enough carry signal
    max_resample_groups: int = 4  # extra groups a step may play for signal
    revisit_after: int = 4  # steps a start without signal rests
    turn_reward: float = 0.0  # per policy turn, added to the reward (negative: shorter episodes)
    dense_reward: float = 0.0  # verifiable only: up to this much partial credit; a success gets all of it
    shuffle_rewards: bool = False  # the control: rewards permuted within each group (same compute, no signal)
    # the update (beta, the KL weight towards the starting policy, is GRPOBaseConfig's; 0: no reference pass)
    epsilon: float = 0.2  # the ratio's clip below 1
    epsilon_high: float = 0.28  # and above 1 (DAPO's clip-higher)
    importance_sampling_cap: float = 2.0  # truncates pi_rollout / sampler (the grammar mask's correction)
    num_iterations: int = 1  # optimiser steps per batch of rollouts (> 1: the ratio moves off 1 and clips)
    micro_batch_size: int = 1  # sequences per forward/backward; gradients accumulate over the step
    prefix_batch: int = 8  # up to this many sequences sharing a prompt prefix run as one forward, the prefix once

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("max_steps", "group_size", "groups_per_step", "max_turns", "max_completion_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        for name in ("num_iterations", "micro_batch_size", "prefix_batch", "revisit_after"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be at least 2 (GRPO compares a group), not {self.group_size}")
        if not 0 <= self.seat < MAX_SEATS:
            raise ValueError(f"seat must be 0 to {MAX_SEATS - 1}, not {self.seat}")
        if self.max_resample_groups < 0:
            raise ValueError(f"max_resample_groups must be 0 or more, not {self.max_resample_groups}")
        if not 0 <= self.dense_reward < 10:
            raise ValueError(f"dense_reward must be in [0, 10), not {self.dense_reward}")
        if not (0 < self.epsilon < 1 and self.epsilon_high > 0 and self.importance_sampling_cap >= 1):
            raise ValueError("epsilon must be in (0, 1), epsilon_high positive, importance_sampling_cap at least 1")
        if self.self_play and self.role is not None:
            raise ValueError(f"self_play plays every seat: drop role ({self.role!r}) or self_play")
        if self.rollout_server is not None and (problem := template_problem(self.rollout_server)):
            raise ValueError(f"rollout_server.{problem[0]}: {problem[1]}")


# -- advantages ---------------------------------------------------------------------------------------------------


def group_advantages(
    rewards: Sequence[float | None], scale: str = "group", step_std: float | None = None, eps: float = 1e-4
) -> list[float | None]:
    """(r - group mean) over the rated rewards, divided by the group's population std (``group``), ``step_std``
    (``batch``) or 1 (``none``); None stays None. Zero everywhere (no signal) when fewer than two are rated or
    they are all equal."""
    rated = [r for r in rewards if r is not None]
    if len(rated) < 2 or statistics.pstdev(rated) < eps:
        return [None if r is None else 0.0 for r in rewards]
    mean = statistics.fmean(rated)
    divisor = {"group": statistics.pstdev(rated), "batch": step_std or 1.0, "none": 1.0}[scale]
    return [None if r is None else (r - mean) / max(divisor, eps) for r in rewards]


def shuffled_within_groups(groups: Sequence[Sequence[float | None]], seed: int) -> list[list[float | None]]:
    """Each group's rewards permuted among its episodes (``random.Random(seed)``): the shuffled-reward control.
    A group keeps its rewards, so its mean, spread and the step's std are unchanged; which episode earned which is
    lost, so the update carries no signal about what the policy did."""
    rng = random.Random(seed)
    return [rng.sample(list(group), len(group)) for group in groups]


def step_advantages(groups: Sequence[Sequence[float | None]], scale: str) -> list[list[float | None]]:
    """Every group's advantages; ``batch`` divides by the std of every rated reward of the step."""
    rated = [r for g in groups for r in g if r is not None]
    step_std = statistics.pstdev(rated) if len(rated) >= 2 else None
    return [group_advantages(g, scale, step_std) for g in groups]


# -- the loss -----------------------------------------------------------------------------------------------------


@dataclass
class Batch:
    """Left-padded sequences ``[pad][prompt][completion]`` with per-token rollout values right-aligned; every
    completion ends at the last position, so the last ``width`` positions hold every completion token."""

    input_ids: Any
    attention_mask: Any
    position_ids: Any
    loss_mask: Any  # [rows, width]: 1 on completion tokens
    old_logprobs: Any  # [rows, width]: the policy's at rollout (temperature applied)
    sampler_logprobs: Any  # [rows, width]: the sampler's (grammar mask applied)
    width: int  # the longest completion


def pack(samples: Sequence[Sample], pad_id: int, device: Any = None) -> Batch:
    """``samples`` as one left-padded ``Batch`` on ``device`` (the model's)."""
    import torch

    length = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    width = max(len(s.completion_ids) for s in samples)
    ids, attention, loss, old, sampler = [], [], [], [], []
    for s in samples:
        pad = length - len(s.prompt_ids) - len(s.completion_ids)
        ids.append([pad_id] * pad + s.prompt_ids + s.completion_ids)
        attention.append([0] * pad + [1] * (length - pad))
        lead = width - len(s.completion_ids)
        loss.append([0] * lead + [1] * len(s.completion_ids))
        old.append([0.0] * lead + s.logprobs)
        sampler.append([0.0] * lead + s.sampler_logprobs)
    attention_mask = torch.tensor(attention, device=device)
    return Batch(
        input_ids=torch.tensor(ids, device=device),
        attention_mask=attention_mask,
        position_ids=(attention_mask.cumsum(-1) - 1).clamp(min=0),
        loss_mask=torch.tensor(loss, dtype=torch.float32, device=device),
        old_logprobs=torch.tensor(old, device=device),
        sampler_logprobs=torch.tensor(sampler, device=device),
        width=width,
    )


def token_logprobs(model: Any, batch: Batch, temperature: float, with_entropy: bool = False) -> tuple[Any, Any]:
    """Log-probabilities, at ``temperature``, of the last ``batch.width`` tokens of every row; and their entropy
    (None unless asked)."""
    logits = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=batch.width + 1,
    ).logits[:, :-1]
    return scored(logits, batch.input_ids[:, -batch.width :], temperature, with_entropy)


def sample_logprobs(
    model: Any, samples: Sequence[Sample], batch: Batch, shared: int, temperature: float, with_entropy: bool = False
) -> tuple[Any, Any]:
    """``token_logprobs`` of ``batch`` (``pack(samples)``); with ``shared``, the samples' common prompt prefix
    runs once (``shared_prefix.packed_logprobs``: the same values)."""
    if shared:
        return packed_logprobs(model, samples, shared, temperature, batch.width, with_entropy)
    return token_logprobs(model, batch, temperature, with_entropy)


@contextlib.contextmanager
def reference_policy(model: Any) -> Iterator[None]:
    """The policy the run started from: the frozen ``ref`` adapter when there is one, else no adapter at all."""
    if REF_ADAPTER not in getattr(model, "peft_config", {}):
        with model.disable_adapter():
            yield
        return
    previous = model.active_adapter
    model.set_adapter(REF_ADAPTER, inference_mode=True)
    try:
        yield
    finally:
        model.set_adapter(previous)  # trainable again
        model.set_requires_grad(REF_ADAPTER, requires_grad=False)


@dataclass
class LossStats:
    """Sums over the policy's tokens, divided by the token count when logged."""

    approx_kl: float = 0.0  # CleanRL's: (ratio - 1) - log ratio, rollout vs train
    clipped: float = 0.0
    entropy: float = 0.0
    kl_ref: float = 0.0
    is_weight: float = 0.0

    def add(self, other: LossStats) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def per_token(self, tokens: int) -> dict[str, float]:
        return {name: round(getattr(self, name) / tokens, 6) if tokens else 0.0 for name in self.__dataclass_fields__}


def policy_loss(
    model: Any,
    samples: Sequence[Sample],
    advantages: Sequence[float],
    config: EpisodeGRPOConfig,
    total_tokens: int,
    shared: int = 0,
) -> tuple[Any, LossStats]:
    """The clipped, importance-weighted surrogate (+ beta * KL to the starting policy) summed over the policy's
    tokens and divided by ``total_tokens``; and the step's statistics for these samples. ``shared``: the length
    of the prompt prefix every sample shares, run once (``shared_prefix``)."""
    import torch

    batch = pack(samples, pad_id=0, device=model.device)
    mask = batch.loss_mask
    logp, entropy = sample_logprobs(model, samples, batch, shared, config.temperature, with_entropy=True)
    log_ratio = logp - batch.old_logprobs
    ratio = torch.exp(log_ratio)
    adv = torch.tensor(list(advantages), dtype=logp.dtype, device=logp.device).unsqueeze(1)
    clipped_ratio = torch.clamp(ratio, 1 - config.epsilon, 1 + config.epsilon_high)
    surrogate = torch.maximum(-adv * ratio, -adv * clipped_ratio)
    weight = torch.exp(batch.old_logprobs - batch.sampler_logprobs).clamp(max=config.importance_sampling_cap)
    per_token = surrogate * weight
    kl = torch.zeros_like(logp)
    if config.beta > 0:
        with torch.no_grad(), reference_policy(model):
            ref, _ = sample_logprobs(model, samples, batch, shared, config.temperature)
        diff = ref - logp
        kl = torch.exp(diff) - diff - 1
        per_token = per_token + config.beta * kl
    with torch.no_grad():
        stats = LossStats(
            approx_kl=float((((ratio - 1) - log_ratio) * mask).sum()),
            clipped=float((((ratio < 1 - config.epsilon) | (ratio > 1 + config.epsilon_high)).float() * mask).sum()),
            entropy=float((entropy * mask).sum()),
            kl_ref=float((kl * mask).sum()),
            is_weight=float((weight * mask).sum()),
        )
    return (per_token * mask).sum() / total_tokens, stats


def without_dropout(model: Any) -> None:
    """Train mode (gradient checkpointing needs it) with every dropout layer in eval mode: the loss scores the
    distribution that sampled, which had no dropout."""
    import torch

    model.train()
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.eval()


def update_policy(
    model: Any, optimizer: Any, trained: Sequence[tuple[Sample, float]], config: EpisodeGRPOConfig, bf16: bool = False
) -> tuple[float, LossStats, int]:
    """``num_iterations`` AdamW steps on every (sample, advantage) in ``trained``, in micro-batches: the last
    pass's loss, the statistics of the first pass (rollout vs train), the policy tokens. ``bf16`` on a CPU runs
    the forward passes under autocast (rollouts stay fp32, which ``approx_kl`` then shows)."""
    import torch

    tokens = sum(len(s.completion_ids) for s, _ in trained)
    stats = LossStats()
    loss_value = 0.0
    if not trained:
        return loss_value, stats, tokens
    without_dropout(model)
    params = [p for p in model.parameters() if p.requires_grad]
    for iteration in range(config.num_iterations):
        loss_value = 0.0
        for shared, chunk in loss_batches(model, trained, config):
            with cpu_autocast(bf16):
                samples, advantages = [s for s, _ in chunk], [a for _, a in chunk]
                loss, chunk_stats = policy_loss(model, samples, advantages, config, tokens, shared)
            loss.backward()
            loss_value += float(loss.detach())
            if iteration == 0:
                stats.add(chunk_stats)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
    return loss_value, stats, tokens


def score_served(model: Any, samples: Sequence[Sample], config: EpisodeGRPOConfig, bf16: bool = False) -> None:
    """Fill in ``logprobs`` of the samples a rollout server sampled: the policy's, under the trainer's weights
    (those the server was given), at the rollout temperature; one forward pass per batch, no gradient."""
    import torch

    served = [s for s in samples if s.logprobs is None]
    for sample in served:
        sample.logprobs = [0.0] * len(sample.completion_ids)  # a placeholder ``pack`` can read
    model.eval()
    with torch.no_grad(), cpu_autocast(bf16):
        for shared, chunk in loss_batches(model, [(s, 0.0) for s in served], config):
            batch_samples = [s for s, _ in chunk]
            batch = pack(batch_samples, pad_id=0, device=model.device)
            logp, _ = sample_logprobs(model, batch_samples, batch, shared, config.temperature)
            for row, sample in zip(logp.float().tolist(), batch_samples, strict=True):
                sample.logprobs = row[len(row) - len(sample.completion_ids) :]


def loss_batches(
    model: Any, trained: Sequence[tuple[Sample, float]], config: EpisodeGRPOConfig
) -> list[tuple[int, list[tuple[Sample, float]]]]:
    """The forward passes of one pass over ``trained``: (shared prefix length, samples). Samples sharing a prompt
    prefix go together, up to ``prefix_batch`` (the prefix runs once, in a packed row with a block mask, which
    needs SDPA attention), and a sample sharing none runs alone; with ``prefix_batch: 1`` or another attention,
    micro-batches of ``micro_batch_size``."""
    if config.prefix_batch > 1 and getattr(model.config, "_attn_implementation", None) == "sdpa":
        return prefix_batches(trained, lambda item: item[0].prompt_ids, config.prefix_batch)
    size = config.micro_batch_size
    return [(0, list(trained[k : k + size])) for k in range(0, len(trained), size)]


# -- the loop -----------------------------------------------------------------------------------------------------


def make_rollout(config: EpisodeGRPOConfig, policy_spec: str) -> Rollout:
    """The config's group starts (one setup per scenario, sampled by seed), partner, evaluator and env."""
    from sotopia_env.evaluators import make_evaluator
    from sotopia_env.library import load_library
    from sotopia_env.sampler import sample_setups

    library = load_library(config.scenarios_dir)
    scenarios = library.select(config.scenarios)
    if not scenarios:
        raise TaskError(f"task 'episodes': no scenarios match {config.scenarios!r}")
    setups = sample_setups(sorted(scenarios, key=lambda s: s.id), library, 1, seed=config.seed)
    partner = policy_spec if config.partner == FROZEN_POLICY else config.partner
    rollout = Rollout(
        setups=setups,
        seat=config.seat,
        role=config.role,
        self_play=config.self_play,
        partner=partner,
        evaluator=make_evaluator(config.evaluator, "goal", config.api_base),
        env=EnvConfig(max_turns=config.max_turns),
        settings=GenerationSettings(temperature=config.temperature, max_new_tokens=config.max_completion_length),
        constrained=config.constrained,
        api_base=config.api_base,
        turn_reward=config.turn_reward,
        dense_reward=config.dense_reward,
        prompt=config.prompt_for(policy_spec),  # what the trained model records (``trained_prompt``)
    )
    for setup in setups:  # every start must have a seat for the policy: one line naming the first that has none
        try:
            rollout.learner_seats(setup)
        except ValueError as exc:
            raise TaskError(f"task 'episodes': {exc}") from None
    return rollout


def load_policy(config: EpisodeGRPOConfig) -> tuple[Any, Any, bool, bool]:
    """``(model, tokenizer, bf16, qlora)``: the base model on this process's GPU when there is one
    (``model_setup.placement``) with the adapter being trained (a continued one, or a new LoRA), and, when
    ``beta > 0`` and an adapter is continued, a frozen copy of it named ``ref``."""
    from peft import PeftModel, get_peft_model

    from sotopia_env.embedded_models import resolve_model_path
    from sotopia_env.training.model_setup import (
        adapter_setup,
        decide_precision,
        load_model,
        load_tokenizer,
        placement,
    )

    bf16, qlora = decide_precision(config)
    tokenizer = load_tokenizer(resolve_model_path(config.base_model), config.init_adapter)
    model = load_model(resolve_model_path(config.base_model), bf16, qlora, config.gradient_checkpointing)
    if not qlora:  # (4-bit weights were loaded onto the GPU already)
        model = model.to(placement(bf16)[0])
    model, lora = adapter_setup(model, config)
    if lora is not None:
        model = get_peft_model(model, lora)
    elif config.beta > 0 and isinstance(model, PeftModel):
        model.load_adapter(config.init_adapter, adapter_name=REF_ADAPTER, is_trainable=False)
        model.set_adapter("default")  # the trained one: active and trainable
        model.set_requires_grad(REF_ADAPTER, requires_grad=False)
    if config.gradient_checkpointing and not qlora:  # (QLoRA's preparation turned it on already)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, tokenizer, bf16, qlora


def train_episode_grpo(config: EpisodeGRPOConfig) -> GRPOResult:
    """GRPO on whole episodes; see the module docstring. Under ``accelerate launch`` the main process trains alone
    (this loop has no data parallelism: every rank would play and write into one ``output_dir``); the other ranks
    wait for it at a barrier, then return the result it wrote."""
    from sotopia_env.training.distributed import main_process_first

    with main_process_first() as main:
        result = train_in_this_process(config) if main else None
    return result or GRPOResult.load(Path(config.output_dir) / RESULT_FILE)


def train_in_this_process(config: EpisodeGRPOConfig) -> GRPOResult:
    """The loop itself, in this process."""
    import torch
    from transformers import get_scheduler

    started = time.perf_counter()
    policy_spec = config.base_model
    if config.init_adapter is None:
        config = config.starting_from(config.base_model)
    out = Path(config.output_dir)
    checkpoints = out / CHECKPOINTS_DIR
    checkpoints.mkdir(parents=True, exist_ok=True)
    rollout = make_rollout(config, policy_spec)
    picker = StartPicker(interleaved(rollout.setups, config.seed), config.dynamic_sampling, config.revisit_after)

    torch.manual_seed(config.seed)
    model, tokenizer, bf16, qlora = load_policy(config)
    model.eval()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate)
    scheduler = get_scheduler(
        config.lr_scheduler_type, optimizer, num_warmup_steps=0, num_training_steps=config.max_steps
    )
    state = resume(model, optimizer, scheduler, checkpoints)
    resumed_from = state.get("checkpoint")
    picker.load(state.get("picker", {}))
    log: list[dict[str, Any]] = state.get("log", [])
    tally = {"unrated": state.get("unrated", 0), "no_signal": state.get("no_signal", 0)}

    # generation and updates share one thread (see policy_backend); on CPU a second thread ran twice as slow
    torch_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="episode-grpo")
    served = config.rollout_server and RolloutServer(config.rollout_server, out, config.base_model, tokenizer)
    with (
        torch_thread,
        served or contextlib.nullcontext(),
        progress_bar("episode GRPO", config.max_steps, config.progress) as show,
    ):
        show(len(log))
        for step in range(len(log) + 1, config.max_steps + 1):
            t0 = time.perf_counter()
            reset_peak_rss()
            if served:  # the trainer's adapter as it is now, on the server
                backend = served.backend(model, step)
            else:
                backend = policy_backend(
                    model, tokenizer, policy_spec, config.group_size * config.groups_per_step, torch_thread
                )
            # 1-3. groups until enough carry signal (or the resampling bound is reached)
            groups, skipped, played = play_groups(config, rollout, picker, backend, step, served and served.guard)
            rollout_s = time.perf_counter() - t0
            backend.close()  # its prefix cache (the model is the loop's); the next step makes a fresh one
            signal = [g for g in groups if g[1]]
            tally["no_signal"] += len(groups) - len(signal)
            # 4. advantages
            rewards = [[e.reward.value for e in episodes] for episodes, _ in groups]
            if config.shuffle_rewards:
                rewards = shuffled_within_groups(rewards, config.seed * 1_000_003 + step)
            advantages = step_advantages(rewards, config.scale_rewards)
            trained = [
                (sample, a)
                for (episodes, _), group_adv in zip(groups, advantages, strict=True)
                for episode, a in zip(episodes, group_adv, strict=True)
                if a
                for sample in episode.samples
            ]
            # 5. the update (served samples are first scored under the weights the server had)
            if served:
                torch_thread.submit(score_served, model, [s for s, _ in trained], config, bf16).result()
            update = torch_thread.submit(update_policy, model, optimizer, trained, config, bf16)
            loss_value, stats, tokens = update.result()
            scheduler.step()  # once per GRPO step, whether or not it trained
            # 6. the log
            episodes = [e for eps, _ in groups for e in eps]
            tally["unrated"] += sum(e.reward.value is None for e in episodes)
            row = step_row(step, episodes, groups, skipped, played, trained, loss_value, stats, tokens, t0, rollout_s)
            log.append(row)
            show(len(log), step_line(log[-1]))
            release_memory()
            trim_heap()  # freed activations and caches leave the RSS, so that it stays flat over a run
            if step % config.save_steps == 0 or step == config.max_steps:
                state = {"log": log, **tally, "picker": picker.state()}
                save_checkpoint(model, optimizer, scheduler, checkpoints, step, state, config.save_total_limit)

    model.eval()
    if REF_ADAPTER in getattr(model, "peft_config", {}):
        model.delete_adapter(REF_ADAPTER)  # the model spec holds the trained adapter only
    save_model_spec(model, tokenizer, out, config.base_model, config.trained_prompt)
    release_backends({rollout.partner}, keep=getattr(rollout.evaluator, "backend", None))  # a model partner's weights
    result = GRPOResult(
        model_dir=str(out),
        task="episodes",
        steps=len(log),
        prompts=len(rollout.setups),
        rewards=[h["reward"] for h in log],
        none_rewards=tally["unrated"],
        unscorable_batches=tally["no_signal"],
        seconds=round(time.perf_counter() - started, 2),
        resumed_from=resumed_from,
        qlora=qlora,
        bf16=bf16,
        placement=weights_placement(model),
        log=log,
    )
    result.save(out / RESULT_FILE)
    del model, optimizer
    release_memory()
    return result


Group = tuple[list[Episode], bool]  # the group's episodes, and whether it carried signal


def play_groups(
    config: EpisodeGRPOConfig,
    rollout: Rollout,
    picker: StartPicker,
    backend: Any,
    step: int,
    guard: Callable[[Awaitable[Any]], Awaitable[Any]] | None = None,
) -> tuple[list[Group], int, int]:
    """The step's groups (played concurrently, ``group_size`` seeds per start; with self-play, one group per
    (start, seat)), the starts skipped, and the groups played; with dynamic sampling, rounds of extra groups replace
    those without signal, up to ``max_resample_groups`` extra groups. ``guard`` wraps each round (a rollout
    server's: it ends the round when the server dies)."""
    groups: list[Group] = []
    skipped_total, extra = 0, 0
    starts_with_signal = 0  # self-play: a start carries signal when any of its seats' groups does
    wanted = config.groups_per_step
    while wanted > 0:
        starts, skipped = picker.pick(wanted, step)
        skipped_total += skipped
        seeds = [
            (rollout.setups[start], config.seed + 10_000 * step + 100 * (len(groups) + g) + i)
            for g, start in enumerate(starts)
            for i in range(config.group_size)
        ]
        work = play_many(rollout, backend, seeds)
        episodes = asyncio.run(guard(work) if guard else work)
        for g, start in enumerate(starts):
            group = episodes[g * config.group_size : (g + 1) * config.group_size]
            seat_groups = by_seat(group) if rollout.self_play else [group]  # self-play: one group per seat
            signals = [has_signal([e.reward for e in sg]) for sg in seat_groups]
            starts_with_signal += picker.record(start, step, [e.reward for e in group], signal=any(signals))
            groups.extend(zip(seat_groups, signals, strict=True))
        if not config.dynamic_sampling:
            break
        missing = config.groups_per_step - starts_with_signal
        wanted = min(missing, config.max_resample_groups - extra)
        extra += max(wanted, 0)
    return groups, skipped_total, len(groups)


def step_row(
    step: int,
    episodes: Sequence[Episode],
    groups: Sequence[Group],
    skipped: int,
    played: int,
    trained: Sequence[tuple[Sample, float]],
    loss_value: float,
    stats: LossStats,
    tokens: int,
    t0: float,
    rollout_seconds: float,
) -> dict[str, Any]:
    """One step's line in the log; the step's time split into the rollouts' and the rest (the update)."""
    seconds = time.perf_counter() - t0
    rated = [e.reward.value for e in episodes if e.reward.value is not None]
    verdicts = [e.reward.success for e in episodes if e.reward.success is not None]
    played_logs = [e.log for e in episodes if e.log is not None]
    return {
        "step": step,
        "reward": statistics.fmean(rated) if rated else None,
        "success": statistics.fmean(verdicts) if verdicts else None,
        "loss": loss_value,
        **stats.per_token(tokens),
        "zero_std_groups": round(sum(not s for _, s in groups) / len(groups), 4),
        "groups": played,
        "skipped_starts": skipped,
        "turns": statistics.fmean(len(log.turns) for log in played_logs) if played_logs else None,
        "episodes": len(episodes),
        "unrated": sum(e.reward.value is None for e in episodes),
        "calls": sum(e.calls for e in episodes),
        "trained_sequences": len(trained),
        "tokens": tokens,
        "peak_rss_mb": peak_rss_mb(),
        "rollout_seconds": round(rollout_seconds, 2),
        "update_seconds": round(seconds - rollout_seconds, 2),
        "seconds": round(seconds, 2),
    }


# -- checkpoints --------------------------------------------------------------------------------------------------


def save_checkpoint(
    model: Any, optimizer: Any, scheduler: Any, checkpoints: Path, step: int, state: dict, keep: int
) -> None:
    """``checkpoints/step-N``: the trained adapter, the optimizer and scheduler, and ``state.json`` (written last:
    a checkpoint without it is incomplete and ignored). Only the newest ``keep`` are kept."""
    import torch

    where = checkpoints / f"step-{step}"
    model.save_pretrained(str(where), selected_adapters=["default"])  # not the frozen reference
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, where / "optimizer.pt")
    (where / STATE_FILE).write_text(json.dumps({"step": step, **state}, indent=2))
    for old in _checkpoints(checkpoints)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def _checkpoints(checkpoints: Path) -> list[Path]:
    done = [p for p in checkpoints.glob("step-*") if (p / STATE_FILE).is_file()]
    return sorted(done, key=lambda p: int(p.name.removeprefix("step-")))


def resume(model: Any, optimizer: Any, scheduler: Any, checkpoints: Path) -> dict:
    """Load the newest complete checkpoint into the model, optimizer and scheduler; its state (empty when none)."""
    import torch
    from peft import set_peft_model_state_dict
    from peft.utils import load_peft_weights

    found = _checkpoints(checkpoints)
    if not found:
        return {}
    last = found[-1]
    set_peft_model_state_dict(model, load_peft_weights(str(last)))
    saved = torch.load(last / "optimizer.pt", weights_only=True)
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    return {**json.loads((last / STATE_FILE).read_text()), "checkpoint": str(last)}


def step_line(row: dict[str, Any]) -> str:
    """The progress bar's label after a step."""
    reward = "-" if row["reward"] is None else f"{row['reward']:.2f}"
    return (
        f"episode GRPO  reward {reward}  approx_kl {row['approx_kl']:.4f}  clip {row['clipped']:.3f}  "
        f"no-signal groups {row['zero_std_groups']:.2f}  unrated {row['unrated']}"
    )
