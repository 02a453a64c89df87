"""``benchmarks/memory_estimate.py``: the 7B recipes' GPU memory per component, checked by hand arithmetic."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import memory_estimate as me  # noqa: E402


def test_components_match_hand_arithmetic():
    qwen = me.ARCHITECTURES["Qwen/Qwen2.5-7B-Instruct"]
    # one layer's LoRA (r=1): q, k, v, o, gate, up, down = (3584+3584) + 2*(3584+512) + (3584+3584) + 3*(3584+18944)
    assert qwen.lora_params(1) == 28 * (7168 + 8192 + 7168 + 67584)
    stage = me.Stage("s", "Qwen/Qwen2.5-7B-Instruct", 16, 1000, 100, False, 0.25)
    rows = me.estimate(stage, 80)
    assert rows["weights (bf16)"] == pytest.approx(15.24)
    assert rows["logits"] == pytest.approx(100 * 152064 * 8 / 1e9)  # fp32 logits and their log-softmax
    assert rows["vLLM share"] == 20.0
    assert rows["total"] == pytest.approx(sum(v for k, v in rows.items() if k in me_components(rows)))
    assert rows["headroom"] == pytest.approx(80 - rows["total"])
    fused = me.estimate(me.Stage("s", "Qwen/Qwen2.5-7B-Instruct", 16, 1000, 10**6, True, 0.25), 80)
    assert fused["logits"] == pytest.approx(4096 * 32768 * 4 * 4 / 1e9)  # one tile's worth, whatever the tokens


def me_components(rows):
    return [k for k in rows if k not in ("total", "headroom", "vLLM KV cache tokens", "(logits if not fused)")]


def test_the_recipes_as_configured_and_the_fix():
    results = {s.name: me.estimate(s, 80) for s in me.stages(1100)}
    assert results["episode-grpo"]["headroom"] > 0
    assert results["trl-grpo (one micro-batch)"]["headroom"] < 0  # 64 x 2,124 tokens in one backward: no
    assert results["trl-grpo (the recipe: micro-batch 4)"]["headroom"] > 0
    assert results["trl-grpo (one micro-batch)"]["(logits if not fused)"] > 70  # 64 x 1,024 x 152k fp32, twice


def test_the_script_prints_the_table():
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "memory_estimate.py")], capture_output=True, text=True, check=True
    ).stdout
    assert "| fits | yes | NO | yes |" in out and "| weights (bf16) | 15.2 |" in out
