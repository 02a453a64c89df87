"""``/api/benchmarks``: what the CLI's ``benchmark`` runs, started over HTTP, with progress.

The body is the CLI's own ``episodes.benchmark.BenchmarkSpec``, and a benchmark runs through the same
``run_benchmark``, so it is resumable by nature: an accepted one is recorded in the store's ``benchmarks`` queue
and, after a restart, run again, which plays only the combinations not stored yet. What the server adds is its
policy: specs that load code only with ``--allow-code-agents``, and model servers only from the operator's list
(``allowed_servers``). ``GET /api/benchmarks/{id}`` gives the episodes done out of the total and, at the end, the
report (with each game role's win rate where there are games).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from sotopia_env.agents.loading import is_custom_spec
from sotopia_env.episodes.benchmark import BenchmarkPlan, BenchmarkSpec, plan_benchmark, run_benchmark
from sotopia_env.server.simulations import Simulations

QUEUE = "benchmarks"
router = APIRouter(prefix="/api", tags=["benchmarks"])


@dataclass
class Benchmark:
    id: str
    request: BenchmarkSpec  # as posted (and queued)
    plan: BenchmarkPlan  # its jobs, with the model servers the server resolved for it
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
            "episodes": len(self.plan.jobs),
            "finished": self.done,
            "report": self.report,
            "error": self.error,
        }


def planned(spec: BenchmarkSpec, sims: Simulations, allow_code_agents: bool) -> BenchmarkPlan:
    """The plan ``run_benchmark`` plays for a posted spec, its ``api_base`` resolved against the operator's list;
    ``ValueError`` with one line naming the field otherwise."""
    for name in ("model", "partner"):
        if is_custom_spec(getattr(spec, name)) and not allow_code_agents:
            raise ValueError(f"{name}: {getattr(spec, name)!r} would load code; the server refuses it")
    resolved = spec.model_copy(update={"api_base": sims.servers.for_request(spec.api_base)})
    return plan_benchmark(resolved, sims.library, sims.store)


async def _run(bench: Benchmark, app: FastAPI) -> None:
    store = app.state.store

    def finished(_: Any) -> None:
        bench.done += 1

    try:
        result = await run_benchmark(bench.plan.spec, store, finished, plan=bench.plan)
        bench.done = result.summary.total
        bench.report, bench.status = result.to_dict(), "done"
        await asyncio.to_thread(store.queue_drop, QUEUE, bench.id)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a judge or store that fails: the benchmark says so; what was stored stays
        bench.status, bench.error = "failed", f"{type(exc).__name__}: {exc}"


def _start(app: FastAPI, bench: Benchmark) -> None:
    app.state.benchmarks[bench.id] = bench
    bench.task = asyncio.create_task(_run(bench, app), name=f"benchmark {bench.id}")


@router.post("/benchmarks", status_code=202, summary="Run what `sotopia-env benchmark` runs; 202 with its id")
async def start(request: Request, body: BenchmarkSpec) -> JSONResponse:
    sims = request.app.state.simulations
    try:
        plan = await asyncio.to_thread(planned, body, sims, sims.allow_code_agents)  # a protocol reads the store
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    bench = Benchmark(uuid.uuid4().hex[:16], body, plan)
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
        try:  # accepted once; its model server is checked again (the operator's list may have changed)
            spec = BenchmarkSpec.model_validate(json.loads(body)["request"])
            plan = await asyncio.to_thread(planned, spec, app.state.simulations, True)
        except ValueError:  # a ValidationError too: a record this version cannot read
            await asyncio.to_thread(app.state.store.queue_drop, QUEUE, bench_id)
            continue
        _start(app, Benchmark(bench_id, spec, plan))
        started.append(bench_id)
    return started


async def stop_benchmarks(app: FastAPI) -> None:
    """Cancel the running benchmarks; they stay queued in the store and resume at the next start."""
    tasks = [b.task for b in app.state.benchmarks.values() if b.task is not None and not b.task.done()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
