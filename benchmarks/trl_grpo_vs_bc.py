"""GRPO through TRL's ``environment_factory`` on ``verifiable:train``, evaluated on ``verifiable:dev``, paired
against its BC start.

    python benchmarks/trl_grpo_vs_bc.py --keep runs/trl-vs-bc                  # 24 BC steps, 20 GRPO steps, k = 4
    python benchmarks/trl_grpo_vs_bc.py --keep runs/trl-small --bc-steps 2 --grpo-steps 1 --k 1 --dev-limit 2

1. **BC**: a LoRA on the embedded SmolLM2-135M, trained on ``VerifiableExpert``'s tool-call conversations against
   the rule partner (the ones it won; loss on the tool calls), ``--bc-steps`` steps (the warm start an untrained
   135M needs: it calls no tool).
2. **GRPO**: TRL's ``GRPOTrainer`` continuing that adapter, ``environment_factory=tool_env_factory()``, the exact
   judge's goal score as the reward, ``--grpo-steps`` steps.
3. **Evaluation**: each policy, saved as a trained-model directory (``sotopia_model.json`` with ``prompt: tools``,
   the tokenizer with its tool template), is benchmarked by ``benchmark`` like any other model (``run_benchmark``:
   ``--k`` episodes per ``verifiable:dev`` scenario against the rule partner, the exact judge, stored in
   ``KEEP/episodes.db`` under the tags ``trl-vs-bc-bc`` and ``trl-vs-bc-grpo``): ``LLMAgent`` prompts it as TRL's
   environment did, and the local backend constrains each reply to one valid tool call of the seat's tools.

Prints the mean goal and success rate of BC and of BC + GRPO, and the paired difference (GRPO - BC per instance,
averaged over its seeds) with a 95% bootstrap interval over instances. No target on CPU.

A stopped run resumes: the adapters saved in ``--keep`` (``bc/``, ``grpo/``) are loaded rather than trained again,
whatever steps they were trained with (delete them to train again), and the evaluation episodes already stored
under the benchmark's tags are not played again.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine_line, print_table  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def bc_stage(path: str, tokenizer, rows, out: Path, steps: int, maker):
    """The BC adapter, trained, or loaded from ``out/bc`` where a run before this one saved it."""
    import torch
    from peft import LoraConfig, PeftModel
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer

    if (out / "bc" / "adapter_model.safetensors").exists():
        print(f"BC: loading the adapter saved in {out / 'bc'}", flush=True)
        base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        return PeftModel.from_pretrained(base, str(out / "bc"), is_trainable=True)

    from sotopia_env.training.trl_env import expert_tool_dataset, tool_transcripts

    data = expert_tool_dataset(tool_transcripts(rows, maker=maker), tokenizer)
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
        args=SFTConfig(
            output_dir=str(out / "bc-run"),
            max_steps=steps,
            learning_rate=1e-3,
            per_device_train_batch_size=1,
            max_length=4096,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            bf16=False,
        ),  # fmt: skip
        train_dataset=data,
        processing_class=tokenizer,
        peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    trainer.train()
    trainer.save_model(str(out / "bc"))
    return trainer.model


def grpo_stage(path: str, model, tokenizer, rows, out: Path, steps: int, maker):
    """BC + GRPO: trained from the BC model, or loaded from ``out/grpo`` where a run before this one saved it."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    if (out / "grpo" / "adapter_model.safetensors").exists():
        print(f"GRPO: loading the adapter saved in {out / 'grpo'}", flush=True)
        return PeftModel.from_pretrained(
            AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), str(out / "grpo")
        )

    from sotopia_env.training.seat_rows import trl_dataset
    from sotopia_env.training.trl_env import tool_env_factory

    config = GRPOConfig(
        output_dir=str(out / "grpo-run"), max_steps=steps, learning_rate=2e-4, per_device_train_batch_size=8,
        num_generations=4, max_completion_length=384, max_tool_calling_iterations=8, temperature=1.0, beta=0.0,
        report_to="none", save_strategy="no", logging_steps=1, bf16=False, seed=0,
    )  # fmt: skip
    trainer = GRPOTrainer(model=model, args=config, train_dataset=trl_dataset(rows, maker), processing_class=tokenizer,
                          environment_factory=tool_env_factory(maker))  # fmt: skip
    trainer.train()
    trainer.save_model(str(out / "grpo"))
    return trainer.model


def model_dir(directory: Path, path: str, tokenizer) -> str:
    """``directory`` (a saved adapter) as a trained-model directory like any other: the tokenizer with the tool
    template it was trained with, and ``sotopia_model.json`` naming the base, the adapter and ``prompt: tools``."""
    from sotopia_env.model_ref import write_model_ref
    from sotopia_env.tool_calls import TOOLS

    tokenizer.save_pretrained(str(directory))
    write_model_ref(directory, path, ".", TOOLS)
    return str(directory)


def evaluate(spec: str, name: str, rows, k: int, out: Path):
    """Goal per (scenario, episode) of ``spec`` on ``rows``' scenarios, played by ``benchmark`` (``run_benchmark``,
    as every model is: the local backend, ``LLMAgent`` under the directory's ``tools`` prompt, its tool calls
    constrained to valid ones) against the rule partner, rated by the exact judge, stored in ``out/episodes.db``
    under its own tag, so a stopped run plays only what is missing."""
    import asyncio

    from sotopia_env.episodes.benchmark import BenchmarkSpec, run_benchmark
    from sotopia_env.episodes.store import open_store

    scenarios = ",".join(dict.fromkeys(row.scenario for row in rows))
    tag = f"trl-vs-bc-{name}"
    benchmark = BenchmarkSpec(
        model=spec, partner="rule-partner", evaluator="verifiable", scenarios=scenarios, episodes_per_scenario=k,
        dimensions="goal", tag=tag, concurrency=4,
    )  # fmt: skip
    store = open_store(f"sqlite:///{out / 'episodes.db'}")
    result = asyncio.run(run_benchmark(benchmark, store))
    print(f"{name}: benchmark played {result.summary}", flush=True)
    scores: dict[tuple[str, int], float | None] = {}
    counts: dict[str, int] = {}
    for log in sorted(store.query(tag=tag), key=lambda log: log.created_at):
        scenario = log.setup.scenario.id
        n = counts[scenario] = counts.get(scenario, 0) + 1
        seats = [a.name for a in log.agents if a.model == spec]
        ratings = log.rating.ratings if log.rating is not None and log.rating.rated else {}
        goals = [ratings[seat].scores["goal"].score for seat in seats if seat in ratings]
        scores[(scenario, n - 1)] = statistics.fmean(goals) if goals else None
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", default="runs/trl-vs-bc")
    parser.add_argument("--bc-steps", type=int, default=24)
    parser.add_argument("--grpo-steps", type=int, default=20)
    parser.add_argument("--k", type=int, default=4, help="evaluation episodes per dev instance")
    parser.add_argument("--dev-limit", type=int, help="only the first N dev instances (a smoke run)")
    args = parser.parse_args()

    import copy

    from transformers import AutoTokenizer

    from sotopia_env.embedded_models import resolve_model_path
    from sotopia_env.training.seat_rows import SessionMaker, seat_rows
    from sotopia_env.training.trl_env import tool_chat_template

    out = Path(args.keep)
    out.mkdir(parents=True, exist_ok=True)
    print(machine_line())
    path = resolve_model_path("smollm2-135m")
    tokenizer = tool_chat_template(AutoTokenizer.from_pretrained(path))
    maker = SessionMaker()
    train = seat_rows("verifiable:train", library=maker.library)
    dev = seat_rows("verifiable:dev", library=maker.library)[: args.dev_limit]
    started = time.perf_counter()
    bc = bc_stage(path, tokenizer, train, out, args.bc_steps, maker)
    scores = {"BC": evaluate(model_dir(out / "bc", path, tokenizer), "bc", dev, args.k, out)}
    grpo_stage(path, copy.deepcopy(bc).train(), tokenizer, train, out, args.grpo_steps, maker)
    del bc
    scores["BC + GRPO (TRL)"] = evaluate(model_dir(out / "grpo", path, tokenizer), "grpo", dev, args.k, out)

    table = []
    for name, by_start in scores.items():
        rated = [r for r in by_start.values() if r is not None]
        won = sum(r >= 10 for r in rated)
        table.append([name, len(by_start), len(rated), round(statistics.fmean(rated), 2) if rated else "-",
                      f"{won}/{len(rated)}"])  # fmt: skip
    per_instance = []
    for scenario in dict.fromkeys(row.scenario for row in dev):
        grpo_of, bc_of = scores["BC + GRPO (TRL)"], scores["BC"]
        pairs = [(grpo_of.get((scenario, s)), bc_of.get((scenario, s))) for s in range(args.k)]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        if pairs:
            per_instance.append(statistics.fmean(a - b for a, b in pairs))
    rng = random.Random(0)
    boots = sorted(statistics.fmean(rng.choices(per_instance, k=len(per_instance))) for _ in range(2000))
    diff = f"{statistics.fmean(per_instance):+.2f} [{boots[49]:+.2f}, {boots[1949]:+.2f}]" if per_instance else "-"
    print_table(
        f"TRL GRPO vs its BC start on verifiable:dev ({len(dev)} instances x {args.k} seeds; "
        f"{args.bc_steps} BC + {args.grpo_steps} GRPO steps; {time.perf_counter() - started:.0f} s)",
        ["policy", "episodes", "rated", "mean goal", "won"],
        table,
        note=f"paired GRPO - BC goal per instance: {diff} (95% bootstrap over instances)",
    )


if __name__ == "__main__":
    main()
