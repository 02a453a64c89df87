"""Does the default ``sotopia-env run`` episode read as a conversation? Quality figures over seeds.

    python benchmarks/episode_quality.py                  # seeds 0..9, run's defaults (about 10 min on 2 CPUs)
    python benchmarks/episode_quality.py --seeds 0 1 2 --max-turns 8 --show
    python benchmarks/episode_quality.py --quick          # 2 seeds, 4 turns (the smoke test)

Each seed is one ``sotopia-env run --seed N`` invoked in process through the CLI itself (the same code path:
scenario sampled by the seed, both agents and generation settings as ``run`` builds them), except that the
judge is skipped (``--evaluator none``: the figures are about the conversation) and the episode goes to a
throwaway SQLite store, from which the turns are read back. ``--show`` prints each transcript as ``run`` does.

Per episode set:

- turns: the median number of turns (one action each);
- empty: the share of speak / non-verbal turns whose argument is empty, ``...`` or only punctuation/whitespace;
- repeats: the share of turns with a non-blank argument equal (after stripping) to an earlier turn's in the
  same episode;
- early leave: episodes that end by ``leave`` on one of the first four turns (``#0`` to ``#3``).
"""

from __future__ import annotations

import argparse
import statistics
import string
import tempfile
import time
from pathlib import Path

import _common
from _common import machine_line, print_table

from episodes.log import EpisodeLog
from sotopia_env.actions import ActionType

_ = _common
TALK = (ActionType.speak, ActionType.non_verbal)
EARLY = 4
CODES = {ActionType.speak: "S", ActionType.non_verbal: "N", ActionType.action: "A", ActionType.leave: "L"}
CODES[ActionType.none] = "-"


def is_empty(argument: str) -> bool:
    return not argument.strip(string.punctuation + string.whitespace + "…")


def run_episode(seed: int, max_turns: int | None, store_url: str, show: bool) -> EpisodeLog:
    from typer.testing import CliRunner

    from episodes.store import open_store
    from sotopia_cli.main import app

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
    early = sum(
        1
        for log in logs
        if log.turns and log.turns[-1].action.action_type is ActionType.leave and log.turns[-1].turn < EARLY
    )
    return {
        "median turns": statistics.median(len(log.turns) for log in logs),
        "empty": sum(is_empty(t.action.argument) for t in talk) / len(talk) if talk else float("nan"),
        "repeats": repeats / spoken if spoken else float("nan"),
        "early leaves": early,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--max-turns", type=int, default=None, help="Pass --max-turns to run (default: run's).")
    parser.add_argument("--show", action="store_true", help="Print each episode's transcript.")
    parser.add_argument("--label", default="", help="A label for the table's row (e.g. before / after).")
    parser.add_argument("--quick", action="store_true", help="2 seeds of 4 turns (smoke test).")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.max_turns = args.seeds[:2], 4
    print(machine_line())
    logs: list[EpisodeLog] = []
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'quality.db'}"
        for seed in args.seeds:
            t0 = time.perf_counter()
            log = run_episode(seed, args.max_turns, url, args.show)
            logs.append(log)
            one = figures([log])
            kinds = "".join(CODES[t.action.action_type] for t in log.turns)
            rows.append(
                [seed, log.setup.scenario.id, len(log.turns), log.termination_reason, one["empty"], one["repeats"]]
                + [kinds, time.perf_counter() - t0]
            )
            print(f"seed {seed}: {rows[-1]}", flush=True)
    print_table(
        "Per episode",
        ["seed", "scenario", "turns", "ended", "empty", "repeats", "actions", "seconds"],
        rows,
        note="actions: S speak, N non-verbal, A action, L leave, - none.",
    )
    total = figures(logs)
    seeds = f"seeds {args.seeds[0]}..{args.seeds[-1]}" if len(args.seeds) > 1 else f"seed {args.seeds[0]}"
    max_turns = args.max_turns or "as run's default"
    print_table(
        "Episode quality",
        ["code", "episodes", "median turns", "empty speak/non-verbal", "verbatim repeats", "early leaves (< #4)"],
        [
            [args.label or "-", len(logs), total["median turns"], f"{total['empty']:.0%}", f"{total['repeats']:.0%}"]
            + [f"{total['early leaves']} of {len(logs)}"]
        ],
        note=f"{seeds}, max turns {max_turns}, judge skipped; {time.perf_counter() - started:.0f} s in all.",
    )


if __name__ == "__main__":
    main()
