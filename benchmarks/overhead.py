"""Framework overhead: what an episode costs besides its LLM calls.

    python benchmarks/overhead.py             # 200 episodes of 20 turns per row, profile of 100 episodes
    python benchmarks/overhead.py --quick     # tiny sizes (the smoke test)

Every LLM call goes to ``ScriptedBackend`` (zero latency), wrapped in a timer; that time (the fake model,
including its prompt word count) is subtracted, so "framework" is everything else: the env, observations,
prompt rendering, action parsing, the evaluator's prompt and parsing, the episode log, and (where said) the
SQLite write. Rows:

- ``env.step only``: ``SocialEnv.reset`` + 20 ``step`` calls with ready-made actions (no agents).
- ``play, ScriptedAgent``: ``episodes.runner.play`` with two ``ScriptedAgent`` (no prompts, no evaluator).
- ``play, LLMAgent + LLMEvaluator``: two ``LLMAgent`` and an ``LLMEvaluator`` on scripted backends: the
  production code path of an LLM episode.
- ``run_batch + SQLite``: the same through ``run_batch`` (concurrency 1 and 64), each episode stored.

Then the cost of each piece per call, peak memory, and a cProfile of the LLM path.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import tempfile
import time
import tracemalloc
from collections import defaultdict
from pathlib import Path

import _common
from _common import cpu_seconds, machine_line, maxrss_mb, print_table, two_seat_setups
from _loopback_server import SPEAK, our_rating

from sotopia_env.actions import ACTION_TYPES, ActionType, AgentAction, action_json_schema, parse_action
from sotopia_env.agents.llm import LLMAgent
from sotopia_env.agents.scripted import ScriptedAgent
from sotopia_env.backends.base import ChatRequest, Completion
from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.env import EnvConfig, SocialEnv
from sotopia_env.episodes.runner import Job, play, run_batch
from sotopia_env.episodes.sqlite_store import SQLiteStore
from sotopia_env.evaluators import SOTOPIA_DIMENSIONS, EpisodeContext
from sotopia_env.evaluators.llm import LLMEvaluator, evaluation_prompt, parse_ratings, rating_schema
from sotopia_env.observation import Observation, background_for, build_observation, labels_for
from sotopia_env.prompt import render_prompt

_ = _common
LLM_SECONDS = [0.0]
RATING = our_rating(rating_schema(2, SOTOPIA_DIMENSIONS))


class TimedBackend:
    """Wraps a backend; adds the time spent inside ``generate`` to ``LLM_SECONDS``."""

    def __init__(self, inner: ScriptedBackend) -> None:
        self.inner = inner
        self.model = inner.model

    async def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        start = time.perf_counter()
        try:
            return await self.inner.generate(requests)
        finally:
            LLM_SECONDS[0] += time.perf_counter() - start


def agent_backend() -> TimedBackend:
    return TimedBackend(ScriptedBackend(lambda request: SPEAK, model="scripted"))


def judge() -> LLMEvaluator:
    return LLMEvaluator(TimedBackend(ScriptedBackend(lambda request: RATING, model="scripted-judge")))


def llm_agent(spec: str = "", seat: int = 0) -> LLMAgent:
    return LLMAgent(agent_backend())


# --- whole episodes ---------------------------------------------------------------------------------------------


def bench_env_only(setups: list, turns: int) -> tuple[float, int]:
    config = EnvConfig(max_turns=turns)
    speak = AgentAction(action_type=ActionType.speak, argument="I hear you, but let us find a way that works.")
    none = AgentAction(action_type=ActionType.none)
    steps = 0
    start = time.perf_counter()
    for setup in setups:
        env = SocialEnv(setup=setup, config=config)
        _, infos = env.reset()
        while env.agents:
            actions = {a: speak if infos[a]["acting"] else none for a in env.agents}
            _, _, _, _, infos = env.step(actions)
            steps += 1
    return time.perf_counter() - start, steps


def bench_play(setups: list, turns: int, kind: str) -> tuple[float, float, int]:
    """(wall seconds, LLM seconds, turns played)."""
    config = EnvConfig(max_turns=turns)
    LLM_SECONDS[0] = 0.0
    played = 0

    async def main() -> None:
        nonlocal played
        for setup in setups:
            if kind == "scripted":
                agents = [ScriptedAgent(["I hear you."] * turns) for _ in range(2)]
                log = await play(setup, agents, None, config)
            else:
                log = await play(setup, [llm_agent(), llm_agent()], judge(), config)
                assert log.status == "rated", log.rating
            played += len(log.turns)

    start = time.perf_counter()
    asyncio.run(main())
    return time.perf_counter() - start, LLM_SECONDS[0], played


def bench_batch(setups: list, turns: int, concurrency: int) -> tuple[float, float, int, float]:
    """run_batch with SQLite: (wall, LLM seconds, turns, CPU seconds)."""
    LLM_SECONDS[0] = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(str(Path(tmp) / "episodes.db"))
        jobs = [Job(setup, ["scripted", "scripted"], repeat=i) for i, setup in enumerate(setups)]
        cpu0, start = cpu_seconds(), time.perf_counter()
        config = EnvConfig(max_turns=turns)
        summary = asyncio.run(
            run_batch(jobs, store, "overhead", judge(), llm_agent, concurrency, config, progress=False)
        )
        wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu0
        assert summary.rated == len(jobs), summary
        turns_played = sum(len(log.turns) for log in store.iter("overhead"))
        store.close()
    return wall, LLM_SECONDS[0], turns_played, cpu


# --- pieces -----------------------------------------------------------------------------------------------------


def mid_episode(setup, turns: int, at: int) -> tuple[SocialEnv, dict, dict]:
    env = SocialEnv(setup=setup, config=EnvConfig(max_turns=turns + 1))
    obs, infos = env.reset()
    speak = AgentAction(action_type=ActionType.speak, argument="I hear you, but let us find a way that works.")
    for _ in range(at):
        obs, _, _, _, infos = env.step(
            {a: speak if infos[a]["acting"] else AgentAction(action_type="none") for a in env.agents}
        )
    return env, obs, infos


def per_call(fn, n: int) -> float:
    """Microseconds per call of ``fn`` (best of 3 runs of ``n``)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


def bench_pieces(setup, turns: int, n: int) -> list[tuple[str, float, str]]:
    at = turns - 1  # the last, longest turn
    env, obs, infos = mid_episode(setup, turns, at)
    acting = next(a for a in env.agents if infos[a]["acting"])
    typed = Observation.from_env(obs[acting])
    context = EpisodeContext(setup=setup, turns=env.turns, termination_reason="max_turns")
    names = setup.agent_names
    background, labels = background_for(setup, 0), labels_for(setup, 0)
    available = list(ACTION_TYPES)

    rows = [
        (
            "build_observation (one agent)",
            per_call(lambda: build_observation(names[0], background, labels, env.turns, at, available), n),
            "env.step builds one per agent",
        ),
        ("Observation.from_env", per_call(lambda: Observation.from_env(obs[acting]), n), f"{at} history entries"),
        ("render_prompt", per_call(lambda: render_prompt(typed), n), "sotopia_env/prompt.py"),
        ("action_json_schema", per_call(lambda: action_json_schema(typed.available_actions), n), ""),
        ("parse_action", per_call(lambda: parse_action(SPEAK), n), ""),
        ("evaluation_prompt", per_call(lambda: evaluation_prompt(context, SOTOPIA_DIMENSIONS), n), "once an episode"),
        ("rating_schema", per_call(lambda: rating_schema(2, SOTOPIA_DIMENSIONS), n), "once an episode"),
        ("parse_ratings", per_call(lambda: parse_ratings(RATING, names, SOTOPIA_DIMENSIONS), n), "once an episode"),
    ]
    return rows


def bench_memory(setups: list, turns: int) -> tuple[float, float, float]:
    """(peak traced MiB while running and keeping every log, MiB retained per episode, maxrss MiB)."""
    config = EnvConfig(max_turns=turns)
    logs = []

    async def main() -> None:
        for setup in setups:
            logs.append(await play(setup, [llm_agent(), llm_agent()], judge(), config))

    gc.collect()
    tracemalloc.start()
    asyncio.run(main())
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20, current / 2**20 / max(1, len(logs)), maxrss_mb()


def bench_profile(setups: list, turns: int, top: int) -> None:
    config = EnvConfig(max_turns=turns)

    async def main() -> None:
        for setup in setups:
            await play(setup, [llm_agent(), llm_agent()], judge(), config)

    profiler = cProfile.Profile()
    profiler.enable()
    asyncio.run(main())
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    rows = []
    for (filename, line, func), (_, ncalls, tottime, cumtime, _) in sorted(
        stats.stats.items(),
        key=lambda kv: kv[1][2],
        reverse=True,  # type: ignore[attr-defined]
    )[:top]:
        where = _short(filename)
        rows.append((f"{where}:{line} {func}", ncalls, tottime * 1e3, 100 * tottime / total, cumtime * 1e3))
    print_table(
        f"cProfile of {len(setups)} LLM episodes: top {top} functions by own time",
        ["function", "calls", "own ms", "own %", "cumulative ms"],
        rows,
    )
    areas: dict[str, float] = defaultdict(float)
    for (filename, _, func), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        areas[_area(filename, func)] += tottime
    print_table(
        "own time by area",
        ["area", "ms", "%"],
        [(k, v * 1e3, 100 * v / total) for k, v in sorted(areas.items(), key=lambda kv: -kv[1])],
        note=f"profiled total {total * 1e3:.0f} ms for {len(setups)} episodes (cProfile inflates call-heavy code)",
    )


def _short(filename: str) -> str:
    for marker in ("site-packages/", "/work/main/", "lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def _area(filename: str, func: str) -> str:
    if filename == "~":
        if "pydantic" in func or "validate" in func or "model_" in func:
            return "pydantic (C)"
        return "builtins (C: str, json, list ...)"
    short = _short(filename)
    for prefix, name in (
        ("sotopia_env/observation.py", "sotopia_env/observation.py"),
        ("sotopia_env/env.py", "sotopia_env/env.py"),
        ("agents/", "agents/"),
        ("episodes/", "episodes/"),
        ("sotopia_env/", "sotopia_env/ (other)"),
        ("pydantic", "pydantic (Python)"),
        ("asyncio", "asyncio"),
        ("json", "json"),
        ("numpy", "numpy"),
        ("benchmarks/", "fake LLM (benchmark's scripted backend)"),
    ):
        if short.startswith(prefix) or f"/{prefix}" in short:
            return name
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=200, help="episodes per row")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--profile-episodes", type=int, default=100)
    parser.add_argument("--top", type=int, default=15, help="functions shown in the profile")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    args = parser.parse_args()
    if args.quick:
        args.episodes, args.profile_episodes, args.top = 3, 2, 5
    n, turns = args.episodes, args.turns
    print(f"# Framework overhead ({n} episodes of {turns} turns per row)\n\n{machine_line()}")
    setups = two_seat_setups(n)
    bench_play(setups[:2], turns, "llm")  # warm up imports and caches

    rows = []
    wall, steps = bench_env_only(setups, turns)
    rows.append(("env.step only", wall / steps * 1e3, wall / n * 1e3, "-", steps // n))
    wall, llm, played = bench_play(setups, turns, "scripted")
    rows.append(("play, ScriptedAgent", wall / played * 1e3, wall / n * 1e3, "-", played // n))
    wall, llm, played = bench_play(setups, turns, "llm")
    rows.append(
        (
            "play, LLMAgent + LLMEvaluator",
            (wall - llm) / played * 1e3,
            (wall - llm) / n * 1e3,
            llm / n * 1e3,
            played // n,
        )
    )
    for concurrency in (1, 64):
        wall, llm, played, cpu = bench_batch(setups, turns, concurrency)
        rows.append(
            (
                f"run_batch + SQLite, concurrency {concurrency}",
                (wall - llm) / played * 1e3,
                (wall - llm) / n * 1e3,
                llm / n * 1e3,
                played // n,
            )
        )
    print_table(
        "time per step and per episode, LLM time excluded",
        ["path", "ms / step", "ms / episode", "fake-LLM ms / episode", "turns / episode"],
        rows,
        note="target: < 1 ms per step. 'fake-LLM' is the scripted backend's own time, already subtracted.",
    )

    print_table(
        f"cost of each piece (µs per call, at turn {turns - 1})",
        ["piece", "µs / call", "note"],
        bench_pieces(setups[0], turns, 20 if args.quick else 2000),
    )

    mem_n = min(n, 100)
    peak, per_episode, rss = bench_memory(setups[:mem_n], turns)
    print_table(
        "memory",
        ["measure", "MiB"],
        [
            (f"tracemalloc peak, {mem_n} LLM episodes with every log kept", peak),
            ("retained per episode (its EpisodeLog and what it references)", per_episode),
            ("process max RSS (ru_maxrss, whole run so far, incl. imports)", rss),
        ],
    )
    bench_profile(setups[: args.profile_episodes], turns, args.top)


if __name__ == "__main__":
    main()
