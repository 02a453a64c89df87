"""An episode's life in one place: ``run_episode`` plays, rates and stores it.

Every command and stage goes through ``run_episode``: ``sotopia-env run`` (one episode),
``run_batch`` (``benchmark`` and the training pipeline's episode stages: experts, self-play,
evaluation; with ``--ray``, inside each Ray actor of ``episodes.ray_batch``), and ``episodes evaluate``
(``episodes.rate``, which hands it episodes played before, so only the rate -> store tail runs). The steps:

1. play: ``play`` drives a ``SocialEnv`` with the agents (the one loop: ``sotopia_env.seat_driver.drive``); an
   agent that cannot be built, a model service that failed under a seat (``ServiceFailure``: a key refused, a
   server down, 5xx after retries), or any other exception, makes a ``failed`` log instead (a batch never dies
   of one episode). A model that answered without a valid action is the agent's error, in the transcript, and
   the episode goes on to be rated.
2. rate: ``rate`` calls ``sotopia_env.evaluators.aevaluate_safely``, the same call the env's own
   terminal reward makes; a rating that fails leaves the episode ``unrated`` with the error, and a judge whose
   service failed leaves it ``failed`` (never rated; ``--rerun-failed`` plays it again).
3. store: ``StoreWriter.put`` (``episodes.store_writer``) retries a store fault, then spills the
   episode to a JSONL file that ``episodes import`` restores.

``play`` with an evaluator is steps 1-2 for direct use (stores nothing, raises what breaks).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sotopia_env.actions import AgentAction
from sotopia_env.agents.base import Agent, Usage, reset_agent
from sotopia_env.agents.loading import load_agent
from sotopia_env.backends.base import ServiceFailure
from sotopia_env.backends.remote import call_limit
from sotopia_env.env import EnvConfig, SocialEnv
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.episodes.claims import DEFAULT_LEASE_SECONDS, Claims, ComboClaim, supports_claims
from sotopia_env.episodes.log import AgentSpec, EpisodeLog, combo_key
from sotopia_env.episodes.protocol import judged_by, played_under
from sotopia_env.episodes.store import EpisodeStore
from sotopia_env.episodes.store_writer import DEFAULT_RETRY_SECONDS, StoreWriter
from sotopia_env.errors import UserError
from sotopia_env.evaluators import EpisodeContext, Evaluator, aevaluate_safely
from sotopia_env.limits import DEFAULT_CONCURRENCY
from sotopia_env.observation import Observation
from sotopia_env.seat_driver import Step, drive
from sotopia_env.transcript import Turn

AgentFactory = Callable[[str, int], Agent]
TurnCallback = Callable[[Turn], None]


@dataclass
class Job:
    """One episode to run: a setup, one agent spec per seat, and a repeat index."""

    setup: EpisodeSetup
    agent_specs: list[str]
    repeat: int = 0
    seed: int | None = None  # the env's reset seed; None means the repeat index
    episode_id: str | None = None  # store under this id (a rerun replaces the failed episode in place)

    def __post_init__(self) -> None:
        if self.seed is None:
            self.seed = self.repeat

    @property
    def key(self) -> str:
        return combo_key(self.setup, self.agent_specs, self.repeat)


def _usage_of(agent: object) -> Usage:
    usage = getattr(agent, "usage", None)
    return usage.model_copy() if isinstance(usage, Usage) else Usage()


async def _act(agent: Agent, observation: Observation) -> AgentAction:
    """An agent's action; an exception inside a (custom) agent becomes its failed action, except a model
    service's failure (``ServiceFailure``), which is not the agent's: it fails the episode."""
    try:
        return await agent.act(observation)
    except ServiceFailure:
        raise
    except Exception as exc:
        return AgentAction.failed(f"{type(agent).__name__} raised {type(exc).__name__}: {exc}")


# -- the lifecycle ------------------------------------------------------------------------------------


async def run_episode(
    episode: Job | EpisodeLog,
    evaluator: Evaluator | None,
    writer: StoreWriter | EpisodeStore | None,
    *,
    agents: Sequence[Agent] | AgentFactory | None = None,
    tag: str = "",
    config: EnvConfig | None = None,
    on_turn: TurnCallback | None = None,
    slot: asyncio.Semaphore | None = None,
    claim: ComboClaim | None = None,
) -> EpisodeLog | None:
    """Play, rate and store one episode: the one path every command and stage takes.

    ``episode`` is a ``Job``, played by ``agents`` (one per seat, or a factory called per seat), or
    an episode played before, which is only rated and stored. ``slot`` (a batch's concurrency
    limit) is held while playing and rating, not while storing: a write being retried never holds
    up the rest of the batch. Returns the log, whether it was stored or spilled.

    ``writer`` is a batch's ``StoreWriter`` (retries, then spills; the batch reports what it spilled), or a store
    (``open_store``): then the episode is written through a ``StoreWriter`` of its own, and an episode it had to
    spill raises ``EpisodesSpilled`` (naming the file) after it is saved there.

    ``claim`` (``run_batch`` passes one): the combination is claimed in the store once the slot is held,
    and released after the store step. When another driver holds it, or has stored it, nothing is played and
    the return is None (``claim.outcome`` says which).
    """
    async with slot or contextlib.nullcontext():
        if claim is not None and not await claim.take():
            return None
        try:
            log = episode if isinstance(episode, EpisodeLog) else await _play_job(episode, agents, tag, config, on_turn)
            status_before = log.status
            log = await rate(log, evaluator)
        except BaseException:
            if claim is not None:
                await claim.release()
            raise
    if isinstance(episode, EpisodeLog) and log.status == "failed" != status_before:
        writer = None  # re-rating, the judge's service failed: the stored episode stays as it was
    own_writer = writer is not None and not isinstance(writer, StoreWriter)
    if own_writer:
        writer = StoreWriter(writer, tag)
    try:
        if writer is not None:
            await writer.put(log)
            if own_writer:
                writer.finish()
    finally:
        if claim is not None:
            await claim.release()
    return log


async def _play_job(
    job: Job,
    agents: Sequence[Agent] | AgentFactory | None,
    tag: str,
    config: EnvConfig | None,
    on_turn: TurnCallback | None,
) -> EpisodeLog:
    """Step 1 for a job: its transcript, or a ``failed`` log with the error."""
    started = time.perf_counter()
    seats: list[Agent] | None = None  # None: not built (the failed log's prompts are then unknown)
    try:
        factory = agents or default_agent_factory()
        seats = [factory(s, i) for i, s in enumerate(job.agent_specs)] if callable(factory) else list(factory)
        log = await play(job.setup, seats, None, config, job.agent_specs, tag, job.repeat, on_turn, job.seed)
    except Exception as exc:
        log = _failed_log(job, tag, exc, started, config or EnvConfig(), seats)
    if job.episode_id:
        log.id = job.episode_id
    return log


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
    """Steps 1-2 for direct use: play one episode to its end, then ``rate`` it (when given an evaluator).
    Stores nothing; raises what breaks. ``run_episode`` calls it without an evaluator and rates next."""
    started = time.perf_counter()
    setup = setup.drawn_with(seed)  # the hidden type the partner plays on and the judge reads, stored with the log
    env = SocialEnv(setup=setup, config=config)  # no evaluator: rating is step 2, off the env's sync path
    for seat, agent in enumerate(agents):
        reset_agent(agent, setup, seat, seed)
    by_name = dict(zip(setup.agent_names, agents, strict=True))
    obs, infos = env.reset(seed=seed)
    reported = len(env.turns)  # turns handed to on_turn (none of those made at reset, as before)

    def report(_: Step) -> None:
        nonlocal reported
        assert on_turn is not None
        for turn in env.turns[reported:]:
            on_turn(turn)
        reported = len(env.turns)

    await drive(env, agents, obs, infos, _act, report if on_turn is not None else None)  # the one loop
    specs = list(specs) if specs is not None else [getattr(a, "model", type(a).__name__) for a in agents]
    log = EpisodeLog(
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
        status="unrated",
        agent_errors=dict(env.errors),
        usage={name: _usage_of(agent) for name, agent in by_name.items()},
        wall_seconds=round(time.perf_counter() - started, 3),
        protocol=played_under(env.config, agents),
    )
    return await rate(log, evaluator)


async def rate(log: EpisodeLog, evaluator: Evaluator | None) -> EpisodeLog:
    """Step 2: the evaluator's rating, in place, and the judge's part of the episode's protocol record. No
    evaluator: unchanged; a failed episode (nothing to rate) gets only the judge's record, so that it stays on its
    batch's protocol card."""
    if evaluator is None:
        return log
    log.protocol = judged_by(log.protocol, evaluator)
    if log.status == "failed":
        return log
    context = EpisodeContext(setup=log.setup, turns=log.turns, termination_reason=log.termination_reason or "")
    try:
        rating = await aevaluate_safely(evaluator, context, raise_service_failures=True)
    except ServiceFailure as exc:  # the judge's service failed: never rated, played again by --rerun-failed
        log.rating = None
        log.status = "failed"
        log.error = f"the judge's model service failed ({exc.kind}): {exc}"
        return log
    log.rating = rating
    log.status = "rated" if rating.rated else "unrated"
    if rating.usage.calls:
        log.usage["evaluator"] = rating.usage
    return log


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


class EpisodesFailed(UserError):
    """Episodes of a batch failed (a model service failed under them): never rated; ``--rerun-failed`` (a
    pipeline stage run again) plays them again."""


def check_batch(summary: BatchSummary, store: EpisodeStore, tag: str) -> BatchSummary:
    """``summary``, or ``EpisodesFailed`` naming how many of its episodes failed and the first one's error."""
    if not summary.failed:
        return summary
    failed = set(summary.episode_ids)
    first = next((log.error for log in store.iter(tag) if log.id in failed and log.status == "failed"), None)
    first = first or f"sotopia-env episodes list --tag {tag} --status failed"
    raise EpisodesFailed(
        f"{summary.failed} of {summary.total} episodes under {tag!r} failed (never rated; they play again with "
        f"--rerun-failed, or when the stage runs again): {first}"
    )


def _failed_log(
    job: Job, tag: str, exc: BaseException, started: float, config: EnvConfig, agents: Sequence[Agent] | None = None
) -> EpisodeLog:
    return EpisodeLog(
        tag=tag,
        combo_key=job.key,
        setup=job.setup,
        agents=[
            AgentSpec(name=n, model=s, agent_class="?")
            for n, s in zip(job.setup.agent_names, job.agent_specs, strict=False)
        ],
        action_order=config.action_order,
        seed=job.seed,
        status="failed",
        error=f"a seat's model service failed ({exc.kind}): {exc}"
        if isinstance(exc, ServiceFailure)
        else f"{type(exc).__name__}: {exc}",
        wall_seconds=round(time.perf_counter() - started, 3),
        protocol=played_under(config, agents),
    )


def calls_in_flight(jobs: Sequence[Job], concurrency: int, config: EnvConfig | None = None) -> int:
    """The most LLM calls ``concurrency`` episodes of ``jobs`` can make at once: one each (the acting seat's, or
    the judge's), or one per seat when seats act simultaneously."""
    simultaneous = (config or EnvConfig()).action_order == "simultaneous"
    per_episode = max((len(j.agent_specs) for j in jobs), default=1) if simultaneous else 1
    return max(1, concurrency * per_episode)


def limits_line(concurrency: int, calls: int, capped: bool) -> str:
    """The one line a batch prints about its limits."""
    how = "capped by --max-calls" if capped else "--max-calls to cap"
    return f"concurrency {concurrency} episodes · up to {calls} calls per model ({how})"


def plan(jobs: Sequence[Job], store: EpisodeStore, tag: str, rerun_failed: bool = False) -> tuple[list[Job], int]:
    """The jobs still to run under ``tag``: not stored yet, or (with ``rerun_failed``) failed/unrated."""
    return _still_to_run(jobs, store.combo_status(tag), rerun_failed)


def _still_to_run(jobs: Sequence[Job], done: dict[str, str], rerun_failed: bool) -> tuple[list[Job], int]:
    redo = ("failed", "unrated") if rerun_failed else ()
    todo = [j for j in jobs if j.key not in done or done[j.key] in redo]
    return todo, len(jobs) - len(todo)


async def _then(episode: Awaitable[EpisodeLog | None], callback: Callable[[EpisodeLog], None]) -> EpisodeLog | None:
    log = await episode
    if log is not None:
        callback(log)
    return log


async def _once(claim: ComboClaim, play_it: Callable[[], Awaitable[EpisodeLog | None]]) -> EpisodeLog | None:
    """Play a combination under its claim; while another live driver holds it, wait for it to be stored (None)
    or for that driver's lease to lapse (then play it here)."""
    while True:
        log = await play_it()
        if log is not None or claim.outcome == "done":
            return log
        await asyncio.sleep(claim.claims.poll_seconds)


async def run_batch(
    jobs: Sequence[Job],
    store: EpisodeStore,
    tag: str,
    evaluator: Evaluator | None = None,
    agent_factory: AgentFactory | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    config: EnvConfig | None = None,
    rerun_failed: bool = False,
    progress: bool = True,
    retry_seconds: float = DEFAULT_RETRY_SECONDS,
    spill_dir: Path | None = None,
    max_calls: int | None = None,
    on_episode: Callable[[EpisodeLog], None] | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
) -> BatchSummary:
    """Run every job not already done under ``tag`` through ``run_episode``, ``concurrency`` at a time.
    ``on_episode`` is called with each finished episode (a Ray worker reports its progress through it).

    Each remote model takes as many calls at once as the episodes in flight can make (``calls_in_flight``),
    or ``max_calls`` where given (a rate-limited API); the limits are printed once when ``progress`` is on.
    A job that raises is stored as ``failed`` with its error; the batch goes on. Rerunning a failed
    or unrated combo replaces its stored episode (same id). While a store fault is retried (up to
    ``retry_seconds``), the other episodes keep playing; if the store stays down, the batch still
    plays to its end, spills what it could not store, and raises ``EpisodesSpilled`` naming the file.

    Exactly once across drivers (``episodes.claims``): each combination is claimed in the store before it is
    played, under a lease of ``lease_seconds`` renewed while it plays, so two drivers of the same batch on one
    store split the work, and a driver that died leaves its combinations to the others once its leases lapse.
    A combination another driver stored meanwhile counts as skipped.
    """
    done = store.combo_status(tag)  # what the plan saw: a claim plays a combination only while it still holds
    todo, skipped = _still_to_run(jobs, done, rerun_failed)
    if rerun_failed and todo:
        keys = {j.key for j in todo}
        old_ids = {log.combo_key: log.id for log in store.iter(tag) if log.combo_key in keys}
        todo = [replace(job, episode_id=old_ids.get(job.key)) for job in todo]
    summary = BatchSummary(total=len(jobs), skipped=skipped)
    started = time.perf_counter()
    writer = StoreWriter(store, tag, retry_seconds, spill_dir)
    slot = asyncio.Semaphore(max(1, concurrency))
    agents = agent_factory or default_agent_factory()
    claims = Claims(store, tag, lease_seconds) if supports_claims(store) else None

    def episode_of(job: Job) -> Awaitable[EpisodeLog | None]:
        def play_it(claim: ComboClaim | None = None) -> Awaitable[EpisodeLog | None]:
            return run_episode(job, evaluator, writer, agents=agents, tag=tag, config=config, slot=slot, claim=claim)

        if claims is None:
            return play_it()
        claim = claims.of(job.key, done.get(job.key))
        return _once(claim, lambda: play_it(claim))

    episodes = [episode_of(j) for j in todo]
    if on_episode is not None:
        episodes = [_then(episode, on_episode) for episode in episodes]
    limit = max_calls or calls_in_flight(todo, concurrency, config)

    from sotopia_env.episodes.progress import note, track

    if progress and todo:
        note(limits_line(concurrency, limit, capped=max_calls is not None))
    with call_limit(limit):
        async with claims.kept_alive() if claims is not None else contextlib.nullcontext():
            logs = await track(episodes, description=f"episodes [{tag}]", enabled=progress)
    for log in logs:
        if log is None:  # another driver played it
            summary.skipped += 1
            continue
        setattr(summary, log.status, getattr(summary, log.status) + 1)
        summary.episode_ids.append(log.id)
    summary.wall_seconds = round(time.perf_counter() - started, 3)
    writer.finish()
    return summary
