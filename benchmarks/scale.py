"""Scale on one machine, through the CLI: ``sotopia-env benchmark`` at concurrency 64/256/512, 1 vs 3 servers.

    python benchmarks/scale.py                       # 200 ms per call, 20 turns, 2 waves of episodes per level
    python benchmarks/scale.py --concurrency 256 --servers 1
    python benchmarks/scale.py --quick               # tiny sizes (the smoke test)

Each row is one ``sotopia-env benchmark --model openai/loopback --partner loopback --evaluator loopback
--api-base URL[,URL,URL] --concurrency C --max-turns 20`` into a fresh SQLite store, run in this process
(``typer`` parses the arguments as the console script would; the imports are warmed up by a first small run,
so CPU figures are the batch's, not start-up's). The servers are ``_loopback_server.py`` child processes that
answer every call after ``--latency``; agents always speak, so each episode makes 21 calls (20 turns + the judge).

- episodes = ``--waves`` x concurrency (both seats of enough scenario castings);
- batch wall = the batch's own time as the CLI prints it (episodes / min and % of bound use it); command wall
  adds the CLI's start of work (library, setups, store check) and the report;
- ideal (the latency bound) = ``concurrency x 60 s / (calls per episode x latency)``;
- client CPU ms / call = this process's CPU time (all threads) over the whole command / calls the servers received;
- max in flight = the largest number of calls one server held at once (summed over servers: an upper bound).

"--max-calls 64 (as shipped)" rows cap the calls per model at 64, what every batch got before the limit
followed ``--concurrency``. "Ray, 2 local workers" rows add ``--ray local --ray-workers 2`` (1 server): the
episodes are sharded over two Ray actors; their client CPU adds the Ray cluster's processes and workers.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import re
import tempfile
import threading
import time
from typing import Any

import _common
from _common import LoopbackProcess, cpu_seconds, machine_line, print_table

_ = _common
BATCH_LINE = re.compile(r"^\d+ episodes: .*\((\d+(?:\.\d+)?)s\)", re.M)  # benchmark's summary line


def scenario_choice(episodes: int) -> tuple[str, int]:
    """``--scenarios`` and ``--episodes-per-scenario`` for ``episodes`` episodes (each casting in both seats): k
    scenarios with at least p castings each, 2 x k x p == episodes; else about that many."""
    from sotopia_env.library import load_library
    from sotopia_env.sampler import eligible_setups

    library = load_library()
    castings = {
        sid: len(eligible_setups(s, library))
        for sid, s in library.scenarios.items()
        if s.num_agents == 2 and s.verifiable is None  # verifiable ones want a rule partner, and have few castings
    }
    for per in range(1, episodes // 2 + 1):
        fit = sorted(sid for sid, n in castings.items() if n >= per)
        if episodes % (2 * per) == 0 and episodes // (2 * per) <= len(fit):
            return ",".join(fit[: episodes // (2 * per)]), per
    return "all", math.ceil(episodes / (2 * len(castings)))


def cli_benchmark(args: list[str]) -> str:
    """Run ``sotopia-env ARGS`` in this process; its output (raises on a non-zero exit)."""
    from typer.testing import CliRunner

    from sotopia_env.cli.main import app

    result = CliRunner().invoke(app, args)
    if result.exit_code != 0:
        raise SystemExit(f"sotopia-env {' '.join(args)} failed ({result.exit_code}):\n{result.output[-2000:]}")
    return result.output


def run_level(
    servers: list[LoopbackProcess], concurrency: int, episodes: int, turns: int, extra: list[str] | None = None
) -> dict[str, Any]:
    """One ``sotopia-env benchmark`` run of about ``episodes`` episodes over ``servers``; its figures."""
    from sotopia_env.backends.resolve import release_backends

    scenarios, per_scenario = scenario_choice(episodes)
    for srv in servers:
        srv.reset()
    with tempfile.TemporaryDirectory() as tmp:
        args = ["benchmark", "--model", "openai/loopback", "--partner", "loopback", "--evaluator", "loopback"]
        args += ["--scenarios", scenarios, "--episodes-per-scenario", str(per_scenario), "--max-turns", str(turns)]
        args += ["--concurrency", str(concurrency), "--api-base", ",".join(s.base_url for s in servers)]
        args += ["--store", f"sqlite:///{tmp}/scale.db", "--tag", "scale", *(extra or [])]
        cpu0, start = cpu_seconds(), time.perf_counter()
        output = cli_benchmark(args)
        command_wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu0
        from sotopia_env.episodes.store import open_store

        store = open_store(f"sqlite:///{tmp}/scale.db")
        stored = store.count(tag="scale")
        rated = store.count(tag="scale", status="rated")
        store.close()
    release_backends()
    stats = [s.stats() for s in servers]
    calls = sum(s["requests"] for s in stats)
    per_episode = calls / max(1, stored)
    batch = BATCH_LINE.search(output)
    wall = float(batch.group(1)) if batch else command_wall  # the batch's own wall time, as the CLI prints it
    rate = stored / wall * 60
    ideal = concurrency * 60 / (per_episode * servers[0].latency_s) if per_episode else float("nan")
    limits = next((line.strip() for line in output.splitlines() if line.startswith("concurrency ")), "")
    return {
        "episodes": stored,
        "rated": rated,
        "calls": per_episode,
        "wall": wall,
        "command_wall": command_wall,
        "rate": rate,
        "ideal": ideal,
        "pct": 100 * rate / ideal,
        "cpu_ms_call": cpu / max(1, calls) * 1e3,
        "cpu_pct": 100 * cpu / command_wall,
        "in_flight": sum(s["max_in_flight"] for s in stats),
        "limits": limits,
    }


def ray_rows(servers: list[LoopbackProcess], levels: list[int], args: argparse.Namespace) -> list[tuple[Any, ...]]:
    """Rows for ``benchmark --ray local --ray-workers 2``, one per concurrency level, in ``row``'s columns. The
    first run starts the local cluster in this process (outside the batch's wall); the client CPU adds the
    cluster's processes and its workers (this process's descendants but the servers), sampled while it runs."""
    import psutil

    servers_pids = {s._proc.pid for s in servers if s._proc is not None}
    me = psutil.Process()
    rows = []
    for concurrency in levels:
        seen: dict[int, float] = {}
        before = _tree_cpu(me, servers_pids, seen)
        stop = threading.Event()
        sampler = threading.Thread(target=_sample_tree, args=(me, servers_pids, seen, stop), daemon=True)
        sampler.start()
        extra = ["--ray", "local", "--ray-workers", "2"]
        r = run_level(servers, concurrency, args.waves * concurrency, args.turns, extra)
        stop.set()
        sampler.join()
        children = sum(seen.values()) - before
        calls = r["calls"] * max(1, r["episodes"])
        r["cpu_ms_call"] += children / max(1, calls) * 1e3
        r["cpu_pct"] += 100 * children / r["command_wall"]
        rows.append(row("Ray, 2 local workers", len(servers), concurrency, r))
    return rows


def _tree_cpu(root: Any, skip: set[int], seen: dict[int, float]) -> float:
    """Record the CPU seconds of ``root``'s descendants (but ``skip``), the highest per pid; their sum now."""
    import psutil

    try:
        children = root.children(recursive=True)
    except psutil.Error:
        return sum(seen.values())
    for proc in children:
        if proc.pid in skip:
            continue
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        seen[proc.pid] = max(seen.get(proc.pid, 0.0), times.user + times.system)
    return sum(seen.values())


def _sample_tree(root: Any, skip: set[int], seen: dict[int, float], stop: threading.Event) -> None:
    while not stop.wait(0.2):
        _tree_cpu(root, skip, seen)
    _tree_cpu(root, skip, seen)


def row(setup: str, n_servers: int, concurrency: int, r: dict[str, Any]) -> tuple[Any, ...]:
    return (
        setup,
        n_servers,
        concurrency,
        r["episodes"],
        r["wall"],
        r["command_wall"],
        r["rate"],
        r["ideal"],
        f"{r['pct']:.0f}%",
        r["cpu_ms_call"],
        f"{r['cpu_pct']:.0f}%",
        r["in_flight"],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="64,256,512", help="comma list")
    parser.add_argument("--servers", default="1,3", help="comma list: how many loopback servers")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds each server takes per call")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--waves", type=int, default=2, help="episodes = waves x concurrency")
    parser.add_argument(
        "--shipped-cap",
        type=int,
        default=64,
        help="also run 1 server with --max-calls N above it: the fixed per-model limit before it followed "
        "--concurrency (0: skip)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    args = parser.parse_args()
    if args.quick:
        args.concurrency, args.servers, args.latency, args.turns, args.waves = "4", "1,3", 0.01, 3, 1
        args.shipped_cap = 2
    cap = str(args.shipped_cap)
    levels = [int(c) for c in args.concurrency.split(",")]
    server_counts = [int(n) for n in args.servers.split(",")]
    print(
        f"# Scale through the CLI ({args.turns} turns, round-robin, {args.latency * 1e3:.0f} ms per LLM call, "
        f"one process)\n\n{machine_line()}"
    )
    rows = []
    limits = []
    with contextlib.ExitStack() as stack:
        pool = [stack.enter_context(LoopbackProcess(args.latency)) for _ in range(max(server_counts))]
        run_level(pool[:1], 2, 2, min(args.turns, 3))  # warm-up: imports, first connections
        for n_servers in server_counts:
            for concurrency in levels:
                runs = [("one process", [])]
                if args.shipped_cap and n_servers == 1 and concurrency > args.shipped_cap:
                    runs.append((f"one process, --max-calls {args.shipped_cap} (as shipped)", ["--max-calls", cap]))
                for setup, extra in runs:
                    r = run_level(pool[:n_servers], concurrency, args.waves * concurrency, args.turns, extra)
                    rows.append(row(setup, n_servers, concurrency, r))
                    limits.append(r["limits"])
                    print(
                        f"  {setup}, {n_servers} server(s) c={concurrency}: {r['rate']:.0f} episodes/min "
                        f"({r['pct']:.0f}% of the bound), {r['cpu_ms_call']:.2f} ms CPU/call",
                        flush=True,
                    )
        rows.extend(ray_rows(pool[:1], levels, args))
    print_table(
        "episodes per minute through sotopia-env benchmark",
        [
            "setup",
            "servers",
            "concurrency",
            "episodes",
            "batch wall s",
            "command wall s",
            "episodes / min",
            "latency bound / min",
            "% of bound",
            "client CPU ms / call",
            "client CPU % of wall",
            "max in flight (servers)",
        ],
        rows,
        note="limits the CLI printed: " + "; ".join(dict.fromkeys(x for x in limits if x)),
    )


if __name__ == "__main__":
    main()
