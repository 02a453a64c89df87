"""Training on sequences that share a prompt prefix, with the prefix run once.

Every policy turn of one group (the same start, the same seat) opens with the same ~400 tokens: the system
message and the scenario. The rest is the conversation so far, the ask and the ~40 sampled tokens. Run one at
a time, a GRPO update spends more than 90% of its compute on prompt tokens, most of them this shared prefix.

``prefix_batches`` groups a step's samples by the prefix they share. ``packed_logprobs`` runs such a group as
one packed row, ``[prefix][rest 1][rest 2]...``, with a block mask: the prefix attends causally to itself, and
each rest to the prefix and to its own earlier tokens, at the positions it has in its whole sequence. No
padding and no cache: the prefix runs once (its gradient gathers every sequence's), and each token's logits are
those of its sequence run alone, up to float rounding. So the loss and its gradient are unchanged; only the work
is less.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")

MIN_SHARED = 64  # a prefix shorter than this is not worth a pass of its own


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
    order = sorted(items, key=prompt_of)  # lists of ids compare lexicographically
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


def packed_logprobs(
    model: Any, samples: Sequence[Any], shared: int, temperature: float, width: int, with_entropy: bool = False
) -> tuple[Any, Any]:
    """Log-probabilities, at ``temperature``, of every sample's completion ids (``prompt_ids`` + ``completion_ids``;
    all share their first ``shared`` prompt ids), laid out as ``episode_grpo.pack`` lays them: [samples, width],
    each completion right-aligned, zeros before it. And their entropy (None unless asked)."""
    import torch

    prefix = list(samples[0].prompt_ids[:shared])
    ids, positions, owner, keep, targets = list(prefix), list(range(shared)), [-1] * shared, [], []
    for row, sample in enumerate(samples):
        rest = list(sample.prompt_ids[shared:]) + list(sample.completion_ids)
        start, completion = len(ids), len(sample.completion_ids)
        ids += rest
        positions += range(shared, shared + len(rest))
        owner += [row] * len(rest)
        keep += range(start + len(rest) - completion - 1, start + len(rest) - 1)  # each predicts the next id
        targets += sample.completion_ids
    device = model.device if hasattr(model, "device") else None
    owners = torch.tensor(owner, device=device)
    order = torch.arange(len(ids), device=device)
    visible = (order[None, :] <= order[:, None]) & ((owners[None, :] == -1) | (owners[None, :] == owners[:, None]))
    logits = model(
        input_ids=torch.tensor([ids], device=device),
        attention_mask=visible[None, None],  # 4-D: used as given (True: attend)
        position_ids=torch.tensor([positions], device=device),
        logits_to_keep=torch.tensor(keep, device=device),
    ).logits[0]
    logp, entropy = scored(logits, torch.tensor(targets, device=logits.device), temperature, with_entropy)
    return _right_aligned(logp, samples, width), None if entropy is None else _right_aligned(entropy, samples, width)


def scored(logits: Any, targets: Any, temperature: float, with_entropy: bool) -> tuple[Any, Any]:
    """The log-probabilities of ``targets`` under ``logits`` at ``temperature`` (same shape as ``targets``), and
    the distributions' entropy, detached (None unless asked)."""
    import torch

    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1).detach() if with_entropy else None
    return logp, entropy


def _right_aligned(flat: Any, samples: Sequence[Any], width: int) -> Any:
    """[sum of completions] as [samples, width], each sample's values at the end of its row, zeros before."""
    import torch

    rows, start = [], 0
    for sample in samples:
        n = len(sample.completion_ids)
        rows.append(torch.cat([flat.new_zeros(width - n), flat[start : start + n]]))
        start += n
    return torch.stack(rows)
