"""The same batch launched twice on one store: each combination is still played once, and the work is split.

    python benchmarks/two_drivers.py                       # SQLite; Redis too when REDIS_URL is set
    python benchmarks/two_drivers.py --scenarios 40 --delay 0.1

Each driver is a separate process (``tests/batch_worker.py``): scripted LLM agents whose every call waits
``--delay`` seconds (a stand-in for a model server's latency), the rule-based judge, concurrency 2, the
same tag. Rows: one driver alone, then two drivers started together on a fresh store. Episodes per minute are
the stored episodes over the wall time until the last driver exits; duplicates are stored episodes beyond one
per combination.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter

import _common
from _common import ROOT, machine_line, print_table

from sotopia_env.episodes.redis_store import RedisStore
from sotopia_env.episodes.sqlite_store import SQLiteStore

_ = _common
WORKER = ROOT / "tests" / "batch_worker.py"


def drive(url: str, prefix: str, drivers: int, scenarios: int, delay: float) -> list[object]:
    tag = f"drivers-{drivers}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
    args = [sys.executable, str(WORKER), url, str(scenarios), str(delay), tag, "60", *([prefix] if prefix else [])]
    started = time.perf_counter()
    procs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    procs += [
        subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(drivers - 1)
    ]
    played = []
    for proc in procs:
        out, err = proc.communicate(timeout=3600)
        if proc.returncode != 0:
            raise SystemExit(f"a driver failed: {err[-2000:]}")
        played.append(json.loads(out.strip().splitlines()[-1])["rated"])
    wall = time.perf_counter() - started
    store = RedisStore(url, prefix=prefix) if prefix else SQLiteStore(url)
    keys = Counter(log.combo_key for log in store.iter(tag))
    stored = sum(keys.values())
    return [
        "redis" if prefix else "sqlite",
        drivers,
        scenarios,
        stored,
        stored - len(keys),
        " + ".join(str(p) for p in played),
        f"{wall:.1f}",
        f"{60 * stored / wall:.1f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", type=int, default=24, help="combinations in the batch (one per scenario)")
    parser.add_argument("--delay", type=float, default=0.1, help="seconds each scripted LLM call waits")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for drivers in (1, 2):
            rows.append(drive(f"sqlite:///{tmp}/drivers-{drivers}.db", "", drivers, args.scenarios, args.delay))
    if os.environ.get("REDIS_URL"):
        for drivers in (1, 2):
            prefix = f"bench-{uuid.uuid4().hex[:8]}"
            try:
                rows.append(drive(os.environ["REDIS_URL"], prefix, drivers, args.scenarios, args.delay))
            finally:
                RedisStore(os.environ["REDIS_URL"], prefix=prefix).clear()
    print_table(
        f"one batch, launched once and twice on one store ({args.delay}s per scripted call, concurrency 2 each)",
        ["store", "drivers", "combinations", "stored", "duplicates", "played by each", "wall s", "episodes/min"],
        rows,
        note=machine_line(),
    )


if __name__ == "__main__":
    main()
