"""Episode RL: does GRPO on whole episodes make SmolLM2-135M better at the verifiable scenarios than its BC start?

    python benchmarks/episode_rl.py --keep RUN [--rows base,bc,sr,grpo,grpo-lr0,grpo-dense] [--steps 8] [--k 4]

Rows (each trained into ``RUN/<row>`` and evaluated into ``RUN/evals/<row>.json``; a rerun reuses what is there,
episode by episode, so a run cut short resumes where it stopped, and a larger ``--k`` only plays the new seeds):

- ``base``: the embedded SmolLM2-135M-Instruct.
- ``bc``: ``VerifiableExpert`` plays every ``verifiable:train`` instance against ``rule-partner``; its turns in the
  episodes it won become SFT examples (the prompts ``LLMAgent`` sends), and a LoRA is trained on them.
- ``sr``: BC + one SR round, the SOTOPIA-pi recipe: the BC policy plays every train instance ``--sr-samples``
  times (sampled at ``--temperature``) against the rule partner; the episodes are filtered as the SR stage
  filters them (the best episode per scenario, goal at least 1) and the BC adapter is trained further on them.
- ``grpo``: episode GRPO (``training.episode_grpo``, its defaults: 4 groups of 4 episodes a step, kinds mixed,
  dynamic sampling, batch-scaled advantages) for ``--steps`` steps, continuing the BC adapter.
- ``grpo-lr0``: the same with learning rate 0: it plays and scores like ``grpo`` and changes no weight (the
  control: its interval must cover 0).
- ``grpo-dense``: ``grpo`` with ``dense_reward: 2`` (partial credit, success dominating).

Evaluation: every ``verifiable:test`` instance against the rule partner, greedy (seed S) and ``--k`` episodes
sampled at the training temperature (seeds S+1..S+k); the same instances and seeds for every row, so rows are
compared paired (``--train-seed`` trains the GRPO rows with another seed and evaluates them on the same ones).
The table: mean goal and success per kind (sampled), the paired difference from BC in mean goal with a 95% paired
bootstrap interval over instances (sampled, and greedy), the zero-variance group share and mean rollout-vs-train
``approx_kl`` of GRPO rows, each stage's wall time and peak RSS. Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROWS = ("base", "bc", "sr", "grpo", "grpo-lr0", "grpo-dense")
EXPERT = "sotopia_env.training.experts:VerifiableExpert"


def rollout_config(args: argparse.Namespace, scenarios: str, **kw):
    from sotopia_env.training.episode_grpo import EpisodeGRPOConfig

    settings = {"seed": args.seed, **kw}
    return EpisodeGRPOConfig(
        scenarios=scenarios, max_turns=args.max_turns, max_completion_length=args.max_new_tokens,
        temperature=args.temperature, **settings,
    )  # fmt: skip


def play(spec: str, args: argparse.Namespace, scenarios: str, seeds: list[int], temperature: float, **kw) -> list:
    """Every instance of ``scenarios`` once per seed, the policy ``spec`` against the rule partner (or as ``kw``
    set the rollout: ``role``, ``partner``): a list of ((instance id, seed), episode)."""
    from dataclasses import replace

    from sotopia_env.backends.local import LocalBackend
    from sotopia_env.training.episode_grpo import make_rollout
    from sotopia_env.training.episode_rollouts import play_many

    rollout = make_rollout(rollout_config(args, scenarios, **kw), spec)
    rollout.settings = replace(rollout.settings, temperature=temperature)
    starts = [(s, seed) for s in rollout.setups for seed in seeds]
    backend = LocalBackend.from_spec(spec, max_batch_size=args.batch)
    try:
        episodes = asyncio.run(play_many(rollout, backend, starts))
    finally:
        backend.close()
    return [((setup.scenario.id, seed), e) for (setup, seed), e in zip(starts, episodes, strict=True)]


def evaluate(spec: str, args: argparse.Namespace, done: list[dict]) -> list[dict]:
    """The held-out episodes, one row each: instance, seed, greedy or not, kind, goal, success, turns, invalid.
    Those in ``done`` (an earlier run's, by greedy and seed) are kept, not played again."""
    rows = list(done)
    for greedy, wanted in ((True, [args.seed]), (False, [args.seed + 1 + i for i in range(args.k)])):
        seeds = [s for s in wanted if not any(r["greedy"] == greedy and r.get("seed") == s for r in done)]
        if not seeds:
            continue
        for (instance, seed), e in play(spec, args, "verifiable:test", seeds, 0.0 if greedy else args.temperature):
            if e.log is None or e.reward.value is None:
                rows.append({"instance": instance, "seed": seed, "greedy": greedy, "unrated": True})
                continue
            learner = e.log.setup.agent_names[0]
            mine = [t for t in e.log.turns if t.agent == learner]
            rows.append(
                {
                    "instance": e.log.setup.scenario.id,
                    "seed": e.log.seed,
                    "greedy": greedy,
                    "kind": e.log.setup.scenario.verifiable.kind,
                    "goal": e.reward.value,
                    "success": float(bool(e.reward.success)),
                    "turns": len(e.log.turns),
                    "invalid": sum(t.action.error is not None for t in mine) / max(1, len(mine)),
                }
            )
    return rows


# -- the stages -----------------------------------------------------------------------------------------------------


def train_bc(out: Path, args: argparse.Namespace) -> dict:
    """Expert demonstrations on the train instances, then a LoRA SFT on the won ones."""
    from sotopia_env.agents.rule_partners import RulePartner
    from sotopia_env.episodes.runner import play as play_episode
    from sotopia_env.evaluators import VerifiableJudge
    from sotopia_env.training.dataset import build_dataset, min_goal, played_by
    from sotopia_env.training.episode_grpo import make_rollout
    from sotopia_env.training.experts import VerifiableExpert
    from sotopia_env.training.sft import SFTTrainConfig, train_sft

    rollout = make_rollout(rollout_config(args, "verifiable:train"), EXPERT)

    async def demonstrations():
        return await asyncio.gather(
            *(
                play_episode(
                    s,
                    [VerifiableExpert(), RulePartner()],
                    VerifiableJudge(),
                    rollout.env,
                    [EXPERT, "rule-partner"],
                    seed=args.seed,
                )  # fmt: skip
                for s in rollout.setups
            )
        )

    logs = asyncio.run(demonstrations())
    dataset, _ = build_dataset(logs, [played_by(EXPERT), min_goal(1)])
    config = SFTTrainConfig(
        base_model="smollm2-135m", output_dir=str(out), lora_r=8, lora_alpha=32, learning_rate=args.bc_lr,
        num_epochs=args.bc_epochs, batch_size=8, max_length=1024, save_steps=1000, seed=args.seed, progress=False,
    )  # fmt: skip
    result = train_sft(dataset, config)
    won = sum(1 for log in logs if log.rating and log.rating.ratings[log.setup.agent_names[0]].success)
    return {"note": f"{result.examples} turns of {won} won expert episodes (of {len(logs)}), {result.steps} steps"}


def train_sr(out: Path, bc: Path, args: argparse.Namespace) -> dict:
    """One SR round from the BC policy: its own sampled episodes on the train instances, filtered as the SR
    stage filters (best per scenario and seat, goal at least 1), trained on from the BC adapter."""
    from sotopia_env.model_ref import read_model_ref
    from sotopia_env.training.dataset import build_dataset, min_goal, top1_per_scenario_role
    from sotopia_env.training.sft import SFTTrainConfig, train_sft

    seeds = [args.seed + 100 + i for i in range(args.sr_samples)]
    episodes = play(str(bc), args, "verifiable:train", seeds, args.temperature)
    logs = [e.log for _, e in episodes if e.log is not None]
    learner_seat = lambda samples: [s for s in samples if s.seat == 0]  # noqa: E731  (not the rule partner's)
    dataset, _ = build_dataset(logs, [learner_seat, top1_per_scenario_role, min_goal(1)])
    if len(dataset) == 0:
        return {"note": "no self-play episode passed the filters: the SR policy is the BC policy", "same_as": "bc"}
    base, adapter = read_model_ref(str(bc))
    config = SFTTrainConfig(
        base_model=base, init_adapter=adapter, output_dir=str(out), learning_rate=args.bc_lr / 2, num_epochs=2,
        batch_size=8, max_length=1024, save_steps=1000, seed=args.seed, progress=False,
    )  # fmt: skip
    result = train_sft(dataset, config)
    return {"note": f"{result.examples} turns of {len(logs)} self-play episodes, {result.steps} steps"}


def train_grpo(out: Path, bc: Path, args: argparse.Namespace, **overrides) -> dict:
    from sotopia_env.training.episode_grpo import train_episode_grpo

    settings = {
        "max_steps": args.steps, "learning_rate": args.lr, "num_iterations": args.iterations, "beta": args.beta,
        "save_steps": 1, "progress": False, "seed": args.seed if args.train_seed is None else args.train_seed,
        **overrides,
    }  # fmt: skip
    config = rollout_config(args, args.train_scenarios, output_dir=str(out), **settings).starting_from(str(bc))
    result = train_episode_grpo(config)
    log = result.log
    return {
        "note": f"{result.steps} steps, train rewards {[None if r is None else round(r, 2) for r in result.rewards]}",
        "zero_std_share": result.zero_std_share,
        "approx_kl": statistics.fmean(row["approx_kl"] for row in log) if log else None,
        "clipped": statistics.fmean(row["clipped"] for row in log) if log else None,
        "skipped_starts": sum(row["skipped_starts"] for row in log),
        "log": log,
    }


# -- the table ------------------------------------------------------------------------------------------------------


def paired_interval(
    rows: list[dict], bc: list[dict], greedy: bool, seed: int = 0, unit: str = "instance"
) -> tuple[float, float, float]:
    """Mean of (row - BC) goal per instance (over its seeds, paired by seed), and a 95% bootstrap interval over
    instances (2,000 resamples); ``unit="episode"`` resamples the (instance, seed) pairs instead."""

    def per_instance(data: list[dict]) -> dict[tuple[str, int], float]:
        return {(r["instance"], r["seed"]): r["goal"] for r in data if "goal" in r and r["greedy"] == greedy}

    mine, base = per_instance(rows), per_instance(bc)
    diffs: dict[object, list[float]] = {}
    for key in sorted(mine.keys() & base.keys()):  # sorted: the same resamples in every process
        diffs.setdefault(key[0] if unit == "instance" else key, []).append(mine[key] - base[key])
    values = [statistics.fmean(d) for d in diffs.values()]
    if not values:
        return float("nan"), float("nan"), float("nan")
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(2000))
    return statistics.fmean(values), means[49], means[1949]


def kind_cells(rows: list[dict]) -> str:
    """Mean goal / success rate per kind, over the sampled episodes (the greedy ones when there are none)."""
    sampled = any("goal" in r and not r["greedy"] for r in rows)
    by_kind: dict[str, list[dict]] = {}
    for r in rows:
        if "goal" in r and r["greedy"] != sampled:
            by_kind.setdefault(r["kind"], []).append(r)
    return "; ".join(
        f"{kind} {statistics.fmean(r['goal'] for r in rs):.2f} / {statistics.fmean(r['success'] for r in rs):.2f}"
        for kind, rs in sorted(by_kind.items())
    )


def print_table(evals: dict[str, list[dict]], stages: dict[str, dict], args: argparse.Namespace) -> None:
    from _common import machine_line

    print(f"## Episode RL on verifiable:test: 1 greedy + {args.k} sampled episodes per instance, paired\n")
    print(
        "| row | goal, greedy | goal, sampled | goal / success per kind | vs BC, sampled [95% paired] | "
        "vs BC, greedy [95%] | zero-var groups | approx_kl | stage time | peak RSS |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, rows in evals.items():
        means = []
        for greedy in (True, False):
            goals = [r["goal"] for r in rows if "goal" in r and r["greedy"] == greedy]
            means.append(f"{statistics.fmean(goals):.2f}" if goals else "-")
        stage = stages.get(name, {})
        diff = ["-", "-"]
        if "bc" in evals and name != "bc":
            for i, greedy in enumerate((False, True)):
                mean, low, high = paired_interval(rows, evals["bc"], greedy)
                diff[i] = "-" if mean != mean else f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]"
        zero = stage.get("zero_std_share")
        stage_cost = f"{stage['seconds']:.0f} s | {stage['peak_rss_mb']:.0f} MiB" if "seconds" in stage else "- | -"
        kl = stage.get("approx_kl")
        print(
            f"| {name} | {means[0]} | {means[1]} | {kind_cells(rows)} | {diff[0]} | {diff[1]} | "
            f"{'-' if zero is None else f'{zero:.2f}'} | {'-' if kl is None else f'{kl:.5f}'} | "
            f"{stage_cost} |"
        )
    print()
    for name, stage in stages.items():
        if stage.get("note"):
            print(f"- {name}: {stage['note']}")
    print(
        f"\nSettings: {args.steps} GRPO steps at lr {args.lr} ({args.iterations} optimiser steps each, beta "
        f"{args.beta}), temperature {args.temperature}, max {args.max_turns} turns, {args.max_new_tokens} tokens "
        f"a turn, starts {args.train_scenarios}; {machine_line()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, required=True, help="the run folder (stages and evaluations are kept)")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma list of {', '.join(ROWS)}")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--iterations", type=int, default=1, help="GRPO optimiser steps per batch of rollouts")
    parser.add_argument("--beta", type=float, default=0.0, help="GRPO's KL weight towards the BC adapter")
    parser.add_argument("--k", type=int, default=4, help="sampled evaluation episodes per instance (0: greedy only)")
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--bc-epochs", type=float, default=4.0)
    parser.add_argument("--bc-lr", type=float, default=1e-3)
    parser.add_argument("--sr-samples", type=int, default=2, help="SR self-play episodes per train instance")
    parser.add_argument("--train-scenarios", default="verifiable:train")
    parser.add_argument("--batch", type=int, default=32, help="the local backend's batch size")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="the evaluation's seeds start here (and training's)")
    parser.add_argument(
        "--train-seed", type=int, default=None, help="the GRPO rows' training seed, apart from the evaluation's"
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    if unknown := set(rows) - set(ROWS):
        raise SystemExit(f"--rows: unknown {sorted(unknown)}; choose from {', '.join(ROWS)}")
    run = args.keep
    (run / "evals").mkdir(parents=True, exist_ok=True)
    stages_file = run / "stages.json"
    stages: dict[str, dict] = json.loads(stages_file.read_text()) if stages_file.is_file() else {}
    trainers = {
        "bc": lambda: train_bc(run / "bc", args),
        "sr": lambda: train_sr(run / "sr", run / "bc", args),
        "grpo": lambda: train_grpo(run / "grpo", run / "bc", args),
        "grpo-lr0": lambda: train_grpo(run / "grpo-lr0", run / "bc", args, learning_rate=0.0),
        "grpo-dense": lambda: train_grpo(run / "grpo-dense", run / "bc", args, dense_reward=2.0),
    }
    evals: dict[str, list[dict]] = {}
    for name in rows:
        if name != "base" and name not in stages:
            if name != "bc" and "bc" not in stages:
                raise SystemExit(f"row {name!r} starts from BC: run the bc row first (--rows bc,{name})")
            run_stage(stages, stages_file, name, trainers[name])
        spec = "smollm2-135m" if name == "base" else str(run / stages[name].get("same_as", name))
        evals[name] = evaluate_kept(run, name, lambda done, spec=spec: evaluate(spec, args, done))
    print_table(evals, stages, args)


def run_stage(stages: dict[str, dict], stages_file: Path, name: str, trainer) -> None:
    """Train one stage (``trainer()`` returns its summary), add its wall time and peak RSS (and GPU memory),
    and keep every stage's summary in ``stages_file``."""
    import torch

    from sotopia_env.training.rss import peak_rss_mb, reset_peak_rss

    reset_peak_rss()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    stages[name] = trainer()
    stages[name].update(seconds=round(time.perf_counter() - t0, 1), peak_rss_mb=peak_rss_mb())
    if torch.cuda.is_available():
        stages[name]["note"] += f"; peak GPU memory {torch.cuda.max_memory_allocated() >> 20} MiB"
    stages_file.write_text(json.dumps(stages, indent=2))
    print(f"{name}: trained in {stages[name]['seconds']:.0f} s", file=sys.stderr, flush=True)


def evaluate_kept(run: Path, name: str, evaluate_rows) -> list[dict]:
    """``evaluate_rows(done)`` with the rows kept in ``RUN/evals/NAME.json`` (played again only where missing),
    and the new ones kept there."""
    cached = run / "evals" / f"{name}.json"
    done = json.loads(cached.read_text()) if cached.is_file() else []
    t0 = time.perf_counter()
    rows = evaluate_rows(done)
    if len(rows) > len(done):
        cached.write_text(json.dumps(rows, indent=2))
        print(f"{name}: evaluated in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return rows


if __name__ == "__main__":
    main()
