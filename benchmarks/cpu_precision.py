"""One training step on the CPU, fp32 against bf16 autocast: SmolLM2-135M with a LoRA (r 8), forward and backward
over ``--rows`` sequences of ``--tokens`` tokens, one at a time (episode GRPO's micro-batches of one).

    python benchmarks/cpu_precision.py                 # 4 x 700 tokens, 2 repeats, the CPU's threads
    python benchmarks/cpu_precision.py --quick         # 1 x 16 tokens, once (the smoke test)

Also prints whether this CPU computes bf16 natively (``training.model_setup.cpu_bf16_native``), which is what
``bf16`` unset decides by on a CPU. Not a test: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import _common
from _common import machine_line, print_table

_ = _common


def step_seconds(model, batches, bf16: bool) -> float:
    from sotopia_env.training.model_setup import cpu_autocast

    t0 = time.perf_counter()
    for ids in batches:
        with cpu_autocast(bf16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=700)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.tokens, args.repeats = 1, 16, 1
    import torch
    from peft import LoraConfig, get_peft_model

    from sotopia_env.embedded_models import resolve_model_path
    from sotopia_env.training.model_setup import cpu_bf16_native, load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_model(resolve_model_path("smollm2-135m"), bf16=False, qlora=False, gradient_checkpointing=False)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=32, task_type="CAUSAL_LM"))
    model.train()
    torch.manual_seed(0)
    batches = [torch.randint(100, 40000, (1, args.tokens)) for _ in range(args.rows)]
    step_seconds(model, batches[:1], False)  # warm-up
    rows = []
    times = {}
    for bf16 in (False, True):
        times[bf16] = statistics.median(step_seconds(model, batches, bf16) for _ in range(args.repeats))
        rows.append(["bf16 autocast" if bf16 else "fp32", f"{times[bf16]:.2f} s", f"{times[False] / times[bf16]:.2f}x"])
    print_table(
        f"One LoRA training step on the CPU ({args.rows} x {args.tokens} tokens, forward + backward)",
        ["precision", "step", "speed vs fp32"],
        rows,
        note=f"native bf16 on this CPU: {cpu_bf16_native()}; {torch.get_num_threads()} threads; {machine_line()}",
    )


if __name__ == "__main__":
    main()
