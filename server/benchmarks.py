"""``/api/benchmarks``: what the CLI's ``benchmark`` runs, started over HTTP, with progress, and cancelled.

The body is the CLI's own ``episodes.benchmark.BenchmarkSpec`` (``requests.BenchmarkRequest``: held to JSON's
types), planned by the same planner (``episodes.plan.plan_episodes``) and played
through the same ``run_batch`` with the same agents and judge (the plan's ``agents`` and ``judge``), so it
is resumable by nature: an accepted one is recorded in the store's ``benchmarks`` queue and, after a restart, run
again, which plays only the combinations not stored yet. What the server adds is its policy: specs that load code
only with ``--allow-code-agents`` (a queued one keeps the permissions it was accepted under, and is checked against
this server's again when taken up after a restart), model servers only from the operator's list
(``allowed_servers``), at most ``--max-per-client`` simulations and benchmarks per client, and its model calls
under the server's one cap (``model_calls.ModelCalls``, ``serve --concurrency``), shared with the simulations.

``GET /api/benchmarks/{id}`` gives the episodes done out of the total and, at the end, the report (with each game
role's win rate where there are games). ``DELETE /api/benchmarks/{id}`` stops a running one: it leaves the queue,
and the episodes it stored stay (the same spec posted again plays only the rest).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from sotopia_env.episodes.benchmark import BenchmarkPlan, BenchmarkResult, BenchmarkSpec
from sotopia_env.episodes.plan import plan_episodes
from sotopia_env.library import LibraryError
from sotopia_env.server.allowed_servers import NotListed
from sotopia_env.server.clients import admitted
from sotopia_env.server.openapi import NOT_FOUND, REFUSED, error
from sotopia_env.server.requests import (
    CODE_REFUSED,
    BenchmarkRequest,
    Conflict,
    NotAllowed,
    NotFound,
    RequestRefused,
    check_code,
    check_servers,
)
from sotopia_env.server.service_check import check_model_services
from sotopia_env.server.simulations import Simulations

QUEUE = "benchmarks"
router = APIRouter(prefix="/api", tags=["benchmarks"])


@dataclass
class Benchmark:
    id: str
    request: BenchmarkSpec  # as posted (and queued)
    plan: BenchmarkPlan | None  # its jobs, with the model servers resolved; None: refused after a restart
    client: str = ""
    status: str = "running"  # running, done, failed, cancelled
    done: int = 0
    report: dict[str, Any] | None = None
    error: str | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "tag": self.request.chosen_tag,
            "episodes": len(self.plan.jobs) if self.plan else 0,
            "finished": self.done,
            "report": self.report,
            "error": self.error,
        }


def planned(spec: BenchmarkSpec, sims: Simulations, allow_code_agents: bool, why: str = CODE_REFUSED) -> BenchmarkPlan:
    """The plan for a posted spec, its ``api_base`` resolved against the operator's list; ``RequestRefused`` with
    one line naming the field and its status otherwise (``why``: why code agents are refused, when they are)."""
    check_code({"model": [spec.model], "partner": [spec.partner]}, allow_code_agents, why)
    try:
        api_base = sims.servers.for_request(spec.api_base)
    except NotListed as exc:
        raise NotAllowed(str(exc)) from None
    specs = {"model": [spec.model], "partner": [spec.partner], "evaluator": [spec.evaluator]}
    check_servers(specs, sims.servers, api_base)
    try:
        return plan_episodes(spec.model_copy(update={"api_base": api_base}), sims.library, sims.store)
    except LibraryError as exc:  # a scenario the library lacks
        raise NotFound(f"scenarios: {exc}") from None
    except ValueError as exc:  # nothing to play: a rule agent where it cannot play, a protocol not imported, ...
        raise Conflict(str(exc)) from None


async def _run(bench: Benchmark, app: FastAPI) -> None:
    """Play what ``run_benchmark`` plays (the same batch, agents, judge and report), its model calls capped."""
    from sotopia_env.episodes.game_report import role_win_rates
    from sotopia_env.episodes.report import build_report
    from sotopia_env.episodes.runner import run_batch

    assert bench.plan is not None
    store, calls, spec = app.state.store, app.state.simulations.calls, bench.plan.spec

    def finished(_: Any) -> None:
        bench.done += 1

    try:
        tag = spec.chosen_tag
        summary = await run_batch(
            bench.plan.jobs,
            store,
            tag,
            calls.judge(spec.evaluator, bench.plan.judge()),
            calls.agents(bench.plan.agents()),
            spec.concurrency,
            bench.plan.config(),
            spec.rerun_failed,
            progress=False,
            max_calls=spec.max_calls,
            on_episode=finished,
        )
        logs = await asyncio.to_thread(lambda: list(store.iter(tag)))
        roles = role_win_rates(logs) if any(s.game is not None for s in bench.plan.scenarios) else []
        result = BenchmarkResult(summary, build_report(logs, tag=tag), roles)
        bench.done = result.summary.total
        bench.report, bench.status = result.to_dict(), "done"
        await asyncio.to_thread(store.queue_drop, QUEUE, bench.id)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a judge or store that fails: the benchmark says so; what was stored stays
        if bench.status == "running":
            bench.status, bench.error = "failed", f"{type(exc).__name__}: {exc}"


def _start(app: FastAPI, bench: Benchmark) -> None:
    app.state.benchmarks[bench.id] = bench
    bench.task = asyncio.create_task(_run(bench, app), name=f"benchmark {bench.id}")


@router.post(
    "/benchmarks",
    status_code=202,
    summary="Run what `sotopia-env benchmark` runs; 202 with its id",
    responses=REFUSED,
)
async def start(request: Request, body: BenchmarkRequest) -> JSONResponse:
    sims: Simulations = request.app.state.simulations
    client = admitted(request)
    try:
        body = sims.caps.applied(body)
        plan = await asyncio.to_thread(planned, body, sims, sims.allow_code_agents)  # a protocol reads the store
        await check_model_services(plan)
    except RequestRefused as exc:
        raise HTTPException(exc.status, str(exc)) from None
    except ValueError as exc:  # over a cap
        raise HTTPException(422, str(exc)) from None
    bench = Benchmark(uuid.uuid4().hex[:16], body, plan, client)
    record = {"request": body.model_dump(mode="json"), "client": client, "allow_code_agents": sims.allow_code_agents}
    await asyncio.to_thread(request.app.state.store.queue_put, QUEUE, bench.id, json.dumps(record))
    _start(request.app, bench)
    return JSONResponse(bench.summary(), status_code=202, headers={"Location": f"/api/benchmarks/{bench.id}"})


def _found(request: Request, bench_id: str) -> Benchmark:
    bench = request.app.state.benchmarks.get(bench_id)
    if bench is None:
        raise HTTPException(404, f"no benchmark {bench_id!r}")
    return bench


@router.get("/benchmarks/{bench_id}", summary="A benchmark's progress, then its report", responses=NOT_FOUND)
def status(request: Request, bench_id: str) -> dict[str, Any]:
    return _found(request, bench_id).summary()


@router.delete(
    "/benchmarks/{bench_id}",
    summary="Stop a running benchmark (what it stored stays)",
    description="Stops it and drops it from the queue; the answer is its last status (cancelled). The episodes it "
    "stored stay under its tag: the same spec posted again plays only the rest. One that has ended: 409.",
    responses={**NOT_FOUND, 409: error("The benchmark has ended.")},
)
async def cancel(request: Request, bench_id: str) -> dict[str, Any]:
    bench = _found(request, bench_id)
    if bench.status != "running":
        raise HTTPException(409, f"benchmark {bench_id!r} has ended ({bench.status})")
    bench.status = "cancelled"  # at once: a second DELETE meanwhile is a 409, and the client's count drops
    if bench.task is not None:
        bench.task.cancel()
        await asyncio.gather(bench.task, return_exceptions=True)
    await asyncio.to_thread(request.app.state.store.queue_drop, QUEUE, bench.id)
    return bench.summary()


async def resume_benchmarks(app: FastAPI) -> list[str]:
    """Start again what the store's ``benchmarks`` queue still holds (``run_batch`` skips what is stored), under
    the permissions each was accepted under and this server's; one refused now is failed with the reason."""
    sims: Simulations = app.state.simulations
    started = []
    for bench_id, body in (await asyncio.to_thread(app.state.store.queue_items, QUEUE)).items():
        try:
            data = json.loads(body)
            spec = BenchmarkSpec.model_validate(data["request"])
        except (ValueError, KeyError, TypeError):  # a record this version cannot read
            await asyncio.to_thread(app.state.store.queue_drop, QUEUE, bench_id)
            continue
        bench = Benchmark(bench_id, spec, None, data.get("client", ""))
        allowed = sims.allow_code_agents and data.get("allow_code_agents") is True
        why = "it was accepted without --allow-code-agents" if sims.allow_code_agents else CODE_REFUSED
        try:
            bench.plan = await asyncio.to_thread(planned, spec, sims, allowed, why)
        except RequestRefused as exc:  # code it may no longer load, a model server no longer listed, ...
            await asyncio.to_thread(app.state.store.queue_drop, QUEUE, bench_id)
            bench.status, bench.error = "failed", f"not run after a restart: {exc}"
            app.state.benchmarks[bench_id] = bench
            continue
        _start(app, bench)
        started.append(bench_id)
    return started


async def stop_benchmarks(app: FastAPI) -> None:
    """Cancel the running benchmarks; they stay queued in the store and resume at the next start."""
    tasks = [b.task for b in app.state.benchmarks.values() if b.task is not None and not b.task.done()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
