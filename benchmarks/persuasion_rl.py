"""Persuasion that can be learnt (issue #44, part 4): does a policy trained on the curriculum win held-out persuasion?

    python benchmarks/persuasion_rl.py --keep RUN --rows base,bc,grpo --split dev   # choices on dev
    python benchmarks/persuasion_rl.py --keep RUN --rows base,bc,grpo --split test --final  # once, at the end

Rows (trained into ``RUN/<row>``, evaluated into ``RUN/evals/<row>-<split>.json``; a rerun reuses both):

- ``base``: the embedded SmolLM2-135M-Instruct.
- ``bc``: ``VerifiableExpert`` plays every persuasion train instance, the 8 shipped and ``--curriculum`` generated
  ones (``sotopia_env.generation.persuasion_curriculum``, written to ``RUN/curriculum``), against the rule
  partner: it asks what is on the partner's mind, then offers the remedy the cue lines point to (issue #57's
  persuasion: a concern drawn per episode, remedies listed in the goal, graded by speed). Its turns up to the deal
  become SFT examples (the prompts ``LLMAgent`` sends; the thank-you after the deal is left out), and a LoRA is trained.
- ``bc-shipped``: the same on the 8 shipped train instances only (the control for the curriculum).
- ``grpo``: episode GRPO from ``bc`` on the same train starts, ``dense_reward: --dense`` (the kind's partial
  credit: 0.5 for offering the right remedy without the ask, 1 on agreement; 0 once a speech listed several).

Evaluation: every ``verifiable:persuasion:SPLIT`` instance against the rule partner, greedy (seed S) and ``--k``
episodes sampled at the training temperature (seeds S+1..S+k), the same for every row (paired). The table: win
rate greedy and sampled; the share of sampled episodes that offered the right remedy and that won; the
paired difference in win rate from ``bc`` with a 95% bootstrap interval over instances (a win is any agreement;
its goal is graded, 10 only for the right remedy at once); the share of GRPO groups
(the sampled episodes of one instance, ``--group`` at a time) whose rewards are all equal, with the plain reward
and with the dense one (the signal GRPO would have there); each stage's wall time and peak RSS. Not a test: run it
by hand.

``--split test`` runs once, under ``episode_rl.py``'s guard (``_stages.guard_test_once``): with ``--final``, its
settings, training seed (``--seed``: one, so no seed-level interval here; the interval above is over instances),
row set and code commit kept before it plays; other settings or rows are refused, another commit only reprints.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import episode_rl
from _common import machine_line
from _stages import evaluate_kept, guard_test_once, paired_interval, run_stage, stage_kept
from episode_rl import play, rollout_config

ROWS = ("base", "bc-shipped", "bc", "grpo")
SHIPPED_TRAIN = "verifiable:persuasion:train"


def curriculum_dir(args: argparse.Namespace) -> list[str]:
    """The folder of generated train instances (written once per run)."""
    from sotopia_env.generation.persuasion_curriculum import FILE_NAME, write_curriculum

    folder = args.keep / "curriculum"
    if not (folder / FILE_NAME).is_file():
        write_curriculum(folder, args.curriculum, seed=args.seed)
    return [str(folder)]


def train_bc(out: Path, args: argparse.Namespace, scenarios_dir: list[str]) -> dict:
    """``episode_rl.train_bc`` on the shipped train starts (``scenarios_dir`` adds the curriculum): the expert's
    turns of the won episodes up to the deal (its thank-you after the deal is left out)."""
    from sotopia_env.training.experts import VerifiableExpert

    before_thanks = lambda examples: [  # noqa: E731
        e for e in examples if VerifiableExpert.THANKS not in e.completion[-1]["content"]
    ]
    return episode_rl.train_bc(out, args, args.seed, SHIPPED_TRAIN, scenarios_dir, [before_thanks])


def train_grpo(out: Path, bc: Path, args: argparse.Namespace, scenarios_dir: list[str]) -> dict:
    from sotopia_env.training.episode_grpo import train_episode_grpo

    settings = {
        "max_steps": args.steps, "learning_rate": args.lr, "num_iterations": args.iterations, "beta": args.beta,
        "dense_reward": args.dense, "save_steps": 1, "progress": False, "seed": args.seed,
        "scenarios_dir": scenarios_dir,
    }  # fmt: skip
    config = rollout_config(args, SHIPPED_TRAIN, output_dir=str(out), **settings).starting_from(str(bc))
    result = train_episode_grpo(config)
    return {
        "note": f"{result.steps} steps, train rewards {[None if r is None else round(r, 2) for r in result.rewards]}",
        "zero_std_share": result.zero_std_share,
        "log": result.log,
    }


def evaluate(spec: str, args: argparse.Namespace, done: list[dict]) -> list[dict]:
    """One row per held-out episode: instance, seed, greedy, won, partial credit (0.5: offered the right remedy
    without the ask; 1: agreement), the learner's lines. Rows in ``done`` are kept, not played again."""
    from sotopia_env.rewards import partial_credit

    rows = list(done)
    scenarios = f"verifiable:persuasion:{args.split}"
    for greedy, wanted in ((True, [args.seed]), (False, [args.seed + 1 + i for i in range(args.k)])):
        seeds = [s for s in wanted if not any(r["greedy"] == greedy and r["seed"] == s for r in done)]
        if not seeds:
            continue
        if getattr(args, "frozen", None):
            raise SystemExit(f"{spec} has test episodes still to play, and {args.frozen}")
        temperature = 0.0 if greedy else args.temperature
        for (instance, seed), e in play(spec, args, scenarios, seeds, temperature):
            row = {"instance": instance, "seed": seed, "greedy": greedy}
            if e.log is None or e.reward.success is None:
                rows.append({**row, "unrated": True})
                continue
            learner = e.log.setup.agent_names[0]
            credit = 1.0 if e.reward.success else partial_credit(e.log, 0)
            said = [t.action.argument for t in e.log.turns if t.agent == learner]
            rows.append({**row, "won": float(e.reward.success), "goal": e.reward.value, "credit": credit, "said": said})
    return rows


def zero_variance_share(rows: list[dict], group: int, dense: float) -> float:
    """The share of groups (``group`` sampled episodes of one instance, in seed order) whose rewards are all equal:
    the plain reward (10 for a win) with ``dense`` 0, else the dense one (win 10 + dense, else dense x credit)."""
    by_instance: dict[str, list[dict]] = {}
    for r in sorted((r for r in rows if not r["greedy"] and "won" in r), key=lambda r: r["seed"]):
        by_instance.setdefault(r["instance"], []).append(r)
    flat = []
    for episodes in by_instance.values():
        for k in range(0, len(episodes) - group + 1, group):
            rewards = [10 * r["won"] + dense * r["credit"] for r in episodes[k : k + group]]
            flat.append(len(set(rewards)) == 1)
    return statistics.fmean(flat) if flat else float("nan")


def print_table(evals: dict[str, list[dict]], stages: dict[str, dict], args: argparse.Namespace) -> None:
    print(f"### Persuasion on verifiable:persuasion:{args.split}: 1 greedy + {args.k} sampled episodes per instance\n")
    print(
        "| row | wins, greedy | wins, sampled | right remedy / won (sampled) | vs bc, sampled [95% paired] | "
        f"zero-var groups of {args.group}: plain / dense {args.dense:g} | stage time | peak RSS |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, rows in evals.items():
        rated = [r for r in rows if "won" in r]
        greedy = [r for r in rated if r["greedy"]]
        sampled = [r for r in rated if not r["greedy"]]
        cell = lambda rs: f"{sum(r['won'] for r in rs):.0f} / {len(rs)}" if rs else "-"  # noqa: E731
        asked = f"{statistics.fmean(r['credit'] >= 0.5 for r in sampled):.2f} / " if sampled else "- / "
        answered = f"{statistics.fmean(r['credit'] >= 1 for r in sampled):.2f}" if sampled else "-"
        diff = "-"
        if "bc" in evals and name != "bc" and sampled:
            as_goal = lambda rs: [{**r, "goal": r["won"]} for r in rs if "won" in r]  # noqa: E731
            mean, low, high = paired_interval(as_goal(rows), as_goal(evals["bc"]), greedy=False)
            diff = f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]"
        zero = (
            f"{zero_variance_share(rows, args.group, 0):.2f} / {zero_variance_share(rows, args.group, args.dense):.2f}"
        )
        stage = stages.get(name, {})
        cost = f"{stage['seconds']:.0f} s | {stage['peak_rss_mb']:.0f} MiB" if "seconds" in stage else "- | -"
        print(f"| {name} | {cell(greedy)} | {cell(sampled)} | {asked}{answered} | {diff} | {zero} | {cost} |")
    unrated = {name: sum("unrated" in r for r in rows) for name, rows in evals.items()}
    print()
    for name, stage in stages.items():
        if stage.get("note"):
            print(f"- {name}: {stage['note']}")
    print(
        f"\nUnrated episodes {unrated}. Settings: {args.curriculum} curriculum instances, BC {args.bc_epochs} "
        f"epochs at lr {args.bc_lr}; {args.steps} GRPO steps at lr {args.lr} ({args.iterations} optimiser steps "
        f"each, beta {args.beta}, dense reward {args.dense}), temperature {args.temperature}, max {args.max_turns} "
        f"turns, {args.max_new_tokens} tokens a turn; {machine_line()}"
    )


def settings_of(args: argparse.Namespace) -> dict:
    """What the rows depend on: the test guard keeps them."""
    keys = ("curriculum", "bc_epochs", "bc_lr", "steps", "lr", "iterations", "beta", "dense", "k", "group",
            "max_turns", "max_new_tokens", "temperature", "seed")  # fmt: skip
    return {k: getattr(args, k) for k in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, required=True, help="the run folder (stages and evaluations are kept)")
    parser.add_argument("--rows", default="base,bc,grpo", help=f"comma list of {', '.join(ROWS)}")
    parser.add_argument("--split", choices=("dev", "test"), default="dev", help="the held-out split to evaluate on")
    parser.add_argument("--final", action="store_true", help="needed with --split test (which runs once)")
    parser.add_argument("--curriculum", type=int, default=40, help="generated train instances (at most 40)")
    parser.add_argument("--bc-epochs", type=float, default=2.0)
    parser.add_argument("--bc-lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--iterations", type=int, default=1, help="GRPO optimiser steps per batch of rollouts")
    parser.add_argument("--beta", type=float, default=0.1, help="GRPO's KL weight towards the BC adapter")
    parser.add_argument("--dense", type=float, default=2.0, help="GRPO's dense reward (the kind's partial credit)")
    parser.add_argument("--k", type=int, default=8, help="sampled evaluation episodes per instance")
    parser.add_argument("--group", type=int, default=4, help="episodes per group for the zero-variance share")
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--batch", type=int, default=32, help="the local backend's batch size")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="the evaluation's seeds start here (and training's)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    args.eval_seed = args.seed  # what episode_rl's rollout settings are seeded with
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    if unknown := set(rows) - set(ROWS):
        raise SystemExit(f"--rows: unknown {sorted(unknown)}; choose from {', '.join(ROWS)}")
    run = args.keep
    args.frozen = None
    if args.split == "test":
        args.frozen = guard_test_once(run, settings_of(args), rows, args.final, [args.seed])
    (run / "evals").mkdir(parents=True, exist_ok=True)
    stages_file = run / "stages.json"
    stages: dict[str, dict] = json.loads(stages_file.read_text()) if stages_file.is_file() else {}
    curriculum = curriculum_dir(args)
    trainers = {
        "bc": lambda: train_bc(run / "bc", args, curriculum),
        "bc-shipped": lambda: train_bc(run / "bc-shipped", args, []),
        "grpo": lambda: train_grpo(run / "grpo", run / "bc", args, curriculum),
    }
    evals: dict[str, list[dict]] = {}
    for name in rows:
        if name != "base" and not args.frozen:  # a frozen test record reprints: nothing is trained
            if name == "grpo" and not stage_kept(stages, "bc", run / "bc"):
                raise SystemExit("row 'grpo' starts from BC: run the bc row first (--rows bc,grpo)")
            run_stage(stages, stages_file, name, run / name, trainers[name])
        spec = "smollm2-135m" if name == "base" else str(run / name)
        evals[name] = evaluate_kept(run, f"{name}-{args.split}", lambda done, spec=spec: evaluate(spec, args, done))
    print_table(evals, stages, args)


if __name__ == "__main__":
    main()
