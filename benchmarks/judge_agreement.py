"""The judge-agreement command on stored episodes, against two loopback judges whose disagreement is known.

    python benchmarks/judge_agreement.py            # 100 episodes, 1,000 bootstrap resamples
    python benchmarks/judge_agreement.py --quick    # 10 episodes, 100 resamples

1. Plays ``--episodes`` episodes with scripted agents (distinct two-seat setups, 6 turns, no judge) through
   ``run_batch`` into a new SQLite store: the stored episodes the judges re-rate.
2. Serves two judges on one loopback OpenAI server (``tests/biased_judges.py``): ``judge-b`` rates every agent
   ``--offset`` points above the true score, ``judge-a`` adds ``--bonus`` points to the agent its prompt presents
   first; both add a deterministic noise of -1, 0 or +1.
3. Runs ``sotopia-env episodes evaluate --tag T --judge judge-a --judge judge-b --swap-seats`` in a subprocess (the
   real command, its start-up included), then again (everything is reused: the resume cost).

Expected: mean judge-a minus judge-b = bonus / 2 - offset (the bonus goes to one seat of two); judge-a's seat bias
= bonus; judge-b's = 0. The table shows each figure with its 95% bootstrap interval over episodes, and whether the
interval holds the expected value.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common
from _common import distinct_setups, machine_line, print_table
from biased_judges import BiasedJudges
from loopback_openai import LoopbackOpenAI

from sotopia_env.agents.scripted import ScriptedAgent
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.judge_agreement import Estimate
from sotopia_env.episodes.runner import Job, run_batch
from sotopia_env.episodes.store import open_store

_ = _common
TAG = "bench"
LINES = (
    ("Hello, do you have a minute?", "I can see why you would say that, but I have my doubts."),
    ("Then what would work for you?", "Perhaps we could split the difference this time."),
    ("That sounds fair. Let's do it.", "Agreed, I will write it down."),
)


def store_episodes(db: Path, n: int) -> float:
    """Play ``n`` scripted episodes into a new store; seconds taken."""
    store = open_store(str(db))
    jobs = [Job(setup, ["scripted-first", "scripted-second"], seed=i) for i, setup in enumerate(distinct_setups(n))]

    def agent(spec: str, seat: int) -> ScriptedAgent:
        return ScriptedAgent([line[seat] for line in LINES])

    started = time.perf_counter()
    summary = asyncio.run(
        run_batch(jobs, store, TAG, None, agent, concurrency=16, config=EnvConfig(max_turns=6), progress=False)
    )
    assert store.count(tag=TAG) == n, summary
    return time.perf_counter() - started


def run_command(db: Path, base_url: str, resamples: int, out: Path) -> tuple[float, str]:
    command = [
        *(sys.executable, "-c", "import sys; from sotopia_env.cli.main import app; sys.argv[0] = 'sotopia-env'; app()"),
        *("episodes", "evaluate", "--tag", TAG),
        *("--judge", "judge-a", "--judge", "judge-b", "--swap-seats", "--api-base", base_url),
        *("--store", str(db), "--resamples", str(resamples), "--json", str(out)),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ | {"COLUMNS": "200"})
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the command failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return seconds, done.stdout


def holds(estimate: dict, expected: float) -> str:
    low, high = estimate["low"], estimate["high"]
    return "yes" if low is not None and high is not None and low <= expected <= high else "no"


def text(estimate: dict, signed: bool = False) -> str:
    return Estimate.model_validate(estimate).text(signed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--offset", type=int, default=2, help="judge-b's points above the true score")
    parser.add_argument("--bonus", type=int, default=2, help="judge-a's points for the seat it reads first")
    parser.add_argument("--quick", action="store_true", help="10 episodes, 100 resamples (the smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.episodes, args.resamples = 10, 100
    print(machine_line())
    judges = BiasedJudges(offset={"judge-b": args.offset}, first_seat_bonus={"judge-a": args.bonus})
    with tempfile.TemporaryDirectory() as tmp, LoopbackOpenAI(judges, model_ids=("judge-a", "judge-b")) as srv:
        db, out = Path(tmp) / "episodes.db", Path(tmp) / "agreement.json"
        play_s = store_episodes(db, args.episodes)
        first_s, output = run_command(db, srv.base_url, args.resamples, out)
        calls = len(srv.requests)
        rating_s = float(re.search(r"rated \d+ now .*?, ([\d.]+) s", output).group(1))  # type: ignore[union-attr]
        stats_s = float(re.search(r"figures computed in ([\d.]+) s", output).group(1))  # type: ignore[union-attr]
        again_s, again = run_command(db, srv.base_url, args.resamples, out)
        report = json.loads(out.read_text())

    expected_diff = args.bonus / 2 - args.offset
    bias = {(r["judge"], r["dimension"]): r for r in report["seat_bias"]}
    rows = []
    for pair in report["pairs"]:
        dim = pair["dimension"]
        a, b = bias[("judge-a", dim)]["bias"], bias[("judge-b", dim)]["bias"]
        rows.append(
            [
                dim,
                pair["units"],
                text(pair["spearman"]),
                text(pair["alpha"]),
                text(pair["mean_difference"], signed=True),
                holds(pair["mean_difference"], expected_diff),
                text(a, signed=True),
                holds(a, args.bonus),
                text(b, signed=True),
                holds(b, 0.0),
            ]
        )
    print_table(
        f"judge-a vs judge-b on {args.episodes} stored episodes ({args.resamples} resamples)",
        [
            "dimension",
            "n",
            "Spearman rho",
            "Krippendorff alpha",
            f"mean a - b (expected {expected_diff:+g})",
            "holds",
            f"seat bias a (expected {args.bonus:+d})",
            "holds",
            "seat bias b (expected +0)",
            "holds",
        ],
        rows,
        note="95% percentile bootstrap intervals over episodes; 'holds': the interval contains the expected value.",
    )
    reused = re.search(r"reused (\d+)", again).group(1)  # type: ignore[union-attr]
    print_table(
        "time",
        ["step", "seconds", "note"],
        [
            ["play and store the episodes (scripted agents)", play_s, f"{args.episodes} episodes"],
            [
                "the command, first run",
                first_s,
                f"{calls} judge calls; rating {rating_s:.1f} s, figures {stats_s:.1f} s",
            ],
            ["the command, rerun", again_s, f"{reused} ratings reused, no judge call"],
        ],
    )


if __name__ == "__main__":
    main()
