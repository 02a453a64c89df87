"""GRPO on whole episodes (``rl.task: episodes``): the policy plays its seat in ``SocialEnv`` to the end of the
episode, and the episode's rating is the reward of every turn it wrote.

Why not TRL's ``GRPOTrainer`` with a ``rollout_func`` (TRL 1.16)? Its rollout function returns one
``(prompt_ids, completion_ids, env_mask)`` row per generation: an episode would have to be one growing chat in
which the environment's text is appended (and masked) between the policy's turns. Our agents are not prompted
that way: ``LLMAgent`` renders a fresh prompt every turn (``sotopia_env.prompt.render_prompt``: the system
message, then the conversation so far inside the user message), so turn k's prompt is not turn k-1's prompt
plus its reply, and an episode is a variable number of separate (prompt, completion) pairs sharing one reward.
TRL's shapes (one row per generation, ``num_generations`` rows per prompt) cannot hold that. So this is the
smallest loop on PEFT/torch building blocks, CleanRL style; one step:

1. pick the step's group starts (scenario, characters; the policy's seat and partner are fixed by the config);
2. roll out ``group_size`` episodes per start concurrently with ``episodes.runner.play``: the policy is an
   ``LLMAgent`` on a ``LocalBackend`` wrapping the model being trained (requests from every episode are
   batched into one ``generate``), the partner is any agent spec (``policy``: a frozen copy of the starting
   policy); every request the policy's agent sends, and its reply, is recorded: the prompts are exactly what
   ``LLMAgent`` sends (``prompt_text(render_prompt(...))``);
3. reward = the evaluator's ``reward_dimension`` for the policy's seat (+ ``turn_reward`` per policy turn);
   an unrated episode's reward is ``None``: it gets no advantage (never 0) and is counted;
4. advantages: (reward - group mean) / group std over the group's rated episodes; a group with fewer than two
   rated episodes, or all rewards equal, carries no signal (counted, no gradient);
5. loss: every generation of the policy in an episode is one sequence trained with that episode's advantage;
   the loss mask is 1 on the tokens the policy wrote and 0 on the prompt (which holds the partner's turns and
   the environment's text); token-level mean (DAPO), plus ``beta`` * KL (k3) to the adapter-less model;
6. one AdamW step; a checkpoint every ``save_steps`` (adapter, optimizer, log); a rerun resumes from the last.

Generation (step 2) and the update (steps 5-6) run on one worker thread: on CPU, generating on another
thread than the one that ran the backward pass was twice as slow, and slower each step.

The policy generates locally even when ``api_base`` is set: its weights change every step, and a server would
need them synced (TRL's ``vllm-serve`` path does that on GPU). ``api_base`` serves the partner and the evaluator.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import shutil
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sotopia_env.agents.base import Agent
from sotopia_env.agents.llm import LLMAgent
from sotopia_env.backends.base import Backend, ChatRequest, Completion, GenerationSettings
from sotopia_env.backends.resolve import release_backends
from sotopia_env.env import EnvConfig
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.progress import progress_bar
from sotopia_env.evaluation import Evaluator
from sotopia_env.prompt import prompt_text
from sotopia_env.training.grpo import RESULT_FILE, GRPOResult, GRPOStageConfig
from sotopia_env.training.rl.tasks import TaskError
from sotopia_env.training.trainer import CHECKPOINTS_DIR, release_memory, save_model_spec

FROZEN_POLICY = "policy"  # the partner spec for a frozen copy of the starting policy
STATE_FILE = "state.json"


class RecordingBackend:
    """A backend that keeps every (request, completion) it passes on: what one policy agent sent and got."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.model = inner.model
        self.calls: list[tuple[ChatRequest, Completion]] = []

    async def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        out = await self.inner.generate(requests)
        self.calls.extend(zip(requests, out, strict=True))
        return out


@dataclass
class Sample:
    """One generation of the policy: the prompt it was given and the tokens it wrote (ids)."""

    prompt_ids: list[int]
    completion_ids: list[int]


@dataclass
class Episode:
    log: EpisodeLog | None  # None: the episode could not be played (error)
    reward: float | None  # None: unrated (or failed): no advantage
    samples: list[Sample]
    error: str | None = None


def episode_reward(log: EpisodeLog, agent: str, dimension: str, turn_reward: float = 0.0) -> float | None:
    """The evaluator's ``dimension`` for ``agent`` plus ``turn_reward`` per turn it took; None when unrated."""
    if log.rating is None or not log.rating.rated:
        return None
    value = log.rating.reward(agent, dimension)
    if math.isnan(value):
        return None
    return value + turn_reward * sum(t.agent == agent for t in log.turns)


def group_advantages(rewards: Sequence[float | None], eps: float = 1e-4) -> list[float | None]:
    """(r - mean) / std over the rated rewards (population std); None stays None. Zero everywhere (no signal)
    when fewer than two are rated or they are all equal."""
    rated = [r for r in rewards if r is not None]
    if len(rated) < 2:
        return [None if r is None else 0.0 for r in rewards]
    mean, std = statistics.fmean(rated), statistics.pstdev(rated)
    if std < eps:
        return [None if r is None else 0.0 for r in rewards]
    return [None if r is None else (r - mean) / std for r in rewards]


def samples_of(calls: Sequence[tuple[ChatRequest, Completion]], tokenizer: Any) -> list[Sample]:
    """The policy's generations as token ids: the prompt as the backend renders it, then its reply (with the
    end-of-turn token when it stopped on its own). Failed calls wrote nothing."""
    out = []
    for request, completion in calls:
        if not completion.ok:
            continue
        prompt = tokenizer(prompt_text(request.messages, tokenizer), add_special_tokens=False)["input_ids"]
        reply = tokenizer(completion.text, add_special_tokens=False)["input_ids"]
        if completion.meta.get("finish_reason") == "stop" and tokenizer.eos_token_id is not None:
            reply = [*reply, int(tokenizer.eos_token_id)]
        if reply:
            out.append(Sample(list(prompt), list(reply)))
    return out


@dataclass
class Batch:
    """Left-padded sequences ``[pad][prompt][completion]``; ``loss_mask`` is 1 exactly on completion tokens."""

    input_ids: Any
    attention_mask: Any
    position_ids: Any
    loss_mask: Any
    keep: int  # logits needed: the longest completion + 1 (every completion ends at the last position)


def pack(samples: Sequence[Sample], pad_id: int) -> Batch:
    import torch

    width = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    ids, attention, loss = [], [], []
    for s in samples:
        pad = width - len(s.prompt_ids) - len(s.completion_ids)
        ids.append([pad_id] * pad + s.prompt_ids + s.completion_ids)
        attention.append([0] * pad + [1] * (width - pad))
        loss.append([0] * (width - len(s.completion_ids)) + [1] * len(s.completion_ids))
    attention_mask = torch.tensor(attention)
    return Batch(
        input_ids=torch.tensor(ids),
        attention_mask=attention_mask,
        position_ids=(attention_mask.cumsum(-1) - 1).clamp(min=0),
        loss_mask=torch.tensor(loss),
        keep=max(len(s.completion_ids) for s in samples) + 1,
    )


def token_logprobs(model: Any, batch: Batch) -> Any:
    """Log-probabilities of the last ``keep - 1`` tokens of every row (where every completion lies)."""
    import torch

    logits = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=batch.keep,
    ).logits[:, :-1]
    targets = batch.input_ids[:, -(batch.keep - 1) :]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def policy_loss(model: Any, samples: Sequence[Sample], advantages: Sequence[float], beta: float, total_tokens: int):
    """Sum over the policy's tokens of -A * ratio (+ beta * KL), divided by ``total_tokens``; and the KL sum."""
    import torch

    batch = pack(samples, pad_id=0)
    mask = batch.loss_mask[:, -(batch.keep - 1) :].float()
    logp = token_logprobs(model, batch)
    adv = torch.tensor(list(advantages), dtype=logp.dtype).unsqueeze(1)
    per_token = -adv * torch.exp(logp - logp.detach())  # value -A, gradient -A * grad log p (on-policy)
    kl = torch.zeros_like(logp)
    if beta > 0:
        with torch.no_grad(), model.disable_adapter():
            ref = token_logprobs(model, batch)
        diff = ref - logp
        kl = torch.exp(diff) - diff - 1
        per_token = per_token + beta * kl
    return (per_token * mask).sum() / total_tokens, float((kl.detach() * mask).sum())


# -- rollouts ---------------------------------------------------------------------------------------------------


@dataclass
class Rollout:
    """Everything a rollout needs besides the policy's backend."""

    setups: list[EpisodeSetup]
    seat: int
    partner: str
    evaluator: Evaluator | None
    env: EnvConfig
    settings: GenerationSettings
    constrained: bool = True
    api_base: str | None = None
    turn_reward: float = 0.0
    partner_settings: GenerationSettings = field(default_factory=GenerationSettings)

    def partner_agent(self) -> Agent:
        from sotopia_env.agents.loading import load_agent

        return load_agent(self.partner, settings=self.partner_settings, api_base=self.api_base)


async def play_one(rollout: Rollout, backend: Backend, setup: EpisodeSetup, seed: int, tokenizer: Any) -> Episode:
    """One episode of the policy (on ``backend``) in its seat against the partner, rated; its samples."""
    from dataclasses import replace

    from sotopia_env.episodes.runner import play

    recorder = RecordingBackend(backend)
    policy = LLMAgent(recorder, settings=replace(rollout.settings, seed=seed), constrained=rollout.constrained)
    try:
        partner = rollout.partner_agent()
        seats: list[Agent] = [partner, partner]
        seats[rollout.seat] = policy
        specs = [rollout.partner] * 2
        specs[rollout.seat] = backend.model
        log = await play(setup, seats, rollout.evaluator, rollout.env, specs, seed=seed)
    except Exception as exc:  # a partner or judge that breaks: this episode is unrated, the run goes on
        return Episode(None, None, samples_of(recorder.calls, tokenizer), f"{type(exc).__name__}: {exc}")
    reward = episode_reward(log, setup.agent_names[rollout.seat], rollout.env.reward_dimension, rollout.turn_reward)
    return Episode(log, reward, samples_of(recorder.calls, tokenizer))


async def play_many(
    rollout: Rollout, backend: Backend, starts: Sequence[tuple[EpisodeSetup, int]], tokenizer: Any
) -> list[Episode]:
    """Every (setup, seed) concurrently: the policy's requests meet in the local backend's batches."""
    return list(await asyncio.gather(*(play_one(rollout, backend, s, seed, tokenizer) for s, seed in starts)))


def policy_backend(model: Any, tokenizer: Any, name: str, max_batch_size: int, executor: Executor) -> Backend:
    """A local backend on the live model, a fresh one per step: its prefix cache holds this step's weights only.
    It generates on ``executor``, the loop's one torch thread, where the updates run too."""
    from sotopia_env.backends.local import LocalBackend

    return LocalBackend(model, tokenizer, name, max_batch_size=max_batch_size, prefix_cache_mb=256, executor=executor)


def update_policy(
    model: Any, optimizer: Any, trained: Sequence[tuple[Sample, float]], beta: float, batch_size: int
) -> tuple[float, float, int]:
    """One AdamW step on every (sample, advantage) in ``trained``: the loss, the KL sum, the policy tokens. It
    leaves the model in train mode; the loop puts it back in eval mode before it generates."""
    import torch

    tokens = sum(len(s.completion_ids) for s, _ in trained)
    loss_value, kl_sum = 0.0, 0.0
    if not trained:
        return loss_value, kl_sum, tokens
    model.train()
    for k in range(0, len(trained), batch_size):
        chunk = trained[k : k + batch_size]
        loss, kl = policy_loss(model, [s for s, _ in chunk], [a for _, a in chunk], beta, tokens)
        loss.backward()
        loss_value += float(loss.detach())
        kl_sum += kl
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss_value, kl_sum, tokens


# -- the loop ---------------------------------------------------------------------------------------------------


def make_rollout(config: GRPOStageConfig, policy_spec: str) -> Rollout:
    """The config's group starts (every setup of its scenarios, shuffled by seed), partner, evaluator, env."""
    from sotopia_env.evaluator_spec import make_evaluator
    from sotopia_env.library import load_library
    from sotopia_env.sampler import sample_setups

    library = load_library(config.scenarios_dir)
    scenarios = library.select(config.scenarios)
    if not scenarios:
        raise TaskError(f"task 'episodes': no scenarios match {config.scenarios!r}")
    setups = sample_setups(sorted(scenarios, key=lambda s: s.id), library, 1, seed=config.seed)
    random.Random(config.seed).shuffle(setups)
    partner = policy_spec if config.partner == FROZEN_POLICY else config.partner
    return Rollout(
        setups=setups,
        seat=config.seat,
        partner=partner,
        evaluator=make_evaluator(config.evaluator, "goal", config.api_base),
        env=EnvConfig(max_turns=config.max_turns),
        settings=GenerationSettings(temperature=config.temperature, max_new_tokens=config.max_completion_length),
        constrained=config.constrained,
        api_base=config.api_base,
        turn_reward=config.turn_reward,
    )


def train_episode_grpo(config: GRPOStageConfig) -> GRPOResult:
    """GRPO on whole episodes; see the module docstring."""
    import torch
    from peft import get_peft_model

    from sotopia_env.embedded_models import resolve_model_path
    from sotopia_env.training.trainer import adapter_setup, decide_precision, load_model, load_tokenizer

    started = time.perf_counter()
    policy_spec = config.base_model
    if config.init_adapter is None:
        config = config.starting_from(config.base_model)
    if config.max_steps < 1:
        raise TaskError("task 'episodes' needs max_steps (the number of GRPO steps), at least 1")
    out = Path(config.output_dir)
    checkpoints = out / CHECKPOINTS_DIR
    checkpoints.mkdir(parents=True, exist_ok=True)
    rollout = make_rollout(config, policy_spec)

    torch.manual_seed(config.seed)
    bf16, qlora = decide_precision(config)
    tokenizer = load_tokenizer(resolve_model_path(config.base_model), config.init_adapter)
    model = load_model(resolve_model_path(config.base_model), bf16, qlora, config.gradient_checkpointing)
    model, lora = adapter_setup(model, config)
    if lora is not None:
        model = get_peft_model(model, lora)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate)
    state = resume(model, optimizer, checkpoints)
    resumed_from = state.get("checkpoint")
    log: list[dict[str, Any]] = state.get("log", [])
    tally = {"unrated": state.get("unrated", 0), "no_signal": state.get("no_signal", 0)}

    # generation and updates share one thread (see policy_backend); on CPU a second thread ran twice as slow
    torch_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="episode-grpo")
    with torch_thread, progress_bar("episode GRPO", config.max_steps, config.progress) as show:
        show(len(log))
        for step in range(len(log) + 1, config.max_steps + 1):
            t0 = time.perf_counter()
            # 1-2. the step's group starts, each played group_size times (different seeds), concurrently
            n = len(rollout.setups)
            firsts = [
                rollout.setups[((step - 1) * config.groups_per_step + g) % n] for g in range(config.groups_per_step)
            ]
            starts = [
                (setup, config.seed + 10_000 * step + 100 * g + i)
                for g, setup in enumerate(firsts)
                for i in range(config.group_size)
            ]
            model.eval()
            size = config.group_size * config.groups_per_step
            backend = policy_backend(model, tokenizer, policy_spec, size, torch_thread)
            episodes = asyncio.run(play_many(rollout, backend, starts, tokenizer))
            # 3-4. rewards and group advantages
            rewards = [e.reward for e in episodes]
            advantages: list[float | None] = []
            for g in range(config.groups_per_step):
                group = group_advantages(rewards[g * config.group_size : (g + 1) * config.group_size])
                tally["no_signal"] += all(not a for a in group)
                advantages.extend(group)
            unrated = sum(r is None for r in rewards)
            tally["unrated"] += unrated
            # 5-6. one update on every generation of the episodes with a nonzero advantage
            trained = [(s, a) for e, a in zip(episodes, advantages, strict=True) if a for s in e.samples]
            update = torch_thread.submit(update_policy, model, optimizer, trained, config.beta, config.batch_size)
            loss_value, kl_sum, tokens = update.result()
            rated = [r for r in rewards if r is not None]
            log.append(
                {
                    "step": step,
                    "reward": statistics.fmean(rated) if rated else None,
                    "loss": loss_value,
                    "kl": kl_sum / tokens if tokens else 0.0,
                    "turns": statistics.fmean(len(e.log.turns) for e in episodes if e.log) if rated else None,
                    "episodes": len(episodes),
                    "unrated": unrated,
                    "trained_sequences": len(trained),
                    "seconds": round(time.perf_counter() - t0, 2),
                }
            )
            show(len(log), step_line(log[-1]))
            if step % config.save_steps == 0 or step == config.max_steps:
                save_checkpoint(model, optimizer, checkpoints, step, {"log": log, **tally}, config.save_total_limit)

    model.eval()
    save_model_spec(model, tokenizer, out, config.base_model)
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
        log=log,
    )
    result.save(out / RESULT_FILE)
    del model, optimizer
    release_memory()
    return result


# -- checkpoints ------------------------------------------------------------------------------------------------


def save_checkpoint(model: Any, optimizer: Any, checkpoints: Path, step: int, state: dict, keep: int) -> None:
    """``checkpoints/step-N``: the adapter, the optimizer and ``state.json`` (written last: a checkpoint without
    it is incomplete and ignored). Only the newest ``keep`` are kept."""
    import torch

    where = checkpoints / f"step-{step}"
    model.save_pretrained(str(where))
    torch.save(optimizer.state_dict(), where / "optimizer.pt")
    (where / STATE_FILE).write_text(json.dumps({"step": step, **state}, indent=2))
    for old in _checkpoints(checkpoints)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def _checkpoints(checkpoints: Path) -> list[Path]:
    done = [p for p in checkpoints.glob("step-*") if (p / STATE_FILE).is_file()]
    return sorted(done, key=lambda p: int(p.name.removeprefix("step-")))


def resume(model: Any, optimizer: Any, checkpoints: Path) -> dict:
    """Load the newest complete checkpoint into ``model`` and ``optimizer``; its state (empty when none)."""
    import torch
    from peft import set_peft_model_state_dict
    from peft.utils import load_peft_weights

    found = _checkpoints(checkpoints)
    if not found:
        return {}
    last = found[-1]
    set_peft_model_state_dict(model, load_peft_weights(str(last)))
    optimizer.load_state_dict(torch.load(last / "optimizer.pt", weights_only=True))
    return {**json.loads((last / STATE_FILE).read_text()), "checkpoint": str(last)}


def step_line(row: dict[str, Any]) -> str:
    """The progress bar's label after a step: its reward, KL, turns and unrated episodes."""
    reward = "-" if row["reward"] is None else f"{row['reward']:.2f}"
    turns = "-" if row["turns"] is None else f"{row['turns']:.1f}"
    return f"episode GRPO  reward {reward}  kl {row['kl']:.4f}  turns {turns}  unrated {row['unrated']}"
