"""Keys and values of the rows that the continuous-batching scheduler decodes, one slot per row.

Every layer keeps one buffer of shape [slots, kv_heads, capacity, head_dim]. A row owns a slot; its token at
position p sits in column p, so a row never moves as it grows (nothing is re-concatenated per step, as a
``DynamicCache`` does) and rows of any lengths share one buffer. The rows being stepped always hold the first
slots (``free`` moves the last row into a freed slot: one row's copy), so each forward reads a plain slice
``buffer[start:stop, :, :width]``, ``width`` being the longest row's length. Columns past a row's length hold
stale values that its attention mask never reads.

``update`` is what the model's attention layers call: it writes each new key/value at the column set by
``prepare`` (per row and query) and returns the slice. The scheduler builds the 4-D attention mask itself
(``mask``): transformers uses a 4-D mask as given, so no cache length bookkeeping is needed.

The buffer grows by doubling, when a row needs more columns or slots than it has (one copy of what is used,
rare); ``bytes_for`` lets the scheduler keep it within its budget before admitting a row.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer

GROWTH_COLUMNS = 256  # capacity grows in whole multiples of this


class SlotLayer(DynamicLayer):
    """One layer's slot buffer. A ``DynamicLayer`` to transformers (full attention), written in place."""

    def __init__(self, owner: SlotCache) -> None:
        super().__init__()
        self.owner = owner
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        owner = self.owner
        self.make_room(key_states, value_states)
        assert self.keys is not None and self.values is not None
        rows, columns = owner.write_rows, owner.write_columns  # [batch, queries] each
        self.keys[rows, :, columns] = key_states.transpose(1, 2).to(self.keys.dtype)
        self.values[rows, :, columns] = value_states.transpose(1, 2).to(self.values.dtype)
        start, stop = owner.rows
        return self.keys[start:stop, :, : owner.width], self.values[start:stop, :, : owner.width]

    def make_room(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Grow the buffers (shaped and typed like ``key_states``) to the owner's slots and capacity, if short."""
        owner = self.owner
        if self.keys is not None and self.keys.shape[0] >= owner.slots and self.keys.shape[2] >= owner.capacity:
            return
        self._grow(key_states, value_states)

    def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        owner = self.owner
        heads, dim = key_states.shape[1], key_states.shape[3]
        shape = (owner.slots, heads, owner.capacity, dim)
        keys = torch.zeros(shape, dtype=key_states.dtype, device=key_states.device)
        values = torch.zeros(shape, dtype=value_states.dtype, device=value_states.device)
        if self.keys is not None and self.values is not None:
            used_slots, used_columns = min(self.keys.shape[0], owner.slots), min(self.keys.shape[2], owner.capacity)
            keys[:used_slots, :, :used_columns] = self.keys[:used_slots, :, :used_columns]
            values[:used_slots, :, :used_columns] = self.values[:used_slots, :, :used_columns]
        self.keys, self.values = keys, values
        self.is_initialized = True

    def nbytes(self) -> int:
        if self.keys is None or self.values is None:
            return 0
        return self.keys.numel() * self.keys.element_size() + self.values.numel() * self.values.element_size()


class SlotCache(Cache):
    """The scheduler's KV store: ``layers`` slot buffers, sized by ``reserve`` and written through ``prepare``."""

    def __init__(self, num_layers: int, bytes_per_token: int, device: torch.device) -> None:
        self.owner_layers = [SlotLayer(self) for _ in range(num_layers)]
        super().__init__(layers=list(self.owner_layers))
        self.bytes_per_token = bytes_per_token
        self.device = device  # the model's: where the write positions go
        self.slots = 0  # the buffers' first dimension (grown lazily by ``update``)
        self.capacity = 0  # and their column count
        self.rows = (0, 0)  # the slots this forward runs over
        self.width = 0  # the columns it attends over
        self.write_rows = torch.zeros(0, 1, dtype=torch.long)
        self.write_columns = torch.zeros(0, 1, dtype=torch.long)

    def bytes_for(self, slots: int, columns: int) -> int:
        """What the buffers would take at ``slots`` x ``columns`` (as ``reserve`` would round them)."""
        return _round_slots(slots) * _round_columns(columns) * self.bytes_per_token

    def reserve(self, slots: int, columns: int) -> None:
        """Make room for ``slots`` rows of ``columns`` tokens (at the next ``update``; never shrinks)."""
        self.slots = max(self.slots, _round_slots(slots))
        self.capacity = max(self.capacity, _round_columns(columns))

    def nbytes(self) -> int:
        return sum(layer.nbytes() for layer in self.owner_layers)

    def prepare(self, start: int, columns: torch.Tensor, width: int) -> None:
        """The next forward runs slots ``start .. start + len(columns)``; row b's query q writes its key/value at
        ``columns[b, q]``, and attention reads the first ``width`` columns."""
        batch = columns.shape[0]
        self.rows = (start, start + batch)
        self.width = width
        self.write_rows = torch.arange(start, start + batch, device=self.device).unsqueeze(1).expand_as(columns)
        self.write_columns = columns.to(self.device)

    def copy_in(self, slot: int, keys: list[torch.Tensor], values: list[torch.Tensor], length: int) -> None:
        """Put ``length`` cached tokens (per layer [heads, >= length, dim]) in ``slot``'s first columns."""
        for layer, k, v in zip(self.owner_layers, keys, values, strict=True):
            layer.make_room(k.unsqueeze(0), v.unsqueeze(0))
            assert layer.keys is not None and layer.values is not None
            layer.keys[slot, :, :length] = k[:, :length].to(layer.keys.device, layer.keys.dtype)
            layer.values[slot, :, :length] = v[:, :length].to(layer.values.device, layer.values.dtype)

    def read(self, slot: int, length: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Copies of ``slot``'s first ``length`` columns, per layer [heads, length, dim] (for the prefix cache)."""
        keys = [layer.keys[slot, :, :length].clone() for layer in self.owner_layers if layer.keys is not None]
        values = [layer.values[slot, :, :length].clone() for layer in self.owner_layers if layer.values is not None]
        return keys, values

    def move(self, source: int, target: int, length: int) -> None:
        """Move a row's first ``length`` columns from slot ``source`` to ``target`` (to keep the rows contiguous)."""
        for layer in self.owner_layers:
            if layer.keys is not None and layer.values is not None:
                layer.keys[target, :, :length] = layer.keys[source, :, :length]
                layer.values[target, :, :length] = layer.values[source, :, :length]

    def release(self) -> None:
        """Drop the buffers (the scheduler is idle)."""
        for layer in self.owner_layers:
            layer.keys = layer.values = None
            layer.is_initialized = False
        self.slots = self.capacity = 0

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.width


def mask(lengths_before: list[int], queries: list[int], width: int, dtype: torch.dtype, device: Any) -> torch.Tensor:
    """The additive 4-D mask [batch, 1, Q, width] of a forward whose row b holds ``lengths_before[b]`` cached
    tokens and feeds ``queries[b]`` new ones, right-aligned in Q = max(queries) (so that every row's last query
    is the last: ``logits_to_keep=1``). A real query sees its row's columns up to its own; a padding query (on
    the left) sees only the column it writes, so that nothing it computes is NaN."""
    columns, positions, _ = layout(lengths_before, queries)
    real = _real_queries(queries)
    j = torch.arange(width).view(1, 1, width)
    allowed = torch.where(real.unsqueeze(2), j <= positions.unsqueeze(2), j == columns.unsqueeze(2))
    out = torch.zeros(len(queries), 1, columns.shape[1], width, dtype=dtype)
    out.masked_fill_(~allowed.unsqueeze(1), torch.finfo(dtype).min)
    return out.to(device)


def layout(lengths_before: list[int], queries: list[int]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Write columns and position ids [batch, Q] for ``mask``'s layout, and the width attention reads. Padding
    queries write past their row's end (columns a later token overwrites), at position 0."""
    q = torch.arange(max(queries)).unsqueeze(0)
    cached = torch.tensor(lengths_before).unsqueeze(1)
    new = torch.tensor(queries).unsqueeze(1)
    pad = q.shape[1] - new
    real = _real_queries(queries)
    positions = torch.where(real, cached + q - pad, 0)
    columns = torch.where(real, positions, cached + new + q)
    width = max(c for c in lengths_before) + q.shape[1]
    return columns, positions, width


def _real_queries(queries: list[int]) -> torch.Tensor:
    """[batch, Q]: which queries are real tokens (the last ``queries[b]`` of row b)."""
    q = torch.arange(max(queries)).unsqueeze(0)
    return q >= max(queries) - torch.tensor(queries).unsqueeze(1)


def _round_columns(columns: int) -> int:
    return -(-max(columns, 1) // GROWTH_COLUMNS) * GROWTH_COLUMNS


def _round_slots(slots: int) -> int:
    return 1 << max(slots - 1, 0).bit_length()
