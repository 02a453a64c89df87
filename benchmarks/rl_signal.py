"""Learning signal of GRPO: does RL on Social IQa teach SmolLM2-135M the think/answer format, on held-out items?

    python benchmarks/rl_signal.py --split dev --seeds 0,1,2 --out RUN  # 200 train / 50 dev items of the shared sample
    python benchmarks/rl_signal.py --split test --final --out RUN     # once: the dev run's models, on the test items
    python benchmarks/rl_signal.py --quick         # smoke: 16 train / 8 dev items, 2 steps of each, one seed
    python benchmarks/rl_signal.py --social-turns-steps 0   # skip part 2

The protocol of ``episode_rl.py``: every choice is made on ``--split dev``; ``--split test`` runs once, with
``--final`` and ``--out RUN`` (the settings of that run are kept there, and a second test run under other settings
is refused). BC and GRPO are trained once per training seed in ``--seeds``; a stage finished in ``--out`` is kept
(``RUN/trained_with.json`` holds the training settings, and a run under others is refused there), so the test run
evaluates the models the dev run trained. GRPO's gain over BC is paired: a nested bootstrap (training seeds, then
items within each) beside a t-interval over the seeds' mean differences.

Part 1, ``socialiqa``:

1. ``../shared/data/social_iqa/sample.jsonl`` (``--data``) is shuffled with ``--seed`` (the split's seed, not a
   training seed) and split into ``--train`` train items, then ``--heldout`` dev and ``--heldout`` test items.
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
import hashlib
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import _common
from _common import ROOT, machine_line, print_table
from _stages import INTERVALS, both_intervals, fmt_diff, guard_test_once

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


def bc_warm_start(items, out: Path, epochs: float, max_steps: int, seed: int):
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
        seed=seed,
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


def keep_training_settings(work: Path, args) -> None:
    """``WORK/trained_with.json``: what the models kept in ``work`` depend on. A later run with other training
    settings is refused there, so ``kept`` never hands it models trained otherwise."""
    path = work / "trained_with.json"
    mine = {k: str(getattr(args, k)) for k in ("train", "heldout", "seed", "bc_epochs", "bc_steps", "grpo_steps")}
    mine["data_sha256"] = hashlib.sha256(args.data.read_bytes()).hexdigest()
    if path.is_file() and (kept_settings := json.loads(path.read_text())) != mine:
        raise SystemExit(f"{path}: the models there were trained under {kept_settings}, not {mine}; give another --out")
    path.write_text(json.dumps(mine, indent=2))


def kept(out: Path, train, *args, **kwargs):
    """The stage whose result file is in ``out`` (a finished stage of an earlier run with this ``--out``: the test
    run evaluates the very models the dev run trained), else ``train(*args, **kwargs)``'s."""
    from sotopia_env.training.rl_result import RESULT_FILE as GRPO_RESULT
    from sotopia_env.training.rl_result import GRPOResult
    from sotopia_env.training.sft import RESULT_FILE as SFT_RESULT
    from sotopia_env.training.sft import TrainResult

    for name, result in ((SFT_RESULT, TrainResult), (GRPO_RESULT, GRPOResult)):
        if (out / name).is_file():
            print(f"{out}: kept from an earlier run, not trained again", flush=True)
            return result.load(out / name)
    return train(*args, **kwargs)


def split_items(args):
    """The shared sample shuffled with ``--seed``: train, dev and test items, disjoint. The sample repeats a few
    (context, question) pairs (300 lines, 297 pairs): one copy is kept, and a pair whose copies disagree on the
    answer is dropped."""
    from sotopia_env.training.rewards import load_socialiqa

    by_question: dict[tuple[str, str], list] = {}
    for item in load_socialiqa(args.data):
        by_question.setdefault((item.context, item.question), []).append(item)
    items = [copies[0] for copies in by_question.values() if len({c.label for c in copies}) == 1]
    random.Random(args.seed).shuffle(items)
    dev_end = args.train + args.heldout
    return items[: args.train], items[args.train : dev_end], items[dev_end : dev_end + args.heldout]


def socialiqa_part(args, work: Path) -> None:
    train, dev, test = split_items(args)
    held_out = dev if args.split == "dev" else test
    train_path = work / "train.jsonl"
    train_path.write_text("".join(item.model_dump_json() + "\n" for item in train))
    rows = []
    figures: dict[str, dict[int | None, dict]] = {}  # stage -> training seed -> held_out_figures

    def rewards(stage: str) -> dict[int | None, dict[str, float]]:
        """Reward per training seed and item: the bootstrap's cells."""
        return {
            seed: {str(i): item["reward"] for i, item in enumerate(r["items"])} for seed, r in figures[stage].items()
        }

    def measure(stage: str, seed: int | None, model: str) -> None:
        t0 = time.perf_counter()
        r = held_out_figures(model, held_out, args.max_new_tokens)
        figures.setdefault(stage, {})[seed] = r
        print(
            f"{stage} seed {seed}: mean reward {r['mean_reward']:.2f}, format {r['format_valid_rate']:.0%}, accuracy "
            f"{r['accuracy']:.0%} (eval {time.perf_counter() - t0:.0f} s); first answer: {r['example'][:200]!r}",
            flush=True,
        )

    seeds = [int(s) for s in args.seeds.split(",")]
    measure("base", None, "smollm2-135m")
    trained: dict[str, list] = {"base": [], "+ BC warm-start": [], "+ GRPO": []}
    for seed in seeds:
        bc_dir, rl_dir = work / "bc" / f"seed{seed}", work / "grpo" / f"seed{seed}"
        bc = kept(bc_dir, bc_warm_start, train, bc_dir, args.bc_epochs, args.bc_steps, seed)
        trained["+ BC warm-start"].append((bc, bc.seconds / 60))
        measure("+ BC warm-start", seed, bc.model_dir)
        rl = kept(rl_dir, grpo, bc.model_dir, train_path, rl_dir, args.grpo_steps, seed=seed)
        trained["+ GRPO"].append((rl, rl.seconds / 60))
        measure("+ GRPO", seed, rl.model_dir)
    for stage, by_seed in figures.items():
        results = list(by_seed.values())
        per_item = [reward for cells in rewards(stage).values() for reward in cells.values()]
        versus = {"+ BC warm-start": "base", "+ GRPO": "+ BC warm-start"}.get(stage)
        runs = trained[stage]
        zero = [rl.zero_std_share for rl, _ in runs if getattr(rl, "zero_std_share", None) is not None]
        rows.append(
            [stage, args.split, f"{statistics.fmean(m for _, m in runs):.1f}" if runs else "-"]
            + [f"{statistics.fmean(per_item):.2f}", ", ".join(f"{r['mean_reward']:.2f}" for r in results)]
            + [fmt_diff(both_intervals(rewards(stage), rewards(versus))) if versus else "-"]
            + [f"{statistics.fmean(r['format_valid_rate'] for r in results):.0%}"]
            + [
                f"{statistics.fmean(r['accuracy'] for r in results):.0%}",
                f"{statistics.fmean(zero):.2f}" if zero else "-",
            ]
        )
    curves = "; ".join(
        f"seed {s}: " + " ".join(f"{r:.2f}" if r is not None else "-" for r in rl.rewards)
        for s, (rl, _) in zip(seeds, trained["+ GRPO"], strict=True)
    )
    print_table(
        f"GRPO on Social IQa: SmolLM2-135M, {args.split} items, training seeds {args.seeds}",
        ["stage", "split", "train min", "mean reward", "per seed", f"vs its start [{INTERVALS}]", "format-valid"]
        + ["accuracy", "zero-var groups"],
        rows,
        note=(
            f"{len(train)} train / {len(held_out)} {args.split} items of {Path(args.data).name} (split seed "
            f"{args.seed}); answers greedy, unconstrained, up to {args.max_new_tokens} tokens; reward = DeepEnlighten "
            "format (+1/-1) + answer (+2/-2/-3). The BC warm-start learns the format from the train items' gold "
            f"answers ({bc.steps} steps); GRPO {args.grpo_steps} steps x 2 prompts x 4 generations. Intervals: "
            f"(seeds x items) of the paired difference. GRPO train reward per step, {curves}."
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
    parser.add_argument("--heldout", type=int, default=50, help="dev items, and as many test items")
    parser.add_argument("--seed", type=int, default=0, help="the split's shuffle (and part 2's expert episodes)")
    parser.add_argument("--seeds", default="0,1,2", help="training seeds: BC and GRPO are trained once each")
    parser.add_argument("--split", choices=("dev", "test"), default="dev", help="where the stages are measured")
    parser.add_argument("--final", action="store_true", help="needed with --split test (which runs once)")
    parser.add_argument("--bc-epochs", type=float, default=2.0)
    parser.add_argument("--bc-steps", type=int, default=-1, help="> 0 overrides --bc-epochs.")
    parser.add_argument("--grpo-steps", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=128, help="Held-out answers' token limit.")
    parser.add_argument("--social-turns-steps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="Keep the trained models here (default: a temp dir).")
    parser.add_argument("--quick", action="store_true", help="16 / 8 items, 2 steps of each, seed 0 (smoke test).")
    args = parser.parse_args()
    if args.quick:
        args.train, args.heldout, args.bc_steps, args.grpo_steps, args.social_turns_steps = 16, 8, 2, 2, 2
        args.seeds, args.split = "0", "dev"
    if args.split == "test":
        settings = {k: str(v) for k, v in vars(args).items() if k not in ("split", "final", "out", "quick")}
        seeds = [int(s) for s in args.seeds.split(",")]
        frozen = guard_test_once(args.out, settings, ["base", "bc", "grpo"], args.final, seeds)
        if frozen:  # every run measures again: there is no record to reprint
            raise SystemExit(f"--split test: {frozen}; this script keeps no per-item record to reprint")
    if not args.data.is_file():
        raise SystemExit(f"no Social IQa data at {args.data} (give --data FILE)")
    print(machine_line())
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        keep_training_settings(work, args)
        socialiqa_part(args, work)
        if args.social_turns_steps > 0:
            social_turns_part(args, work)
    print(f"\n{machine_line()}; {(time.perf_counter() - started) / 60:.1f} min in all.")


if __name__ == "__main__":
    main()
