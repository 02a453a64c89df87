"""Throughput of the local backend: concurrent (batched) requests vs the same requests one at a time.

    python benchmarks/local_batching.py                   # smollm2-135m, 1/4/8/16 concurrent, free + JSON
    python benchmarks/local_batching.py --concurrency 8 --modes json --max-new-tokens 64

``free`` and ``json`` requests are action prompts in the style of the LLM agent's (about
120 prompt tokens): ``free`` unconstrained, ``json`` with the action schema (xgrammar
constrained). ``story`` requests are short prompts whose answers run to the token limit:
there decoding dominates, which is what batching speeds up (prompt prefill costs the same
batched or not on a CPU).
Decoding is greedy by default, so batched and sequential runs produce the same text
and the comparison is about throughput only.

Tokens/s counts completion tokens (up to the end-of-turn token) over wall time.
"sequential" sends ``--sequential`` requests one after another (batch size 1);
"concurrent N" sends N requests at once, which the backend coalesces into one batch.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from sotopia_env.actions import ACTION_TYPES, action_json_schema
from sotopia_env.backends.base import ChatRequest, Completion
from sotopia_env.backends.local import LocalBackend

LINES = [
    "Hi! Do you have a minute?",
    "Could you lend me your car this weekend?",
    "I think we should split the bill.",
    "Are you coming to the party tonight?",
    "I found your wallet on the bus.",
    "Can you help me move on Saturday?",
    "The rent is due tomorrow.",
    "Let's plan the trip together.",
]
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

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def prompt(i: int) -> list[dict[str, str]]:
    name, heard = NAMES[i % len(NAMES)], LINES[i % len(LINES)]
    options = "\n".join(f'- "{a}"' for a in ACTION_TYPES)
    user = (
        f'Conversation so far:\nSam said: "{heard}"\n\nIt is turn #{1 + i // len(LINES)} and your move. '
        f'Choose one action:\n{options}\n\nReply with one JSON object only: {{"action_type": "...", "argument": "..."}}'
    )
    system = f"You are playing {name} in a social simulation. Stay in character.\n\n{name} is a friendly teacher."
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


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
    calls, truncated = backend.stats.generate_calls, backend.stats.json_truncated
    start = time.perf_counter()
    if concurrent:
        outs: list[Completion] = [o for (o,) in await asyncio.gather(*(backend.generate([r]) for r in batch))]
    else:
        outs = [(await backend.generate([r]))[0] for r in batch]
    seconds = time.perf_counter() - start
    failed = [o.error for o in outs if not o.ok]
    if failed:
        raise SystemExit(f"{len(failed)} requests failed: {failed[0]}")
    return Row(
        mode,
        label,
        len(batch),
        sum(o.completion_tokens for o in outs),
        seconds,
        backend.stats.generate_calls - calls,
        backend.stats.json_truncated - truncated,
    )


async def run(args: argparse.Namespace, console: Console) -> list[Row]:
    backend = LocalBackend.from_spec(args.model, device=args.device, max_batch_size=max(args.concurrency))
    console.print(f"{backend!r}, torch threads: {__import__('torch').get_num_threads()}")
    rows = []
    for mode in args.modes:
        await backend.generate(requests(2, mode, args))  # warm-up (and grammar compile)
        rows.append(await measure(backend, mode, "sequential", requests(args.sequential, mode, args), False))
        console.print(_line(rows[-1]))
        for n in args.concurrency:
            rows.append(await measure(backend, mode, f"concurrent {n}", requests(n, mode, args), True))
            console.print(_line(rows[-1]))
    backend.close()
    return rows


def _line(row: Row) -> str:
    return f"  {row.mode:4} {row.label:14} {row.tokens:5} tokens in {row.seconds:6.1f}s = {row.tps:6.1f} tok/s"


def table(rows: list[Row]) -> Table:
    out = Table("mode", "run", "requests", "batches", "tokens", "seconds", "tok/s", "vs sequential", "JSON cut")
    base = {r.mode: r.tps for r in rows if r.label == "sequential"}
    for r in rows:
        speedup = f"{r.tps / base[r.mode]:.1f}x" if base.get(r.mode) else "-"
        cut = str(r.truncated) if r.mode == "json" else "-"
        out.add_row(r.mode, r.label, str(r.requests), str(r.batches), str(r.tokens), f"{r.seconds:.1f}",
                    f"{r.tps:.1f}", speedup, cut)  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--sequential", type=int, default=8, help="requests sent one at a time for the baseline")
    parser.add_argument("--modes", nargs="+", choices=["free", "json", "story"], default=["free", "json", "story"])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--threads", type=int, help="torch CPU threads (1 is best on a busy, shared machine)")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    console = Console(width=max(Console().width, 110))
    rows = asyncio.run(run(args, console))
    console.print(table(rows))


if __name__ == "__main__":
    main()
