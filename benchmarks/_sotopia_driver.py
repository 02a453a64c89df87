"""Runs episodes with ``sotopia`` (PyPI 0.1.5). Executed by ``vs_sotopia.py`` with the benchmark venv's python.

    <venv>/bin/python benchmarks/_sotopia_driver.py --setups S.json --base-url URL --concurrency 8 --out R.json

Imports nothing from this repository (the venv has sotopia's dependencies, not ours). Each episode is
``sotopia.server.arun_one_episode`` on a ``ParallelSotopiaEnv`` (round-robin, sotopia's
``RuleBasedTerminatedEvaluator`` with ``max_turn_number=--turns``, and its ``EpisodeLLMEvaluator`` with
``EvaluationForAgents[SotopiaDimensions]`` as the terminal evaluator), two ``LLMAgent`` on the model
``custom/loopback@<base url>`` (sotopia 0.1.x's way to name an OpenAI-compatible endpoint: see
``sotopia/generation_utils/generate.py::agenerate``), ``push_to_db=True``. An ``asyncio.Semaphore`` keeps
``--concurrency`` episodes in flight (``run_async_server`` would start every episode at once).

Storage: ``--storage local`` is sotopia's JSON-file backend (``SOTOPIA_STORAGE_BACKEND=local``), in a temp
dir. ``--storage redis`` uses redis-om at ``--redis-url``; a plain Redis (no RedisJSON/RediSearch modules)
makes every save fail, which sotopia only logs: the driver counts those failures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import sys
import tempfile
import time
from pathlib import Path


class _Failures(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--setups", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--out", required=True)
    parser.add_argument("--storage", choices=["local", "redis"], default="local")
    parser.add_argument("--redis-url", default="redis://localhost:6379")
    parser.add_argument("--quiet", action="store_true", help="turn sotopia's per-call INFO logging off")
    args = parser.parse_args()

    data_dir = tempfile.mkdtemp(prefix="sotopia-bench-")
    os.environ["SOTOPIA_STORAGE_BACKEND"] = args.storage
    os.environ["REDIS_OM_URL"] = args.redis_url
    os.environ.setdefault("CUSTOM_API_KEY", "sk-none")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    t_import = time.perf_counter()
    import sotopia.database.storage_backend as storage_backend
    from sotopia.agents import LLMAgent
    from sotopia.database import AgentProfile, EnvironmentProfile, SotopiaDimensions
    from sotopia.envs import ParallelSotopiaEnv
    from sotopia.envs.evaluators import EpisodeLLMEvaluator, EvaluationForAgents, RuleBasedTerminatedEvaluator
    from sotopia.server import arun_one_episode

    import_s = time.perf_counter() - t_import
    if args.storage == "local":
        storage_backend._storage_backend = storage_backend.LocalJSONBackend(data_dir)
    if args.quiet:
        logging.getLogger("sotopia.generation").setLevel(logging.WARNING)
    failures = _Failures()
    logging.getLogger().addHandler(failures)

    setups = json.loads(Path(args.setups).read_text())
    model = f"custom/loopback@{args.base_url}"
    semaphore = asyncio.Semaphore(args.concurrency)
    turns_played: list[int] = []

    async def one(setup: dict) -> None:
        async with semaphore:
            env_profile = EnvironmentProfile(
                codename=setup["codename"],
                scenario=setup["scenario"],
                agent_goals=list(setup["goals"]),
                relationship=setup["relationship"],
            )
            env = ParallelSotopiaEnv(
                env_profile=env_profile,
                model_name=model,
                action_order="round-robin",
                evaluators=[RuleBasedTerminatedEvaluator(max_turn_number=args.turns, max_stale_turn=2)],
                terminal_evaluators=[EpisodeLLMEvaluator(model, EvaluationForAgents[SotopiaDimensions])],
            )
            agents = [LLMAgent(agent_profile=AgentProfile(**a), model_name=model) for a in setup["agents"]]
            messages = await arun_one_episode(env, agents, tag="bench", push_to_db=True)
            turns_played.append(sum(1 for sender, _, _ in messages if sender != "Environment") // len(agents))

    async def run() -> None:
        await asyncio.gather(*(one(s) for s in setups))

    loop = asyncio.new_event_loop()
    cpu0, start = _cpu_seconds(), time.perf_counter()
    loop.run_until_complete(run())
    wall, cpu = time.perf_counter() - start, _cpu_seconds() - cpu0
    # litellm leaves background tasks behind that do not always finish when cancelled (asyncio.run then hangs
    # in its shutdown); they are listed in the result and the process exits without waiting for them.
    pending = sorted({repr(t.get_coro()).split(" at ")[0] for t in asyncio.all_tasks(loop) if not t.done()})
    saved = len(list((Path(data_dir) / "EpisodeLog").glob("*.json"))) if args.storage == "local" else None
    save_errors = [m for m in failures.messages if "save" in m.lower()]
    result = {
        "episodes": len(setups),
        "wall_s": wall,
        "cpu_s": cpu,
        "import_s": import_s,
        "turns_per_episode": sum(turns_played) / max(1, len(turns_played)),
        "saved": saved,
        "save_errors": len(save_errors),
        "first_save_error": save_errors[0] if save_errors else None,
        "errors_logged": len(failures.messages),
        "storage": args.storage,
        "python": sys.version.split()[0],
        "pending_tasks": pending,
    }
    Path(args.out).write_text(json.dumps(result))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
