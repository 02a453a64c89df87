"""GRPO through TRL on any of our worlds: verifiable scenarios and games (rule partners, exact judges) or SOTOPIA
scenarios (an LLM partner and an LLM judge), one rollout per seat of an episode.

    pip install torch==2.13.0 -e ".[train]"
    python examples/trl_grpo.py                      # CPU: the embedded SmolLM2-135M on verifiable:train
    python examples/trl_grpo.py --recipe 7b-gpu      # GPU: Qwen2.5-7B-Instruct, bf16, LoRA, vLLM colocated
    python examples/trl_grpo.py --scenarios hard --partner MODEL --judge MODEL --api-base http://127.0.0.1:8000/v1

Two stages. Untrained, a small model calls no tool, so GRPO would see only equal rewards: first a warm start, a few
supervised steps on the expert's tool-call conversations (``VerifiableExpert`` against the rule partner, the
conversations it won; verifiable rows only); then GRPO, where each rollout is one episode and its reward the
judge's goal score (None for an episode it could not rate: TRL leaves it out of the group's baseline). The adapter
lands in ``--out``.

``--rollouts batched`` (the default) plays each generation batch through ``training.trl_rollouts`` (a
``rollout_func``: the partners' turns and the judge calls of the batch run at once); ``--rollouts env`` through
``SocialToolEnv`` (``environment_factory``: TRL calls its tools sample after sample). SOTOPIA scenarios without
``--partner``/``--judge`` use the embedded model for both (local, slow, a weak judge). The completion budget holds the
whole episode: the seat's moves (``--move-tokens`` each) and what it hears between them (``ANSWER_TOKENS`` each);
``--max-completion-length`` overrides it. See docs/trl.md for what each choice costs.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

EMBEDDED = "smollm2-135m"
ANSWER_TOKENS = 128  # a tool answer: the partner's turn (a sentence or two) and whose move it is


@dataclass
class Recipe:
    model: str
    warm_start_steps: int
    warm_start_moves: int | None  # each expert conversation's first moves only (None: whole conversations)
    grpo_steps: int
    batch: int  # rollouts per step
    group: int  # rollouts per start (num_generations)
    move_tokens: int  # the most tokens one move (a tool call) may take
    bf16: bool
    vllm: bool
    lora_r: int
    learning_rate: float
    micro_batch: int | None = None  # rollouts per backward pass (None: the whole batch); the rest is accumulated


RECIPES = {
    "cpu": Recipe("smollm2-135m", 8, 1, 4, 4, 4, 64, False, False, 16, 2e-4),
    # SOTOPIA-RL-sized: one GPU for policy and vLLM (colocate); more GPUs: accelerate launch this file
    # 64 rollouts a step in micro-batches of 4: one backward pass of 64 x ~2,100 tokens does not fit 80 GB
    # (benchmarks/memory_estimate.py, docs/scale.md)
    "7b-gpu": Recipe("Qwen/Qwen2.5-7B-Instruct", 100, None, 200, 64, 8, 128, True, True, 64, 1e-5, micro_batch=4),
}


@dataclass
class Plan:
    """What the arguments ask for, checked before any model loads."""

    recipe: Recipe
    rows: list
    maker: object
    moves: int  # the most moves of the policy's seat in one episode
    max_completion_length: int
    max_tool_calls: int
    partner: str | None
    judge: str | None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="cpu")
    parser.add_argument("--scenarios", default="verifiable:train", help="a scenario selector (verifiable, game, hard)")
    parser.add_argument("--partner", help="every other seat's agent spec (default: rule agents; SOTOPIA: embedded)")
    parser.add_argument("--judge", help="the LLM judge of SOTOPIA scenarios (default: the embedded model)")
    parser.add_argument("--api-base", help="the OpenAI-compatible server of --partner and --judge model specs")
    parser.add_argument("--max-turns", type=int, default=20, help="the episode's turn limit")
    parser.add_argument("--move-tokens", type=int, help="the budget of one move (default: the recipe's)")
    parser.add_argument("--max-completion-length", type=int, help="the whole rollout's budget (default: it fits)")
    parser.add_argument("--rollouts", choices=["batched", "env"], default="batched")
    parser.add_argument("--warm-start-steps", type=int, help="override the recipe's supervised steps (0: none)")
    parser.add_argument("--grpo-steps", type=int, help="override the recipe's GRPO steps")
    parser.add_argument("--out", default="runs/trl-grpo")
    args = parser.parse_args(argv)
    for name in ("max_turns", "move_tokens", "max_completion_length"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1 (got {value})")
    return args


def plan(args: argparse.Namespace) -> Plan:
    """The rows, the session maker and the budgets; SystemExit (one line) for arguments that name nothing."""
    from sotopia_env.library import LibraryError, load_library
    from sotopia_env.training.seat_rows import SeatRowError, SessionMaker, seat_rows

    recipe = RECIPES[args.recipe]
    library = load_library()
    try:
        sotopia = [s for s in library.select(args.scenarios) if s.game is None and s.verifiable is None]
        partner = args.partner or (EMBEDDED if sotopia else None)
        judge = args.judge or (EMBEDDED if sotopia else None)
        maker = SessionMaker(library, api_base=args.api_base)
        rows = seat_rows(args.scenarios, partner=partner, judge=judge, max_turns=args.max_turns, library=library)
    except (SeatRowError, LibraryError, ValueError) as exc:
        raise SystemExit(f"trl_grpo.py: {exc}") from None
    seats = min(library.scenarios[row.scenario].num_agents for row in rows)
    moves = math.ceil(args.max_turns / seats)
    move_tokens = args.move_tokens or recipe.move_tokens
    budget = args.max_completion_length or moves * (move_tokens + ANSWER_TOKENS)
    return Plan(recipe, rows, maker, moves, budget, moves + 2, partner, judge)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    chosen = plan(args)
    recipe = chosen.recipe
    if chosen.partner or chosen.judge:
        print(f"partner {chosen.partner or 'rule agents'}, judge {chosen.judge or 'exact'}", flush=True)
    print(
        f"{len(chosen.rows)} rows, up to {chosen.moves} moves per episode, completion budget "
        f"{chosen.max_completion_length} tokens, {args.rollouts} rollouts",
        flush=True,
    )

    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

    from sotopia_env.embedded_models import resolve_model_path
    from sotopia_env.tool_calls import TOOLS
    from sotopia_env.training.model_setup import save_adapter_spec
    from sotopia_env.training.seat_rows import trl_dataset
    from sotopia_env.training.trl_env import expert_tool_dataset, tool_chat_template, tool_env_factory, tool_transcripts
    from sotopia_env.training.trl_rollouts import episode_reward, episode_rollouts, rollout_dataset

    path = resolve_model_path(recipe.model)
    tokenizer = tool_chat_template(AutoTokenizer.from_pretrained(path))
    dtype = torch.bfloat16 if recipe.bf16 else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    lora = LoraConfig(r=recipe.lora_r, lora_alpha=2 * recipe.lora_r, target_modules="all-linear", task_type="CAUSAL_LM")
    maker, rows = chosen.maker, chosen.rows
    common = dict(report_to="none", save_strategy="no", logging_steps=1, bf16=recipe.bf16, use_cpu=not recipe.bf16)

    warm_steps = recipe.warm_start_steps if args.warm_start_steps is None else args.warm_start_steps
    expert_rows = [row for row in rows if maker.library.scenarios[row.scenario].verifiable is not None]
    if warm_steps and expert_rows:
        transcripts = tool_transcripts(expert_rows, maker=maker)
        data = expert_tool_dataset(transcripts, tokenizer, max_moves=recipe.warm_start_moves)
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
        per_device_train_batch_size=recipe.micro_batch or recipe.batch,
        gradient_accumulation_steps=recipe.batch // (recipe.micro_batch or recipe.batch),
        num_generations=recipe.group,
        max_completion_length=chosen.max_completion_length,
        max_tool_calling_iterations=chosen.max_tool_calls,
        temperature=1.0,
        beta=0.0,
        use_vllm=recipe.vllm,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        **common,
    )
    if args.rollouts == "batched":
        rollouts = episode_rollouts(maker, tokenizer)
        plug = dict(
            reward_funcs=[episode_reward], train_dataset=rollout_dataset(rows, maker), rollout_func=rollouts
        )  # fmt: skip
        tokenizer, reward_key = rollouts.tokenizer, "rewards/episode_reward/mean"
    else:
        plug = dict(train_dataset=trl_dataset(rows, maker), environment_factory=tool_env_factory(maker))
        reward_key = "rewards/SocialToolEnv/mean"
    trainer = GRPOTrainer(model=model, args=config, processing_class=tokenizer, peft_config=lora, **plug)
    trainer.train()
    # a model spec like any other: the adapter (and the tokenizer with its tool template) in out/adapter, and
    # sotopia_model.json recording ``prompt: tools`` (run, benchmark and the server play it through tool calls)
    save_adapter_spec(trainer, Path(args.out), recipe.model, TOOLS)
    for row in trainer.state.log_history:
        if reward_key in row:
            print(f"step {row['step']}: goal {row[reward_key]:.2f}")


if __name__ == "__main__":
    main()
