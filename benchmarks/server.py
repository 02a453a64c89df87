"""The simulation server under load: simulations through the API with WebSocket viewers attached, vs the CLI.

    python benchmarks/server.py                       # 64 at once, 128 episodes, 100 viewers, 200 ms per call
    python benchmarks/server.py --concurrency 8 --episodes 16 --viewers 12
    python benchmarks/server.py --quick               # tiny sizes (the smoke test)

Issue #26's row. A loopback OpenAI-compatible server (``_loopback_server.py``, its own process) answers every
call after ``--latency`` seconds: agents always speak, so every episode plays all ``--turns`` turns, and the
judge (``LLMEvaluator``) gets a valid rating. The same ``--episodes`` episodes (scenario, seed, turns, agents
``loopback`` at that server, judge ``loopback``) run twice:

- **cli**: what ``sotopia-env run``/``benchmark`` go through: ``episodes.runner.run_batch`` at ``--concurrency``
  in this process into a temp SQLite store, agents built as the server builds them (``load_agent`` with
  ``run``'s chat settings, ``make_evaluator("loopback", "sotopia", api_base)``), after ``tune_gc_for_batch`` as
  ``benchmark`` does. Wall = the batch.
- **api**: ``sotopia-env serve --concurrency K --store <temp sqlite>`` as a child process (its event loop does
  not share this process's GIL); every simulation is ``POST /api/simulations``-ed, ``--viewers`` WebSocket
  viewers (``websockets`` asyncio client, in this process) attach to them round-robin right after each POST,
  and ``GET /api/simulations`` is polled every 0.1 s. Wall = first POST to the last end seen (by a viewer's
  ``end`` event or the poll, whichever came first).

Both run a small warm-up first (imports, first connections). Columns:

- calls / ep: LLM calls the loopback server received per episode. ``run``'s settings retry a turn that repeats an
  earlier one word for word (``avoid_repeats``, up to 2 retries), and the loopback server always says the same
  line: every turn after the first makes 3 calls. Both paths make the same calls;
- ideal / min = ``concurrency x 60 s / (calls per episode x latency)``, the latency bound;
- ratio to CLI = api episodes/min / cli episodes/min (target >= 90% at 64 with 100 viewers);
- delay = a viewer's receive time - the turn event's ``at`` (when the server played it), same clock; turns a
  viewer got as catch-up (played before it attached) are checked but not timed;
- runner CPU % = CPU time over wall of the process that plays the episodes (this one for cli, the server for api);
- lost = stored turns missing (from the store, or from a viewer's stream) + simulations not ``done`` or not rated;
  duplicates = episodes stored beyond one per simulation + turns a viewer received twice; viewers differing =
  viewers whose turns are not exactly the stored ``turns[i].model_dump(mode="json")``, or that got no rating or
  end. All three must be 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common
from _common import LoopbackProcess, cpu_seconds, machine_line, print_table

_ = _common
TAG = "server-bench"
ENDED = ("done", "failed", "cancelled")


def simulation_bodies(n: int, turns: int, api_base: str, tag: str = TAG) -> list[dict[str, Any]]:
    """``n`` simulation requests cycling over the two-seat, non-game, non-verifiable scenarios; seed = index."""
    from sotopia_env.library import load_library

    library = load_library()
    ids = sorted(s.id for s in library.select("all") if s.num_agents == 2 and s.game is None and s.verifiable is None)
    return [
        {
            "scenario": ids[i % len(ids)],
            "agents": ["loopback"],
            "evaluator": "loopback",
            "max_turns": turns,
            "seed": i,
            "tag": tag,
            "api_base": api_base,
        }
        for i in range(n)
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of another process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def delay_cell(delays_ms: list[float]) -> str:
    if not delays_ms:
        return "-"
    return f"{percentile(delays_ms, 0.5):.1f} / {percentile(delays_ms, 0.95):.1f} / {max(delays_ms):.1f}"


# -- cli ------------------------------------------------------------------------------------------


def run_cli(bodies: list[dict[str, Any]], store_path: str, concurrency: int, tag: str) -> tuple[Any, float, float]:
    """``run_batch`` over the episodes ``bodies`` describe; (summary, wall seconds, CPU seconds)."""
    from sotopia_env.agents.llm import CHAT_SETTINGS
    from sotopia_env.backends.base import GenerationSettings
    from sotopia_env.backends.resolve import release_backends
    from sotopia_env.env import EnvConfig
    from sotopia_env.episodes.runner import Job, default_agent_factory, run_batch
    from sotopia_env.episodes.sqlite_store import SQLiteStore
    from sotopia_env.evaluators import make_evaluator
    from sotopia_env.library import load_library
    from sotopia_env.server.allowed_servers import AllowedModelServers
    from sotopia_env.server.requests import SimulationRequest, plan

    library = load_library()
    api_base = bodies[0]["api_base"]
    jobs = []
    for i, body in enumerate(bodies):  # the setup the server would play
        chosen = plan(SimulationRequest.model_validate(body), library, servers=AllowedModelServers.of(api_base))
        jobs.append(Job(chosen.setup, chosen.specs, repeat=i, seed=body["seed"]))
    # as the server's agents, but one sampling seed for all (the factory does not see the job; loopback ignores it)
    settings = GenerationSettings(seed=0, **CHAT_SETTINGS)
    store = SQLiteStore(store_path)

    async def main() -> Any:
        try:
            return await run_batch(
                jobs,
                store,
                tag,
                make_evaluator("loopback", "sotopia", api_base),
                default_agent_factory(settings=settings, api_base=api_base),
                concurrency=concurrency,
                config=EnvConfig(max_turns=bodies[0]["max_turns"]),
                progress=False,
            )
        finally:
            release_backends()

    cpu0, start = cpu_seconds(), time.perf_counter()
    try:
        summary = asyncio.run(main())
    finally:
        store.close()
    return summary, time.perf_counter() - start, cpu_seconds() - cpu0


def cli_level(srv: LoopbackProcess, bodies: list[dict[str, Any]], concurrency: int, tmp: Path) -> dict[str, Any]:
    from sotopia_env.episodes.gc_tuning import tune_gc_for_batch
    from sotopia_env.episodes.sqlite_store import SQLiteStore

    store_path = str(tmp / "cli.db")
    run_cli(bodies[:2], str(tmp / "cli-warmup.db"), 2, "warmup")  # imports, first connections
    tune_gc_for_batch()  # what `sotopia-env benchmark` does before its batch
    srv.reset()
    summary, wall, cpu = run_cli(bodies, store_path, concurrency, TAG)
    calls = srv.stats()["requests"]
    store = SQLiteStore(store_path)
    try:
        logs = list(store.iter(TAG))
    finally:
        store.close()
    turns = bodies[0]["max_turns"]
    lost = (len(bodies) - len(logs)) + sum(max(0, turns - len(log.turns)) for log in logs)
    lost += sum(log.status != "rated" for log in logs)
    if summary.rated != len(bodies):
        print(f"warning: cli: {summary}", flush=True)
    return {
        "path": "cli (run_batch)",
        "episodes": len(bodies),
        "calls": calls / len(bodies),
        "wall": wall,
        "cpu_pct": 100 * cpu / wall,
        "viewers": "-",
        "delays": [],
        "lost": lost,
        "duplicates": max(0, len(logs) - len(bodies)),
        "differ": "-",
    }


# -- api ------------------------------------------------------------------------------------------


@dataclass
class Viewer:
    sim_id: str
    turns: list[dict[str, Any]] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)  # seconds, live turns only
    catch_up: int = 0
    end: dict[str, Any] | None = None
    ended_at: float | None = None  # perf_counter
    error: str | None = None


async def watch(ws_base: str, viewer: Viewer) -> None:
    from websockets.asyncio.client import connect

    try:
        async with connect(f"{ws_base}/api/simulations/{viewer.sim_id}/stream", open_timeout=60, max_size=None) as ws:
            opened = time.time()
            async for raw in ws:
                now = time.time()
                event = json.loads(raw)
                viewer.types.append(event["type"])
                if event["type"] == "turn":
                    viewer.turns.append(event["turn"])
                    if "at" in event and event["at"] >= opened:
                        viewer.delays.append(now - event["at"])
                    else:
                        viewer.catch_up += 1
                elif event["type"] == "end":
                    viewer.end, viewer.ended_at = event, time.perf_counter()
    except Exception as exc:  # counted as a viewer whose stream differs
        viewer.error = f"{type(exc).__name__}: {exc}"


async def drive_api(
    base: str, bodies: list[dict[str, Any]], n_viewers: int, timeout_s: float
) -> tuple[list[str], dict[str, dict[str, Any]], list[Viewer], float]:
    """POST every body, attach the viewers, wait for every end: (ids, final statuses, viewers, wall seconds)."""
    import httpx

    ws_base = base.replace("http://", "ws://")
    ids: list[str] = []
    viewers: list[Viewer] = []
    tasks: list[asyncio.Task[None]] = []
    ended: dict[str, float] = {}
    per_sim = [n_viewers // len(bodies) + (i < n_viewers % len(bodies)) for i in range(len(bodies))]  # round-robin
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        start = time.perf_counter()
        for body, count in zip(bodies, per_sim, strict=True):
            response = await client.post("/api/simulations", json=body)
            if response.status_code != 202:
                raise RuntimeError(f"POST /api/simulations: {response.status_code} {response.text[:300]}")
            sim_id = response.json()["id"]
            ids.append(sim_id)
            for _ in range(count):
                viewers.append(Viewer(sim_id))
                tasks.append(asyncio.create_task(watch(ws_base, viewers[-1])))
        print(f"  api: {len(ids)} simulations posted in {time.perf_counter() - start:.2f} s", flush=True)
        wanted = set(ids)
        deadline = start + timeout_s
        while len(ended) < len(wanted):
            if time.perf_counter() > deadline:
                missing = len(wanted) - len(ended)
                raise RuntimeError(f"{missing} of {len(wanted)} simulations did not end in {timeout_s} s")
            listing = (await client.get("/api/simulations")).json()
            now = time.perf_counter()
            for sim in listing:
                if sim["id"] in wanted and sim["status"] in ENDED:
                    ended.setdefault(sim["id"], now)
            await asyncio.sleep(0.1)
        for viewer in viewers:  # a viewer may have seen its end before the poll did
            if viewer.ended_at is not None:
                ended[viewer.sim_id] = min(ended[viewer.sim_id], viewer.ended_at)
        wall = max(ended.values()) - start
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
        statuses = {sim_id: (await client.get(f"/api/simulations/{sim_id}")).json() for sim_id in ids}
    return ids, statuses, viewers, wall


def serve(
    port: int, store_path: str, concurrency: int, max_per_client: int, api_base: str, log: Any
) -> subprocess.Popen[bytes]:
    """``sotopia-env serve`` as its own process (``tests/server_harness.serve_process``), answering /api/health:
    on loopback without a token, calling the loopback model server the bodies name."""
    from server_harness import serve_process

    library = str(Path(store_path).parent / "library")  # not the user's posted scenarios
    options = ["--concurrency", str(concurrency), "--max-per-client", str(max_per_client), "--library-dir", library]
    options += ["--no-token", "--api-base", api_base]
    return serve_process(port, store_path, *options, log=log)


def api_level(
    srv: LoopbackProcess, bodies: list[dict[str, Any]], concurrency: int, n_viewers: int, tmp: Path, timeout_s: float
) -> dict[str, Any]:
    from sotopia_env.episodes.sqlite_store import SQLiteStore

    store_path = str(tmp / "api.db")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp / "serve.log"
    with open(log_path, "wb") as log:
        process = serve(port, store_path, concurrency, max(64, len(bodies)), bodies[0]["api_base"], log)
        try:
            warm = [dict(b, tag="warmup", max_turns=2) for b in bodies[:2]]
            asyncio.run(drive_api(base, warm, 1, timeout_s))  # imports in the server, first connections
            srv.reset()
            cpu0 = process_cpu_seconds(process.pid)
            ids, statuses, viewers, wall = asyncio.run(drive_api(base, bodies, n_viewers, timeout_s))
            cpu = process_cpu_seconds(process.pid) - cpu0
            calls = srv.stats()["requests"]
        except Exception:
            print(f"sotopia-env serve's log:\n{log_path.read_text()[-3000:]}", file=sys.stderr)
            raise
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    store = SQLiteStore(store_path)
    try:
        logs = {log.id: log for log in store.iter(TAG)}
    finally:
        store.close()
    turns = bodies[0]["max_turns"]
    expected = {f"sim-{sim_id}" for sim_id in ids}
    lost = sum(s["status"] != "done" or s.get("episode_status") != "rated" for s in statuses.values())
    lost += sum(max(0, turns - len(logs[e].turns)) if e in logs else turns for e in expected)
    duplicates = len(set(logs) - expected) + (len(ids) - len(set(ids)))
    differ = 0
    for viewer in viewers:
        log = logs.get(f"sim-{viewer.sim_id}")
        stored = [t.model_dump(mode="json") for t in log.turns] if log is not None else []
        indices = [t.get("turn") for t in viewer.turns]
        duplicates += len(indices) - len(set(indices))
        lost += sum(t not in viewer.turns for t in stored)
        ok = (
            viewer.error is None
            and viewer.turns == stored
            and viewer.types[-2:] == ["rating", "end"]
            and viewer.end is not None
            and viewer.end.get("status") == "done"
        )
        if not ok:
            differ += 1
            print(f"warning: viewer of {viewer.sim_id} differs: error={viewer.error} events={viewer.types}", flush=True)
    return {
        "path": "api (serve + viewers)",
        "episodes": len(bodies),
        "calls": calls / len(bodies),
        "wall": wall,
        "cpu_pct": 100 * cpu / wall,
        "viewers": len(viewers),
        "delays": [d for v in viewers for d in v.delays],
        "catch_up": sum(v.catch_up for v in viewers),
        "lost": lost,
        "duplicates": duplicates,
        "differ": differ,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=64, help="episodes at once, CLI and server alike")
    parser.add_argument("--episodes", type=int, default=0, help="default: 2 x concurrency")
    parser.add_argument("--viewers", type=int, default=100, help="WebSocket viewers, round-robin over the simulations")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds the model server takes per call")
    parser.add_argument("--timeout", type=float, default=900, help="give up on the API run after this many seconds")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    args = parser.parse_args()
    if args.quick:
        args.concurrency, args.episodes, args.viewers, args.turns, args.latency = 4, 8, 4, 4, 0.05
    episodes = args.episodes or 2 * args.concurrency
    print(
        f"# The server under load: {episodes} episodes of {args.turns} turns at concurrency {args.concurrency}, "
        f"{args.viewers} WebSocket viewers, {args.latency * 1e3:.0f} ms per LLM call\n\n{machine_line()}",
        flush=True,
    )
    with LoopbackProcess(args.latency) as srv, tempfile.TemporaryDirectory() as tmp:
        bodies = simulation_bodies(episodes, args.turns, srv.base_url)
        cli = cli_level(srv, bodies, args.concurrency, Path(tmp))
        print(f"  cli: {episodes / cli['wall'] * 60:.1f} episodes/min", flush=True)
        api = api_level(srv, bodies, args.concurrency, args.viewers, Path(tmp), args.timeout)
        print(f"  api: {episodes / api['wall'] * 60:.1f} episodes/min", flush=True)
    cli_rate = episodes / cli["wall"] * 60
    rows = []
    for r in (cli, api):
        rate = r["episodes"] / r["wall"] * 60
        ideal = args.concurrency * 60 / (r["calls"] * args.latency)
        delays = [1e3 * d for d in r["delays"]]
        rows.append(
            (
                r["path"],
                args.concurrency,
                r["episodes"],
                r["calls"],
                r["wall"],
                rate,
                ideal,
                f"{100 * rate / ideal:.0f}%",
                f"{100 * rate / cli_rate:.0f}%",
                f"{r['cpu_pct']:.0f}%",
                r["viewers"],
                delay_cell(delays),
                r["lost"],
                r["duplicates"],
                r["differ"],
            )
        )
    print_table(
        "episodes per minute through the API with viewers attached, vs the CLI",
        [
            "path",
            "concurrency",
            "episodes",
            "calls / ep",
            "wall s",
            "episodes / min",
            "ideal / min",
            "% of ideal",
            "ratio to CLI",
            "runner CPU % of wall",
            "viewers",
            "delay ms p50 / p95 / max",
            "lost",
            "duplicates",
            "viewers differing",
        ],
        rows,
        note=(
            f"ideal = concurrency x 60 s / (calls per episode x {args.latency} s). Delay: {len(api['delays'])} live "
            f"turns over {api['viewers']} viewers ({api['catch_up']} catch-up turns not timed). "
            "Target: ratio >= 90% at 64 with 100 viewers; lost, duplicates, viewers differing = 0."
        ),
    )
    if api["lost"] or api["duplicates"] or api["differ"] or cli["lost"] or cli["duplicates"]:
        raise SystemExit("something was lost, duplicated or differs (see above)")


if __name__ == "__main__":
    main()
