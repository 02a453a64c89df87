"""Game RL: does episode GRPO on a game's exact outcome raise SmolLM2-135M's win rate in one role, against rule
players, on held-out instances?

    python benchmarks/game_rl.py --keep RUN [--game negotiation-game] [--role proposer] [--steps 6] [--k 4]
    python benchmarks/game_rl.py --quick                   # 1 step of 1 group x 2, one held-out instance (smoke)

Rows, each evaluated into ``RUN/evals/<row>.json`` (reused on a rerun): ``base`` (the embedded model in the
role) and ``grpo`` (episode GRPO from the base model with a new LoRA, the policy in every seat of ``--role``,
``rule-player`` in the others, reward: the game's goal from ``--evaluator verifiable``). Evaluation: every
``GAME:test`` instance, greedy (seed S) and ``--k`` episodes sampled at the training temperature (seeds
S+1..S+k), the same for both rows, so they are compared paired. The table: win rate (the judge's ``success``)
with a Wilson 95% interval, mean goal, and the paired difference in goal from base with a 95% bootstrap interval
over (instance, seed) pairs. Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from _common import machine_line
from _stages import evaluate_kept, paired_interval, run_stage
from episode_rl import play

from sotopia_env.episodes.game_report import wilson

ROWS = ("base", "grpo")
BASE = "smollm2-135m"


def evaluate(spec: str, args: argparse.Namespace, done: list[dict]) -> list[dict]:
    """The held-out games, one row each (instance, seed, greedy, goal, success); ``done`` rows are kept."""
    rows = list(done)
    for greedy, wanted in ((True, [args.seed]), (False, [args.seed + 1 + i for i in range(args.k)])):
        seeds = [s for s in wanted if not any(r["greedy"] == greedy and r["seed"] == s for r in done)]
        if not seeds:
            continue
        temperature = 0.0 if greedy else args.temperature
        for (instance, seed), e in play(spec, args, args.test, seeds, temperature, **learner(args)):
            row = {"instance": instance, "seed": seed, "greedy": greedy}
            if e.log is not None and e.reward.value is not None:
                row |= {"goal": e.reward.value, "success": float(bool(e.reward.success)), "turns": len(e.log.turns)}
            rows.append(row)
    return rows


def learner(args: argparse.Namespace) -> dict:
    return {"role": args.role, "partner": "rule-player", "evaluator": "verifiable"}


def train(out: Path, args: argparse.Namespace) -> dict:
    from sotopia_env.training.episode_grpo import EpisodeGRPOConfig, train_episode_grpo

    config = EpisodeGRPOConfig(
        base_model=BASE, output_dir=str(out), scenarios=args.train, max_steps=args.steps, learning_rate=args.lr,
        temperature=args.temperature, max_completion_length=args.max_new_tokens, group_size=args.group_size,
        groups_per_step=args.groups, max_resample_groups=args.resample, save_steps=1, progress=False, seed=args.seed,
        **learner(args),
    )  # fmt: skip
    result = train_episode_grpo(config)
    rewards = [None if r is None else round(r, 2) for r in result.rewards]
    return {"note": f"{result.steps} steps, train rewards {rewards}", "zero_std_share": result.zero_std_share}


def cells(rows: list[dict], greedy: bool) -> tuple[str, str]:
    rated = [r for r in rows if "goal" in r and r["greedy"] == greedy]
    if not rated:
        return "-", "-"
    wins = int(sum(r["success"] for r in rated))
    low, high = wilson(wins, len(rated))
    goal = statistics.fmean(r["goal"] for r in rated)
    return f"{wins}/{len(rated)} = {wins / len(rated):.2f} [{low:.2f}, {high:.2f}]", f"{goal:.2f}"


def print_table(evals: dict[str, list[dict]], stages: dict[str, dict], args: argparse.Namespace) -> None:
    print(f"### Game RL: {args.role} in {args.test}, against rule players, paired\n")
    print("| row | won, greedy [Wilson 95%] | won, sampled [Wilson 95%] | goal, sampled | vs base, sampled [95%] | "
          "unrated | train time | peak RSS |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, rows in evals.items():
        greedy_won, _ = cells(rows, True)
        sampled_won, goal = cells(rows, False)
        diff = "-"
        if name != "base" and "base" in evals:
            mean, low, high = paired_interval(rows, evals["base"], greedy=False, unit="episode")
            diff = "-" if mean != mean else f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]"
        stage = stages.get(name, {})
        unrated = sum("goal" not in r for r in rows)
        seconds, rss = stage.get("seconds"), stage.get("peak_rss_mb")
        print(
            f"| {name} | {greedy_won} | {sampled_won} | {goal} | {diff} | {unrated} | "
            f"{'-' if seconds is None else f'{seconds:.0f} s'} | {'-' if rss is None else f'{rss:.0f} MiB'} |"
        )
    print()
    for name, stage in stages.items():
        print(f"- {name}: {stage['note']}")
    print(
        f"\nSettings: {args.steps} GRPO steps of {args.groups} x {args.group_size} at lr {args.lr}, temperature "
        f"{args.temperature}, {args.max_new_tokens} tokens a move, starts {args.train}; {machine_line()}"
    )


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
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    args.train, args.test, args.max_turns = f"{args.game}:train", f"{args.game}:test", 8
    args.eval_seed = args.seed  # what episode_rl.play seeds the rollout settings with
    if args.quick:
        import tempfile

        args.keep = args.keep or Path(tempfile.mkdtemp(prefix="game-rl-"))
        args.steps, args.k, args.groups, args.group_size, args.resample = 1, 0, 1, 2, 0
        args.test = "negotiation-hackathon-prize"
    if args.keep is None:
        raise SystemExit("--keep RUN is needed (or --quick)")
    run = args.keep
    (run / "evals").mkdir(parents=True, exist_ok=True)
    stages_file = run / "stages.json"
    stages: dict[str, dict] = json.loads(stages_file.read_text()) if stages_file.is_file() else {}
    if "grpo" not in stages:
        run_stage(stages, stages_file, "grpo", lambda: train(run / "grpo", args))
    evals = {
        name: evaluate_kept(run, name, lambda done, spec=spec: evaluate(spec, args, done))
        for name, spec in (("base", BASE), ("grpo", str(run / "grpo")))
    }
    print_table(evals, stages, args)


if __name__ == "__main__":
    main()
