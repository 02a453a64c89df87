"""What every stage needs: the config, the scenario library, the episode store, the evaluator, and a way to run jobs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from sotopia_env.backends.base import GenerationSettings
from sotopia_env.backends.resolve import is_local_spec, prompt_for_model
from sotopia_env.episodes.preflight import check_services
from sotopia_env.episodes.ray_batch import BatchRecipe, run_batch_on_ray
from sotopia_env.episodes.runner import (
    AgentFactory,
    BatchSummary,
    Job,
    check_batch,
    default_agent_factory,
    plan,
    run_batch,
)
from sotopia_env.episodes.store import EpisodeStore, open_store
from sotopia_env.evaluators import Evaluator, make_evaluator
from sotopia_env.library import Library, load_library
from sotopia_env.profiles import Scenario
from sotopia_env.training.config import ConfigError, PipelineConfig
from sotopia_env.training.distributed import main_process_first
from sotopia_env.training.policy_server import SERVED_MODEL, PolicyServer, PolicyServerError, serving


@dataclass
class StageResult:
    """What a stage leaves behind (kept in ``state.json``)."""

    name: str
    model: str  # the policy after this stage: a model spec
    tag: str = ""  # the episodes' tag in the store
    episodes: dict[str, int] = field(default_factory=dict)
    dataset: str = ""
    train: dict[str, Any] | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def batch_counts(summary: BatchSummary) -> dict[str, int]:
    return {k: getattr(summary, k) for k in ("total", "skipped", "rated", "unrated", "failed")}


@dataclass
class StageContext:
    config: PipelineConfig
    library: Library
    store: EpisodeStore
    evaluator: Evaluator | None  # None on the other ranks of a multi-process run: only the main process rates
    progress: bool = True

    @classmethod
    def open(cls, config: PipelineConfig, progress: bool = True) -> StageContext:
        from sotopia_env.evaluators import NO_EVALUATOR
        from sotopia_env.library import LibraryError

        if config.evaluator.model.strip().lower() == NO_EVALUATOR:
            raise ConfigError(f"{config.source}: field 'evaluator.model': the pipeline rates its episodes; not 'none'")
        with main_process_first() as main:  # the main process makes the output dir and the store first
            config.out.mkdir(parents=True, exist_ok=True)
            try:
                library = load_library(config.scenarios_dir)
                # only the main process plays and rates: the other ranks load no judge
                c = config.evaluator
                evaluator = make_evaluator(c.model, c.dimensions, config.api_base) if main else None
            except (LibraryError, ValueError) as exc:
                raise ConfigError(f"{config.source}: {exc}") from None
            store = open_store(config.store_url)
            store.ping()  # a store that cannot keep the episodes fails the stage before anything is played
            if evaluator is not None:  # a judge with a wrong key or a dead server: one line, before any stage
                check_services([evaluator])
        return cls(config, library, store, evaluator, progress)

    @property
    def train_progress(self) -> bool:
        return self.progress and self.config.train.progress

    def tag(self, stage: str) -> str:
        """The store tag of a stage's episodes: ``RUN/STAGE`` (RUN = the output dir's name)."""
        return f"{self.config.out.resolve().name}/{stage}"

    def scenarios(self, field_name: str, selector: str, held_out: bool = False) -> list[Scenario]:
        """The scenarios a selector names. Training stages may not touch ``test``; evaluation must be held out."""
        from sotopia_env.library import LibraryError

        where = f"{self.config.source}: field '{field_name}'"
        try:
            chosen = self.library.select(selector)
        except LibraryError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if not chosen:
            raise ConfigError(f"{where}: {selector!r} selects no scenarios")
        for s in chosen:
            if held_out and s.split == "train":
                raise ConfigError(f"{where}: scenario {s.id!r} is in the train split; evaluate on dev or test")
            if not held_out and s.split == "test":
                raise ConfigError(f"{where}: scenario {s.id!r} is in the test split; never train on it")
        return chosen

    def shared_dataset(self, path: Path, build: Callable[[], tuple[Any, Any]]) -> tuple[Any, str]:
        """``(dataset, its summary)``: ``build()`` (a dataset and its ``DatasetStats``) on the main process, written
        to ``path`` (JSONL); the other ranks of a multi-process run wait for it and load the same rows from there."""
        with main_process_first() as main:
            if main:
                dataset, stats = build()
                path.parent.mkdir(parents=True, exist_ok=True)
                dataset.to_json(str(path))
                return dataset, stats.summary()
            from datasets import Dataset

            from sotopia_env.jsonl import json_lines

            return Dataset.from_list([row for _, row in json_lines(path)]), "(built by the main process)"

    def run_jobs(self, jobs: Sequence[Job], tag: str, policy: str | None = None) -> BatchSummary:
        """Run (or resume) the jobs under ``tag``, rated by the evaluator, then free the local models they loaded.

        With ``policy_server`` in the config, ``policy`` (the spec of the policy these jobs play) is served by it
        for the batch (``training.policy_server``). In a multi-process run only the main process plays and stores;
        the other ranks wait for it (their summary counts the stored episodes as skipped).

        A store that stays down past ``store_retry_seconds`` ends the stage with ``EpisodesSpilled`` (a StoreError
        naming the spill file in the output dir) once every episode was played. Every model service is probed
        first (``episodes.preflight``); episodes that failed on a service end the stage with ``EpisodesFailed``
        once the batch is over, and running the stage again plays them again."""
        with main_process_first() as main:
            if not main:
                return BatchSummary(total=len(jobs), skipped=plan(jobs, self.store, tag)[1])
            log = self.config.out.resolve() / "policy_server" / f"{tag.rpartition('/')[2]}.log"
            to_play = bool(plan(jobs, self.store, tag)[0])  # no server for a batch that is already done
            try:
                with serving(self.config.policy_server, policy if to_play else None, log) as server:
                    return self._play(jobs, tag, policy, server)
            except PolicyServerError as exc:
                kept = len(self.store.combo_status(tag))
                raise PolicyServerError(f"{exc}; the {kept} episodes stored under {tag!r} are kept") from None

    def _play(self, jobs: Sequence[Job], tag: str, policy: str | None, server: PolicyServer | None) -> BatchSummary:
        c = self.config
        settings = GenerationSettings(
            temperature=c.generation.temperature, max_new_tokens=c.generation.max_new_tokens, seed=c.seed
        )
        make_agents = partial(stage_agents, settings, c.api_base, policy, server.api_base if server else None)
        remote = {spec for job in jobs for spec in job.agent_specs if not is_local_spec(spec)}
        check_services([self.evaluator, *(make_agents()(spec, 0) for spec in sorted(remote))])
        try:
            if c.ray is not None:  # the same run_batch in every Ray actor, with backends each builds itself
                judge = partial(make_evaluator, c.evaluator.model, c.evaluator.dimensions, c.api_base)
                recipe = BatchRecipe(
                    c.store_url,
                    tag,
                    make_agents,
                    judge,
                    c.concurrency,
                    c.env,
                    True,  # a resumed stage plays again what failed (or went unrated) before
                    c.store_retry_seconds,
                    c.out.resolve(),
                    c.max_calls,
                )
                return check_batch(run_batch_on_ray(jobs, self.store, recipe, c.ray, self.progress), self.store, tag)
            episodes = run_batch(
                jobs,
                self.store,
                tag,
                self.evaluator,
                make_agents(),
                c.concurrency,
                c.env,
                rerun_failed=True,  # a resumed stage plays again what failed (or went unrated) before
                progress=self.progress,
                retry_seconds=c.store_retry_seconds,
                spill_dir=c.out.resolve(),
                max_calls=c.max_calls,
            )  # play -> rate -> store, each episode through episodes.runner.run_episode
            return check_batch(asyncio.run(server.guard(episodes) if server else episodes), self.store, tag)
        finally:
            specs = {spec for job in jobs for spec in job.agent_specs} | ({SERVED_MODEL} if server else set())
            release_backends(specs, keep=self.evaluator)


def stage_agents(
    settings: GenerationSettings, api_base: str | None, policy: str | None, served_api_base: str | None
) -> AgentFactory:
    """The agents of a stage's episodes; with a policy server (at ``served_api_base``), ``policy`` plays through it.
    A module-level function, so that Ray workers build the same agents from a ``partial`` of it."""
    factory = default_agent_factory(settings=settings, api_base=api_base)
    if served_api_base is None:
        return factory
    served = default_agent_factory(
        settings=settings, api_base=served_api_base, prompt=policy and prompt_for_model(policy)
    )
    return _served(policy, served, factory)


def _served(policy: str | None, served: AgentFactory, others: AgentFactory) -> AgentFactory:
    """Seats of ``policy`` play the served model (``SERVED_MODEL``); every other seat as ``others`` makes it."""
    return lambda spec, seat: served(SERVED_MODEL, seat) if spec == policy else others(spec, seat)


def release_backends(specs: set[str] | None, keep: object = None) -> None:
    """Free the shared backends of ``specs`` (all when None), except the evaluator's, and the memory they held."""
    from sotopia_env.backends import resolve
    from sotopia_env.training.model_setup import release_memory

    resolve.release_backends(specs, keep=getattr(keep, "backend", None))
    release_memory()
