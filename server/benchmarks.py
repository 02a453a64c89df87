"""``/api/benchmarks``: what the CLI's ``benchmark`` runs, started over HTTP, with progress.

A benchmark is ``run_batch`` over ``versus_jobs`` under its tag, as in the CLI, so it is resumable by nature:
an accepted one is recorded in the store's ``benchmarks`` queue and, after a restart, run again, which plays
only the combinations not stored yet. ``GET /api/benchmarks/{id}`` gives the episodes done out of the total and,
at the end, the report (with each game role's win rate where there are games).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from sotopia_env.agents.loading import is_custom_spec
from sotopia_env.backends.base import GenerationSettings
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.game_report import role_win_rates, with_roles
from sotopia_env.episodes.jobs import benchmark_jobs
from sotopia_env.episodes.report import build_report
from sotopia_env.episodes.runner import Job, default_agent_factory, run_batch
from sotopia_env.evaluator_spec import make_evaluator
from sotopia_env.library import Library
from sotopia_env.server.allowed_servers import AllowedModelServers

QUEUE = "benchmarks"
router = APIRouter(prefix="/api", tags=["benchmarks"])


class BenchmarkRequest(BaseModel):
    """The CLI's ``benchmark`` options that make sense over HTTP."""

    model_config = ConfigDict(extra="forbid")

    model: str = "smollm2-135m"
    partner: str = "smollm2-135m"
    evaluator: str = "smollm2-135m"
    scenarios: str = Field("test", max_length=2000)
    episodes_per_scenario: int = Field(1, ge=1, le=100)
    concurrency: int = Field(8, ge=1, le=1024)
    max_turns: int = Field(20, ge=1, le=200)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    dimensions: str = "sotopia"
    tag: str | None = Field(None, min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:\-]+$")
    api_base: str | None = Field(None, max_length=2000, pattern=r"^https?://\S+$")

    @property
    def chosen_tag(self) -> str:
        return self.tag or f"benchmark-{self.model}-vs-{self.partner}"


@dataclass
class Benchmark:
    id: str
    request: BenchmarkRequest
    jobs: list[Job]
    status: str = "running"
    done: int = 0
    report: dict[str, Any] | None = None
    error: str | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "tag": self.request.chosen_tag,
            "episodes": len(self.jobs),
            "finished": self.done,
            "report": self.report,
            "error": self.error,
        }


def jobs_of(
    request: BenchmarkRequest, library: Library, allow_code_agents: bool, servers: AllowedModelServers
) -> list[Job]:
    """The jobs the CLI's ``benchmark`` would run; ``ValueError`` with one line naming the field otherwise (a model
    server the operator did not list among them)."""
    servers.for_request(request.api_base)
    for name in ("model", "partner"):
        if is_custom_spec(getattr(request, name)) and not allow_code_agents:
            raise ValueError(f"{name}: {getattr(request, name)!r} would load code; the server refuses it")
    from sotopia_env.llm_evaluator import dimensions_from_config

    try:
        dimensions_from_config(request.dimensions)
    except ValueError as exc:
        raise ValueError(f"dimensions: {exc}") from None
    r = request
    try:
        _, jobs = benchmark_jobs(library, r.scenarios, r.model, r.partner, r.evaluator, r.episodes_per_scenario, r.seed)
        return jobs
    except ValueError as exc:  # LibraryError, NoEligibleCharacters, AgentSpecError are ValueErrors
        raise ValueError(f"scenarios: {exc}") from None


async def _run(bench: Benchmark, app: FastAPI) -> None:
    store, sims = app.state.store, app.state.simulations
    spec = bench.request
    api_base = sims.servers.for_request(spec.api_base)
    tag = spec.chosen_tag

    def finished(_: Any) -> None:
        bench.done += 1

    try:
        judge = make_evaluator(spec.evaluator, spec.dimensions, api_base)
        agents = default_agent_factory(settings=GenerationSettings(seed=spec.seed), api_base=api_base)
        config = EnvConfig(max_turns=spec.max_turns)
        summary = await run_batch(
            bench.jobs, store, tag, judge, agents, spec.concurrency, config, progress=False, on_episode=finished
        )
        bench.done = summary.total
        logs = await asyncio.to_thread(lambda: list(store.iter(tag)))
        rows = role_win_rates(logs) if any(j.setup.scenario.game is not None for j in bench.jobs) else []
        bench.report, bench.status = with_roles(build_report(logs, tag=tag).to_dict(), rows), "done"
        await asyncio.to_thread(store.queue_drop, QUEUE, bench.id)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a judge or store that fails: the benchmark says so; what was stored stays
        bench.status, bench.error = "failed", f"{type(exc).__name__}: {exc}"


def _start(app: FastAPI, bench: Benchmark) -> None:
    app.state.benchmarks[bench.id] = bench
    bench.task = asyncio.create_task(_run(bench, app), name=f"benchmark {bench.id}")


@router.post("/benchmarks", status_code=202, summary="Run what `sotopia-env benchmark` runs; 202 with its id")
async def start(request: Request, body: BenchmarkRequest) -> JSONResponse:
    sims = request.app.state.simulations
    try:
        jobs = jobs_of(body, sims.library, sims.allow_code_agents, sims.servers)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    bench = Benchmark(uuid.uuid4().hex[:16], body, jobs)
    record = json.dumps({"request": body.model_dump(mode="json")})
    await asyncio.to_thread(request.app.state.store.queue_put, QUEUE, bench.id, record)
    _start(request.app, bench)
    return JSONResponse(bench.summary(), status_code=202, headers={"Location": f"/api/benchmarks/{bench.id}"})


@router.get("/benchmarks/{bench_id}", summary="A benchmark's progress, then its report")
def status(request: Request, bench_id: str) -> dict[str, Any]:
    bench = request.app.state.benchmarks.get(bench_id)
    if bench is None:
        raise HTTPException(404, f"no benchmark {bench_id!r}")
    return bench.summary()


async def resume_benchmarks(app: FastAPI) -> list[str]:
    """Start again what the store's ``benchmarks`` queue still holds (``run_batch`` skips what is stored)."""
    started = []
    for bench_id, body in (await asyncio.to_thread(app.state.store.queue_items, QUEUE)).items():
        spec = BenchmarkRequest.model_validate(json.loads(body)["request"])
        try:
            sims = app.state.simulations  # accepted once; its model server is checked again
            jobs = jobs_of(spec, sims.library, allow_code_agents=True, servers=sims.servers)
        except ValueError:
            await asyncio.to_thread(app.state.store.queue_drop, QUEUE, bench_id)
            continue
        _start(app, Benchmark(bench_id, spec, jobs))
        started.append(bench_id)
    return started


async def stop_benchmarks(app: FastAPI) -> None:
    """Cancel the running benchmarks; they stay queued in the store and resume at the next start."""
    tasks = [b.task for b in app.state.benchmarks.values() if b.task is not None and not b.task.done()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
