"""GPU memory per stage of the 7B recipes, from their configs, before renting a GPU.

    python benchmarks/memory_estimate.py [--gpu-gb 80] [--prompt-tokens 1100] [--json]

Two stages, each as its config sets it:

- ``episode-grpo``: ``examples/grpo-episodes-7b-gpu.yaml`` (our loop; vLLM serves the rollouts beside it);
- ``trl-grpo``: ``examples/trl_grpo.py --recipe 7b-gpu`` (TRL's ``GRPOTrainer``, vLLM colocated), as the recipe
  is (one micro-batch of the whole generation batch) and with the micro-batch it needs.

Every row is an estimate in GB (10^9 bytes) of one component: the frozen bf16 weights, the LoRA (fp32 weights,
gradients and AdamW's two moments: 16 bytes a parameter), the activations under gradient checkpointing (each
layer's input kept, and one layer's working set while it is recomputed: ``6 * hidden + 4 * intermediate`` values
a token), the logits of the scored positions (fp32: the plain path holds them and their log-softmax; a fused LM
head holds one ``4096 x 32768`` tile and its temporaries), vLLM's share (``gpu_memory_utilization`` of the card:
its own copy of the weights plus the KV cache), and a fixed 3 GB of CUDA context and allocator slack. The model's
shape comes from a local ``config.json`` when the model is a directory, else from ``ARCHITECTURES``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
GB = 1e9
CONTEXT_GB = 3.0  # CUDA context, cuBLAS workspaces, allocator fragmentation
FUSED_TILE = (4096, 32768)  # TRL's fused LM head: tokens x vocabulary per fp32 tile (trl/kernels/chunked_logprob.py)
FUSED_TEMPORARIES = 4  # tiles alive at once in the fused head (the tile, its exp, the gradient, a reduction)


@dataclass(frozen=True)
class Arch:
    params: float
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def lora_params(self, rank: int) -> int:
        """LoRA on every linear layer (``all-linear``): rank x (in + out) per projection."""
        kv = self.kv_heads * self.head_dim
        h, i = self.hidden, self.intermediate
        per_layer = (h + h) + (h + kv) * 2 + (h + h) + (h + i) * 2 + (i + h)
        return rank * per_layer * self.layers

    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * 2  # K and V, bf16


ARCHITECTURES = {  # from the models' config.json (no hub here)
    "Qwen/Qwen2.5-7B-Instruct": Arch(7.62e9, 28, 3584, 18944, 28, 4, 152064),
}


def arch_of(model: str) -> Arch:
    config = Path(model) / "config.json"
    if config.is_file():
        c = json.loads(config.read_text())
        h, i, n, v = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
        kv = c.get("num_key_value_heads", c["num_attention_heads"])
        head = h // c["num_attention_heads"]
        params = n * (h * h * 2 + 2 * h * kv * head + 3 * h * i) + v * h * (1 if c.get("tie_word_embeddings") else 2)
        return Arch(params, n, h, i, c["num_attention_heads"], kv, v)
    if model not in ARCHITECTURES:
        raise SystemExit(f"memory_estimate: {model!r} is neither a model directory nor one of {sorted(ARCHITECTURES)}")
    return ARCHITECTURES[model]


@dataclass
class Stage:
    """One training stage's shape: what is on the GPU at its peak (the backward pass of one micro-batch)."""

    name: str
    model: str
    lora_rank: int
    micro_tokens: int  # tokens in one forward/backward (prompt and completion)
    scored_tokens: int  # positions whose log-probability is computed in that micro-batch
    fused_head: bool  # a chunked LM head (no [tokens, vocab] logits)
    vllm_utilization: float
    note: str = ""


def estimate(stage: Stage, gpu_gb: float) -> dict[str, float]:
    """The stage's components in GB, their total, and the GPU's headroom."""
    a = arch_of(stage.model)
    if stage.fused_head:
        logits = FUSED_TILE[0] * FUSED_TILE[1] * 4 * FUSED_TEMPORARIES / GB
    else:
        logits = stage.scored_tokens * a.vocab * 4 * 2 / GB  # fp32 logits and their log-softmax
    rows = {
        "weights (bf16)": a.params * 2 / GB,
        "LoRA + grads + AdamW": a.lora_params(stage.lora_rank) * 16 / GB,
        "activations (checkpointed)": stage.micro_tokens * a.hidden * 2 * a.layers / GB
        + stage.micro_tokens * (6 * a.hidden + 4 * a.intermediate) * 2 / GB,
        "logits": logits,
        "vLLM share": stage.vllm_utilization * gpu_gb,
        "CUDA context": CONTEXT_GB,
    }
    rows["total"] = sum(rows.values())
    rows["(logits if not fused)"] = stage.scored_tokens * a.vocab * 4 * 2 / GB  # not in the total
    rows["headroom"] = gpu_gb - rows["total"]
    rows["vLLM KV cache tokens"] = max(0.0, stage.vllm_utilization * gpu_gb - rows["weights (bf16)"]) * GB
    rows["vLLM KV cache tokens"] /= a.kv_bytes_per_token()
    return rows


def trl_recipe() -> tuple[int, int, int, int, str, int]:
    """``examples/trl_grpo.py``'s 7B recipe: (batch, completion tokens, LoRA rank, moves, model, micro-batch)."""
    spec = importlib.util.spec_from_file_location("trl_grpo_example", ROOT / "examples" / "trl_grpo.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    recipe = module.RECIPES["7b-gpu"]
    moves = 4  # a verifiable episode of 8 turns: 4 moves of the policy's seat
    completion = moves * (recipe.move_tokens + module.ANSWER_TOKENS)
    return recipe.batch, completion, recipe.lora_r, moves, recipe.model, recipe.micro_batch or recipe.batch


def stages(prompt_tokens: int) -> list[Stage]:
    config = yaml.safe_load((ROOT / "examples" / "grpo-episodes-7b-gpu.yaml").read_text())
    util = float(config["rollout_server"]["command"].split("--gpu-memory-utilization")[1].split()[0])
    prefix = int(config["prefix_batch"])
    completion = int(config["max_completion_length"])
    episode = Stage(
        "episode-grpo", config["base_model"], int(config["lora_r"]), prompt_tokens + prefix * completion,
        prefix * (completion + 1), False, util,
        f"{prefix} turns share one prompt prefix ({prompt_tokens} tokens), {completion} completion tokens each",
    )  # fmt: skip
    batch, completion, rank, moves, model, micro = trl_recipe()
    length = prompt_tokens + completion
    trl_as_is = Stage(
        "trl-grpo (one micro-batch)", model, rank, batch * length, batch * completion, True, 0.3,
        f"per_device_train_batch_size {batch} in one micro-batch, {length} tokens each (TRL 1.16 fuses the LM head)",
    )  # fmt: skip
    trl_fit = Stage(
        f"trl-grpo (the recipe: micro-batch {micro})", model, rank, micro * length, micro * completion, True, 0.3,
        f"per_device_train_batch_size {micro}, gradient_accumulation_steps {batch // micro} (the same {batch} "
        "rollouts a step), TRL's fused LM head",
    )  # fmt: skip
    return [episode, trl_as_is, trl_fit]


def table(results: list[tuple[Stage, dict[str, float]]], gpu_gb: float) -> str:
    names = list(results[0][1])
    head = "| component | " + " | ".join(s.name for s, _ in results) + " |"
    lines = [f"Memory estimate on one {gpu_gb:g} GB GPU (GB)", "", head, "|" + " --- |" * (len(results) + 1)]
    for name in names:
        fmt = "{:,.0f}" if name.endswith("tokens") else "{:.1f}"
        lines.append(f"| {name} | " + " | ".join(fmt.format(r[name]) for _, r in results) + " |")
    lines.append("| fits | " + " | ".join("yes" if r["headroom"] > 0 else "NO" for _, r in results) + " |")
    lines += ["", *(f"- {s.name}: {s.note}" for s, _ in results)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu-gb", type=float, default=80.0)
    parser.add_argument("--prompt-tokens", type=int, default=1100, help="the opening (1,063-1,074 tokens measured)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [(s, estimate(s, args.gpu_gb)) for s in stages(args.prompt_tokens)]
    if args.json:
        print(json.dumps([{"stage": asdict(s), "gb": r} for s, r in results], indent=1))
    else:
        print(table(results, args.gpu_gb))


if __name__ == "__main__":
    main()
