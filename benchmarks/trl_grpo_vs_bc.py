"""GRPO through TRL's ``environment_factory`` on ``verifiable:train``, evaluated on ``verifiable:dev``, paired
against its BC start.

    python benchmarks/trl_grpo_vs_bc.py --keep runs/trl-vs-bc                  # 24 BC steps, 20 GRPO steps, k = 4
    python benchmarks/trl_grpo_vs_bc.py --keep runs/trl-small --bc-steps 2 --grpo-steps 1 --k 1 --dev-limit 2

1. **BC**: a LoRA on the embedded SmolLM2-135M, trained on ``VerifiableExpert``'s tool-call conversations against
   the rule partner (the ones it won; loss on the tool calls), ``--bc-steps`` steps (the warm start an untrained
   135M needs: it calls no tool).
2. **GRPO**: TRL's ``GRPOTrainer`` continuing that adapter, ``environment_factory=tool_env_factory()``, the exact
   judge's goal score as the reward, ``--grpo-steps`` steps.
3. **Evaluation**: each policy plays every ``verifiable:dev`` instance ``--k`` times (seeds 0..k-1, sampled at
   temperature 1 with the seed fixed, the same for both) through ``SocialToolEnv``: the model's tool calls, parsed
   as TRL parses them, are the moves; no tool call ends the episode as a rollout does.

Prints the mean goal and success rate of BC and of BC + GRPO, and the paired difference (GRPO - BC per instance,
averaged over its seeds) with a 95% bootstrap interval over instances. No target on CPU.

A stopped run resumes: the adapters saved in ``--keep`` (``bc/``, ``grpo/``) are loaded rather than trained again,
whatever steps they were trained with (delete them to train again), and the evaluation episodes already played
(``scores-*.jsonl``) are not played again.
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


def play_with_tools(
    model, tokenizer, env, row, seed: int, max_calls: int = 8, max_new_tokens: int = 96
) -> float | None:
    """One evaluation episode: the model's tool calls are the seat's moves (TRL's parser), sampled with ``seed``."""
    import torch
    from trl.chat_template_utils import add_response_schema, parse_response

    from sotopia_env.training.trl_env import tool_schemas

    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        add_response_schema(tokenizer)
    tools = tool_schemas()
    first = env.reset(**row.model_dump())
    messages = [*env._turn.messages[:1], {"role": "user", "content": first}]
    torch.manual_seed(seed)
    for _ in range(max_calls):
        if env.done:
            break
        prompt = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)  # fmt: skip
        with torch.no_grad():
            out = model.generate(**prompt, do_sample=True, temperature=1.0, max_new_tokens=max_new_tokens)
        ids = out[0, prompt["input_ids"].shape[1] :].tolist()
        reply = parse_response(tokenizer, ids, prefix=prompt["input_ids"][0].tolist(), tools=tools)
        calls = reply.get("tool_calls") or []
        if not calls:
            break
        messages.append(reply)
        for call in calls:
            function = call["function"]
            try:
                answer = getattr(env, function["name"])(**function["arguments"])
            except Exception as exc:  # a bad call is the tool's error, as in TRL
                answer = str({"error": str(exc)})
            messages.append({"role": "tool", "name": function["name"], "content": answer})
    return env.get_reward()


def evaluate(model, tokenizer, rows, k: int, maker, saved: Path):
    """Goal per (scenario, seed); kept in ``saved`` (JSON lines) so that a stopped run resumes where it was."""
    import json

    from sotopia_env.training.trl_env import SocialToolEnv

    wanted = {(row.scenario, seed) for row in rows for seed in range(k)}
    scores = {}
    if saved.exists():
        for line in saved.read_text().splitlines():
            entry = json.loads(line)
            if (entry["scenario"], entry["seed"]) in wanted:  # a run with a smaller --k or --dev-limit
                scores[(entry["scenario"], entry["seed"])] = entry["goal"]
    model.eval()
    env = SocialToolEnv(maker)
    with saved.open("a") as log:
        for row in rows:
            for seed in range(k):
                if (row.scenario, seed) not in scores:
                    goal = scores[(row.scenario, seed)] = play_with_tools(model, tokenizer, env, row, seed)
                    log.write(json.dumps({"scenario": row.scenario, "seed": seed, "goal": goal}) + "\n")
                    log.flush()
        print(f"evaluated {len(scores)} episodes into {saved}", flush=True)
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
    scores = {"BC": evaluate(bc, tokenizer, dev, args.k, maker, out / "scores-bc.jsonl")}
    grpo = grpo_stage(path, copy.deepcopy(bc).train(), tokenizer, train, out, args.grpo_steps, maker)
    scores["BC + GRPO (TRL)"] = evaluate(grpo, tokenizer, dev, args.k, maker, out / "scores-grpo.jsonl")

    table = []
    for name, by_start in scores.items():
        rated = [r for r in by_start.values() if r is not None]
        won = sum(r >= 10 for r in rated)
        table.append([name, len(by_start), len(rated), round(statistics.fmean(rated), 2) if rated else "-",
                      f"{won}/{len(rated)}"])  # fmt: skip
    per_instance = []
    for row in dev:
        pairs = [(scores["BC + GRPO (TRL)"][(row.scenario, s)], scores["BC"][(row.scenario, s)]) for s in range(args.k)]
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
