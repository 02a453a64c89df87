"""The GPU smoke test's three stages in one table: generation, 2 steps of episode GRPO, 2 steps through TRL's
environment (``GRPOTrainer(environment_factory=...)``, ``training/trl_env.py``).

The TRL stage's generations are constrained to a tool call (``ToolCallMask``: an xgrammar regex of the chat
template's ``<tool_call>{"name": "speak", "arguments": {"words": ...}}</tool_call>``, the words free within a
bound), so even random weights call the environment's tools and the tool path runs (TRL parses the call, the
environment moves, the partner answers); the stage fails when TRL counted no tool call.

    python benchmarks/gpu_smoke.py --shape DIR [--out OUT] [--cpu]
    python benchmarks/gpu_smoke.py --prepare DIR    # here: DIR gets SmolLM2-135M's config and tokenizer, no weights

The model is SmolLM2-135M's architecture (``--shape``: its ``config.json`` and tokenizer files) with random weights
(seed 0): same compute as the embedded model, nothing downloaded, but what it says is noise, so rewards and episode
lengths are not the trained model's (the table says so). ``--model DIR`` uses real weights instead. Each stage runs
in its own process under ``--stage-timeout`` (a hang or crash leaves the other rows), writes ``OUT/<stage>.json``,
and the table is printed from those. ``--cpu``: tiny sizes (2 layers, 64 wide; short episodes), the dry run the
tests make on a CPU.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STAGES = ("generation", "episode_grpo", "trl_env")
SHAPE_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)


def prepare(dest: Path) -> None:
    """``dest``: the embedded SmolLM2-135M's config and tokenizer files (about 3.5 MB), without its weights."""
    from sotopia_env.embedded_models import resolve_model_path

    source = Path(resolve_model_path("smollm2-135m"))
    dest.mkdir(parents=True, exist_ok=True)
    for name in SHAPE_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, dest / name)
    print(f"{dest}: {', '.join(sorted(p.name for p in dest.iterdir()))}")


def build_random_model(shape: Path, dest: Path, tiny: bool) -> None:
    """``shape``'s architecture with random weights (seed 0) and its tokenizer, saved in ``dest``; ``tiny``: 2
    layers, 64 wide (the CPU dry run)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(shape)
    if tiny:
        config.num_hidden_layers, config.hidden_size, config.intermediate_size = 2, 64, 128
        config.num_attention_heads, config.num_key_value_heads, config.head_dim = 4, 2, 16
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(dest)
    for name in SHAPE_FILES:
        if name != "config.json" and (shape / name).is_file():
            shutil.copy2(shape / name, dest / name)


# -- the stages (each in its own process) --------------------------------------------------------------------------


def _reset_peak() -> None:
    import torch

    from sotopia_env.training.rss import reset_peak_rss

    reset_peak_rss()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def _peak_memory() -> str:
    """Peak GPU memory allocated by torch in this process, else the process's peak RSS."""
    import torch

    from sotopia_env.training.rss import peak_rss_mb

    if torch.cuda.is_available():
        return f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB GPU"
    return f"{peak_rss_mb() / 1024:.2f} GiB RSS"


def stage_generation(model: str, tiny: bool) -> dict[str, Any]:
    """A batch of chat requests through the local backend (the one episode rollouts use): warm-up, then timed."""
    from sotopia_env.backends.base import ChatRequest
    from sotopia_env.backends.local import LocalBackend
    from sotopia_env.training.model_setup import weights_placement

    batch, new_tokens, rounds = (4, 8, 1) if tiny else (64, 128, 2)
    backend = LocalBackend.from_spec(model, max_batch_size=batch)
    messages = [
        {"role": "system", "content": "You are Ana, a shopper haggling over a used bike. Keep it short."},
        {"role": "user", "content": "Sam: It's yours for 200, and that's a fair price."},
    ]
    requests = [ChatRequest(messages, temperature=1.0, max_new_tokens=new_tokens, seed=i) for i in range(batch)]
    backend.generate_now(requests[:2])  # warm-up: kernels, caches
    _reset_peak()
    times, tokens = [], 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        done = backend.generate_now(requests)
        times.append(time.perf_counter() - t0)
        errors = [c.error for c in done if c.error]
        if errors:
            raise RuntimeError(f"generation failed: {errors[0]}")
        tokens += sum(c.completion_tokens for c in done)
    placement = weights_placement(backend.lm)
    backend.close()
    return {
        "step_s": sum(times) / len(times),
        "tokens_per_s": tokens / sum(times),
        "peak_memory": _peak_memory(),
        "placement": placement,
        "what": f"{rounds} batches of {batch} requests, {new_tokens} new tokens each (local backend)",
    }


def stage_episode_grpo(model: str, tiny: bool, work: Path) -> dict[str, Any]:
    """2 steps of our own episode GRPO against the rule partner, rated by the exact judge."""
    from sotopia_env.training.episode_grpo import EpisodeGRPOConfig, train_episode_grpo

    sizes = dict(group_size=2, groups_per_step=1, max_turns=4, max_completion_length=24) if tiny else {}
    config = EpisodeGRPOConfig(
        base_model=model,
        output_dir=str(work / "episode-grpo"),
        max_steps=2,
        **({"group_size": 4, "groups_per_step": 4, "max_turns": 6, "max_completion_length": 64} | sizes),
        dynamic_sampling=False,  # the same compute each step
        evaluator="rule-based",  # random weights win no verifiable goal; this offline judge still varies
        turn_reward=-0.1,
        qlora=False,
        progress=False,
        save_steps=1000,
    )
    shutil.rmtree(config.output_dir, ignore_errors=True)  # (a run left there would be resumed)
    _reset_peak()
    result = train_episode_grpo(config)
    seconds = sum(row["seconds"] for row in result.log)
    return {
        "step_s": seconds / len(result.log),
        "tokens_per_s": sum(row["tokens"] for row in result.log) / seconds,
        "peak_memory": _peak_memory(),
        "placement": result.placement,
        "what": (
            f"{len(result.log)} steps of {config.groups_per_step}x{config.group_size} episodes; rollout/update s: "
            + ", ".join(f"{row['rollout_seconds']}/{row['update_seconds']}" for row in result.log)
            + "; tokens/s: trained completion tokens per step second"
        ),
    }


TOOL_CALL_REGEX = r'<tool_call>\n\{"name": "speak", "arguments": \{"words": "[A-Za-z ,.!?]{1,24}"\}\}\n</tool_call>'


def tool_call_generate(policy: Any, tokenizer: Any) -> None:
    """Make every ``policy.generate`` (TRL's, under its tool loop) emit one tool call: constrained decoding by
    ``TOOL_CALL_REGEX`` with xgrammar, then the end of the turn."""
    import xgrammar as xgr
    from transformers import LogitsProcessor, LogitsProcessorList

    vocab = policy.config.vocab_size
    stop = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id]
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab, stop_token_ids=sorted(set(stop)))
    grammar = xgr.GrammarCompiler(info).compile_regex(TOOL_CALL_REGEX)

    class ToolCallMask(LogitsProcessor):
        def __init__(self, rows: int) -> None:
            self.matchers = [xgr.GrammarMatcher(grammar) for _ in range(rows)]
            self.bitmask = xgr.allocate_token_bitmask(rows, vocab)
            self.step = 0

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            active = []
            for i, matcher in enumerate(self.matchers):
                if self.step and not matcher.is_terminated() and not matcher.accept_token(int(input_ids[i, -1])):
                    continue  # the row has stopped (padding follows)
                if not matcher.is_terminated():
                    matcher.fill_next_token_bitmask(self.bitmask, i)
                    active.append(i)
            self.step += 1
            if active:
                xgr.apply_token_bitmask_inplace(
                    scores, self.bitmask.to(scores.device), vocab_size=vocab, indices=active
                )
            return scores

    plain = policy.generate

    def generate(*args: Any, **kwargs: Any) -> Any:
        rows = (kwargs.get("input_ids") if "input_ids" in kwargs else args[0]).shape[0]
        kwargs["logits_processor"] = LogitsProcessorList([ToolCallMask(rows)])
        return plain(*args, **kwargs)

    policy.generate = generate


def stage_trl_env(model: str, tiny: bool, work: Path) -> dict[str, Any]:
    """2 steps of TRL's GRPOTrainer with our worlds as its ``environment_factory`` (a LoRA; TRL places the model),
    every generation constrained to a tool call (``tool_call_generate``)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from sotopia_env.training.model_setup import weights_placement
    from sotopia_env.training.seat_rows import SessionMaker, seat_rows, trl_dataset
    from sotopia_env.training.trl_env import tool_chat_template, tool_env_factory

    cuda = torch.cuda.is_available()
    tokenizer = tool_chat_template(AutoTokenizer.from_pretrained(model))
    policy = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16 if cuda else torch.float32)
    maker = SessionMaker()
    rows = seat_rows("verifiable:train", library=maker.library)
    tool_call_generate(policy, tokenizer)
    episodes: list[float | None] = []
    batch, group, length, calls = (2, 2, 96, 2) if tiny else (8, 4, 192, 4)
    args = GRPOConfig(
        output_dir=str(work / "trl-env"), max_steps=2, learning_rate=1e-4, per_device_train_batch_size=batch,
        num_generations=group, max_completion_length=length, max_tool_calling_iterations=calls, temperature=1.0,
        beta=0.0, logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True, bf16=cuda,
        use_cpu=not cuda, seed=0,
    )  # fmt: skip

    class StepTimes(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_step_begin(self, *_: Any, **__: Any) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            self.times.append(time.perf_counter() - self.t0)

    timer = StepTimes()
    trainer = GRPOTrainer(
        model=policy,
        args=args,
        train_dataset=trl_dataset(rows, maker),
        processing_class=tokenizer,
        peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"),
        environment_factory=tool_env_factory(maker, lambda _log, reward: episodes.append(reward)),
        callbacks=[timer],
    )
    _reset_peak()
    trainer.train()
    tokens = max((row.get("num_tokens", 0) for row in trainer.state.log_history), default=0)
    per_rollout = [row["tools/call_frequency"] for row in trainer.state.log_history if "tools/call_frequency" in row]
    tool_calls = round(sum(per_rollout) * batch)
    if tool_calls < 1:
        raise RuntimeError("TRL counted no tool call: the tool path did not run")
    return {
        "step_s": sum(timer.times) / len(timer.times),
        "tokens_per_s": tokens / sum(timer.times),
        "peak_memory": _peak_memory(),
        "placement": weights_placement(trainer.model),
        "what": (
            f"{len(timer.times)} steps of {batch} rollouts ({group} per start), {tool_calls} tool calls (constrained), "
            f"{len(episodes)} episodes ended; tokens/s: TRL's num_tokens (prompts and completions)"
        ),
    }


def run_stage(name: str, model: str, tiny: bool, out: Path, work: Path) -> None:
    row: dict[str, Any] = {"stage": name}
    try:
        if name == "generation":
            row |= stage_generation(model, tiny)
        elif name == "episode_grpo":
            row |= stage_episode_grpo(model, tiny, work)
        else:
            row |= stage_trl_env(model, tiny, work)
    except Exception as exc:  # the row says what broke; the other stages still run
        row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        import traceback

        traceback.print_exc()
    (out / f"{name}.json").write_text(json.dumps(row, indent=1))


# -- the table --------------------------------------------------------------------------------------------------


def print_results(out: Path, stages: list[str], weights: str) -> bool:
    """The one table, from each stage's ``OUT/<stage>.json``; whether every stage gave a row."""
    importlib.import_module("sotopia_env")  # the installed package first: _common puts the repo root on sys.path
    from _common import machine_line, print_table

    rows, ok = [], True
    for name in stages:
        path = out / f"{name}.json"
        row = json.loads(path.read_text()) if path.is_file() else {"error": "no result (timed out or killed)"}
        if "error" in row:
            ok = False
            rows.append([name, "-", "-", "-", "-", f"FAILED: {row['error']}"])
        else:
            rows.append([name, row["step_s"], row["tokens_per_s"], row["peak_memory"], row["placement"], row["what"]])
    import torch

    gpu = f"; GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}" if torch.cuda.is_available() else ""
    columns = ["stage", "step s", "tokens/s", "peak memory", "device dtype", "what"]
    print_table(f"GPU smoke test: {weights}", columns, rows, note=machine_line() + gpu)
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", type=Path, help="write SmolLM2-135M's config and tokenizer here, then stop")
    parser.add_argument("--shape", type=Path, help="a model dir's config and tokenizer: random weights of it")
    parser.add_argument("--model", help="a model spec with real weights instead of --shape")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-smoke")), help="the results")
    parser.add_argument("--work", type=Path, help="the random model and training outputs (default: --out)")
    parser.add_argument("--cpu", action="store_true", help="the dry run: tiny sizes, on the CPU")
    parser.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, of {', '.join(STAGES)}")
    parser.add_argument("--stage-timeout", type=int, default=150, help="seconds each stage may take")
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)  # one stage, in a child process
    args = parser.parse_args()
    if args.prepare:
        prepare(args.prepare)
        return
    if args.cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    work = args.work or args.out
    args.out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    if args.stage:
        run_stage(args.stage, args.model, args.cpu, args.out, work)
        return
    if args.model:
        model, weights = args.model, f"{args.model} (its own weights)"
    elif args.shape:
        model = str(work / "random-model")
        build_random_model(args.shape, Path(model), args.cpu)
        size = "2 layers, 64 wide (--cpu)" if args.cpu else "full size"
        weights = f"{args.shape.name}'s architecture, {size}, RANDOM weights (no hub here): timings only"
    else:
        parser.error("give --shape (random weights of that architecture) or --model")
    stages = [s for s in args.stages.split(",") if s]
    for name in stages:
        (args.out / f"{name}.json").unlink(missing_ok=True)
        command = [
            sys.executable,
            __file__,
            "--stage",
            name,
            "--model",
            model,
            "--out",
            str(args.out),
            "--work",
            str(work),
        ]
        t0 = time.perf_counter()
        try:
            rc = subprocess.run(command + (["--cpu"] if args.cpu else []), timeout=args.stage_timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        print(f"== {name}: exit {rc} after {time.perf_counter() - t0:.0f} s", flush=True)
    sys.exit(0 if print_results(args.out, stages, weights) else 1)


if __name__ == "__main__":
    main()
