"""A benchmark: MODEL against PARTNER on a scenario set, MODEL in each seat in turn, rated, stored and reported.

``BenchmarkSpec`` is the one description of a benchmark: the body of ``POST /api/benchmarks`` and what the CLI's
``benchmark`` options parse into, validated where it enters and passed on unchanged. The one planner
(``plan.plan_episodes``, here ``plan_benchmark``) turns it into jobs: the scenarios ``scenarios`` selects
(``jobs.benchmark_jobs``), or with ``protocol`` the character pairings of SOTOPIA's episodes in the store
(``sotopia_protocol``). ``run_benchmark`` plays them through
``run_batch`` (or Ray actors) under the spec's tag, so a benchmark is resumable by nature: it plays only the
combinations not stored yet. It returns the counts and the report, with each game role's win rate where there
are games.

Messages name a spec's fields; validated with ``context={"flags": True}`` they name the CLI's options instead
(``--max-turns``, not ``max_turns``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator, model_validator

from sotopia_env.backends.endpoints import ModelServers
from sotopia_env.episodes.job_fields import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_TURNS,
    DEFAULT_MODEL,
    EPISODES_PER_SCENARIO_HELP,
    MAX_CALLS,
    MAX_CALLS_HELP,
    MAX_EPISODES_PER_SCENARIO,
    Concurrency,
    MaxTurns,
    Seed,
    Tag,
    WholeNumber,
)
from sotopia_env.episodes.plan import (
    SPEC_CHARS,
    EpisodePlan,
    agents_of,
    judge_of,
    option_name,
    plan_episodes,
    service_parties,
)

if TYPE_CHECKING:
    from sotopia_env.episodes.game_report import RoleRow
    from sotopia_env.episodes.log import EpisodeLog
    from sotopia_env.episodes.ray_batch import RayConfig
    from sotopia_env.episodes.report import Report
    from sotopia_env.episodes.runner import AgentFactory, BatchSummary
    from sotopia_env.episodes.store import EpisodeStore
    from sotopia_env.evaluators import Evaluator
    from sotopia_env.library import Library

BenchmarkPlan = EpisodePlan  # a benchmark's plan (``plan.plan_episodes``): its scenarios and jobs


class BenchmarkSpec(BaseModel):
    """One benchmark (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(
        DEFAULT_MODEL,
        min_length=1,
        max_length=SPEC_CHARS,
        description="The model under test (plays every seat in turn).",
    )
    partner: str = Field(
        DEFAULT_MODEL,
        min_length=1,
        max_length=SPEC_CHARS,
        description="The fixed partner(s): a model spec, 'rule-partner' (verifiable scenarios) or 'rule-player' "
        "(games).",
    )
    evaluator: str = Field(
        DEFAULT_MODEL,
        min_length=1,
        max_length=SPEC_CHARS,
        description="The judge: a model spec, 'verifiable' (exact, verifiable scenarios), 'rule-based' or 'none'.",
    )
    scenarios: str = Field(
        "test",
        min_length=1,
        max_length=2000,
        description="all, hard, test, dev, train, a tag, TAG:SPLIT (verifiable:test), or comma ids.",
    )
    episodes_per_scenario: Annotated[
        int,
        Field(ge=1, le=MAX_EPISODES_PER_SCENARIO, description=EPISODES_PER_SCENARIO_HELP),
        WholeNumber,
    ] = 1
    concurrency: Concurrency = DEFAULT_CONCURRENCY
    max_turns: MaxTurns = DEFAULT_MAX_TURNS
    seed: Seed = 0
    dimensions: str = Field(
        "sotopia", max_length=2000, description="'sotopia' (all seven), 'goal', or a comma list of dimension names."
    )
    tag: Tag | None = Field(None, description="Tag for the episodes (default: benchmark-MODEL-vs-PARTNER).")
    api_base: ModelServers | None = Field(None, description="Model servers (a URL, a comma list, or a list).")
    max_calls: Annotated[int, Field(ge=1, le=MAX_CALLS, description=MAX_CALLS_HELP), WholeNumber] | None = None
    rerun_failed: StrictBool = Field(False, description="Rerun the tag's failed or unrated episodes.")
    protocol: str | None = Field(
        None,
        description="SOTOPIA's published protocol: sotopia-hard or sotopia-all (5 imported character pairs per "
        "scenario, 20 turns, all seven dimensions); fixes scenarios, episodes_per_scenario, max_turns, dimensions.",
    )

    @field_validator("dimensions")
    @classmethod
    def _known_dimensions(cls, value: str) -> str:
        from sotopia_env.evaluators import dimensions_from_config

        dimensions_from_config(value)
        return value

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, value: str | None) -> str | None:
        from sotopia_env.episodes.sotopia_protocol import protocols

        if value is not None and value not in protocols():
            raise ValueError(f"expected {' or '.join(protocols())}, not {value!r}")
        return value

    @model_validator(mode="after")
    def _protocol_fixes(self, info: ValidationInfo) -> BenchmarkSpec:
        if self.protocol is None:
            return self
        from sotopia_env.episodes.sotopia_protocol import get_protocol

        fixed = get_protocol(self.protocol)
        given = {
            "scenarios": self.scenarios != "test",
            "episodes_per_scenario": self.episodes_per_scenario != 1,
            "max_turns": self.max_turns != fixed.max_turns,
            "dimensions": self.dimensions != fixed.dimensions,
        }
        if any(given.values()):
            names = ", ".join(option_name(name, info) for name, set_ in given.items() if set_)
            raise ValueError(f"{option_name('protocol', info)} {self.protocol} fixes {names}")
        return self

    @property
    def chosen_tag(self) -> str:
        protocol = f"{self.protocol}-" if self.protocol else ""
        return self.tag or f"benchmark-{protocol}{self.model}-vs-{self.partner}"

    def agent_options(self) -> dict[str, Any]:
        """What its agents are built with (``agents.loading.load_agent``): sampling seeded by the spec, and with
        ``protocol`` that protocol's prompt (else each model's own)."""
        from sotopia_env.backends.base import GenerationSettings
        from sotopia_env.episodes.sotopia_protocol import get_protocol

        prompt = get_protocol(self.protocol).prompt if self.protocol is not None else None
        return {"settings": GenerationSettings(seed=self.seed), "api_base": self.api_base, "prompt": prompt}

    def plan(self, library: Library, store: EpisodeStore | None = None, *, flags: bool = False) -> EpisodePlan:
        """Its episodes (``plan.plan_episodes``): the scenarios it selects, or with ``protocol`` the character
        pairings of SOTOPIA's episodes in ``store``, each with the model in each seat in turn."""
        from sotopia_env.agents.rule_specs import check_rule_specs
        from sotopia_env.episodes.jobs import benchmark_jobs, setup_versus_jobs
        from sotopia_env.episodes.sotopia_protocol import get_protocol, protocol_setups

        if self.protocol is None:
            chosen, jobs = benchmark_jobs(
                library, self.scenarios, self.model, self.partner, self.evaluator, self.episodes_per_scenario,
                self.seed,
            )  # fmt: skip
            return EpisodePlan(self, chosen, jobs, self.evaluator)
        if store is None:
            raise ValueError(f"--protocol {self.protocol} reads SOTOPIA's episodes from a store; none was given")
        setups = protocol_setups(store, get_protocol(self.protocol))
        scenarios = list({s.scenario.id: s.scenario for s in setups}.values())
        check_rule_specs(scenarios, [self.model, self.partner], self.evaluator)
        return EpisodePlan(self, scenarios, setup_versus_jobs(setups, self.model, self.partner), self.evaluator)


@dataclass
class BenchmarkResult:
    """What a benchmark played (``summary``) and its report over everything stored under its tag."""

    summary: BatchSummary
    report: Report
    roles: list[RoleRow] = field(default_factory=list)  # each game role's win rate (games only)

    def to_dict(self) -> dict[str, Any]:
        from sotopia_env.episodes.game_report import with_roles

        return with_roles(self.report.to_dict(), self.roles)


def plan_benchmark(spec: BenchmarkSpec, library: Library, store: EpisodeStore) -> BenchmarkPlan:
    """The jobs ``spec`` asks for (``plan.plan_episodes``); ``ValueError`` with one line when there is nothing to
    play (an unknown scenario, a rule agent where it cannot play, a protocol whose SOTOPIA episodes were not
    imported)."""
    return plan_episodes(spec, library, store)


def benchmark_agents(spec: BenchmarkSpec) -> AgentFactory:
    """The agents of a benchmark's episodes (built where they play: a Ray actor calls this itself)."""
    return agents_of(spec)


def benchmark_judge(spec: BenchmarkSpec) -> Evaluator | None:
    return judge_of(spec)


async def check_benchmark_services(spec: BenchmarkSpec) -> None:
    """A benchmark's preflight (``episodes.preflight``): the model services of its seats and its judge answer,
    else ``PreflightFailed`` (one line naming the model, the endpoint and the fix). Local models are not built
    here (they load where they play)."""
    from sotopia_env.episodes.preflight import acheck_services

    agents = benchmark_agents(spec)
    judge = partial(benchmark_judge, spec)
    parties = service_parties([spec.model, spec.partner], spec.evaluator, lambda s: agents(s, 0), judge)
    await acheck_services(parties)


async def run_benchmark(
    spec: BenchmarkSpec,
    store: EpisodeStore,
    on_episode: Callable[[EpisodeLog], None] | None = None,
    *,
    plan: BenchmarkPlan | None = None,
    library: Library | None = None,
    progress: bool = False,
    retry_seconds: float | None = None,
    ray: RayConfig | None = None,
) -> BenchmarkResult:
    """Play ``spec`` (``plan``, else planned here against ``library``, default the built-in one) under its tag
    into ``store``, then report on the tag. ``on_episode`` is called with each finished episode (not with
    ``ray``: the actors play them, and the Ray driver, which blocks this loop, shows the progress)."""
    from sotopia_env.env import EnvConfig
    from sotopia_env.episodes.game_report import role_win_rates
    from sotopia_env.episodes.report import build_report
    from sotopia_env.episodes.runner import run_batch
    from sotopia_env.episodes.store_writer import DEFAULT_RETRY_SECONDS

    if plan is None:
        from sotopia_env.library import load_library

        plan = plan_benchmark(spec, library or load_library(), store)
    tag, config = spec.chosen_tag, EnvConfig(max_turns=spec.max_turns)
    retry = DEFAULT_RETRY_SECONDS if retry_seconds is None else retry_seconds
    if ray is None:
        summary = await run_batch(
            plan.jobs,
            store,
            tag,
            benchmark_judge(spec),
            benchmark_agents(spec),
            spec.concurrency,
            config,
            spec.rerun_failed,
            progress=progress,
            retry_seconds=retry,
            max_calls=spec.max_calls,
            on_episode=on_episode,
        )
    else:
        from sotopia_env.episodes.ray_batch import BatchRecipe, run_batch_on_ray

        make = (partial(benchmark_agents, spec), partial(benchmark_judge, spec))
        recipe = BatchRecipe(
            store.url, tag, *make, spec.concurrency, config, spec.rerun_failed, retry, max_calls=spec.max_calls
        )
        summary = run_batch_on_ray(plan.jobs, store, recipe, ray, progress)
    logs = await asyncio.to_thread(lambda: list(store.iter(tag)))
    roles = role_win_rates(logs) if any(s.game is not None for s in plan.scenarios) else []
    return BenchmarkResult(summary, build_report(logs, tag=tag), roles)
