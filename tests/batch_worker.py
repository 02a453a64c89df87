"""Runs a slow scripted batch into a store; the kill-and-resume and the two-driver tests start it as a subprocess.

Usage: python batch_worker.py STORE_URL N_SCENARIOS DELAY_S [TAG [LEASE_SECONDS [REDIS_PREFIX]]]
Prints one JSON line: how many combinations it skipped and how many it rated.
"""

from __future__ import annotations

import asyncio
import json
import sys

from sotopia_env.agents.llm import LLMAgent
from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.episodes.redis_store import RedisStore
from sotopia_env.episodes.runner import Job, run_batch
from sotopia_env.episodes.store import open_store
from sotopia_env.evaluators import RuleBasedEvaluator
from sotopia_env.library import load_library
from sotopia_env.sampler import sample_setups

TAG = "kill-test"


def jobs(n_scenarios: int) -> list[Job]:
    lib = load_library()
    scenarios = sorted(lib.scenarios.values(), key=lambda s: s.id)[:n_scenarios]
    return [Job(setup, ["scripted-a", "scripted-b"]) for setup in sample_setups(scenarios, lib, seed=0)]


def factory(delay_s: float):
    lines = [json.dumps({"action_type": "speak", "argument": f"line {i}"}) for i in range(3)]
    leave = json.dumps({"action_type": "leave", "argument": ""})
    return lambda spec, seat: LLMAgent(ScriptedBackend([*lines, leave], model=spec, delay_s=delay_s))


def main(url: str, n_scenarios: int, delay_s: float, tag: str = TAG, lease_s: float = 60.0, prefix: str = "") -> None:
    store = RedisStore(url, prefix=prefix) if prefix else open_store(url)
    batch = run_batch(
        jobs(n_scenarios), store, tag, RuleBasedEvaluator(), factory(delay_s), concurrency=2, progress=False,
        lease_seconds=lease_s,
    )  # fmt: skip
    summary = asyncio.run(batch)
    print(json.dumps({"skipped": summary.skipped, "rated": summary.rated}), flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0], int(args[1]), float(args[2]), *args[3:4], *[float(a) for a in args[4:5]], *args[5:6])
