"""RSS growth of CPU bf16 training when every forward pass has a new length, with and without the trainers' cap on
oneDNN's per-shape caches (``training.model_setup.bound_cpu_bf16_caches``).

    python benchmarks/bf16_shape_cache.py               # 16 steps of 300-900 tokens per setting, 1 thread
    python benchmarks/bf16_shape_cache.py --quick       # 2 steps of 8-24 tokens (the smoke test)

Each setting runs in a fresh process (oneDNN reads its cache sizes once): SmolLM2-135M with a LoRA (r 8), a forward
and backward pass per step over one sequence, its length drawn anew each step (as episode GRPO's packed rows are)
or always the same; the growth is counted after a first step, which allocates what the others reuse. The RSS is
read after ``malloc_trim``, so what remains is what something keeps. Not a test: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import _common
from _common import machine_line, print_table

_ = _common

SETTINGS = {  # name: (bf16, lengths vary, cache entries or None for the trainers' default)
    "fp32, lengths vary": (False, True, None),
    "bf16, one length, oneDNN's default caches (1,024)": (True, False, "1024"),
    "bf16, lengths vary, oneDNN's default caches (1,024)": (True, True, "1024"),
    "bf16, lengths vary, the trainers' cap (128)": (True, True, None),
}


def rss_mb() -> float:
    from sotopia_env.training.rss import trim_heap

    trim_heap()
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def one(name: str, steps: int, shortest: int, longest: int) -> dict:
    import random

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from sotopia_env.embedded_models import resolve_model_path
    from sotopia_env.training.model_setup import ONEDNN_CACHE_VARIABLES, bound_cpu_bf16_caches, cpu_autocast

    bf16, vary, entries = SETTINGS[name]
    if entries is not None:
        os.environ.update(dict.fromkeys(ONEDNN_CACHE_VARIABLES, entries))
    elif bf16:
        bound_cpu_bf16_caches()
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path("smollm2-135m"))
    model = get_peft_model(model, LoraConfig(r=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    model.train()

    def train_step(length: int) -> None:
        ids = torch.randint(0, 40_000, (1, length))
        with cpu_autocast(bf16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        model.zero_grad(set_to_none=True)

    middle = (shortest + longest) // 2
    train_step(middle)  # allocates what every step reuses: the growth is counted after it
    rng = random.Random(0)
    start, t0 = rss_mb(), time.perf_counter()
    for _ in range(steps):
        train_step(rng.randrange(shortest, longest) if vary else middle)
    return {"start": start, "end": rss_mb(), "seconds": time.perf_counter() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a setting, in its own process
    args = parser.parse_args()
    shortest, longest = (8, 24) if args.quick else (300, 900)
    steps = 2 if args.quick else args.steps
    if args.one:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(one(args.one, steps, shortest, longest)))
        return
    rows = []
    for name in SETTINGS:
        command = [sys.executable, __file__, "--one", name, "--steps", str(steps), "--threads", str(args.threads)]
        done = subprocess.run(command + (["--quick"] if args.quick else []), capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{name}: {done.stderr.strip().splitlines()[-1]}")
        r = json.loads(done.stdout.strip().splitlines()[-1])
        growth = r["end"] - r["start"]
        rows.append([name, f"{r['start']:,.0f}", f"{r['end']:,.0f}", f"{growth:+,.0f}", f"{r['seconds']:.1f}"])
    print_table(
        f"RSS over {steps} training steps of one sequence ({shortest}-{longest} tokens), SmolLM2-135M + LoRA",
        ["setting", "RSS after a first step (MiB)", f"after {steps} more", "growth", "seconds"],
        rows,
        note=f"{args.threads} torch thread(s); {machine_line()}",
    )


if __name__ == "__main__":
    main()
