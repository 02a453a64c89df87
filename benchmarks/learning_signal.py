"""Learning signal: does behaviour cloning on expert episodes lower SmolLM2-135M's NLL on held-out expert turns?

    python benchmarks/learning_signal.py [--steps 12] [--threads 1] [--json out.json]

1. Expert episodes: ``training.experts.ScriptedExpert`` (a scripted, model-free
   expert: greets, states its goal, listens, proposes a middle ground, agrees,
   leaves) plays itself on train scenarios and, separately, on held-out dev
   scenarios; the rule-based evaluator rates them.
2. The train episodes become a BC dataset (SOTOPIA-pi filter), the dev ones the
   held-out set (every non-``none`` turn).
3. NLL before: the mean negative log-likelihood per completion token (the
   assistant's action JSON and its end-of-turn, exactly the tokens SFT trains on)
   of the embedded SmolLM2-135M-Instruct on the held-out examples.
4. BC with ``training.sft.train_sft`` (LoRA), then the same NLL with the adapter.

Also reported: the NLL on the held-out "goal statement" turns alone, whose text
comes from each held-out scenario's goal, so a drop there is more than
memorising fixed lines. Not a test: run it by hand; it takes a few minutes on CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import tempfile
import time
from pathlib import Path

TRAIN_SCENARIOS = (
    "accommodation-drum-practice,collaboration-garden-plot,exchange-textbook-trade,"
    "negotiation-bigger-bedroom,conflict-overhanging-oak,persuasion-blood-drive"
)
HELD_OUT_SCENARIOS = "collaboration-demo-bug,negotiation-summer-sublet"
GOAL_TURN_PREFIX = "Here is where I stand"


def expert_episodes(selector: str, per_scenario: int, max_turns: int, seed: int):
    from sotopia_env.env import EnvConfig
    from sotopia_env.episodes.jobs import self_play_jobs
    from sotopia_env.episodes.runner import play
    from sotopia_env.evaluators import RuleBasedEvaluator
    from sotopia_env.library import load_library
    from sotopia_env.training.experts import ScriptedExpert

    library = load_library()
    jobs = self_play_jobs(
        library.select(selector), library, "sotopia_env.training.experts:ScriptedExpert", per_scenario, seed
    )

    async def run_all():
        return [
            await play(job.setup, [ScriptedExpert(), ScriptedExpert()], RuleBasedEvaluator(), EnvConfig(max_turns))
            for job in jobs
        ]

    return asyncio.run(run_all())


def completion_nll(model, tokenizer, rows) -> tuple[float, int]:
    """Mean NLL per completion token over ``rows`` (prompt/completion messages), and the token count."""
    import torch

    total, count = 0.0, 0
    model.eval()
    for row in rows:
        prompt_ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True)["input_ids"]
        full_ids = tokenizer.apply_chat_template(row["prompt"] + row["completion"])["input_ids"]
        assert full_ids[: len(prompt_ids)] == prompt_ids, "the chat template must render the prompt as a prefix"
        ids = torch.tensor([full_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, :-1].float()
        targets = ids[0, 1:]
        nll = torch.nn.functional.cross_entropy(logits, targets, reduction="none")[len(prompt_ids) - 1 :]
        total += float(nll.sum())
        count += int(nll.numel())
    return total / max(count, 1), count


def measure(model, tokenizer, held_out, goal_rows) -> dict[str, float]:
    started = time.perf_counter()
    nll, tokens = completion_nll(model, tokenizer, held_out)
    goal_nll, _ = completion_nll(model, tokenizer, goal_rows)
    return {
        "nll": nll,
        "perplexity": math.exp(nll),
        "goal_turn_nll": goal_nll,
        "tokens": tokens,
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--episodes-per-scenario", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sotopia_env.embedded_models import resolve_model_path
    from sotopia_env.model_ref import read_model_ref
    from sotopia_env.training.dataset import FilterConfig, build_dataset
    from sotopia_env.training.sft import SFTTrainConfig, train_sft

    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()

    # 1-2. expert episodes -> BC set (train scenarios) and held-out set (dev scenarios)
    train_logs = expert_episodes(TRAIN_SCENARIOS, args.episodes_per_scenario, args.max_turns, args.seed)
    dev_logs = expert_episodes(HELD_OUT_SCENARIOS, args.episodes_per_scenario, args.max_turns, args.seed)
    bc_set, bc_stats = build_dataset(train_logs, *FilterConfig().build(args.seed))
    held_out, _ = build_dataset(dev_logs, *FilterConfig(top1_per_scenario_role=False).build(args.seed))
    goal_rows = [r for r in held_out if GOAL_TURN_PREFIX in r["completion"][0]["content"]]
    print(f"BC set: {bc_stats.summary()}")
    print(f"held-out: {len(held_out)} expert turns ({len(goal_rows)} goal statements) on {HELD_OUT_SCENARIOS}")

    # 3. NLL before
    path = resolve_model_path(args.base_model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    before = measure(base, tokenizer, held_out, goal_rows)
    print(f"before BC: NLL {before['nll']:.3f}/token (goal turns {before['goal_turn_nll']:.3f}) [{before['seconds']}s]")

    # 4. BC, then NLL after
    with tempfile.TemporaryDirectory() as out:
        config = SFTTrainConfig(
            base_model=args.base_model,
            output_dir=out,
            lora_r=args.lora_r,
            lora_alpha=2 * args.lora_r,
            learning_rate=args.lr,
            max_steps=args.steps,
            batch_size=args.batch_size,
            max_length=2048,
            save_steps=10**6,
            seed=args.seed,
        )
        result = train_sft(bc_set, config)
        print(f"BC: {result.steps} steps in {result.seconds}s, loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}")
        _, adapter = read_model_ref(result.model_dir)
        tuned = PeftModel.from_pretrained(base, adapter)
        after = measure(tuned, tokenizer, held_out, goal_rows)
    print(f"after BC:  NLL {after['nll']:.3f}/token (goal turns {after['goal_turn_nll']:.3f}) [{after['seconds']}s]")

    figures = {
        "expert": "sotopia_env.training.experts:ScriptedExpert (scripted, model-free)",
        "base_model": args.base_model,
        "train_scenarios": TRAIN_SCENARIOS.split(","),
        "held_out_scenarios": HELD_OUT_SCENARIOS.split(","),
        "bc_examples": len(bc_set),
        "held_out_examples": len(held_out),
        "steps": result.steps,
        "losses": result.losses,
        "train_seconds": result.seconds,
        "before": before,
        "after": after,
        "total_seconds": round(time.perf_counter() - t0, 1),
    }
    print(
        f"held-out NLL per completion token: {before['nll']:.3f} -> {after['nll']:.3f} "
        f"(perplexity {before['perplexity']:.1f} -> {after['perplexity']:.1f}); total {figures['total_seconds']}s"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    if not after["nll"] < before["nll"]:
        raise SystemExit("no learning signal: the held-out NLL did not go down")


if __name__ == "__main__":
    main()
