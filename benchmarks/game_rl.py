"""Game RL: does episode GRPO on a game's exact outcome raise SmolLM2-135M's win rate in one role, against rule
players, on held-out instances?

    python benchmarks/game_rl.py --keep RUN [--game negotiation-game] [--role proposer] --split dev --seeds 0,1,2
    python benchmarks/game_rl.py --keep RUN ... --split test --final      # once, with the settings chosen on dev
    python benchmarks/game_rl.py --quick          # base, bc (1 step, 1 game each), grpo (1 step of 1 x 2); smoke

The protocol of ``episode_rl.py``: every choice (steps, learning rate, groups) is made on ``--split dev``
(``GAME:dev``); ``--split test`` (``GAME:test``) runs once, with ``--final``, its settings, training seeds, row
set and code commit kept before it plays: a test run under other settings, seeds or rows is refused, one at another
commit may only reprint, and its table is printed once every seed is in. Rows (``--rows``), the policy in every
seat of ``--role``, ``rule-player`` in the others:

- ``base``: the embedded model (no training seed);
- ``bc``: a LoRA SFT on the role's turns in the games its rule player won, rule players in every seat of the
  train instances (``--bc-games`` games each, the same for every training seed): the games' expert pattern, and a
  start from which GRPO's groups are not all zeros (from ``base`` they were: its proposer almost never won);
- ``grpo``: episode GRPO continuing ``bc``, reward: the game's goal from ``--evaluator verifiable``;
- ``grpo-shuffled``: the control that can fail, GRPO from ``bc`` with each group's rewards permuted among its
  episodes (the same compute, no signal).

Each trained row once per training seed in ``--seeds``. Evaluation: every instance of the split, greedy (seed S)
and ``--k`` episodes sampled at the training temperature (seeds S+1..S+k), the same for every row, so rows are
paired by (instance, evaluation seed). Rule players are stochastic, so a game's instance alone is not the unit:
intervals are a nested bootstrap (training seeds, then (instance, evaluation seed) episodes within each) beside a
t-interval over the training seeds' mean differences. The table: win rate (the judge's ``success``) with a Wilson
95% interval counted in games (one per episode, however many seats of the role the policy plays), mean goal, the
sampled goal per training seed, and the paired difference in goal from the row's start and from base. Not a test:
run it by hand. A run folder resumes: ``RUN/stages.json``, ``RUN/<row>/seed<S>``, ``RUN/evals/<split>/<row>/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from pathlib import Path

from _common import machine_line
from _stages import INTERVALS, both_intervals, evaluate_kept, fmt_diff, guard_test_once, run_stage, seeds_missing
from episode_rl import play, rollout_config, sft

from sotopia_env.agents.loading import RULE_PLAYER
from sotopia_env.episodes.game_report import wilson

ROWS = ("base", "bc", "grpo", "grpo-shuffled")
START = {"bc": "base", "grpo": "bc", "grpo-shuffled": "bc"}  # the stage each trained row continues
BASE = "smollm2-135m"
BC_MAX_LENGTH = 1536  # a game's prompt reaches ~1,400 tokens by its last rounds (1,024 would cut completions off)


def evaluate(spec: str, args: argparse.Namespace, done: list[dict]) -> list[dict]:
    """The held-out games, one row each (instance, seed, greedy, goal, success); ``done`` rows are kept."""
    rows = list(done)
    for greedy, wanted in ((True, [args.eval_seed]), (False, [args.eval_seed + 1 + i for i in range(args.k)])):
        seeds = [s for s in wanted if not any(r["greedy"] == greedy and r["seed"] == s for r in done)]
        if not seeds:
            continue
        if getattr(args, "frozen", None):
            raise SystemExit(f"{spec} has test games still to play, and {args.frozen}")
        temperature = 0.0 if greedy else args.temperature
        for (instance, seed), e in play(spec, args, args.scenarios, seeds, temperature, **learner(args)):
            row = {"instance": instance, "seed": seed, "greedy": greedy}
            if e.log is not None and e.reward.value is not None:
                row |= {"goal": e.reward.value, "success": float(bool(e.reward.success)), "turns": len(e.log.turns)}
            rows.append(row)
    return rows


def learner(args: argparse.Namespace) -> dict:
    return {"role": args.role, "partner": RULE_PLAYER, "evaluator": "verifiable"}


def train_bc(out: Path, args: argparse.Namespace, seed: int) -> dict:
    """Rule players in every seat of the train instances (evaluation seeds ``0..--bc-games-1``: the same games for
    every training seed); a LoRA SFT on the ``--role`` seats' turns of the games that seat won."""
    from sotopia_env.agents.game_players import RulePlayer
    from sotopia_env.episodes.runner import play as play_episode
    from sotopia_env.training.dataset import build_dataset
    from sotopia_env.training.episode_grpo import make_rollout

    rollout = make_rollout(rollout_config(args, args.train, **learner(args)), BASE)
    seats = {setup.scenario.id: set(rollout.learner_seats(setup)) for setup in rollout.setups}

    async def games():
        return [
            await play_episode(
                setup,
                [RulePlayer() for _ in setup.agent_names],
                rollout.evaluator,
                rollout.env,
                [RULE_PLAYER] * len(setup.agent_names),
                seed=game,
            )
            for setup in rollout.setups
            for game in range(args.bc_games)
        ]

    def role_seats_that_won(samples):
        return [s for s in samples if s.seat in seats[s.scenario_id] and s.log.rating.ratings[s.agent].success]

    logs = asyncio.run(games())
    dataset, stats = build_dataset(logs, [role_seats_that_won], prompt=rollout.prompt)
    result = sft(out, dataset, args, seed, max_length=BC_MAX_LENGTH)
    return {"note": f"{result.examples} turns of {stats.samples_kept} won {args.role} seats in {len(logs)} rule "
                    f"games, {result.steps} steps"}  # fmt: skip


def train_grpo(out: Path, start: Path, args: argparse.Namespace, seed: int, shuffled: bool) -> dict:
    """Episode GRPO continuing ``start`` (the BC adapter) in the ``--role`` seats; ``shuffled``: the control with
    each group's rewards permuted among its episodes (the same compute, no signal)."""
    from sotopia_env.training.episode_grpo import train_episode_grpo

    config = rollout_config(
        args, args.train, output_dir=str(out), max_steps=args.steps, learning_rate=args.lr, group_size=args.group_size,
        groups_per_step=args.groups, max_resample_groups=args.resample, save_steps=1, progress=False, seed=seed,
        shuffle_rewards=shuffled, gradient_checkpointing=args.checkpointing, **learner(args),
    ).starting_from(str(start))  # fmt: skip
    result = train_episode_grpo(config)
    rewards = [None if r is None else round(r, 2) for r in result.rewards]
    return {"note": f"{result.steps} steps, train rewards {rewards}", "zero_std_share": result.zero_std_share}


def won_cell(rows: list[dict], greedy: bool) -> str:
    """Games won of the rated games (each row is one game, whatever the seats of the role), Wilson 95%."""
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
    print(
        "| row | split | won, greedy [games, Wilson 95%] | won, sampled [games, Wilson 95%] | goal, sampled "
        f"| sampled per seed | vs its start, sampled [{INTERVALS}] | vs base, sampled [{INTERVALS}] | unrated "
        "| train time | peak RSS |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, by_seed in evals.items():
        pooled = [r for rows in by_seed.values() for r in rows]
        per_seed = ", ".join(mean_goal({s: rows}, False) for s, rows in by_seed.items() if s is not None) or "-"
        diffs = [
            fmt_diff(both_intervals(goal_cells(by_seed, False), goal_cells(evals[ref], False)))
            if ref in evals else "-"
            for ref in (START.get(name), "base" if name != "base" else None)
        ]  # fmt: skip
        trained = [stages[f"{name}/seed{s}"] for s in by_seed if f"{name}/seed{s}" in stages]
        seconds = [t["seconds"] for t in trained]
        rss = [t["peak_rss_mb"] for t in trained]
        print(
            f"| {name} | {args.split} | {won_cell(pooled, True)} | {won_cell(pooled, False)} | "
            f"{mean_goal(by_seed, False)} | {per_seed} | {diffs[0]} | {diffs[1]} | "
            f"{sum('goal' not in r for r in pooled)} | {f'{statistics.fmean(seconds):.0f} s' if seconds else '-'} | "
            f"{f'{max(rss):.0f} MiB' if rss else '-'} |"
        )
    print()
    for name, stage in stages.items():
        print(f"- {name}: {stage['note']}")
    print(
        f"\nSettings: BC on the rule players' won {args.role} seats of {args.bc_games} games per train instance, "
        f"{args.bc_epochs} epochs at lr {args.bc_lr}; then {args.steps} GRPO steps of {args.groups} x "
        f"{args.group_size} at lr {args.lr}, temperature {args.temperature}, {args.max_new_tokens} tokens a move, "
        f"starts {args.train}, training seeds {args.seeds}; {machine_line()}"
    )


def settings_of(args: argparse.Namespace) -> dict:
    """What the rows depend on: the test guard keeps them."""
    keys = ("game", "role", "bc_games", "bc_epochs", "bc_lr", "steps", "lr", "k", "groups", "group_size", "resample",
            "max_new_tokens", "temperature", "seeds", "eval_seed")  # fmt: skip
    return {k: getattr(args, k) for k in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="the run folder (stages and evaluations are kept)")
    parser.add_argument("--game", default="negotiation-game", help="the game's tag")
    parser.add_argument("--role", default="proposer", help="the role (or team) the policy plays")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"of {', '.join(ROWS)}")
    parser.add_argument("--bc-games", type=int, default=8, help="rule games per train instance BC learns from")
    parser.add_argument("--bc-epochs", type=float, default=2.0)
    parser.add_argument("--bc-lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--k", type=int, default=8, help="sampled evaluation episodes per instance")
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--resample", type=int, default=1, help="extra groups a step may play for signal")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--batch", type=int, default=32, help="the local backend's batch size")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--split", choices=("dev", "test"), default="dev", help="where the rows are evaluated")
    parser.add_argument("--final", action="store_true", help="needed with --split test (which runs once)")
    parser.add_argument("--seeds", default="0,1,2", help="training seeds: grpo is trained once each")
    parser.add_argument("--eval-seed", type=int, default=0, help="the evaluation's seeds start here")
    parser.add_argument(
        "--no-checkpointing",
        dest="checkpointing",
        action="store_false",
        help="keep activations in training (faster steps, more memory)",
    )
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    args.train, args.scenarios, args.max_turns = f"{args.game}:train", f"{args.game}:{args.split}", 8
    if args.quick:
        import tempfile

        args.keep = args.keep or Path(tempfile.mkdtemp(prefix="game-rl-"))
        args.steps, args.k, args.groups, args.group_size, args.resample = 1, 0, 1, 2, 0
        args.bc_games, args.bc_epochs, args.rows = 1, 0.5, "base,bc,grpo"
        args.scenarios, args.seeds = "negotiation-hackathon-prize", "0"
    if args.keep is None:
        raise SystemExit("--keep RUN is needed (or --quick)")
    seeds, rows = [int(s) for s in args.seeds.split(",")], args.rows.split(",")
    if unknown := set(rows) - set(ROWS):
        raise SystemExit(f"--rows: unknown {sorted(unknown)} (rows: {', '.join(ROWS)})")
    args.frozen = None
    if args.split == "test" and not args.quick:
        args.frozen = guard_test_once(args.keep, settings_of(args), rows, args.final, seeds)
    run = args.keep
    stages_file = run / "stages.json"
    stages: dict[str, dict] = json.loads(stages_file.read_text()) if stages_file.is_file() else {}
    trainers = {
        "bc": lambda out, s: train_bc(out, args, s),
        "grpo": lambda out, s: train_grpo(out, run / "bc" / f"seed{s}", args, s, shuffled=False),
        "grpo-shuffled": lambda out, s: train_grpo(out, run / "bc" / f"seed{s}", args, s, shuffled=True),
    }
    trained = [n for n in ROWS[1:] if n in rows or any(START.get(r) == n for r in rows)]  # bc first
    for name in trained if not args.frozen else ():  # a frozen test record reprints: nothing is trained
        for seed in seeds:
            out = run / name / f"seed{seed}"
            run_stage(stages, stages_file, f"{name}/seed{seed}", out, lambda n=name, s=seed, o=out: trainers[n](o, s))
    evals: dict[str, dict] = {}
    for name in rows:
        for seed in [None] if name == "base" else seeds:
            spec = BASE if seed is None else str(run / name / f"seed{seed}")
            evals.setdefault(name, {})[seed] = evaluate_kept(
                run,
                f"{args.split}/{name}/seed{'-' if seed is None else seed}",
                lambda done, spec=spec: evaluate(spec, args, done),
            )
    if args.split == "test" and (missing := seeds_missing(evals, seeds)):
        raise SystemExit(f"no test table until every seed is in: missing {', '.join(missing)}")
    print_table(evals, stages, args)


if __name__ == "__main__":
    main()
