"""What every stage needs: the config, the scenario library, the episode store, the evaluator, and a way to run jobs."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from episodes.runner import BatchSummary, Job, default_agent_factory, run_batch
from episodes.store import EpisodeStore, open_store
from sotopia_env.backends.base import GenerationSettings
from sotopia_env.evaluation import Evaluator
from sotopia_env.evaluator_spec import make_evaluator
from sotopia_env.library import Library, load_library
from sotopia_env.profiles import Scenario
from training.config import ConfigError, PipelineConfig


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
    evaluator: Evaluator
    progress: bool = True

    @classmethod
    def open(cls, config: PipelineConfig, progress: bool = True) -> StageContext:
        from sotopia_env.library import LibraryError

        config.out.mkdir(parents=True, exist_ok=True)
        try:
            library = load_library(config.scenarios_dir)
            evaluator = make_evaluator(config.evaluator.model, config.evaluator.dimensions, config.api_base)
        except (LibraryError, ValueError) as exc:
            raise ConfigError(f"{config.source}: {exc}") from None
        if evaluator is None:
            raise ConfigError(f"{config.source}: field 'evaluator.model': the pipeline rates its episodes; not 'none'")
        store = open_store(config.store_url)
        store.ping()  # a store that cannot keep the episodes fails the stage before anything is played
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

    def run_jobs(self, jobs: Sequence[Job], tag: str) -> BatchSummary:
        """Run (or resume) the jobs under ``tag``, rated by the evaluator, then free the local models they loaded.

        A store that stays down past ``store_retry_seconds`` ends the stage with ``EpisodesSpilled`` (a StoreError
        naming the spill file in the output dir) once every episode was played."""
        c = self.config
        settings = GenerationSettings(
            temperature=c.generation.temperature, max_new_tokens=c.generation.max_new_tokens, seed=c.seed
        )
        factory = default_agent_factory(settings=settings, api_base=c.api_base)
        try:
            episodes = run_batch(
                jobs,
                self.store,
                tag,
                self.evaluator,
                factory,
                c.concurrency,
                c.env,
                progress=self.progress,
                retry_seconds=c.store_retry_seconds,
                spill_dir=c.out.resolve(),
                max_calls=c.max_calls,
            )  # play -> rate -> store, each episode through episodes.runner.run_episode
            return asyncio.run(episodes)
        finally:
            release_backends({spec for job in jobs for spec in job.agent_specs}, keep=self.evaluator)


def release_backends(specs: set[str], keep: object = None) -> None:
    """Free the shared backends of ``specs`` (except the evaluator's) and the memory they held."""
    from sotopia_env.backends import resolve
    from training.trainer import release_memory

    resolve.release_backends(specs, keep=getattr(keep, "backend", None))
    release_memory()
