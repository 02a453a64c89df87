"""Prompt prefix caching for the local backend: keys and values of recent prompts, reused across calls.

An agent's prompt at turn N+1 starts with its prompt at turn N (the system message and the conversation so
far), so most of each prefill has been computed before. ``PrefixCache`` keeps the attention keys/values
of recent prompts (least recently used first out, within a byte budget) and finds, for a new prompt, the
stored prompt sharing the longest token prefix with it. ``assemble`` lays a batch out so that ``generate``
only runs the new part of each prompt::

    row i:  [pad ... | cached prefix (c_i tokens) | pad ... | new tokens (s_i)]
             `--------- C = max c_i ------------'  `------ S = max s_i -----'

with the cache holding each row's prefix keys/values right-aligned in its first C positions and the
attention mask zero over every pad. Position ids come from the mask's running sum (``generate`` does this),
so each new token gets the position it has in the whole prompt, and the cached keys (rotary embedding
already applied at those same positions) stay valid. After ``generate``, ``extract`` pulls each row's
whole-prompt keys/values out of the batch cache to store for the next turn.

Rows of one batch often share a prefix that nothing cached holds yet: the first turns of a GRPO group or of the
k sampled episodes of one instance are the same prompt, k times. ``shared_prefixes`` names those prefixes, so
that the backend prefills each once, stores it, and every row then finds it by ``lookup``.

Only models whose cache is plain full attention (no sliding window, no linear or indexed layers) qualify;
``supports`` tells.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class CachedPrompt:
    tokens: torch.Tensor  # 1-D token ids of the prompt
    keys: list[torch.Tensor]  # one [heads, len, head_dim] per layer
    values: list[torch.Tensor]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


@dataclass
class Hit:
    entry: CachedPrompt | None
    length: int  # tokens of the prompt whose keys/values come from ``entry``


MISS = Hit(None, 0)
SUPERSEDED_TAIL = 64  # a new prompt supersedes an entry it repeats all of but at most this many last tokens


def superseded(hit: Hit) -> list[CachedPrompt]:
    """The entry a prompt stored after ``hit`` makes redundant: the agent's previous prompt, which the new one
    repeats up to its last line. Not an entry that shares only a common opening (another agent's prompt, the
    same system template): dropping that one threw out every other agent's prompt just before its next turn."""
    entry = hit.entry
    if entry is None or hit.length < len(entry.tokens) - SUPERSEDED_TAIL:
        return []
    return [entry]


def new_cache(model: Any) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # transformers without config-shaped caches
        return DynamicCache()


def supports(model: Any) -> bool:
    """Whether the model's generation cache is one this module can fill and read (plain full attention)."""
    from transformers.cache_utils import DynamicLayer

    cache = new_cache(model)
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0]) if len(differ) else n


def shared_prefixes(prompts: list[torch.Tensor], hits: list[Hit], min_tokens: int) -> list[torch.Tensor]:
    """Prefixes that two or more rows share beyond what their hits hold (by ``min_tokens`` or more): each row
    joins the longest such prefix it shares with a row before it. Every prefix stops before its rows' last
    token, which must run to give the first logits."""
    out: list[torch.Tensor] = []
    taken = [False] * len(prompts)
    for i, prompt in enumerate(prompts):
        if taken[i]:
            continue
        shared = {
            j: min(common_prefix(prompt, prompts[j]), len(prompt) - 1, len(prompts[j]) - 1)
            for j in range(i + 1, len(prompts))
            if not taken[j]
        }
        best = max(shared.values(), default=0)
        members = [i, *(j for j, n in shared.items() if n == best)]
        if best - max(hits[m].length for m in members) < min_tokens:
            continue
        for m in members:
            taken[m] = True
        out.append(prompt[:best])
    return out


class PrefixCache:
    """Recent prompts' keys/values within ``max_bytes``; reused when a new prompt shares ``min_tokens`` or more."""

    def __init__(self, max_bytes: int, min_tokens: int = 16) -> None:
        self.max_bytes = max_bytes
        self.min_tokens = min_tokens
        self._entries: OrderedDict[int, CachedPrompt] = OrderedDict()
        self._next_id = 0
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, tokens: torch.Tensor) -> Hit:
        """The stored prompt sharing the longest prefix with ``tokens`` (at most all but the last token)."""
        best_id, best = None, 0
        for entry_id, entry in self._entries.items():
            length = common_prefix(entry.tokens, tokens)
            if length > best:
                best_id, best = entry_id, length
        best = min(best, len(tokens) - 1)  # the last prompt token must run to give the first logits
        if best_id is None or best < self.min_tokens:
            return MISS
        self._entries.move_to_end(best_id)
        return Hit(self._entries[best_id], best)

    def add(self, entry: CachedPrompt, replaces: list[CachedPrompt]) -> None:
        """Store ``entry``; ``replaces`` (the entries it was built from, whose prefixes it now holds) go."""
        for old in replaces:
            self._drop(old)
        if entry.nbytes > self.max_bytes:
            return
        self._entries[self._next_id] = entry
        self._next_id += 1
        self.nbytes += entry.nbytes
        while self.nbytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.nbytes -= evicted.nbytes

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0

    def _drop(self, entry: CachedPrompt) -> None:
        for entry_id, stored in self._entries.items():
            if stored is entry:
                del self._entries[entry_id]
                self.nbytes -= entry.nbytes
                return


@dataclass
class Layout:
    """Where each row's tokens sit in a batch built by ``assemble``."""

    input_ids: torch.Tensor  # [batch, C + S]
    attention_mask: torch.Tensor
    cached: int  # C
    lengths: list[int]  # whole-prompt tokens per row
    hits: list[Hit]

    @property
    def width(self) -> int:
        return int(self.input_ids.shape[1])


def assemble(model: Any, prompts: list[torch.Tensor], hits: list[Hit], pad_id: int) -> tuple[Layout, Any]:
    """The batch's input ids, attention mask and a cache pre-filled with each row's reused prefix."""
    device = next(model.parameters()).device
    rows = len(prompts)
    cached = max(h.length for h in hits)
    new = max(len(p) - h.length for p, h in zip(prompts, hits, strict=True))
    input_ids = torch.full((rows, cached + new), pad_id, dtype=torch.long)
    mask = torch.zeros((rows, cached + new), dtype=torch.long)
    for i, (prompt, hit) in enumerate(zip(prompts, hits, strict=True)):
        c, s = hit.length, len(prompt) - hit.length
        input_ids[i, cached - c : cached] = prompt[:c]
        mask[i, cached - c : cached] = 1
        input_ids[i, cached + new - s :] = prompt[c:]
        mask[i, cached + new - s :] = 1
    cache = new_cache(model)
    if cached:
        sample = next(h.entry for h in hits if h.entry is not None)
        for layer in range(len(sample.keys)):
            heads, _, dim = sample.keys[layer].shape
            shape = (rows, heads, cached, dim)
            keys = torch.zeros(shape, dtype=sample.keys[layer].dtype, device=device)
            values = torch.zeros(shape, dtype=sample.values[layer].dtype, device=device)
            for i, hit in enumerate(hits):
                if hit.entry is not None and hit.length:
                    keys[i, :, cached - hit.length :] = hit.entry.keys[layer][:, : hit.length]
                    values[i, :, cached - hit.length :] = hit.entry.values[layer][:, : hit.length]
            cache.update(keys, values, layer)
    layout = Layout(input_ids.to(device), mask.to(device), cached, [len(p) for p in prompts], hits)
    return layout, cache


def extract(cache: Any, layout: Layout, prompts: list[torch.Tensor]) -> list[CachedPrompt]:
    """Each row's whole-prompt keys/values, read back from the batch cache after ``generate``."""
    mask = layout.attention_mask[:, : layout.width].bool()
    out = []
    for i, prompt in enumerate(prompts):
        where = mask[i].nonzero().squeeze(1)
        keys = [layer.keys[i].index_select(1, where) for layer in cache.layers]
        values = [layer.values[i].index_select(1, where) for layer in cache.layers]
        out.append(CachedPrompt(prompt, keys, values))
    return out
