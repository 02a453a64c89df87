"""Training on sequences that share a prompt prefix, with the prefix run once.

Every policy turn of one group (the same start, the same seat) opens with the same ~400 tokens: the system
message and the scenario. The rest is the conversation so far, the ask and the ~40 sampled tokens. Run one at
a time, a GRPO update spends more than 90% of its compute on prompt tokens, most of them this shared prefix.

``prefix_batches`` groups a step's samples by the prefix they share. ``forward_with_prefix`` runs the prefix
once (with gradients), repeats its keys/values for each sequence (a view: the gradient of every sequence
flows back into the one prefix pass) and runs each sequence's rest after it. The logits are those of running
each whole sequence alone, up to float rounding. So the loss and its gradient are unchanged; only the work is
less.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")

MIN_SHARED = 64  # a prefix shorter than this is not worth a pass of its own


def cache_kwarg(model: Any) -> str:
    """The name the model's forward takes its cache by (transformers 5 renamed ``past_key_values`` to ``cache``),
    seen through a PEFT wrapper."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def prefix_batches(
    items: Sequence[T], prompt_of: Any, most: int, min_shared: int = MIN_SHARED
) -> list[tuple[int, list[T]]]:
    """``items`` in batches of at most ``most``, each with the prompt prefix all its members share (0: none worth
    sharing, then the batch has one item). ``prompt_of(item)`` gives an item's prompt ids. A prefix stops one
    token short of its shortest prompt, so that every member has a prompt token of its own to predict its first
    completion token from. Items are ordered by prompt, so those of one start end up together."""
    order = sorted(items, key=lambda item: list(prompt_of(item)))
    batches: list[tuple[int, list[T]]] = []
    for item in order:
        prompt = prompt_of(item)
        if batches and len(batches[-1][1]) < most:
            shared, members = batches[-1]
            first = prompt_of(members[0])
            length = min(common_length(first, prompt), len(first) - 1, len(prompt) - 1)
            if len(members) > 1:
                length = min(length, shared)
            if length >= min_shared:
                batches[-1] = (length, [*members, item])
                continue
        batches.append((0, [item]))
    return batches


def forward_with_prefix(
    model: Any, prefix_ids: Sequence[int], input_ids: Any, attention_mask: Any, position_ids: Any, logits_to_keep: int
) -> Any:
    """The logits of ``input_ids`` (a left-padded batch, positions counted from 0) continuing ``prefix_ids``:
    the prefix runs once, its keys/values are repeated for every row, then the batch runs after it."""
    import torch

    rows = input_ids.shape[0]
    prefix = torch.tensor([list(prefix_ids)], dtype=input_ids.dtype, device=input_ids.device)
    kwarg = cache_kwarg(model)
    cache = model(input_ids=prefix, use_cache=True, logits_to_keep=1).cache
    if cache is None:
        raise RuntimeError("the model returned no cache for the shared prefix (gradient checkpointing is on?)")
    for layer in cache.layers:
        layer.keys = layer.keys.expand(rows, -1, -1, -1)
        layer.values = layer.values.expand(rows, -1, -1, -1)
    ones = torch.ones(rows, len(prefix_ids), dtype=attention_mask.dtype, device=attention_mask.device)
    return model(
        input_ids=input_ids,
        attention_mask=torch.cat([ones, attention_mask], dim=1),
        position_ids=position_ids + len(prefix_ids),
        use_cache=True,
        logits_to_keep=logits_to_keep,
        **{kwarg: cache},
    ).logits
