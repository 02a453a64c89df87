"""Runs a slow scripted batch into a SQLite store; the kill-and-resume test starts it as a subprocess.

Usage: python batch_worker.py STORE_PATH N_SCENARIOS DELAY_S
"""

from __future__ import annotations

import asyncio
import json
import sys

from sotopia_env.agents.llm import LLMAgent
from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.episodes.runner import Job, run_batch
from sotopia_env.episodes.store import open_store
from sotopia_env.evaluation import RuleBasedEvaluator
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


def main(path: str, n_scenarios: int, delay_s: float) -> None:
    store = open_store(path)
    summary = asyncio.run(
        run_batch(jobs(n_scenarios), store, TAG, RuleBasedEvaluator(), factory(delay_s), concurrency=2, progress=False)
    )
    print(json.dumps({"skipped": summary.skipped, "rated": summary.rated}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
