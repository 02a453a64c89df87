"""Answering and scoring a set of Social IQa items: accuracy with a 95% Wilson interval."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sotopia_env.training.rewards._text import Completion, check_aligned
from sotopia_env.training.rewards.socialiqa import (
    LETTERS,
    SocialIQaItem,
    SocialIQaRewardConfig,
    answer_score,
    format_score,
)
from sotopia_env.training.rewards.think_format import answer_block, check_format, parse_choice

Z_95 = 1.959963984540054


async def answer_socialiqa(
    backend: Any,
    items: Sequence[SocialIQaItem],
    *,
    regex: str | None = None,
    temperature: float = 0.0,
    max_new_tokens: int = 256,
    description: str = "socialiqa",
) -> list[Any]:
    """One completion per item (in order) from ``backend``, asked concurrently with a progress bar."""
    from sotopia_env.backends.base import ChatRequest
    from sotopia_env.episodes.progress import track
    from sotopia_env.training.rewards.socialiqa import build_prompt

    async def one(i: int, item: SocialIQaItem):
        request = ChatRequest(build_prompt(item), regex=regex, temperature=temperature, max_new_tokens=max_new_tokens)
        (completion,) = await backend.generate([request])
        return i, completion

    done = await track([one(i, item) for i, item in enumerate(items)], description=description)
    return [c for _, c in sorted(done, key=lambda pair: pair[0])]


def mean_interval(values: Sequence[float], z: float = Z_95) -> tuple[float, float]:
    """Normal-approximation 95% interval of a mean (the standard error from the sample's deviation)."""
    n = len(values)
    if n < 2:
        raise ValueError(f"need at least 2 values for an interval, got {n}")
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return (mean - z * sd / math.sqrt(n), mean + z * sd / math.sqrt(n))


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default)."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n > 0, got {successes}/{n}")
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def _item_result(
    index: int, item: SocialIQaItem, completion: Completion, config: SocialIQaRewardConfig
) -> dict[str, Any]:
    check = check_format(completion, config.format)
    prediction = parse_choice(answer_block(completion, config.format), LETTERS)
    return {
        "index": index,
        "label": item.answer_letter,
        "prediction": prediction,
        "correct": prediction == item.answer_letter,
        "format_valid": check.valid,
        "format_error": check.error,
        "reward": format_score(completion, config) + answer_score(completion, item.label, config),
    }


def evaluate_socialiqa(
    items: Sequence[SocialIQaItem],
    completions: Sequence[Completion],
    config: SocialIQaRewardConfig | None = None,
) -> dict[str, Any]:
    """Accuracy (with 95% Wilson interval), format-valid rate, mean reward and per-item results.

    ``completions[i]`` answers ``items[i]``. A missing or unparsable answer counts as wrong.
    """
    check_aligned(completions, items=items)
    if not items:
        raise ValueError("no items to evaluate")
    config = config or SocialIQaRewardConfig()
    results = [_item_result(i, it, c, config) for i, (it, c) in enumerate(zip(items, completions, strict=True))]
    n = len(results)
    correct = sum(r["correct"] for r in results)
    return {
        "n": n,
        "accuracy": correct / n,
        "accuracy_ci95": wilson_interval(correct, n),
        "format_valid_rate": sum(r["format_valid"] for r in results) / n,
        "format_valid_ci95": wilson_interval(sum(r["format_valid"] for r in results), n),
        "answer_missing_rate": sum(r["prediction"] is None for r in results) / n,
        "mean_reward": sum(r["reward"] for r in results) / n,
        "mean_reward_ci95": mean_interval([r["reward"] for r in results]) if n > 1 else (math.nan, math.nan),
        "items": results,
    }
