"""Learning signal of GRPO: does RL on Social IQa teach SmolLM2-135M the think/answer format, on held-out items?

    python benchmarks/rl_signal.py                 # 200 train / 100 held-out items of the shared sample
    python benchmarks/rl_signal.py --quick         # smoke: 16 train / 8 held-out items, 2 steps of each
    python benchmarks/rl_signal.py --social-turns-steps 0   # skip part 2

Part 1, ``socialiqa``:

1. ``../shared/data/social_iqa/sample.jsonl`` (``--data``) is shuffled with ``--seed`` and split into train and
   held-out items.
2. Before: the embedded SmolLM2-135M-Instruct answers the held-out items, unconstrained and greedy (the DeepEnlighten
   prompt of ``training.rewards.build_prompt``).
3. BC warm-start: a LoRA SFT (``training.sft.train_sft``) on format demonstrations built from the *train* items'
   gold answers, ``<think>QUESTION From what happened, "OPTION" fits best.</think><answer>(X) OPTION</answer>``.
   The base model never writes the tags, so every completion of a GRPO group would score the same and GRPO would
   get no signal; a warm-start like this is fair, and the table says it is there.
4. GRPO (``training.grpo.train_grpo``, task ``socialiqa``: the DeepEnlighten format +1/-1 and answer +2/-2/-3
   rewards) on the train items, continuing the BC adapter.
5. After each stage the same held-out evaluation: mean reward (format + answer, -4..3) with a normal-approximation
   95% interval, the format-valid rate and accuracy with Wilson 95% intervals.

Part 2, ``social_turns`` (SOTOPIA-RL's recipe on our env): scripted, model-free experts play the train scenarios
(rated by the rule-based evaluator), and GRPO runs ``--social-turns-steps`` steps on their per-turn prompts with
the embedded 135M model as the utterance judge. Its scores are noise at 135M: this shows the loop runs and what
the reward curve does, nothing more.

Not a test: run it by hand on a quiet machine (19 minutes on 2 quiet CPUs, 2026-12-01).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

import _common
from _common import ROOT, machine_line, print_table

_ = _common
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "social_iqa" / "sample.jsonl"


def demonstration(item) -> str:
    """A format demonstration answering ``item`` with its gold option (train items only)."""
    option = item.options[int(item.label) - 1]
    return (
        f'<think>{item.question} From what happened, "{option}" fits best.</think>'
        f"<answer>({item.answer_letter}) {option}</answer>"
    )


def held_out_figures(model: str, items, max_new_tokens: int) -> dict:
    """Greedy, unconstrained answers of ``model`` to ``items``, scored."""
    from sotopia_env.backends.resolve import release_backends, resolve_backend
    from sotopia_env.training.rewards import evaluate_socialiqa
    from sotopia_env.training.rewards.socialiqa_eval import answer_socialiqa

    backend = resolve_backend(model)
    completions = asyncio.run(answer_socialiqa(backend, items, max_new_tokens=max_new_tokens, description=model))
    release_backends()
    errors = [c.error for c in completions if c.error]
    if errors:
        raise SystemExit(f"{len(errors)} generations failed: {errors[0]}")
    result = evaluate_socialiqa(items, [c.text for c in completions])
    result["example"] = completions[0].text
    return result


def bc_warm_start(items, out: Path, epochs: float, max_steps: int):
    from datasets import Dataset

    from sotopia_env.training.rewards import build_prompt
    from sotopia_env.training.sft import SFTTrainConfig, train_sft

    rows = [
        {"prompt": build_prompt(item), "completion": [{"role": "assistant", "content": demonstration(item)}]}
        for item in items
    ]
    config = SFTTrainConfig(
        base_model="smollm2-135m",
        output_dir=str(out),
        lora_r=8,
        lora_alpha=32,
        learning_rate=2e-4,
        num_epochs=epochs,
        max_steps=max_steps,
        batch_size=8,
        max_length=512,
        save_steps=1000,
    )
    return train_sft(Dataset.from_list(rows), config)


def grpo(model: str, data: Path, out: Path, steps: int, **overrides):
    from sotopia_env.training.grpo import GRPOStageConfig, train_grpo

    settings = {
        "task": "socialiqa",
        "data": str(data),
        "output_dir": str(out),
        "max_steps": steps,
        "num_generations": 4,
        "batch_size": 8,
        "temperature": 0.9,
        "max_completion_length": 96,
        "learning_rate": 2e-5,
        "beta": 0.04,
        "loss_type": "dapo",
        "save_steps": 1000,
    }
    return train_grpo(GRPOStageConfig(**{**settings, **overrides}).starting_from(model))


def interval(pair: tuple[float, float], digits: int = 2) -> str:
    return f"[{pair[0]:.{digits}f}, {pair[1]:.{digits}f}]"


def paired_difference(after: list[float], before: list[float], seed: int = 0) -> str:
    """Mean of (after - before) over the same held-out items, with a 95% paired bootstrap interval (2,000
    resamples of the items)."""
    diffs = [a - b for a, b in zip(after, before, strict=True)]
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(2000))
    return f"{statistics.fmean(diffs):+.2f} [{means[49]:+.2f}, {means[1949]:+.2f}]"


def socialiqa_part(args, work: Path) -> None:
    from sotopia_env.training.rewards import load_socialiqa

    items = load_socialiqa(args.data)
    random.Random(args.seed).shuffle(items)
    train, held_out = items[: args.train], items[args.train : args.train + args.heldout]
    train_path = work / "train.jsonl"
    train_path.write_text("".join(item.model_dump_json() + "\n" for item in train))
    rows = []
    rewards: dict[str, list[float]] = {}  # per held-out item, by stage

    def measure(stage: str, model: str, trained: str, minutes: float, zero_std: float | None = None) -> None:
        t0 = time.perf_counter()
        r = held_out_figures(model, held_out, args.max_new_tokens)
        rewards[stage] = [item["reward"] for item in r["items"]]
        versus_bc = paired_difference(rewards[stage], rewards["+ BC warm-start"]) if stage == "+ GRPO" else "-"
        rows.append(
            [stage, trained, f"{minutes:.1f}", f"{r['mean_reward']:.2f} {interval(r['mean_reward_ci95'])}"]
            + [versus_bc, f"{r['format_valid_rate']:.0%} {interval(r['format_valid_ci95'])}"]
            + [f"{r['accuracy']:.0%} {interval(r['accuracy_ci95'])}", "-" if zero_std is None else f"{zero_std:.2f}"]
        )
        print(f"{stage}: {rows[-1]} (eval {time.perf_counter() - t0:.0f} s); first held-out answer:", flush=True)
        print(f"  {r['example'][:300]!r}", flush=True)

    measure("base", "smollm2-135m", "-", 0.0)
    t0 = time.perf_counter()
    bc = bc_warm_start(train, work / "bc", args.bc_epochs, args.bc_steps)
    measure(
        "+ BC warm-start",
        bc.model_dir,
        f"SFT, {bc.steps} steps on {len(train)} gold-format demos",
        (time.perf_counter() - t0) / 60,
    )
    t0 = time.perf_counter()
    rl = grpo(bc.model_dir, train_path, work / "grpo", args.grpo_steps)
    curve = " ".join(f"{r:.2f}" if r is not None else "-" for r in rl.rewards)
    measure(
        "+ GRPO",
        rl.model_dir,
        f"GRPO, {rl.steps} steps x 2 prompts x 4 generations",
        (time.perf_counter() - t0) / 60,
        rl.zero_std_share,
    )
    print_table(
        "GRPO on Social IQa: SmolLM2-135M, held-out items",
        ["stage", "trained", "train min", "mean reward [95% CI]", "vs BC [95% paired]", "format-valid [95% CI]"]
        + ["accuracy [95% CI]", "zero-var groups"],
        rows,
        note=(
            f"{len(train)} train / {len(held_out)} held-out items of {Path(args.data).name} (seed {args.seed}); "
            f"held-out answers greedy, unconstrained, up to {args.max_new_tokens} tokens; reward = DeepEnlighten "
            "format (+1/-1) + answer (+2/-2/-3). The BC warm-start learns the format from the train items' gold "
            f"answers. GRPO train reward per step: {curve}."
        ),
    )


def social_turns_part(args, work: Path) -> None:
    from learning_signal import TRAIN_SCENARIOS, expert_episodes

    from sotopia_env.episodes.export import export_jsonl

    logs = expert_episodes(TRAIN_SCENARIOS, 1, 8, args.seed)
    data = work / "expert-episodes.jsonl"
    export_jsonl(logs, data)
    t0 = time.perf_counter()
    result = grpo(
        "smollm2-135m",
        data,
        work / "social-turns",
        args.social_turns_steps,
        task="social_turns",
        task_options={"judge": "smollm2-135m"},
        max_items=4 * args.social_turns_steps,
        batch_size=4,
        max_completion_length=64,
        learning_rate=1e-5,
    )
    rows = [
        [
            int(h.get("step", k + 1)),
            h.get("reward"),
            h.get("rewards/action_valid/mean"),
            h.get("rewards/utterance_score/mean"),
            h.get("rewards/utterance_score/none", 0),
            h.get("kl"),
        ]
        for k, h in enumerate(h for h in result.log if "reward" in h)
    ]
    print_table(
        "GRPO on social_turns: SmolLM2-135M policy, SmolLM2-135M utterance judge",
        ["step", "reward", "action valid", "judge score", "judge None", "kl"],
        rows,
        note=(
            f"{len(logs)} scripted expert episodes on train scenarios (rule-based ratings), {result.prompts} "
            f"turn prompts; 1 prompt x 4 generations per step; {(time.perf_counter() - t0) / 60:.1f} min; "
            f"{result.none_rewards} None rewards, {result.unscorable_batches} unscorable batches. A 135M judge's "
            "scores are noise: the point is that the loop runs."
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--train", type=int, default=200)
    parser.add_argument("--heldout", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bc-epochs", type=float, default=2.0)
    parser.add_argument("--bc-steps", type=int, default=-1, help="> 0 overrides --bc-epochs.")
    parser.add_argument("--grpo-steps", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=128, help="Held-out answers' token limit.")
    parser.add_argument("--social-turns-steps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="Keep the trained models here (default: a temp dir).")
    parser.add_argument("--quick", action="store_true", help="16 / 8 items, 2 steps of each (smoke test).")
    args = parser.parse_args()
    if args.quick:
        args.train, args.heldout, args.bc_steps, args.grpo_steps, args.social_turns_steps = 16, 8, 2, 2, 2
    if not args.data.is_file():
        raise SystemExit(f"no Social IQa data at {args.data} (give --data FILE)")
    print(machine_line())
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        socialiqa_part(args, work)
        if args.social_turns_steps > 0:
            social_turns_part(args, work)
    print(f"\n{machine_line()}; {(time.perf_counter() - started) / 60:.1f} min in all.")


if __name__ == "__main__":
    main()
