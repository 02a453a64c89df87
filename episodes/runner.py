"""Running episodes: one at a time (``play``) or many, concurrently and resumably (``run_batch``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.base import Agent, Usage, reset_agent
from agents.loading import load_agent
from episodes.log import AgentSpec, EpisodeLog, UsageRecord, combo_key
from episodes.store import EpisodeStore
from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.env import EnvConfig, SocialEnv
from sotopia_env.evaluation import Evaluator, aevaluate_safely
from sotopia_env.observation import Observation
from sotopia_env.sampler import EpisodeSetup
from sotopia_env.transcript import Turn

AgentFactory = Callable[[str, int], Agent]
TurnCallback = Callable[[Turn], None]
_NONE = AgentAction(action_type=ActionType.none)


@dataclass
class Job:
    """One episode to run: a setup, one agent spec per seat, and a repeat index."""

    setup: EpisodeSetup
    agent_specs: list[str]
    repeat: int = 0

    @property
    def key(self) -> str:
        return combo_key(self.setup, self.agent_specs, self.repeat)


def _usage_record(agent: object) -> UsageRecord:
    usage = getattr(agent, "usage", None)
    return UsageRecord(**vars(usage)) if isinstance(usage, Usage) else UsageRecord()


async def _act(agent: Agent, observation: Observation) -> AgentAction:
    """An agent's action; an exception inside a (custom) agent becomes its failed action."""
    try:
        return await agent.act(observation)
    except Exception as exc:
        return AgentAction.failed(f"{type(agent).__name__} raised {type(exc).__name__}: {exc}")


async def play(
    setup: EpisodeSetup,
    agents: Sequence[Agent],
    evaluator: Evaluator | None = None,
    config: EnvConfig | None = None,
    specs: Sequence[str] | None = None,
    tag: str = "",
    repeat: int = 0,
    on_turn: TurnCallback | None = None,
    seed: int | None = None,
) -> EpisodeLog:
    """Play one episode to its end and rate it. Returns the log; stores nothing."""
    started = time.perf_counter()
    env = SocialEnv(setup=setup, config=config)
    for agent in agents:
        reset_agent(agent)
    by_name = dict(zip(setup.agent_names, agents, strict=True))
    obs, infos = env.reset(seed=seed)
    while env.agents:
        acting = [name for name in env.agents if infos[name]["acting"]]
        chosen = await asyncio.gather(*(_act(by_name[n], Observation.from_env(obs[n])) for n in acting))
        actions: dict[str, Any] = dict.fromkeys(env.agents, _NONE) | dict(zip(acting, chosen, strict=True))
        before = len(env.turns)
        obs, _, _, _, infos = env.step(actions)
        if on_turn is not None:
            for turn in env.turns[before:]:
                on_turn(turn)
    rating = await aevaluate_safely(evaluator, env.context()) if evaluator is not None else None
    specs = list(specs) if specs is not None else [getattr(a, "model", type(a).__name__) for a in agents]
    usage = {name: _usage_record(agent) for name, agent in by_name.items()}
    if rating is not None and rating.usage:
        usage["evaluator"] = UsageRecord(**rating.usage)
    return EpisodeLog(
        tag=tag,
        combo_key=combo_key(setup, specs, repeat),
        setup=setup,
        agents=[
            AgentSpec(name=name, model=spec, agent_class=type(agent).__name__)
            for name, spec, agent in zip(setup.agent_names, specs, agents, strict=True)
        ],
        turns=env.turns,
        termination_reason=env.termination_reason,
        action_order=env.config.action_order,
        seed=seed,
        rating=rating,
        status="rated" if rating is not None and rating.rated else "unrated",
        agent_errors=dict(env.errors),
        usage=usage,
        wall_seconds=round(time.perf_counter() - started, 3),
    )


def default_agent_factory(**agent_options: Any) -> AgentFactory:
    return lambda spec, seat: load_agent(spec, **agent_options)


@dataclass
class BatchSummary:
    total: int = 0
    skipped: int = 0
    rated: int = 0
    unrated: int = 0
    failed: int = 0
    episode_ids: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0


def _failed_log(job: Job, tag: str, exc: BaseException, started: float) -> EpisodeLog:
    return EpisodeLog(
        tag=tag,
        combo_key=job.key,
        setup=job.setup,
        agents=[
            AgentSpec(name=n, model=s, agent_class="?")
            for n, s in zip(job.setup.agent_names, job.agent_specs, strict=False)
        ],
        status="failed",
        error=f"{type(exc).__name__}: {exc}",
        wall_seconds=round(time.perf_counter() - started, 3),
    )


def plan(jobs: Sequence[Job], store: EpisodeStore, tag: str, rerun_failed: bool = False) -> tuple[list[Job], int]:
    """The jobs still to run under ``tag``: not stored yet, or (with ``rerun_failed``) failed/unrated."""
    done = store.combo_status(tag)
    redo = ("failed", "unrated") if rerun_failed else ()
    todo = [j for j in jobs if j.key not in done or done[j.key] in redo]
    return todo, len(jobs) - len(todo)


async def run_batch(
    jobs: Sequence[Job],
    store: EpisodeStore,
    tag: str,
    evaluator: Evaluator | None = None,
    agent_factory: AgentFactory | None = None,
    concurrency: int = 8,
    config: EnvConfig | None = None,
    rerun_failed: bool = False,
    progress: bool = True,
) -> BatchSummary:
    """Run every job not already done under ``tag``, ``concurrency`` at a time, storing each as it ends.

    A job that raises is stored as ``failed`` with its error; the batch goes on.
    Rerunning a failed or unrated combo replaces its stored episode (same id).
    """
    agent_factory = agent_factory or default_agent_factory()
    todo, skipped = plan(jobs, store, tag, rerun_failed)
    old_ids: dict[str, str] = {}
    if rerun_failed and todo:
        keys = {j.key for j in todo}
        old_ids = {log.combo_key: log.id for log in store.iter(tag) if log.combo_key in keys}
    summary = BatchSummary(total=len(jobs), skipped=skipped)
    started = time.perf_counter()
    semaphore = asyncio.Semaphore(max(1, concurrency))

    async def run_one(job: Job) -> EpisodeLog:
        async with semaphore:
            t0 = time.perf_counter()
            try:
                agents = [agent_factory(spec, seat) for seat, spec in enumerate(job.agent_specs)]
                specs = job.agent_specs
                log = await play(job.setup, agents, evaluator, config, specs, tag, job.repeat, seed=job.repeat)
            except Exception as exc:
                log = _failed_log(job, tag, exc, t0)
            if job.key in old_ids:
                log.id = old_ids[job.key]
            await asyncio.to_thread(store.put, log)
            return log

    from episodes.progress import track

    for log in await track([run_one(j) for j in todo], description=f"episodes [{tag}]", enabled=progress):
        setattr(summary, log.status, getattr(summary, log.status) + 1)
        summary.episode_ids.append(log.id)
    summary.wall_seconds = round(time.perf_counter() - started, 3)
    return summary
