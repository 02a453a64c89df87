"""Game RL: does episode GRPO on a game's exact outcome raise SmolLM2-135M's win rate in one role, against rule
players, on held-out instances?

    python benchmarks/game_rl.py --keep RUN [--game negotiation-game] [--role proposer] --split dev --seeds 0,1,2
    python benchmarks/game_rl.py --keep RUN ... --split test --final      # once, with the settings chosen on dev
    python benchmarks/game_rl.py --quick                   # 1 step of 1 group x 2, one instance (smoke)

The protocol of ``episode_rl.py``: every choice (steps, learning rate, groups) is made on ``--split dev``
(``GAME:dev``); ``--split test`` (``GAME:test``) runs once, with ``--final``, and a second test run under other
settings is refused. Rows: ``base`` (the embedded model in the role; no training seed) and ``grpo`` (episode GRPO
from the base model with a new LoRA, once per training seed in ``--seeds``, the policy in every seat of ``--role``,
``rule-player`` in the others, reward: the game's goal from ``--evaluator verifiable``). Evaluation: every
instance of the split, greedy (seed S) and ``--k`` episodes sampled at the training temperature (seeds S+1..S+k),
the same for every row, so rows are paired by (instance, evaluation seed). Rule players are stochastic, so a
game's instance alone is not the unit: the interval is a hierarchical bootstrap over training seeds and
(instance, evaluation seed) episodes. The table: win rate (the judge's ``success``) with a Wilson 95% interval,
mean goal, the sampled goal per training seed, and the paired difference in goal from base. Not a test: run it
by hand. A run folder resumes: ``RUN/stages.json``, ``RUN/grpo/seed<S>``, ``RUN/evals/<split>/<row>/``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from _common import machine_line
from _stages import evaluate_kept, fmt_diff, guard_test_once, hierarchical_interval, run_stage
from episode_rl import play

from sotopia_env.episodes.game_report import wilson

ROWS = ("base", "grpo")
BASE = "smollm2-135m"


def evaluate(spec: str, args: argparse.Namespace, done: list[dict]) -> list[dict]:
    """The held-out games, one row each (instance, seed, greedy, goal, success); ``done`` rows are kept."""
    rows = list(done)
    for greedy, wanted in ((True, [args.eval_seed]), (False, [args.eval_seed + 1 + i for i in range(args.k)])):
        seeds = [s for s in wanted if not any(r["greedy"] == greedy and r["seed"] == s for r in done)]
        if not seeds:
            continue
        temperature = 0.0 if greedy else args.temperature
        for (instance, seed), e in play(spec, args, args.scenarios, seeds, temperature, **learner(args)):
            row = {"instance": instance, "seed": seed, "greedy": greedy}
            if e.log is not None and e.reward.value is not None:
                row |= {"goal": e.reward.value, "success": float(bool(e.reward.success)), "turns": len(e.log.turns)}
            rows.append(row)
    return rows


def learner(args: argparse.Namespace) -> dict:
    return {"role": args.role, "partner": "rule-player", "evaluator": "verifiable"}


def train(out: Path, args: argparse.Namespace, seed: int) -> dict:
    from sotopia_env.training.episode_grpo import EpisodeGRPOConfig, train_episode_grpo

    config = EpisodeGRPOConfig(
        base_model=BASE, output_dir=str(out), scenarios=args.train, max_steps=args.steps, learning_rate=args.lr,
        temperature=args.temperature, max_completion_length=args.max_new_tokens, group_size=args.group_size,
        groups_per_step=args.groups, max_resample_groups=args.resample, save_steps=1, progress=False, seed=seed,
        **learner(args),
    )  # fmt: skip
    result = train_episode_grpo(config)
    rewards = [None if r is None else round(r, 2) for r in result.rewards]
    return {"note": f"{result.steps} steps, train rewards {rewards}", "zero_std_share": result.zero_std_share}


def won_cell(rows: list[dict], greedy: bool) -> str:
    rated = [r for r in rows if "goal" in r and r["greedy"] == greedy]
    if not rated:
        return "-"
    wins = int(sum(r["success"] for r in rated))
    low, high = wilson(wins, len(rated))
    return f"{wins}/{len(rated)} = {wins / len(rated):.2f} [{low:.2f}, {high:.2f}]"


def goal_cells(by_seed: dict[int | None, list[dict]], greedy: bool) -> dict[int | None, dict[str, float]]:
    """Goal per training seed and episode (``instance#evaluation seed``): the bootstrap's units."""
    return {
        seed: {f"{r['instance']}#{r['seed']}": r["goal"] for r in rows if "goal" in r and r["greedy"] == greedy}
        for seed, rows in by_seed.items()
    }


def mean_goal(by_seed: dict[int | None, list[dict]], greedy: bool) -> str:
    goals = [g for cells in goal_cells(by_seed, greedy).values() for g in cells.values()]
    return f"{statistics.fmean(goals):.2f}" if goals else "-"


def print_table(evals: dict[str, dict], stages: dict[str, dict], args: argparse.Namespace) -> None:
    print(f"### Game RL: {args.role} in {args.scenarios} ({args.split}), against rule players, paired\n")
    print("| row | split | won, greedy [Wilson 95%] | won, sampled [Wilson 95%] | goal, sampled | sampled per seed | "
          "vs base, sampled [95% hier.] | unrated | train time | peak RSS |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, by_seed in evals.items():
        pooled = [r for rows in by_seed.values() for r in rows]
        per_seed = ", ".join(mean_goal({s: rows}, False) for s, rows in by_seed.items() if s is not None) or "-"
        diff = "-"
        if name != "base" and "base" in evals:
            diff = fmt_diff(hierarchical_interval(goal_cells(by_seed, False), goal_cells(evals["base"], False)))
        trained = [stages[f"{name}/seed{s}"] for s in by_seed if f"{name}/seed{s}" in stages]
        seconds = [t["seconds"] for t in trained]
        rss = [t["peak_rss_mb"] for t in trained]
        print(
            f"| {name} | {args.split} | {won_cell(pooled, True)} | {won_cell(pooled, False)} | "
            f"{mean_goal(by_seed, False)} | {per_seed} | {diff} | {sum('goal' not in r for r in pooled)} | "
            f"{f'{statistics.fmean(seconds):.0f} s' if seconds else '-'} | {f'{max(rss):.0f} MiB' if rss else '-'} |"
        )
    print()
    for name, stage in stages.items():
        print(f"- {name}: {stage['note']}")
    print(
        f"\nSettings: {args.steps} GRPO steps of {args.groups} x {args.group_size} at lr {args.lr}, temperature "
        f"{args.temperature}, {args.max_new_tokens} tokens a move, starts {args.train}, training seeds {args.seeds}; "
        f"{machine_line()}"
    )


def settings_of(args: argparse.Namespace) -> dict:
    """What the rows depend on: the test guard keeps them."""
    keys = ("game", "role", "steps", "lr", "k", "groups", "group_size", "resample", "max_new_tokens", "temperature",
            "seeds", "eval_seed")  # fmt: skip
    return {k: getattr(args, k) for k in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="the run folder (stages and evaluations are kept)")
    parser.add_argument("--game", default="negotiation-game", help="the game's tag")
    parser.add_argument("--role", default="proposer", help="the role (or team) the policy plays")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--k", type=int, default=4, help="sampled evaluation episodes per instance")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--resample", type=int, default=2, help="extra groups a step may play for signal")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--batch", type=int, default=32, help="the local backend's batch size")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--split", choices=("dev", "test"), default="dev", help="where the rows are evaluated")
    parser.add_argument("--final", action="store_true", help="needed with --split test (which runs once)")
    parser.add_argument("--seeds", default="0,1,2", help="training seeds: grpo is trained once each")
    parser.add_argument("--eval-seed", type=int, default=0, help="the evaluation's seeds start here")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    args.train, args.scenarios, args.max_turns = f"{args.game}:train", f"{args.game}:{args.split}", 8
    if args.quick:
        import tempfile

        args.keep = args.keep or Path(tempfile.mkdtemp(prefix="game-rl-"))
        args.steps, args.k, args.groups, args.group_size, args.resample = 1, 0, 1, 2, 0
        args.scenarios, args.seeds = "negotiation-hackathon-prize", "0"
    if args.keep is None:
        raise SystemExit("--keep RUN is needed (or --quick)")
    if args.split == "test" and not args.quick:
        guard_test_once(args.keep, settings_of(args), ROWS, args.final)
    seeds = [int(s) for s in args.seeds.split(",")]
    run = args.keep
    stages_file = run / "stages.json"
    stages: dict[str, dict] = json.loads(stages_file.read_text()) if stages_file.is_file() else {}
    for seed in seeds:
        if f"grpo/seed{seed}" not in stages:
            run_stage(stages, stages_file, f"grpo/seed{seed}", lambda s=seed: train(run / "grpo" / f"seed{s}", args, s))
    evals: dict[str, dict] = {"base": {}, "grpo": {}}
    for name, seed, spec in (("base", None, BASE), *(("grpo", s, str(run / "grpo" / f"seed{s}")) for s in seeds)):
        evals[name][seed] = evaluate_kept(
            run,
            f"{args.split}/{name}/seed{'-' if seed is None else seed}",
            lambda done, spec=spec: evaluate(spec, args, done),
        )
    print_table(evals, stages, args)


if __name__ == "__main__":
    main()
