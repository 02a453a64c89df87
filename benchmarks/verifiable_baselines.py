"""Where each verifiable kind's floor and ceiling are: random, heuristic and oracle, and the old exploit scripts.

    python benchmarks/verifiable_baselines.py [--kinds bargaining,split] [--splits dev,test] [--episodes 20]

Per kind and split: the mean goal (0..10) of each baseline in seat 1 against ``rule-partner``, over every
instance and ``--episodes`` drawn hidden types per instance (``episodes.baseline_goals``), with a 95% t-interval
over instances; the oracle's headroom over the heuristic; and the scripts that used to solve the kinds
(``agents/exploits.py``). No model is called. The headroom test (``tests/test_worlds.py``) holds the same figures to
oracle - heuristic >= 3 and heuristic > random on test.
"""

from __future__ import annotations

import argparse
import statistics
import time

import _common  # noqa: F401  (puts the repository on sys.path)
from _common import machine_line, print_table
from scipy import stats

from sotopia_env.agents.exploits import ConcedeInOrder, ScheduleInverter, SlotLister, WorryEcho
from sotopia_env.episodes.baseline_goals import KindGoals, instance_goals
from sotopia_env.kinds import rule_sets
from sotopia_env.library import load_library

BASELINES = ("baseline-random", "baseline-heuristic", "baseline-oracle")
EXPLOITS = {"persuasion": WorryEcho, "bargaining": ScheduleInverter, "scheduling": SlotLister, "split": ConcedeInOrder}


def interval(goals: KindGoals) -> str:
    values = list(goals.per_instance.values())
    if len(values) < 2:
        return f"{goals.mean:.2f}"
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return f"{goals.mean:.2f} ± {half:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default="", help="comma-separated kinds (default: every verifiable kind)")
    parser.add_argument("--splits", default="dev,test")
    parser.add_argument("--episodes", type=int, default=20, help="drawn hidden types per instance")
    args = parser.parse_args()
    library = load_library()
    kinds = [k for k in args.kinds.split(",") if k] or [k.name for k in rule_sets("verifiable")]
    rows = []
    started = time.perf_counter()
    for kind in kinds:
        for split in args.splits.split(","):
            seeds = range(args.episodes)
            found = {spec: instance_goals(library, kind, split, spec, seeds) for spec in BASELINES}
            exploit = EXPLOITS.get(kind)
            script = instance_goals(library, kind, split, exploit, seeds) if exploit else None
            random_, heuristic, oracle = (found[s] for s in BASELINES)
            rows.append(
                [
                    kind,
                    split,
                    len(heuristic.per_instance),
                    interval(random_),
                    interval(heuristic),
                    interval(oracle),
                    oracle.mean - heuristic.mean,
                    f"{exploit.__name__} {script.mean:.2f}" if script else "-",
                ]
            )
    print_table(
        "Verifiable kinds: mean goal of each baseline in seat 1 vs rule-partner",
        ["kind", "split", "instances", "random", "heuristic", "oracle", "oracle - heuristic", "old exploit"],
        rows,
        note=f"{args.episodes} drawn hidden types per instance; ± is a 95% t-interval over instances. "
        f"{time.perf_counter() - started:.0f} s; {machine_line()}",
    )


if __name__ == "__main__":
    main()
