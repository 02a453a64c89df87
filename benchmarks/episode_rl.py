"""Episode RL: does GRPO on whole episodes make SmolLM2-135M better at the verifiable scenarios?

    python benchmarks/episode_rl.py [--steps 10] [--group-size 8] [--max-turns 6] [--bc-epochs 4] [--json out.json]

1. Before: the embedded SmolLM2-135M-Instruct plays seat 1 of every held-out ``verifiable:test`` instance
   against ``rule-partner`` (greedy, constrained actions, ``--max-turns`` turns); the ``verifiable`` judge
   scores each episode exactly.
2. BC warm-start (``--bc-epochs`` at ``--bc-lr``, 0 epochs to skip): ``sotopia_env.training.experts:VerifiableExpert``
   plays every ``verifiable:train`` instance against the rule partner; its turns in the episodes it won become SFT
   examples (the prompts ``LLMAgent`` sends, replayed by ``training.dataset``), and a LoRA is trained on them. The base
   model scores 0 on every instance, so without it every GRPO group has equal rewards and no signal.
3. GRPO on whole episodes (``training.episode_grpo``, task ``episodes``): ``--steps`` steps, each one group of
   ``--group-size`` episodes from one ``verifiable:train`` start of ``--train-kinds`` (default bargaining and
   scheduling: persuasion groups never hold a win), different sampling seeds, continuing the BC adapter.
4. After each stage: the policy plays the same held-out instances the same way.

Reported before and after, with 95% t-intervals over episodes: mean verifiable goal (0-10), success rate,
mean turns, and the share of the policy's turns that were invalid actions. Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path


def evaluate(spec: str, max_turns: int, max_new_tokens: int, seed: int) -> dict:
    """Every ``verifiable:test`` instance once, greedy, against the rule partner: per-episode figures."""
    from dataclasses import replace

    from sotopia_env.backends.local import LocalBackend
    from sotopia_env.training.episode_grpo import make_rollout, play_many
    from sotopia_env.training.grpo import GRPOStageConfig

    config = GRPOStageConfig(
        task="episodes", scenarios="verifiable:test", max_turns=max_turns, max_completion_length=max_new_tokens,
        seed=seed,
    )  # fmt: skip
    rollout = make_rollout(config, spec)
    rollout.settings = replace(rollout.settings, temperature=0.0)
    backend = LocalBackend.from_spec(spec, max_batch_size=len(rollout.setups))
    episodes = asyncio.run(play_many(rollout, backend, [(s, seed) for s in rollout.setups], backend.tokenizer))
    backend.close()
    rows = []
    for e in episodes:
        if e.log is None or e.log.rating is None or not e.log.rating.rated:
            rows.append(None)
            continue
        learner = e.log.setup.agent_names[0]
        mine = [t for t in e.log.turns if t.agent == learner]
        rows.append(
            {
                "kind": e.log.setup.scenario.verifiable.kind,
                "goal": e.log.rating.reward(learner, "goal"),
                "success": float(bool(e.log.rating.ratings[learner].success)),
                "turns": float(len(e.log.turns)),
                "invalid": sum(t.action.error is not None for t in mine) / max(1, len(mine)),
            }
        )
    return {"episodes": len(rows), "unrated": sum(r is None for r in rows), "rows": [r for r in rows if r]}


def bc_warm_start(out: Path, max_turns: int, epochs: float, lr: float, seed: int):
    """Expert demonstrations on the train instances, then a LoRA SFT on them: the ``TrainResult`` and the
    number of demonstration episodes kept."""
    from sotopia_env.agents.rule_partners import RulePartner
    from sotopia_env.env import EnvConfig
    from sotopia_env.episodes.runner import play
    from sotopia_env.training.dataset import build_dataset, min_goal, played_by
    from sotopia_env.training.episode_grpo import make_rollout
    from sotopia_env.training.experts import VerifiableExpert
    from sotopia_env.training.grpo import GRPOStageConfig
    from sotopia_env.training.trainer import TrainConfig, train
    from sotopia_env.verifiable import VerifiableJudge

    expert = "sotopia_env.training.experts:VerifiableExpert"
    setups = make_rollout(GRPOStageConfig(task="episodes", scenarios="verifiable:train", seed=seed), expert).setups
    env = EnvConfig(max_turns=max_turns)

    async def demonstrations():
        return await asyncio.gather(
            *(
                play(
                    s, [VerifiableExpert(), RulePartner()], VerifiableJudge(), env, [expert, "rule-partner"], seed=seed
                )
                for s in setups
            )
        )

    logs = asyncio.run(demonstrations())
    dataset, stats = build_dataset(logs, [played_by(expert), min_goal(1)])
    config = TrainConfig(
        base_model="smollm2-135m", output_dir=str(out), lora_r=8, lora_alpha=32, learning_rate=lr,
        num_epochs=epochs, batch_size=8, max_length=1024, save_steps=1000, seed=seed, progress=False,
    )  # fmt: skip
    return train(dataset, config), stats.samples_kept, len(logs)


def train_starts(kinds: str) -> str:
    """The GRPO groups' scenarios: ``verifiable:train``, or the ids of its instances of ``kinds`` (comma list)."""
    from sotopia_env.library import load_library

    if kinds == "all":
        return "verifiable:train"
    wanted = {k.strip() for k in kinds.split(",") if k.strip()}
    chosen = [s.id for s in load_library().select("verifiable:train") if s.verifiable.kind in wanted]
    if not chosen:
        raise SystemExit(f"--train-kinds {kinds!r}: no verifiable:train instance of those kinds")
    return ",".join(sorted(chosen))


def bc_stage(steps: int) -> str:
    """The BC row's name; ``--evals-from`` finds an earlier run's BC row by it."""
    return f"+ BC warm-start ({steps} SFT steps)"


def cell(rows: list[dict], key: str, scale: float = 1.0) -> str:
    from sotopia_env.episodes.report import t_interval

    c = t_interval([r[key] * scale for r in rows])
    return f"{c.mean:.2f} [{c.low:.2f}, {c.high:.2f}]"


def by_kind(rows: list[dict]) -> str:
    """Mean goal per scenario kind ("-" for rows from before ``kind`` was recorded)."""
    goals: dict[str, list[float]] = {}
    for r in rows:
        if "kind" in r:
            goals.setdefault(r["kind"], []).append(r["goal"])
    return ", ".join(f"{k} {sum(g) / len(g):.2f}" for k, g in sorted(goals.items())) or "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature of the GRPO rollouts")
    parser.add_argument("--bc-epochs", type=float, default=4.0, help="BC warm-start epochs (0: no warm-start)")
    parser.add_argument("--bc-lr", type=float, default=1e-3, help="BC warm-start learning rate (linear decay)")
    parser.add_argument(
        "--train-kinds", default="bargaining,scheduling",
        help="the kinds whose verifiable:train instances start the GRPO groups (all: every kind)",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="train into this folder (kept; reruns resume)")
    parser.add_argument(
        "--bc-from", type=Path, help="a BC warm-start folder an earlier run trained (--keep DIR: DIR/bc): GRPO only"
    )
    parser.add_argument(
        "--evals-from", type=Path,
        help="that run's --json: its base and BC rows are reused (greedy, same seed: the same episodes)",
    )  # fmt: skip
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from sotopia_env.training.grpo import GRPOStageConfig, train_grpo

    t0 = time.perf_counter()
    earlier = json.loads(args.evals_from.read_text()) if args.evals_from else {}
    before = earlier.get("base") or evaluate("smollm2-135m", args.max_turns, args.max_new_tokens, args.seed)
    t_before = time.perf_counter() - t0
    print(f"before ({t_before:.0f} s): {json.dumps(before['rows'])}", file=sys.stderr, flush=True)
    stages = [("base", before)]
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        policy, t_bc, bc_note = "smollm2-135m", 0.0, "no BC warm-start"
        if args.bc_from:
            bc = json.loads((args.bc_from / "train_result.json").read_text())
            policy, t_bc = str(args.bc_from), bc["seconds"]
            bc_note = f"BC warm-start from {args.bc_from} (an earlier run): {bc['steps']} SFT steps, {t_bc:.0f} s then"
            name = bc_stage(bc["steps"])
            stages.append((name, earlier.get(name) or evaluate(policy, args.max_turns, args.max_new_tokens, args.seed)))
        elif args.bc_epochs > 0:
            t1 = time.perf_counter()
            bc, kept, played = bc_warm_start(work / "bc", args.max_turns, args.bc_epochs, args.bc_lr, args.seed)
            t_bc = time.perf_counter() - t1
            policy = bc.model_dir
            bc_note = (
                f"BC warm-start: {bc.examples} turns of {kept} won expert episodes (of {played}), "
                f"{bc.steps} SFT steps, {t_bc:.0f} s"
            )
            after_bc = evaluate(policy, args.max_turns, args.max_new_tokens, args.seed)
            print(f"after BC: {json.dumps(after_bc['rows'])}", file=sys.stderr, flush=True)
            stages.append((bc_stage(bc.steps), after_bc))
        config = GRPOStageConfig(
            task="episodes", base_model="smollm2-135m", max_steps=args.steps, scenarios=train_starts(args.train_kinds),
            group_size=args.group_size, max_turns=args.max_turns, max_completion_length=args.max_new_tokens,
            learning_rate=args.lr, beta=0.0, temperature=args.temperature, batch_size=4, progress=False,
            seed=args.seed, save_steps=1, output_dir=str(work / "rl"),
        ).starting_from(policy)  # fmt: skip
        t1 = time.perf_counter()
        result = train_grpo(config)
        t_train = time.perf_counter() - t1
        after = evaluate(result.model_dir, args.max_turns, args.max_new_tokens, args.seed)
        stages.append((f"+ episode GRPO, {result.steps} steps", after))
    total = time.perf_counter() - t0
    from _common import machine_line

    print(f"## Episode GRPO, SmolLM2-135M vs rule-partner, verifiable:test ({before['episodes']} instances)\n")
    print("| policy | mean goal (0-10) | success rate | mean turns | invalid-action share | unrated |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, run in stages:
        rows = run["rows"]
        print(
            f"| {name} | {cell(rows, 'goal')} | {cell(rows, 'success')} | {cell(rows, 'turns')} | "
            f"{cell(rows, 'invalid')} | {run['unrated']} |"
        )
    print("\nMean goal per kind: " + "; ".join(f"{name}: {by_kind(run['rows'])}" for name, run in stages))
    print(
        f"\n{bc_note}; GRPO: {result.steps} steps x {args.group_size} episodes ({args.max_turns} turns max, "
        f"temperature {args.temperature}, lr {args.lr}, starts: {args.train_kinds} train instances), "
        f"train rewards per step {[None if r is None else round(r, 2) for r in result.rewards]}, "
        f"{result.unscorable_batches} groups without signal, {result.none_rewards} unrated episodes; "
        f"eval before {t_before:.0f} s, GRPO training {t_train:.0f} s; training (BC + GRPO) {t_bc + t_train:.0f} s; "
        f"total {total:.0f} s; {machine_line()}"
    )
    if args.json:
        args.json.write_text(json.dumps({name: run for name, run in stages} | {"train": result.log}, indent=2))


if __name__ == "__main__":
    main()
