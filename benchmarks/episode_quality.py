"""Does the default ``sotopia-env run`` episode read as a conversation? Quality figures over seeds.

    python benchmarks/episode_quality.py                  # seeds 0..9 at once, run's defaults
    python benchmarks/episode_quality.py --one-by-one     # each seed a `sotopia-env run` through the CLI
    python benchmarks/episode_quality.py --seeds 0 1 2 --max-turns 8 --one-by-one --show
    python benchmarks/episode_quality.py --quick          # 2 seeds, 4 turns (the smoke test)

By default the seeds' episodes are played at once in one process, as ``sotopia-env run --seed N`` builds
each (scenario sampled by the seed, both agents with ``run``'s generation settings, the env seeded by N),
so the embedded model's calls share batches (about 4x faster on a CPU). Turns come out as ``run``'s: left
padding does not change greedy ones, and each sampled retry draws with its own request's seed.
``--one-by-one`` instead invokes ``sotopia-env run --seed N`` in process through the CLI itself. Either way
the judge is skipped (``--evaluator none``: the figures are about the conversation) and the episodes go to a
throwaway SQLite store, from which the turns are read back. ``--show`` prints each transcript as ``run`` does.

Per episode set:

- turns: the median number of turns (one action each);
- empty: the share of speak / non-verbal turns whose argument is empty, ``...`` or only punctuation/whitespace;
- repeats: the share of turns with a non-blank argument equal (after stripping) to an earlier turn's in the
  same episode;
- repeated openings: the share of turns with three or more words whose first three words already opened an
  earlier turn of the same episode (either agent's; "I am not clear ..." after "I am not sure ...");
- early leave: episodes that end by ``leave`` on one of the first four turns (``#0`` to ``#3``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import string
import tempfile
import time
from pathlib import Path

import _common
from _common import machine_line, print_table

from sotopia_env.actions import ActionType
from sotopia_env.episodes.log import EpisodeLog

_ = _common
TALK = (ActionType.speak, ActionType.non_verbal)
EARLY = 4
CODES = {ActionType.speak: "S", ActionType.non_verbal: "N", ActionType.action: "A", ActionType.leave: "L"}
CODES[ActionType.none] = "-"


def is_empty(argument: str) -> bool:
    return not argument.strip(string.punctuation + string.whitespace + "…")


def run_episode(seed: int, max_turns: int | None, store_url: str, show: bool) -> EpisodeLog:
    from typer.testing import CliRunner

    from sotopia_env.cli.main import app
    from sotopia_env.episodes.store import open_store

    args = ["run", "--seed", str(seed), "--evaluator", "none", "--store", store_url, "--tag", f"seed{seed}"]
    if max_turns is not None:
        args += ["--max-turns", str(max_turns)]
    result = CliRunner().invoke(app, args)
    if result.exit_code != 0:
        raise SystemExit(f"sotopia-env {' '.join(args)} failed ({result.exit_code}): {result.output[-500:]}")
    if show:
        print(result.output)
    (log,) = open_store(store_url).iter(f"seed{seed}")
    return log


def run_episodes_at_once(seeds: list[int], max_turns: int | None, store_url: str) -> list[EpisodeLog]:
    """Each seed's episode as ``run`` builds it, all played concurrently on the shared embedded backend."""
    from sotopia_env.agents.loading import load_agent
    from sotopia_env.backends.base import GenerationSettings
    from sotopia_env.cli.run_cmd import CHAT_SETTINGS, DEFAULT_MODEL
    from sotopia_env.env import EnvConfig
    from sotopia_env.episodes.runner import Job, run_episode
    from sotopia_env.episodes.store import open_store
    from sotopia_env.episodes.store_writer import StoreWriter
    from sotopia_env.library import load_library
    from sotopia_env.sampler import sample_setup

    library = load_library()
    config = EnvConfig() if max_turns is None else EnvConfig(max_turns=max_turns)  # run's default: 20, as EnvConfig's
    writer = StoreWriter(open_store(store_url), "quality", 60.0)

    async def one(seed: int) -> EpisodeLog:
        settings = GenerationSettings(seed=seed, **CHAT_SETTINGS)
        agents = [load_agent(DEFAULT_MODEL, settings=settings) for _ in range(2)]
        job = Job(sample_setup(library, seed=seed), [DEFAULT_MODEL] * 2, seed=seed)
        return await run_episode(job, None, writer, agents=agents, tag="quality", config=config)

    async def all_seeds() -> list[EpisodeLog]:
        return list(await asyncio.gather(*(one(seed) for seed in seeds)))

    return asyncio.run(all_seeds())


def figures(logs: list[EpisodeLog]) -> dict[str, float | int]:
    talk = [t for log in logs for t in log.turns if t.action.action_type in TALK]
    repeats = spoken = 0
    for log in logs:
        seen: set[str] = set()
        for t in log.turns:
            text = t.action.argument.strip()
            if not text:
                continue
            spoken += 1
            repeats += text in seen
            seen.add(text)
    reopened = worded = 0
    for log in logs:
        opened: set[tuple[str, ...]] = set()
        for t in log.turns:
            words = tuple(t.action.argument.split()[:3])
            if len(words) < 3:
                continue
            worded += 1
            reopened += words in opened
            opened.add(words)
    early = sum(
        1
        for log in logs
        if log.turns and log.turns[-1].action.action_type is ActionType.leave and log.turns[-1].turn < EARLY
    )
    return {
        "median turns": statistics.median(len(log.turns) for log in logs),
        "empty": sum(is_empty(t.action.argument) for t in talk) / len(talk) if talk else float("nan"),
        "repeats": repeats / spoken if spoken else float("nan"),
        "openings": reopened / worded if worded else float("nan"),
        "early leaves": early,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--max-turns", type=int, default=None, help="Pass --max-turns to run (default: run's).")
    parser.add_argument("--show", action="store_true", help="Print each episode's transcript.")
    parser.add_argument("--label", default="", help="A label for the table's row (e.g. before / after).")
    parser.add_argument("--quick", action="store_true", help="2 seeds of 4 turns (smoke test).")
    parser.add_argument("--one-by-one", action="store_true", help="Each seed a `sotopia-env run` via the CLI.")
    parser.add_argument(
        "--no-opening-guard", action="store_true", help="Ablation: let a turn open as an earlier one did."
    )
    args = parser.parse_args()
    if args.no_opening_guard:
        from sotopia_env.backends import local

        local.openings = lambda texts: []  # the guard's input: no openings to avoid
    if args.quick:
        args.seeds, args.max_turns = args.seeds[:2], 4
    print(machine_line())
    logs: list[EpisodeLog] = []
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'quality.db'}"
        if not args.one_by_one:
            logs = run_episodes_at_once(args.seeds, args.max_turns, url)
        for k, seed in enumerate(args.seeds):
            t0 = time.perf_counter()
            log = run_episode(seed, args.max_turns, url, args.show) if args.one_by_one else logs[k]
            if args.one_by_one:
                logs.append(log)
            one = figures([log])
            kinds = "".join(CODES[t.action.action_type] for t in log.turns)
            rows.append(
                [seed, log.setup.scenario.id, len(log.turns), log.termination_reason, one["empty"], one["repeats"]]
                + [one["openings"], kinds, time.perf_counter() - t0 if args.one_by_one else "-"]
            )
            print(f"seed {seed}: {rows[-1]}", flush=True)
    print_table(
        "Per episode",
        ["seed", "scenario", "turns", "ended", "empty", "repeats", "openings", "actions", "seconds"],
        rows,
        note="actions: S speak, N non-verbal, A action, L leave, - none.",
    )
    total = figures(logs)
    seeds = f"seeds {args.seeds[0]}..{args.seeds[-1]}" if len(args.seeds) > 1 else f"seed {args.seeds[0]}"
    max_turns = args.max_turns or "as run's default"
    print_table(
        "Episode quality",
        ["code", "episodes", "median turns", "empty speak/non-verbal", "verbatim repeats", "repeated openings"]
        + ["early leaves (< #4)"],
        [
            [args.label or "-", len(logs), total["median turns"], f"{total['empty']:.0%}", f"{total['repeats']:.0%}"]
            + [f"{total['openings']:.0%}", f"{total['early leaves']} of {len(logs)}"]
        ],
        note=f"{seeds}, max turns {max_turns}, judge skipped; {time.perf_counter() - started:.0f} s in all.",
    )


if __name__ == "__main__":
    main()
