"""Throughput against a latency-bound LLM server: episodes per minute at concurrency 1, 8, 64, 256.

    python benchmarks/throughput.py                                   # http, 200 ms per call
    python benchmarks/throughput.py --backend http,litellm,scripted   # locate client overhead
    python benchmarks/throughput.py --quick                           # tiny sizes (the smoke test)

A loopback OpenAI-compatible server (``tests/loopback_openai.py``, run in a child process by
``_loopback_server.py``) answers every call after a fixed ``--latency`` (200 ms): agents speak, so
every episode runs all ``--turns`` turns, and the judge's request gets a valid rating. Both agents and
the ``LLMEvaluator`` go through the backend under test; ``episodes.runner.run_batch`` runs
``2 x concurrency`` episodes (at least ``--min-episodes``) into an SQLite store in a temp dir.

The ideal is latency bound: ``concurrency x 60 s / (LLM calls per episode x latency)``. Backends:

- ``http``: ``resolve_backend("loopback", api_base=...)``, i.e. ``OpenAIHTTPBackend`` (what users get
  for a server at an ``--api-base``);
- ``litellm``: ``LiteLLMBackend("openai/loopback", api_base=...)`` (what ``litellm:`` specs and hosted
  providers go through);
- ``scripted``: ``ScriptedBackend(delay_s=latency)``, no HTTP at all: the framework's own ceiling.

"client CPU ms / call" is this process's CPU time (all threads) divided by LLM calls: the cost of one call
to the framework plus the client library. With one core's worth of CPU for the event loop, the ceiling is
about 1000 / that figure calls per second.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
from pathlib import Path
from typing import Any

import _common
from _common import LoopbackProcess, cpu_seconds, machine_line, print_table, two_seat_setups
from _loopback_server import SPEAK, our_rating

from sotopia_env.agents.llm import LLMAgent
from sotopia_env.backends.base import ChatRequest
from sotopia_env.backends.resolve import release_backends, resolve_backend
from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.runner import Job, run_batch
from sotopia_env.episodes.sqlite_store import SQLiteStore
from sotopia_env.evaluators import LLMEvaluator

_ = _common


def scripted_reply(request: ChatRequest) -> str:
    schema = request.json_schema or {}
    if "agent_1" in (schema.get("properties") or {}):
        return our_rating(schema)
    return SPEAK


def timed_batch(
    jobs: list[Any], store: Any, tag: str, kind: str, base_url: str, concurrency: int, latency: float, turns: int
) -> tuple[Any, float, float]:
    """Run ``jobs`` with agents and judge on one ``kind`` backend; (summary, wall seconds, CPU seconds)."""

    async def main() -> Any:
        backend = make_backend(kind, base_url, concurrency, latency)
        try:
            return await run_batch(
                jobs,
                store,
                tag,
                LLMEvaluator(backend),
                lambda spec, seat: LLMAgent(backend),
                concurrency=concurrency,
                config=EnvConfig(max_turns=turns),
                progress=False,
            )
        finally:
            if hasattr(backend, "aclose"):
                await backend.aclose()
            release_backends()

    cpu0, start = cpu_seconds(), time.perf_counter()
    summary = asyncio.run(main())
    return summary, time.perf_counter() - start, cpu_seconds() - cpu0


def make_backend(kind: str, base_url: str, concurrency: int, latency: float) -> Any:
    # run_batch sets the per-model call limit to the concurrency; this max_concurrency only counts outside a batch
    limit = max(64, 2 * concurrency)
    if kind == "http":
        return resolve_backend("loopback", api_base=base_url, max_concurrency=limit)
    if kind == "litellm":
        return resolve_backend("litellm:openai/loopback", api_base=base_url, max_concurrency=limit)
    if kind == "scripted":
        return ScriptedBackend(scripted_reply, model="scripted", delay_s=latency)
    raise SystemExit(f"unknown backend {kind!r} (http, litellm, scripted)")


def run_level(
    kind: str, srv: LoopbackProcess, concurrency: int, episodes: int, turns: int, latency: float
) -> dict[str, Any]:
    setups = two_seat_setups(episodes)
    jobs = [Job(setup, ["loopback", "loopback"], repeat=i) for i, setup in enumerate(setups)]
    srv.reset()
    server_cpu0 = srv.stats()["cpu_s"]
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(str(Path(tmp) / "episodes.db"))

        summary, wall, cpu = timed_batch(jobs, store, "throughput", kind, srv.base_url, concurrency, latency, turns)
        stored = store.count(tag="throughput")
        llm_calls = sum(sum(u.calls for u in log.usage.values()) for log in store.iter("throughput"))
        store.close()
    stats = srv.stats()
    if kind != "scripted":
        llm_calls = stats["requests"]
    if summary.rated != episodes or stored != episodes:
        print(f"warning: {kind} c={concurrency}: {summary}")
    calls = llm_calls / episodes
    rate = episodes / wall * 60
    ideal = concurrency * 60 / (calls * latency)
    return {
        "backend": kind,
        "concurrency": concurrency,
        "episodes": episodes,
        "calls": calls,
        "wall": wall,
        "rate": rate,
        "ideal": ideal,
        "pct": 100 * rate / ideal,
        "cpu_ms_call": cpu / llm_calls * 1e3,
        "cpu_pct": 100 * cpu / wall,
        "in_flight": stats["max_in_flight"] if kind != "scripted" else "-",
        "server_cpu_pct": 100 * (stats["cpu_s"] - server_cpu0) / wall if kind != "scripted" else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="http", help="comma list of: http, litellm, scripted")
    parser.add_argument("--concurrency", default="1,8,64,256", help="comma list")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds the server takes per call")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--min-episodes", type=int, default=3)
    parser.add_argument("--waves", type=int, default=2, help="episodes = waves x concurrency")
    parser.add_argument(
        "--gc-freeze", action="store_true", help="gc.freeze() after the warm-up (move import-time objects out of GC)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    args = parser.parse_args()
    if args.quick:
        args.concurrency, args.latency, args.turns, args.min_episodes, args.waves = "1,4", 0.01, 4, 1, 1
    kinds = [k.strip() for k in args.backend.split(",") if k.strip()]
    levels = [int(c) for c in args.concurrency.split(",")]
    print(
        f"# Throughput vs concurrency ({args.turns} turns, round-robin, {args.latency * 1e3:.0f} ms per LLM call)"
        f"{', gc.freeze() after warm-up' if args.gc_freeze else ''}\n\n{machine_line()}"
    )
    rows = []
    with LoopbackProcess(args.latency) as srv:
        for kind in kinds:
            run_level(kind, srv, 2, 2, min(args.turns, 4), args.latency)  # warm-up: imports, first connections
            if args.gc_freeze:
                gc.collect()
                gc.freeze()
            for concurrency in levels:
                episodes = max(args.min_episodes, args.waves * concurrency)
                r = run_level(kind, srv, concurrency, episodes, args.turns, args.latency)
                rows.append(
                    (
                        r["backend"],
                        r["concurrency"],
                        r["episodes"],
                        r["calls"],
                        r["wall"],
                        r["rate"],
                        r["ideal"],
                        f"{r['pct']:.0f}%",
                        r["cpu_ms_call"],
                        f"{r['cpu_pct']:.0f}%",
                        "-" if r["server_cpu_pct"] != r["server_cpu_pct"] else f"{r['server_cpu_pct']:.0f}%",
                        r["in_flight"],
                    )
                )
                print(f"  {kind} c={concurrency}: {r['rate']:.1f} episodes/min ({r['pct']:.0f}% of ideal)", flush=True)
    print_table(
        "episodes per minute vs concurrency",
        [
            "backend",
            "concurrency",
            "episodes",
            "LLM calls / ep",
            "wall s",
            "episodes / min",
            "ideal / min",
            "% of ideal",
            "client CPU ms / call",
            "client CPU % of wall",
            "server CPU % of wall",
            "max in flight (server)",
        ],
        rows,
        note=f"ideal = concurrency x 60 s / (LLM calls per episode x {args.latency} s). Target: >= 90% at 64.",
    )


if __name__ == "__main__":
    main()
