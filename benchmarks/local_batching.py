"""Throughput of the local backend: concurrent (batched) requests vs the same requests one at a time.

    python benchmarks/local_batching.py                   # smollm2-135m, 1/4/8/16 concurrent, all modes
    python benchmarks/local_batching.py --concurrency 8 --modes json --max-new-tokens 64
    python benchmarks/local_batching.py --modes episodes --concurrency 8 16 --episode-turns 8
    python benchmarks/local_batching.py --modes episodes episodes-generate --concurrency 8 16 32 --episode-turns 20
    python benchmarks/local_batching.py --quick            # tiny sizes (the smoke test)

``free`` and ``json`` requests are action prompts in the style of the LLM agent's (about
120 prompt tokens): ``free`` unconstrained, ``json`` with the action schema (xgrammar
constrained). ``story`` requests are short prompts whose answers run to the token limit:
there decoding dominates, which is what batching speeds up (prompt prefill costs the same
batched or not on a CPU).
``episodes`` plays whole episodes (``LLMAgent`` on both seats, JSON-constrained, the real
``render_prompt`` prompts, which grow with the conversation, no evaluator) for ``--episode-turns`` turns;
the agents are offered only "speak" (``TalkingAgent``), since the greedy 135M model otherwise leaves after
about three turns and there would be no long conversation to measure (``tests/custom_agents.py``):
N episodes at once against the same episodes one after another, once with the prompt prefix cache
(the backend's default) and once without it ("episodes-nocache"). Both decode through the continuous-batching
scheduler (the default); "episodes-generate" plays them through ``model.generate`` one batch at a time (the
path before the scheduler, kept for models it cannot hold), with the prefix cache. The request modes run
without the prefix cache, so that they measure batching alone.
Decoding is greedy by default, so batched and sequential runs produce the same text
and the comparison is about throughput only.

Tokens/s counts completion tokens (up to the end-of-turn token) over wall time.
"sequential" sends ``--sequential`` requests (or plays that many episodes) one after another (batch
size 1); "concurrent N" sends N requests at once (plays N episodes at once), which the backend coalesces
into batches. "prefill reused" is the share of prompt tokens whose keys/values came from the prefix cache.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from dataclasses import dataclass

import _common
from _common import distinct_setups, machine_line, print_table
from action_prompts import ASKS, action_prompt
from custom_agents import TalkingAgent

from sotopia_env.actions import action_json_schema
from sotopia_env.backends.base import ChatRequest, Completion, GenerationSettings
from sotopia_env.backends.local import LocalBackend
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.runner import play

_ = _common
EPISODE_MODES = ("episodes", "episodes-generate", "episodes-nocache")
# (prefix cache on, continuous batching on) per mode; the request modes measure batching alone
BACKENDS = {"episodes": (True, True), "episodes-generate": (True, False)}


NAMES = ["Alice", "Bob", "Carol", "Dan", "Eve", "Frank", "Grace", "Heidi"]


@dataclass
class Row:
    mode: str
    label: str
    requests: int
    tokens: int
    seconds: float
    batches: int
    truncated: int
    reused: float = 0.0  # share of prompt tokens taken from the prefix cache

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def prompt(i: int) -> list[dict[str, str]]:
    return action_prompt(NAMES[i % len(NAMES)], ASKS[i % len(ASKS)], turn=1 + i // len(ASKS))


def story(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Write a long story about {NAMES[i % len(NAMES)]}, a dragon who lost a hat."}]


def requests(n: int, mode: str, args: argparse.Namespace) -> list[ChatRequest]:
    schema = action_json_schema() if mode == "json" else None
    build = story if mode == "story" else prompt
    return [
        ChatRequest(build(i), json_schema=schema, temperature=args.temperature, max_new_tokens=args.max_new_tokens)
        for i in range(n)
    ]


async def measure(backend: LocalBackend, mode: str, label: str, batch: list[ChatRequest], concurrent: bool) -> Row:
    before = _counters(backend)
    start = time.perf_counter()
    if concurrent:
        outs: list[Completion] = [o for (o,) in await asyncio.gather(*(backend.generate([r]) for r in batch))]
    else:
        outs = [(await backend.generate([r]))[0] for r in batch]
    seconds = time.perf_counter() - start
    failed = [o.error for o in outs if not o.ok]
    if failed:
        raise SystemExit(f"{len(failed)} requests failed: {failed[0]}")
    return _row(backend, mode, label, before, seconds)


async def measure_episodes(
    backend: LocalBackend, mode: str, label: str, setups: list, concurrent: bool, args: argparse.Namespace
) -> Row:
    """Play ``setups`` (at once, or one after another) with LLM agents on ``backend``; no evaluator."""
    settings = GenerationSettings(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    config = EnvConfig(max_turns=args.episode_turns)

    async def one(setup) -> None:
        await play(setup, [TalkingAgent(backend, settings) for _ in setup.agent_names], None, config)

    before = _counters(backend)
    start = time.perf_counter()
    if concurrent:
        await asyncio.gather(*(one(s) for s in setups))
    else:
        for setup in setups:
            await one(setup)
    return _row(backend, mode, label, before, time.perf_counter() - start)


def _counters(backend: LocalBackend) -> tuple[int, ...]:
    st = backend.stats
    return (st.requests, st.completion_tokens, st.generate_calls, st.json_truncated, st.prompt_tokens,
            st.prefix_reused_tokens)  # fmt: skip


def _row(backend: LocalBackend, mode: str, label: str, before: tuple[int, ...], seconds: float) -> Row:
    delta = [a - b for a, b in zip(_counters(backend), before, strict=True)]
    requests_, tokens, batches, truncated, prompt, reused = delta
    return Row(mode, label, requests_, tokens, seconds, batches, truncated, reused / prompt if prompt else 0.0)


async def run(args: argparse.Namespace) -> list[Row]:
    backends: dict[tuple[bool, bool], LocalBackend] = {}
    torch_threads = __import__("torch").get_num_threads()
    rows = []
    for mode in args.modes:
        key = BACKENDS.get(mode, (False, True))
        if key not in backends:
            cached, continuous = key
            backends[key] = LocalBackend.from_spec(
                args.model,
                device=args.device,
                max_batch_size=max(args.concurrency),
                prefix_cache_mb=4096 * cached,
                continuous=continuous,
            )
            how = "continuous batching" if continuous else "generate, a batch at a time"
            print(f"{backends[key]!r}, prefix cache {'on' if cached else 'off'}, {how}, torch threads {torch_threads}")
        backend = backends[key]
        if mode in EPISODE_MODES:
            setups = distinct_setups(max(args.sequential, *args.concurrency))
            await measure_episodes(backend, mode, "warm-up", setups[:2], True, args)
            alike = mode == "episodes-generate" and "episodes" in args.modes  # one at a time is alike both ways
            if args.sequential and not alike:
                rows.append(await measure_episodes(backend, mode, "sequential", setups[: args.sequential], False, args))
                print(_line(rows[-1]), flush=True)
            for n in args.concurrency:
                rows.append(await measure_episodes(backend, mode, f"concurrent {n}", setups[:n], True, args))
                print(_line(rows[-1]), flush=True)
            continue
        await backend.generate(requests(2, mode, args))  # warm-up (and grammar compile)
        rows.append(await measure(backend, mode, "sequential", requests(args.sequential, mode, args), False))
        print(_line(rows[-1]), flush=True)
        for n in args.concurrency:
            rows.append(await measure(backend, mode, f"concurrent {n}", requests(n, mode, args), True))
            print(_line(rows[-1]), flush=True)
    for backend in backends.values():
        backend.close()
    return rows


def _line(row: Row) -> str:
    return f"  {row.mode:16} {row.label:14} {row.tokens:5} tokens in {row.seconds:6.1f}s = {row.tps:6.1f} tok/s"


def _baseline(mode: str, base: dict[str, float]) -> str:
    """The sequential run a mode is compared with: its own, or (episodes-generate) the scheduler's."""
    return mode if mode in base or mode != "episodes-generate" else "episodes"


def print_rows(rows: list[Row]) -> None:
    base = {r.mode: r.tps for r in rows if r.label == "sequential"}
    table = [
        (
            r.mode,
            r.label,
            r.requests,
            r.batches,
            r.tokens,
            r.seconds,
            r.tps,
            f"{r.tps / base[_baseline(r.mode, base)]:.1f}x" if base.get(_baseline(r.mode, base)) else "-",
            f"{100 * r.reused:.0f}%",
            r.truncated if r.mode in ("json", *EPISODE_MODES) else "-",
        )
        for r in rows
    ]
    columns = ["mode", "run", "LLM calls", "batches", "tokens", "seconds", "tok/s", "vs sequential",
               "prefill reused", "JSON cut"]  # fmt: skip
    print_table("tokens per second, batched vs one at a time", columns, table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument(
        "--sequential", type=int, default=8, help="requests (episodes) one at a time for the baseline (0: none)"
    )
    modes = ["free", "json", "story", *EPISODE_MODES]
    parser.add_argument("--modes", nargs="+", choices=modes, default=modes)
    parser.add_argument("--episode-turns", type=int, default=8, help="turns per episode in the episodes modes")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--threads", type=int, help="torch CPU threads (1 is best on a busy, shared machine)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    args = parser.parse_args()
    if args.quick:
        args.modes, args.concurrency, args.sequential = ["json", "episodes"], [2], 2
        args.episode_turns, args.max_new_tokens = 2, 24
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    print(f"# Local backend batching ({args.model}, {args.device}, greedy={args.temperature <= 0})\n\n{machine_line()}")
    print_rows(asyncio.run(run(args)))
    print(f"\npeak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
